#!/usr/bin/env python3
# seeds.py — writes the hand-made seeds of tests/fuzz/corpus/{http,ws,proto}/ (run once;
# the outputs are checked in, nothing in the build runs this). Realistic inputs first —
# the SDK's upgrade request and frames as captured in ../shared/PROTOCOL.md §2, §12 — then
# the refusals each parser must reach: wrong method, missing or repeated headers, bad
# keys, oversized headers and bodies, unmasked, fragmented, reserved-bit and bad-UTF-8
# frames, malformed JSON of every kind.
#   python3 tests/fuzz/gen/seeds.py tests/fuzz/corpus
import json, os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus"

def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

# ---- http --------------------------------------------------------------------------------
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
def req(method="GET", target="/v0/channels?apikey=AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K",
        version="HTTP/1.1", headers=None, body=b""):
    if headers is None:
        headers = [("Host", "127.0.0.1:6060"), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
                   ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", KEY),
                   ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")]
    head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode() + body

sdk = [("Host", "127.0.0.1:6060"), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
       ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", KEY),
       ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")]
put("http", "sdk_upgrade.txt", req())
# The upgrade followed by the SDK's first frame (what follows the request is not HTTP).
hi = b'{"hi":{"id":"106186","ver":"0.25.3","ua":"capture (undefined); tinodejs/0.25.3","lang":"xx","platf":"web"}}'
def frame(op, payload, fin=True, mask=b"\x11\x22\x33\x44", masked=True, rsv=0):
    b0 = (0x80 if fin else 0) | rsv | op
    n = len(payload)
    mbit = 0x80 if masked else 0
    if n < 126: h = bytes([b0, mbit | n])
    elif n < 65536: h = bytes([b0, mbit | 126]) + struct.pack(">H", n)
    else: h = bytes([b0, mbit | 127]) + struct.pack(">Q", n)
    if not masked: return h + payload
    return h + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
put("http", "sdk_upgrade_then_frame.bin", req() + frame(1, hi))
put("http", "apikey_header.txt", req(target="/v0/channels",
    headers=sdk + [("X-Tinode-APIKey", "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K"), ("Origin", "http://localhost"),
                   ("User-Agent", "qim-cli/0.1"), ("X-Forwarded-For", "10.0.0.1, 10.0.0.2")]))
put("http", "apikey_percent.txt", req(target="/v0/channels?x=1&apikey=AQ%2BE+A%3D&y"))
put("http", "post_405.txt", req(method="POST", headers=sdk + [("Content-Length", "4")], body=b"abcd"))
put("http", "http10_400.txt", req(version="HTTP/1.0"))
put("http", "no_upgrade_400.txt", req(headers=[h for h in sdk if h[0] != "Upgrade"]))
put("http", "version_8_426.txt", req(headers=[h if h[0] != "Sec-WebSocket-Version" else (h[0], "8") for h in sdk]))
put("http", "repeated_key_400.txt", req(headers=sdk + [("Sec-WebSocket-Key", KEY)]))
put("http", "bad_key_400.txt", req(headers=[h if h[0] != "Sec-WebSocket-Key" else (h[0], "dGhlIHNhbXBsZSBub25jZR==") for h in sdk]))
put("http", "connection_list.txt", req(headers=[h if h[0] != "Connection" else (h[0], "keep-alive, Upgrade") for h in sdk]))
put("http", "admin_get.txt", req(target="/v0/admin/stats?pretty=1", headers=[("Host", "localhost"), ("Authorization", "Bearer abc")]))
put("http", "post_json_body.txt", req(method="POST", target="/v0/admin/users",
    headers=[("Host", "localhost"), ("Content-Type", "application/json"), ("Content-Length", "27")],
    body=b'{"login":"bob","pass":"x1"}'))
put("http", "chunked_body.txt", req(method="POST", target="/v0/admin/users",
    headers=[("Host", "localhost"), ("Transfer-Encoding", "chunked")],
    body=b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n"))
put("http", "body_too_big_413.txt", req(method="POST", headers=[("Host", "h"), ("Content-Length", "999999999")]))
put("http", "header_too_big_431.txt", req(headers=sdk + [("X-Pad", "a" * 9000)]))
put("http", "folded_header.txt", b"GET /v0/channels HTTP/1.1\r\nHost: h\r\nUpgrade: web\r\n socket\r\nConnection: Upgrade\r\n\r\n")
put("http", "incomplete.txt", b"GET /v0/channels HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgr")
put("http", "garbage_400.txt", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
put("http", "absolute_uri.txt", req(target="http://127.0.0.1:6060/v0/channels?apikey=k"))
put("http", "connect_method.txt", b"CONNECT 127.0.0.1:6060 HTTP/1.1\r\nHost: 127.0.0.1:6060\r\n\r\n")
put("http", "pipelined.txt", req(method="GET", target="/a", headers=[("Host", "h")]) + req(target="/b"))

# ---- ws ----------------------------------------------------------------------------------
sdk_frames = [
    hi,
    b'{"login":{"id":"106188","scheme":"basic","secret":"Ym9ibXg1enV0ODU6Ym9iMTIz"}}',
    b'{"sub":{"id":"106190","topic":"me","get":{"what":"sub desc"}}}',
    b'{"pub":{"id":"106193","topic":"grpF6JOFv9koaE","noecho":true,"content":"hello"}}',
    b'{"note":{"topic":"grpF6JOFv9koaE","what":"read","seq":5}}',
]
put("ws", "sdk_session.bin", b"".join(frame(1, f, mask=bytes([i, 0x5a, 0xa5, i ^ 0xff])) for i, f in enumerate(sdk_frames)))
put("ws", "probe.bin", frame(1, b"1"))
put("ws", "ping_pong.bin", frame(9, b"ping!") + frame(10, b"") + frame(1, b'{"hi":{}}'))
put("ws", "close_normal.bin", frame(8, struct.pack(">H", 1000) + "bye ✓".encode()) + frame(1, b"after"))
put("ws", "close_empty.bin", frame(8, b""))
put("ws", "close_bad_code.bin", frame(8, struct.pack(">H", 1005)))
put("ws", "close_one_byte.bin", frame(8, b"\x03"))
put("ws", "fragmented_text.bin", frame(1, "héllo ".encode()[:2], fin=False) + frame(9, b"mid")
    + frame(0, "héllo ".encode()[2:], fin=False) + frame(0, b"world"))
put("ws", "binary.bin", frame(2, bytes(range(256))))
put("ws", "len16.bin", frame(1, b"x" * 300))
put("ws", "len64_claim.bin", bytes([0x81, 0xff]) + struct.pack(">Q", 1 << 40) + b"\0\0\0\0abcd")
put("ws", "len64_topbit.bin", bytes([0x81, 0xff]) + struct.pack(">Q", 1 << 63) + b"\0\0\0\0")
put("ws", "unmasked.bin", frame(1, b"hello", masked=False))
put("ws", "rsv1.bin", frame(1, b"hello", rsv=0x40))
put("ws", "bad_opcode.bin", frame(3, b"x"))
put("ws", "cont_without_start.bin", frame(0, b"x"))
put("ws", "text_in_fragmented.bin", frame(1, b"a", fin=False) + frame(1, b"b"))
put("ws", "control_fragmented.bin", frame(9, b"a", fin=False))
put("ws", "control_too_long.bin", frame(9, b"p" * 126))
put("ws", "bad_utf8.bin", frame(1, b"\xc0\xaf"))
put("ws", "surrogate_utf8.bin", frame(1, b"\xed\xa0\x80"))
put("ws", "utf8_split_fragments.bin", frame(1, "€".encode()[:1], fin=False) + frame(0, "€".encode()[1:]))
put("ws", "big_message.bin", frame(1, b"{" + b'"a":1,' * 60 + b'"b":2}'))

# ---- proto (the frame types the checked-in seeds do not cover yet) -------------------------
P = {
    "acc_update_token.json": {"acc": {"id": "7", "user": "usrAAECAwQFBgcICQoLDA0ODw", "token": "AAEC", "scheme": "basic", "secret": "bmV3OnBhc3M=", "tmpscheme": "code", "tmpsecret": "MTIz", "status": "ok", "authlevel": "auth"}},
    "acc_anon.json": {"acc": {"id": "8", "user": "new", "scheme": "anonymous", "login": True, "desc": {"public": None, "trusted": {"verified": True}}}},
    "login_cred.json": {"login": {"id": "9", "scheme": "basic", "secret": "Ym9iOmJvYjEyMw==", "cred": [{"meth": "email", "resp": "123456", "params": {"x": 1}}]}},
    "login_reset.json": {"login": {"id": "10", "scheme": "reset", "secret": "YmFzaWM6ZW1haWw6Ym9iQGV4YW1wbGUuY29t"}},
    "sub_bkg_ims.json": {"sub": {"id": "11", "topic": "usrAAECAwQFBgcICQoLDA0ODw", "bkg": True, "get": {"what": "desc sub data del tags cred aux", "desc": {"ims": "2024-01-02T03:04:05.678Z"}, "sub": {"ims": "2024-01-02T03:04:05Z", "limit": 5, "user": "usrX"}, "data": {"since": 1, "limit": 24}, "del": {"since": 2}}}},
    "get_desc_sub.json": {"get": {"id": "12", "topic": "grpF6JOFv9koaE", "what": "desc sub", "desc": {"ims": "2015-10-06T18:07:29.841+02:00"}, "sub": {"topic": "grpX", "limit": 3}}},
    "get_unknown_what.json": {"get": {"id": "13", "topic": "me", "what": "bogus"}},
    "set_tags_cred_aux.json": {"set": {"id": "14", "topic": "me", "tags": ["email:bob@example.com", "work"], "cred": {"meth": "tel", "val": "+15551234567"}, "aux": {"pins": ["grpA"]}}},
    "set_defacs.json": {"set": {"id": "15", "topic": "grpF6JOFv9koaE", "desc": {"defacs": {"auth": "JRWP", "anon": "N"}, "public": "␡"}}},
    "set_sub_mode_delta.json": {"set": {"id": "16", "topic": "grpF6JOFv9koaE", "sub": {"user": "usrAAECAwQFBgcICQoLDA0ODw", "mode": "+AS-D"}}},
    "del_topic.json": {"del": {"id": "17", "topic": "grpF6JOFv9koaE", "what": "topic", "hard": True}},
    "del_sub.json": {"del": {"id": "18", "topic": "grpF6JOFv9koaE", "what": "sub", "user": "usrAAECAwQFBgcICQoLDA0ODw"}},
    "del_user.json": {"del": {"id": "19", "what": "user", "hard": True}},
    "del_cred.json": {"del": {"id": "20", "what": "cred", "cred": {"meth": "email", "val": "bob@example.com"}}},
    "del_many_ranges.json": {"del": {"id": "21", "topic": "usrX", "delseq": [{"low": i, "hi": i + 1} for i in range(1, 40, 2)]}},
    "note_data.json": {"note": {"topic": "grpF6JOFv9koaE", "what": "data", "payload": {"mime": "text/plain", "data": "x"}}},
    "note_call.json": {"note": {"topic": "usrX", "what": "call", "seq": 7, "event": "invite", "payload": {"sdp": "v=0"}}},
    "note_kpa.json": {"note": {"topic": "usrX", "what": "kpa"}},
    "note_bad_seq.json": {"note": {"topic": "grpF6JOFv9koaE", "what": "kp", "seq": 3}},
    "extra_obo.json": {"pub": {"id": "22", "topic": "sys", "content": {"txt": "report"}}, "extra": {"obo": "usrAAECAwQFBgcICQoLDA0ODw", "authlevel": "root", "attachments": []}},
    "sync_empty.json": {"sync": {"id": "23"}},
    "leave_plain.json": {"leave": {"id": "24", "topic": "me"}},
    "pub_bad_cmid.json": {"pub": {"id": "25", "topic": "grpX", "content": 1, "cmid": "AAAAAAAAAAAAAAAAAAAAAA"}},
    "null_fields.json": {"hi": {"id": None, "ver": "0.25", "ua": None, "bkg": None}},
    "wrong_type_seq.json": {"note": {"topic": "grpX", "what": "read", "seq": "5"}},
    "negative_limit.json": {"get": {"id": "26", "topic": "grpX", "what": "data", "data": {"limit": -1}}},
    "huge_int.json": {"get": {"id": "27", "topic": "grpX", "what": "data", "data": {"since": 2147483648}}},
    "unknown_key.json": {"bogus": {"id": "28"}},
    "long_id.json": {"leave": {"id": "x" * 65, "topic": "me"}},
}
for name, obj in P.items():
    put("proto", name, json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
put("proto", "real_number.json", '{"get":{"id":"29","topic":"grpX","what":"data","data":{"limit":1.5}}}')
put("proto", "duplicate_key.json", '{"hi":{"id":"1","ver":"0.25","ver":"0.26"}}')
put("proto", "deep.json", '{"pub":{"id":"30","topic":"grpX","content":' + "[" * 40 + "]" * 40 + "}}")
put("proto", "bad_utf8.json", b'{"hi":{"id":"1","ver":"0.25","ua":"\xff\xfe"}}')
put("proto", "nul_escape.json", '{"hi":{"id":"1\\u0000","ver":"0.25"}}')
put("proto", "probe.json", "1")
put("proto", "array.json", '[{"hi":{"ver":"0.25"}}]')
put("proto", "trailing.json", '{"hi":{"ver":"0.25"}} x')
put("proto", "empty.json", "")
put("proto", "payload_not_object.json", '{"sub":"me"}')
