/*
 * commit.c — the commit's lifecycle: configuration, the worker threads where steps
 * after reserve complete, the key and conversation tables, counters and the blocking
 * helpers for tests and tools. The state machine itself is in commit_drive.c.
 */
#include <errno.h>
#include <string.h>

#include "commit/commit_int.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

void qim_commit_config_default(qim_commit_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_message_size = 128 * 1024;
  cfg->inline_body_max = 4096;
  cfg->max_mentions = 64;
  cfg->dedupe_window_ms = UINT64_C(7) * 24 * 3600 * 1000;
  cfg->rate_per_sec = 20;
  cfg->rate_burst = 40;
  cfg->rate_max_users = 65536;
  cfg->clock_tolerance_ms = 1000;
  cfg->retention_class = QIM_RETENTION_CLASS_DEFAULT;
  cfg->workers = 1;
  cfg->maintenance_interval_ms = 1000;
  cfg->recovery_page = 1024;
  cfg->retry_base_ms = 100;
  cfg->retry_max_ms = 30000;
  cfg->verify_outbox = true;
  cfg->outbox_pipeline = 32;
  cfg->commit_in_reserve = true;
}

/* ---- small helpers ------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= UINT64_C(0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= UINT64_C(0xc4ceb9fe1a85ec53);
  return x ^ (x >> 33);
}

static uint64_t load64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | b[i];
  return v;
}

uint64_t qim__commit_key_hash(const qim_commit_key *k) {
  uint64_t h = mix64(k->tenant_id.v.hi ^ mix64(k->tenant_id.v.lo));
  h = mix64(h ^ k->sender_id.v.hi) ^ mix64(k->sender_id.v.lo + h);
  h = mix64(h ^ load64(k->client_message_id.b));
  return mix64(h ^ load64(k->client_message_id.b + 8));
}

static uint64_t conv_hash(qim_tenant_id t, qim_conversation_id id) {
  return mix64(mix64(t.v.hi ^ mix64(t.v.lo)) ^ mix64(id.v.hi) ^ (id.v.lo * 0x9e3779b97f4a7c15u));
}

int qim__commit_key_equal(const qim_commit_key *a, const qim_commit_key *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->sender_id.v, b->sender_id.v) &&
         memcmp(a->client_message_id.b, b->client_message_id.b, 16) == 0;
}

uint64_t qim__now_ms(qim_commit *c) { return qim_clock_mono_ns(c->clock) / 1000000u; }
uint64_t qim__wall_ms(qim_commit *c) { return qim_clock_wall_ms(c->clock); }

void qim__hex16(const uint8_t b[16], char out[33]) { qim_hex_encode(b, 16, out, 33); }

void qim__u128_hex(qim_u128 v, char out[33]) {
  uint8_t b[16];
  qim_u128_to_be(v, b);
  qim__hex16(b, out);
}

/* ---- tables -------------------------------------------------------------------- */

/* Doubles a chained table when it is as full as it is wide; chains stay short. */
static void keys_grow(qim_commit *c) {
  size_t n = c->key_slots * 2;
  qim__commit_entry **t = qim_calloc(n, sizeof *t);
  for (size_t i = 0; i < c->key_slots; i++) {
    for (qim__commit_entry *e = c->keys[i], *next; e; e = next) {
      next = e->hnext;
      e->hnext = t[e->hash & (n - 1)];
      t[e->hash & (n - 1)] = e;
    }
  }
  qim_free(c->keys);
  c->keys = t;
  c->key_slots = n;
}

qim__commit_entry *qim__entry_find(qim_commit *c, const qim_commit_key *k) {
  uint64_t h = qim__commit_key_hash(k);
  for (qim__commit_entry *e = c->keys[h & (c->key_slots - 1)]; e; e = e->hnext)
    if (e->hash == h && qim__commit_key_equal(&e->key, k)) return e;
  return NULL;
}

