/*
 * history_fixture.h — a SQLite store, commits, groups and a history object over a fresh
 * file for the history tests, with a manual clock, plus helpers to publish Tinode
 * messages, read the Control messages the history committed and inspect the store.
 * Header-only: every tests/unit/history/test_*.c is its own binary.
 *
 * Messages of a retention class other than Default are sent through a second commit
 * configured with that class (the commit fixes the class of client messages).
 */
#ifndef QIM_HISTORY_FIXTURE_H
#define QIM_HISTORY_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit/commit.h"
#include "group/group.h"
#include "history/history.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"
#include "testsupport.h" /* cmocka, tmpdirs */

#define HX_FN static __attribute__((unused))
#define HX_TENANT ((qim_tenant_id){{0, 7}})
#define HX_T0 1700000000000ull
static const qim_shard_config HX_SHARDS = {4, 2};

typedef struct hx {
  char *dir;
  qim_manual_clock clock;
  qim_store *store;
  qim_commit *commit;      /* Default retention: the history's */
  qim_commit *by_class[4]; /* client messages of each retention class */
  qim_groups *groups;
  qim_history *history;
  qim_history_config cfg;
} hx;

HX_FN qim_user_id hx_user(uint64_t n) {
  return (qim_user_id){{0x55, n}};
}
HX_FN qim_group_id hx_group(uint64_t n) {
  return (qim_group_id){{0x66, n}};
}
HX_FN qim_conversation_id hx_conv(uint64_t g) {
  return qim_group_conversation(hx_group(g));
}
HX_FN qim_authenticated_actor hx_actor(uint64_t n) {
  return (qim_authenticated_actor){HX_TENANT, hx_user(n), {{0xDE, n}}};
}

HX_FN void hx_config(qim_history_config *c) {
  static qim_tenant_id tenants[1];
  qim_history_config_default(c);
  tenants[0] = HX_TENANT;
  c->tenants = tenants;
  c->tenant_count = 1;
}

/* `store_over` NULL: history over the real store; else over that (a wrapper). */
HX_FN void hx_open_with(hx *x, const char *tag, const qim_history_config *cfg,
                        qim_store *store_over) {
  memset(x, 0, sizeof *x);
  x->dir = qim_test_tmpdir(tag);
  char url[512];
  snprintf(url, sizeof url, "sqlite:%s/h.db", x->dir);
  qim_store_options opt = {.shards = HX_SHARDS};
  assert_int_equal(qim_store_open(url, &opt, &x->store), 0);
  qim_manual_clock_init(&x->clock, HX_T0);
  for (int cls = 0; cls < 4; cls++) {
    qim_commit_config cc;
    qim_commit_config_default(&cc);
    cc.rate_per_sec = 0;
    cc.node_id = 10 + (uint32_t)cls;
    cc.retention_class = (qim_retention_class)cls;
    assert_int_equal(qim_commit_create(x->store, &x->clock.clock, NULL, &cc, &x->by_class[cls]), 0);
  }
  x->commit = x->by_class[QIM_RETENTION_CLASS_DEFAULT];
  assert_int_equal(qim_group_open(x->store, x->commit, &x->clock.clock, NULL, &x->groups), 0);
  if (cfg)
    x->cfg = *cfg;
  else
    hx_config(&x->cfg);
  qim_store *s = store_over ? store_over : x->store;
  assert_int_equal(qim_history_open(s, x->commit, &x->clock.clock, &x->cfg, &x->history), 0);
}

HX_FN void hx_open(hx *x, const char *tag, const qim_history_config *cfg) {
  hx_open_with(x, tag, cfg, NULL);
}

HX_FN void hx_close(hx *x) {
  qim_history_close(x->history);
  qim_group_close(x->groups);
  for (int cls = 0; cls < 4; cls++) qim_commit_destroy(x->by_class[cls]);
  qim_store_close(x->store);
  qim_test_rmtree(x->dir);
}

