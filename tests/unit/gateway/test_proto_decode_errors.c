/*
 * test_proto_decode_errors.c — one table row per way a client frame can be refused:
 * unparsable JSON, envelope problems, a wrong type in every field of every message,
 * bad base64, out-of-range and negative numbers, bad cmids, and the silent {note}
 * gates. Each row pins the status, the echoed id/topic, the field and silence.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/err.h"
#include "testsupport.h"

typedef struct err_case {
  const char *frame; /* ' stands for " */
  const char *id;    /* expected err.id */
  const char *field; /* expected err.field; NULL = not checked */
  int silent;        /* expected err.silent */
  int rc;            /* expected status; 0 in the table means -EINVAL */
} err_case;

#define NOID ""
#define CMID_ERR QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID

static const err_case cases[] = {
    /* Unparsable or not a message: no id can be found. */
    {"", NOID, "", 0, 0},
    {"{'hi':", NOID, "", 0, 0},
    {"{'hi':{}} x", NOID, "", 0, 0},
    {"{'hi':{},}", NOID, "", 0, 0},
    {"{hi:{}}", NOID, "", 0, 0},
    {"1", NOID, "", 0, 0},
    {"[1,2]", NOID, "", 0, 0},
    {"'hi'", NOID, "", 0, 0},
    {"null", NOID, "", 0, 0},
    {"{}", NOID, "", 0, 0},
    {"{'foo':{'id':'1'}}", NOID, "", 0, 0},
    {"{'extra':{}}", NOID, "", 0, 0},
    {"{'pub':null}", NOID, "", 0, 0},
    {"{'pub':5}", NOID, "pub", 0, 0},
    {"{'pub':'x'}", NOID, "pub", 0, 0},
    {"{'pub':[{'id':'1'}]}", NOID, "pub", 0, 0},
    /* Duplicate keys, anywhere. */
    {"{'hi':{'id':'1','id':'2'}}", NOID, "", 0, 0},
    {"{'hi':{'id':'1'},'hi':{'id':'2'}}", NOID, "", 0, 0},
    {"{'pub':{'id':'1','topic':'t','content':{'a':1,'a':2}}}", NOID, "", 0, 0},
    /* Bad UTF-8, NUL in a string, numbers jansson cannot hold. */
    {"{'hi':{'id':'1','ua':'\xff'}}", NOID, "", 0, 0},
    {"{'hi':{'id':'1','ua':'a\\u0000b'}}", NOID, "", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':99999999999999999999999}}", NOID, "", 0, 0},
    /* Two payload keys: the id of the first (in hi, acc, login, sub ... order). */
    {"{'hi':{'id':'1','ver':'0.25'},'login':{'id':'2'}}", "1", "", 0, 0},
    {"{'pub':{'id':'9','topic':'t'},'sub':{'id':'8','topic':'t'}}", "8", "", 0, 0},
    {"{'note':{'topic':'t','what':'kp'},'sync':{'id':'3'}}", NOID, "", 0, 0},
    /* id itself: wrong type or too long means there is nothing to echo. */
    {"{'hi':{'id':5,'ver':'0.25'}}", NOID, "id", 0, 0},
    {"{'hi':{'id':['1']}}", NOID, "id", 0, 0},
    {"{'hi':{'id':'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}}", NOID,
     "id", 0, 0},
    /* extra. */
    {"{'hi':{'id':'1'},'extra':5}", "1", "extra", 0, 0},
    {"{'hi':{'id':'1'},'extra':{'attachments':'a'}}", "1", "attachments", 0, 0},
    {"{'hi':{'id':'1'},'extra':{'attachments':[1]}}", "1", "attachments", 0, 0},
    {"{'hi':{'id':'1'},'extra':{'obo':5}}", "1", "obo", 0, 0},
    {"{'hi':{'id':'1'},'extra':{'authlevel':true}}", "1", "authlevel", 0, 0},
    /* hi. */
    {"{'hi':{'id':'1','ver':1}}", "1", "ver", 0, 0},
    {"{'hi':{'id':'1','ua':true}}", "1", "ua", 0, 0},
    {"{'hi':{'id':'1','dev':[]}}", "1", "dev", 0, 0},
    {"{'hi':{'id':'1','platf':{}}}", "1", "platf", 0, 0},
    {"{'hi':{'id':'1','lang':1}}", "1", "lang", 0, 0},
    {"{'hi':{'id':'1','bkg':'yes'}}", "1", "bkg", 0, 0},
    {"{'hi':{'id':'1','bkg':1}}", "1", "bkg", 0, 0},
    {"{'hi':{'id':'1','device':5}}", "1", "device", 0, 0},
    /* acc. */
    {"{'acc':{'id':'2','user':1}}", "2", "user", 0, 0},
    {"{'acc':{'id':'2','scheme':1}}", "2", "scheme", 0, 0},
    {"{'acc':{'id':'2','secret':1}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','secret':'abc'}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','secret':'Ym9i=mx5'}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','secret':'Ym9ibXg1enV0ODU6Ym9iMTIz'.}}", NOID, "", 0, 0},
    {"{'acc':{'id':'2','secret':'Ym9-bXg1'}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','secret':'Ym9ibXg'}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','secret':'===='}}", "2", "secret", 0, 0},
    {"{'acc':{'id':'2','token':1}}", "2", "token", 0, 0},
    {"{'acc':{'id':'2','tmpscheme':1}}", "2", "tmpscheme", 0, 0},
    {"{'acc':{'id':'2','tmpsecret':'!!!!'}}", "2", "tmpsecret", 0, 0},
    {"{'acc':{'id':'2','status':1}}", "2", "status", 0, 0},
    {"{'acc':{'id':'2','authlevel':1}}", "2", "authlevel", 0, 0},
    {"{'acc':{'id':'2','login':'true'}}", "2", "login", 0, 0},
    {"{'acc':{'id':'2','desc':5}}", "2", "desc", 0, 0},
    {"{'acc':{'id':'2','desc':{'defacs':5}}}", "2", "defacs", 0, 0},
    {"{'acc':{'id':'2','desc':{'defacs':{'auth':5}}}}", "2", "auth", 0, 0},
    {"{'acc':{'id':'2','desc':{'defacs':{'auth':'JRX'}}}}", "2", "auth", 0, 0},
    {"{'acc':{'id':'2','desc':{'defacs':{'anon':'NJ'}}}}", "2", "anon", 0, 0},
    {"{'acc':{'id':'2','tags':'a'}}", "2", "tags", 0, 0},
    {"{'acc':{'id':'2','tags':[1]}}", "2", "tags", 0, 0},
    {"{'acc':{'id':'2','cred':{}}}", "2", "cred", 0, 0},
    {"{'acc':{'id':'2','cred':[5]}}", "2", "cred", 0, 0},
    {"{'acc':{'id':'2','cred':[{'meth':1}]}}", "2", "meth", 0, 0},
    {"{'acc':{'id':'2','cred':[{'val':1}]}}", "2", "val", 0, 0},
    {"{'acc':{'id':'2','cred':[{'resp':1}]}}", "2", "resp", 0, 0},
    {"{'acc':{'id':'2','cred':[{'params':5}]}}", "2", "params", 0, 0},
    /* login. */
    {"{'login':{'id':'3','scheme':5}}", "3", "scheme", 0, 0},
    {"{'login':{'id':'3','secret':5}}", "3", "secret", 0, 0},
    {"{'login':{'id':'3','secret':'a'}}", "3", "secret", 0, 0},
    {"{'login':{'id':'3','secret':'YQ=a'}}", "3", "secret", 0, 0},
    {"{'login':{'id':'3','cred':5}}", "3", "cred", 0, 0},
    /* sub. */
    {"{'sub':{'id':'4'}}", "4", "topic", 0, 0},
    {"{'sub':{'id':'4','topic':''}}", "4", "topic", 0, 0},
    {"{'sub':{'id':'4','topic':5}}", "4", "topic", 0, 0},
    {"{'sub':{'id':'4','topic':'t','bkg':1}}", "4", "bkg", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':5}}", "4", "set", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'desc':5}}}", "4", "desc", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'sub':5}}}", "4", "sub", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'sub':{'mode':'Q'}}}}", "4", "mode", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'sub':{'mode':'+W'}}}}", "4", "mode", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'sub':{'user':5}}}}", "4", "user", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'tags':{}}}}", "4", "tags", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'cred':[]}}}", "4", "cred", 0, 0},
    {"{'sub':{'id':'4','topic':'t','set':{'aux':[]}}}", "4", "aux", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':5}}", "4", "get", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'what':5}}}", "4", "what", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'desc':5}}}", "4", "desc", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'desc':{'ims':'yesterday'}}}}", "4", "ims", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'desc':{'ims':5}}}}", "4", "ims", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'sub':{'limit':-1}}}}", "4", "limit", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'sub':{'user':5}}}}", "4", "user", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'sub':{'topic':5}}}}", "4", "topic", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'since':1.5}}}}", "4", "since", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'since':1.0}}}}", "4", "since", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'before':'2'}}}}", "4", "before", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'ranges':5}}}}", "4", "ranges", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'ranges':[5]}}}}", "4", "ranges", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'ranges':[{'low':-1}]}}}}", "4", "low", 0, 0},
    {"{'sub':{'id':'4','topic':'t','get':{'data':{'ranges':[{'low':1,'hi':'2'}]}}}}", "4", "hi", 0,
     0},
    {"{'sub':{'id':'4','topic':'t','get':{'del':{'before':2147483648}}}}", "4", "before", 0, 0},
    /* leave. */
    {"{'leave':{'id':'5'}}", "5", "topic", 0, 0},
    {"{'leave':{'id':'5','topic':'t','unsub':'yes'}}", "5", "unsub", 0, 0},
    /* pub. */
    {"{'pub':{'id':'6','content':'x'}}", "6", "topic", 0, 0},
    {"{'pub':{'id':'6','topic':'t','noecho':1}}", "6", "noecho", 0, 0},
    {"{'pub':{'id':'6','topic':'t','head':5}}", "6", "head", 0, 0},
    {"{'pub':{'id':'6','topic':'t','head':[]}}", "6", "head", 0, 0},
    {"{'pub':{'id':'6','topic':'t','cmid':5}}", "6", "cmid", 0, 0},
    {"{'pub':{'id':'6','topic':'t','cmid':'short'}}", "6", "cmid", 0, CMID_ERR},
    {"{'pub':{'id':'6','topic':'t','cmid':'AAAAAAAAAAAAAAAAAAAAAA'}}", "6", "cmid", 0, CMID_ERR},
    {"{'pub':{'id':'6','topic':'t','cmid':'AAAAAAAAAAAAAAAAAAAAAR'}}", "6", "cmid", 0, CMID_ERR},
    {"{'pub':{'id':'6','topic':'t','cmid':'AAAAAAAAAAAAAAAAAAAA*Q'}}", "6", "cmid", 0, CMID_ERR},
    /* get. */
    {"{'get':{'id':'7','topic':'t'}}", "7", "what", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':''}}", "7", "what", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':'bogus words'}}", "7", "what", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':5}}", "7", "what", 0, 0},
    {"{'get':{'id':'7','what':'data'}}", "7", "topic", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':'data','data':{'limit':'10'}}}", "7", "limit", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':'data','data':5}}", "7", "data", 0, 0},
    {"{'get':{'id':'7','topic':'t','what':'del','del':[]}}", "7", "del", 0, 0},
    /* set. */
    {"{'set':{'id':'8','topic':'t'}}", "8", "", 0, 0},
    {"{'set':{'id':'8','topic':'t','desc':5}}", "8", "desc", 0, 0},
    {"{'set':{'id':'8','topic':'t','tags':[1]}}", "8", "tags", 0, 0},
    {"{'set':{'id':'8','topic':'t','cred':5}}", "8", "cred", 0, 0},
    {"{'set':{'id':'8','topic':'t','aux':5}}", "8", "aux", 0, 0},
    {"{'set':{'id':'8','topic':'t','sub':{'mode':'JX'}}}", "8", "mode", 0, 0},
    {"{'set':{'id':'8','desc':{}}}", "8", "topic", 0, 0},
    /* del. */
    {"{'del':{'id':'9','topic':'t','what':'bogus'}}", "9", "what", 0, 0},
    {"{'del':{'id':'9','topic':'t','what':5}}", "9", "what", 0, 0},
    {"{'del':{'id':'9','topic':'t','hard':'true'}}", "9", "hard", 0, 0},
    {"{'del':{'id':'9','topic':'t','delseq':5}}", "9", "delseq", 0, 0},
    {"{'del':{'id':'9','topic':'t','delseq':[{'low':'1'}]}}", "9", "low", 0, 0},
    {"{'del':{'id':'9','topic':'t','delseq':[{'low':1,'hi':-3}]}}", "9", "hi", 0, 0},
    {"{'del':{'id':'9','topic':'t','user':5}}", "9", "user", 0, 0},
    {"{'del':{'id':'9','topic':'t','cred':5}}", "9", "cred", 0, 0},
    {"{'del':{'id':'9','delseq':[{'low':1}]}}", "9", "topic", 0, 0},
    {"{'del':{'id':'9','what':'sub','user':'usrX'}}", "9", "topic", 0, 0},
    /* note: type errors are answered (Tinode's JSON decoder fails), with no id. */
    {"{'note':{'topic':5,'what':'kp'}}", NOID, "topic", 0, 0},
    {"{'note':{'topic':'t','what':5}}", NOID, "what", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':'1'}}", NOID, "seq", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':-1}}", NOID, "seq", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':2147483648}}", NOID, "seq", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':4294967296}}", NOID, "seq", 0, 0},
    {"{'note':{'topic':'t','what':'read','seq':1,'unread':1.5}}", NOID, "unread", 0, 0},
    {"{'note':{'topic':'t','what':'call','event':5}}", NOID, "event", 0, 0},
    /* note: semantic gates are silent. */
    {"{'note':{'topic':'t','what':'bogus'}}", NOID, "what", 1, 0},
    {"{'note':{'topic':'t'}}", NOID, "what", 1, 0},
    {"{'note':{'what':'kp'}}", NOID, "topic", 1, 0},
    {"{'note':{'topic':'','what':'kp'}}", NOID, "topic", 1, 0},
    {"{'note':{'topic':'t','what':'kp','seq':3}}", NOID, "seq", 1, 0},
    {"{'note':{'topic':'t','what':'kpa','seq':3}}", NOID, "seq", 1, 0},
    {"{'note':{'topic':'t','what':'read'}}", NOID, "seq", 1, 0},
    {"{'note':{'topic':'t','what':'recv','seq':0}}", NOID, "seq", 1, 0},
    {"{'note':{'topic':'t','what':'data'}}", NOID, "payload", 1, 0},
    /* sync. */
    {"{'sync':{'id':'10','cursor':5}}", "10", "cursor", 0, 0},
    {"{'sync':{'id':'10','limit':'10'}}", "10", "limit", 0, 0},
    {"{'sync':{'id':'10','max_bytes':-1}}", "10", "max_bytes", 0, 0},
    {"{'sync':{'id':'10','limit':2147483648}}", "10", "limit", 0, 0},
    {"{'sync':{'id':'10','limit':1e3}}", "10", "limit", 0, 0},
};