qim__commit_conv *qim__conv_find(qim_commit *c, qim_tenant_id t, qim_conversation_id id) {
  uint64_t h = conv_hash(t, id);
  for (qim__commit_conv *cv = c->convs[h & (c->conv_slots - 1)]; cv; cv = cv->hnext)
    if (cv->hash == h && qim_u128_eq(cv->id.v, id.v) && qim_u128_eq(cv->tenant_id.v, t.v)) return cv;
  return NULL;
}

static void convs_grow(qim_commit *c) {
  size_t n = c->conv_slots * 2;
  qim__commit_conv **t = qim_calloc(n, sizeof *t);
  for (size_t i = 0; i < c->conv_slots; i++) {
    for (qim__commit_conv *cv = c->convs[i], *next; cv; cv = next) {
      next = cv->hnext;
      cv->hnext = t[cv->hash & (n - 1)];
      t[cv->hash & (n - 1)] = cv;
    }
  }
  qim_free(c->convs);
  c->convs = t;
  c->conv_slots = n;
}

/* The conversation's structure, created on first use. A conversation is always driven
 * by the same worker, so its steps complete on one thread. */
qim__commit_conv *qim__conv_get(qim_commit *c, qim_tenant_id t, qim_conversation_id id) {
  qim__commit_conv *cv = qim__conv_find(c, t, id);
  if (cv) return cv;
  if (c->conv_count >= c->conv_slots) convs_grow(c);
  cv = qim_calloc(1, sizeof *cv);
  cv->tenant_id = t;
  cv->id = id;
  cv->hash = conv_hash(t, id);
  cv->next_ticket = 1;
  cv->worker = &c->workers[cv->hash % c->worker_count];
  cv->hnext = c->convs[cv->hash & (c->conv_slots - 1)];
  c->convs[cv->hash & (c->conv_slots - 1)] = cv;
  c->conv_count++;
  return cv;
}

void qim__conv_maybe_free(qim_commit *c, qim__commit_conv *cv) {
  if (cv->entries > 0 || cv->draining || cv->gate_head || cv->gate_busy) return;
  qim__commit_conv **pp = &c->convs[cv->hash & (c->conv_slots - 1)];
  while (*pp != cv) pp = &(*pp)->hnext;
  *pp = cv->hnext;
  c->conv_count--;
  qim_free(cv->drain_keys);
  qim_free(cv);
}

qim__commit_entry *qim__entry_new(qim_commit *c, const qim_commit_key *k, qim_tenant_id t,
                                  qim_conversation_id conv) {
  if (c->live >= c->key_slots) keys_grow(c);
  qim__commit_entry *e = qim_calloc(1, sizeof *e);
  e->key = *k;
  e->hash = qim__commit_key_hash(k);
  e->hnext = c->keys[e->hash & (c->key_slots - 1)];
  c->keys[e->hash & (c->key_slots - 1)] = e;
  e->conv = qim__conv_get(c, t, conv);
  e->worker = e->conv->worker;
  e->anext = e->conv->all_head;
  if (e->anext) e->anext->aprev = e;
  e->conv->all_head = e;
  e->conv->entries++;
  c->live++;
  return e;
}

void qim__entry_free(qim_commit *c, qim__commit_entry *e) {
  qim__commit_conv *cv = e->conv;
  qim__commit_entry **pp = &c->keys[e->hash & (c->key_slots - 1)];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  qim__pending_remove(cv, e);
  qim__ready_remove(cv, e);
  if (e->aprev) e->aprev->anext = e->anext; else cv->all_head = e->anext;
  if (e->anext) e->anext->aprev = e->aprev;
  cv->entries--;
  c->live--;
  qim_commit_intent_free(&e->intent);
  qim_free(e);
}

void qim__inflight_done(qim_commit *c) {
  if (--c->inflight == 0 && c->closing) pthread_cond_broadcast(&c->idle_cv);
}

/* ---- workers ------------------------------------------------------------------- */

static void wake_run(qim_cq_item *it) { (void)it; }

