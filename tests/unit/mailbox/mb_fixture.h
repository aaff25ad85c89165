/*
 * mb_fixture.h — helpers shared by the mailbox tests: a SQLite store in a temporary directory
 * (with a gate on the writer's before_commit hook to hold durability back), a forwarding
 * wrapper store that fails or "crashes" after a chosen call (so replays are exercised at the
 * storage-interface level even where SQLite merges steps), users placed on a chosen shard and
 * lane, dispatch records written straight into a shard's dispatch log, pulls of whole
 * mailboxes, and a push sink that records what it receives.
 * Everything is static inline: each test file is its own binary and uses a subset.
 */
#ifndef QIM_TEST_MB_FIXTURE_H
#define QIM_TEST_MB_FIXTURE_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mailbox/mailbox.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"
#include "testsupport.h"

#define FX_SHARDS 3
#define FX_LANES 2

static inline qim_tenant_id fx_tenant(void) { return (qim_tenant_id){{0x7E00000000000000ull, 1}}; }
static inline qim_shard_config fx_shards(void) { return (qim_shard_config){FX_SHARDS, FX_LANES}; }

static inline void fx_sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL); }

/* ---- the writer gate (holds durability back) ------------------------------------------------- */

typedef struct fx_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int armed, entered;
} fx_gate;

static inline void fx_gate_hook(void *ctx) {
  fx_gate *g = ctx;
  pthread_mutex_lock(&g->mu);
  if (g->armed) {
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (g->armed) pthread_cond_wait(&g->cv, &g->mu);
    g->entered = 0;
  }
  pthread_mutex_unlock(&g->mu);
}

