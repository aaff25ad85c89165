/*
 * test_gateway_session.c — the Tinode session layer against a real in-process server
 * (store, commit, fanout, mailbox, groups, history, gateway), driven by a raw WebSocket
 * client: handshake order, accounts and logins, tokens, group creation and joining,
 * publish → {data} through the pipeline, history, receipts, errors, and the pipeline
 * pause control. The Node suites (tests/e2e) cover the same ground with the real SDK;
 * these run without Node and under the sanitizers.
 */
#include "gwclient.h"

#include "gateway/gateway_int.h"

static gwsrv srv;
static int counter;

static int setup(void **state) {
  (void)state;
  return gwsrv_start(&srv);
}

static int teardown(void **state) {
  (void)state;
  gwsrv_stop(&srv);
  return 0;
}

/* A login nobody used yet. */
static const char *fresh_login(char *buf, size_t cap, const char *prefix) {
  snprintf(buf, cap, "%s%d", prefix, ++counter);
  return buf;
}

static void signed_up(gwc *c, const char *prefix) {
  char login[32];
  assert_int_equal(gwc_open(c, srv.port), 0);
  assert_int_equal(gwc_signup(c, fresh_login(login, sizeof login, prefix), "secret-pw"), 0);
}

static json_t *ctrl_of(json_t *j) { return json_object_get(j, "ctrl"); }
static json_t *params_of(json_t *j) { return json_object_get(ctrl_of(j), "params"); }

/* Creates a group as c; returns its name in `topic`. */
static void create_group(gwc *c, char topic[QIM_TOPIC_NAME_CAP]) {
  gwc_sendf(c, "{\"sub\":{\"id\":\"g1\",\"topic\":\"new1\",\"set\":{\"desc\":{\"public\":{\"fn\":\"G\"}}},"
               "\"get\":{\"what\":\"desc sub\"}}}");
  json_t *j;
  assert_int_equal(gwc_code(c, "g1", &j), 200);
  const char *t = json_string_value(json_object_get(ctrl_of(j), "topic"));
  assert_non_null(t);
  assert_int_equal(strlen(t), QIM_TOPIC_NAME_LEN);
  assert_memory_equal(t, "grp", 3);
  assert_string_equal(json_string_value(json_object_get(params_of(j), "tmpname")), "new1");
  assert_string_equal(json_string_value(json_object_get(json_object_get(params_of(j), "acs"), "mode")), "JRWPASDO");
  snprintf(topic, QIM_TOPIC_NAME_CAP, "%s", t);
  json_decref(j);
  /* The embedded get: meta desc then meta sub, same id. */
  j = gwc_wait(c, "meta", "g1", 5000);
  assert_non_null(json_object_get(json_object_get(j, "meta"), "desc"));
  json_decref(j);
  j = gwc_wait(c, "meta", "g1", 5000);
  assert_non_null(json_object_get(json_object_get(j, "meta"), "sub"));
  json_decref(j);
}

static void join_group(gwc *c, const char *topic, const char *id) {
  gwc_sendf(c, "{\"sub\":{\"id\":\"%s\",\"topic\":\"%s\"}}", id, topic);
  json_t *j;
  assert_int_equal(gwc_code(c, id, &j), 200);
  assert_string_equal(json_string_value(json_object_get(json_object_get(params_of(j), "acs"), "mode")), "JRWPS");
  json_decref(j);
}

/* Publishes text as c; returns the seq of the 202. */
static int publish(gwc *c, const char *topic, const char *text, bool noecho) {
  char id[16];
  snprintf(id, sizeof id, "p%d", ++counter);
  gwc_sendf(c, "{\"pub\":{\"id\":\"%s\",\"topic\":\"%s\",\"noecho\":%s,\"content\":\"%s\"}}", id, topic,
            noecho ? "true" : "false", text);
  json_t *j;
  int code = gwc_code(c, id, &j);
  int seq = code == 202 ? (int)json_integer_value(json_object_get(params_of(j), "seq")) : -code;
  json_decref(j);
  return seq;
}

