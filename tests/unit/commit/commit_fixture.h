/*
 * commit_fixture.h — what the commit tests share (a header of static functions: each
 * test_*.c is one binary, and the crash test includes it too):
 *
 *   hook_store   a qim_store whose vtable forwards every call to a real store and can,
 *                per call, fail it before the store sees it (`before`) or run code right
 *                after it completed and before the caller's callback (`after`) — e.g.
 *                raise(SIGKILL) after the reserve, after the RECORDED or OUTBOXED
 *                advance. It sits at the store INTERFACE, between calls, so the replay
 *                path runs even where the SQLite backend could merge steps.
 *   fx           a temporary SQLite store behind a hook_store, a manual clock, an id
 *                generator and a commit; users and conversations made through the store.
 *   log capture  a log sink that keeps lines for TraceId assertions.
 * Test code only; nothing here is part of libqim.
 */
#ifndef QIM_COMMIT_FIXTURE_H
#define QIM_COMMIT_FIXTURE_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit/commit.h"
#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"
#include "testsupport.h"

#define FX_UNUSED __attribute__((unused))

/* ==== hook_store ===================================================================== */

typedef struct hook_store hook_store;

/* `before`: return 0 to let the call through, or a status to complete it with (the real
 * store never sees it). `after`: runs once the real call completed, before the caller's
 * callback; it may inspect or change the outputs. Both run on arbitrary threads. */
typedef int (*hook_before_fn)(hook_store *h, const char *op, qim_store_req *req);
typedef void (*hook_after_fn)(hook_store *h, const char *op, qim_store_req *req);

struct hook_store {
  qim_store base;
  qim_store_vtable vt;
  qim_store *real;
  hook_before_fn before;
  hook_after_fn after;
  void *ctx;
};

typedef struct hook_shim {
  qim_store_req *req;
  void (*done)(qim_store_req *);
  hook_store *h;
  const char *op;
  struct hook_shim *next;
} hook_shim;

static pthread_mutex_t hook_mu = PTHREAD_MUTEX_INITIALIZER;
static hook_shim *hook_shims;

static void hook_tramp(qim_store_req *req) {
  pthread_mutex_lock(&hook_mu);
  hook_shim **pp = &hook_shims;
  while (*pp && (*pp)->req != req) pp = &(*pp)->next;
  hook_shim *s = *pp;
  if (s) *pp = s->next;
  pthread_mutex_unlock(&hook_mu);
  if (!s) abort();
  req->done = s->done;
  if (s->h->after) s->h->after(s->h, s->op, req);
  free(s);
  req->done(req);
}

static void hook_unwrap(qim_store_req *req) {
  pthread_mutex_lock(&hook_mu);
  hook_shim **pp = &hook_shims;
  while (*pp && (*pp)->req != req) pp = &(*pp)->next;
  hook_shim *s = *pp;
  if (s) *pp = s->next;
  pthread_mutex_unlock(&hook_mu);
  if (s) {
    req->done = s->done;
    free(s);
  }
}

static void hook_fail_run(qim_cq_item *it) {
  qim_store_req *req = (qim_store_req *)it; /* item is the request's first member */
  req->done(req);
}

/* 1: completed by an injected failure; 0: wrapped, forward it. */
static int hook_pre(hook_store *h, const char *op, qim_store_req *req) {
  int st = h->before ? h->before(h, op, req) : 0;
  if (st != 0) {
    req->status = st;
    req->error.code = st;
    req->item.run = hook_fail_run;
    qim_cq_post(req->cq, &req->item);
    return 1;
  }
  hook_shim *s = calloc(1, sizeof *s);
  if (!s) abort();
  s->req = req;
  s->done = req->done;
  s->h = h;
  s->op = op;
  pthread_mutex_lock(&hook_mu);
  s->next = hook_shims;
  hook_shims = s;
  pthread_mutex_unlock(&hook_mu);
  req->done = hook_tramp;
  return 0;
}

