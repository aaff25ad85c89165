/*
 * periodic.h — a background task that runs one function every `interval_ms` on a thread
 * of its own (the retention sweepers of history and groups), stopped promptly: stop
 * wakes the sleeping thread and joins it. Real time, not an injected clock — tests call
 * the function directly.
 */
#ifndef QIM_CORE_PERIODIC_H
#define QIM_CORE_PERIODIC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct qim_periodic {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool running, stop;
  void (*fn)(void *ctx); /* runs first right after start, then every interval_ms */
  void *ctx;
  uint32_t interval_ms;
} qim_periodic;

void qim_periodic_init(qim_periodic *p);
void qim_periodic_destroy(qim_periodic *p); /* stops first */
/* -EINVAL: interval_ms 0 or fn NULL; -EALREADY when running; -errno of pthread_create. */
int qim_periodic_start(qim_periodic *p, void (*fn)(void *), void *ctx, uint32_t interval_ms);
void qim_periodic_stop(qim_periodic *p);

#endif
