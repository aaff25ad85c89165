/*
 * commit_drive.c — the state machine of one intent after reserve, and the rule that
 * keeps the outbox in seq order per conversation.
 *
 *   Reserved ──advance RECORDED──▶ Recorded ──advance OUTBOXED──▶ Outboxed
 *            ──read back, compare envelope──▶ (verified) ──advance COMMITTED──▶ Committed
 *
 * Recording has no order constraint, so every intent records as soon as it is reserved.
 * Outboxing follows the conversation's order:
 *   - while a drain runs: one at a time, the first intent of the drain's listing not yet
 *     Outboxed;
 *   - otherwise: in (seq, order) order, an intent taking the step only once every lower
 *     one is Outboxed or taking it too — up to outbox_pipeline in flight, submitted in
 *     order, which a store applies in order (one writer queue) — and only when no
 *     reserve submitted before its own reserve completed is unanswered (it could hold a
 *     lower seq: the store does not promise to answer in order).
 * The store checks the same rule (OUTBOXED refuses to skip a lower intent); a refusal
 * means some intent this process did not know of is ahead — another node's, or one
 * left by a crash — and starts a drain of the conversation (commit_recover.c).
 *
 * Every handler runs with c->mu held; each step is one store call on the entry's
 * worker queue. A failing step is retried with exponential backoff and never skipped.
 */
#include <string.h>

#include "commit/commit_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define CONFLICTS_BEFORE_BACKOFF 3

static const char *const state_names[] = {"reserved", "recorded", "outboxed", "committed"};

void qim__entry_logl(qim_log_level level, const qim__commit_entry *e, const char *event, const char *extra) {
  char conv[33], cmid[33];
  qim__u128_hex(e->conv->id.v, conv);
  qim__hex16(e->key.client_message_id.b, cmid);
  unsigned long long seq = e->reserved ? (unsigned long long)e->intent.coordinates.conversation_seq : 0;
  qim_log(level, &e->trace, event, "conv=%s cmid=%s seq=%llu state=%s%s%s", conv, cmid, seq,
          state_names[e->state & 3], extra ? " " : "", extra ? extra : "");
}

/* ---- the conversation's lists ----------------------------------------------------------- */

void qim__pending_remove(qim__commit_conv *cv, qim__commit_entry *e) {
  if (!e->in_pending) return;
  if (e->pprev) e->pprev->pnext = e->pnext; else cv->pending_head = e->pnext;
  if (e->pnext) e->pnext->pprev = e->pprev; else cv->pending_tail = e->pprev;
  e->pprev = e->pnext = NULL;
  e->in_pending = false;
}

static bool before(const qim__commit_entry *a, const qim__commit_entry *b) {
  uint64_t sa = a->intent.coordinates.conversation_seq, sb = b->intent.coordinates.conversation_seq;
  return sa < sb || (sa == sb && a->order < b->order);
}

/* Reserves mostly complete in order, so the scan from the tail is usually one step. */
void qim__ready_insert(qim__commit_conv *cv, qim__commit_entry *e) {
  if (e->in_ready) return;
  qim__commit_entry *p = cv->ready_tail;
  while (p && before(e, p)) p = p->rprev;
  e->rprev = p;
  e->rnext = p ? p->rnext : cv->ready_head;
  if (e->rnext) e->rnext->rprev = e; else cv->ready_tail = e;
  if (p) p->rnext = e; else cv->ready_head = e;
  e->in_ready = true;
}

void qim__ready_remove(qim__commit_conv *cv, qim__commit_entry *e) {
  if (!e->in_ready) return;
  if (e->rprev) e->rprev->rnext = e->rnext; else cv->ready_head = e->rnext;
  if (e->rnext) e->rnext->rprev = e->rprev; else cv->ready_tail = e->rprev;
  e->rprev = e->rnext = NULL;
  e->in_ready = false;
}

/*
 * Normal order: the entry that may take the OUTBOXED step next is the first of the
 * ready list not already taking it — every entry before it is then in flight, and the
 * store applies them in the order they were submitted — provided no reserve submitted
 * before this entry's reserve completed is unanswered (it could hold a lower seq).
 */