/* Group g owned by `owner` with members first..first+n-1 (role Member). */
HX_FN void hx_group_create(hx *x, uint64_t g, uint64_t owner, uint64_t first, size_t n) {
  qim_user_id *inv = qim_calloc(n + 1, sizeof *inv);
  for (size_t i = 0; i < n; i++) inv[i] = hx_user(first + i);
  qim_group_create_request req = {hx_group(g), inv, n};
  qim_authenticated_actor a = hx_actor(owner);
  qim_group_created out;
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, NULL), 0);
  qim_free(inv);
}

HX_FN void hx_group_add(hx *x, uint64_t g, uint64_t by, uint64_t user, qim_group_role role) {
  qim_authenticated_actor a = hx_actor(by);
  qim_user_id u = hx_user(user);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &a, hx_group(g), &u, 1, role, NULL, &r), 0);
}

HX_FN void hx_group_leave(hx *x, uint64_t g, uint64_t user) {
  qim_authenticated_actor a = hx_actor(user);
  qim_group_change_result r;
  assert_int_equal(qim_group_leave(x->groups, &a, hx_group(g), NULL, &r), 0);
}

HX_FN qim_client_message_id hx_cmid(uint64_t n) {
  static uint64_t salt = 0;
  qim_client_message_id id = {{0}};
  uint64_t v = n ^ (++salt << 32);
  id.b[0] = 0xC0;
  for (int i = 0; i < 8; i++) id.b[8 + i] = (uint8_t)(v >> (56 - 8 * i));
  return id;
}

/* Publishes through the history; head/content are JSON texts (head NULL = none). */
HX_FN int hx_pub_json(hx *x, uint64_t g, uint64_t sender, const char *head, const char *content,
                      qim_history_pub_result *out) {
  json_t *h = head ? json_loads(head, JSON_DECODE_ANY, NULL) : NULL;
  json_t *c = json_loads(content, JSON_DECODE_ANY, NULL);
  assert_non_null(c);
  qim_history_pub p = {.actor = hx_actor(sender),
                       .conversation_id = hx_conv(g),
                       .client_message_id = hx_cmid(sender),
                       .head = h,
                       .content = c,
                       .trace_id = qim_trace_id_new()};
  qim_history_pub_result r;
  int rc = qim_history_publish(x->history, &p, &r);
  json_decref(h);
  json_decref(c);
  if (out) *out = r;
  return rc;
}

/* A plain-text message through the history; returns its seq. */
HX_FN qim_conversation_seq hx_pub(hx *x, uint64_t g, uint64_t sender, const char *text) {
  char content[512];
  snprintf(content, sizeof content, "\"%s\"", text);
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, g, sender, NULL, content, &r), 0);
  return r.commit.ack.coordinates.conversation_seq;
}

/* n messages "m<i>" from `sender`. */
HX_FN void hx_pub_many(hx *x, uint64_t g, uint64_t sender, int n) {
  char t[32];
  for (int i = 0; i < n; i++) {
    snprintf(t, sizeof t, "m%d", i);
    hx_pub(x, g, sender, t);
  }
}

/* A text message of retention class `cls`, straight through that class's commit. */
HX_FN qim_conversation_seq hx_send_class(hx *x, uint64_t g, uint64_t sender, const char *text,
                                         qim_retention_class cls) {
  json_t *c = json_string(text);
  qim_history_tinode_msg m;
  assert_int_equal(qim_history_content_from_tinode(NULL, c, 1 << 20, 8, &m), 0);
  json_decref(c);
  qim_authenticated_send s = {.actor = hx_actor(sender), .trace_id = qim_trace_id_new()};
  s.request.client_message_id = hx_cmid(sender);
  s.request.conversation_id = hx_conv(g);
  s.request.content = m.content;
  qim_commit_result res;
  assert_int_equal(qim_commit_send_sync(x->by_class[cls], &s, &res), 0);
  qim_history_tinode_msg_free(&m);
  return res.ack.coordinates.conversation_seq;
}

/* ---- reading back ------------------------------------------------------------------------- */

HX_FN qim_message_record hx_record(hx *x, uint64_t g, qim_conversation_seq seq) {
  qim_store_record_get_req r = {.tenant_id = HX_TENANT, .conversation_id = hx_conv(g), .seq = seq};
  assert_int_equal(QIM_STORE_SYNC(x->store, history.get, &r), 0);
  return r.out;
}

