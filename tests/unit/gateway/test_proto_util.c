/*
 * test_proto_util.c — the pure helpers of the Tinode codec: access-mode strings and
 * deltas, timestamps, hi.ver parsing, the cmid spelling, {ctrl} texts and names.
 */
#include <errno.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "testsupport.h"

static uint32_t parse_ok(const char *s) {
  uint32_t m = 0xDEAD;
  assert_int_equal(qim_proto_mode_parse(s, strlen(s), &m), 0);
  return m;
}

static void assert_format(uint32_t mode, const char *want) {
  char out[QIM_MODE_STR_CAP];
  assert_int_equal(qim_proto_mode_format(mode, out, sizeof out), (int)strlen(want));
  assert_string_equal(out, want);
}

static void test_mode_parse_reads_letters_in_any_order_and_case(void **state) {
  (void)state;
  assert_int_equal(parse_ok("JRWPASDO"), 0xFF);
  assert_int_equal(parse_ok("ODSAPWRJ"), 0xFF);
  assert_int_equal(parse_ok("jrwps"),
                   QIM_MODE_JOIN | QIM_MODE_READ | QIM_MODE_WRITE | QIM_MODE_PRES | QIM_MODE_SHARE);
  assert_int_equal(parse_ok("JJR"), QIM_MODE_JOIN | QIM_MODE_READ);
  assert_int_equal(parse_ok("N"), QIM_MODE_NONE);
  assert_int_equal(parse_ok("n"), QIM_MODE_NONE);
  assert_int_equal(parse_ok(""), QIM_MODE_UNSET);
}

static void test_mode_parse_rejects_unknown_letters_and_combined_n(void **state) {
  (void)state;
  const char *bad[] = {"X", "JRX", "NJ", "JN", "NN", " J", "J ", "+J", "-", "JR\x80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint32_t m = 7;
    assert_int_equal(qim_proto_mode_parse(bad[i], strlen(bad[i]), &m), -EINVAL);
    assert_int_equal(m, 7);
  }
}

static void test_mode_format_is_canonical(void **state) {
  (void)state;
  assert_format(0xFF, "JRWPASDO");
  assert_format(QIM_MODE_NONE, "N");
  assert_format(QIM_MODE_UNSET, "");
  assert_format(QIM_MODE_OWNER | QIM_MODE_JOIN, "JO");
  assert_format(QIM_MODE_JOIN | QIM_MODE_PRES | QIM_MODE_SHARE, "JPS");
  char out[QIM_MODE_STR_CAP];
  assert_int_equal(qim_proto_mode_format(0x200, out, sizeof out), -EINVAL);
  assert_int_equal(qim_proto_mode_format(QIM_MODE_UNSET | 1, out, sizeof out), -EINVAL);
  assert_int_equal(qim_proto_mode_format(0xFF, out, 8), -ENOSPC);
  assert_int_equal(qim_proto_mode_format(0xFF, out, 9), 8);
}

static void test_mode_every_value_round_trips(void **state) {
  (void)state;
  for (uint32_t m = 0; m <= 0xFF; m++) {
    char s[QIM_MODE_STR_CAP];
    int n = qim_proto_mode_format(m, s, sizeof s);
    assert_true(n > 0);
    uint32_t back;
    assert_int_equal(qim_proto_mode_parse(s, (size_t)n, &back), 0);
    assert_int_equal(back, m);
  }
}

static void assert_delta(uint32_t before, uint32_t after, const char *want) {
  char out[QIM_MODE_STR_CAP];
  assert_int_equal(qim_proto_mode_delta(before, after, out, sizeof out), (int)strlen(want));
  assert_string_equal(out, want);
}

static void test_mode_delta_writes_added_then_removed(void **state) {
  (void)state;
  /* Tinode's own example: JRPAS -> JRWS gives "+W-PA". */
  assert_delta(parse_ok("JRPAS"), parse_ok("JRWS"), "+W-PA");
  assert_delta(parse_ok("JRWPD"), parse_ok("JRWPAS"), "+AS-D");
  assert_delta(parse_ok("JRWPS"), parse_ok("JRWPS"), "");
  assert_delta(QIM_MODE_UNSET, parse_ok("JRWPS"), "+JRWPS");
  assert_delta(0xFF, QIM_MODE_NONE, "-JRWPASDO");
  assert_delta(0x0F, 0xF0, "+ASDO-JRWP");
  char out[QIM_MODE_STR_CAP];
  assert_int_equal(qim_proto_mode_delta(0x0F, 0xF0, out, 5), -ENOSPC);
}

static uint32_t apply_ok(const char *s, uint32_t base) {
  uint32_t m = 0xDEAD;
  assert_int_equal(qim_proto_mode_apply(s, strlen(s), base, &m), 0);
  return m;
}