static qim__commit_entry *next_to_outbox(const qim_commit *c, const qim__commit_conv *cv) {
  if (cv->outboxing >= c->cfg.outbox_pipeline) return NULL;
  for (qim__commit_entry *e = cv->ready_head; e; e = e->rnext) {
    if (e->outboxing) continue;
    if (cv->pending_head && cv->pending_head->ticket <= e->horizon) return NULL;
    return e;
  }
  return NULL;
}

/* May `e` take the OUTBOXED step now? A drain goes one intent at a time. */
static bool may_outbox(const qim_commit *c, const qim__commit_conv *cv, const qim__commit_entry *e) {
  if (cv->draining)
    return cv->outboxing == 0 && !cv->listing && cv->drain_pos < cv->drain_n &&
           qim__commit_key_equal(&cv->drain_keys[cv->drain_pos], &e->key);
  return next_to_outbox(c, cv) == e;
}

/* ---- waiters ------------------------------------------------------------------------------ */

void qim__entry_complete_waiters(qim_commit *c, qim__commit_entry *e, int status) {
  (void)c;
  qim_committed_message ack = {.client_message_id = e->key.client_message_id,
                               .coordinates = e->intent.coordinates};
  qim_error err = {.code = status};
  if (status == QIM_E_COMMIT_RECOVERABLE) err.key = e->key;
  qim__commit_send *w = e->waiters;
  e->waiters = NULL;
  while (w) {
    qim__commit_send *next = w->wnext;
    qim__send_finish(w, status, &err, &ack);
    w = next;
  }
}

static void entry_finish(qim_commit *c, qim__commit_entry *e) {
  qim__entry_log(e, "commit.committed", NULL);
  qim__entry_complete_waiters(c, e, 0);
  if (e->pass) qim__pass_release(c, e->pass, QIM__PASS_COMMITTED);
  qim__entry_free(c, e);
}

/*
 * The head of the conversation failed a step and waits for its backoff: what waits
 * behind it (not below its seq) cannot move either. Its sends are answered Recoverable
 * now rather than held for an unknown time — the intents are durable and follow the
 * head as soon as it moves — and a recovery pass stops waiting for them.
 */
static void settle_behind_failed_head(qim_commit *c, qim__commit_conv *cv, const qim__commit_entry *h) {
  qim_conversation_seq seq = h->intent.coordinates.conversation_seq;
  for (qim__commit_entry *e = cv->all_head; e; e = e->anext) {
    if (e == h || !e->reserved || e->reserving || e->state >= QIM_COMMIT_STATE_OUTBOXED) continue;
    if (e->intent.coordinates.conversation_seq < seq || (!e->waiters && !e->pass)) continue;
    if (e->waiters) {
      qim__entry_logl(QIM_LOG_WARN, e, "commit.blocked", "why=predecessor_failed");
      qim__entry_complete_waiters(c, e, qim_err_raise(QIM_E_COMMIT_RECOVERABLE));
    }
    if (e->pass) {
      qim__commit_pass *p = e->pass;
      e->pass = NULL;
      qim__pass_release(c, p, QIM__PASS_BLOCKED);
    }
  }
}

void qim__entry_fail(qim_commit *c, qim__commit_entry *e, int cause, const char *step, int waiter_code) {
  e->failed = true;
  e->attempts++;
  unsigned shift = e->attempts - 1 < 20 ? e->attempts - 1 : 20;
  uint64_t backoff = (uint64_t)c->cfg.retry_base_ms << shift;
  if (backoff > c->cfg.retry_max_ms) backoff = c->cfg.retry_max_ms;
  e->retry_at_ms = qim__now_ms(c) + backoff;
  QIM__COUNT(c, step_failures);
  char extra[160];
  snprintf(extra, sizeof extra, "step=%s err=%s attempt=%u retry_in_ms=%llu", step, qim_err_name(cause),
           e->attempts, (unsigned long long)backoff);
  qim__entry_logl(QIM_LOG_WARN, e, "commit.step_failed", extra);
  if (e->waiters) {
    int code = waiter_code ? waiter_code : qim_err_raise(QIM_E_COMMIT_RECOVERABLE);
    qim__entry_complete_waiters(c, e, code);
  }
  if (e->pass) {
    qim__pass_release(c, e->pass, QIM__PASS_FAILED);
    e->pass = NULL;
  }
}