static inline void fx_gate_set(fx_gate *g, int armed) {
  pthread_mutex_lock(&g->mu);
  g->armed = armed;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static inline void fx_gate_wait_entered(fx_gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->entered) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

/* ---- the environment: a store (and its gate) in a temporary directory -------------------------- */

typedef struct fx_env {
  char *dir;
  qim_store *store;
  fx_gate gate;
} fx_env;

static inline void fx_env_open_store(fx_env *e) {
  qim_store_options o = {0};
  o.shards = fx_shards();
  o.before_commit = fx_gate_hook;
  o.hook_ctx = &e->gate;
  char *url;
  if (asprintf(&url, "sqlite:%s/store.db", e->dir) < 0) abort();
  assert_int_equal(qim_store_open(url, &o, &e->store), 0);
  free(url);
}

static inline fx_env *fx_env_new(const char *tag) {
  fx_env *e = calloc(1, sizeof *e);
  e->dir = qim_test_tmpdir(tag);
  pthread_mutex_init(&e->gate.mu, NULL);
  pthread_cond_init(&e->gate.cv, NULL);
  fx_env_open_store(e);
  return e;
}

static inline void fx_env_free(fx_env *e) {
  qim_store_close(e->store);
  pthread_cond_destroy(&e->gate.cv);
  pthread_mutex_destroy(&e->gate.mu);
  qim_test_rmtree(e->dir);
  free(e);
}

static inline qim_mailbox_options fx_mb_options(void) {
  qim_mailbox_options o = {0};
  o.shards = fx_shards();
  o.node_id = 7;
  for (int i = 0; i < QIM_MAILBOX_CURSOR_KEY_SIZE; i++) o.cursor_key[i] = (uint8_t)(0xA0 + i);
  o.idle_poll_ms = 5;
  o.retry_ms = 5;
  return o;
}

static inline qim_mailbox *fx_mailbox(qim_store *s, const qim_mailbox_options *o) {
  qim_mailbox *m = NULL;
  assert_int_equal(qim_mailbox_new(s, o, &m), 0);
  return m;
}

/* Acquires every shard and waits until all are ready. */
static inline void fx_acquire_all(qim_mailbox *m) {
  for (qim_mailbox_shard_id s = 0; s < FX_SHARDS; s++) assert_int_equal(qim_mailbox_shard_acquire_sync(m, s, NULL), 0);
  for (qim_mailbox_shard_id s = 0; s < FX_SHARDS; s++) {
    qim_shard_readiness r;
    assert_int_equal(qim_mailbox_shard_wait_ready(m, s, 10000, &r, NULL), 0);
  }
}

/* ---- users on a chosen shard and lane ------------------------------------------------------------- */

/* The k-th user id (k >= 0) that hashes to (shard, lane). */
static inline qim_user_id fx_user_on(qim_mailbox_shard_id shard, qim_lane_id lane, uint64_t k) {
  qim_shard_config cfg = fx_shards();
  for (uint64_t n = 1;; n++) {
    qim_user_id u = {{0x5500000000000000ull, n}};
    if (qim_shard_of_user(&cfg, fx_tenant(), u) == shard && qim_lane_of_user(&cfg, fx_tenant(), u) == lane &&
        k-- == 0)
      return u;
  }
}

static inline qim_authenticated_actor fx_actor(qim_user_id u, uint64_t device) {
  return (qim_authenticated_actor){fx_tenant(), u, {{0xDE00000000000000ull, device}}};
}

/* ---- dispatch records ------------------------------------------------------------------------------ */

typedef struct fx_msg {
  uint64_t n;                    /* makes the message id */
  qim_user_id sender;
  qim_message_type type;
  const char *custom_type;
  const char *payload;
  bool inline_body;
  uint32_t chunk_size;           /* 0 = one chunk */
} fx_msg;

static inline qim_message_id fx_message_id(uint64_t n) {
  qim_message_id id = {{0}};
  id.b[0] = 0x11;
  for (int i = 0; i < 8; i++) id.b[8 + i] = (uint8_t)(n >> (56 - 8 * i));
  return id;
}

/* The dispatch of `msg` for `shard` with recipients r[0..count). Owns its members. */
static inline qim_group_dispatch fx_dispatch(const fx_msg *msg, qim_mailbox_shard_id shard, const qim_user_id *r,
                                             size_t count) {
  qim_group_dispatch d = {0};
  d.source_message.message_id = fx_message_id(msg->n);
  d.source_message.conversation_id.v = (qim_u128){0xC0, 1};
  d.source_message.conversation_seq = msg->n;
  memcpy(d.source_message.last_activity_id.b, d.source_message.message_id.b, 16);
  d.tenant_id = fx_tenant();
  d.sender_id = msg->sender;
  d.client_message_id.b[0] = 0xC1;
  d.client_message_id.b[15] = (uint8_t)msg->n;
  d.target_shard = shard;
  d.dispatch_id = qim_dispatch_id_make(&d.source_message.message_id, shard);
  d.membership_version = 1;
  size_t cs = msg->chunk_size ? msg->chunk_size : (count ? count : 1);
  d.chunk_count = (count + cs - 1) / cs;
  d.recipient_chunks = d.chunk_count ? qim_calloc(d.chunk_count, sizeof *d.recipient_chunks) : NULL;
  for (size_t c = 0; c < d.chunk_count; c++) {
    size_t from = c * cs, to = from + cs < count ? from + cs : count;
    d.recipient_chunks[c].chunk_id = (uint32_t)c;
    d.recipient_chunks[c].recipient_count = to - from;
    d.recipient_chunks[c].recipient_ids = qim_malloc((to - from) * sizeof(qim_user_id));
    memcpy(d.recipient_chunks[c].recipient_ids, r + from, (to - from) * sizeof(qim_user_id));
  }
  d.content.message_type = msg->type;
  d.content.custom_type = msg->custom_type ? qim_strdup(msg->custom_type) : NULL;
  d.content.schema_version = 0; /* the payload is the document itself, not a Tinode payload */
  const char *p = msg->payload ? msg->payload : "\"hello\"";
  d.content.payload_or_ciphertext.n = strlen(p);
  d.content.payload_or_ciphertext.p = qim_memdup(p, strlen(p));
  d.inline_body = msg->inline_body;
  d.created_at = 1700000000000ull + msg->n;
  d.trace_id.b[0] = 0x7A;
  d.trace_id.b[15] = (uint8_t)msg->n;
  return d;
}

/* Appends raw bytes to a shard's dispatch log under `key`; returns the MailboxSeq it gets. */
static inline qim_mailbox_seq fx_append_raw(qim_store *s, qim_mailbox_shard_id shard, const uint8_t key[16],
                                           const qim_bytes *payload) {
  qim_store_log_append a = {0};
  a.stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, shard};
  memcpy(a.key, key, 16);
  a.payload = *payload;
  qim_store_log_append_req r = {0};
  r.appends = &a;
  r.append_count = 1;
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &r), 0);
  return qim_mailbox_seq_make(a.out_epoch, a.out_position.offset);
}

