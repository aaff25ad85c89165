/*
 * commit_recover.c — taking over intents nobody is driving, in order.
 *
 * A drain of one conversation lists its intents not yet Committed (ordered by seq and
 * order, store intents.list_in_flight), adopts those this process does not drive, and
 * lets the conversation outbox strictly in the listing's order until every listed
 * intent is Outboxed; local sends reserved after the listing follow it. Drains start
 * when the store refuses an OUTBOXED step (a lower intent is ahead), when a reserve
 * answers Existing for a key nobody here drives, and from recovery.
 *
 * A recovery pass lists the in-flight intents of every conversation, adopts the orphans
 * (older than recovery_grace_ms: younger ones may belong to a live send on another
 * node) and starts a drain per conversation with the listed slice as its order. It ends
 * when each orphan it adopted reached Committed or failed; a failed one is retried with
 * backoff by later passes and keeps its conversation waiting. The maintenance tick on
 * worker 0 runs a pass and the dedupe-window forget at start and every
 * maintenance_interval_ms.
 */
#include <errno.h>
#include <string.h>

#include "commit/commit_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

static void drain_listed(qim_store_req *r);

/* ---- drains ------------------------------------------------------------------------------ */

/* The listing failed: whoever waited on the drain fails its step and retries later. */
static void conv_stalled(qim_commit *c, qim__commit_conv *cv, int st) {
  for (qim__commit_entry *e = cv->all_head; e; e = e->anext) {
    bool waiting = e->needs_drain || e == cv->ready_head;
    if (waiting && e->reserved && !e->busy && !e->failed && e->state < QIM_COMMIT_STATE_OUTBOXED)
      qim__entry_fail(c, e, st, "drain", 0);
  }
}

void qim__conv_request_drain(qim_commit *c, qim__commit_conv *cv) {
  if (c->closing) return;
  if (cv->draining) {
    cv->drain_again = true; /* the running listing may predate what asked */
    return;
  }
  QIM__COUNT(c, drains);
  cv->draining = cv->listing = true;
  qim_store_intent_list_req *q = &cv->list;
  memset(q, 0, sizeof *q);
  q->req.cq = cv->worker->cq;
  q->req.done = drain_listed;
  q->req.data = cv;
  q->has_conversation = true;
  q->tenant_id = cv->tenant_id;
  q->conversation_id = cv->id;
  q->limit = c->cfg.recovery_page;
  c->inflight++;
  int rc = c->store->vt->intents.list_in_flight(c->store, q);
  if (rc < 0) {
    qim__inflight_done(c);
    cv->draining = cv->listing = false;
    conv_stalled(c, cv, rc);
  }
}

/* Takes over a listed intent (ownership of *in moves to the entry or is freed). */
qim__commit_entry *qim__entry_adopt(qim_commit *c, qim__commit_conv *cv, qim_commit_intent *in,
                                    qim__commit_pass *pass) {
  qim__commit_entry *e = qim__entry_find(c, &in->key);
  if (e) {
    if (!e->reserved) {
      e->intent = *in;
      memset(in, 0, sizeof *in);
      e->reserved = true;
      e->state = e->intent.state;
      e->trace = e->intent.trace_id;
      qim__pending_remove(cv, e);
    } else {
      if (!e->busy && in->state > e->state) e->state = in->state;
      qim_commit_intent_free(in);
    }
  } else {
    e = qim__entry_new(c, &in->key, cv->tenant_id, cv->id);
    e->intent = *in;
    memset(in, 0, sizeof *in);
    e->reserved = e->adopted = true;
    e->state = e->intent.state;
    e->trace = e->intent.trace_id;
    if (pass) {
      e->pass = pass;
      pass->outstanding++;
      pass->task->adopted++;
      pass->last_adopted++;
    }
    QIM__COUNT(c, adopted);
    qim__entry_log(e, "commit.adopted", NULL);
  }
  e->listed = true;
  e->needs_drain = false;
  return e;
}

