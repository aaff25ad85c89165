/*
 * test_tframe.c — qim-bench's Tinode frames (tools/bench/tframe.h), checked against qim's
 * own codec: every frame the load generator sends must decode with the gateway's decoder
 * (src/gateway/proto.h) with the intended fields — the cmid in particular — and the
 * frames the gateway encodes must read back with the fields qim-bench times and counts.
 */
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "testsupport.h"
#include "tframe.h"

static void decode_ok(const char *frame, int len, qim_proto_msg *m) {
  assert_true(len > 0);
  assert_int_equal((size_t)len, strlen(frame));
  qim_proto_error e;
  int rc = qim_proto_decode(frame, (size_t)len, 0, m, &e);
  if (rc) fail_msg("decode of %s failed: %s %s", frame, e.field, e.detail);
}

static void test_pub_decodes_on_the_gateway_with_its_cmid_and_size(void **state) {
  (void)state;
  uint8_t b[16];
  for (int i = 0; i < 16; i++) b[i] = (uint8_t)(0xF0 - i);
  char cmid[QIM_TFRAME_CMID_LEN + 1];
  qim_tframe_cmid(b, cmid);
  assert_int_equal(strlen(cmid), 22);
  static const size_t sizes[] = {1, 60, 140, 1000, 4096};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    char frame[8192];
    qim_tframe_pub_args a = {"p123", "grpAbC", cmid, true, 1234567890123ull, 7, 42, sizes[s]};
    int n = qim_tframe_pub(frame, sizeof frame, &a);
    qim_proto_msg m;
    decode_ok(frame, n, &m);
    assert_int_equal(m.kind, QIM_PROTO_PUB);
    assert_string_equal(m.id, "p123");
    assert_string_equal(m.topic, "grpAbC");
    assert_true(m.u.pub.noecho);
    assert_true(m.u.pub.has_cmid);
    assert_memory_equal(m.u.pub.cmid.b, b, 16);
    json_t *c = m.u.pub.content;
    assert_int_equal(json_integer_value(json_object_get(c, "qbt")), 1234567890123ll);
    assert_int_equal(json_integer_value(json_object_get(c, "qbs")), 7);
    assert_int_equal(json_integer_value(json_object_get(c, "qbn")), 42);
    /* The content is padded to the requested size once that exceeds the markers. */
    char *dump = json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (sizes[s] >= 70) assert_int_equal(strlen(dump), sizes[s]);
    free(dump);
    qim_proto_msg_free(&m);
  }
}

static void test_pub_without_id_or_cmid_leaves_them_out(void **state) {
  (void)state;
  char frame[512];
  qim_tframe_pub_args a = {NULL, "grpX", NULL, false, 1, 2, 3, 10};
  qim_proto_msg m;
  decode_ok(frame, qim_tframe_pub(frame, sizeof frame, &a), &m);
  assert_string_equal(m.id, "");
  assert_false(m.u.pub.has_cmid);
  assert_false(m.u.pub.noecho);
  qim_proto_msg_free(&m);
}

static void test_session_frames_decode_on_the_gateway(void **state) {
  (void)state;
  char f[2048];
  qim_proto_msg m;
  decode_ok(f, qim_tframe_hi(f, sizeof f, "h"), &m);
  assert_int_equal(m.kind, QIM_PROTO_HI);
  assert_true(qim_proto_version_parse(m.u.hi.ver) >= 0x1400);
  qim_proto_msg_free(&m);

  decode_ok(f, qim_tframe_acc(f, sizeof f, "a", "bench000001", "pw\"with:colon"), &m);
  assert_int_equal(m.kind, QIM_PROTO_ACC);
  assert_string_equal(m.u.acc.user, "new");
  assert_true(m.u.acc.login);
  assert_int_equal(m.u.acc.secret_len, strlen("bench000001:pw\"with:colon"));
  assert_memory_equal(m.u.acc.secret, "bench000001:pw\"with:colon", m.u.acc.secret_len);
  qim_proto_msg_free(&m);

  decode_ok(f, qim_tframe_login_basic(f, sizeof f, "b", "u1234", "secret1"), &m);
  assert_int_equal(m.kind, QIM_PROTO_LOGIN);
  assert_string_equal(m.u.login.scheme, "basic");
  qim_proto_msg_free(&m);

  /* Token secrets travel as the server wrote them (base64 the decoder accepts). */
  decode_ok(f, qim_tframe_login_token(f, sizeof f, "l", "AAECAwQFBgcICQoLDA0ODw=="), &m);
  assert_string_equal(m.u.login.scheme, "token");
  assert_int_equal(m.u.login.secret_len, 16);
  qim_proto_msg_free(&m);

  decode_ok(f, qim_tframe_sub(f, sizeof f, "c1", "newbench1"), &m);
  assert_int_equal(m.kind, QIM_PROTO_SUB);
  assert_string_equal(m.topic, "newbench1");
  qim_proto_msg_free(&m);
  decode_ok(f, qim_tframe_sub(f, sizeof f, "j1.2", "grpXYZ"), &m);
  assert_string_equal(m.id, "j1.2");
  qim_proto_msg_free(&m);
}