#define HOOK_FWD(group, fn, T)                                         \
  static int hook_##group##_##fn(qim_store *s, T *r) {                 \
    hook_store *h = (hook_store *)s;                                   \
    if (hook_pre(h, #group "." #fn, &r->req)) return 0;                \
    int rc = h->real->vt->group.fn(h->real, r);                        \
    if (rc < 0) hook_unwrap(&r->req);                                  \
    return rc;                                                         \
  }

HOOK_FWD(accounts, user_create, qim_store_user_create_req)
HOOK_FWD(accounts, user_get, qim_store_user_get_req)
HOOK_FWD(accounts, user_update, qim_store_user_update_req)
HOOK_FWD(accounts, cred_create, qim_store_cred_create_req)
HOOK_FWD(accounts, cred_get, qim_store_cred_get_req)
HOOK_FWD(accounts, cred_update, qim_store_cred_update_req)
HOOK_FWD(accounts, apikey_put, qim_store_apikey_put_req)
HOOK_FWD(accounts, apikey_get, qim_store_apikey_get_req)
HOOK_FWD(conversations, create, qim_store_conv_create_req)
HOOK_FWD(conversations, get, qim_store_conv_get_req)
HOOK_FWD(conversations, update, qim_store_conv_update_req)
HOOK_FWD(conversations, members_change, qim_store_members_change_req)
HOOK_FWD(conversations, member_get, qim_store_member_get_req)
HOOK_FWD(conversations, members_at, qim_store_members_at_req)
HOOK_FWD(conversations, member_receipt, qim_store_member_receipt_req)
HOOK_FWD(conversations, subscriptions, qim_store_subscriptions_req)
HOOK_FWD(conversations, member_private, qim_store_member_private_req)
HOOK_FWD(conversations, members_prune, qim_store_members_prune_req)
HOOK_FWD(intents, reserve, qim_store_intent_reserve_req)
HOOK_FWD(intents, advance, qim_store_intent_advance_req)
HOOK_FWD(intents, load, qim_store_intent_load_req)
HOOK_FWD(intents, list_in_flight, qim_store_intent_list_req)
HOOK_FWD(intents, forget, qim_store_intent_forget_req)
HOOK_FWD(history, get, qim_store_record_get_req)
HOOK_FWD(history, query, qim_store_record_query_req)
HOOK_FWD(history, set_state, qim_store_record_set_state_req)
HOOK_FWD(history, dellog_add, qim_store_dellog_add_req)
HOOK_FWD(history, dellog_query, qim_store_dellog_query_req)
HOOK_FWD(history, expire, qim_store_record_expire_req)
HOOK_FWD(logs, append, qim_store_log_append_req)
HOOK_FWD(logs, read, qim_store_log_read_req)
HOOK_FWD(logs, consumer_get, qim_store_log_consumer_get_req)
HOOK_FWD(logs, consumer_set, qim_store_log_consumer_set_req)
HOOK_FWD(logs, trim, qim_store_log_trim_req)
HOOK_FWD(logs, redact, qim_store_log_redact_req)
HOOK_FWD(mailboxes, shard_takeover, qim_store_shard_takeover_req)
HOOK_FWD(mailboxes, shard_get, qim_store_shard_get_req)
HOOK_FWD(mailboxes, append, qim_store_mailbox_append_req)
HOOK_FWD(mailboxes, progress_get, qim_store_progress_get_req)
HOOK_FWD(mailboxes, range, qim_store_mailbox_range_req)
HOOK_FWD(mailboxes, watermark_get, qim_store_watermark_get_req)
HOOK_FWD(mailboxes, watermark_advance, qim_store_watermark_advance_req)

static void hook_stats(qim_store *s, qim_store_stats *out) {
  hook_store *h = (hook_store *)s;
  qim_store_get_stats(h->real, out);
}

/* Closing the wrapper closes the real store too. */
static void hook_close(qim_store *s) {
  hook_store *h = (hook_store *)s;
  qim_store_close(h->real);
  free(h);
}

static FX_UNUSED hook_store *hook_store_new(qim_store *real) {
  hook_store *h = calloc(1, sizeof *h);
  if (!h) abort();
  h->real = real;
  h->vt = *real->vt;
  h->vt.name = "hook";
#define HOOK_SET(group, fn) h->vt.group.fn = hook_##group##_##fn
  HOOK_SET(accounts, user_create); HOOK_SET(accounts, user_get); HOOK_SET(accounts, user_update);
  HOOK_SET(accounts, cred_create); HOOK_SET(accounts, cred_get); HOOK_SET(accounts, cred_update);
  HOOK_SET(accounts, apikey_put); HOOK_SET(accounts, apikey_get);
  HOOK_SET(conversations, create); HOOK_SET(conversations, get); HOOK_SET(conversations, update);
  HOOK_SET(conversations, members_change); HOOK_SET(conversations, member_get);
  HOOK_SET(conversations, members_at); HOOK_SET(conversations, member_receipt);
  HOOK_SET(conversations, subscriptions); HOOK_SET(conversations, member_private);
  HOOK_SET(conversations, members_prune);
  HOOK_SET(intents, reserve); HOOK_SET(intents, advance); HOOK_SET(intents, load);
  HOOK_SET(intents, list_in_flight); HOOK_SET(intents, forget);
  HOOK_SET(history, get); HOOK_SET(history, query); HOOK_SET(history, set_state);
  HOOK_SET(history, dellog_add); HOOK_SET(history, dellog_query); HOOK_SET(history, expire);
  HOOK_SET(logs, append); HOOK_SET(logs, read); HOOK_SET(logs, consumer_get);
  HOOK_SET(logs, consumer_set); HOOK_SET(logs, trim); HOOK_SET(logs, redact);
  HOOK_SET(mailboxes, shard_takeover); HOOK_SET(mailboxes, shard_get); HOOK_SET(mailboxes, append);
  HOOK_SET(mailboxes, progress_get); HOOK_SET(mailboxes, range); HOOK_SET(mailboxes, watermark_get);
  HOOK_SET(mailboxes, watermark_advance);
#undef HOOK_SET
  h->vt.stats = hook_stats;
  h->vt.close = hook_close;
  h->base.vt = &h->vt;
  return h;
}

/* Is this call the advance of an intent to `to`? */
static FX_UNUSED int hook_is_advance(const char *op, const qim_store_req *req, qim_commit_state to) {
  return strcmp(op, "intents.advance") == 0 && ((const qim_store_intent_advance_req *)req)->to == to;
}

/* ==== log capture (testsupport.h) ====================================================== */

/* How many captured lines carry `event` and the trace; with `needle` also containing it. */
static FX_UNUSED size_t fx_log_count(const qim_trace_id *trace, const char *event, const char *needle) {
  char hex[33], tr[48];
  qim_hex_encode(trace->b, 16, hex, sizeof hex);
  snprintf(tr, sizeof tr, " trace=%s", hex);
  return qim_test_log_count(event, tr, needle);
}

/* ==== the fixture =========================================================================== */

#define FX_T0 UINT64_C(1700000000000) /* a fixed wall clock start */

typedef struct fx {
  char *dir;
  char url[512];
  hook_store *hook;
  qim_store *store;          /* the hook_store, as a qim_store */
  qim_manual_clock clock;
  qim_id_gen ids;
  qim_commit_config cfg;
  qim_commit *commit;
  qim_tenant_id tenant;
  void (*before_commit)(void *ctx); /* store test hook before each durable COMMIT, or NULL */
  void *before_commit_ctx;
} fx;

static FX_UNUSED void fx_config(qim_commit_config *cfg) {
  qim_commit_config_default(cfg);
  cfg->maintenance_interval_ms = 0; /* tests run recovery explicitly */
  cfg->rate_per_sec = 0;            /* rate limit tests turn it on */
  cfg->retry_base_ms = 100;
  cfg->retry_max_ms = 1000;
}

static FX_UNUSED void fx_open_store(fx *f) {
  qim_store_options opt = {.shards = {.shard_count = 4, .lanes_per_shard = 2},
                           .before_commit = f->before_commit,
                           .hook_ctx = f->before_commit_ctx};
  qim_store *real = NULL;
  int rc = qim_store_open(f->url, &opt, &real);
  if (rc != 0) {
    fprintf(stderr, "qim_store_open(%s): %d\n", f->url, rc);
    abort();
  }
  f->hook = hook_store_new(real);
  f->store = &f->hook->base;
}

static FX_UNUSED void fx_start_commit(fx *f) {
  int rc = qim_commit_create(f->store, &f->clock.clock, &f->ids, &f->cfg, &f->commit);
  if (rc != 0) {
    fprintf(stderr, "qim_commit_create: %d\n", rc);
    abort();
  }
}

/* A fresh store in a temporary directory, the manual clock at FX_T0, and a commit with
 * `cfg` (NULL: fx_config defaults). */
static FX_UNUSED void fx_open(fx *f, const qim_commit_config *cfg) {
  memset(f, 0, sizeof *f);
  f->dir = qim_test_tmpdir("commit");
  snprintf(f->url, sizeof f->url, "sqlite:%s/qim.db", f->dir);
  qim_manual_clock_init(&f->clock, FX_T0);
  qim_writer_id w;
  qim_writer_id_make(1, 0, &w);
  qim_id_gen_init(&f->ids, &f->clock.clock, w, 1000);
  if (cfg) f->cfg = *cfg; else fx_config(&f->cfg);
  f->tenant.v = (qim_u128){0, 7};
  fx_open_store(f);
  fx_start_commit(f);
}

/* fx_open with every send on the staged path (commit_in_reserve off): one store call per
 * state, so a hook can fail or kill between the steps. */
static FX_UNUSED void fx_open_staged(fx *f) {
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.commit_in_reserve = false;
  fx_open(f, &cfg);
}

/* Destroys the commit and closes the store, keeping the files (a restart). */
static FX_UNUSED void fx_stop(fx *f) {
  qim_commit_destroy(f->commit);
  f->commit = NULL;
  qim_store_close(f->store);
  f->store = NULL;
  f->hook = NULL;
}

static FX_UNUSED void fx_restart(fx *f) {
  fx_stop(f);
  fx_open_store(f);
  fx_start_commit(f);
}

static FX_UNUSED void fx_close(fx *f) {
  fx_stop(f);
  qim_id_gen_destroy(&f->ids);
  qim_test_rmtree(f->dir);
  f->dir = NULL;
}

static FX_UNUSED qim_user_id fx_user(uint64_t n) { return (qim_user_id){{0, n}}; }

static FX_UNUSED void fx_make_user(fx *f, qim_user_id u) {
  qim_store_user_create_req r;
  memset(&r, 0, sizeof r);
  r.user.tenant_id = f->tenant;
  r.user.user_id = u;
  r.user.created_at = r.user.updated_at = FX_T0;
  int rc = QIM_STORE_SYNC(f->store, accounts.user_create, &r);
  if (rc != 0 && rc != -EEXIST) abort();
}

/* A direct conversation of two users (made as users first). */
static FX_UNUSED qim_conversation_id fx_direct(fx *f, qim_user_id a, qim_user_id b) {
  fx_make_user(f, a);
  fx_make_user(f, b);
  qim_store_conv_create_req r;
  memset(&r, 0, sizeof r);
  r.conv.tenant_id = f->tenant;
  r.conv.conversation_id = qim_conversation_id_direct(f->tenant, a, b);
  r.conv.kind = QIM_CONVERSATION_DIRECT;
  bool a_first = qim_u128_cmp(a.v, b.v) < 0;
  r.conv.direct_users[0] = a_first ? a : b;
  r.conv.direct_users[1] = a_first ? b : a;
  r.now = FX_T0;
  int rc = QIM_STORE_SYNC(f->store, conversations.create, &r);
  if (rc != 0) abort();
  return r.conv.conversation_id;
}

/* Applies one membership change; returns the store's status. */
static FX_UNUSED int fx_member_change(fx *f, qim_conversation_id conv, qim_store_member_op op, qim_user_id u,
                                      uint32_t mode) {
  qim_store_member_change ch = {.op = op, .user_id = u, .role = QIM_GROUP_ROLE_MEMBER,
                                .mode_want = mode, .mode_given = mode};
  qim_store_members_change_req r;
  memset(&r, 0, sizeof r);
  r.tenant_id = f->tenant;
  r.conversation_id = conv;
  r.changes = &ch;
  r.change_count = 1;
  r.member_limit = 1000;
  r.now = FX_T0;
  return QIM_STORE_SYNC(f->store, conversations.members_change, &r);
}

#define FX_MODE_MEMBER (QIM_MODE_J | QIM_MODE_R | QIM_MODE_W | QIM_MODE_P | QIM_MODE_S)

/* A group `id` owned by `owner` with `n` further members (mode JRWPS). */
static FX_UNUSED qim_conversation_id fx_group(fx *f, uint64_t id, qim_user_id owner, const qim_user_id *members,
                                              size_t n) {
  fx_make_user(f, owner);
  qim_store_conv_create_req r;
  memset(&r, 0, sizeof r);
  r.conv.tenant_id = f->tenant;
  r.conv.conversation_id.v = (qim_u128){0xabcd, id};
  r.conv.kind = QIM_CONVERSATION_GROUP;
  r.conv.owner_id = owner;
  r.conv.default_mode_auth = FX_MODE_MEMBER;
  r.now = FX_T0;
  if (QIM_STORE_SYNC(f->store, conversations.create, &r) != 0) abort();
  for (size_t i = 0; i < n; i++) {
    fx_make_user(f, members[i]);
    if (fx_member_change(f, r.conv.conversation_id, QIM_STORE_MEMBER_ADD, members[i], FX_MODE_MEMBER) != 0) abort();
  }
  return r.conv.conversation_id;
}

static FX_UNUSED qim_client_message_id fx_cmid(uint64_t n) {
  qim_client_message_id c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 8; i++) c.b[15 - i] = (uint8_t)(n >> (8 * i));
  c.b[0] = 0xc1;
  return c;
}