static void *worker_main(void *arg) {
  qim__commit_worker *w = arg;
  qim_commit *c = w->c;
  qim_log_name_thread("commit");
  while (!atomic_load(&c->stopping)) {
    int timeout = -1;
    if (w->index == 0 && c->cfg.maintenance_interval_ms > 0) {
      uint64_t now = qim__now_ms(c);
      timeout = now >= c->next_maintenance_ms ? 0 : (int)(c->next_maintenance_ms - now);
      if (timeout > (int)c->cfg.maintenance_interval_ms) timeout = (int)c->cfg.maintenance_interval_ms;
    }
    qim_cq_wait(w->cq, timeout);
    if (w->index == 0 && !atomic_load(&c->stopping)) qim__maintenance_tick(c);
  }
  /* Completions posted while stopping (none should be in flight) still run. */
  qim_cq_drain(w->cq);
  return NULL;
}

static int workers_start(qim_commit *c) {
  c->workers = qim_calloc(c->worker_count, sizeof *c->workers);
  for (unsigned i = 0; i < c->worker_count; i++) {
    qim__commit_worker *w = &c->workers[i];
    w->c = c;
    w->index = i;
    w->wake.run = wake_run;
    int rc = qim_cq_new_blocking(&w->cq);
    if (rc < 0) return rc;
  }
  for (unsigned i = 0; i < c->worker_count; i++) {
    int rc = pthread_create(&c->workers[i].thread, NULL, worker_main, &c->workers[i]);
    if (rc != 0) return -rc;
    c->workers[i].started = true;
  }
  return 0;
}

static void workers_stop(qim_commit *c) {
  if (!c->workers) return;
  atomic_store(&c->stopping, true);
  for (unsigned i = 0; i < c->worker_count; i++) {
    qim__commit_worker *w = &c->workers[i];
    if (w->started) {
      qim_cq_post(w->cq, &w->wake);
      pthread_join(w->thread, NULL);
    }
  }
  for (unsigned i = 0; i < c->worker_count; i++) qim_cq_free(c->workers[i].cq);
  qim_free(c->workers);
  c->workers = NULL;
}

/* ---- create / destroy ------------------------------------------------------------ */

static int config_check(const qim_commit_config *cfg) {
  if (cfg->max_message_size == 0 || cfg->workers == 0 || cfg->workers > 64) return -EINVAL;
  if (cfg->recovery_page == 0 || cfg->retry_base_ms == 0 || cfg->retry_max_ms < cfg->retry_base_ms)
    return -EINVAL;
  if (cfg->outbox_pipeline == 0) return -EINVAL;
  if (cfg->rate_per_sec > 0 && cfg->rate_burst == 0) return -EINVAL;
  return 0;
}

static int commit_init(qim_commit *c, qim_store *store, const qim_clock *clock, qim_id_gen *ids) {
  c->store = store;
  c->clock = clock;
  c->ids = ids;
  if (!ids) {
    qim_writer_id writer;
    int rc = qim_writer_id_make(c->cfg.node_id, 0, &writer);
    if (rc == 0) rc = qim_id_gen_init(&c->own_ids, clock, writer, c->cfg.clock_tolerance_ms);
    if (rc < 0) return rc;
    c->ids = &c->own_ids;
    c->owns_ids = true;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->idle_cv, NULL);
  c->key_slots = 64;
  c->keys = qim_calloc(c->key_slots, sizeof *c->keys);
  c->conv_slots = 64;
  c->convs = qim_calloc(c->conv_slots, sizeof *c->convs);
  c->facts = qim_calloc(QIM__FACTS_SLOTS, sizeof *c->facts);
  if (c->cfg.rate_per_sec > 0)
    c->rate = qim__rate_new(c->cfg.rate_per_sec, c->cfg.rate_burst, c->cfg.rate_max_users);
  c->worker_count = c->cfg.workers;
  c->next_maintenance_ms = qim__now_ms(c); /* the first pass runs at start */
  return workers_start(c);
}

