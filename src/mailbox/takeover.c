/*
 * takeover.c — shard ownership on this node: acquiring a shard (ShardTakeover with epoch + 1
 * and a fence record, through the store), starting its lanes from their watermarks, releasing
 * it, and ShardReadiness.
 *
 * Why a fence: the store stamps every dispatch record with the shard's epoch at append. After
 * the takeover every new record carries the new epoch, so every new MailboxSeq is above every
 * old one even if a failover lost the log's tail and offsets are reused; records appended
 * before keep their old epoch, so a lane that replays them — or lagged across the takeover —
 * computes exactly the seq the other lanes computed. A lane is ready once it has replayed
 * through the fence: everything appended before the takeover is then in its mailboxes.
 *
 * The takeover runs as a job on a worker (it waits for the store); its completion goes to the
 * caller's queue like any store completion.
 */
#include <errno.h>
#include <time.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

typedef struct qim__mb_job {
  mb_task task; /* first */
  qim_mailbox *m;
  qim_mailbox_acquire_op *op;
} mb_job;

static void post_done(qim_cq_item *it) {
  qim_mailbox_acquire_op *op = (qim_mailbox_acquire_op *)((char *)it - offsetof(qim_mailbox_acquire_op, item_));
  op->done(op);
}

/* Reads every lane's watermark; 0 or the first error. */
static int read_watermarks(mb_worker *w, mb_shard *sh, qim_lane_watermark *out) {
  uint32_t lanes = sh->m->opt.shards.lanes_per_shard;
  qim_store_watermark_get_req *r = qim_calloc(lanes, sizeof *r);
  for (uint32_t i = 0; i < lanes; i++) {
    r[i].shard = sh->id;
    r[i].lane = (qim_lane_id)i;
    QIM__MB_SUBMIT(w, mailboxes.watermark_get, &r[i]);
  }
  qim__mb_wait(w);
  int rc = 0;
  for (uint32_t i = 0; i < lanes; i++) {
    if (r[i].req.status && !rc) rc = r[i].req.status;
    out[i] = r[i].out;
  }
  qim_free(r);
  return rc;
}

/* Where lane replay starts: after the watermark's record, but never past the fence (a log
 * that lost its tail in a failover reuses offsets the watermark already passed). */
static uint64_t start_offset(const qim_lane_watermark *wm, uint64_t fence) {
  if (wm->materialized == 0) return 0;
  uint64_t next = qim_mailbox_seq_offset(wm->materialized) + 1;
  return next > fence ? fence : next;
}

static void start_lanes(mb_shard *sh, const qim_lane_watermark *wms) {
  qim_mailbox *m = sh->m;
  uint64_t replay_from = UINT64_MAX;
  for (uint32_t i = 0; i < m->opt.shards.lanes_per_shard; i++) {
    mb_lane *l = &sh->lanes[i];
    qim__mb_flight_wait_empty(l); /* an earlier ownership's outcomes publish before the reset */
    l->wm = wms[i];
    l->next_offset = start_offset(&wms[i], sh->fence_offset);
    l->replay_until = sh->fence_offset; /* earlier records may carry progress */
    l->backoff_ms = 0;
    l->next_retention_ns = qim__mb_now_ns() + (uint64_t)m->opt.retention_interval_ms * 1000000u;
    atomic_store(&l->floor, l->wm.floor);
    atomic_store(&l->next_offset_pub, l->next_offset);
    atomic_store(&l->ready, false);
    pthread_mutex_lock(&l->mu);
    l->wm_pub = l->wm;
    l->last_error = 0;
    pthread_mutex_unlock(&l->mu);
    atomic_store(&l->state, QIM_MAILBOX_LANE_RUNNING);
    if (l->next_offset < replay_from) replay_from = l->next_offset;
  }
  sh->replay_from = (qim_log_position){{QIM_LOG_STREAM_MAILBOX_DISPATCH, sh->id}, replay_from};
  atomic_store(&sh->fenced, false);
  atomic_store(&sh->owned, true);
  for (uint32_t i = 0; i < m->opt.shards.lanes_per_shard; i++) qim__mb_pool_kick(&m->pool, &sh->lanes[i].task);
}

