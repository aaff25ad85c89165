/*
 * mailbox_int.h — private to src/mailbox: the worker pool, shard and lane state, shared
 * bodies and the pieces each file of the module provides to the others.
 *
 * Who touches what:
 *   - a lane's step runs on one worker at a time (the pool never queues a task twice), so the
 *     step's working state (next_offset, watermark, replay window, backoff) needs no lock;
 *     the copies other threads read (status, readiness, floors) are atomics or taken under
 *     lane->mu;
 *   - the pool's queue and every task's queued/running/kick flags are under pool.mu;
 *   - shard structs are created once (under m->mu) and live until qim_mailbox_free.
 */
#ifndef QIM_MAILBOX_INT_H
#define QIM_MAILBOX_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "mailbox/mailbox.h"

typedef struct mb_worker mb_worker;

/* ---- worker pool (pool.c) ---------------------------------------------------------------------- */

/* A unit of work. `run` returns the delay in ms before it wants to run again, or -1. */
typedef struct mb_task {
  int (*run)(struct mb_task *t, mb_worker *w);
  struct mb_task *next;  /* pool queue, sorted by due_ns */
  uint64_t due_ns;
  bool queued, running, kick;
  bool oneshot;          /* a job: the worker never touches it after run (it may be freed) */
  void (*cancel)(struct mb_task *t); /* a job still queued when the pool stops (may free it) */
} mb_task;

struct mb_worker {
  qim_mailbox *m;
  pthread_t thread;
  qim_cq *cq;            /* completions of this worker's store requests */
  int pending;           /* requests submitted and not yet completed */
};

typedef struct mb_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* work queued, stopping: wakes one worker per queued task */
  pthread_cond_t done_cv; /* a task finished (qim__mb_pool_cancel waits for it) */
  mb_task *head;
  bool stopping;
  mb_worker *workers;
  uint32_t count;
} mb_pool;

int qim__mb_pool_start(qim_mailbox *m, mb_pool *p, uint32_t workers);
/* Stops and joins the workers; kicks after it only queue. Then free destroys the pool. */
void qim__mb_pool_stop(mb_pool *p);
void qim__mb_pool_free(mb_pool *p);
/* Runs `t` as soon as possible (or sets its kick flag while it runs). */
void qim__mb_pool_kick(mb_pool *p, mb_task *t);
/* Takes `t` off the queue and waits until it is not running; it stays off the queue. */
void qim__mb_pool_cancel(mb_pool *p, mb_task *t);
uint64_t qim__mb_now_ns(void);

/* Store calls from a worker: prepare a request, submit it, wait for all. A synchronous refusal
 * is stored in req->status (the callback never runs); -EAGAIN (backpressure) is retried. */
void qim__mb_prep(mb_worker *w, qim_store_req *r);
int qim__mb_submitted(mb_worker *w, qim_store_req *r, int rc);
void qim__mb_wait(mb_worker *w);
/* One call: prep, submit (retrying backpressure) and record a refusal in req->status. */
#define QIM__MB_SUBMIT(w, call, r)                                                              \
  do {                                                                                           \
    int mb_rc_;                                                                                  \
    do {                                                                                         \
      qim__mb_prep((w), &(r)->req);                                                              \
      mb_rc_ = qim__mb_submitted((w), &(r)->req, (w)->m->store->vt->call((w)->m->store, (r)));   \
    } while (mb_rc_ == -EAGAIN);                                                                 \
  } while (0)
/* Submit one call and wait for it; its status goes to `rc`. */
int qim__mb_call_wait(mb_worker *w, qim_store_req *r);
#define QIM__MB_CALL(rc, w, call, r)              \
  do {                                            \
    QIM__MB_SUBMIT(w, call, r);                   \
    (rc) = qim__mb_call_wait((w), &(r)->req);     \
  } while (0)

/* ---- shared bodies ---------------------------------------------------------------------------- */

/* A dispatch's content, shared by every entry and push batch made from it. */
typedef struct mb_body {
  atomic_uint refs;
  qim_message_content content;
} mb_body;

mb_body *qim__mb_body_new(qim_message_content *moved_from);
mb_body *qim__mb_body_ref(mb_body *b);
void qim__mb_body_unref(mb_body *b);

/* ---- shards and lanes ---------------------------------------------------------------------------- */

typedef struct mb_shard mb_shard;

/* A push batch waiting for the push stage to resume. */
typedef struct mb_held {
  struct mb_held *next;
  qim_push_batch *batch;
} mb_held;