static void test_get_data_decodes_on_the_gateway_with_before_and_limit(void **state) {
  (void)state;
  char f[512];
  qim_proto_msg m;
  decode_ok(f, qim_tframe_get_data(f, sizeof f, "g", "grpXYZ", 999951, 50), &m);
  assert_int_equal(m.kind, QIM_PROTO_GET);
  assert_string_equal(m.id, "g");
  assert_string_equal(m.topic, "grpXYZ");
  assert_int_equal(m.u.get.q.what, QIM_PROTO_WHAT_DATA);
  assert_int_equal(m.u.get.q.data.before, 999951);
  assert_int_equal(m.u.get.q.data.limit, 50);
  assert_int_equal(m.u.get.q.data.since, 0);
  qim_proto_msg_free(&m);
  /* before 0 is left out: the newest messages. */
  decode_ok(f, qim_tframe_get_data(f, sizeof f, "q", "grpXYZ", 0, 1), &m);
  assert_int_equal(m.u.get.q.data.before, 0);
  assert_int_equal(m.u.get.q.data.limit, 1);
  assert_null(strstr(f, "before"));
  qim_proto_msg_free(&m);
  assert_int_equal(qim_tframe_get_data(f, 40, "g", "grpXYZ", 1, 50), -ENOSPC);
}

static void test_builders_report_a_short_buffer(void **state) {
  (void)state;
  char f[32];
  qim_tframe_pub_args a = {"p1", "grpX", NULL, true, 1, 2, 3, 100};
  assert_int_equal(qim_tframe_pub(f, sizeof f, &a), -ENOSPC);
  assert_int_equal(qim_tframe_acc(f, sizeof f, "a", "login", "password"), -ENOSPC);
  assert_int_equal(qim_tframe_hi(f, 10, "h"), -ENOSPC);
  assert_int_equal(qim_tframe_login_token(f, sizeof f, "l", "0123456789012345678901234567890"),
                   -ENOSPC);
}

