/*
 * fanout_task.c — the fanout as a long-running task: one worker thread that drives
 * qim_fanout_run_once, sleeps when the outbox is drained (woken early by
 * qim_fanout_notify), backs off after transient store failures and halts on errors that
 * retrying cannot cure (a determinism violation must be looked at, not skipped).
 */
#include <errno.h>
#include <time.h>

#include "fanout/fanout_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"

#define RETRY_MAX_MS 5000

/* Errors after which the consumer stays on its position until restarted. */
static bool halting(int rc) {
  return rc == QIM_E_FANOUT_DETERMINISM_VIOLATION || rc == QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE ||
         rc == -EBADMSG;
}

/* Waits on the condition for up to `ms` or until notified/stopping. Holds f->mu. */
static void wait_ms(qim__fanout *f, uint32_t ms) {
  struct timespec ts = qim_deadline_after_ms(CLOCK_MONOTONIC, ms);
  while (!f->stopping && !f->notified)
    if (pthread_cond_timedwait(&f->cv, &f->mu, &ts) == ETIMEDOUT) break;
  f->notified = false;
}

static void *task_main(void *arg) {
  qim__fanout *f = arg;
  uint32_t backoff = 0;
  qim_log_name_thread("fanout");
  pthread_mutex_lock(&f->mu);
  while (!f->stopping) {
    pthread_mutex_unlock(&f->mu);
    uint32_t n = 0;
    int rc = qim_fanout_run_once(f, f->opt.batch, &n);
    pthread_mutex_lock(&f->mu);
    f->status.last_error = rc == QIM_AGAIN ? 0 : rc;
    if (halting(rc)) {
      f->status.halted = true;
      QIM_LOGE(NULL, "fanout.halted", "rc=%s", qim_err_name(rc));
      while (!f->stopping) pthread_cond_wait(&f->cv, &f->mu);
    } else if (rc) {
      backoff = backoff ? (backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2) : f->opt.retry_ms;
      QIM_LOGW(NULL, "fanout.retry", "rc=%s backoff_ms=%u", qim_err_name(rc), backoff);
      wait_ms(f, backoff);
    } else {
      backoff = 0;
      if (n == 0) wait_ms(f, f->opt.idle_poll_ms);
    }
  }
  pthread_mutex_unlock(&f->mu);
  qim__fanout_flights_settle(f, 0);
  return NULL;
}

int qim_fanout_start(qim_fanout *f) {
  pthread_mutex_lock(&f->mu);
  if (f->running) {
    pthread_mutex_unlock(&f->mu);
    return -EALREADY;
  }
  f->stopping = false;
  f->notified = false;
  f->status.halted = false;
  f->status.last_error = 0;
  int rc = pthread_create(&f->thread, NULL, task_main, f);
  if (rc == 0) f->running = f->status.running = true;
  pthread_mutex_unlock(&f->mu);
  return -rc;
}

void qim_fanout_notify(qim_fanout *f) {
  pthread_mutex_lock(&f->mu);
  f->notified = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

void qim_fanout_stop(qim_fanout *f) {
  pthread_mutex_lock(&f->mu);
  if (!f->running) {
    pthread_mutex_unlock(&f->mu);
    return;
  }
  f->stopping = true;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->thread, NULL);
  pthread_mutex_lock(&f->mu);
  f->running = f->status.running = false;
  pthread_mutex_unlock(&f->mu);
}

void qim_fanout_get_status(qim_fanout *f, qim_fanout_status *out) {
  pthread_mutex_lock(&f->mu);
  *out = f->status;
  pthread_mutex_unlock(&f->mu);
}