void qim__entry_resume(qim_commit *c, qim__commit_entry *e) {
  if (!e->failed) return;
  e->failed = false;
  QIM__COUNT(c, step_retries);
  qim__entry_log(e, "commit.retry", NULL);
  qim__commit_conv *cv = e->conv;
  if (e->needs_drain && e->state < QIM_COMMIT_STATE_OUTBOXED) qim__conv_request_drain(c, cv);
  qim__entry_drive(c, e);
  qim__conv_kick(c, cv);
}

/* ---- store calls of a step ------------------------------------------------------------------ */

static void advance_done(qim_store_req *r);
static void read_done(qim_store_req *r);
static void reload_done(qim_store_req *r);

/* Zeroes the entry's request, points it at the worker's queue and marks the entry busy. */
static qim_store_req *entry_req(qim_commit *c, qim__commit_entry *e, size_t size,
                                void (*done)(qim_store_req *)) {
  memset(&e->rq, 0, size);
  e->rq.head.cq = e->worker->cq;
  e->rq.head.done = done;
  e->rq.head.data = e;
  e->busy = true;
  c->inflight++;
  return &e->rq.head;
}

/* A submit the store refused synchronously is a failed step like any other. */
static void submitted(qim_commit *c, qim__commit_entry *e, int rc, const char *step) {
  if (rc >= 0) return;
  e->busy = false;
  qim__inflight_done(c);
  if (e->outboxing) {
    e->outboxing = false;
    e->conv->outboxing--;
  }
  qim__entry_fail(c, e, rc, step, 0);
}

/* The OUTBOXED step committed: its outbox record can be read (unconfirmed) already, so the
 * fanout starts on it while the sync runs (store.h, "Committed"). On the store's writer
 * thread. */
static void advance_outboxed_hint(qim_store_req *r) {
  const qim_commit *c = r->committed_ctx;
  c->cfg.on_outboxed(c->cfg.hook_ctx);
}

static void submit_advance(qim_commit *c, qim__commit_entry *e, qim_commit_state to) {
  entry_req(c, e, sizeof e->rq.adv, advance_done);
  e->rq.adv.key = e->key;
  e->rq.adv.to = to;
  e->rq.adv.now = qim__wall_ms(c);
  if (to == QIM_COMMIT_STATE_OUTBOXED) {
    if (c->cfg.on_outboxed) e->rq.adv.req.committed = advance_outboxed_hint, e->rq.adv.req.committed_ctx = c;
    e->outboxing = true;
    e->conv->outboxing++;
  }
  submitted(c, e, c->store->vt->intents.advance(c->store, &e->rq.adv), state_names[to]);
}

static void submit_read(qim_commit *c, qim__commit_entry *e) {
  entry_req(c, e, sizeof e->rq.read, read_done);
  e->rq.read.stream = e->position.stream;
  e->rq.read.from = e->position.offset;
  e->rq.read.max = 1;
  submitted(c, e, c->store->vt->logs.read(c->store, &e->rq.read), "verify");
}

void qim__entry_reload(qim_commit *c, qim__commit_entry *e) {
  if (e->busy || c->closing) return;
  entry_req(c, e, sizeof e->rq.load, reload_done);
  e->rq.load.key = e->key;
  submitted(c, e, c->store->vt->intents.load(c->store, &e->rq.load), "reload");
}

/* Takes the next step the entry's state allows; may free `e` (when it is Committed). */
void qim__entry_drive(qim_commit *c, qim__commit_entry *e) {
  if (e->busy || e->failed || e->reserving || !e->reserved || c->closing) return;
  switch (e->state) {
  case QIM_COMMIT_STATE_RESERVED:
    submit_advance(c, e, QIM_COMMIT_STATE_RECORDED);
    break;
  case QIM_COMMIT_STATE_RECORDED:
    if (may_outbox(c, e->conv, e)) submit_advance(c, e, QIM_COMMIT_STATE_OUTBOXED);
    break;
  case QIM_COMMIT_STATE_OUTBOXED:
    if (!e->has_position) /* adopted at Outboxed: repeating the step returns the position */
      submit_advance(c, e, QIM_COMMIT_STATE_OUTBOXED);
    else if (c->cfg.verify_outbox && !e->verified)
      submit_read(c, e);
    else
      submit_advance(c, e, QIM_COMMIT_STATE_COMMITTED);
    break;
  case QIM_COMMIT_STATE_COMMITTED:
    entry_finish(c, e);
    break;
  }
}

