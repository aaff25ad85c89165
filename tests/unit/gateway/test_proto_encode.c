/*
 * test_proto_encode.c — every server frame builder, compared byte for byte with the
 * expected compact JSON: omitempty rules, the always-present fields, key order,
 * escaping, timestamps, and that every output parses back as JSON.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/mem.h"
#include "testsupport.h"

/* 2015-10-06T18:07:29.841Z */
#define TS 1444154849841ull

/* Frames are written with ' for " to stay readable. */
/* `lenp` is read after the builder ran (argument evaluation order is unspecified). */
static void assert_frame(char *got, const size_t *lenp, const char *want_sq) {
  size_t len = *lenp;
  char *want = strdup(want_sq);
  for (char *p = want; *p; p++)
    if (*p == '\'') *p = '"';
  assert_non_null(got);
  if (strcmp(got, want)) print_error("got  %s\nwant %s\n", got, want);
  assert_string_equal(got, want);
  assert_int_equal(len, strlen(want));
  json_error_t err;
  json_t *j = json_loadb(got, len, JSON_REJECT_DUPLICATES, &err);
  assert_non_null(j);
  json_decref(j);
  free(want);
  qim_free(got);
}

static json_t *js(const char *sq) {
  char *s = strdup(sq);
  for (char *p = s; *p; p++)
    if (*p == '\'') *p = '"';
  json_t *j = json_loads(s, JSON_DECODE_ANY, NULL);
  assert_non_null(j);
  free(s);
  return j;
}

static void test_ctrl_hi_reply_with_params(void **state) {
  (void)state;
  size_t len = 0;
  json_t *params = js("{'ver':'0.25','build':'qim','maxMessageSize':131072}");
  char *f = qim_proto_ctrl("106186", NULL, 201, "created", params, TS, &len);
  assert_frame(f, &len,
               "{'ctrl':{'id':'106186','code':201,'text':'created',"
               "'params':{'ver':'0.25','build':'qim','maxMessageSize':131072},"
               "'ts':'2015-10-06T18:07:29.841Z'}}");
  json_decref(params);
}

static void test_ctrl_omits_empty_fields_but_keeps_code_and_ts(void **state) {
  (void)state;
  size_t len = 0;
  assert_frame(qim_proto_ctrl(NULL, NULL, 200, NULL, NULL, 0, &len), &len,
               "{'ctrl':{'code':200,'ts':'1970-01-01T00:00:00.000Z'}}");
  json_t *empty = json_object();
  assert_frame(qim_proto_ctrl("", "", 304, "", empty, TS, &len), &len,
               "{'ctrl':{'code':304,'ts':'2015-10-06T18:07:29.841Z'}}");
  json_decref(empty);
}

static void test_ctrl_sub_create_reply_names_the_real_topic(void **state) {
  (void)state;
  size_t len = 0;
  json_t *params =
      js("{'acs':{'want':'JRWPASDO','given':'JRWPASDO','mode':'JRWPASDO'},'tmpname':'new123'}");
  assert_frame(qim_proto_ctrl("107683", "grpYiqEXb4QY6s", 200, "ok", params, TS, &len), &len,
               "{'ctrl':{'id':'107683','topic':'grpYiqEXb4QY6s','code':200,'text':'ok',"
               "'params':{'acs':{'want':'JRWPASDO','given':'JRWPASDO','mode':'JRWPASDO'},"
               "'tmpname':'new123'},'ts':'2015-10-06T18:07:29.841Z'}}");
  json_decref(params);
  params = js("{'seq':17}");
  assert_frame(qim_proto_ctrl("5", "grpX", 202, qim_proto_code_text(202), params, TS, &len), &len,
               "{'ctrl':{'id':'5','topic':'grpX','code':202,'text':'accepted','params':{'seq':17},"
               "'ts':'2015-10-06T18:07:29.841Z'}}");
  /* len may be NULL. */
  char *f = qim_proto_ctrl("5", NULL, 200, "ok", NULL, TS, NULL);
  assert_non_null(f);
  qim_free(f);
  json_decref(params);
}

static void test_ctrl_with_a_negative_code_is_still_valid_json(void **state) {
  (void)state;
  size_t len = 0;
  assert_frame(qim_proto_ctrl(NULL, NULL, INT_MIN, NULL, NULL, 0, &len), &len,
               "{'ctrl':{'code':-2147483648,'ts':'1970-01-01T00:00:00.000Z'}}");
}