int qim_commit_create(qim_store *store, const qim_clock *clock, qim_id_gen *ids,
                      const qim_commit_config *cfg, qim_commit **out) {
  *out = NULL;
  if (!store || !clock) return -EINVAL;
  qim_commit *c = qim_calloc(1, sizeof *c);
  if (cfg) c->cfg = *cfg; else qim_commit_config_default(&c->cfg);
  int rc = config_check(&c->cfg);
  if (rc == 0) rc = commit_init(c, store, clock, ids);
  if (rc < 0) {
    qim_commit_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

static void free_tables(qim_commit *c) {
  for (size_t i = 0; c->keys && i < c->key_slots; i++) {
    while (c->keys[i]) {
      qim__commit_entry *e = c->keys[i];
      /* A send still attached here broke the destroy contract; do not touch it. */
      e->waiters = NULL;
      if (e->pass) qim__pass_abandon(e->pass);
      qim__entry_free(c, e);
    }
  }
  for (size_t i = 0; c->convs && i < c->conv_slots; i++) {
    while (c->convs[i]) {
      qim__commit_conv *cv = c->convs[i];
      cv->draining = false;
      qim__conv_maybe_free(c, cv);
    }
  }
  qim_free(c->keys);
  qim_free(c->convs);
  qim_free(c->facts);
}

void qim_commit_destroy(qim_commit *c) {
  if (!c) return;
  if (c->keys) {
    pthread_mutex_lock(&c->mu);
    c->closing = true;
    while (c->inflight > 0) pthread_cond_wait(&c->idle_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
  }
  workers_stop(c);
  if (c->keys) {
    free_tables(c);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle_cv);
  }
  qim__rate_free(c->rate);
  if (c->owns_ids) qim_id_gen_destroy(&c->own_ids);
  qim_free(c);
}

void qim_commit_get_stats(qim_commit *c, qim_commit_stats *o) {
  o->sends = atomic_load(&c->n.sends);
  o->acks = atomic_load(&c->n.acks);
  o->fresh = atomic_load(&c->n.fresh);
  o->existing = atomic_load(&c->n.existing);
  o->replayed = atomic_load(&c->n.replayed);
  o->refused = atomic_load(&c->n.refused);
  o->step_failures = atomic_load(&c->n.step_failures);
  o->step_retries = atomic_load(&c->n.step_retries);
  o->order_conflicts = atomic_load(&c->n.order_conflicts);
  o->drains = atomic_load(&c->n.drains);
  o->adopted = atomic_load(&c->n.adopted);
  o->recovered = atomic_load(&c->n.recovered);
  o->invariant_violations = atomic_load(&c->n.invariant_violations);
  o->forgotten = atomic_load(&c->n.forgotten);
  o->rate_limited = atomic_load(&c->n.rate_limited);
  o->committed_in_reserve = atomic_load(&c->n.committed_in_reserve);
  pthread_mutex_lock(&c->mu);
  o->live_entries = c->live;
  pthread_mutex_unlock(&c->mu);
}

/* ---- blocking helpers -------------------------------------------------------------- */

static void sync_op_done(qim_commit_op *op) { *(bool *)op->data = true; }

/* Runs `start` with a private blocking queue and waits for its completion. */
static int op_sync(qim_commit *c, const void *in, int (*start)(qim_commit *, const void *, qim_commit_op *),
                   qim_commit_result *out) {
  bool done = false;
  qim_commit_op op = {.done = sync_op_done, .data = &done};
  int rc = qim_cq_new_blocking(&op.cq);
  if (rc < 0) {
    memset(out, 0, sizeof *out);
    out->status = out->error.code = rc;
    return rc;
  }
  if (start(c, in, &op) == 0)
    while (!done) qim_cq_wait(op.cq, -1);
  qim_cq_free(op.cq);
  *out = op.result;
  return out->status;
}

static int start_send(qim_commit *c, const void *in, qim_commit_op *op) { return qim_commit_send(c, in, op); }
static int start_control(qim_commit *c, const void *in, qim_commit_op *op) {
  return qim_commit_send_control(c, in, op);
}

int qim_commit_send_sync(qim_commit *c, const qim_authenticated_send *s, qim_commit_result *out) {
  return op_sync(c, s, start_send, out);
}

int qim_commit_send_control_sync(qim_commit *c, const qim_commit_control *ctl, qim_commit_result *out) {
  return op_sync(c, ctl, start_control, out);
}