static inline qim_mailbox_seq fx_append(qim_store *s, const qim_group_dispatch *d) {
  qim_bytes b;
  assert_int_equal(qim_group_dispatch_encode(d, &b), 0);
  qim_mailbox_seq seq = fx_append_raw(s, d->target_shard, d->source_message.message_id.b, &b);
  qim_bytes_free(&b);
  return seq;
}

/* Builds and appends the dispatch of `msg` for `shard`; returns its MailboxSeq. */
static inline qim_mailbox_seq fx_send(qim_store *s, const fx_msg *msg, qim_mailbox_shard_id shard,
                                      const qim_user_id *r, size_t count) {
  qim_group_dispatch d = fx_dispatch(msg, shard, r, count);
  qim_mailbox_seq seq = fx_append(s, &d);
  qim_group_dispatch_free(&d);
  return seq;
}

/* ---- pulling ---------------------------------------------------------------------------------------- */

/* Everything a user's mailbox holds up to its lane watermark, by pages from a cursor at 0.
 * *count entries (caller frees with fx_entries_free); returns the final covered seq. */
typedef struct fx_pulled {
  qim_mailbox_entry *e;
  size_t n;
  qim_mailbox_seq covered, watermark;
  size_t pages;
} fx_pulled;

static inline qim_mailbox_cursor fx_cursor(qim_mailbox *m, qim_user_id u, qim_mailbox_seq seq) {
  qim_mailbox_options o = fx_mb_options();
  qim_shard_config cfg = fx_shards();
  qim_authenticated_actor a = fx_actor(u, 1);
  qim_cursor_identity id = {a.tenant_id, a.user_id, a.device_id, qim_shard_of_user(&cfg, a.tenant_id, u),
                            qim_lane_of_user(&cfg, a.tenant_id, u), 1};
  qim_mailbox_cursor c;
  (void)m;
  qim_mailbox_cursor_sign(o.cursor_key, &id, seq, &c);
  return c;
}

static inline qim_mailbox_pull_request fx_pull_request(qim_user_id u, const qim_mailbox_cursor *c, uint32_t items,
                                                       uint32_t bytes) {
  qim_mailbox_pull_request r = {0};
  r.actor = fx_actor(u, 1);
  r.cursor = *c;
  r.range = (qim_mailbox_range_query){fx_tenant(), u, c->last_applied_seq, 0, items, bytes};
  return r;
}

static inline fx_pulled fx_pull_all(qim_mailbox *m, qim_user_id u, qim_mailbox_seq from, uint32_t items) {
  fx_pulled out = {0};
  qim_mailbox_cursor c = fx_cursor(m, u, from);
  for (;;) {
    qim_mailbox_pull_request r = fx_pull_request(u, &c, items, 0);
    qim_mailbox_page page;
    qim_mailbox_cursor next;
    int rc = qim_mailbox_pull_sync(m, &r, &page, &next, NULL);
    assert_int_equal(rc, 0);
    out.e = qim_realloc(out.e, (out.n + page.entry_count + 1) * sizeof *out.e);
    for (size_t i = 0; i < page.entry_count; i++) qim_mailbox_entry_copy(&out.e[out.n++], &page.entries[i]);
    out.covered = page.covered_through_seq;
    out.watermark = page.lane_watermark;
    out.pages++;
    bool more = page.has_more;
    qim_mailbox_page_free(&page);
    qim_mailbox_cursor_free(&c);
    c = next;
    if (!more) break;
  }
  qim_mailbox_cursor_free(&c);
  return out;
}

static inline void fx_pulled_free(fx_pulled *p) {
  for (size_t i = 0; i < p->n; i++) qim_mailbox_entry_free(&p->e[i]);
  qim_free(p->e);
  *p = (fx_pulled){0};
}

