/*
 * test_proto_decode.c — decoding of every client message into its typed struct, with
 * realistic frames (the SDK's own shapes from PROTOCOL.md §5, §11-§13). The error
 * table lives in test_proto_decode_errors.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/proto.h"
#include "testsupport.h"

/* Frames are written with ' for " to stay readable; this swaps them back. */
static char *dq(const char *s) {
  char *d = strdup(s);
  for (char *p = d; *p; p++)
    if (*p == '\'') *p = '"';
  return d;
}

static void decode_ok(const char *frame, qim_proto_msg *m) {
  char *f = dq(frame);
  qim_proto_error e;
  int rc = qim_proto_decode(f, strlen(f), 0, m, &e);
  if (rc != 0) print_error("decode failed: %s %s (%s)\n", e.field, e.detail, f);
  free(f);
  assert_int_equal(rc, 0);
}

static void assert_str(const char *got, const char *want) {
  if (!want) {
    assert_null(got);
    return;
  }
  assert_non_null(got);
  assert_string_equal(got, want);
}

static void assert_json_str(const json_t *obj, const char *key, const char *want) {
  assert_non_null(obj);
  assert_string_equal(json_string_value(json_object_get(obj, key)), want);
}

static void test_hi_from_the_sdk_decodes_every_field(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'hi':{'id':'106186','ver':'0.25.3','ua':'capture (undefined); tinodejs/0.25.3',"
      "'lang':'xx','platf':'web','dev':'fcm-token','bkg':true,'device':'dev-7f3a'}}",
      &m);
  assert_int_equal(m.kind, QIM_PROTO_HI);
  assert_string_equal(m.id, "106186");
  assert_null(m.topic);
  assert_str(m.u.hi.ver, "0.25.3");
  assert_str(m.u.hi.ua, "capture (undefined); tinodejs/0.25.3");
  assert_str(m.u.hi.lang, "xx");
  assert_str(m.u.hi.platf, "web");
  assert_str(m.u.hi.dev, "fcm-token");
  assert_true(m.u.hi.bkg);
  assert_str(m.u.hi.device, "dev-7f3a");
  assert_false(m.extra.present);
  qim_proto_msg_free(&m);
}

static void test_hi_minimal_leaves_absent_fields_null(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'hi':{'ver':'0.25'}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_HI);
  assert_string_equal(m.id, "");
  assert_str(m.u.hi.ver, "0.25");
  assert_null(m.u.hi.ua);
  assert_null(m.u.hi.device);
  assert_false(m.u.hi.bkg);
  qim_proto_msg_free(&m);
}

static void test_acc_create_with_login_decodes_secret_desc_tags_cred(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'acc':{'id':'106187','user':'new','scheme':'basic','secret':'Ym9ibXg1enV0ODU6Ym9iMTIz',"
      "'login':true,'desc':{'public':{'fn':'Bob'},'private':{'comment':'me'},"
      "'defacs':{'auth':'JRWPAS','anon':'N'}},'tags':['alice','bob'],"
      "'cred':[{'meth':'email','val':'bob@example.com','params':{'lang':'en'}},{'meth':'tel','resp'"
      ":'123'}],"
      "'token':'tok','tmpscheme':'code','tmpsecret':'MTIzNA==','status':'ok','authlevel':'auth'}}",
      &m);
  const qim_proto_acc *a = &m.u.acc;
  assert_int_equal(m.kind, QIM_PROTO_ACC);
  assert_string_equal(m.id, "106187");
  assert_str(a->user, "new");
  assert_str(a->scheme, "basic");
  assert_true(a->has_secret);
  assert_int_equal(a->secret_len, 18);
  assert_memory_equal(a->secret, "bobmx5zut85:bob123", 18);
  assert_true(a->login);
  assert_true(a->desc.present);
  assert_true(a->desc.has_defacs);
  assert_int_equal(a->desc.defacs_auth, 0x3F);
  assert_int_equal(a->desc.defacs_anon, QIM_MODE_NONE);
  assert_json_str(a->desc.public_data, "fn", "Bob");
  assert_json_str(a->desc.private_data, "comment", "me");
  assert_null(a->desc.trusted_data);
  assert_true(a->tags.present);
  assert_int_equal(a->tags.n, 2);
  assert_string_equal(a->tags.v[0], "alice");
  assert_string_equal(a->tags.v[1], "bob");
  assert_int_equal(a->cred.n, 2);
  assert_str(a->cred.v[0].meth, "email");
  assert_str(a->cred.v[0].val, "bob@example.com");
  assert_json_str(a->cred.v[0].params, "lang", "en");
  assert_str(a->cred.v[1].resp, "123");
  assert_null(a->cred.v[1].params);
  assert_str(a->token, "tok");
  assert_str(a->tmpscheme, "code");
  assert_true(a->has_tmpsecret);
  assert_int_equal(a->tmpsecret_len, 4);
  assert_memory_equal(a->tmpsecret, "1234", 4);
  assert_str(a->status, "ok");
  assert_str(a->authlevel, "auth");
  qim_proto_msg_free(&m);
}