static void test_mode_apply_handles_deltas_and_absolute_strings(void **state) {
  (void)state;
  assert_int_equal(apply_ok("+AS-D", parse_ok("JRWPD")), parse_ok("JRWPAS"));
  assert_int_equal(apply_ok("-D+AS", parse_ok("JRWPD")), parse_ok("JRWPAS"));
  assert_int_equal(apply_ok("-PR+W", parse_ok("JPRA")), parse_ok("JWA"));
  assert_int_equal(apply_ok("+s", parse_ok("J")), parse_ok("JS"));
  assert_int_equal(apply_ok("+J", QIM_MODE_UNSET), QIM_MODE_JOIN);
  assert_int_equal(apply_ok("JR", 0xFF), parse_ok("JR"));
  assert_int_equal(apply_ok("N", 0xFF), QIM_MODE_NONE);
  assert_int_equal(apply_ok("", parse_ok("JR")), parse_ok("JR"));
  const char *bad[] = {"+", "+J-", "J+R", "+X", "+N", "++J", "-"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint32_t m = 7;
    assert_int_equal(qim_proto_mode_apply(bad[i], strlen(bad[i]), 0, &m), -EINVAL);
    assert_int_equal(m, 7);
  }
}

static void test_mode_delta_then_apply_gives_the_new_mode_for_every_pair(void **state) {
  (void)state;
  for (uint32_t a = 0; a <= 0xFF; a++) {
    for (uint32_t b = 0; b <= 0xFF; b++) {
      char d[QIM_MODE_STR_CAP];
      int n = qim_proto_mode_delta(a, b, d, sizeof d);
      assert_true(n >= 0);
      uint32_t got = 0xDEAD;
      assert_int_equal(qim_proto_mode_apply(d, (size_t)n, a, &got), 0);
      assert_int_equal(got, b);
    }
  }
}

static uint64_t ts_parse_ok(const char *s) {
  uint64_t ms = 0;
  assert_int_equal(qim_proto_ts_parse(s, strlen(s), &ms), 0);
  return ms;
}

static void test_ts_parse_accepts_rfc3339_forms(void **state) {
  (void)state;
  assert_int_equal(ts_parse_ok("2015-10-06T18:07:29.841Z"), 1444154849841ull);
  assert_int_equal(ts_parse_ok("2015-10-06T18:07:29.84Z"), 1444154849840ull);
  assert_int_equal(ts_parse_ok("2015-10-06T18:07:29Z"), 1444154849000ull);
  assert_int_equal(ts_parse_ok("2015-10-06T18:07:29.841999999Z"), 1444154849841ull);
  assert_int_equal(ts_parse_ok("2015-10-06t18:07:29.841z"), 1444154849841ull);
  assert_int_equal(ts_parse_ok("2015-10-06T20:07:29.841+02:00"), 1444154849841ull);
  assert_int_equal(ts_parse_ok("2015-10-06T17:37:29.841-00:30"), 1444154849841ull);
  assert_int_equal(ts_parse_ok("2000-02-29T00:00:00Z"), 951782400000ull);
  assert_int_equal(ts_parse_ok("9999-12-31T23:59:59.999Z"), 253402300799999ull);
}

static void test_ts_parse_rejects_bad_forms(void **state) {
  (void)state;
  const char *bad[] = {"",
                       "2015-10-06",
                       "2015-10-06T18:07:29",
                       "2015-10-06 18:07:29Z",
                       "2015-13-06T18:07:29Z",
                       "2015-02-29T18:07:29Z",
                       "2015-10-32T18:07:29Z",
                       "2015-10-06T24:07:29Z",
                       "2015-10-06T18:60:29Z",
                       "2015-10-06T18:07:60Z",
                       "2015-10-06T18:07:29.Z",
                       "2015-10-06T18:07:29.1234567891Z",
                       "2015-10-06T18:07:29+0200",
                       "2015-10-06T18:07:29Zjunk",
                       "1969-12-31T23:59:59Z",
                       "1970-01-01T00:00:00+00:01",
                       "yesterday"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t ms = 7;
    assert_int_equal(qim_proto_ts_parse(bad[i], strlen(bad[i]), &ms), -EINVAL);
    assert_int_equal(ms, 7);
  }
}

static void test_ts_format_then_parse_round_trips(void **state) {
  (void)state;
  for (uint64_t ms = 0; ms < 300000000000000ull; ms = ms * 3 + 12345) {
    char out[QIM_TIMESTAMP_CAP];
    uint64_t want = ms > 253402300799999ull ? 253402300799999ull : ms;
    qim_timestamp_format(ms, out); /* what the encoder writes (its cases: core's test_clock) */
    assert_int_equal(ts_parse_ok(out), want);
  }
}

