/*
 * test_ids.c — ids.h: u128 helpers, every text encoding (round trips and rejection of
 * malformed input), Tinode names, the direct conversation derivation (vectors from
 * b3sum in direct_conversation_vectors.txt), ClientMessageId and TraceId.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "testsupport.h"

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131 + i * 29 + (i >> 3));
}

/* ---- u128 ------------------------------------------------------------------------- */

static void test_u128_big_endian_round_trip_and_order(void **state) {
  (void)state;
  qim_u128 v = {0x0102030405060708u, 0x090a0b0c0d0e0f10u};
  uint8_t be[16];
  qim_u128_to_be(v, be);
  for (int i = 0; i < 16; i++) assert_int_equal(be[i], i + 1);
  assert_true(qim_u128_eq(qim_u128_from_be(be), v));
  assert_int_equal(qim_u128_cmp((qim_u128){1, 0}, (qim_u128){0, UINT64_MAX}), 1);
  assert_int_equal(qim_u128_cmp((qim_u128){0, 1}, (qim_u128){0, 2}), -1);
  assert_int_equal(qim_u128_cmp(v, v), 0);
  assert_true(qim_u128_is_zero(QIM_U128_ZERO));
}

static void test_u128_random_is_nonzero_and_varies(void **state) {
  (void)state;
  qim_u128 a = qim_u128_random(), b = qim_u128_random();
  assert_false(qim_u128_is_zero(a));
  assert_false(qim_u128_eq(a, b));
}

/* ---- base64url ---------------------------------------------------------------------- */