static void test_every_bad_frame_is_refused_as_the_table_says(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const err_case *c = &cases[i];
    char *f = strdup(c->frame);
    for (char *p = f; *p; p++)
      if (*p == '\'') *p = '"';
    qim_proto_msg m;
    qim_proto_error e;
    int rc = qim_proto_decode(f, strlen(f), 0, &m, &e);
    int want_rc = c->rc ? c->rc : -EINVAL;
    if (rc != want_rc || strcmp(e.id, c->id) || (c->field && strcmp(e.field, c->field)) ||
        e.silent != (c->silent != 0))
      print_error("row %zu: %s -> rc %d id '%s' field '%s' (%s) silent %d\n", i, f, rc, e.id,
                  e.field, e.detail, e.silent);
    assert_int_equal(rc, want_rc);
    assert_string_equal(e.id, c->id);
    if (c->field) assert_string_equal(e.field, c->field);
    assert_int_equal(e.silent, c->silent != 0);
    assert_int_equal(e.code, 400);
    assert_string_equal(e.text, "malformed");
    assert_non_null(e.detail);
    assert_true(*e.detail);
    /* A failed decode leaves nothing behind; freeing it is still fine. */
    assert_int_equal(m.kind, QIM_PROTO_NONE);
    assert_null(m._root);
    qim_proto_msg_free(&m);
    free(f);
  }
}

