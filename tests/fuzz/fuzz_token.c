/*
 * fuzz_token.c — libFuzzer harness for login tokens (src/gateway/auth.c): the secret of a
 * {login scheme:"token"}, standard base64 of 81 bytes (docs/gateway.md). The input is the
 * token text as a client sends it.
 *
 * What must hold:
 *   - a token is accepted exactly when it has 81 bytes, version 1, the MAC the key gives for
 *     its first 49 bytes (checked against a fresh seal, so the fuzzer cannot forge one by
 *     luck), the expected tenant and an expiry after the clock — and then its fields are
 *     the bytes it carries;
 *   - a token sealed here from fields drawn from the input opens back to those fields; with
 *     any one bit changed, for another tenant, or at its expiry instant, it is refused.
 * Seeds: tests/fuzz/corpus/token/ (gen/seeds_token.py, signed with the key below).
 */
#include <string.h>

#include "fuzz.h"
#include "gateway/gateway_int.h"
#include "qim/ids.h"

/* The seeds are signed with this key (bytes 0x01..0x20) for tenant 1 at this clock. */
static uint8_t kKey[GW_TOKEN_KEY];
static const uint64_t kNow = 1800000000000ull;
static const qim_tenant_id kTenant = {{0, 1}};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init();
  for (int i = 0; i < GW_TOKEN_KEY; i++) kKey[i] = (uint8_t)(i + 1);
  return 0;
}

static uint64_t be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

/* What the open must decide, computed independently of it. */
static bool should_open(const uint8_t *raw, size_t n, qim_tenant_id tenant, uint64_t now) {
  if (n != GW_TOKEN_RAW || raw[0] != 1) return false;
  uint8_t copy[GW_TOKEN_RAW];
  memcpy(copy, raw, n);
  qim__gw_token_seal(kKey, copy);
  return memcmp(copy + 49, raw + 49, 32) == 0 && qim_u128_eq(qim_u128_from_be(raw + 1), tenant.v) &&
         be64(raw + 41) > now;
}

static void check_open(const uint8_t *raw, size_t n, qim_tenant_id tenant, uint64_t now) {
  qim_user_id user = {{7, 7}};
  uint64_t epoch = 7, exp = 7;
  int rc = qim__gw_token_open(kKey, now, raw, n, tenant, &user, &epoch, &exp);
  FUZZ_CHECK(rc == 0 || rc == -EACCES);
  FUZZ_CHECK((rc == 0) == should_open(raw, n, tenant, now));
  if (rc == 0) {
    FUZZ_CHECK(qim_u128_eq(user.v, qim_u128_from_be(raw + 17)));
    FUZZ_CHECK(epoch == be64(raw + 33) && exp == be64(raw + 41));
  }
}

/* Seals fields drawn from the input and checks what must and must not open. */
static void round_trip(const uint8_t *data, size_t size) {
  uint8_t raw[GW_TOKEN_RAW] = {0};
  memcpy(raw, data, size < 49 ? size : 49);
  raw[0] = 1;
  qim__gw_token_seal(kKey, raw);
  qim_tenant_id t = {qim_u128_from_be(raw + 1)};
  uint64_t exp = be64(raw + 41);
  qim_user_id user;
  uint64_t epoch, e;
  if (exp > 0) {
    FUZZ_CHECK(qim__gw_token_open(kKey, exp - 1, raw, sizeof raw, t, &user, &epoch, &e) == 0);
    FUZZ_CHECK(qim_u128_eq(user.v, qim_u128_from_be(raw + 17)) && epoch == be64(raw + 33) &&
               e == exp);
  }
  FUZZ_CHECK(qim__gw_token_open(kKey, exp, raw, sizeof raw, t, &user, &epoch, &e) == -EACCES);
  qim_tenant_id other = t;
  other.v.lo ^= 1;
  FUZZ_CHECK(qim__gw_token_open(kKey, 0, raw, sizeof raw, other, &user, &epoch, &e) == -EACCES);
  size_t bit =
      size ? (data[size - 1] | (size > 1 ? data[size - 2] << 8 : 0)) % (8 * sizeof raw) : 0;
  raw[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  FUZZ_CHECK(qim__gw_token_open(kKey, 0, raw, sizeof raw, t, &user, &epoch, &e) == -EACCES);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t raw[128];
  size_t n = 0;
  if (qim_b64std_decode((const char *)data, size, raw, sizeof raw, &n) == 0) {
    check_open(raw, n, kTenant, kNow);
    check_open(raw, n, kTenant, 0);
  }
  check_open(data, size, kTenant, kNow); /* the raw bytes, as if already decoded */
  round_trip(data, size);
  return 0;
}