static void test_b64url_known_values(void **state) {
  (void)state;
  static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  static const char *const want[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
  char out[16];
  for (size_t i = 0; i < 7; i++) {
    int n = qim_b64url_encode((const uint8_t *)in[i], strlen(in[i]), out, sizeof out);
    assert_int_equal(n, (int)strlen(want[i]));
    assert_string_equal(out, want[i]);
  }
  const uint8_t urlsafe[] = {0xfb, 0xff};
  assert_int_equal(qim_b64url_encode(urlsafe, 2, out, sizeof out), 3);
  assert_string_equal(out, "-_8");
}

static void test_b64url_round_trips_every_length(void **state) {
  (void)state;
  uint8_t in[64], back[64];
  char text[100];
  for (size_t n = 0; n <= sizeof in; n++) {
    fill(in, n, (unsigned)n);
    int len = qim_b64url_encode(in, n, text, sizeof text);
    assert_int_equal(len, (int)((n * 4 + 2) / 3));
    assert_null(strchr(text, '='));
    size_t got = 999;
    assert_int_equal(qim_b64url_decode(text, (size_t)len, back, sizeof back, &got), 0);
    assert_int_equal(got, n);
    assert_memory_equal(back, in, n);
  }
}

static void test_b64url_rejects_malformed(void **state) {
  (void)state;
  uint8_t out[32];
  size_t n;
  static const char *const bad[] = {
      "Z",       /* a single leftover character cannot carry a byte */
      "Zg=",     /* padding is not part of base64url */
      "Zg==",    /* nor full padding */
      "Zm9v+A",  /* standard alphabet */
      "Zm9v/A",
      "Zm 9v",   /* whitespace */
      "Zh",      /* unused trailing bits set: not canonical */
      "Zm9",     /* canonical is Zm8 */
      "Zm9vY",   /* 5 chars = 1 leftover */
      "Zm\x80v",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(qim_b64url_decode(bad[i], strlen(bad[i]), out, sizeof out, &n), -EINVAL);
  /* An embedded NUL inside the given length is a bad character, not an end. */
  assert_int_equal(qim_b64url_decode("Zm\0v", 4, out, sizeof out, &n), -EINVAL);
}

static void test_b64url_rejects_every_foreign_byte_at_every_position(void **state) {
  (void)state;
  uint8_t in[12], out[16];
  char text[20];
  fill(in, sizeof in, 7);
  int len = qim_b64url_encode(in, sizeof in, text, sizeof text);
  for (int pos = 0; pos < len; pos++) {
    for (int c = 0; c < 256; c++) {
      int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (ok) continue;
      char m[20];
      memcpy(m, text, (size_t)len);
      m[pos] = (char)c;
      assert_int_equal(qim_b64url_decode(m, (size_t)len, out, sizeof out, NULL), -EINVAL);
    }
  }
}

static void test_b64url_small_buffers_give_enospc(void **state) {
  (void)state;
  const uint8_t in[3] = {1, 2, 3};
  char text[5];
  uint8_t out[2];
  assert_int_equal(qim_b64url_encode(in, 3, text, 4), -ENOSPC); /* no room for the NUL */
  assert_int_equal(qim_b64url_encode(in, 3, text, 5), 4);
  assert_int_equal(qim_b64url_decode(text, 4, out, sizeof out, NULL), -ENOSPC);
}

/* ---- standard base64 ----------------------------------------------------------------- */

static void test_b64std_known_values_and_round_trip(void **state) {
  (void)state;
  char out[64];
  const char *secret = "bobmx5zut85:bob123"; /* PROTOCOL.md's example on the wire */
  assert_int_equal(qim_b64std_encode((const uint8_t *)secret, strlen(secret), out, sizeof out), 24);
  assert_string_equal(out, "Ym9ibXg1enV0ODU6Ym9iMTIz");
  static const char *const in[] = {"f", "fo", "foo"};
  static const char *const want[] = {"Zg==", "Zm8=", "Zm9v"};
  for (size_t i = 0; i < 3; i++) {
    qim_b64std_encode((const uint8_t *)in[i], strlen(in[i]), out, sizeof out);
    assert_string_equal(out, want[i]);
  }
  const uint8_t slashy[] = {0xfb, 0xff};
  qim_b64std_encode(slashy, 2, out, sizeof out);
  assert_string_equal(out, "+/8=");
  uint8_t buf[64], back[64];
  for (size_t n = 0; n <= 40; n++) {
    fill(buf, n, (unsigned)n + 3);
    int len = qim_b64std_encode(buf, n, out, sizeof out);
    assert_int_equal(len % 4, 0);
    size_t got;
    assert_int_equal(qim_b64std_decode(out, (size_t)len, back, sizeof back, &got), 0);
    assert_int_equal(got, n);
    assert_memory_equal(back, buf, n);
  }
}

static void test_b64std_rejects_malformed(void **state) {
  (void)state;
  uint8_t out[32];
  static const char *const bad[] = {
      "Zg",       /* padding is required */
      "Zm8",
      "Zg=",      /* incomplete padding */
      "Zg===",
      "Z===",     /* at most two '=' */
      "====",
      "Zg==Zg==", /* padding only at the end */
      "Zm=v",
      "Zh==",     /* unused bits set */
      "Zm9=",
      "-_8=",     /* url alphabet */
      "Zm9v\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(qim_b64std_decode(bad[i], strlen(bad[i]), out, sizeof out, NULL), -EINVAL);
}

/* ---- hex ----------------------------------------------------------------------------- */

static void test_hex_round_trip_and_case(void **state) {
  (void)state;
  const uint8_t in[] = {0x00, 0x9f, 0xab, 0xff};
  char text[9];
  uint8_t out[4];
  size_t n;
  assert_int_equal(qim_hex_encode(in, 4, text, sizeof text), 8);
  assert_string_equal(text, "009fabff");
  assert_int_equal(qim_hex_decode(text, 8, out, sizeof out, &n), 0);
  assert_int_equal(n, 4);
  assert_memory_equal(out, in, 4);
  assert_int_equal(qim_hex_decode("009FABFF", 8, out, sizeof out, &n), 0);
  assert_memory_equal(out, in, 4);
  assert_int_equal(qim_hex_encode(in, 4, text, 8), -ENOSPC);
}

static void test_hex_rejects_malformed(void **state) {
  (void)state;
  uint8_t out[8];
  assert_int_equal(qim_hex_decode("abc", 3, out, sizeof out, NULL), -EINVAL);
  assert_int_equal(qim_hex_decode("0g", 2, out, sizeof out, NULL), -EINVAL);
  assert_int_equal(qim_hex_decode(" 0", 2, out, sizeof out, NULL), -EINVAL);
  assert_int_equal(qim_hex_decode("0x12", 4, out, sizeof out, NULL), -EINVAL);
  assert_int_equal(qim_hex_decode("0011", 4, out, 1, NULL), -ENOSPC);
}

/* ---- decimal ------------------------------------------------------------------------- */

static void test_u64_format_and_parse_extremes(void **state) {
  (void)state;
  char text[21];
  uint64_t v;
  assert_int_equal(qim_u64_format(0, text, sizeof text), 1);
  assert_string_equal(text, "0");
  assert_int_equal(qim_u64_format(UINT64_MAX, text, sizeof text), 20);
  assert_string_equal(text, "18446744073709551615");
  assert_int_equal(qim_u64_format(UINT64_MAX, text, 20), -ENOSPC);
  assert_int_equal(qim_u64_parse("18446744073709551615", 20, &v), 0);
  assert_true(v == UINT64_MAX);
  assert_int_equal(qim_u64_parse("0", 1, &v), 0);
  assert_true(v == 0);
  assert_int_equal(qim_u64_parse("1099511627776", 13, &v), 0);
  assert_true(v == (UINT64_C(1) << 40));
  /* Only the given length counts: "12" of "123". */
  assert_int_equal(qim_u64_parse("123", 2, &v), 0);
  assert_true(v == 12);
}

static void test_u64_parse_rejects_non_canonical(void **state) {
  (void)state;
  uint64_t v = 77;
  static const char *const bad[] = {"", "00", "01", "-1", "+1", " 1", "1 ", "1a", "0x10", "1.0",
                                    "18446744073709551616", "99999999999999999999", "100000000000000000000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(qim_u64_parse(bad[i], strlen(bad[i]), &v), -EINVAL);
  assert_true(v == 77); /* untouched on failure */
}

/* ---- names --------------------------------------------------------------------------- */

static void test_user_and_group_names_round_trip(void **state) {
  (void)state;
  qim_user_id u = {{0x0123456789abcdefu, 0xfedcba9876543210u}}, u2;
  qim_group_id g = {{42, 7}}, g2;
  char name[QIM_TOPIC_NAME_CAP];
  assert_int_equal(qim_user_id_format(u, name, sizeof name), QIM_TOPIC_NAME_LEN);
  assert_memory_equal(name, "usr", 3);
  assert_int_equal(strlen(name), 25);
  assert_int_equal(qim_user_id_parse(name, strlen(name), &u2), 0);
  assert_true(qim_u128_eq(u.v, u2.v));
  assert_int_equal(qim_group_id_format(g, name, sizeof name), QIM_TOPIC_NAME_LEN);
  assert_memory_equal(name, "grp", 3);
  assert_int_equal(qim_group_id_parse(name, strlen(name), &g2), 0);
  assert_true(qim_u128_eq(g.v, g2.v));
  assert_int_equal(qim_user_id_format(u, name, QIM_TOPIC_NAME_LEN), -ENOSPC);
  qim_user_id zero = {QIM_U128_ZERO};
  qim_user_id_format(zero, name, sizeof name);
  assert_string_equal(name, "usrAAAAAAAAAAAAAAAAAAAAAA");
}

static void test_names_reject_wrong_prefix_length_and_bits(void **state) {
  (void)state;
  qim_user_id u;
  qim_group_id g;
  const char *ok = "usrAAAAAAAAAAAAAAAAAAAAAQ"; /* last char carries 2 data bits: 'Q' = 010000 */
  assert_int_equal(qim_user_id_parse(ok, strlen(ok), &u), 0);
  assert_true(u.v.hi == 0 && u.v.lo == 1);
  static const char *const bad[] = {
      "grpAAAAAAAAAAAAAAAAAAAAAQ", /* group name as user */
      "UsrAAAAAAAAAAAAAAAAAAAAAQ",
      "usrAAAAAAAAAAAAAAAAAAAAA",  /* 21 chars */
      "usrAAAAAAAAAAAAAAAAAAAAAQA",
      "usrAAAAAAAAAAAAAAAAAAAAAB", /* trailing bits set */
      "usrAAAAAAAAAAAAAAAAAAAA=Q",
      "usr2il9suCbuko",            /* Tinode's 8-byte ids are not qim ids */
      "me",
      "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(qim_user_id_parse(bad[i], strlen(bad[i]), &u), -EINVAL);
  assert_int_equal(qim_group_id_parse(ok, strlen(ok), &g), -EINVAL);
  char name[QIM_TOPIC_NAME_CAP];
  qim_u128 v;
  assert_int_equal(qim_u128_name_format("p2p", (qim_u128){1, 2}, name, sizeof name), QIM_TOPIC_NAME_LEN);
  assert_int_equal(qim_u128_name_parse("p2p", name, strlen(name), &v), 0);
  assert_true(v.hi == 1 && v.lo == 2);
}

/* ---- direct conversations ------------------------------------------------------------- */

static qim_u128 hex_u128(const char *hex) {
  uint8_t b[16];
  size_t n = 0;
  assert_int_equal(qim_hex_decode(hex, 32, b, sizeof b, &n), 0);
  assert_int_equal(n, 16);
  return qim_u128_from_be(b);
}

static void test_direct_conversation_matches_b3sum_vectors(void **state) {
  (void)state;
  const char *src = getenv("QIM_SRC");
  assert_non_null(src);
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/unit/core/direct_conversation_vectors.txt", src);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[512], t[33], lo[33], hi[33], want[33];
  int checked = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    assert_int_equal(sscanf(line, "%32s %32s %32s %32s", t, lo, hi, want), 4);
    qim_tenant_id tenant = {hex_u128(t)};
    qim_user_id a = {hex_u128(lo)}, b = {hex_u128(hi)};
    qim_u128 expect = hex_u128(want);
    assert_true(qim_u128_eq(qim_conversation_id_direct(tenant, a, b).v, expect));
    assert_true(qim_u128_eq(qim_conversation_id_direct(tenant, b, a).v, expect));
    checked++;
  }
  fclose(f);
  assert_int_equal(checked, 3);
}

static void test_direct_conversation_is_symmetric_and_tenant_scoped(void **state) {
  (void)state;
  qim_tenant_id t1 = {{0, 1}}, t2 = {{0, 2}};
  qim_user_id a = {{5, 6}}, b = {{1, 9}}, c = {{5, 7}};
  qim_conversation_id ab = qim_conversation_id_direct(t1, a, b);
  assert_true(qim_u128_eq(ab.v, qim_conversation_id_direct(t1, b, a).v));
  assert_false(qim_u128_eq(ab.v, qim_conversation_id_direct(t2, a, b).v));
  assert_false(qim_u128_eq(ab.v, qim_conversation_id_direct(t1, a, c).v));
  assert_false(qim_u128_is_zero(ab.v));
}

/* ---- client message ids and traces ---------------------------------------------------- */

static void test_client_message_id_zero_is_rejected(void **state) {
  (void)state;
  uint8_t zero[16] = {0}, one[16] = {0};
  one[15] = 1;
  qim_client_message_id id;
  memset(&id, 0xAA, sizeof id);
  assert_int_equal(qim_client_message_id_make(zero, &id), QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  assert_int_equal(id.b[0], 0xAA); /* untouched */
  assert_int_equal(qim_client_message_id_make(one, &id), 0);
  assert_memory_equal(id.b, one, 16);
  assert_true(qim_client_message_id_is_valid(&id));
  qim_client_message_id z = {{0}};
  assert_false(qim_client_message_id_is_valid(&z));
}

static void test_trace_ids_are_random_and_nonzero(void **state) {
  (void)state;
  static const uint8_t zero[16];
  qim_trace_id a = qim_trace_id_new(), b = qim_trace_id_new();
  assert_memory_not_equal(a.b, zero, 16);
  assert_memory_not_equal(a.b, b.b, 16);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_u128_big_endian_round_trip_and_order),
      cmocka_unit_test(test_u128_random_is_nonzero_and_varies),
      cmocka_unit_test(test_b64url_known_values),
      cmocka_unit_test(test_b64url_round_trips_every_length),
      cmocka_unit_test(test_b64url_rejects_malformed),
      cmocka_unit_test(test_b64url_rejects_every_foreign_byte_at_every_position),
      cmocka_unit_test(test_b64url_small_buffers_give_enospc),
      cmocka_unit_test(test_b64std_known_values_and_round_trip),
      cmocka_unit_test(test_b64std_rejects_malformed),
      cmocka_unit_test(test_hex_round_trip_and_case),
      cmocka_unit_test(test_hex_rejects_malformed),
      cmocka_unit_test(test_u64_format_and_parse_extremes),
      cmocka_unit_test(test_u64_parse_rejects_non_canonical),
      cmocka_unit_test(test_user_and_group_names_round_trip),
      cmocka_unit_test(test_names_reject_wrong_prefix_length_and_bits),
      cmocka_unit_test(test_direct_conversation_matches_b3sum_vectors),
      cmocka_unit_test(test_direct_conversation_is_symmetric_and_tenant_scoped),
      cmocka_unit_test(test_client_message_id_zero_is_rejected),
      cmocka_unit_test(test_trace_ids_are_random_and_nonzero),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