/* The head of the conversation may be able to move (with pipelining, the entries after
 * it too); a finished drain hands over to normal order. */
void qim__conv_kick(qim_commit *c, qim__commit_conv *cv) {
  qim__conv_drain_step(c, cv);
  qim__commit_entry *h = NULL;
  if (cv->draining) {
    if (!cv->listing && cv->drain_pos < cv->drain_n) h = qim__entry_find(c, &cv->drain_keys[cv->drain_pos]);
    if (h && h->state == QIM_COMMIT_STATE_RECORDED) qim__entry_drive(c, h);
  } else {
    h = cv->ready_head;
    qim__commit_entry *n;
    while ((n = next_to_outbox(c, cv)) && n->state == QIM_COMMIT_STATE_RECORDED && !n->busy && !n->failed) {
      qim__entry_drive(c, n);
      if (!n->outboxing) break; /* not taken (closing, or refused and failed) */
    }
  }
  if (h && h->failed && h->reserved) settle_behind_failed_head(c, cv, h);
}

/* ---- completions ------------------------------------------------------------------------------ */

static void advance_ok(qim_commit *c, qim__commit_entry *e, qim_store_intent_advance_req *q) {
  e->state = q->to;
  e->attempts = 0;
  e->conflicts = 0;
  if (q->to == QIM_COMMIT_STATE_OUTBOXED) {
    bool first = !e->has_position;
    e->position = q->out_position;
    e->has_position = true;
    e->needs_drain = false;
    qim__ready_remove(e->conv, e);
    if (first) {
      char extra[48];
      snprintf(extra, sizeof extra, "offset=%llu", (unsigned long long)q->out_position.offset);
      qim__entry_log(e, "commit.outboxed", extra);
    }
  } else if (q->to == QIM_COMMIT_STATE_RECORDED) {
    qim__entry_log(e, "commit.recorded", NULL);
  }
  qim__entry_drive(c, e);
}

static void advance_failed(qim_commit *c, qim__commit_entry *e, qim_commit_state to, int st) {
  if (to == QIM_COMMIT_STATE_OUTBOXED && st == QIM_E_COMMIT_LOG_INVARIANT_VIOLATION &&
      e->conflicts < CONFLICTS_BEFORE_BACKOFF) {
    /* A lower intent this process does not drive is ahead: drain the conversation. */
    e->conflicts++;
    QIM__COUNT(c, order_conflicts);
    qim__entry_logl(QIM_LOG_WARN, e, "commit.order_conflict", NULL);
    qim__conv_request_drain(c, e->conv);
    return;
  }
  if (st == QIM_E_MESSAGE_STORE_INVALID_STATE_TRANSITION && e->conflicts < CONFLICTS_BEFORE_BACKOFF) {
    /* Someone else (a recovery elsewhere) moved it on: learn where it is. */
    e->conflicts++;
    qim__entry_reload(c, e);
    return;
  }
  qim__entry_fail(c, e, st, state_names[to], 0);
}

static void advance_done(qim_store_req *r) {
  qim__commit_entry *e = r->data;
  qim_commit *c = e->worker->c;
  pthread_mutex_lock(&c->mu);
  qim__commit_conv *cv = e->conv;
  qim_store_intent_advance_req *q = &e->rq.adv;
  e->busy = false;
  qim__inflight_done(c);
  if (e->outboxing) {
    e->outboxing = false;
    cv->outboxing--;
  }
  if (r->status == 0)
    advance_ok(c, e, q);
  else
    advance_failed(c, e, q->to, r->status);
  qim__conv_kick(c, cv);
  qim__conv_maybe_free(c, cv);
  pthread_mutex_unlock(&c->mu);
}