/* Starts following `keys` (owned) as the conversation's order. */
static void drain_start(qim_commit *c, qim__commit_conv *cv, qim_commit_key *keys, size_t n) {
  cv->drain_keys = keys;
  cv->drain_n = n;
  cv->drain_pos = 0;
  char conv[33], extra[48];
  qim__u128_hex(cv->id.v, conv);
  snprintf(extra, sizeof extra, "listed=%zu", n);
  QIM_LOGI(NULL, "commit.drain", "conv=%s %s", conv, extra);
  for (size_t i = 0; i < n; i++) {
    qim__commit_entry *e = qim__entry_find(c, &keys[i]);
    if (e) qim__entry_drive(c, e);
  }
  qim__conv_kick(c, cv);
}

static void drain_listed(qim_store_req *r) {
  qim__commit_conv *cv = r->data;
  qim_commit *c = cv->worker->c;
  qim_store_intent_list_req *q = &cv->list;
  pthread_mutex_lock(&c->mu);
  qim__inflight_done(c);
  cv->listing = false;
  if (r->status < 0) {
    cv->draining = false;
    conv_stalled(c, cv, r->status);
  } else {
    qim_commit_key *keys = qim_calloc(q->out_count ? q->out_count : 1, sizeof *keys);
    for (size_t i = 0; i < q->out_count; i++) {
      keys[i] = q->out_intents[i].key;
      qim__entry_adopt(c, cv, &q->out_intents[i], NULL);
    }
    qim_free(q->out_intents);
    drain_start(c, cv, keys, q->out_count);
  }
  qim__conv_kick(c, cv);
  qim__conv_maybe_free(c, cv);
  pthread_mutex_unlock(&c->mu);
}

/* Moves the drain past listed intents that are Outboxed; at the end, normal order
 * resumes (or another listing, when one was asked for meanwhile). */
void qim__conv_drain_step(qim_commit *c, qim__commit_conv *cv) {
  if (!cv->draining || cv->listing) return;
  while (cv->drain_pos < cv->drain_n) {
    qim__commit_entry *e = qim__entry_find(c, &cv->drain_keys[cv->drain_pos]);
    if (e && e->state < QIM_COMMIT_STATE_OUTBOXED) return;
    cv->drain_pos++;
  }
  qim_free(cv->drain_keys);
  cv->drain_keys = NULL;
  cv->drain_n = cv->drain_pos = 0;
  cv->draining = false;
  if (cv->drain_again) {
    cv->drain_again = false;
    qim__conv_request_drain(c, cv);
    return;
  }
  /* Whose order is still unknown was not listed: ask the store where it is. */
  for (qim__commit_entry *e = cv->all_head; e; e = e->anext)
    if (e->needs_drain && e->reserved && !e->failed && e->state < QIM_COMMIT_STATE_OUTBOXED)
      qim__entry_reload(c, e);
}

/* ---- recovery passes ----------------------------------------------------------------------- */

static void recover_listed(qim_store_req *r);

static void task_item_run(qim_cq_item *it) {
  qim_commit_task *t = (qim_commit_task *)((char *)it - offsetof(qim_commit_task, item_));
  t->done(t);
}

static int pass_list(qim_commit *c, qim__commit_pass *p) {
  qim_store_intent_list_req *q = &p->rq.list;
  memset(q, 0, sizeof *q);
  q->req.cq = c->workers[0].cq;
  q->req.done = recover_listed;
  q->req.data = p;
  q->limit = c->cfg.recovery_page;
  p->listed = false;
  p->last_adopted = 0;
  c->inflight++;
  int rc = c->store->vt->intents.list_in_flight(c->store, q);
  if (rc < 0) qim__inflight_done(c);
  return rc;
}

/* c->mu held. Every adopted orphan is settled: list again while pages come back full
 * of work, otherwise report. */
