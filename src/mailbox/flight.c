/*
 * flight.c — a lane's steps between their COMMIT and their durability, and the one way a
 * lane's pushes leave: through the lane's queue of step outcomes, in step order.
 *
 * A ready lane's usual step ends with one write that also advances the watermark. The step
 * does not wait for that write to be durable: once it has COMMITTED (store.h, "Committed")
 * the lane goes on with its next step, and the step's outcome — its pushes, the watermark and
 * figures to publish — waits in the lane's queue until the store confirms the write. Why: a
 * lane that waited out each sync read the next dispatches only after it, so a message waited
 * for the sync of the step before its own and then for its own (bench/HISTORY.md, "Nineteenth
 * session"). Now a message's entries wait for one sync.
 *
 * The settler thread runs those confirmations (its own completion queue). Every other step
 * outcome, waited for on its worker, joins the same queue already confirmed, and the queue
 * emits from its head only, so pushes leave in step order whoever confirms. Nothing is
 * pushed before its write is durable (DESIGN.md §1).
 *
 * A write that committed and then was not confirmed leaves the lane's position ahead of what
 * is durable: that outcome and every one queued after it are dropped unpublished, and the
 * lane's next step rewinds to the first record of the failed step and replays from there with
 * stored progress (idempotent, as after any failed step). The store has failed by then (a
 * failed sync stops the SQLite backend), so the replay mostly waits for it to be reopened.
 *
 * Bounds: at most FLIGHTS_MAX outcomes per lane; a step waits for room before it submits.
 * Locks: a lane's queue, its held pushes and its rewind point are under lane->fmu; the
 * lane's pool task is kicked with fmu held (fmu before pool.mu, never the other way).
 */
#include <errno.h>
#include <time.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define FLIGHTS_MAX 8

/* ---- the settler -------------------------------------------------------------------------------- */

static void *settler_main(void *arg) {
  qim_mailbox *m = arg;
  qim_log_name_thread("settle");
  while (!atomic_load(&m->settle_stop) || atomic_load(&m->settle_out) > 0) qim_cq_wait(m->settle_cq, -1);
  return NULL;
}

static void settle_wake_run(qim_cq_item *it) { (void)it; }

int qim__mb_settler_start(qim_mailbox *m) {
  int rc = qim_cq_new_blocking(&m->settle_cq);
  if (rc) return rc;
  m->settle_wake.run = settle_wake_run;
  rc = -pthread_create(&m->settler, NULL, settler_main, m);
  if (rc) qim_cq_free(m->settle_cq);
  return rc;
}

/* After the workers stopped: waits for every write in flight to complete, then stops. */
void qim__mb_settler_stop(qim_mailbox *m) {
  atomic_store(&m->settle_stop, true);
  qim_cq_post(m->settle_cq, &m->settle_wake);
  pthread_join(m->settler, NULL);
  qim_cq_free(m->settle_cq);
}

/* ---- the lane's queue ------------------------------------------------------------------------------ */

void qim__mb_flight_lane_init(mb_lane *l) {
  pthread_mutex_init(&l->fmu, NULL);
  pthread_cond_init(&l->fcv, NULL);
}

static void held_free(mb_held *h) {
  for (mb_held *next; h; h = next) {
    next = h->next;
    qim_mailbox_push_batch_free(h->batch);
    qim_free(h);
  }
}

void qim__mb_flight_lane_destroy(mb_lane *l) {
  held_free(l->held); /* pushes never emitted */
  pthread_cond_destroy(&l->fcv);
  pthread_mutex_destroy(&l->fmu);
}

mb_flight *qim__mb_flight_new(mb_lane *l) {
  mb_flight *f = qim_calloc(1, sizeof *f);
  f->l = l;
  return f;
}

void qim__mb_flight_free(mb_flight *f) {
  held_free(f->pushes);
  if (f->owner_free) f->owner_free(f->owner);
  qim_free(f);
}

static void kick(mb_lane *l) { qim__mb_pool_kick(&l->sh->m->pool, &l->task); }

/* fmu held. Emits the held pushes unless the push stage is paused; true while some stay. */
static bool emit_held(mb_lane *l) {
  qim_mailbox *m = l->sh->m;
  if (l->held && !atomic_load(&m->paused_push)) {
    qim__mb_push_emit(m->push, l->held);
    l->held = NULL;
  }
  return l->held != NULL;
}

/* fmu held. Publishes a confirmed outcome: its pushes (after the held ones, or held while the
 * push stage is paused), then its watermark and figures. */
static void publish(mb_lane *l, mb_flight *f) {
  mb_held **tail = &l->held;
  while (*tail) tail = &(*tail)->next;
  *tail = f->pushes;
  f->pushes = NULL;
  emit_held(l);
  pthread_mutex_lock(&l->mu);
  l->wm_pub = f->wm;
  l->dispatches += f->dispatches, l->batches += f->batches, l->entries += f->entries, l->pushes += f->npushes;
  pthread_mutex_unlock(&l->mu);
  atomic_store(&l->next_offset_pub, f->next_offset);
}

/* fmu held. Drops an outcome that was not confirmed, or came after one, and marks where the
 * lane replays from. */