typedef struct mb_lane {
  mb_task task;                 /* first: the pool hands us back this pointer */
  mb_shard *sh;
  qim_lane_id id;
  _Atomic int state;            /* qim_mailbox_lane_state */
  atomic_bool ready, paused, retention_kick;
  _Atomic uint64_t idle_gen;    /* drain generation of its last empty read */
  _Atomic uint64_t floor;       /* copy of wm.floor for the shard's log trim */
  _Atomic uint64_t next_offset_pub; /* copy of next_offset for the shard's log trim */
  /* the step's state (one worker at a time) */
  uint64_t next_offset;
  qim_lane_watermark wm;
  uint64_t replay_until;        /* records below this offset may carry earlier progress */
  uint32_t backoff_ms;
  uint64_t next_retention_ns;
  /* the queue of step outcomes (flight.c), under fmu */
  pthread_mutex_t fmu;
  pthread_cond_t fcv;           /* an outcome left, or a write in flight committed / completed */
  struct mb_flight *fhead, *ftail;
  uint32_t nflight;
  mb_held *held;                /* confirmed pushes kept while the push stage is paused */
  bool idle_kick;               /* an empty read waits for the queue to empty */
  bool rewind;                  /* an outcome was not confirmed: replay from rewind_offset */
  uint64_t rewind_offset, rewind_until;
  qim_mailbox_seq rewind_materialized;
  /* what status readers see */
  pthread_mutex_t mu;
  int last_error;
  uint64_t dispatches, batches, entries, pushes, retries, trimmed;
  qim_lane_watermark wm_pub;
} mb_lane;

struct mb_shard {
  qim_mailbox_shard_id id;
  qim_mailbox *m;
  atomic_bool owned;            /* acquired by this node and not released */
  atomic_bool fenced;           /* a newer owner took it */
  atomic_bool acquiring;        /* a takeover job is queued or running */
  qim_shard_epoch epoch;        /* the epoch this node writes with (set before owned) */
  uint64_t fence_offset;        /* a lane is ready once it has replayed through it */
  qim_log_position replay_from;
  mb_lane *lanes;
};

/* ---- the mailbox ------------------------------------------------------------------------------------ */

typedef struct mb_push mb_push;

struct qim_mailbox {
  qim_store *store;
  qim_mailbox_options opt;
  const qim_clock *clock;
  mb_pool pool;
  pthread_mutex_t mu;           /* shard creation; drain waits */
  pthread_cond_t drain_cv;
  _Atomic(mb_shard *) *shards;  /* shard_count slots, created on first use */
  atomic_bool paused_materialize, paused_push;
  _Atomic uint64_t drain_gen;
  mb_push *push;
  /* the settler (flight.c): completions of lane writes in flight */
  pthread_t settler;
  qim_cq *settle_cq;
  qim_cq_item settle_wake;
  atomic_bool settle_stop;
  atomic_uint settle_out;       /* writes submitted and not completed */
};

/* The shard's struct, created on first use (never NULL for a valid id; NULL if out of range). */
mb_shard *qim__mb_shard(qim_mailbox *m, qim_mailbox_shard_id shard);
/* The shard's struct if it exists. */
mb_shard *qim__mb_shard_peek(qim_mailbox *m, qim_mailbox_shard_id shard);
void qim__mb_shard_free(mb_shard *sh);
/* Wakes drain waiters (a lane went idle or changed state). */
void qim__mb_drain_signal(qim_mailbox *m);
void qim__mb_lane_set_error(mb_lane *l, int rc);

/* ---- flight.c ------------------------------------------------------------------------------------ */

/* One step's outcome on its way out of the lane: published once the step is durable, after
 * every earlier step's. */
typedef struct mb_flight {
  struct mb_flight *next;       /* the lane's queue */
  mb_lane *l;
  bool committed, completed, queued; /* under l->fmu */
  int status;                   /* the write's, once completed */
  mb_held *pushes;
  uint64_t dispatches, batches, entries, npushes;
  qim_lane_watermark wm;        /* published with it */
  uint64_t next_offset;
  uint64_t from_offset;         /* the step's first record: the lane replays from here ... */
  qim_mailbox_seq from_materialized; /* ... with this watermark, when it is not confirmed */
  void *owner;                  /* freed with it: the step its write lives in */
  void (*owner_free)(void *owner);
} mb_flight;

