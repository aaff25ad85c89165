#!/usr/bin/env python3
# seeds_cursor.py — writes tests/fuzz/corpus/cursor/: mailbox cursor tokens as
# src/mailbox/cursor.c defines them (base64url without padding of a 64-byte body and its
# HMAC-SHA256 under "qim.mailbox-cursor.v1\0"), signed with fuzz_cursor.c's key (bytes
# 0x01..0x20). Genuine tokens for users 1..3 of tenant 1 on their own shard and lane
# (4 shards x 2 lanes: user 1 -> shard 3 lane 1, user 2 -> 3/1, user 3 -> 2/0, from
# qim_shard_of_user), one on another lane, and tampered or malformed ones. Run once:
#   python3 tests/fuzz/gen/seeds_cursor.py tests/fuzz/corpus/cursor
import base64, hashlib, hmac, os, struct, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
KEY = bytes(range(1, 33))

def body(tenant, user, device, shard, lane, epoch, seq, version=1):
    b = struct.pack(">B", version) + tenant.to_bytes(16, "big") + user.to_bytes(16, "big")
    return b + device.to_bytes(16, "big") + struct.pack(">IBHQ", shard, lane, epoch, seq)

def token(b, key=KEY):
    mac = hmac.new(key, b"qim.mailbox-cursor.v1\0" + b, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(b + mac).rstrip(b"=")

def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

put("user1_seq0.txt", token(body(1, 1, 7, 3, 1, 1, 0)))
put("user2_epoch3.txt", token(body(1, 2, 8, 3, 1, 3, (3 << 40) | 42)))
put("user3_big_seq.txt", token(body(1, 3, 9, 2, 0, 65535, 2**64 - 1)))
put("wrong_lane.txt", token(body(1, 1, 7, 3, 0, 1, 5)))
put("other_key.txt", token(body(1, 1, 7, 3, 1, 1, 5), key=b"\xff" * 32))
t = bytearray(token(body(1, 1, 7, 3, 1, 1, 5)))
t[100] = ord("A") if t[100] != ord("A") else ord("B")
put("tampered_mac.txt", bytes(t))
put("version2.txt", token(body(1, 1, 7, 3, 1, 1, 5, version=2)))
put("padded.txt", base64.urlsafe_b64encode(b"\x01" * 95))
put("standard_alphabet.txt", token(body(1, 1, 7, 3, 1, 1, 5)).replace(b"-", b"+").replace(b"_", b"/")[:127] + b"+")
put("short.txt", token(body(1, 1, 7, 3, 1, 1, 5))[:127])
put("empty.txt", b"")