/* Publishes a noecho text with a client-chosen cmid (the n-th); returns the seq of the 202. */
static int publish_cmid(gwc *c, const char *topic, int n) {
  char id[16];
  snprintf(id, sizeof id, "p%d", ++counter);
  gwc_sendf(
      c,
      "{\"pub\":{\"id\":\"%s\",\"topic\":\"%s\",\"noecho\":true,\"cmid\":\"cmidcmidcmidcmid%05dA\","
      "\"content\":\"own\"}}",
      id, topic, n);
  json_t *j;
  int code = gwc_code(c, id, &j);
  int seq = code == 202 ? (int)json_integer_value(json_object_get(params_of(j), "seq")) : -code;
  json_decref(j);
  return seq;
}

/* Waits for the {data} of `seq` on c; returns its content string (static buffer) or NULL. */
static const char *data_of(gwc *c, int seq, int timeout_ms) {
  static char content[256];
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - wsc_now_ms();
    if (left <= 0) return NULL;
    json_t *j = gwc_wait(c, "data", NULL, (int)left);
    if (!j) return NULL;
    json_t *d = json_object_get(j, "data");
    if (json_integer_value(json_object_get(d, "seq")) == seq) {
      snprintf(content, sizeof content, "%s", json_string_value(json_object_get(d, "content")));
      json_decref(j);
      return content;
    }
    json_decref(j);
  }
}

/* ---- handshake and accounts ------------------------------------------------------------------- */

static void test_requests_before_hi_get_409_and_before_login_401(void **state) {
  (void)state;
  gwc c;
  assert_int_equal(gwc_open(&c, srv.port), 0);
  gwc_sendf(&c, "{\"sub\":{\"id\":\"a\",\"topic\":\"me\"}}");
  assert_int_equal(gwc_code(&c, "a", NULL), 409);
  gwc_sendf(&c, "{\"note\":{\"topic\":\"me\",\"what\":\"kp\"}}"); /* dropped: no reply */
  gwc_sendf(&c, "{\"hi\":{\"id\":\"b\",\"ver\":\"0.25.3\"}}");
  json_t *j;
  assert_int_equal(gwc_code(&c, "b", &j), 201);
  assert_int_equal(json_integer_value(json_object_get(params_of(j), "maxMessageSize")), 131072);
  json_decref(j);
  gwc_sendf(&c, "{\"pub\":{\"id\":\"c\",\"topic\":\"grpAAAAAAAAAAAAAAAAAAAAAAA\",\"content\":\"x\"}}");
  assert_int_equal(gwc_code(&c, "c", NULL), 401);
  gwc_sendf(&c, "{\"hi\":{\"id\":\"d\",\"ver\":\"0.26.0\"}}");
  assert_int_equal(gwc_code(&c, "d", NULL), 409);
  gwc_sendf(&c, "1"); /* the probe */
  int op;
  char *p;
  size_t n;
  assert_int_equal(wsc_recv_data(&c.w, &op, &p, &n, 5000), 0);
  assert_string_equal(p, "0");
  free(p);
  gwc_close(&c);
}

static void test_old_version_gets_505_and_garbage_400(void **state) {
  (void)state;
  gwc c;
  assert_int_equal(gwc_open(&c, srv.port), 0);
  gwc_sendf(&c, "{\"hi\":{\"id\":\"a\",\"ver\":\"0.15\"}}");
  assert_int_equal(gwc_code(&c, "a", NULL), 505);
  gwc_sendf(&c, "{\"hi\":{\"id\":\"b\",\"ver\":\"banana\"}}");
  assert_int_equal(gwc_code(&c, "b", NULL), 400);
  gwc_sendf(&c, "{not json");
  json_t *j = gwc_wait(&c, "ctrl", NULL, 5000);
  assert_int_equal(json_integer_value(json_object_get(ctrl_of(j), "code")), 400);
  assert_null(json_object_get(ctrl_of(j), "id"));
  json_decref(j);
  gwc_close(&c);
}