static void test_error_names_the_kind_and_topic_once_the_payload_is_known(void **state) {
  (void)state;
  const char *f = "{\"pub\":{\"id\":\"6\",\"topic\":\"grpX\",\"noecho\":1}}";
  qim_proto_msg m;
  qim_proto_error e;
  assert_int_equal(qim_proto_decode(f, strlen(f), 0, &m, &e), -EINVAL);
  assert_int_equal(e.kind, QIM_PROTO_PUB);
  assert_string_equal(e.topic, "grpX");
  assert_string_equal(e.detail, "not a boolean");
  f = "{\"pub\":5}";
  assert_int_equal(qim_proto_decode(f, strlen(f), 0, &m, &e), -EINVAL);
  assert_int_equal(e.kind, QIM_PROTO_NONE);
  assert_string_equal(e.topic, "");
  f = "{\"hi\":{\"id\":\"1\",\"id\":\"2\"}}";
  assert_int_equal(qim_proto_decode(f, strlen(f), 0, &m, &e), -EINVAL);
  assert_string_equal(e.detail, "duplicate key");
}

/* A list one longer than its limit, e.g. [{"low":1},...] for delseq. */
static char *long_list(const char *prefix, const char *item, size_t count, const char *suffix) {
  size_t cap = strlen(prefix) + count * (strlen(item) + 1) + strlen(suffix) + 1;
  char *s = malloc(cap), *p = s;
  p += sprintf(p, "%s", prefix);
  for (size_t i = 0; i < count; i++) p += sprintf(p, "%s%s", i ? "," : "", item);
  strcpy(p, suffix);
  return s;
}

