/*
 * group_fixture.h — a store, a commit and a groups object over a fresh SQLite file for
 * the group tests, plus helpers to read the Control messages a change committed.
 * Header-only (every test_*.c is its own binary).
 */
#ifndef QIM_GROUP_FIXTURE_H
#define QIM_GROUP_FIXTURE_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit/commit.h"
#include "group/group.h"
#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"

#define GX_FN static __attribute__((unused))
#define GX_TENANT ((qim_tenant_id){{0, 42}})
static const qim_shard_config GX_SHARDS = {4, 2};

typedef struct gx {
  char *dir;
  qim_manual_clock clock;
  qim_store *store;
  qim_commit *commit;
  qim_groups *groups;
} gx;

GX_FN qim_user_id gx_user(uint64_t n) { return (qim_user_id){{0x77, n}}; }
GX_FN qim_group_id gx_group(uint64_t n) { return (qim_group_id){{0x6A, n}}; }
GX_FN qim_authenticated_actor gx_actor(uint64_t n) {
  return (qim_authenticated_actor){GX_TENANT, gx_user(n), {{0xD, n}}};
}

/* `store` NULL: the real SQLite store; otherwise groups (and commit) run over it. */
GX_FN void gx_open_over(gx *x, const char *tag, const qim_group_config *cfg, qim_store *over) {
  memset(x, 0, sizeof *x);
  x->dir = qim_test_tmpdir(tag);
  char url[512];
  snprintf(url, sizeof url, "sqlite:%s/g.db", x->dir);
  qim_store_options opt = {.shards = GX_SHARDS};
  assert_int_equal(qim_store_open(url, &opt, &x->store), 0);
  qim_manual_clock_init(&x->clock, 1700000000000ull);
  qim_commit_config cc;
  qim_commit_config_default(&cc);
  cc.rate_per_sec = 0;
  qim_store *s = over ? over : x->store;
  assert_int_equal(qim_commit_create(s, &x->clock.clock, NULL, &cc, &x->commit), 0);
  assert_int_equal(qim_group_open(s, x->commit, &x->clock.clock, cfg, &x->groups), 0);
}

GX_FN void gx_open(gx *x, const char *tag, const qim_group_config *cfg) { gx_open_over(x, tag, cfg, NULL); }

GX_FN void gx_close(gx *x) {
  qim_group_close(x->groups);
  qim_commit_destroy(x->commit);
  qim_store_close(x->store);
  qim_test_rmtree(x->dir);
}

/* Creates group `g` owned by user `owner` with invitees first..first+n-1. */
GX_FN qim_membership_version gx_create(gx *x, uint64_t g, uint64_t owner, uint64_t first, size_t n) {
  qim_user_id *inv = qim_calloc(n + 1, sizeof *inv);
  for (size_t i = 0; i < n; i++) inv[i] = gx_user(first + i);
  qim_group_create_request req = {gx_group(g), inv, n};
  qim_authenticated_actor a = gx_actor(owner);
  qim_group_created out;
  qim_group_change_result ch;
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, &ch), 0);
  assert_int_equal(ch.control_status, 0);
  qim_free(inv);
  return out.membership_version;
}

/* The member row of user u in group g (-ENOENT when none). */
GX_FN int gx_member(gx *x, uint64_t g, uint64_t u, qim_store_member *out) {
  qim_store_member_get_req r = {.tenant_id = GX_TENANT, .conversation_id = qim_group_conversation(gx_group(g)),
                                .user_id = gx_user(u)};
  int rc = QIM_STORE_SYNC(x->store, conversations.member_get, &r);
  *out = r.out;
  return rc;
}

GX_FN bool gx_is_member(gx *x, uint64_t g, uint64_t u) {
  qim_store_member m;
  if (gx_member(x, g, u, &m)) return false;
  qim_store_member_free(&m);
  return !m.has_left_at && !m.banned;
}

/* The n-th last outbox envelope (0 = the last); its JSON payload parsed when it is a
 * membership Control (NULL otherwise). */
GX_FN json_t *gx_control(gx *x, size_t back, qim_committed_envelope *env) {
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 100000};
  assert_int_equal(QIM_STORE_SYNC(x->store, logs.read, &r), 0);
  assert_true(r.out_count > back);
  const qim_store_log_record *rec = &r.out_records[r.out_count - 1 - back];
  assert_int_equal(qim_committed_envelope_decode(rec->payload.p, rec->payload.n, env), 0);
  for (size_t i = 0; i < r.out_count; i++) qim_store_log_record_free(&r.out_records[i]);
  qim_free(r.out_records);
  const qim_message_content *c = &env->record.content;
  if (c->message_type != QIM_MESSAGE_TYPE_CONTROL || !c->custom_type || strcmp(c->custom_type, QIM_GROUP_CONTROL_TYPE))
    return NULL;
  return json_loadb((const char *)c->payload_or_ciphertext.p, c->payload_or_ciphertext.n, 0, NULL);
}

GX_FN const char *gx_str(json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }
GX_FN json_int_t gx_int(json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

GX_FN void gx_name(uint64_t u, char out[QIM_TOPIC_NAME_CAP]) { qim_user_id_format(gx_user(u), out, QIM_TOPIC_NAME_CAP); }

/* A Text message from `sender` to group g through the commit; returns its coordinates. */
GX_FN qim_committed_message gx_send(gx *x, uint64_t g, uint64_t sender, uint64_t cmid) {
  qim_authenticated_send s = {.actor = gx_actor(sender)};
  s.request.client_message_id.b[0] = 0x11;
  for (int i = 0; i < 8; i++) s.request.client_message_id.b[8 + i] = (uint8_t)(cmid >> (56 - 8 * i));
  s.request.conversation_id = qim_group_conversation(gx_group(g));
  s.request.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  s.request.content.schema_version = 1;
  s.request.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)"hi", 2};
  s.trace_id = qim_trace_id_new();
  qim_commit_result res;
  assert_int_equal(qim_commit_send_sync(x->commit, &s, &res), 0);
  return res.ack;
}

#endif
