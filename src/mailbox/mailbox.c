/*
 * mailbox.c — the mailbox's lifetime, its shard and lane records, and the controls around
 * them: notify, pause / resume per stage and per lane, lane status, drain (for tests) and the
 * retention kick.
 *
 * Shard records are made on first use (an acquire, or a test pausing a lane before acquiring)
 * and kept until the mailbox is freed, so a pointer to one never dangles; a deployment with
 * many shards pays only for the ones this node touches.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>
#include <time.h>

#include "mailbox/mailbox_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

static void defaults(qim_mailbox_options *o) {
#define DEF(field, value) \
  if (!o->field) o->field = (value)
  DEF(workers, 2);
  DEF(read_batch, 256);
  DEF(step_entries, 32768);
  DEF(idle_poll_ms, 5000);
  DEF(retry_ms, 50);
  DEF(not_ready_retry_ms, 100);
  DEF(retain_count, 1000000);
  DEF(retain_age_ms, UINT64_C(30) * 24 * 3600 * 1000);
  DEF(retention_interval_ms, 60000);
  DEF(pull_default_items, 256);
  DEF(pull_max_items, 1000);
  DEF(pull_default_bytes, 1u << 20);
  DEF(pull_max_bytes, 4u << 20);
#undef DEF
  if (o->pull_default_items > o->pull_max_items) o->pull_default_items = o->pull_max_items;
  if (o->pull_default_bytes > o->pull_max_bytes) o->pull_default_bytes = o->pull_max_bytes;
}

static bool key_is_zero(const uint8_t *k) {
  uint8_t acc = 0;
  for (int i = 0; i < QIM_MAILBOX_CURSOR_KEY_SIZE; i++) acc |= k[i];
  return acc == 0;
}

int qim_mailbox_new(qim_store *store, const qim_mailbox_options *opt, qim_mailbox **out) {
  if (!store || !opt || !out || qim_shard_config_validate(&opt->shards) || opt->node_id == 0 ||
      key_is_zero(opt->cursor_key))
    return -EINVAL;
  if (sodium_init() < 0) return -EIO;
  qim_mailbox *m = qim_calloc(1, sizeof *m);
  m->store = store;
  m->opt = *opt;
  defaults(&m->opt);
  m->clock = opt->clock ? opt->clock : qim_clock_system();
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->drain_cv, NULL);
  m->shards = qim_calloc(m->opt.shards.shard_count, sizeof *m->shards);
  qim__mb_push_new(&m->push);
  int rc = qim__mb_settler_start(m);
  if (rc == 0) {
    rc = qim__mb_pool_start(m, &m->pool, m->opt.workers);
    if (rc) qim__mb_settler_stop(m);
  }
  if (rc) {
    qim__mb_push_free(m->push);
    qim_free(m->shards);
    pthread_cond_destroy(&m->drain_cv);
    pthread_mutex_destroy(&m->mu);
    qim_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

void qim_mailbox_free(qim_mailbox *m) {
  if (!m) return;
  qim__mb_pool_stop(&m->pool); /* joins workers: no step runs after this */
  qim__mb_settler_stop(m);      /* every write in flight completes (its drain may kick a lane) */
  qim__mb_pool_free(&m->pool);
  for (uint32_t i = 0; i < m->opt.shards.shard_count; i++) qim__mb_shard_free(atomic_load(&m->shards[i]));
  qim_free(m->shards);
  qim__mb_push_free(m->push);
  pthread_cond_destroy(&m->drain_cv);
  pthread_mutex_destroy(&m->mu);
  qim_free(m);
}

/* ---- shard records ---------------------------------------------------------------------------- */

static mb_shard *shard_new(qim_mailbox *m, qim_mailbox_shard_id id) {
  mb_shard *sh = qim_calloc(1, sizeof *sh);
  sh->id = id;
  sh->m = m;
  sh->lanes = qim_calloc(m->opt.shards.lanes_per_shard, sizeof *sh->lanes);
  for (uint32_t i = 0; i < m->opt.shards.lanes_per_shard; i++) {
    mb_lane *l = &sh->lanes[i];
    l->task.run = qim__mb_lane_step;
    l->sh = sh;
    l->id = (qim_lane_id)i;
    l->wm_pub = l->wm = (qim_lane_watermark){id, (qim_lane_id)i, 0, 0};
    pthread_mutex_init(&l->mu, NULL);
    qim__mb_flight_lane_init(l);
  }
  return sh;
}