static void test_ctrl_escapes_strings_and_replaces_bad_utf8(void **state) {
  (void)state;
  size_t len = 0;
  assert_frame(
      qim_proto_ctrl("a\"b\\c/\x01\n\t\r\b\f", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 400,
                     "bad \xff\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 end", NULL, TS, &len),
      &len,
      "{'ctrl':{'id':'a\\'b\\\\c/\\u0001\\n\\t\\r\\b\\f',"
      "'topic':'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80','code':400,"
      "'text':'bad \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\\ufffd end',"
      "'ts':'2015-10-06T18:07:29.841Z'}}");
}

static void test_ctrl_error_from_a_failed_decode(void **state) {
  (void)state;
  const char *frame = "{\"pub\":{\"id\":\"9\",\"topic\":\"grpX\",\"noecho\":\"yes\"}}";
  qim_proto_msg m;
  qim_proto_error e;
  assert_int_equal(qim_proto_decode(frame, strlen(frame), 0, &m, &e), -EINVAL);
  size_t len = 0;
  assert_frame(qim_proto_ctrl_error(&e, TS, &len), &len,
               "{'ctrl':{'id':'9','topic':'grpX','code':400,'text':'malformed',"
               "'ts':'2015-10-06T18:07:29.841Z'}}");
  assert_int_equal(qim_proto_decode("nope", 4, 0, &m, &e), -EINVAL);
  assert_frame(qim_proto_ctrl_error(&e, TS, &len), &len,
               "{'ctrl':{'code':400,'text':'malformed','ts':'2015-10-06T18:07:29.841Z'}}");
}

static void test_data_frame_with_head_and_json_content(void **state) {
  (void)state;
  json_t *head = js("{'replace':':1'}"), *content = js("{'txt':'hi','fmt':[{'tp':'ST','len':2}]}");
  qim_proto_data_frame d = {
      .topic = "grpX", .from = "usrAlice", .ts_ms = TS, .seq = 7, .head = head, .content = content};
  size_t len = 0;
  assert_frame(qim_proto_data(&d, &len), &len,
               "{'data':{'topic':'grpX','from':'usrAlice','ts':'2015-10-06T18:07:29.841Z','seq':7,"
               "'head':{'replace':':1'},'content':{'txt':'hi','fmt':[{'tp':'ST','len':2}]}}}");
  json_decref(head);
  json_decref(content);
}

static void test_data_frame_keeps_topic_seq_ts_and_splices_raw_content(void **state) {
  (void)state;
  size_t len = 0;
  qim_proto_data_frame d = {.content_raw = "\"plain text\"", .content_raw_len = 12};
  assert_frame(
      qim_proto_data(&d, &len), &len,
      "{'data':{'topic':'','ts':'1970-01-01T00:00:00.000Z','seq':0,'content':'plain text'}}");
  json_t *empty = json_object(), *str = json_string("json wins");
  qim_proto_data_frame e = {.topic = "usrBob",
                            .ts_ms = TS,
                            .seq = 1,
                            .head = empty,
                            .content = str,
                            .content_raw = "[1]",
                            .content_raw_len = 3};
  assert_frame(
      qim_proto_data(&e, &len), &len,
      "{'data':{'topic':'usrBob','ts':'2015-10-06T18:07:29.841Z','seq':1,'content':'json wins'}}");
  json_decref(empty);
  json_decref(str);
}