/* ---- a push sink that records --------------------------------------------------------------------- */

typedef struct fx_sink {
  pthread_mutex_t mu;
  qim_push_batch **batches;
  size_t n;
  size_t entries;
} fx_sink;

static inline void fx_sink_fn(qim_push_batch *b, void *ctx) {
  fx_sink *s = ctx;
  pthread_mutex_lock(&s->mu);
  s->batches = realloc(s->batches, (s->n + 1) * sizeof *s->batches);
  s->batches[s->n++] = b;
  s->entries += b->entry_count;
  pthread_mutex_unlock(&s->mu);
}

static inline size_t fx_sink_entries(fx_sink *s) {
  pthread_mutex_lock(&s->mu);
  size_t n = s->entries;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static inline void fx_sink_clear(fx_sink *s) {
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->n; i++) qim_mailbox_push_batch_free(s->batches[i]);
  free(s->batches);
  s->batches = NULL;
  s->n = s->entries = 0;
  pthread_mutex_unlock(&s->mu);
}

/* ---- the wrapper store ------------------------------------------------------------------------------ */

typedef enum fx_op {
  FX_LOG_APPEND, FX_LOG_READ, FX_LOG_TRIM, FX_SHARD_TAKEOVER, FX_SHARD_GET, FX_MB_APPEND, FX_PROGRESS_GET,
  FX_RANGE, FX_WM_GET, FX_WM_ADVANCE, FX_OP_COUNT
} fx_op;

typedef enum fx_action {
  FX_NONE = 0,
  FX_REFUSE,       /* calls nth .. nth+times-1 of the op are refused with -EIO */
  FX_CRASH_AFTER,  /* call nth reaches the store, its caller sees -EIO, and every later call
                      is refused: the process "died" right after the store applied it */
  FX_CRASH_BEFORE, /* call nth and every later call are refused */
} fx_action;

typedef struct fx_wrap {
  qim_store base;
  qim_store_vtable vt;
  qim_store *inner;
  pthread_mutex_t mu;
  fx_op op;
  fx_action action;
  int nth, times;
  int calls[FX_OP_COUNT];
  bool dead;
  /* in flight requests whose completion we intercept */
  struct fx_slot { qim_store_req *req; void (*done)(qim_store_req *); void *data; fx_op op; bool fail; } slots[512];
  /* called with every completion of `hook_op` before the caller sees it */
  fx_op hook_op;
  void (*hook)(struct fx_wrap *w, qim_store_req *r);
} fx_wrap;

static inline void fx_wrap_done(qim_store_req *r);

/* Decides what happens to one call: 0 forward, <0 refuse. */
static inline int fx_wrap_before(fx_wrap *w, fx_op op, qim_store_req *r) {
  pthread_mutex_lock(&w->mu);
  int n = ++w->calls[op];
  int rc = 0;
  bool fail_after = false;
  if (w->dead) {
    rc = -EIO;
  } else if (w->action && w->op == op && n >= w->nth) {
    if (w->action == FX_REFUSE && n < w->nth + w->times) rc = -EIO;
    if (w->action == FX_CRASH_BEFORE) rc = -EIO, w->dead = true;
    if (w->action == FX_CRASH_AFTER && n == w->nth) fail_after = true, w->dead = true;
  }
  if (rc == 0 && (fail_after || (w->hook && w->hook_op == op))) {
    size_t i = 0;
    while (w->slots[i].req) i++;
    w->slots[i] = (struct fx_slot){r, r->done, r->data, op, fail_after};
    r->done = fx_wrap_done;
    r->data = w;
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* Undoes the interception of a request the inner store refused synchronously. */
static inline void fx_wrap_forget(fx_wrap *w, qim_store_req *r) {
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < 512; i++)
    if (w->slots[i].req == r) {
      r->done = w->slots[i].done, r->data = w->slots[i].data;
      w->slots[i] = (struct fx_slot){0};
    }
  pthread_mutex_unlock(&w->mu);
}

static inline void fx_wrap_done(qim_store_req *r) {
  fx_wrap *w = r->data;
  pthread_mutex_lock(&w->mu);
  size_t i = 0;
  while (w->slots[i].req != r) i++;
  struct fx_slot s = w->slots[i];
  w->slots[i] = (struct fx_slot){0};
  pthread_mutex_unlock(&w->mu);
  r->done = s.done, r->data = s.data;
  if (w->hook && w->hook_op == s.op) w->hook(w, r);
  if (s.fail) r->status = -EIO; /* applied, but the caller never learns it */
  r->done(r);
}

#define FX_WRAP_OP(dom, name, T, OP)                                \
  static inline int fx_w_##dom##_##name(qim_store *s, T *r) {      \
    fx_wrap *w = (fx_wrap *)s;                                      \
    int rc = fx_wrap_before(w, OP, &r->req);                        \
    if (rc) return rc;                                              \
    rc = w->inner->vt->dom.name(w->inner, r);                       \
    if (rc) fx_wrap_forget(w, &r->req);                             \
    return rc;                                                      \
  }