/* A text send; `text` is borrowed by the send. */
static FX_UNUSED qim_authenticated_send fx_send(fx *f, qim_user_id from, qim_conversation_id conv, uint64_t cmid,
                                                const char *text) {
  qim_authenticated_send s;
  memset(&s, 0, sizeof s);
  s.actor.tenant_id = f->tenant;
  s.actor.user_id = from;
  s.actor.device_id.v = (qim_u128){0, 99};
  s.request.request_id = cmid;
  s.request.client_message_id = fx_cmid(cmid);
  s.request.conversation_id = conv;
  s.request.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  s.request.content.schema_version = 1;
  s.request.content.payload_or_ciphertext.p = (uint8_t *)text;
  s.request.content.payload_or_ciphertext.n = strlen(text);
  s.trace_id = qim_trace_id_new();
  return s;
}

static FX_UNUSED qim_commit_key fx_key(fx *f, qim_user_id from, uint64_t cmid) {
  qim_commit_key k = {.tenant_id = f->tenant, .sender_id = from, .client_message_id = fx_cmid(cmid)};
  return k;
}

static FX_UNUSED int fx_key_equal(const qim_commit_key *a, const qim_commit_key *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->sender_id.v, b->sender_id.v) &&
         memcmp(a->client_message_id.b, b->client_message_id.b, 16) == 0;
}