static void verify(qim_commit *c, qim__commit_entry *e, qim_store_log_read_req *q) {
  qim_committed_envelope env;
  memset(&env, 0, sizeof env);
  bool ok = q->out_count >= 1 && q->out_records[0].offset == e->position.offset &&
            qim_committed_envelope_decode(q->out_records[0].payload.p, q->out_records[0].payload.n, &env) == 0 &&
            qim_committed_envelope_matches(&env, &e->intent);
  qim_committed_envelope_free(&env);
  if (ok) {
    e->verified = true;
    qim__entry_log(e, "commit.verified", NULL);
    qim__entry_drive(c, e);
    return;
  }
  QIM__COUNT(c, invariant_violations);
  qim__entry_logl(QIM_LOG_ERROR, e, "commit.invariant_violation", "what=outbox_envelope_differs_from_intent");
  qim__entry_fail(c, e, QIM_E_COMMIT_INVARIANT_VIOLATION, "verify",
                  e->waiters ? qim_err_raise(QIM_E_COMMIT_INVARIANT_VIOLATION) : 0);
}

static void read_done(qim_store_req *r) {
  qim__commit_entry *e = r->data;
  qim_commit *c = e->worker->c;
  pthread_mutex_lock(&c->mu);
  qim__commit_conv *cv = e->conv;
  /* The next step reuses the request: take the records out first. */
  qim_store_log_read_req q = e->rq.read;
  e->busy = false;
  qim__inflight_done(c);
  if (r->status == 0) {
    verify(c, e, &q);
  } else if (r->status == QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE) {
    /* Trimmed already: consumers read it; nothing is left to compare. */
    e->verified = true;
    qim__entry_logl(QIM_LOG_WARN, e, "commit.verify_skipped", "why=trimmed");
    qim__entry_drive(c, e);
  } else {
    qim__entry_fail(c, e, r->status, "verify", 0);
  }
  qim_store_log_read_free(&q);
  qim__conv_kick(c, cv);
  qim__conv_maybe_free(c, cv);
  pthread_mutex_unlock(&c->mu);
}

/* What the store says about a key we lost track of (a refused step, an order unknown). */
static void reloaded(qim_commit *c, qim__commit_entry *e, qim_loaded_commit *lc) {
  if (lc->kind == QIM_LOADED_COMMIT_COMMITTED) {
    e->intent.coordinates = lc->committed.coordinates;
    e->reserved = true;
    e->state = QIM_COMMIT_STATE_COMMITTED;
  } else {
    if (!e->reserved) {
      e->intent = lc->intent;
      e->reserved = true;
      e->trace = e->intent.trace_id;
      memset(&lc->intent, 0, sizeof lc->intent);
    } else if (lc->intent.state > e->state) {
      e->state = lc->intent.state;
    }
    qim_commit_intent_free(&lc->intent);
    if (e->state >= QIM_COMMIT_STATE_OUTBOXED) e->needs_drain = false;
    if (e->needs_drain) {
      if (++e->conflicts > CONFLICTS_BEFORE_BACKOFF)
        return qim__entry_fail(c, e, QIM_E_COMMIT_LOG_INVARIANT_VIOLATION, "order", 0);
      qim__conv_request_drain(c, e->conv);
    }
  }
  qim__entry_drive(c, e);
}

static void reload_done(qim_store_req *r) {
  qim__commit_entry *e = r->data;
  qim_commit *c = e->worker->c;
  pthread_mutex_lock(&c->mu);
  qim__commit_conv *cv = e->conv;
  e->busy = false;
  qim__inflight_done(c);
  if (r->status == 0) {
    qim_loaded_commit out = e->rq.load.out; /* the next step reuses the request */
    reloaded(c, e, &out);
  } else if (r->status == QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND) {
    /* The store no longer knows the key: nothing is left to drive. */
    qim__entry_logl(QIM_LOG_ERROR, e, "commit.lost", "err=CommitNotFound");
    if (e->waiters) qim__entry_complete_waiters(c, e, qim_err_raise(QIM_E_COMMIT_UNAVAILABLE));
    if (e->pass) qim__pass_release(c, e->pass, QIM__PASS_FAILED);
    qim__entry_free(c, e);
  } else {
    qim__entry_fail(c, e, r->status, "reload", 0);
  }
  qim__conv_kick(c, cv);
  qim__conv_maybe_free(c, cv);
  pthread_mutex_unlock(&c->mu);
}