FX_WRAP_OP(logs, append, qim_store_log_append_req, FX_LOG_APPEND)
FX_WRAP_OP(logs, read, qim_store_log_read_req, FX_LOG_READ)
FX_WRAP_OP(logs, trim, qim_store_log_trim_req, FX_LOG_TRIM)
FX_WRAP_OP(mailboxes, shard_takeover, qim_store_shard_takeover_req, FX_SHARD_TAKEOVER)
FX_WRAP_OP(mailboxes, shard_get, qim_store_shard_get_req, FX_SHARD_GET)
FX_WRAP_OP(mailboxes, append, qim_store_mailbox_append_req, FX_MB_APPEND)
FX_WRAP_OP(mailboxes, progress_get, qim_store_progress_get_req, FX_PROGRESS_GET)
FX_WRAP_OP(mailboxes, range, qim_store_mailbox_range_req, FX_RANGE)
FX_WRAP_OP(mailboxes, watermark_get, qim_store_watermark_get_req, FX_WM_GET)
FX_WRAP_OP(mailboxes, watermark_advance, qim_store_watermark_advance_req, FX_WM_ADVANCE)

static inline fx_wrap *fx_wrap_new(qim_store *inner) {
  fx_wrap *w = calloc(1, sizeof *w);
  w->inner = inner;
  pthread_mutex_init(&w->mu, NULL);
  w->vt.name = "fx-wrap";
  w->vt.logs.append = fx_w_logs_append;
  w->vt.logs.read = fx_w_logs_read;
  w->vt.logs.trim = fx_w_logs_trim;
  w->vt.mailboxes.shard_takeover = fx_w_mailboxes_shard_takeover;
  w->vt.mailboxes.shard_get = fx_w_mailboxes_shard_get;
  w->vt.mailboxes.append = fx_w_mailboxes_append;
  w->vt.mailboxes.progress_get = fx_w_mailboxes_progress_get;
  w->vt.mailboxes.range = fx_w_mailboxes_range;
  w->vt.mailboxes.watermark_get = fx_w_mailboxes_watermark_get;
  w->vt.mailboxes.watermark_advance = fx_w_mailboxes_watermark_advance;
  w->base.vt = &w->vt;
  return w;
}

static inline void fx_wrap_set(fx_wrap *w, fx_op op, fx_action action, int nth, int times) {
  pthread_mutex_lock(&w->mu);
  w->op = op, w->action = action, w->nth = w->calls[op] + nth, w->times = times;
  pthread_mutex_unlock(&w->mu);
}

static inline int fx_wrap_calls(fx_wrap *w, fx_op op) {
  pthread_mutex_lock(&w->mu);
  int n = w->calls[op];
  pthread_mutex_unlock(&w->mu);
  return n;
}

static inline bool fx_wrap_dead(fx_wrap *w) {
  pthread_mutex_lock(&w->mu);
  bool d = w->dead;
  pthread_mutex_unlock(&w->mu);
  return d;
}

static inline void fx_wrap_free(fx_wrap *w) {
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* Waits (up to 10 s) until `cond(ctx)` holds. */
static inline bool fx_eventually(bool (*cond)(void *), void *ctx) {
  for (int i = 0; i < 2000; i++) {
    if (cond(ctx)) return true;
    fx_sleep_ms(5);
  }
  return cond(ctx);
}

#endif