mb_shard *qim__mb_shard_peek(qim_mailbox *m, qim_mailbox_shard_id shard) {
  return shard < m->opt.shards.shard_count ? atomic_load(&m->shards[shard]) : NULL;
}

mb_shard *qim__mb_shard(qim_mailbox *m, qim_mailbox_shard_id shard) {
  if (shard >= m->opt.shards.shard_count) return NULL;
  mb_shard *sh = atomic_load(&m->shards[shard]);
  if (sh) return sh;
  pthread_mutex_lock(&m->mu);
  sh = atomic_load(&m->shards[shard]);
  if (!sh) {
    sh = shard_new(m, shard);
    atomic_store(&m->shards[shard], sh);
  }
  pthread_mutex_unlock(&m->mu);
  return sh;
}

void qim__mb_shard_free(mb_shard *sh) {
  if (!sh) return;
  for (uint32_t i = 0; i < sh->m->opt.shards.lanes_per_shard; i++) {
    mb_lane *l = &sh->lanes[i];
    qim__mb_flight_lane_destroy(l);
    pthread_mutex_destroy(&l->mu);
  }
  qim_free(sh->lanes);
  qim_free(sh);
}

static mb_lane *lane_of(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane, bool create) {
  if (lane >= m->opt.shards.lanes_per_shard) return NULL;
  mb_shard *sh = create ? qim__mb_shard(m, shard) : qim__mb_shard_peek(m, shard);
  return sh ? &sh->lanes[lane] : NULL;
}

/* Calls fn on every lane of every shard record. */
static void each_lane(qim_mailbox *m, void (*fn)(qim_mailbox *, mb_lane *)) {
  for (uint32_t s = 0; s < m->opt.shards.shard_count; s++) {
    mb_shard *sh = atomic_load(&m->shards[s]);
    for (uint32_t i = 0; sh && i < m->opt.shards.lanes_per_shard; i++) fn(m, &sh->lanes[i]);
  }
}

void qim__mb_drain_signal(qim_mailbox *m) {
  pthread_mutex_lock(&m->mu);
  pthread_cond_broadcast(&m->drain_cv);
  pthread_mutex_unlock(&m->mu);
}

void qim__mb_lane_set_error(mb_lane *l, int rc) {
  pthread_mutex_lock(&l->mu);
  l->last_error = rc;
  pthread_mutex_unlock(&l->mu);
}

/* ---- controls ----------------------------------------------------------------------------------- */

/* A step of a lane that has nothing to do (not owned, paused) returns at once, after handing
 * over pushes it was holding; so kicking every lane is always safe. */
static void kick_lane(qim_mailbox *m, mb_lane *l) { qim__mb_pool_kick(&m->pool, &l->task); }

void qim_mailbox_notify(qim_mailbox *m, qim_mailbox_shard_id shard) {
  mb_shard *sh = qim__mb_shard_peek(m, shard);
  for (uint32_t i = 0; sh && i < m->opt.shards.lanes_per_shard; i++) kick_lane(m, &sh->lanes[i]);
}

void qim_mailbox_notify_lane(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane) {
  mb_lane *l = lane_of(m, shard, lane, false);
  if (l && atomic_load(&l->sh->owned)) kick_lane(m, l);
}

void qim_mailbox_pause(qim_mailbox *m, qim_mailbox_stage stage) {
  atomic_store(stage == QIM_MAILBOX_STAGE_PUSH ? &m->paused_push : &m->paused_materialize, true);
}

void qim_mailbox_resume(qim_mailbox *m, qim_mailbox_stage stage) {
  atomic_store(stage == QIM_MAILBOX_STAGE_PUSH ? &m->paused_push : &m->paused_materialize, false);
  each_lane(m, kick_lane);
  qim__mb_drain_signal(m);
}