/* Every outbox record, decoded, in offset order. */
typedef struct fx_outbox {
  qim_committed_envelope *env;
  uint64_t *offsets;
  size_t n;
} fx_outbox;

static FX_UNUSED void fx_outbox_read(fx *f, fx_outbox *out) {
  memset(out, 0, sizeof *out);
  uint64_t from = 0;
  for (;;) {
    qim_store_log_read_req r;
    memset(&r, 0, sizeof r);
    r.stream.kind = QIM_LOG_STREAM_OUTBOX;
    r.from = from;
    r.max = 256;
    if (QIM_STORE_SYNC(f->store, logs.read, &r) != 0) abort();
    if (r.out_count == 0) break;
    out->env = realloc(out->env, (out->n + r.out_count) * sizeof *out->env);
    out->offsets = realloc(out->offsets, (out->n + r.out_count) * sizeof *out->offsets);
    for (size_t i = 0; i < r.out_count; i++) {
      memset(&out->env[out->n], 0, sizeof out->env[out->n]);
      if (qim_committed_envelope_decode(r.out_records[i].payload.p, r.out_records[i].payload.n, &out->env[out->n]) != 0)
        abort();
      out->offsets[out->n++] = r.out_records[i].offset;
      from = r.out_records[i].offset + 1;
      qim_store_log_record_free(&r.out_records[i]);
    }
    qim_free(r.out_records);
  }
}