static void test_account_policy_duplicate_and_login_forms(void **state) {
  (void)state;
  gwc a;
  char login[32];
  fresh_login(login, sizeof login, "carol");
  assert_int_equal(gwc_open(&a, srv.port), 0);
  assert_int_equal(gwc_signup(&a, login, "secret-pw"), 0);
  assert_int_equal(strlen(a.user), QIM_TOPIC_NAME_LEN);
  assert_memory_equal(a.user, "usr", 3);
  gwc_close(&a);

  gwc b;
  assert_int_equal(gwc_open(&b, srv.port), 0);
  gwc_sendf(&b, "{\"hi\":{\"id\":\"1\",\"ver\":\"0.25.3\"}}");
  assert_int_equal(gwc_code(&b, "1", NULL), 201);
  char sec[64], b64[128];
  /* Login too short, password too short: 422; taken login: 409. */
  qim_b64std_encode((const uint8_t *)"abc:secret-pw", 13, b64, sizeof b64);
  gwc_sendf(&b, "{\"acc\":{\"id\":\"2\",\"user\":\"new\",\"scheme\":\"basic\",\"secret\":\"%s\",\"login\":true}}", b64);
  assert_int_equal(gwc_code(&b, "2", NULL), 422);
  int n = snprintf(sec, sizeof sec, "%s:12345", login);
  qim_b64std_encode((const uint8_t *)sec, (size_t)n, b64, sizeof b64);
  gwc_sendf(&b, "{\"acc\":{\"id\":\"3\",\"user\":\"new\",\"scheme\":\"basic\",\"secret\":\"%s\",\"login\":true}}", b64);
  assert_int_equal(gwc_code(&b, "3", NULL), 422);
  n = snprintf(sec, sizeof sec, "%s:secret-pw", login);
  qim_b64std_encode((const uint8_t *)sec, (size_t)n, b64, sizeof b64);
  gwc_sendf(&b, "{\"acc\":{\"id\":\"4\",\"user\":\"new\",\"scheme\":\"basic\",\"secret\":\"%s\",\"login\":true}}", b64);
  assert_int_equal(gwc_code(&b, "4", NULL), 409);
  /* Wrong password, unknown login: 401. Right one: 200 with a token. */
  n = snprintf(sec, sizeof sec, "%s:wrong-pw", login);
  qim_b64std_encode((const uint8_t *)sec, (size_t)n, b64, sizeof b64);
  gwc_sendf(&b, "{\"login\":{\"id\":\"5\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", b64);
  assert_int_equal(gwc_code(&b, "5", NULL), 401);
  qim_b64std_encode((const uint8_t *)"nobody-here:secret-pw", 21, b64, sizeof b64);
  gwc_sendf(&b, "{\"login\":{\"id\":\"6\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", b64);
  assert_int_equal(gwc_code(&b, "6", NULL), 401);
  n = snprintf(sec, sizeof sec, "%s:secret-pw", login);
  qim_b64std_encode((const uint8_t *)sec, (size_t)n, b64, sizeof b64);
  gwc_sendf(&b, "{\"login\":{\"id\":\"7\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", b64);
  json_t *j;
  assert_int_equal(gwc_code(&b, "7", &j), 200);
  assert_string_equal(json_string_value(json_object_get(params_of(j), "user")), a.user);
  char token[256];
  snprintf(token, sizeof token, "%s", json_string_value(json_object_get(params_of(j), "token")));
  assert_int_equal(strlen(json_string_value(json_object_get(params_of(j), "expires"))), 24);
  json_decref(j);
  gwc_sendf(&b, "{\"login\":{\"id\":\"8\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", b64);
  assert_int_equal(gwc_code(&b, "8", NULL), 409); /* already authenticated */
  gwc_close(&b);

  /* The token logs a new connection in as the same user; a flipped byte does not. */
  gwc t;
  assert_int_equal(gwc_open(&t, srv.port), 0);
  gwc_sendf(&t, "{\"hi\":{\"id\":\"1\",\"ver\":\"0.25.3\"}}");
  assert_int_equal(gwc_code(&t, "1", NULL), 201);
  char bad[256];
  snprintf(bad, sizeof bad, "%s", token);
  bad[10] = bad[10] == 'A' ? 'B' : 'A';
  gwc_sendf(&t, "{\"login\":{\"id\":\"2\",\"scheme\":\"token\",\"secret\":\"%s\"}}", bad);
  assert_int_equal(gwc_code(&t, "2", NULL), 401);
  gwc_sendf(&t, "{\"login\":{\"id\":\"3\",\"scheme\":\"token\",\"secret\":\"%s\"}}", token);
  assert_int_equal(gwc_code(&t, "3", &j), 200);
  assert_string_equal(json_string_value(json_object_get(params_of(j), "user")), a.user);
  json_decref(j);
  gwc_close(&t);
}