HX_FN qim_message_state hx_state(hx *x, uint64_t g, qim_conversation_seq seq) {
  qim_message_record r = hx_record(x, g, seq);
  qim_message_state s = r.state;
  qim_message_record_free(&r);
  return s;
}

HX_FN qim_store_member hx_member(hx *x, uint64_t g, uint64_t user) {
  qim_store_member_get_req r = {
      .tenant_id = HX_TENANT, .conversation_id = hx_conv(g), .user_id = hx_user(user)};
  assert_int_equal(QIM_STORE_SYNC(x->store, conversations.member_get, &r), 0);
  return r.out;
}

HX_FN qim_store_conversation hx_conversation(hx *x, uint64_t g) {
  qim_store_conv_get_req r = {.tenant_id = HX_TENANT, .conversation_id = hx_conv(g)};
  assert_int_equal(QIM_STORE_SYNC(x->store, conversations.get, &r), 0);
  return r.out;
}

/* get data for `user` as a comma-separated list of seqs, newest first ("" when none). */
HX_FN int hx_get(hx *x, uint64_t g, uint64_t user, const qim_history_get *tmpl, char *out,
                 size_t cap, bool *has_more) {
  qim_history_get q = *tmpl;
  q.actor = hx_actor(user);
  q.conversation_id = hx_conv(g);
  qim_history_page p;
  int rc = qim_history_get_data(x->history, &q, &p);
  out[0] = '\0';
  if (rc) return rc;
  size_t len = 0;
  for (size_t i = 0; i < p.record_count; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%llu", i ? "," : "",
                            (unsigned long long)p.records[i].coordinates.conversation_seq);
  if (has_more) *has_more = p.has_more;
  qim_history_page_free(&p);
  return 0;
}

/* Every outbox envelope that is a history Control, oldest first, parsed (caller decrefs
 * the array); when `env_out` is non-NULL the last one's envelope is copied there. */
HX_FN json_t *hx_controls(hx *x, qim_committed_envelope *env_out) {
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 100000};
  assert_int_equal(QIM_STORE_SYNC(x->store, logs.read, &r), 0);
  json_t *all = json_array();
  for (size_t i = 0; i < r.out_count; i++) {
    qim_committed_envelope env;
    assert_int_equal(
        qim_committed_envelope_decode(r.out_records[i].payload.p, r.out_records[i].payload.n, &env),
        0);
    const qim_message_content *c = &env.record.content;
    if (c->message_type == QIM_MESSAGE_TYPE_CONTROL && c->custom_type &&
        strcmp(c->custom_type, QIM_HISTORY_CONTROL_TYPE) == 0) {
      json_t *j =
          json_loadb((const char *)c->payload_or_ciphertext.p, c->payload_or_ciphertext.n, 0, NULL);
      assert_non_null(j);
      json_array_append_new(all, j);
      if (env_out) {
        qim_committed_envelope_free(env_out);
        *env_out = env;
        memset(&env, 0, sizeof env);
      }
    }
    qim_committed_envelope_free(&env);
    qim_store_log_record_free(&r.out_records[i]);
  }
  qim_free(r.out_records);
  return all;
}

/* The last history Control, or NULL. A new reference. */
HX_FN json_t *hx_last_control(hx *x, qim_committed_envelope *env_out) {
  json_t *all = hx_controls(x, env_out);
  size_t n = json_array_size(all);
  json_t *last = n ? json_incref(json_array_get(all, n - 1)) : NULL;
  json_decref(all);
  return last;
}

HX_FN const char *hx_str(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}
HX_FN json_int_t hx_int(json_t *o, const char *k) {
  return json_integer_value(json_object_get(o, k));
}

HX_FN char *hx_name(uint64_t user) {
  static char buf[4][QIM_TOPIC_NAME_CAP];
  static int k = 0;
  char *b = buf[k++ % 4];
  qim_user_id_format(hx_user(user), b, QIM_TOPIC_NAME_CAP);
  return b;
}

#endif