static FX_UNUSED void fx_outbox_free(fx_outbox *o) {
  for (size_t i = 0; i < o->n; i++) qim_committed_envelope_free(&o->env[i]);
  free(o->env);
  free(o->offsets);
  memset(o, 0, sizeof *o);
}

/* Reserves an intent straight through the real store, as a process that crashed right
 * after its reserve would have left it: nobody drives it. Returns its seq. `text` is
 * borrowed only for the call. */
static FX_UNUSED qim_conversation_seq fx_orphan(fx *f, qim_user_id from, qim_conversation_id conv, bool direct,
                                                uint64_t cmid, const char *text, qim_trace_id *trace_out) {
  qim_commit_intent p;
  memset(&p, 0, sizeof p);
  p.key = fx_key(f, from, cmid);
  qim_id_gen_message_id(&f->ids, &p.coordinates.message_id);
  p.coordinates.conversation_id = conv;
  qim_id_gen_last_activity_id(&f->ids, &p.coordinates.last_activity_id);
  p.state = QIM_COMMIT_STATE_RESERVED;
  qim_store_conv_get_req g;
  memset(&g, 0, sizeof g);
  g.tenant_id = f->tenant;
  g.conversation_id = conv;
  if (QIM_STORE_SYNC(f->hook->real, conversations.get, &g) != 0) abort();
  if (direct) {
    p.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    p.delivery.audience.direct.recipients = g.out.direct_users;
    p.delivery.audience.direct.recipient_count = 2;
  } else {
    p.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    p.delivery.audience.group.group_id.v = conv.v;
  }
  p.delivery.inline_body = true;
  p.delivery.created_at = qim_message_id_millis(&p.coordinates.message_id);
  p.record.coordinates = p.coordinates;
  p.record.sender.tenant_id = f->tenant;
  p.record.sender.user_id = from;
  p.record.sender.device_id.v = (qim_u128){0, 99};
  p.record.client_message_id = p.key.client_message_id;
  p.record.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  p.record.content.schema_version = 1;
  p.record.content.payload_or_ciphertext.p = (uint8_t *)text;
  p.record.content.payload_or_ciphertext.n = strlen(text);
  p.record.created_at = p.delivery.created_at;
  p.trace_id = qim_trace_id_new();
  if (trace_out) *trace_out = p.trace_id;
  qim_store_intent_reserve_req r;
  memset(&r, 0, sizeof r);
  r.proposal = &p;
  if (QIM_STORE_SYNC(f->hook->real, intents.reserve, &r) != 0) abort();
  if (r.out.kind != QIM_RESERVE_RESULT_FRESH) abort();
  qim_conversation_seq seq = r.out.intent.coordinates.conversation_seq;
  qim_commit_intent_free(&r.out.intent);
  qim_store_conversation_free(&g.out);
  return seq;
}