static void test_meta_desc_full_and_minimal(void **state) {
  (void)state;
  json_t *pub = js("{'fn':'Test group'}"), *priv = js("{'arch':true}");
  qim_proto_defacs defacs = {.auth = 0x2F, .anon = QIM_MODE_NONE};
  qim_proto_acs acs = {.want = 0xFF, .given = 0xFF, .mode = 0xFF};
  qim_proto_topic_desc d = {.created_ms = TS,
                            .updated_ms = TS + 1,
                            .touched_ms = TS + 2,
                            .online = true,
                            .defacs = &defacs,
                            .acs = &acs,
                            .seq = 6,
                            .read = 3,
                            .recv = 6,
                            .clear = 2,
                            .subcnt = 4,
                            .public_data = pub,
                            .private_data = priv};
  size_t len = 0;
  assert_frame(qim_proto_meta_desc("106189", "grpX", TS, &d, &len), &len,
               "{'meta':{'id':'106189','topic':'grpX','ts':'2015-10-06T18:07:29.841Z','desc':{"
               "'created':'2015-10-06T18:07:29.841Z','updated':'2015-10-06T18:07:29.842Z',"
               "'touched':'2015-10-06T18:07:29.843Z','online':true,"
               "'defacs':{'auth':'JRWPS','anon':'N'},"
               "'acs':{'want':'JRWPASDO','given':'JRWPASDO','mode':'JRWPASDO'},"
               "'seq':6,'read':3,'recv':6,'clear':2,'subcnt':4,"
               "'public':{'fn':'Test group'},'private':{'arch':true}}}}");
  qim_proto_topic_desc p2p = {.state = "ok", .chan = true, .seen_when_ms = TS, .seen_ua = "ua/1"};
  assert_frame(qim_proto_meta_desc(NULL, "usrB", 0, &p2p, &len), &len,
               "{'meta':{'topic':'usrB','desc':{'state':'ok','chan':true,"
               "'seen':{'when':'2015-10-06T18:07:29.841Z','ua':'ua/1'}}}}");
  qim_proto_topic_desc empty = {0};
  assert_frame(qim_proto_meta_desc("1", "me", TS, &empty, &len), &len,
               "{'meta':{'id':'1','topic':'me','ts':'2015-10-06T18:07:29.841Z','desc':{}}}");
  json_decref(pub);
  json_decref(priv);
}

static void test_meta_sub_me_listing_entry(void **state) {
  (void)state;
  json_t *pub = js("{'fn':'Test group'}");
  qim_proto_acs acs = {.want = 0x2F, .given = 0x2F, .mode = 0x2F};
  qim_proto_acs mode_only = qim_proto_acs_unset();
  mode_only.mode = 0x03;
  qim_proto_topic_sub subs[] = {
      {.topic = "grpF6JOFv9koaE",
       .updated_ms = TS,
       .touched_ms = TS + 1000,
       .acs = &acs,
       .seq = 6,
       .read = 3,
       .recv = 6,
       .clear = 2,
       .public_data = pub,
       .online = true},
      {.user = "usrB", .acs = &mode_only, .deleted_ms = TS, .seen_ua = "x"},
  };
  size_t len = 0;
  assert_frame(
      qim_proto_meta_sub("106189", "me", TS, subs, 2, &len), &len,
      "{'meta':{'id':'106189','topic':'me','ts':'2015-10-06T18:07:29.841Z','sub':["
      "{'updated':'2015-10-06T18:07:29.841Z','online':true,"
      "'acs':{'want':'JRWPS','given':'JRWPS','mode':'JRWPS'},'read':3,'recv':6,"
      "'public':{'fn':'Test group'},'topic':'grpF6JOFv9koaE',"
      "'touched':'2015-10-06T18:07:30.841Z','seq':6,'clear':2},"
      "{'deleted':'2015-10-06T18:07:29.841Z','acs':{'mode':'JR'},'user':'usrB','seen':{'ua':'x'}}"
      "]}}");
  assert_frame(qim_proto_meta_sub("2", "grpX", 0, NULL, 0, &len), &len,
               "{'meta':{'id':'2','topic':'grpX','sub':[]}}");
  json_decref(pub);
}

static void test_meta_del_tags_cred_aux(void **state) {
  (void)state;
  size_t len = 0;
  qim_proto_range r[] = {{3, 0}, {5, 8}};
  assert_frame(qim_proto_meta_del("7", "grpX", TS, 4, r, 2, &len), &len,
               "{'meta':{'id':'7','topic':'grpX','ts':'2015-10-06T18:07:29.841Z',"
               "'del':{'clear':4,'delseq':[{'low':3},{'low':5,'hi':8}]}}}");
  assert_frame(qim_proto_meta_del("7", "grpX", 0, 0, NULL, 0, &len), &len,
               "{'meta':{'id':'7','topic':'grpX','del':{}}}");
  const char *tags[] = {"work", "q\"t"};
  assert_frame(qim_proto_meta_tags("8", "me", 0, tags, 2, &len), &len,
               "{'meta':{'id':'8','topic':'me','tags':['work','q\\'t']}}");
  qim_proto_cred_info creds[] = {{"email", "a@b.c", true}, {"tel", "+1555", false}};
  assert_frame(qim_proto_meta_cred("9", "me", 0, creds, 2, &len), &len,
               "{'meta':{'id':'9','topic':'me','cred':[{'meth':'email','val':'a@b.c','done':true},"
               "{'meth':'tel','val':'+1555'}]}}");
  json_t *aux = js("{'pins':['grpX']}");
  assert_frame(qim_proto_meta_aux("10", "me", 0, aux, &len), &len,
               "{'meta':{'id':'10','topic':'me','aux':{'pins':['grpX']}}}");
  json_decref(aux);
}