static void test_acc_defacs_absent_members_are_unset(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'acc':{'id':'1','user':'new','scheme':'anonymous','desc':{'defacs':{'auth':''}}}}",
            &m);
  assert_true(m.u.acc.desc.has_defacs);
  assert_int_equal(m.u.acc.desc.defacs_auth, QIM_MODE_UNSET);
  assert_int_equal(m.u.acc.desc.defacs_anon, QIM_MODE_UNSET);
  assert_false(m.u.acc.has_secret);
  assert_false(m.u.acc.tags.present);
  assert_int_equal(m.u.acc.cred.n, 0);
  qim_proto_msg_free(&m);
}

static void test_login_basic_and_token_decode_secret_bytes(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'login':{'id':'106188','scheme':'basic','secret':'Ym9ibXg1enV0ODU6Ym9iMTIz'}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_LOGIN);
  assert_str(m.u.login.scheme, "basic");
  assert_true(m.u.login.has_secret);
  assert_memory_equal(m.u.login.secret, "bobmx5zut85:bob123", 18);
  qim_proto_msg_free(&m);

  decode_ok(
      "{'login':{'id':'7','scheme':'token','secret':'AAEC/w==',"
      "'cred':[{'meth':'email','resp':'123456'}]}}",
      &m);
  assert_str(m.u.login.scheme, "token");
  assert_int_equal(m.u.login.secret_len, 4);
  assert_memory_equal(m.u.login.secret, "\x00\x01\x02\xff", 4);
  assert_int_equal(m.u.login.cred.n, 1);
  assert_str(m.u.login.cred.v[0].resp, "123456");
  qim_proto_msg_free(&m);

  decode_ok("{'login':{'id':'8','scheme':'basic','secret':''}}", &m);
  assert_true(m.u.login.has_secret);
  assert_int_equal(m.u.login.secret_len, 0);
  qim_proto_msg_free(&m);

  decode_ok("{'login':{'id':'9','scheme':'basic','secret':'YWI='}}", &m);
  assert_int_equal(m.u.login.secret_len, 2);
  assert_memory_equal(m.u.login.secret, "ab", 2);
  qim_proto_msg_free(&m);
}

static void test_sub_me_with_get_sub_desc(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'sub':{'id':'106189','topic':'me','get':{'what':'sub desc'}}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_SUB);
  assert_str(m.topic, "me");
  assert_false(m.u.sub.set.present);
  assert_true(m.u.sub.get.present);
  assert_int_equal(m.u.sub.get.what, QIM_PROTO_WHAT_SUB | QIM_PROTO_WHAT_DESC);
  assert_false(m.u.sub.get.data.present);
  qim_proto_msg_free(&m);
}

