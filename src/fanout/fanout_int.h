/*
 * fanout_int.h — what the files of the fanout module share and nobody else sees.
 */
#ifndef QIM_FANOUT_INT_H
#define QIM_FANOUT_INT_H

#include <pthread.h>

#include "fanout/fanout.h"

struct qim_fanout {
  qim_store *store;
  qim_fanout_options opt;
  uint32_t since_trim; /* records committed since the last outbox trim (the consuming thread's) */
  /* Writes committed but not yet confirmed durable (fanout.c, "writes in flight"); the
   * consuming thread's, like since_trim. */
  qim_cq *cq;          /* their completions */
  uint32_t inflight;
  bool unconfirmed;    /* one of them was not confirmed: the next run fails */

  /* The task. `mu` guards everything below; the worker holds it only between steps. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool running, stopping, notified;
  qim_fanout_status status;
};
typedef struct qim_fanout qim__fanout;

typedef struct qim__fanout_users {
  qim_user_id *ids;
  size_t count, cap;
} qim__fanout_users;

/* Runs the completions of appends in flight that arrived, waiting while more than `max`
 * are outstanding (0: until every one has completed). The consuming thread's. */
void qim__fanout_flights_settle(qim__fanout *f, uint32_t max);

/* Every recipient of `env` (unsorted, may repeat); see fanout_audience.c. */
int qim__fanout_recipients(qim__fanout *f, const qim_committed_envelope *env, qim__fanout_users *u);
void qim__fanout_users_free(qim__fanout_users *u);
/* A store status as a fanout status (QIM_AGAIN, snapshot unavailable, or Unavailable). */
int qim__fanout_store_error(int rc);

#endif