/* The next {pres} that is not online/offline presence (which presence.c sends on its own
 * schedule, so its order against pipeline pres is not fixed). */
static json_t *pres_not_online(gwc *c) {
  for (;;) {
    json_t *j = gwc_wait(c, "pres", NULL, 5000);
    assert_non_null(j);
    const char *what = json_string_value(json_object_get(json_object_get(j, "pres"), "what"));
    if (!what || (strcmp(what, "on") != 0 && strcmp(what, "off") != 0)) return j;
    json_decref(j);
  }
}

/* ---- groups, publish, history ----------------------------------------------------------------- */

static void test_group_publish_reaches_members_through_the_pipeline(void **state) {
  (void)state;
  gwc a, b;
  signed_up(&a, "alice");
  signed_up(&b, "bob");
  char topic[QIM_TOPIC_NAME_CAP];
  create_group(&a, topic);
  join_group(&b, topic, "j1");
  /* The owner learns of the join from the pipeline (the membership Control). */
  json_t *j = pres_not_online(&a); /* bob's {pres on} may come first */
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "pres"), "what")), "acs");
  json_decref(j);

  assert_int_equal(publish(&a, topic, "hello", true), 1);
  const char *got = data_of(&b, 1, 5000);
  assert_non_null(got);
  assert_string_equal(got, "hello");
  /* Without noecho the sender gets its own {data} too, but only after its 202. */
  gwc_sendf(&b, "{\"pub\":{\"id\":\"own\",\"topic\":\"%s\",\"content\":\"hi back\"}}", topic);
  bool acked = false, echoed = false;
  while (!echoed) {
    json_t *f = gwc_next(&b, 5000);
    assert_non_null(f);
    json_t *c = json_object_get(f, "ctrl"), *d = json_object_get(f, "data");
    if (c && json_string_value(json_object_get(c, "id")) && !strcmp(json_string_value(json_object_get(c, "id")), "own")) {
      assert_int_equal(json_integer_value(json_object_get(c, "code")), 202);
      acked = true;
    }
    if (d && json_integer_value(json_object_get(d, "seq")) == 2) {
      assert_true(acked); /* the ack came first */
      echoed = true;
    }
    json_decref(f);
  }
  assert_string_equal(data_of(&a, 2, 5000), "hi back");

  /* History: both messages, newest first, then 208 with the count. */
  gwc_sendf(&b, "{\"get\":{\"id\":\"h1\",\"topic\":\"%s\",\"what\":\"data\",\"data\":{\"since\":1}}}", topic);
  j = gwc_wait(&b, "data", NULL, 5000);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "seq")), 2);
  json_decref(j);
  j = gwc_wait(&b, "data", NULL, 5000);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "data"), "seq")), 1);
  json_decref(j);
  assert_int_equal(gwc_code(&b, "h1", &j), 208);
  assert_int_equal(json_integer_value(json_object_get(params_of(j), "count")), 2);
  json_decref(j);

  /* A body above inline_body_threshold (4 KiB) is not in the mailbox entry: the push reads
   * it from the store before delivering. */
  size_t big = 10000;
  char *text = malloc(big + 1);
  memset(text, 'y', big);
  text[big] = '\0';
  assert_int_equal(publish(&a, topic, text, true), 3);
  json_t *bj = gwc_wait(&b, "data", NULL, 5000);
  assert_non_null(bj);
  json_t *bd = json_object_get(bj, "data");
  assert_int_equal(json_integer_value(json_object_get(bd, "seq")), 3);
  assert_string_equal(json_string_value(json_object_get(bd, "content")), text);
  json_decref(bj);
  free(text);

  /* Already attached: 304. A group that does not exist: 404. */
  gwc_sendf(&b, "{\"sub\":{\"id\":\"s2\",\"topic\":\"%s\"}}", topic);
  assert_int_equal(gwc_code(&b, "s2", NULL), 304);
  gwc_sendf(&b, "{\"sub\":{\"id\":\"s3\",\"topic\":\"grpAAAAAAAAAAAAAAAAAAAAAAA\"}}");
  assert_int_equal(gwc_code(&b, "s3", NULL), 404);
  gwc_close(&a);
  gwc_close(&b);
}