static void pass_finish(qim_commit *c, qim__commit_pass *p) {
  qim_commit_task *t = p->task;
  if (t->status == 0 && p->last_count == c->cfg.recovery_page && p->last_adopted > 0 && !c->closing) {
    int rc = pass_list(c, p);
    if (rc == 0) return;
    t->status = rc;
  }
  QIM_LOGI(NULL, "commit.recovered",
           "listed=%llu adopted=%llu committed=%llu failed=%llu blocked=%llu retried=%llu",
           (unsigned long long)t->listed, (unsigned long long)t->adopted, (unsigned long long)t->committed,
           (unsigned long long)t->failed, (unsigned long long)t->blocked, (unsigned long long)t->retried);
  t->pass_ = NULL;
  qim_free(p);
  t->item_.run = task_item_run;
  qim_cq_post(t->cq, &t->item_);
}

void qim__pass_release(qim_commit *c, qim__commit_pass *p, int how) {
  if (how == QIM__PASS_COMMITTED) {
    p->task->committed++;
    QIM__COUNT(c, recovered);
  } else if (how == QIM__PASS_FAILED) {
    p->task->failed++;
  } else {
    p->task->blocked++;
  }
  if (--p->outstanding == 0 && p->listed) pass_finish(c, p);
}

/* How many of the slice's intents, from its start, recovery may take in order: up to
 * the first orphan too young to be one (what follows it waits behind it anyway).
 * *orphans counts those nobody here drives. */
static size_t slice_prefix(qim_commit *c, const qim_commit_intent *in, size_t n, size_t *orphans) {
  uint64_t wall = qim__wall_ms(c), grace = c->cfg.recovery_grace_ms;
  *orphans = 0;
  for (size_t i = 0; i < n; i++) {
    if (qim__entry_find(c, &in[i].key)) continue;
    if (grace > 0 && in[i].delivery.created_at + grace > wall) return i;
    (*orphans)++;
  }
  return n;
}

/* One conversation's slice of the global listing: adopt its orphans and follow the
 * listing as a drain. A slice of live intents only is left to their sends. */
static void recover_slice(qim_commit *c, qim__commit_pass *p, qim_commit_intent *in, size_t n) {
  size_t orphans, m = slice_prefix(c, in, n, &orphans);
  if (orphans == 0) {
    for (size_t i = 0; i < n; i++) qim_commit_intent_free(&in[i]);
    return;
  }
  qim__commit_conv *cv = qim__conv_get(c, in[0].key.tenant_id, in[0].coordinates.conversation_id);
  qim_commit_key *keys = qim_calloc(m, sizeof *keys);
  for (size_t i = 0; i < m; i++) {
    keys[i] = in[i].key;
    bool live = qim__entry_find(c, &in[i].key) != NULL;
    qim__entry_adopt(c, cv, &in[i], live ? NULL : p);
  }
  for (size_t i = m; i < n; i++) qim_commit_intent_free(&in[i]);
  if (!cv->draining) {
    QIM__COUNT(c, drains);
    cv->draining = true;
    drain_start(c, cv, keys, m);
    keys = NULL;
  } else {
    /* A drain is running on an older listing: follow it with a fresh one; recording
     * needs no order and starts now. */
    cv->drain_again = true;
    for (size_t i = 0; i < m; i++) {
      qim__commit_entry *e = qim__entry_find(c, &keys[i]);
      if (e) qim__entry_drive(c, e);
    }
  }
  qim_free(keys);
  qim__conv_maybe_free(c, cv);
}

