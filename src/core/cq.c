/*
 * cq.c — completion queues (cq.h): the way a result computed on a backend thread gets
 * back to the thread that asked for it.
 *
 * A queue is a mutex-protected intrusive FIFO of qim_cq_item. Loop queues wake their
 * event loop through a uv_async_t; libuv coalesces several uv_async_send calls into one
 * callback, which is why the items live in our own list rather than in the handle.
 * Blocking queues wake a waiter through a condition variable.
 *
 * Lifetime race worth knowing: a poster appends an item and then wakes the owner. If it
 * woke the owner after unlocking, the owner could run the item, free the queue and the
 * poster would then touch freed memory. So the wakeup happens while the mutex is held,
 * and qim_cq_free takes the mutex once before destroying anything: when the owner has
 * seen an item, its poster is done with the queue.
 */
#include "qim/cq.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "qim/mem.h"

typedef enum cq_kind { CQ_LOOP, CQ_BLOCKING } cq_kind;

struct qim_cq {
  cq_kind kind;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CQ_BLOCKING: signalled on post */
  qim_cq_item *head, *tail;
  uv_async_t async; /* CQ_LOOP */
};

/* Takes the whole list; the caller runs it outside the lock (a callback may post). */
static qim_cq_item *take_all(qim_cq *cq) {
  pthread_mutex_lock(&cq->mu);
  qim_cq_item *it = cq->head;
  cq->head = cq->tail = NULL;
  pthread_mutex_unlock(&cq->mu);
  return it;
}

static int run_list(qim_cq_item *it) {
  int n = 0;
  while (it) {
    qim_cq_item *next = it->next; /* `run` may free the item */
    it->next = NULL;
    it->run(it);
    it = next;
    n++;
  }
  return n;
}

static void on_async(uv_async_t *h) {
  qim_cq_drain(h->data);
}

static int cq_alloc(cq_kind kind, qim_cq **out) {
  qim_cq *cq = qim_calloc(1, sizeof *cq);
  cq->kind = kind;
  int rc = pthread_mutex_init(&cq->mu, NULL);
  if (rc) goto fail_mu;
  rc = pthread_cond_init(&cq->cv, NULL);
  if (rc) goto fail_cv;
  *out = cq;
  return 0;
fail_cv:
  pthread_mutex_destroy(&cq->mu);
fail_mu:
  qim_free(cq);
  return -rc;
}

int qim_cq_new_loop(uv_loop_t *loop, qim_cq **out) {
  qim_cq *cq;
  int rc = cq_alloc(CQ_LOOP, &cq);
  if (rc) return rc;
  rc = uv_async_init(loop, &cq->async, on_async);
  if (rc) {
    pthread_cond_destroy(&cq->cv);
    pthread_mutex_destroy(&cq->mu);
    qim_free(cq);
    return rc;
  }
  cq->async.data = cq;
  *out = cq;
  return 0;
}

int qim_cq_new_blocking(qim_cq **out) {
  return cq_alloc(CQ_BLOCKING, out);
}

void qim_cq_post_chain(qim_cq *cq, qim_cq_item *first, qim_cq_item *last) {
  last->next = NULL;
  pthread_mutex_lock(&cq->mu);
  if (cq->tail)
    cq->tail->next = first;
  else
    cq->head = first;
  cq->tail = last;
  /* Wake while holding the lock: see the lifetime note at the top of the file. */
  if (cq->kind == CQ_LOOP)
    uv_async_send(&cq->async);
  else
    pthread_cond_signal(&cq->cv);
  pthread_mutex_unlock(&cq->mu);
}

void qim_cq_post(qim_cq *cq, qim_cq_item *it) {
  qim_cq_post_chain(cq, it, it);
}

int qim_cq_drain(qim_cq *cq) {
  int total = 0;
  /* Items posted by the callbacks themselves run in this same drain. */
  for (;;) {
    int n = run_list(take_all(cq));
    if (n == 0) return total;
    total += n;
  }
}

/* Absolute CLOCK_REALTIME deadline `ms` from now, for pthread_cond_timedwait. */
static struct timespec deadline_after(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

int qim_cq_wait(qim_cq *cq, int timeout_ms) {
  if (cq->kind != CQ_BLOCKING) return -EINVAL;
  struct timespec until = timeout_ms >= 0 ? deadline_after(timeout_ms) : (struct timespec){0};
  pthread_mutex_lock(&cq->mu);
  while (!cq->head) {
    if (timeout_ms < 0) {
      pthread_cond_wait(&cq->cv, &cq->mu);
    } else if (pthread_cond_timedwait(&cq->cv, &cq->mu, &until) == ETIMEDOUT) {
      break;
    }
  }
  qim_cq_item *it = cq->head;
  cq->head = cq->tail = NULL;
  pthread_mutex_unlock(&cq->mu);
  return run_list(it) + qim_cq_drain(cq);
}

static void on_async_closed(uv_handle_t *h) {
  qim_cq *cq = h->data;
  pthread_cond_destroy(&cq->cv);
  pthread_mutex_destroy(&cq->mu);
  qim_free(cq);
}

void qim_cq_free(qim_cq *cq) {
  if (!cq) return;
  /* Items still queued belong to finished operations: run them rather than lose them.
   * Taking the lock also waits out a poster that is still inside qim_cq_post. */
  qim_cq_drain(cq);
  pthread_mutex_lock(&cq->mu);
  pthread_mutex_unlock(&cq->mu);
  if (cq->kind == CQ_LOOP) {
    /* The memory must outlive the handle: libuv frees it in the close callback. */
    uv_close((uv_handle_t *)&cq->async, on_async_closed);
    return;
  }
  pthread_cond_destroy(&cq->cv);
  pthread_mutex_destroy(&cq->mu);
  qim_free(cq);
}