static void test_me_listing_has_seq_read_and_pres_msg_when_detached(void **state) {
  (void)state;
  gwc a, b;
  signed_up(&a, "dave");
  signed_up(&b, "erin");
  char topic[QIM_TOPIC_NAME_CAP];
  create_group(&a, topic);
  join_group(&b, topic, "j1");
  assert_int_equal(publish(&a, topic, "one", true), 1);
  assert_non_null(data_of(&b, 1, 5000));
  /* b reads 1, leaves the topic (stays subscribed), attaches me. */
  gwc_sendf(&b, "{\"note\":{\"topic\":\"%s\",\"what\":\"read\",\"seq\":1}}", topic);
  json_t *j = gwc_wait(&a, "info", NULL, 5000);
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "info"), "what")), "read");
  json_decref(j);
  gwc_sendf(&b, "{\"leave\":{\"id\":\"l1\",\"topic\":\"%s\"}}", topic);
  assert_int_equal(gwc_code(&b, "l1", NULL), 200);
  gwc_sendf(&b, "{\"sub\":{\"id\":\"m1\",\"topic\":\"me\",\"get\":{\"what\":\"sub desc\"}}}");
  assert_int_equal(gwc_code(&b, "m1", NULL), 200);
  j = gwc_wait(&b, "meta", "m1", 5000);
  assert_non_null(json_object_get(json_object_get(j, "meta"), "desc"));
  json_decref(j);
  j = gwc_wait(&b, "meta", "m1", 5000);
  json_t *sub = json_array_get(json_object_get(json_object_get(j, "meta"), "sub"), 0);
  assert_string_equal(json_string_value(json_object_get(sub, "topic")), topic);
  assert_int_equal(json_integer_value(json_object_get(sub, "seq")), 1);
  assert_int_equal(json_integer_value(json_object_get(sub, "read")), 1);
  assert_string_equal(json_string_value(json_object_get(json_object_get(sub, "public"), "fn")), "G");
  json_decref(j);
  /* A new message reaches the detached b as pres me msg. */
  assert_int_equal(publish(&a, topic, "two", true), 2);
  j = pres_not_online(&b); /* presence may also report the group active: skipped */
  json_t *p = json_object_get(j, "pres");
  assert_string_equal(json_string_value(json_object_get(p, "topic")), "me");
  assert_string_equal(json_string_value(json_object_get(p, "what")), "msg");
  assert_string_equal(json_string_value(json_object_get(p, "src")), topic);
  assert_int_equal(json_integer_value(json_object_get(p, "seq")), 2);
  assert_string_equal(json_string_value(json_object_get(p, "act")), a.user);
  json_decref(j);
  gwc_close(&a);
  gwc_close(&b);
}