static void test_sub_new_group_decodes_set_and_get_options(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'sub':{'id':'107683','topic':'new107683','bkg':true,"
      "'set':{'desc':{'public':{'fn':'Test group'},'defacs':{'auth':'JRWPS','anon':'N'}},"
      "'sub':{'mode':'JRWPASDO'},'tags':['work'],'aux':{'pin':[1]}},"
      "'get':{'what':'data sub desc','data':{'limit':24,'since':3,'before':40},"
      "'desc':{'ims':'2015-10-06T18:07:29.841Z'},'sub':{'user':'usrAbc','topic':'grpX','limit':10}}"
      "}}",
      &m);
  const qim_proto_sub *s = &m.u.sub;
  assert_str(m.topic, "new107683");
  assert_true(s->bkg);
  assert_true(s->set.present);
  assert_int_equal(s->set.what, QIM_PROTO_WHAT_DESC | QIM_PROTO_WHAT_SUB | QIM_PROTO_WHAT_TAGS |
                                    QIM_PROTO_WHAT_AUX);
  assert_json_str(s->set.desc.public_data, "fn", "Test group");
  assert_int_equal(s->set.desc.defacs_auth, 0x2F);
  assert_int_equal(s->set.desc.defacs_anon, QIM_MODE_NONE);
  assert_true(s->set.sub.present);
  assert_null(s->set.sub.user);
  assert_int_equal(s->set.sub.mode, 0xFF);
  assert_int_equal(s->set.tags.n, 1);
  assert_non_null(json_object_get(s->set.aux, "pin"));
  assert_false(s->set.has_cred);
  assert_int_equal(s->get.what, QIM_PROTO_WHAT_DATA | QIM_PROTO_WHAT_SUB | QIM_PROTO_WHAT_DESC);
  assert_true(s->get.data.present);
  assert_int_equal(s->get.data.limit, 24);
  assert_int_equal(s->get.data.since, 3);
  assert_int_equal(s->get.data.before, 40);
  assert_false(s->get.data.has_ranges);
  assert_true(s->get.desc.has_ims);
  assert_int_equal(s->get.desc.ims_ms, 1444154849841ull);
  assert_str(s->get.sub.user, "usrAbc");
  assert_str(s->get.sub.topic, "grpX");
  assert_int_equal(s->get.sub.limit, 10);
  assert_false(s->get.del.present);
  qim_proto_msg_free(&m);
}

static void test_sub_set_without_mode_keeps_mode_unset(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'sub':{'id':'1','topic':'grpX','set':{'sub':{'user':'usrB'}}}}", &m);
  assert_int_equal(m.u.sub.set.sub.mode, QIM_MODE_UNSET);
  assert_str(m.u.sub.set.sub.user, "usrB");
  assert_int_equal(m.u.sub.set.desc.defacs_auth, QIM_MODE_UNSET);
  qim_proto_msg_free(&m);
  decode_ok("{'sub':{'id':'1','topic':'grpX'}}", &m);
  assert_int_equal(m.u.sub.set.sub.mode, QIM_MODE_UNSET);
  assert_false(m.u.sub.get.present);
  qim_proto_msg_free(&m);
}

static void test_leave_with_unsub(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'leave':{'id':'106195','topic':'grpF6JOFv9koaE','unsub':true}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_LEAVE);
  assert_str(m.topic, "grpF6JOFv9koaE");
  assert_true(m.u.leave.unsub);
  qim_proto_msg_free(&m);
  decode_ok("{'leave':{'id':'106196','topic':'grpF6JOFv9koaE'}}", &m);
  assert_false(m.u.leave.unsub);
  qim_proto_msg_free(&m);
}

static void test_pub_keeps_head_and_content_as_json_and_parses_cmid(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'pub':{'id':'106190','topic':'grpF6JOFv9koaE','noecho':true,"
      "'head':{'replace':':1','mime':'text/x-drafty'},"
      "'content':{'txt':'hi','fmt':[{'tp':'ST','at':0,'len':2}]},'cmid':'AAECAwQFBgcICQoLDA0ODw'}}",
      &m);
  const qim_proto_pub *p = &m.u.pub;
  assert_int_equal(m.kind, QIM_PROTO_PUB);
  assert_true(p->noecho);
  assert_json_str(p->head, "replace", ":1");
  assert_json_str(p->content, "txt", "hi");
  assert_true(json_is_array(json_object_get(p->content, "fmt")));
  assert_true(p->has_cmid);
  for (int i = 0; i < 16; i++) assert_int_equal(p->cmid.b[i], i);
  qim_proto_msg_free(&m);
}