/* Moves a stored intent on by hand (a crashed process got that far). */
static FX_UNUSED void fx_advance(fx *f, const qim_commit_key *k, qim_commit_state to) {
  qim_store_intent_advance_req a;
  memset(&a, 0, sizeof a);
  a.key = *k;
  a.to = to;
  a.now = qim_clock_wall_ms(&f->clock.clock);
  if (QIM_STORE_SYNC(f->hook->real, intents.advance, &a) != 0) abort();
}

/* Outbox order = seq order per conversation, and no message twice. */
static FX_UNUSED void fx_assert_outbox_ordered(const fx_outbox *o) {
  for (size_t i = 0; i < o->n; i++) {
    for (size_t j = i + 1; j < o->n; j++) {
      const qim_message_coordinates *a = &o->env[i].record.coordinates, *b = &o->env[j].record.coordinates;
      assert_false(memcmp(a->message_id.b, b->message_id.b, 16) == 0);
      if (qim_u128_eq(a->conversation_id.v, b->conversation_id.v)) assert_true(a->conversation_seq <= b->conversation_seq);
    }
  }
}

static FX_UNUSED int fx_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Polls `load` until the key is Committed (at most ~5 s); returns its coordinates. */
static FX_UNUSED qim_message_coordinates fx_wait_committed(fx *f, const qim_commit_key *k) {
  qim_loaded_commit lc;
  for (int i = 0; i < 500; i++) {
    int rc = qim_commit_load_sync(f->commit, k, &lc);
    if (rc == 0 && lc.kind == QIM_LOADED_COMMIT_COMMITTED) return lc.committed.coordinates;
    if (rc == 0) qim_commit_intent_free(&lc.intent);
    usleep(10000);
  }
  fail_msg("key never committed");
  return lc.committed.coordinates;
}