static void check_list_limit(const char *prefix, const char *item, size_t max, const char *suffix,
                             const char *field) {
  qim_proto_msg m;
  qim_proto_error e;
  char *ok = long_list(prefix, item, max, suffix);
  assert_int_equal(qim_proto_decode(ok, strlen(ok), 0, &m, &e), 0);
  qim_proto_msg_free(&m);
  char *bad = long_list(prefix, item, max + 1, suffix);
  assert_int_equal(qim_proto_decode(bad, strlen(bad), 0, &m, &e), -EINVAL);
  assert_string_equal(e.field, field);
  assert_string_equal(e.detail, "too many entries");
  free(ok);
  free(bad);
}

static void test_lists_are_bounded(void **state) {
  (void)state;
  check_list_limit("{\"del\":{\"id\":\"1\",\"topic\":\"t\",\"delseq\":[", "{\"low\":1}",
                   QIM_PROTO_RANGES_MAX, "]}}", "delseq");
  check_list_limit(
      "{\"get\":{\"id\":\"1\",\"topic\":\"t\",\"what\":\"data\",\"data\":{\"ranges\":[",
      "{\"low\":1,\"hi\":2}", QIM_PROTO_RANGES_MAX, "]}}}", "ranges");
  check_list_limit("{\"acc\":{\"id\":\"1\",\"tags\":[", "\"tag\"", QIM_PROTO_TAGS_MAX, "]}}",
                   "tags");
  check_list_limit("{\"login\":{\"id\":\"1\",\"cred\":[", "{\"meth\":\"email\"}",
                   QIM_PROTO_CREDS_MAX, "]}}", "cred");
  check_list_limit("{\"hi\":{\"id\":\"1\"},\"extra\":{\"attachments\":[", "\"/f\"",
                   QIM_PROTO_ATTACHMENTS_MAX, "]}}", "attachments");
}