int qim_mailbox_lane_pause(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane) {
  mb_lane *l = lane_of(m, shard, lane, true);
  if (!l) return -EINVAL;
  atomic_store(&l->paused, true);
  /* Wait out a step that passed its paused check before the store above; it is not queued
   * again (a paused lane's step returns at once) until lane_resume kicks it. */
  qim__mb_pool_cancel(&m->pool, &l->task);
  return 0;
}

int qim_mailbox_lane_resume(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane) {
  mb_lane *l = lane_of(m, shard, lane, true);
  if (!l) return -EINVAL;
  atomic_store(&l->paused, false);
  kick_lane(m, l);
  qim__mb_drain_signal(m);
  return 0;
}

static void kick_retention(qim_mailbox *m, mb_lane *l) {
  atomic_store(&l->retention_kick, true);
  kick_lane(m, l);
}

void qim_mailbox_retention_kick(qim_mailbox *m) { each_lane(m, kick_retention); }

int qim_mailbox_lane_status_get(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane,
                                qim_mailbox_lane_status *out) {
  *out = (qim_mailbox_lane_status){0};
  if (shard >= m->opt.shards.shard_count || lane >= m->opt.shards.lanes_per_shard) return -EINVAL;
  mb_lane *l = lane_of(m, shard, lane, false);
  out->watermark = (qim_lane_watermark){shard, lane, 0, 0};
  if (!l) return 0;
  out->state = (qim_mailbox_lane_state)atomic_load(&l->state);
  /* A fence stops every lane of the shard, whichever lane met it first; the others stay
   * RUNNING but are never scheduled again, so they report the fence too (as readiness
   * does for the shard). */
  bool fenced = out->state == QIM_MAILBOX_LANE_RUNNING && atomic_load(&l->sh->fenced);
  if (fenced) out->state = QIM_MAILBOX_LANE_FENCED;
  out->ready = atomic_load(&l->ready);
  out->paused = atomic_load(&l->paused);
  out->owner_epoch = atomic_load(&l->sh->owned) ? l->sh->epoch : 0;
  out->next_offset = atomic_load(&l->next_offset_pub);
  pthread_mutex_lock(&l->mu);
  out->watermark = l->wm_pub;
  out->last_error = fenced ? QIM_E_MATERIALIZE_SHARD_NOT_OWNED : l->last_error;
  out->dispatches = l->dispatches, out->batches = l->batches, out->entries = l->entries;
  out->pushes = l->pushes, out->retries = l->retries, out->trimmed = l->trimmed;
  pthread_mutex_unlock(&l->mu);
  return 0;
}

/* ---- drain ------------------------------------------------------------------------------------------- */

/* Is some running, unpaused lane still to report an empty read at generation >= gen? */
static bool busy(qim_mailbox *m, uint64_t gen) {
  if (atomic_load(&m->paused_materialize)) return false;
  for (uint32_t s = 0; s < m->opt.shards.shard_count; s++) {
    mb_shard *sh = atomic_load(&m->shards[s]);
    if (!sh || !atomic_load(&sh->owned) || atomic_load(&sh->fenced)) continue;
    for (uint32_t i = 0; i < m->opt.shards.lanes_per_shard; i++) {
      mb_lane *l = &sh->lanes[i];
      if (atomic_load(&l->state) != QIM_MAILBOX_LANE_RUNNING || atomic_load(&l->paused)) continue;
      if (atomic_load(&l->idle_gen) < gen) return true;
    }
  }
  return false;
}

int qim_mailbox_drain(qim_mailbox *m, int timeout_ms) {
  uint64_t gen = atomic_fetch_add(&m->drain_gen, 1) + 1;
  each_lane(m, kick_lane);
  struct timespec until = qim_deadline_after_ms(CLOCK_REALTIME, timeout_ms);
  int rc = 0;
  pthread_mutex_lock(&m->mu);
  while (busy(m, gen))
    if (pthread_cond_timedwait(&m->drain_cv, &m->mu, &until) == ETIMEDOUT) {
      rc = busy(m, gen) ? -ETIMEDOUT : 0;
      break;
    }
  pthread_mutex_unlock(&m->mu);
  return rc;
}
