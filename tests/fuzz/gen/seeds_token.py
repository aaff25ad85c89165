#!/usr/bin/env python3
# seeds_token.py — writes tests/fuzz/corpus/token/: login tokens as src/gateway/auth.c
# defines them (81 bytes: version 1, tenant, user, token_epoch, expires_ms, then
# HMAC-SHA256 under "qim.token.v1\0" of those 49 bytes), in standard base64 as clients send
# them, signed with fuzz_token.c's key (bytes 0x01..0x20). Genuine ones for tenant 1
# (fuzz_token.c's tenant) that expire after its clock, and expired, other-tenant, tampered,
# other-key, short, long and non-base64 ones. Run once:
#   python3 tests/fuzz/gen/seeds_token.py tests/fuzz/corpus/token
import base64, hashlib, hmac, os, struct, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
KEY = bytes(range(1, 33))
NOW = 1_800_000_000_000  # fuzz_token.c's clock

def raw(tenant, user, epoch, expires, version=1, key=KEY):
    b = struct.pack(">B", version) + tenant.to_bytes(16, "big") + user.to_bytes(16, "big")
    b += struct.pack(">QQ", epoch, expires)
    return b + hmac.new(key, b"qim.token.v1\0" + b, hashlib.sha256).digest()

def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(base64.b64encode(data) if isinstance(data, bytes) else data.encode())

put("valid.txt", raw(1, 7, 0, NOW + 14 * 86400000))
put("valid_epoch9.txt", raw(1, 2**128 - 1, 9, 2**64 - 1))
put("expired.txt", raw(1, 7, 0, NOW))
put("other_tenant.txt", raw(2, 7, 0, NOW + 1000))
put("other_key.txt", raw(1, 7, 0, NOW + 1000, key=bytes(32)))
put("version2.txt", raw(1, 7, 0, NOW + 1000, version=2))
t = bytearray(raw(1, 7, 0, NOW + 1000)); t[40] ^= 1
put("tampered.txt", bytes(t))
put("short.txt", raw(1, 7, 0, NOW + 1000)[:80])
put("long.txt", raw(1, 7, 0, NOW + 1000) + b"\0")
put("not_base64.txt", "!!!!")
put("empty.txt", "")
