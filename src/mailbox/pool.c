/*
 * pool.c — the mailbox's small worker pool and the way its tasks talk to the store.
 *
 * Every (shard, lane) is a task, not a thread: a worker takes the task that is due first, runs
 * one bounded step and puts it back with the delay the step asked for. A task is on the queue
 * at most once and runs on one worker at a time (the queued / running flags, under the pool
 * mutex), which is what lets a lane keep its working state without locks. A wake-up that
 * arrives while a task runs sets `kick`, so it runs again at once instead of being lost.
 * Queuing a task wakes ONE idle worker (not all of them: a kicked lane is one task), and a
 * worker that puts its own task back at the head of the queue wakes nobody: it takes it next.
 *
 * Inside a step a worker submits store requests with completions on its own blocking queue and
 * waits for them there: many requests can be in flight at once (the store group-commits them),
 * and no event loop ever waits.
 */
#include <errno.h>
#include <time.h>

#include "mailbox/mailbox_int.h"
#include "qim/clock.h"
#include "qim/log.h"
#include "qim/mem.h"

uint64_t qim__mb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Inserts `t` by due time, after tasks due at the same time (FIFO among equals). Holds mu. */
static void enqueue(mb_pool *p, mb_task *t, uint64_t due, bool wake) {
  t->due_ns = due;
  t->queued = true;
  mb_task **pp = &p->head;
  while (*pp && (*pp)->due_ns <= due) pp = &(*pp)->next;
  t->next = *pp;
  *pp = t;
  if (wake) pthread_cond_signal(&p->cv);
}

static void dequeue(mb_pool *p, mb_task *t) {
  for (mb_task **pp = &p->head; *pp; pp = &(*pp)->next)
    if (*pp == t) {
      *pp = t->next;
      break;
    }
  t->next = NULL;
  t->queued = false;
}

void qim__mb_pool_kick(mb_pool *p, mb_task *t) {
  pthread_mutex_lock(&p->mu);
  uint64_t now = qim__mb_now_ns();
  if (t->running) {
    t->kick = true;
  } else if (!t->queued || t->due_ns > now) {
    /* A task already due keeps its place: moving it behind the other due tasks at every
     * kick would starve a lane that is kicked often (each fanout batch kicks it). */
    if (t->queued) dequeue(p, t);
    enqueue(p, t, now, true);
  }
  pthread_mutex_unlock(&p->mu);
}

void qim__mb_pool_cancel(mb_pool *p, mb_task *t) {
  pthread_mutex_lock(&p->mu);
  /* A step that ends while we wait may queue the task again (and another worker may take
   * it): loop until it is neither queued nor running. The caller has already changed the
   * task's state, so a step that still starts ends at once. */
  for (;;) {
    if (t->queued) dequeue(p, t);
    t->kick = false;
    if (!t->running) break;
    pthread_cond_wait(&p->done_cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
}

/* Absolute CLOCK_MONOTONIC time for pthread_cond_timedwait (the condition uses that clock). */
static struct timespec abs_ns(uint64_t ns) {
  return (struct timespec){(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
}

/* Runs one task taken from the queue; returns with mu held. */
static void run_task(mb_pool *p, mb_task *t, mb_worker *w) {
  bool oneshot = t->oneshot;
  t->running = true;
  pthread_mutex_unlock(&p->mu);
  int delay = t->run(t, w);
  pthread_mutex_lock(&p->mu);
  if (oneshot) return; /* a job may have freed itself */
  t->running = false;
  if (t->kick || delay >= 0) {
    enqueue(p, t, qim__mb_now_ns() + (t->kick ? 0 : (uint64_t)delay * 1000000u), false);
    if (p->head != t) pthread_cond_signal(&p->cv); /* we take the head next, not necessarily t */
  }
  t->kick = false;
  pthread_cond_broadcast(&p->done_cv); /* qim__mb_pool_cancel waits for running to drop */
}

static void *worker_main(void *arg) {
  mb_worker *w = arg;
  mb_pool *p = &w->m->pool;
  qim_log_name_thread("mailbox");
  pthread_mutex_lock(&p->mu);
  while (!p->stopping) {
    mb_task *t = p->head;
    uint64_t now = qim__mb_now_ns();
    if (t && t->due_ns <= now) {
      p->head = t->next;
      t->next = NULL;
      t->queued = false;
      run_task(p, t, w);
    } else if (t) {
      struct timespec until = abs_ns(t->due_ns);
      pthread_cond_timedwait(&p->cv, &p->mu, &until);
    } else {
      pthread_cond_wait(&p->cv, &p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int qim__mb_pool_start(qim_mailbox *m, mb_pool *p, uint32_t workers) {
  pthread_mutex_init(&p->mu, NULL);
  qim_cond_init_monotonic(&p->cv);
  pthread_cond_init(&p->done_cv, NULL);
  p->workers = qim_calloc(workers, sizeof *p->workers);
  for (uint32_t i = 0; i < workers; i++) {
    mb_worker *w = &p->workers[i];
    w->m = m;
    int rc = qim_cq_new_blocking(&w->cq);
    if (rc == 0) rc = -pthread_create(&w->thread, NULL, worker_main, w);
    if (rc) {
      qim_cq_free(w->cq);
      QIM_LOGE(NULL, "mailbox.worker_start_failed", "rc=%d", rc);
      qim__mb_pool_stop(p);
      qim__mb_pool_free(p);
      return rc;
    }
    p->count++;
  }
  return 0;
}

void qim__mb_pool_stop(mb_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (uint32_t i = 0; i < p->count; i++) {
    pthread_join(p->workers[i].thread, NULL);
    qim_cq_free(p->workers[i].cq);
  }
  /* Jobs that never ran still owe their caller a completion. */
  for (mb_task *t = p->head, *next; t; t = next) {
    next = t->next;
    if (t->cancel) t->cancel(t);
  }
  p->head = NULL;
  qim_free(p->workers);
  p->workers = NULL;
  p->count = 0;
}

void qim__mb_pool_free(mb_pool *p) {
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->done_cv);
  pthread_mutex_destroy(&p->mu);
}

/* ---- store calls from a worker ------------------------------------------------------------------ */

static void req_done(qim_store_req *r) {
  mb_worker *w = r->data;
  w->pending--;
}

void qim__mb_prep(mb_worker *w, qim_store_req *r) {
  r->cq = w->cq;
  r->done = req_done;
  r->data = w;
  r->status = 0;
  r->error = (qim_error){0};
}

int qim__mb_submitted(mb_worker *w, qim_store_req *r, int rc) {
  if (rc == 0) {
    w->pending++;
    return 0;
  }
  if (rc == -EAGAIN) {
    /* The store's queue is full: let some of our own requests finish, or pause briefly. */
    if (w->pending > 0)
      qim_cq_wait(w->cq, 5);
    else
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    return -EAGAIN;
  }
  r->status = rc;
  return rc;
}

void qim__mb_wait(mb_worker *w) {
  while (w->pending > 0) qim_cq_wait(w->cq, -1);
}

int qim__mb_call_wait(mb_worker *w, qim_store_req *r) {
  qim__mb_wait(w);
  return r->status;
}