static void test_pres_variants(void **state) {
  (void)state;
  size_t len = 0;
  qim_proto_pres_frame acs = {.topic = "grpX",
                              .src = "usrNew",
                              .what = "acs",
                              .dacs_want = "+JRWPS",
                              .dacs_given = "+JRWPS"};
  assert_frame(qim_proto_pres(&acs, &len), &len,
               "{'pres':{'topic':'grpX','src':'usrNew','what':'acs','dacs':{'want':'+JRWPS','given'"
               ":'+JRWPS'}}}");
  qim_proto_range r[] = {{4, 0}};
  qim_proto_pres_frame del = {
      .topic = "grpX", .src = "usrA", .what = "del", .clear = 3, .delseq = r, .delseq_n = 1};
  assert_frame(
      qim_proto_pres(&del, &len), &len,
      "{'pres':{'topic':'grpX','src':'usrA','what':'del','clear':3,'delseq':[{'low':4}]}}");
  qim_proto_pres_frame msg = {.topic = "me",
                              .src = "grpX",
                              .what = "msg",
                              .seq = 9,
                              .act = "usrA",
                              .ua = "sdk/1",
                              .tgt = "usrT",
                              .dacs_given = "-D"};
  assert_frame(qim_proto_pres(&msg, &len), &len,
               "{'pres':{'topic':'me','src':'grpX','what':'msg','ua':'sdk/1','seq':9,'tgt':'usrT',"
               "'act':'usrA','dacs':{'given':'-D'}}}");
  qim_proto_pres_frame bare = {0};
  assert_frame(qim_proto_pres(&bare, &len), &len, "{'pres':{'topic':'','what':''}}");
}

static void test_info_relays_a_note(void **state) {
  (void)state;
  size_t len = 0;
  qim_proto_info_frame i = {.topic = "grpX", .from = "usrA", .what = "read", .seq = 5};
  assert_frame(qim_proto_info(&i, &len), &len,
               "{'info':{'topic':'grpX','from':'usrA','what':'read','seq':5}}");
  json_t *payload = js("{'sdp':'v=0'}");
  qim_proto_info_frame call = {.topic = "me",
                               .src = "usrB",
                               .from = "usrB",
                               .what = "call",
                               .seq = 2,
                               .event = "offer",
                               .payload = payload};
  assert_frame(
      qim_proto_info(&call, &len), &len,
      "{'info':{'topic':'me','src':'usrB','from':'usrB','what':'call','seq':2,'event':'offer',"
      "'payload':{'sdp':'v=0'}}}");
  json_decref(payload);
}