/* Stops whatever ran before (a fenced, halted or failed ownership) before starting again. */
static void stop_lanes(mb_shard *sh) {
  atomic_store(&sh->owned, false);
  for (uint32_t i = 0; i < sh->m->opt.shards.lanes_per_shard; i++) {
    mb_lane *l = &sh->lanes[i];
    atomic_store(&l->state, QIM_MAILBOX_LANE_IDLE);
    qim__mb_pool_cancel(&sh->m->pool, &l->task);
    atomic_store(&l->ready, false);
  }
  qim__mb_drain_signal(sh->m);
}

static int acquire_run(mb_task *t, mb_worker *w) {
  mb_job *job = (mb_job *)t;
  qim_mailbox_acquire_op *op = job->op;
  mb_shard *sh = qim__mb_shard(job->m, op->shard);
  qim_free(job);
  stop_lanes(sh);
  qim_store_shard_takeover_req r = {.shard = sh->id, .owner = w->m->opt.node_id};
  int rc;
  QIM__MB_CALL(rc, w, mailboxes.shard_takeover, &r);
  qim_lane_watermark *wms = qim_calloc(w->m->opt.shards.lanes_per_shard, sizeof *wms);
  if (rc == 0) {
    sh->epoch = r.out_epoch;
    sh->fence_offset = r.out_fence.offset;
    rc = read_watermarks(w, sh, wms);
  }
  if (rc == 0) {
    start_lanes(sh, wms);
    op->out = (qim_shard_takeover){sh->id, r.out_epoch};
    op->fence = r.out_fence;
    QIM_LOGI(NULL, "mailbox.shard_acquired", "shard=%u epoch=%u fence=%llu replay_from=%llu", sh->id, sh->epoch,
             (unsigned long long)sh->fence_offset, (unsigned long long)sh->replay_from.offset);
  } else {
    QIM_LOGE(NULL, "mailbox.shard_acquire_failed", "shard=%u error=%s", sh->id, qim_err_name(rc));
    rc = qim_err_raise(QIM_E_MATERIALIZE_UNAVAILABLE);
  }
  qim_free(wms);
  atomic_store(&sh->acquiring, false);
  op->status = rc;
  op->item_.run = post_done;
  qim_cq_post(op->cq, &op->item_);
  return -1;
}

/* The mailbox is being freed before the job ran. */
static void acquire_cancel(mb_task *t) {
  mb_job *job = (mb_job *)t;
  qim_mailbox_acquire_op *op = job->op;
  qim_free(job);
  op->status = -ESHUTDOWN;
  op->item_.run = post_done;
  qim_cq_post(op->cq, &op->item_);
}

int qim_mailbox_shard_acquire(qim_mailbox *m, qim_mailbox_acquire_op *op) {
  mb_shard *sh = qim__mb_shard(m, op->shard);
  if (!sh || !op->cq || !op->done) return -EINVAL;
  if (atomic_exchange(&sh->acquiring, true)) return -EALREADY;
  op->status = 0;
  op->out = (qim_shard_takeover){0};
  op->fence = (qim_log_position){0};
  mb_job *job = qim_calloc(1, sizeof *job);
  job->task.run = acquire_run;
  job->task.oneshot = true;
  job->task.cancel = acquire_cancel;
  job->m = m;
  job->op = op;
  op->job_ = job;
  qim__mb_pool_kick(&m->pool, &job->task);
  return 0;
}

static void sync_done(qim_mailbox_acquire_op *op) { *(bool *)op->data = true; }

int qim_mailbox_shard_acquire_sync(qim_mailbox *m, qim_mailbox_shard_id shard, qim_shard_takeover *out) {
  qim_cq *cq;
  int rc = qim_cq_new_blocking(&cq);
  if (rc) return rc;
  bool done = false;
  qim_mailbox_acquire_op op = {.cq = cq, .done = sync_done, .data = &done, .shard = shard};
  rc = qim_mailbox_shard_acquire(m, &op);
  while (rc == 0 && !done) qim_cq_wait(cq, -1);
  qim_cq_free(cq);
  if (rc) return rc;
  if (out) *out = op.out;
  return op.status;
}