static void recover_listed(qim_store_req *r) {
  qim__commit_pass *p = r->data;
  qim_commit *c = p->c;
  qim_store_intent_list_req *q = &p->rq.list;
  pthread_mutex_lock(&c->mu);
  qim__inflight_done(c);
  if (r->status < 0) {
    p->task->status = r->status;
  } else {
    p->task->listed += q->out_count;
    p->last_count = (uint32_t)q->out_count;
    size_t i = 0;
    while (i < q->out_count) {
      size_t j = i + 1;
      while (j < q->out_count && qim_u128_eq(q->out_intents[j].coordinates.conversation_id.v,
                                             q->out_intents[i].coordinates.conversation_id.v) &&
             qim_u128_eq(q->out_intents[j].key.tenant_id.v, q->out_intents[i].key.tenant_id.v))
        j++;
      recover_slice(c, p, q->out_intents + i, j - i);
      i = j;
    }
    qim_free(q->out_intents);
  }
  p->listed = true;
  if (p->outstanding == 0) pass_finish(c, p);
  pthread_mutex_unlock(&c->mu);
}

/* c->mu held. Restarts failed entries whose backoff passed; returns how many. */
static uint64_t retry_due(qim_commit *c) {
  uint64_t now = qim__now_ms(c), n = 0;
  size_t cap = c->live, k = 0;
  qim__commit_entry **due = qim_calloc(cap ? cap : 1, sizeof *due);
  for (size_t i = 0; i < c->key_slots; i++)
    for (qim__commit_entry *e = c->keys[i]; e; e = e->hnext)
      if (e->failed && e->retry_at_ms <= now && k < cap) due[k++] = e;
  for (size_t i = 0; i < k; i++, n++) qim__entry_resume(c, due[i]);
  qim_free(due);
  return n;
}

static int recover_start(qim_commit *c, qim_commit_task *t, bool internal) {
  t->status = 0;
  t->listed = t->adopted = t->committed = t->failed = t->blocked = t->retried = t->forgotten = 0;
  qim__commit_pass *p = qim_calloc(1, sizeof *p);
  p->c = c;
  p->task = t;
  p->internal = internal;
  t->pass_ = p;
  pthread_mutex_lock(&c->mu);
  int rc = c->closing ? -ESHUTDOWN : 0;
  if (rc == 0) {
    t->retried = retry_due(c);
    rc = pass_list(c, p);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc < 0) {
    t->pass_ = NULL;
    qim_free(p);
  }
  return rc;
}

int qim_commit_recover(qim_commit *c, qim_commit_task *t) { return recover_start(c, t, false); }

/* c->mu held, closing: entries are being freed; a pass that can no longer finish goes
 * with them (a caller's pass would have broken the destroy contract). */
void qim__pass_abandon(qim__commit_pass *p) {
  if (--p->outstanding > 0 || !p->listed) return;
  if (p->internal) qim_free(p->task);
  qim_free(p);
}

/* ---- the dedupe window ----------------------------------------------------------------------- */

static void forget_done(qim_store_req *r) {
  qim__commit_pass *p = r->data;
  qim_commit *c = p->c;
  qim_commit_task *t = p->task;
  pthread_mutex_lock(&c->mu);
  qim__inflight_done(c);
  pthread_mutex_unlock(&c->mu);
  t->status = r->status;
  t->forgotten = r->status == 0 ? p->rq.forget.out_forgotten : 0;
  atomic_fetch_add(&c->n.forgotten, t->forgotten);
  QIM_LOGI(NULL, "commit.forget", "before=%llu forgotten=%llu status=%s",
           (unsigned long long)p->rq.forget.before, (unsigned long long)t->forgotten, qim_err_name(r->status));
  t->pass_ = NULL;
  qim_free(p);
  t->done(t);
}

int qim_commit_forget(qim_commit *c, qim_commit_task *t) {
  t->status = 0;
  t->forgotten = 0;
  qim__commit_pass *p = qim_calloc(1, sizeof *p);
  p->c = c;
  p->task = t;
  t->pass_ = p;
  qim_store_intent_forget_req *q = &p->rq.forget;
  q->req.cq = t->cq;
  q->req.done = forget_done;
  q->req.data = p;
  uint64_t wall = qim__wall_ms(c);
  q->before = wall > c->cfg.dedupe_window_ms ? wall - c->cfg.dedupe_window_ms : 0;
  pthread_mutex_lock(&c->mu);
  int rc = c->closing ? -ESHUTDOWN : 0;
  if (rc == 0) {
    c->inflight++;
    rc = c->store->vt->intents.forget(c->store, q);
    if (rc < 0) qim__inflight_done(c);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc < 0) {
    t->pass_ = NULL;
    qim_free(p);
  }
  return rc;
}