static void test_gateway_data_frame_reads_markers_on_the_fast_path(void **state) {
  (void)state;
  json_t *content = json_pack("{s:I,s:i,s:i,s:s}", "qbt", (json_int_t)987654321012, "qbs", 3, "qbn",
                              11, "txt", "x\"seq\":5");
  qim_proto_data_frame d = {
      .topic = "grpAAA", .from = "usrB", .ts_ms = 1700000000000ull, .seq = 77, .content = content};
  size_t len = 0;
  char *frame = qim_proto_data(&d, &len);
  qim_tframe_msg m;
  assert_int_equal(qim_tframe_parse(frame, len, &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_DATA);
  assert_int_equal(m.seq, 77);
  assert_int_equal(m.qbt, 987654321012ll);
  assert_int_equal(m.qbs, 3);
  assert_int_equal(m.qbn, 11);
  qim_free(frame);
  json_decref(content);

  /* Content not made by qim-bench: no markers. */
  json_t *other = json_pack("{s:s}", "txt", "hello");
  d.content = other;
  frame = qim_proto_data(&d, &len);
  assert_int_equal(qim_tframe_parse(frame, len, &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_DATA);
  assert_int_equal(m.qbt, -1);
  qim_free(frame);
  json_decref(other);
}

static void test_data_with_another_key_first_reads_the_slow_way(void **state) {
  (void)state;
  const char f[] =
      "{ \"extra\":1, \"data\":{\"seq\":4,\"content\":{\"qbn\":9,\"qbt\":5,\"qbs\":1}}}";
  qim_tframe_msg m;
  assert_int_equal(qim_tframe_parse(f, strlen(f), &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_DATA);
  assert_int_equal(m.seq, 4);
  assert_int_equal(m.qbt, 5);
  assert_int_equal(m.qbn, 9);
}

static void test_gateway_ctrl_frames_read_code_id_topic_and_params(void **state) {
  (void)state;
  json_t *params = json_pack("{s:i}", "seq", 17);
  size_t len = 0;
  char *f = qim_proto_ctrl("p1700", "grpX", 202, "accepted", params, 1700000000000ull, &len);
  qim_tframe_msg m;
  assert_int_equal(qim_tframe_parse(f, len, &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_CTRL);
  assert_int_equal(m.code, 202);
  assert_string_equal(m.id, "p1700");
  assert_string_equal(m.topic, "grpX");
  assert_int_equal(m.seq, 17);
  qim_free(f);
  json_decref(params);

  params = json_pack("{s:s,s:s,s:s}", "user", "usrAbc", "token", "tok/en+=", "authlvl", "auth");
  f = qim_proto_ctrl("a", NULL, 200, "ok", params, 1700000000000ull, &len);
  assert_int_equal(qim_tframe_parse(f, len, &m), 0);
  assert_string_equal(m.user, "usrAbc");
  assert_string_equal(m.token, "tok/en+=");
  assert_string_equal(m.topic, "");
  assert_int_equal(m.seq, -1);
  qim_free(f);
  json_decref(params);

  /* The end of a get data: its count (-1 where a ctrl has none). */
  params = json_pack("{s:s,s:i}", "what", "data", "count", 50);
  f = qim_proto_ctrl("g", "grpX", 208, "delivered", params, 1700000000000ull, &len);
  assert_int_equal(qim_tframe_parse(f, len, &m), 0);
  assert_int_equal(m.code, 208);
  assert_int_equal(m.count, 50);
  qim_free(f);
  json_decref(params);

  f = qim_proto_ctrl("x", "grpY", 429, "too many requests", NULL, 1700000000000ull, &len);
  assert_int_equal(qim_tframe_parse(f, len, &m), 0);
  assert_int_equal(m.code, 429);
  assert_string_equal(m.text, "too many requests");
  assert_int_equal(m.count, -1);
  qim_free(f);
}

static void test_other_kinds_and_garbage(void **state) {
  (void)state;
  qim_tframe_msg m;
  const char meta[] = "{\"meta\":{\"id\":\"s1\",\"topic\":\"me\",\"ts\":\"x\"}}";
  assert_int_equal(qim_tframe_parse(meta, strlen(meta), &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_META);
  assert_string_equal(m.id, "s1");
  const char pres[] = "{\"pres\":{\"topic\":\"me\",\"what\":\"on\"}}";
  assert_int_equal(qim_tframe_parse(pres, strlen(pres), &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_PRES);
  const char info[] = "{\"info\":{\"topic\":\"grpX\",\"what\":\"recv\"}}";
  assert_int_equal(qim_tframe_parse(info, strlen(info), &m), 0);
  assert_int_equal(m.kind, QIM_TFRAME_INFO);
  assert_int_equal(qim_tframe_parse("0", 1, &m), -EINVAL);
  assert_int_equal(qim_tframe_parse("{\"zzz\":{}}", 10, &m), -EINVAL);
  assert_int_equal(qim_tframe_parse("{\"ctrl\":", 8, &m), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pub_decodes_on_the_gateway_with_its_cmid_and_size),
      cmocka_unit_test(test_pub_without_id_or_cmid_leaves_them_out),
      cmocka_unit_test(test_session_frames_decode_on_the_gateway),
      cmocka_unit_test(test_get_data_decodes_on_the_gateway_with_before_and_limit),
      cmocka_unit_test(test_builders_report_a_short_buffer),
      cmocka_unit_test(test_gateway_data_frame_reads_markers_on_the_fast_path),
      cmocka_unit_test(test_data_with_another_key_first_reads_the_slow_way),
      cmocka_unit_test(test_gateway_ctrl_frames_read_code_id_topic_and_params),
      cmocka_unit_test(test_other_kinds_and_garbage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
