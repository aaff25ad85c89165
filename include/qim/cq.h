/*
 * cq.h — completion queues: how an asynchronous operation's result gets back to the
 * thread that asked. A backend thread posts a finished item; the queue runs the item's
 * callback on its owner: an event loop (woken through a uv_async_t, which coalesces
 * wakeups — hence the queue behind it) or a worker that drains or waits. Items are
 * intrusive (no allocation per post), so the queue is bounded by what was submitted.
 */
#ifndef QIM_CQ_H
#define QIM_CQ_H

#include <stdbool.h>
#include <uv.h>

typedef struct qim_cq_item {
  struct qim_cq_item *next;            /* private to the queue */
  void (*run)(struct qim_cq_item *it); /* called on the owner thread */
} qim_cq_item;

typedef struct qim_cq qim_cq;

/* Completions run on `loop`'s thread. Free with qim_cq_free from that thread. */
int qim_cq_new_loop(uv_loop_t *loop, qim_cq **out);
/* Completions run inside qim_cq_drain / qim_cq_wait on whichever thread calls them. */
int qim_cq_new_blocking(qim_cq **out);
/* Any thread. */
void qim_cq_post(qim_cq *cq, qim_cq_item *it);
/* True for a queue of qim_cq_new_blocking: its owner is a worker that waits for its
 * completions (a backend may run such a caller's short reads on the caller's thread). */
bool qim_cq_is_blocking(const qim_cq *cq);
/* Posts the items first..last, already linked through `next` (last->next is ignored), in
 * that order with one wakeup: a backend completing many requests of one owner at once
 * wakes it once instead of once per request. Any thread. */
void qim_cq_post_chain(qim_cq *cq, qim_cq_item *first, qim_cq_item *last);
/* Runs every posted item; returns how many ran. */
int qim_cq_drain(qim_cq *cq);
/* Blocks until at least one item was posted or timeout_ms (-1 = forever) passes, then
 * drains; returns how many ran. Blocking queues only (-EINVAL for a loop queue). */
int qim_cq_wait(qim_cq *cq, int timeout_ms);
/* Runs what is still queued, then frees. Owner thread only, after every poster is done.
 * A loop queue may be freed from one of its own callbacks; its memory goes when the
 * loop runs the handle's close callback. */
void qim_cq_free(qim_cq *cq);

#endif