/* A string member of exactly `n` bytes. */
static char *with_string(const char *fmt, size_t n) {
  char *v = malloc(n + 1);
  memset(v, 'a', n);
  v[n] = 0;
  char *s = malloc(strlen(fmt) + n + 1);
  sprintf(s, fmt, v);
  free(v);
  return s;
}

static void check_string_limit(const char *fmt, size_t max, const char *field) {
  qim_proto_msg m;
  qim_proto_error e;
  char *ok = with_string(fmt, max);
  assert_int_equal(qim_proto_decode(ok, strlen(ok), 0, &m, &e), 0);
  qim_proto_msg_free(&m);
  char *bad = with_string(fmt, max + 1);
  assert_int_equal(qim_proto_decode(bad, strlen(bad), 0, &m, &e), -EINVAL);
  assert_string_equal(e.field, field);
  assert_string_equal(e.detail, "string too long");
  free(ok);
  free(bad);
}

static void test_strings_are_bounded(void **state) {
  (void)state;
  check_string_limit("{\"leave\":{\"id\":\"1\",\"topic\":\"%s\"}}", QIM_PROTO_NAME_MAX, "topic");
  check_string_limit("{\"hi\":{\"id\":\"1\",\"ua\":\"%s\"}}", QIM_PROTO_STR_MAX, "ua");
  check_string_limit("{\"hi\":{\"id\":\"1\",\"device\":\"%s\"}}", QIM_PROTO_NAME_MAX, "device");
  check_string_limit("{\"sync\":{\"id\":\"1\",\"cursor\":\"%s\"}}", QIM_PROTO_STR_MAX, "cursor");
  /* 4096 base64 characters is the largest secret (3072 bytes). */
  check_string_limit("{\"login\":{\"id\":\"1\",\"secret\":\"%s\"}}", QIM_PROTO_SECRET_MAX,
                     "secret");
}

static void test_topic_too_long_still_echoes_the_id(void **state) {
  (void)state;
  char *f = with_string("{\"pub\":{\"id\":\"42\",\"topic\":\"%s\"}}", QIM_PROTO_NAME_MAX + 1);
  qim_proto_msg m;
  qim_proto_error e;
  assert_int_equal(qim_proto_decode(f, strlen(f), 0, &m, &e), -EINVAL);
  assert_string_equal(e.id, "42");
  assert_string_equal(e.topic, "");
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_bad_frame_is_refused_as_the_table_says),
      cmocka_unit_test(test_error_names_the_kind_and_topic_once_the_payload_is_known),
      cmocka_unit_test(test_lists_are_bounded),
      cmocka_unit_test(test_strings_are_bounded),
      cmocka_unit_test(test_topic_too_long_still_echoes_the_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