static void test_sync_reply_uses_strings_for_64_bit_values(void **state) {
  (void)state;
  qim_client_message_id cmid;
  for (int i = 0; i < 16; i++) cmid.b[i] = (uint8_t)i;
  json_t *content = js("{'txt':'hi'}");
  qim_proto_sync_entry entries[] = {
      {.event_id = 18446744073709551615ull,
       .type = QIM_EVENT_TYPE_MESSAGE,
       .topic = "grpX",
       .seq = 7,
       .from = "usrA",
       .ts_ms = TS,
       .cmid = &cmid,
       .body_included = true,
       .content = content},
      {.event_id = 256,
       .type = QIM_EVENT_TYPE_CONTROL,
       .topic = "grpX",
       .ts_ms = TS,
       .body_included = false,
       .content = content},
      {.event_id = 512,
       .type = QIM_EVENT_TYPE_MEMBERSHIP,
       .topic = "grpY",
       .body_included = true,
       .content_raw = "{\"join\":\"usrC\"}",
       .content_raw_len = 15},
  };
  qim_proto_sync_frame s = {.id = "s1",
                            .entries = entries,
                            .n = 3,
                            .covered = 1099511627776ull,
                            .watermark = 9007199254740993ull,
                            .more = true,
                            .cursor = "tok.sig"};
  size_t len = 0;
  assert_frame(
      qim_proto_sync_reply(&s, &len), &len,
      "{'sync':{'id':'s1','entries':["
      "{'event_id':'18446744073709551615','type':'message','topic':'grpX','seq':7,'from':'usrA',"
      "'ts':'2015-10-06T18:07:29.841Z','cmid':'AAECAwQFBgcICQoLDA0ODw','content':{'txt':'hi'}},"
      "{'event_id':'256','type':'control','topic':'grpX','ts':'2015-10-06T18:07:29.841Z'},"
      "{'event_id':'512','type':'membership','topic':'grpY','content':{'join':'usrC'}}],"
      "'covered':'1099511627776','watermark':'9007199254740993','more':true,'cursor':'tok.sig'}}");
  qim_proto_sync_frame empty = {.id = "s2"};
  assert_frame(qim_proto_sync_reply(&empty, &len), &len,
               "{'sync':{'id':'s2','entries':[],'covered':'0','watermark':'0'}}");
  json_decref(content);
}

static void test_large_content_grows_the_buffer(void **state) {
  (void)state;
  size_t n = 200000;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = 0;
  json_t *content = json_string(big);
  qim_proto_data_frame d = {.topic = "grpX", .ts_ms = TS, .seq = 1, .content = content};
  size_t len = 0;
  char *f = qim_proto_data(&d, &len);
  assert_non_null(f);
  assert_int_equal(len, strlen(f));
  assert_int_equal(len,
                   n + strlen("{\"data\":{\"topic\":\"grpX\",\"ts\":\"2015-10-06T18:07:29.841Z\","
                              "\"seq\":1,\"content\":\"\"}}"));
  qim_free(f);
  json_decref(content);
  free(big);
}

static void test_encode_then_decode_a_pub_content_round_trips(void **state) {
  (void)state;
  const char *frame =
      "{\"pub\":{\"id\":\"1\",\"topic\":\"grpX\",\"content\":"
      "{\"txt\":\"h\\u00e9 \\\"q\\\"\",\"n\":[1,-2,3.5,true,null]}}}";
  qim_proto_msg m;
  qim_proto_error e;
  assert_int_equal(qim_proto_decode(frame, strlen(frame), 0, &m, &e), 0);
  qim_proto_data_frame d = {
      .topic = m.topic, .from = "usrA", .ts_ms = TS, .seq = 3, .content = m.u.pub.content};
  size_t len = 0;
  char *out = qim_proto_data(&d, &len);
  json_t *back = json_loadb(out, len, 0, NULL);
  assert_non_null(back);
  assert_true(
      json_equal(json_object_get(json_object_get(back, "data"), "content"), m.u.pub.content));
  json_decref(back);
  qim_free(out);
  qim_proto_msg_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ctrl_hi_reply_with_params),
      cmocka_unit_test(test_ctrl_omits_empty_fields_but_keeps_code_and_ts),
      cmocka_unit_test(test_ctrl_sub_create_reply_names_the_real_topic),
      cmocka_unit_test(test_ctrl_with_a_negative_code_is_still_valid_json),
      cmocka_unit_test(test_ctrl_escapes_strings_and_replaces_bad_utf8),
      cmocka_unit_test(test_ctrl_error_from_a_failed_decode),
      cmocka_unit_test(test_data_frame_with_head_and_json_content),
      cmocka_unit_test(test_data_frame_keeps_topic_seq_ts_and_splices_raw_content),
      cmocka_unit_test(test_meta_desc_full_and_minimal),
      cmocka_unit_test(test_meta_sub_me_listing_entry),
      cmocka_unit_test(test_meta_del_tags_cred_aux),
      cmocka_unit_test(test_pres_variants),
      cmocka_unit_test(test_info_relays_a_note),
      cmocka_unit_test(test_sync_reply_uses_strings_for_64_bit_values),
      cmocka_unit_test(test_large_content_grows_the_buffer),
      cmocka_unit_test(test_encode_then_decode_a_pub_content_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