static void test_version_parse_follows_tinode(void **state) {
  (void)state;
  assert_int_equal(qim_proto_version_parse("0.25.3"), 0x001903);
  assert_int_equal(qim_proto_version_parse("0.25"), 0x001900);
  assert_int_equal(qim_proto_version_parse("v0.12.34-rc5"), 0x000C22);
  assert_int_equal(qim_proto_version_parse("1.2abc"), 0x010200);
  assert_int_equal(qim_proto_version_parse("0.20"), 0x1400);
  assert_int_equal(qim_proto_version_parse("0.19.9"), 0x1309);
  assert_int_equal(qim_proto_version_parse("0.25.3.7"), 0x001903);
  assert_int_equal(qim_proto_version_parse(""), 0);
  assert_int_equal(qim_proto_version_parse("abc"), 0);
  assert_int_equal(qim_proto_version_parse("0.x"), 0);
  assert_int_equal(qim_proto_version_parse("0.256"), 0);
  assert_int_equal(qim_proto_version_parse(NULL), 0);
}

static void test_cmid_round_trips_and_has_one_spelling(void **state) {
  (void)state;
  qim_client_message_id id, back;
  for (int i = 0; i < 16; i++) id.b[i] = (uint8_t)(0xF0 + i * 7);
  char s[QIM_PROTO_CMID_CAP];
  qim_proto_cmid_format(&id, s);
  assert_int_equal(strlen(s), QIM_PROTO_CMID_LEN);
  assert_int_equal(qim_proto_cmid_parse(s, strlen(s), &back), 0);
  assert_memory_equal(id.b, back.b, 16);

  memset(id.b, 0xFF, 16);
  qim_proto_cmid_format(&id, s);
  assert_string_equal(s, "_____________________w");
  assert_int_equal(qim_proto_cmid_parse("AAAAAAAAAAAAAAAAAAAAAQ", 22, &back), 0);
  assert_int_equal(back.b[15], 1);
}

static void test_cmid_parse_rejects_bad_spellings(void **state) {
  (void)state;
  const char *bad[] = {"",
                       "AAAAAAAAAAAAAAAAAAAAAA",  /* all zero: not a valid ClientMessageId */
                       "AAAAAAAAAAAAAAAAAAAAAR",  /* trailing bits set: non-canonical */
                       "AAAAAAAAAAAAAAAAAAAAA",   /* 21 chars */
                       "AAAAAAAAAAAAAAAAAAAAAQA", /* 23 chars */
                       "AAAAAAAAAAAAAAAAAAAA+Q",  /* standard alphabet */
                       "AAAAAAAAAAAAAAAAAAAA=Q",
                       "00112233445566778899aabbccddeeff"}; /* hex is not the chosen form */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    qim_client_message_id out;
    memset(out.b, 0x55, 16);
    assert_int_equal(qim_proto_cmid_parse(bad[i], strlen(bad[i]), &out),
                     QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
    assert_int_equal(out.b[0], 0x55);
  }
}

static void test_code_text_and_names(void **state) {
  (void)state;
  assert_string_equal(qim_proto_code_text(200), "ok");
  assert_string_equal(qim_proto_code_text(201), "created");
  assert_string_equal(qim_proto_code_text(202), "accepted");
  assert_string_equal(qim_proto_code_text(208), "delivered");
  assert_string_equal(qim_proto_code_text(400), "malformed");
  assert_string_equal(qim_proto_code_text(505), "version not supported");
  assert_string_equal(qim_proto_code_text(299), "");
  assert_string_equal(qim_proto_kind_name(QIM_PROTO_PUB), "pub");
  assert_string_equal(qim_proto_kind_name(QIM_PROTO_SYNC), "sync");
  assert_string_equal(qim_proto_kind_name(QIM_PROTO_NONE), "");
  assert_string_equal(qim_proto_kind_name((qim_proto_kind)99), "");
  assert_string_equal(qim_proto_event_type_name(QIM_EVENT_TYPE_MEMBERSHIP), "membership");
  assert_string_equal(qim_proto_event_type_name((qim_event_type)9), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mode_parse_reads_letters_in_any_order_and_case),
      cmocka_unit_test(test_mode_parse_rejects_unknown_letters_and_combined_n),
      cmocka_unit_test(test_mode_format_is_canonical),
      cmocka_unit_test(test_mode_every_value_round_trips),
      cmocka_unit_test(test_mode_delta_writes_added_then_removed),
      cmocka_unit_test(test_mode_apply_handles_deltas_and_absolute_strings),
      cmocka_unit_test(test_mode_delta_then_apply_gives_the_new_mode_for_every_pair),
      cmocka_unit_test(test_ts_parse_accepts_rfc3339_forms),
      cmocka_unit_test(test_ts_parse_rejects_bad_forms),
      cmocka_unit_test(test_ts_format_then_parse_round_trips),
      cmocka_unit_test(test_version_parse_follows_tinode),
      cmocka_unit_test(test_cmid_round_trips_and_has_one_spelling),
      cmocka_unit_test(test_cmid_parse_rejects_bad_spellings),
      cmocka_unit_test(test_code_text_and_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