void qim_mailbox_shard_release(qim_mailbox *m, qim_mailbox_shard_id shard) {
  mb_shard *sh = qim__mb_shard_peek(m, shard);
  if (!sh) return;
  stop_lanes(sh);
  QIM_LOGI(NULL, "mailbox.shard_released", "shard=%u", shard);
}

/* ---- readiness ----------------------------------------------------------------------------------- */

int qim_mailbox_shard_readiness(qim_mailbox *m, qim_mailbox_shard_id shard, qim_shard_readiness *out, qim_error *err) {
  qim_error e = {0};
  if (err) *err = e;
  *out = (qim_shard_readiness){0};
  if (shard >= m->opt.shards.shard_count) return -EINVAL;
  mb_shard *sh = qim__mb_shard_peek(m, shard);
  if (!sh || !atomic_load(&sh->owned) || atomic_load(&sh->fenced))
    return qim_err_raise(QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  int first_not_ready = -1;
  for (uint32_t i = 0; i < m->opt.shards.lanes_per_shard; i++) {
    mb_lane *l = &sh->lanes[i];
    int state = atomic_load(&l->state);
    bool ready = atomic_load(&l->ready);
    if (state == QIM_MAILBOX_LANE_FENCED) return qim_err_raise(QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
    /* A lane stopped before its fence will never get there. */
    if (!ready && (state == QIM_MAILBOX_LANE_FAILED || state == QIM_MAILBOX_LANE_HALTED))
      return qim_err_raise(QIM_E_MATERIALIZE_READINESS_FAILED);
    if (!ready && first_not_ready < 0) first_not_ready = (int)i;
  }
  if (first_not_ready >= 0) {
    out->kind = QIM_SHARD_READINESS_LANE_NOT_READY;
    out->lane = (qim_lane_id)first_not_ready;
    out->retry_after_ms = m->opt.not_ready_retry_ms;
    return 0;
  }
  out->kind = QIM_SHARD_READINESS_READY;
  out->replay_from = sh->replay_from;
  return 0;
}

int qim_mailbox_shard_wait_ready(qim_mailbox *m, qim_mailbox_shard_id shard, int timeout_ms, qim_shard_readiness *out,
                                 qim_error *err) {
  uint64_t until = qim__mb_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000u;
  for (;;) {
    int rc = qim_mailbox_shard_readiness(m, shard, out, err);
    if (rc || out->kind == QIM_SHARD_READINESS_READY) return rc;
    if (timeout_ms >= 0 && qim__mb_now_ns() >= until) {
      if (err) *err = (qim_error){.code = QIM_E_MATERIALIZE_LANE_NOT_READY, .lane = out->lane,
                                  .retry_after_ms = out->retry_after_ms};
      return qim_err_raise(QIM_E_MATERIALIZE_LANE_NOT_READY);
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  }
}

int qim__mb_lane_serving(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane, qim_error *err) {
  mb_shard *sh = qim__mb_shard_peek(m, shard);
  if (!sh || lane >= m->opt.shards.lanes_per_shard || !atomic_load(&sh->owned) || atomic_load(&sh->fenced))
    return 0;
  const mb_lane *l = &sh->lanes[lane];
  if (atomic_load(&l->ready)) return 0;
  int state = atomic_load(&l->state);
  if (state == QIM_MAILBOX_LANE_FAILED || state == QIM_MAILBOX_LANE_HALTED) {
    *err = (qim_error){.code = QIM_E_MATERIALIZE_READINESS_FAILED};
    return qim_err_raise(QIM_E_MATERIALIZE_READINESS_FAILED);
  }
  *err = (qim_error){.code = QIM_E_MATERIALIZE_LANE_NOT_READY, .lane = lane, .retry_after_ms = m->opt.not_ready_retry_ms};
  return qim_err_raise(QIM_E_MATERIALIZE_LANE_NOT_READY);
}

qim_shard_epoch qim__mb_identity_epoch(qim_mailbox *m, const qim_lane_watermark *wm) {
  qim_shard_epoch e = qim_mailbox_seq_epoch(wm->materialized);
  mb_shard *sh = qim__mb_shard_peek(m, wm->shard);
  if (sh && atomic_load(&sh->owned) && !atomic_load(&sh->fenced) && sh->epoch > e) e = sh->epoch;
  return e;
}