static void test_errors_pub_unattached_409_oversized_413_delete_out_of_range_400(void **state) {
  (void)state;
  gwc a;
  signed_up(&a, "frank");
  char topic[QIM_TOPIC_NAME_CAP];
  create_group(&a, topic);
  gwc_sendf(&a, "{\"leave\":{\"id\":\"l\",\"topic\":\"%s\"}}", topic);
  assert_int_equal(gwc_code(&a, "l", NULL), 200);
  gwc_sendf(&a, "{\"pub\":{\"id\":\"p\",\"topic\":\"%s\",\"content\":\"x\"}}", topic);
  assert_int_equal(gwc_code(&a, "p", NULL), 409);
  gwc_sendf(&a, "{\"sub\":{\"id\":\"s\",\"topic\":\"%s\"}}", topic);
  assert_int_equal(gwc_code(&a, "s", NULL), 200);
  /* Over max_message_size (128 KiB) but under the frame limit: 413, connection stays. */
  size_t big = 140000;
  char *frame = malloc(big + 256);
  int n = snprintf(frame, 256, "{\"pub\":{\"id\":\"big\",\"topic\":\"%s\",\"content\":\"", topic);
  memset(frame + n, 'x', big);
  strcpy(frame + n + big, "\"}}");
  assert_int_equal(wsc_send_text(&a.w, frame), 0);
  free(frame);
  assert_int_equal(gwc_code(&a, "big", NULL), 413);
  assert_int_equal(publish(&a, topic, "fits", true), 1);
  gwc_sendf(&a, "{\"del\":{\"id\":\"d\",\"topic\":\"%s\",\"what\":\"msg\",\"delseq\":[{\"low\":5}]}}", topic);
  assert_int_equal(gwc_code(&a, "d", NULL), 400);
  gwc_sendf(&a, "{\"del\":{\"id\":\"d2\",\"topic\":\"%s\",\"what\":\"msg\",\"delseq\":[{\"low\":1}],\"hard\":true}}",
            topic);
  json_t *j;
  assert_int_equal(gwc_code(&a, "d2", &j), 200);
  assert_true(json_integer_value(json_object_get(params_of(j), "del")) >= 1);
  json_decref(j);
  gwc_close(&a);
}

/* ---- the pipeline is the only source of live data -------------------------------------------- */