static void test_pub_content_may_be_any_json_or_absent(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'pub':{'id':'1','topic':'grpX','content':'hello'}}", &m);
  assert_string_equal(json_string_value(m.u.pub.content), "hello");
  assert_false(m.u.pub.noecho);
  assert_null(m.u.pub.head);
  assert_false(m.u.pub.has_cmid);
  qim_proto_msg_free(&m);
  decode_ok("{'pub':{'id':'2','topic':'grpX','content':[1,2.5,null]}}", &m);
  assert_true(json_is_array(m.u.pub.content));
  qim_proto_msg_free(&m);
  decode_ok("{'pub':{'id':'3','topic':'grpX'}}", &m);
  assert_null(m.u.pub.content);
  qim_proto_msg_free(&m);
}

static void test_pub_content_outlives_the_message_when_increfed(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'pub':{'id':'1','topic':'grpX','content':{'txt':'kept'}}}", &m);
  json_t *c = json_incref(m.u.pub.content);
  qim_proto_msg_free(&m);
  assert_string_equal(json_string_value(json_object_get(c, "txt")), "kept");
  json_decref(c);
}

static void test_get_data_with_ranges_as_the_sdk_pages(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'get':{'id':'106200','topic':'grpX','what':'data',"
      "'data':{'ranges':[{'low':1,'hi':31},{'low':40}],'limit':10}}}",
      &m);
  const qim_proto_get_query *q = &m.u.get.q;
  assert_int_equal(m.kind, QIM_PROTO_GET);
  assert_int_equal(q->what, QIM_PROTO_WHAT_DATA);
  assert_true(q->data.has_ranges);
  assert_int_equal(q->data.ranges.n, 2);
  assert_int_equal(q->data.ranges.v[0].low, 1);
  assert_int_equal(q->data.ranges.v[0].hi, 31);
  assert_int_equal(q->data.ranges.v[1].low, 40);
  assert_int_equal(q->data.ranges.v[1].hi, 0);
  assert_int_equal(q->data.limit, 10);
  qim_proto_msg_free(&m);
}

static void test_get_what_ignores_unknown_words_and_extra_spaces(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'get':{'id':'1','topic':'grpX','what':'  del  bogus tags cred aux desc '}}", &m);
  assert_int_equal(m.u.get.q.what, QIM_PROTO_WHAT_DEL | QIM_PROTO_WHAT_TAGS | QIM_PROTO_WHAT_CRED |
                                       QIM_PROTO_WHAT_AUX | QIM_PROTO_WHAT_DESC);
  qim_proto_msg_free(&m);
  decode_ok(
      "{'get':{'id':'2','topic':'grpX','what':'del','del':{'since':1,'before':9,'limit':20}}}", &m);
  assert_true(m.u.get.q.del.present);
  assert_int_equal(m.u.get.q.del.since, 1);
  assert_int_equal(m.u.get.q.del.before, 9);
  assert_int_equal(m.u.get.q.del.limit, 20);
  qim_proto_msg_free(&m);
}

static void test_set_reports_which_parts_were_sent(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'set':{'id':'1','topic':'grpX','sub':{'user':'usrY','mode':'JRW'}}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_SET);
  assert_int_equal(m.u.set.q.what, QIM_PROTO_WHAT_SUB);
  assert_str(m.u.set.q.sub.user, "usrY");
  assert_int_equal(m.u.set.q.sub.mode, QIM_MODE_JOIN | QIM_MODE_READ | QIM_MODE_WRITE);
  qim_proto_msg_free(&m);
  decode_ok(
      "{'set':{'id':'2','topic':'me','desc':{'private':{'arch':true}},'tags':[],"
      "'cred':{'meth':'email','val':'x@y.z'}}}",
      &m);
  assert_int_equal(m.u.set.q.what, QIM_PROTO_WHAT_DESC | QIM_PROTO_WHAT_TAGS | QIM_PROTO_WHAT_CRED);
  assert_true(json_is_true(json_object_get(m.u.set.q.desc.private_data, "arch")));
  assert_true(m.u.set.q.tags.present);
  assert_int_equal(m.u.set.q.tags.n, 0);
  assert_true(m.u.set.q.has_cred);
  assert_str(m.u.set.q.cred.val, "x@y.z");
  assert_int_equal(m.u.set.q.sub.mode, QIM_MODE_UNSET);
  qim_proto_msg_free(&m);
}