int qim__mb_settler_start(qim_mailbox *m);
void qim__mb_settler_stop(qim_mailbox *m);
void qim__mb_flight_lane_init(mb_lane *l);
void qim__mb_flight_lane_destroy(mb_lane *l);
mb_flight *qim__mb_flight_new(mb_lane *l);
void qim__mb_flight_free(mb_flight *f);
/* Submits `r` (retrying backpressure) with its completion on the settler and waits until it
 * has COMMITTED: 0, or the status it failed with before (then the flight is not the
 * settler's: queue it as failed or free it). */
int qim__mb_flight_submit(mb_flight *f, qim_store_mailbox_append_req *r);
/* Appends the outcome to its lane's queue (an outcome not submitted: set `completed`). */
void qim__mb_flight_queue(mb_flight *f);
/* The lane's worker: waits for room in the queue / for it to empty. */
void qim__mb_flight_room(mb_lane *l);
void qim__mb_flight_wait_empty(mb_lane *l);
/* Is the queue empty, with no rewind waiting? If not, the lane is kicked when the queue
 * empties or the rewind is due (an empty read then counts as idle for qim_mailbox_drain). */
bool qim__mb_flight_idle(mb_lane *l);
/* Emits held pushes unless the push stage is paused; true while some stay held. */
bool qim__mb_flight_held(mb_lane *l);
/* After an outcome was not confirmed: waits for the queue to empty, moves the lane back to
 * the failed step's first record and returns true. */
bool qim__mb_flight_rewound(mb_lane *l);

/* ---- takeover.c ------------------------------------------------------------------------------------ */

/* May this node serve reads of (shard, lane)? 0, or MATERIALIZE_LANE_NOT_READY {lane,
 * retry_after_ms} / MATERIALIZE_READINESS_FAILED (payload in *err) when this node owns the shard
 * and the lane is still replaying / cannot finish replaying. A shard owned elsewhere is read
 * straight from the store (its watermark only ever covers complete dispatches). */
int qim__mb_lane_serving(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane, qim_error *err);
/* The shard_epoch a cursor signed now carries: this node's epoch when it owns the shard, else
 * the epoch of the watermark. */
qim_shard_epoch qim__mb_identity_epoch(qim_mailbox *m, const qim_lane_watermark *wm);

/* ---- materializer.c, retention.c ------------------------------------------------------------------------ */

/* One step of a lane; returns the delay before the next one, or -1 (paused or stopped). */
int qim__mb_lane_step(mb_task *t, mb_worker *w);
/* A lane's retention pass: moves its floor and trims the shard's log. 0 or an error. */
int qim__mb_retention_pass(mb_lane *l, mb_worker *w);

/* ---- event.c ------------------------------------------------------------------------------------------------ */

/* Fills the event group of one recipient into out[0..2); returns the number of entries (1 or
 * 2). Entries borrow body->content (shallow): never free them one by one. */
size_t qim__mb_event_group(const qim_group_dispatch *d, const mb_body *body, qim_mailbox_seq seq,
                           qim_user_id user, const qim_user_id *mentions, size_t mention_count,
                           qim_mailbox_entry out[2]);
/* The payload bytes of an entry, as the store counts them for max_bytes. */
size_t qim__mb_entry_size(const qim_mailbox_entry *e);

/* ---- push.c ---------------------------------------------------------------------------------------------- */

int qim__mb_push_new(mb_push **out);
void qim__mb_push_free(mb_push *p);
/* Builds the push batches of one dispatch: one per connection shard that has a routed
 * recipient, holding that shard's users' entries (whole event groups, in order). */
typedef struct mb_push_builder {
  mb_push *p;
  mb_body *body;
  qim_trace_id trace;
  struct mb_push_slot *slots;
  size_t n, cap;
} mb_push_builder;
void qim__mb_push_begin(mb_push_builder *b, mb_push *p, mb_body *body, const qim_trace_id *trace);
/* Entries of several users, each user's group contiguous and in order. */
void qim__mb_push_add(mb_push_builder *b, const qim_mailbox_entry *entries, size_t n);
/* Appends the batches to the list ending at **tail (moving *tail); returns how many. */
size_t qim__mb_push_finish(mb_push_builder *b, mb_held ***tail);
/* Hands every held batch to its sink (or drops it when none is registered); returns how many
 * reached a sink. */
uint64_t qim__mb_push_emit(mb_push *p, mb_held *held);
bool qim__mb_push_has_routes(mb_push *p);

#endif
