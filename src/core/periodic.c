/*
 * periodic.c — see periodic.h.
 */
#include "core/periodic.h"

#include <errno.h>
#include <time.h>

#include "qim/log.h"

void qim_periodic_init(qim_periodic *p) {
  *p = (qim_periodic){0};
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
}

void qim_periodic_destroy(qim_periodic *p) {
  qim_periodic_stop(p);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
}

static void *periodic_main(void *arg) {
  qim_periodic *p = arg;
  qim_log_name_thread("periodic");
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    pthread_mutex_unlock(&p->mu);
    p->fn(p->ctx);
    pthread_mutex_lock(&p->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += p->interval_ms / 1000;
    until.tv_nsec += (long)(p->interval_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int qim_periodic_start(qim_periodic *p, void (*fn)(void *), void *ctx, uint32_t interval_ms) {
  if (!fn || interval_ms == 0) return -EINVAL;
  pthread_mutex_lock(&p->mu);
  int rc = p->running ? -EALREADY : 0;
  if (rc == 0) {
    p->stop = false;
    p->fn = fn;
    p->ctx = ctx;
    p->interval_ms = interval_ms;
    rc = -pthread_create(&p->thread, NULL, periodic_main, p);
    p->running = rc == 0;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void qim_periodic_stop(qim_periodic *p) {
  pthread_mutex_lock(&p->mu);
  bool running = p->running;
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (running) pthread_join(p->thread, NULL);
  pthread_mutex_lock(&p->mu);
  p->running = false;
  pthread_mutex_unlock(&p->mu);
}