static void test_del_messages_soft_and_hard(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'del':{'id':'106201','topic':'grpX','what':'msg','delseq':[{'low':3},{'low':5,'hi':8}]}}",
      &m);
  assert_int_equal(m.kind, QIM_PROTO_DEL);
  assert_str(m.topic, "grpX");
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_MSG);
  assert_false(m.u.del.hard);
  assert_int_equal(m.u.del.delseq.n, 2);
  assert_int_equal(m.u.del.delseq.v[0].low, 3);
  assert_int_equal(m.u.del.delseq.v[1].hi, 8);
  qim_proto_msg_free(&m);
  decode_ok("{'del':{'id':'106202','topic':'grpX','delseq':[{'low':1}],'hard':true}}", &m);
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_MSG);
  assert_true(m.u.del.hard);
  qim_proto_msg_free(&m);
}

static void test_del_other_targets(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'del':{'id':'1','topic':'grpX','what':'topic','hard':true}}", &m);
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_TOPIC);
  qim_proto_msg_free(&m);
  decode_ok("{'del':{'id':'2','topic':'grpX','what':'sub','user':'usrY'}}", &m);
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_SUB);
  assert_str(m.u.del.user, "usrY");
  qim_proto_msg_free(&m);
  decode_ok("{'del':{'id':'3','what':'user','hard':true}}", &m);
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_USER);
  assert_null(m.topic);
  qim_proto_msg_free(&m);
  decode_ok("{'del':{'id':'4','what':'cred','cred':{'meth':'email','val':'a@b.c'}}}", &m);
  assert_int_equal(m.u.del.what, QIM_PROTO_DEL_CRED);
  assert_true(m.u.del.has_cred);
  assert_str(m.u.del.cred.meth, "email");
  qim_proto_msg_free(&m);
}

static void test_notes_decode_and_never_carry_an_id(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'note':{'topic':'grpX','what':'recv','seq':5}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_NOTE);
  assert_str(m.topic, "grpX");
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_RECV);
  assert_int_equal(m.u.note.seq, 5);
  qim_proto_msg_free(&m);
  decode_ok("{'note':{'id':'77','topic':'grpX','what':'read','seq':4,'unread':2}}", &m);
  assert_string_equal(m.id, "");
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_READ);
  assert_int_equal(m.u.note.unread, 2);
  qim_proto_msg_free(&m);
  decode_ok("{'note':{'topic':'grpX','what':'kp'}}", &m);
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_KP);
  qim_proto_msg_free(&m);
  decode_ok("{'note':{'topic':'grpX','what':'kpa'}}", &m);
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_KPA);
  qim_proto_msg_free(&m);
  decode_ok("{'note':{'topic':'grpX','what':'kpv'}}", &m);
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_KPV);
  qim_proto_msg_free(&m);
  decode_ok(
      "{'note':{'topic':'usrB','what':'call','seq':3,'event':'offer','payload':{'sdp':'v=0'}}}",
      &m);
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_CALL);
  assert_str(m.u.note.event, "offer");
  assert_json_str(m.u.note.payload, "sdp", "v=0");
  qim_proto_msg_free(&m);
  decode_ok("{'note':{'topic':'grpX','what':'data','payload':[1]}}", &m);
  assert_int_equal(m.u.note.what, QIM_PROTO_NOTE_DATA);
  qim_proto_msg_free(&m);
}

static void test_sync_request_decodes_cursor_and_limits(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'sync':{'id':'s1','cursor':'AbC.dEf_-','limit':100,'max_bytes':65536}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_SYNC);
  assert_string_equal(m.id, "s1");
  assert_str(m.u.sync.cursor, "AbC.dEf_-");
  assert_int_equal(m.u.sync.limit, 100);
  assert_int_equal(m.u.sync.max_bytes, 65536);
  qim_proto_msg_free(&m);
  decode_ok("{'sync':{'id':'s2'}}", &m);
  assert_null(m.u.sync.cursor);
  assert_int_equal(m.u.sync.limit, 0);
  qim_proto_msg_free(&m);
}

static void test_extra_beside_the_payload_is_decoded(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'pub':{'id':'1','topic':'grpX','content':'x'},"
      "'extra':{'attachments':['/v0/file/s/abc.jpg'],'obo':'usrRoot','authlevel':'auth'}}",
      &m);
  assert_int_equal(m.kind, QIM_PROTO_PUB);
  assert_true(m.extra.present);
  assert_int_equal(json_array_size(m.extra.attachments), 1);
  assert_str(m.extra.obo, "usrRoot");
  assert_str(m.extra.authlevel, "auth");
  qim_proto_msg_free(&m);
}

