/*
 * cq.c — completion queues (cq.h): the way a result computed on a backend thread gets
 * back to the thread that asked for it.
 *
 * A queue is a mutex-protected intrusive FIFO of qim_cq_item. Loop queues wake their
 * event loop through a uv_async_t; libuv coalesces several uv_async_send calls into one
 * callback, which is why the items live in our own list rather than in the handle.
 * Blocking queues wake a waiter through a condition variable.
 *
 * Wake-ups are the expensive part on a VM (a futex wake, then a schedule). A poster only
 * signals a blocking queue whose owner is actually waiting (`waiting`, read under the
 * lock), and it signals after unlocking: signalled under the lock, the woken owner would
 * at once block again on the mutex the poster still holds (two more futex calls).
 *
 * Lifetime race worth knowing: a poster that wakes the owner after unlocking could find
 * the queue freed meanwhile (the owner saw the item, ran it and freed the queue). So a
 * poster counts itself in `posting` under the lock and out (release) once its wake-up is
 * done, and qim_cq_free waits for that count to reach zero before destroying anything.
 */
#include "qim/cq.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "qim/clock.h"
#include "qim/mem.h"

typedef enum cq_kind { CQ_LOOP, CQ_BLOCKING } cq_kind;

struct qim_cq {
  cq_kind kind;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CQ_BLOCKING: signalled on post */
  qim_cq_item *head, *tail;
  uint32_t waiting;    /* CQ_BLOCKING: owner inside qim_cq_wait (under mu) */
  atomic_uint posting; /* posters between their append and the end of their wake-up */
  uv_async_t async;    /* CQ_LOOP */
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
  bool wake = cq->kind == CQ_LOOP || cq->waiting > 0;
  if (wake) atomic_fetch_add_explicit(&cq->posting, 1, memory_order_relaxed);
  pthread_mutex_unlock(&cq->mu);
  if (!wake) return;
  /* See the lifetime note at the top of the file. */
  if (cq->kind == CQ_LOOP)
    uv_async_send(&cq->async); /* libuv writes its eventfd only when not already pending */
  else
    pthread_cond_signal(&cq->cv);
  atomic_fetch_sub_explicit(&cq->posting, 1, memory_order_release);
}

void qim_cq_post(qim_cq *cq, qim_cq_item *it) {
  qim_cq_post_chain(cq, it, it);
}

bool qim_cq_is_blocking(const qim_cq *cq) { return cq->kind == CQ_BLOCKING; }

int qim_cq_drain(qim_cq *cq) {
  int total = 0;
  /* Items posted by the callbacks themselves run in this same drain. */
  for (;;) {
    int n = run_list(take_all(cq));
    if (n == 0) return total;
    total += n;
  }
}

int qim_cq_wait(qim_cq *cq, int timeout_ms) {
  if (cq->kind != CQ_BLOCKING) return -EINVAL;
  struct timespec until =
      timeout_ms >= 0 ? qim_deadline_after_ms(CLOCK_REALTIME, timeout_ms) : (struct timespec){0};
  pthread_mutex_lock(&cq->mu);
  cq->waiting++;
  while (!cq->head) {
    if (timeout_ms < 0) {
      pthread_cond_wait(&cq->cv, &cq->mu);
    } else if (pthread_cond_timedwait(&cq->cv, &cq->mu, &until) == ETIMEDOUT) {
      break;
    }
  }
  cq->waiting--;
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
   * Taking the lock waits out a poster still appending; `posting` one still waking. */
  qim_cq_drain(cq);
  pthread_mutex_lock(&cq->mu);
  pthread_mutex_unlock(&cq->mu);
  while (atomic_load_explicit(&cq->posting, memory_order_acquire) > 0) sched_yield();
  if (cq->kind == CQ_LOOP) {
    /* The memory must outlive the handle: libuv frees it in the close callback. */
    uv_close((uv_handle_t *)&cq->async, on_async_closed);
    return;
  }
  pthread_cond_destroy(&cq->cv);
  pthread_mutex_destroy(&cq->mu);
  qim_free(cq);
}