/* A thread sending `count` messages one after another (sync), cmids from cmid_base; with
 * `text` every message is that text under cmid_base (a retried key). */
typedef struct fx_sender {
  fx *f;
  qim_conversation_id conv;
  qim_user_id user;
  int count;
  uint64_t cmid_base;
  const char *text;       /* NULL: a distinct text per message */
  qim_commit_result *results;
} fx_sender;

static FX_UNUSED void *fx_send_many(void *arg) {
  fx_sender *s = arg;
  for (int i = 0; i < s->count; i++) {
    char text[64];
    snprintf(text, sizeof text, "m%llu", (unsigned long long)(s->cmid_base + (uint64_t)i));
    qim_authenticated_send m = fx_send(s->f, s->user, s->conv, s->cmid_base + (uint64_t)(s->text ? 0 : i),
                                       s->text ? s->text : text);
    qim_commit_send_sync(s->f->commit, &m, &s->results[i]);
  }
  return NULL;
}

/* History records of a conversation as seen by `viewer`, oldest first (up to cap). */
static FX_UNUSED size_t fx_history(fx *f, qim_conversation_id conv, qim_user_id viewer, qim_message_record **out) {
  qim_store_record_query_req r;
  memset(&r, 0, sizeof r);
  r.tenant_id = f->tenant;
  r.conversation_id = conv;
  r.viewer = viewer;
  r.window_low = 0;
  r.window_high = 0x0FFFFFFF;
  r.direction = QIM_HISTORY_DIRECTION_NEWER;
  r.max_items = 100000;
  r.max_bytes = 1u << 30;
  if (QIM_STORE_SYNC(f->store, history.query, &r) != 0) abort();
  *out = r.out_records;
  return r.out_count;
}

static FX_UNUSED void fx_history_free(qim_message_record *recs, size_t n) {
  for (size_t i = 0; i < n; i++) qim_message_record_free(&recs[i]);
  qim_free(recs);
}

#endif