static void drop(mb_lane *l, mb_flight *f) {
  if (!l->rewind) {
    l->rewind = true;
    l->rewind_offset = f->from_offset;
    l->rewind_materialized = f->from_materialized;
    l->rewind_until = 0;
    QIM_LOGE(NULL, "mailbox.step_unconfirmed", "shard=%u lane=%u from_offset=%llu error=%s", l->sh->id, l->id,
             (unsigned long long)f->from_offset, qim_err_name(f->status));
    kick(l);
  }
  if (f->next_offset > l->rewind_until) l->rewind_until = f->next_offset;
}

/* fmu held. Takes every completed outcome off the head of the queue. */
static void drain(mb_lane *l) {
  while (l->fhead && l->fhead->completed) {
    mb_flight *f = l->fhead;
    l->fhead = f->next;
    if (!l->fhead) l->ftail = NULL;
    l->nflight--;
    if (f->status == 0 && !l->rewind)
      publish(l, f);
    else
      drop(l, f);
    qim__mb_flight_free(f);
  }
  pthread_cond_broadcast(&l->fcv);
  if (l->nflight == 0 && l->idle_kick) {
    l->idle_kick = false;
    kick(l); /* its empty read may now count as idle */
  }
}

/* ---- a write in flight ------------------------------------------------------------------------------- */

/* On the store's writer thread: the step may go on. */
static void flight_committed(qim_store_req *r) {
  mb_flight *f = r->committed_ctx;
  mb_lane *l = f->l;
  pthread_mutex_lock(&l->fmu);
  f->committed = true;
  pthread_cond_broadcast(&l->fcv);
  pthread_mutex_unlock(&l->fmu);
}

/* On the settler: confirmed or not. A flight not queued is its worker's to free. */
static void flight_done(qim_store_req *r) {
  mb_flight *f = r->data;
  mb_lane *l = f->l;
  qim_mailbox *m = l->sh->m;
  pthread_mutex_lock(&l->fmu);
  f->completed = true;
  f->status = r->status;
  if (f->queued)
    drain(l);
  else
    pthread_cond_broadcast(&l->fcv);
  pthread_mutex_unlock(&l->fmu);
  atomic_fetch_sub(&m->settle_out, 1);
}

int qim__mb_flight_submit(mb_flight *f, qim_store_mailbox_append_req *r) {
  mb_lane *l = f->l;
  qim_mailbox *m = l->sh->m;
  int rc;
  atomic_fetch_add(&m->settle_out, 1);
  r->req.cq = m->settle_cq;
  r->req.done = flight_done;
  r->req.data = f;
  r->req.committed = flight_committed;
  r->req.committed_ctx = f;
  for (;;) {
    r->req.status = 0;
    r->req.error = (qim_error){0};
    rc = m->store->vt->mailboxes.append(m->store, r);
    if (rc != -EAGAIN) break;
    nanosleep(&(struct timespec){0, 1000000}, NULL); /* the store's queue is full */
  }
  if (rc) { /* refused: no completion will come */
    atomic_fetch_sub(&m->settle_out, 1);
    return rc;
  }
  pthread_mutex_lock(&l->fmu);
  while (!f->committed && !f->completed) pthread_cond_wait(&l->fcv, &l->fmu);
  rc = f->committed ? 0 : f->status;
  pthread_mutex_unlock(&l->fmu);
  return rc;
}

void qim__mb_flight_queue(mb_flight *f) {
  mb_lane *l = f->l;
  pthread_mutex_lock(&l->fmu);
  f->queued = true;
  if (l->ftail)
    l->ftail->next = f;
  else
    l->fhead = f;
  l->ftail = f;
  l->nflight++;
  drain(l);
  pthread_mutex_unlock(&l->fmu);
}

/* ---- the lane's worker --------------------------------------------------------------------------------- */

/* fmu held. Waits until at most `max` outcomes are queued. */
static void wait_at_most(mb_lane *l, uint32_t max) {
  while (l->nflight > max) pthread_cond_wait(&l->fcv, &l->fmu);
}

void qim__mb_flight_room(mb_lane *l) {
  pthread_mutex_lock(&l->fmu);
  wait_at_most(l, FLIGHTS_MAX - 1);
  pthread_mutex_unlock(&l->fmu);
}

void qim__mb_flight_wait_empty(mb_lane *l) {
  pthread_mutex_lock(&l->fmu);
  wait_at_most(l, 0);
  pthread_mutex_unlock(&l->fmu);
}

bool qim__mb_flight_idle(mb_lane *l) {
  pthread_mutex_lock(&l->fmu);
  /* Not while a rewind waits either: the outcome dropped just now kicked the lane for it. */
  bool idle = l->nflight == 0 && !l->rewind;
  if (l->nflight) l->idle_kick = true;
  pthread_mutex_unlock(&l->fmu);
  return idle;
}

bool qim__mb_flight_held(mb_lane *l) {
  pthread_mutex_lock(&l->fmu);
  bool held = emit_held(l);
  pthread_mutex_unlock(&l->fmu);
  return held;
}

bool qim__mb_flight_rewound(mb_lane *l) {
  pthread_mutex_lock(&l->fmu);
  bool rewind = l->rewind;
  if (rewind) {
    wait_at_most(l, 0);
    l->next_offset = l->rewind_offset;
    l->wm.materialized = l->rewind_materialized;
    if (l->rewind_until > l->replay_until) l->replay_until = l->rewind_until;
    l->rewind = false;
  }
  pthread_mutex_unlock(&l->fmu);
  return rewind;
}