static void test_null_means_absent_everywhere(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok(
      "{'hi':null,'pub':{'id':null,'topic':'grpX','noecho':null,'head':null,'content':null,"
      "'cmid':null},'extra':null}",
      &m);
  assert_int_equal(m.kind, QIM_PROTO_PUB);
  assert_string_equal(m.id, "");
  assert_false(m.u.pub.noecho);
  assert_null(m.u.pub.head);
  assert_null(m.u.pub.content);
  assert_false(m.extra.present);
  qim_proto_msg_free(&m);
}

static void test_unknown_keys_are_ignored(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'zzz':5,'pub':{'id':'1','topic':'grpX','content':'x','later':[1,{'a':null}]}}", &m);
  assert_int_equal(m.kind, QIM_PROTO_PUB);
  qim_proto_msg_free(&m);
}

static void test_id_is_kept_exactly_as_received(void **state) {
  (void)state;
  qim_proto_msg m;
  char id64[65];
  memset(id64, 'x', 64);
  id64[64] = 0;
  char frame[200];
  snprintf(frame, sizeof frame, "{'leave':{'id':'%s','topic':'t'}}", id64);
  decode_ok(frame, &m);
  assert_string_equal(m.id, id64);
  qim_proto_msg_free(&m);
  /* JSON escapes are undone: the id is the string value, UTF-8 included. */
  decode_ok("{'leave':{'id':'\\u0041b \xc3\xa9\\n','topic':'t'}}", &m);
  assert_string_equal(m.id, "Ab \xc3\xa9\n");
  qim_proto_msg_free(&m);
}

static void test_largest_accepted_numbers(void **state) {
  (void)state;
  qim_proto_msg m;
  decode_ok("{'note':{'topic':'grpX','what':'read','seq':2147483647,'unread':2147483647}}", &m);
  assert_int_equal(m.u.note.seq, 2147483647u);
  qim_proto_msg_free(&m);
  decode_ok("{'get':{'id':'1','topic':'t','what':'data','data':{'since':0,'limit':2147483647}}}",
            &m);
  assert_int_equal(m.u.get.q.data.limit, 2147483647u);
  qim_proto_msg_free(&m);
}

/* `levels` nested arrays inside pub.content: total depth is levels + 2. */
static char *nested(unsigned levels) {
  size_t cap = 2 * levels + 64;
  char *s = malloc(cap), *p = s;
  p += sprintf(p, "{\"pub\":{\"topic\":\"t\",\"content\":");
  for (unsigned i = 0; i < levels; i++) *p++ = '[';
  for (unsigned i = 0; i < levels; i++) *p++ = ']';
  strcpy(p, "}}");
  return s;
}

static void test_depth_limit_counts_brackets_outside_strings(void **state) {
  (void)state;
  qim_proto_msg m;
  qim_proto_error e;
  char *ok = nested(30);
  assert_int_equal(qim_proto_decode(ok, strlen(ok), 0, &m, &e), 0);
  qim_proto_msg_free(&m);
  char *deep = nested(31);
  assert_int_equal(qim_proto_decode(deep, strlen(deep), 0, &m, &e), -EINVAL);
  assert_string_equal(e.detail, "too deep");
  assert_int_equal(qim_proto_decode(deep, strlen(deep), 40, &m, &e), 0);
  qim_proto_msg_free(&m);
  assert_int_equal(qim_proto_decode(ok, strlen(ok), 4, &m, &e), -EINVAL);
  free(ok);
  free(deep);
  /* Brackets inside strings, escaped quotes included, do not count. */
  decode_ok(
      "{'pub':{'topic':'t','content':'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\'{{{{{{{{{{{{{{{{{{"
      "{{{{{{{{{{{{{{{{{{{'}}",
      &m);
  qim_proto_msg_free(&m);
}