static int admin_pipeline(bool paused) {
  wsc h;
  char req[512];
  const char *body = paused ? "{\"stage\":\"materialize\",\"paused\":true}" : "{\"stage\":\"materialize\",\"paused\":false}";
  snprintf(req, sizeof req,
           "POST /v0/admin/pipeline HTTP/1.1\r\nHost: x\r\nX-Qim-Service-Token: " GWC_TOKEN
           "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  int status = wsc_request(&h, srv.port, req);
  wsc_close(&h);
  return status;
}

static void test_paused_materialization_acks_but_delivers_only_after_resume(void **state) {
  (void)state;
  gwc a, b;
  signed_up(&a, "gina");
  signed_up(&b, "hank");
  char topic[QIM_TOPIC_NAME_CAP];
  create_group(&a, topic);
  join_group(&b, topic, "j1");
  /* Without the token: 401. */
  wsc h;
  assert_int_equal(wsc_request(&h, srv.port,
                               "POST /v0/admin/pipeline HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
                   401);
  wsc_close(&h);
  assert_int_equal(admin_pipeline(true), 200);
  assert_int_equal(publish(&a, topic, "held", true), 1);
  assert_null(data_of(&b, 1, 700)); /* acknowledged, not delivered */
  /* More noecho pubs in the pipeline at once than any fixed ring would remember. */
  for (int i = 2; i <= 41; i++) assert_int_equal(publish(&a, topic, "burst", true), i);
  /* The same with cmids the client chose: each is remembered until its echo is dropped. */
  for (int i = 42; i <= 141; i++) assert_int_equal(publish_cmid(&a, topic, i), i);
  assert_int_equal(admin_pipeline(false), 200);
  assert_string_equal(data_of(&b, 1, 5000), "held");
  assert_string_equal(data_of(&b, 41, 5000), "burst");
  assert_string_equal(data_of(&b, 141, 5000), "own");
  assert_null(data_of(&b, 1, 300));             /* once */
  assert_null(gwc_wait(&a, "data", NULL, 300)); /* noecho: no {data} at all to the sender */
  gwc_close(&a);
  gwc_close(&b);
}

/* ---- login attempts per address ------------------------------------------------------------------- */

static void test_login_attempts_beyond_the_burst_get_429(void **state) {
  (void)state;
  gwsrv tight;
  const char *extra[] = {"--login-rate", "1", "--login-burst", "3", NULL};
  assert_int_equal(gwsrv_start_with(&tight, extra), 0);
  gwc c;
  assert_int_equal(gwc_open(&c, tight.port), 0);
  gwc_sendf(&c, "{\"hi\":{\"id\":\"h\",\"ver\":\"0.25.3\"}}");
  assert_int_equal(gwc_code(&c, "h", NULL), 201);
  char b64[64];
  qim_b64std_encode((const uint8_t *)"nobody:password", 15, b64, sizeof b64);
  for (int i = 0; i < 3; i++) {
    gwc_sendf(&c, "{\"login\":{\"id\":\"l%d\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", i, b64);
    char id[8];
    snprintf(id, sizeof id, "l%d", i);
    assert_int_equal(gwc_code(&c, id, NULL), 401);
  }
  gwc_sendf(&c, "{\"login\":{\"id\":\"l3\",\"scheme\":\"basic\",\"secret\":\"%s\"}}", b64);
  assert_int_equal(gwc_code(&c, "l3", NULL), 429);
  gwc_close(&c);
  gwsrv_stop(&tight);
}

/* ---- tokens (pure) --------------------------------------------------------------------------------- */

static void test_token_rejects_tampering_expiry_and_other_tenants(void **state) {
  (void)state;
  qim_manual_clock clk;
  qim_manual_clock_init(&clk, 1000000);
  qim_gateway g = {.d = {.clock = &clk.clock}};
  memset(g.d.token_key, 7, sizeof g.d.token_key);
  qim_tenant_id t = {{0, 1}}, other = {{0, 2}};
  qim_user_id u = {{5, 6}}, got;
  char tok[160];
  uint8_t raw[GW_TOKEN_RAW];
  size_t n;
  uint64_t epoch, exp;
  assert_true(qim__gw_token_make(&g, t, u, 3, 2000000, tok, sizeof tok) > 0);
  assert_int_equal(qim_b64std_decode(tok, strlen(tok), raw, sizeof raw, &n), 0);
  assert_int_equal(n, GW_TOKEN_RAW);
  assert_int_equal(qim__gw_token_check(&g, raw, n, t, &got, &epoch, &exp), 0);
  assert_true(qim_u128_eq(got.v, u.v));
  assert_int_equal(epoch, 3);
  assert_int_equal(exp, 2000000);
  assert_int_equal(qim__gw_token_check(&g, raw, n, other, &got, &epoch, &exp), -EACCES);
  raw[20] ^= 1;
  assert_int_equal(qim__gw_token_check(&g, raw, n, t, &got, &epoch, &exp), -EACCES);
  raw[20] ^= 1;
  qim_manual_clock_set_wall(&clk, 2000000);
  assert_int_equal(qim__gw_token_check(&g, raw, n, t, &got, &epoch, &exp), -EACCES);
  assert_int_equal(qim__gw_token_check(&g, raw, n - 1, t, &got, &epoch, &exp), -EACCES);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_requests_before_hi_get_409_and_before_login_401),
      cmocka_unit_test(test_old_version_gets_505_and_garbage_400),
      cmocka_unit_test(test_account_policy_duplicate_and_login_forms),
      cmocka_unit_test(test_group_publish_reaches_members_through_the_pipeline),
      cmocka_unit_test(test_me_listing_has_seq_read_and_pres_msg_when_detached),
      cmocka_unit_test(test_errors_pub_unattached_409_oversized_413_delete_out_of_range_400),
      cmocka_unit_test(test_paused_materialization_acks_but_delivers_only_after_resume),
      cmocka_unit_test(test_login_attempts_beyond_the_burst_get_429),
      cmocka_unit_test(test_token_rejects_tampering_expiry_and_other_tenants),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