/* ---- blocking helpers and loading a key ----------------------------------------------------------- */

static void sync_task_done(qim_commit_task *t) { *(bool *)t->data = true; }

static int task_sync(qim_commit *c, int (*start)(qim_commit *, qim_commit_task *), qim_commit_task *out) {
  bool done = false;
  memset(out, 0, sizeof *out);
  out->done = sync_task_done;
  out->data = &done;
  int rc = qim_cq_new_blocking(&out->cq);
  if (rc < 0) return out->status = rc;
  rc = start(c, out);
  if (rc == 0)
    while (!done) qim_cq_wait(out->cq, -1);
  else
    out->status = rc;
  qim_cq_free(out->cq);
  out->cq = NULL;
  out->data = NULL;
  return out->status;
}

int qim_commit_recover_sync(qim_commit *c, qim_commit_task *out) { return task_sync(c, qim_commit_recover, out); }
int qim_commit_forget_sync(qim_commit *c, qim_commit_task *out) { return task_sync(c, qim_commit_forget, out); }

static void load_done(qim_store_req *r) {
  qim_commit_load_op *op = r->data;
  op->status = r->status;
  if (r->status == 0) op->out = op->req_.out;
  op->done(op);
}

int qim_commit_load(qim_commit *c, qim_commit_load_op *op) {
  memset(&op->req_, 0, sizeof op->req_);
  memset(&op->out, 0, sizeof op->out);
  op->status = 0;
  op->req_.req.cq = op->cq;
  op->req_.req.done = load_done;
  op->req_.req.data = op;
  op->req_.key = op->key;
  return c->store->vt->intents.load(c->store, &op->req_);
}

static void sync_load_done(qim_commit_load_op *op) { *(bool *)op->data = true; }

int qim_commit_load_sync(qim_commit *c, const qim_commit_key *key, qim_loaded_commit *out) {
  bool done = false;
  qim_commit_load_op op = {.done = sync_load_done, .data = &done, .key = *key};
  memset(out, 0, sizeof *out);
  int rc = qim_cq_new_blocking(&op.cq);
  if (rc < 0) return rc;
  rc = qim_commit_load(c, &op);
  if (rc == 0) {
    while (!done) qim_cq_wait(op.cq, -1);
    rc = op.status;
    if (rc == 0) *out = op.out;
  }
  qim_cq_free(op.cq);
  return rc;
}

/* ---- maintenance (worker 0) -------------------------------------------------------------------- */

static void maint_forget_done(qim_commit_task *t) {
  qim_commit *c = t->data;
  qim_free(t);
  c->maintenance_running = false;
}

static void maint_recover_done(qim_commit_task *t) {
  qim_commit *c = t->data;
  t->done = maint_forget_done;
  if (atomic_load(&c->stopping) || qim_commit_forget(c, t) < 0) maint_forget_done(t);
}

void qim__maintenance_tick(qim_commit *c) {
  if (c->cfg.maintenance_interval_ms == 0 || c->maintenance_running) return;
  uint64_t now = qim__now_ms(c);
  if (now < c->next_maintenance_ms) return;
  c->next_maintenance_ms = now + c->cfg.maintenance_interval_ms;
  qim_commit_task *t = qim_calloc(1, sizeof *t);
  t->cq = c->workers[0].cq;
  t->done = maint_recover_done;
  t->data = c;
  c->maintenance_running = true;
  if (recover_start(c, t, true) < 0) maint_forget_done(t);
}