static void test_decoder_reads_exactly_len_bytes(void **state) {
  (void)state;
  const char buf[] = "{\"hi\":{\"ver\":\"0.25\"}}GARBAGE";
  qim_proto_msg m;
  qim_proto_error e;
  assert_int_equal(qim_proto_decode(buf, strlen(buf) - 7, 0, &m, &e), 0);
  assert_int_equal(m.kind, QIM_PROTO_HI);
  qim_proto_msg_free(&m);
  assert_int_equal(qim_proto_decode(buf, strlen(buf), 0, &m, &e), -EINVAL);
}

static void test_free_accepts_null_zeroed_and_freed_messages(void **state) {
  (void)state;
  qim_proto_msg m;
  qim_proto_msg_free(NULL);
  memset(&m, 0, sizeof m);
  qim_proto_msg_free(&m);
  decode_ok("{'login':{'id':'1','scheme':'basic','secret':'YWJj'}}", &m);
  qim_proto_msg_free(&m);
  assert_int_equal(m.kind, QIM_PROTO_NONE);
  qim_proto_msg_free(&m);
}

/* jansson's allocator, failing the n-th call: the decoder must report the failure
 * (or succeed, once n is past what the frame needs) and never leak or crash. */
static int alloc_countdown;
static void *failing_malloc(size_t n) {
  return --alloc_countdown == 0 ? NULL : malloc(n);
}

static void test_jansson_out_of_memory_is_enomem(void **state) {
  (void)state;
  char *f = dq("{'pub':{'id':'1','topic':'grpX','content':{'txt':'hello','fmt':[{'at':1}]}}}");
  int enomem = 0, ok = 0;
  for (int n = 1; n < 64; n++) {
    qim_proto_msg m;
    qim_proto_error e;
    alloc_countdown = n;
    json_set_alloc_funcs(failing_malloc, free);
    int rc = qim_proto_decode(f, strlen(f), 0, &m, &e);
    json_set_alloc_funcs(malloc, free);
    /* jansson reports some failed allocations as syntax errors: 400 is tolerated. */
    assert_true(rc == 0 || rc == -ENOMEM || rc == -EINVAL);
    enomem += rc == -ENOMEM;
    ok += rc == 0;
    qim_proto_msg_free(&m);
  }
  assert_true(enomem > 0);
  assert_true(ok > 0);
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hi_from_the_sdk_decodes_every_field),
      cmocka_unit_test(test_hi_minimal_leaves_absent_fields_null),
      cmocka_unit_test(test_acc_create_with_login_decodes_secret_desc_tags_cred),
      cmocka_unit_test(test_acc_defacs_absent_members_are_unset),
      cmocka_unit_test(test_login_basic_and_token_decode_secret_bytes),
      cmocka_unit_test(test_sub_me_with_get_sub_desc),
      cmocka_unit_test(test_sub_new_group_decodes_set_and_get_options),
      cmocka_unit_test(test_sub_set_without_mode_keeps_mode_unset),
      cmocka_unit_test(test_leave_with_unsub),
      cmocka_unit_test(test_pub_keeps_head_and_content_as_json_and_parses_cmid),
      cmocka_unit_test(test_pub_content_may_be_any_json_or_absent),
      cmocka_unit_test(test_pub_content_outlives_the_message_when_increfed),
      cmocka_unit_test(test_get_data_with_ranges_as_the_sdk_pages),
      cmocka_unit_test(test_get_what_ignores_unknown_words_and_extra_spaces),
      cmocka_unit_test(test_set_reports_which_parts_were_sent),
      cmocka_unit_test(test_del_messages_soft_and_hard),
      cmocka_unit_test(test_del_other_targets),
      cmocka_unit_test(test_notes_decode_and_never_carry_an_id),
      cmocka_unit_test(test_sync_request_decodes_cursor_and_limits),
      cmocka_unit_test(test_extra_beside_the_payload_is_decoded),
      cmocka_unit_test(test_null_means_absent_everywhere),
      cmocka_unit_test(test_unknown_keys_are_ignored),
      cmocka_unit_test(test_id_is_kept_exactly_as_received),
      cmocka_unit_test(test_largest_accepted_numbers),
      cmocka_unit_test(test_depth_limit_counts_brackets_outside_strings),
      cmocka_unit_test(test_decoder_reads_exactly_len_bytes),
      cmocka_unit_test(test_free_accepts_null_zeroed_and_freed_messages),
      cmocka_unit_test(test_jansson_out_of_memory_is_enomem),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
