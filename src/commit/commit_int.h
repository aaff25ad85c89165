/*
 * commit_int.h — private structures of the commit module, shared by its files:
 *   commit.c          lifecycle, workers, tables, counters, blocking helpers
 *   commit_send.c     checks before reserve, reserve, attaching retries to a live intent
 *   commit_drive.c    the per-intent state machine and the per-conversation outbox order
 *   commit_recover.c  drains, recovery passes, the dedupe window, loading a key
 *   commit_rate.c     the per-user token bucket
 *
 * Locking: one mutex (c->mu) guards the key table, the conversation table and every
 * entry and conversation. Handlers hold it briefly and submit store calls under it
 * (a submit never waits and never runs a completion inline, store.h), so the order in
 * which steps are submitted is exactly the order decided under the lock.
 */
#ifndef QIM_COMMIT_INT_H
#define QIM_COMMIT_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "commit/commit.h"
#include "qim/log.h"

typedef struct qim__commit_conv qim__commit_conv;
typedef struct qim__commit_entry qim__commit_entry;
typedef struct qim__commit_send qim__commit_send;
typedef struct qim__commit_pass qim__commit_pass;
typedef struct qim__rate qim__rate;

/* A worker: one thread draining a blocking queue; the steps of the intents of the
 * conversations hashed to it complete there. Worker 0 also runs maintenance. */
typedef struct qim__commit_worker {
  qim_commit *c;
  unsigned index;
  pthread_t thread;
  qim_cq *cq;
  qim_cq_item wake;
  bool started;
} qim__commit_worker;

/*
 * One CommitKey this process is driving: created as a placeholder when its reserve is
 * submitted (so concurrent retries of the key wait for it instead of reserving again),
 * or adopted from a listing (recovery, a drain). Freed once Committed. At most one store
 * call is in flight per entry (`busy`), so one request union suffices.
 */
struct qim__commit_entry {
  qim_commit_key key;
  uint64_t hash;
  qim__commit_entry *hnext;                 /* key table chain */
  qim__commit_conv *conv;
  qim__commit_entry *aprev, *anext;         /* conv->all: every entry of the conversation */
  qim__commit_entry *pprev, *pnext;         /* conv->pending: reserve in flight, ticket order */
  qim__commit_entry *rprev, *rnext;         /* conv->ready: reserved, not outboxed, (seq, order) */
  bool in_pending, in_ready;
  uint64_t ticket;                          /* order of reserve submission in this process */
  uint64_t horizon;                         /* highest ticket issued when the reserve completed */
  bool reserving;                           /* the owner's reserve is in flight: not driven yet */
  bool reserved;                            /* the store holds the intent; `intent` is valid */
  bool listed;                              /* placed in a drain list (its order is the list's) */
  bool has_order;
  uint64_t order;                           /* store's out_order (ties of one seq position) */
  bool adopted;                             /* taken over from a listing, not from a local send */
  bool needs_drain;                         /* order unknown: only a drain may outbox it */
  bool busy;                                /* a store call in flight */
  bool outboxing;                           /* that call is the conversation's OUTBOXED step */
  bool failed;                              /* waiting for its backoff to pass */
  bool verified;                            /* the outbox envelope was read back and matched */
  bool has_position;
  qim_commit_state state;                   /* last state known durable */
  unsigned attempts;                        /* consecutive failures (backoff exponent) */
  unsigned conflicts;                       /* order conflicts / reloads since progress */
  uint64_t retry_at_ms;                     /* monotonic ms when failed */
  qim_commit_intent intent;                 /* owned, valid when reserved */
  qim_trace_id trace;                       /* the intent's TraceId, in every step's log line */
  qim_log_position position;                /* of the OutboxPublication */
  const qim_message_content *proposal_content; /* placeholder: the reserving send's (borrowed) */
  qim_conversation_id proposal_conv;
  qim__commit_send *waiters;                /* sends completed with this entry's outcome */
  qim__commit_send *rivals;                 /* placeholder: sends with other content, retried
                                               once its reserve answers (commit_send.c) */
  qim__commit_pass *pass;                   /* the recovery pass that adopted it, if any */
  qim__commit_worker *worker;
  union {
    qim_store_req head;
    qim_store_intent_advance_req adv;
    qim_store_log_read_req read;
    qim_store_intent_load_req load;
  } rq;
};

/* The in-memory ordering structure of one conversation (tenant, conversation). Exists
 * while it has entries, a drain runs or sends wait in its gate. The gate keeps the sends
 * of the conversation in arrival order while their checks read the store (reads may
 * complete in any order): a send reserves only after every send that arrived before it
 * has reserved or failed, so seqs follow the order in which sends reached the commit. */
struct qim__commit_conv {
  qim_tenant_id tenant_id;
  qim_conversation_id id;
  uint64_t hash;
  qim__commit_conv *hnext;
  qim__commit_entry *all_head;
  qim__commit_entry *pending_head, *pending_tail;
  qim__commit_entry *ready_head, *ready_tail;
  size_t entries;
  uint64_t next_ticket;
  unsigned outboxing;                       /* OUTBOXED steps in flight (cfg.outbox_pipeline at most) */
  bool draining, listing, drain_again;
  qim_commit_key *drain_keys;               /* the listed order a drain follows */
  size_t drain_n, drain_pos;
  qim__commit_worker *worker;
  qim_store_intent_list_req list;
  qim__commit_send *gate_head, *gate_tail;  /* sends in their checks, in arrival order */
  bool gate_busy;                           /* the gate is releasing sends: keep the struct */
};

/*
 * What never changes about a conversation once it exists: its kind and, for a direct
 * one, its two users. A direct-mapped cache of these lets a plain send to a known
 * conversation go straight to its reserve (whose transaction checks membership, ban and
 * W mode, and deletion, store.h), instead of reading the conversation and the sender's
 * row first. A colliding conversation evicts the slot; a miss reads the store again.
 */
#define QIM__FACTS_SLOTS 4096
typedef struct qim__conv_facts {
  bool valid;
  qim_tenant_id tenant_id;
  qim_conversation_id id;
  qim_conversation_kind kind;
  qim_user_id direct_users[2];
} qim__conv_facts;

enum { QIM__SEND_CLIENT = 0, QIM__SEND_CONTROL = 1 };

/* The working state of one qim_commit_op. */
struct qim__commit_send {
  qim_commit *c;
  qim_commit_op *op;
  int kind;                                  /* QIM__SEND_* */
  qim_authenticated_actor actor;
  qim_conversation_id conv_id;
  qim_client_message_id cmid;
  const qim_message_content *content;       /* borrowed from the caller */
  const qim_user_id *mentions;
  size_t mention_count, mention_i;
  bool has_reply;
  qim_conversation_seq reply_seq;
  qim_store_seq_range reply_range;
  qim_retention_class retention;
  const qim_delivery_audience *audience;     /* control only: an explicit DIRECT audience */
  qim_trace_id trace;
  qim_message_id message_id;
  qim_last_activity_id activity_id;
  qim__conv_facts facts;                     /* the conversation's kind and direct users */
  bool authorize;                            /* the reserve checks ban and W (no member read) */
  qim_store_member member;                   /* owned, the sender's row (mentions, replies) */
  qim_commit_intent proposal;                /* content borrowed, audience owned */
  qim__commit_entry *entry;                  /* the placeholder this send reserves through */
  qim__commit_conv *gate;                    /* the conversation whose gate holds it, or NULL */
  qim__commit_send *gnext;                   /* gate chain */
  bool gate_passed;                          /* its checks are done, with gate_status */
  int gate_status;
  qim__commit_send *wnext;                   /* entry->waiters chain */
  qim_reserve_result_kind outcome;
  union {
    qim_store_req head;
    qim_store_conv_get_req conv_get;
    qim_store_member_get_req member_get;
    qim_store_record_query_req query;
    qim_store_intent_reserve_req reserve;
  } rq;
};

/* A recovery pass (qim_commit_recover) or a forget. */
struct qim__commit_pass {
  qim_commit *c;
  qim_commit_task *task;
  bool internal;                             /* maintenance's own: freed when done */
  bool listed;                               /* the listing was processed */
  size_t outstanding;                        /* adopted entries not yet Committed / failed */
  uint32_t last_count;                       /* size of the last listing */
  uint64_t last_adopted;
  union {
    qim_store_req head;
    qim_store_intent_list_req list;
    qim_store_intent_forget_req forget;
  } rq;
};

typedef struct qim__commit_counters {
  _Atomic uint64_t sends, acks, fresh, existing, replayed, refused;
  _Atomic uint64_t step_failures, step_retries, order_conflicts, drains, adopted, recovered;
  _Atomic uint64_t invariant_violations, forgotten, rate_limited, committed_in_reserve;
} qim__commit_counters;

struct qim_commit {
  qim_store *store;
  const qim_clock *clock;
  qim_id_gen *ids;
  qim_id_gen own_ids;
  bool owns_ids;
  qim_commit_config cfg;
  qim__rate *rate;

  pthread_mutex_t mu;
  pthread_cond_t idle_cv;
  bool closing;
  size_t inflight;                           /* store calls of entries, drains and passes */
  size_t live;                               /* entries */
  qim__commit_entry **keys;                  /* key table */
  size_t key_slots;
  qim__commit_conv **convs;                  /* conversation table */
  size_t conv_slots, conv_count;
  qim__conv_facts *facts;                    /* QIM__FACTS_SLOTS, direct-mapped */

  qim__commit_worker *workers;
  unsigned worker_count;
  _Atomic bool stopping;
  uint64_t next_maintenance_ms;              /* worker 0 only */
  bool maintenance_running;                  /* worker 0 only */

  qim__commit_counters n;
};

#define QIM__COUNT(c, field) atomic_fetch_add_explicit(&(c)->n.field, 1, memory_order_relaxed)

/* ---- commit.c: tables and helpers (c->mu held unless said) -------------------------- */
uint64_t qim__commit_key_hash(const qim_commit_key *k);
int qim__commit_key_equal(const qim_commit_key *a, const qim_commit_key *b);
qim__commit_entry *qim__entry_find(qim_commit *c, const qim_commit_key *k);
qim__commit_entry *qim__entry_new(qim_commit *c, const qim_commit_key *k, qim_tenant_id t,
                                  qim_conversation_id conv);
/* Unlinks and frees the entry, but never its conversation: a handler that may have
 * emptied a conversation calls qim__conv_maybe_free last, so `cv` stays valid while it
 * runs. */
void qim__entry_free(qim_commit *c, qim__commit_entry *e);
qim__commit_conv *qim__conv_find(qim_commit *c, qim_tenant_id t, qim_conversation_id id);
qim__commit_conv *qim__conv_get(qim_commit *c, qim_tenant_id t, qim_conversation_id id);
void qim__conv_maybe_free(qim_commit *c, qim__commit_conv *cv);
void qim__inflight_done(qim_commit *c);    /* one store call finished */
uint64_t qim__now_ms(qim_commit *c);       /* monotonic */
uint64_t qim__wall_ms(qim_commit *c);
void qim__hex16(const uint8_t b[16], char out[33]);
void qim__u128_hex(qim_u128 v, char out[33]);

/* ---- commit_send.c ---------------------------------------------------------------- */
/* Completes a send: result set, internals freed, op->done posted to op->cq. */
void qim__send_finish(qim__commit_send *s, int status, const qim_error *err,
                      const qim_committed_message *ack);

/* ---- commit_drive.c (c->mu held) --------------------------------------------------- */
void qim__entry_drive(qim_commit *c, qim__commit_entry *e);
void qim__conv_kick(qim_commit *c, qim__commit_conv *cv);
void qim__pending_remove(qim__commit_conv *cv, qim__commit_entry *e);
void qim__ready_insert(qim__commit_conv *cv, qim__commit_entry *e);
void qim__ready_remove(qim__commit_conv *cv, qim__commit_entry *e);
/* A step failed with `cause`: backoff, and the waiting sends get `waiter_code`
 * (0 = CommitError::Recoverable{key}). */
void qim__entry_fail(qim_commit *c, qim__commit_entry *e, int cause, const char *step, int waiter_code);
void qim__entry_complete_waiters(qim_commit *c, qim__commit_entry *e, int status);
void qim__entry_resume(qim_commit *c, qim__commit_entry *e);
void qim__entry_reload(qim_commit *c, qim__commit_entry *e);
/* One line for a step of the entry, with its TraceId, conversation, cmid, seq, state. */
void qim__entry_logl(qim_log_level level, const qim__commit_entry *e, const char *event, const char *extra);
#define qim__entry_log(e, event, extra) qim__entry_logl(QIM_LOG_INFO, e, event, extra)

/* ---- commit_recover.c (c->mu held) ------------------------------------------------- */
void qim__conv_request_drain(qim_commit *c, qim__commit_conv *cv);
void qim__conv_drain_step(qim_commit *c, qim__commit_conv *cv);
qim__commit_entry *qim__entry_adopt(qim_commit *c, qim__commit_conv *cv, qim_commit_intent *in,
                                    qim__commit_pass *pass);
enum { QIM__PASS_COMMITTED, QIM__PASS_FAILED, QIM__PASS_BLOCKED };
void qim__pass_release(qim_commit *c, qim__commit_pass *p, int how);
void qim__pass_abandon(qim__commit_pass *p);
void qim__maintenance_tick(qim_commit *c); /* worker 0, c->mu NOT held */

/* ---- commit_rate.c ------------------------------------------------------------------- */
qim__rate *qim__rate_new(uint32_t per_sec, uint32_t burst, uint32_t max_users);
void qim__rate_free(qim__rate *r);
/* 0: a token was taken; 1: limited, *retry_after_ms until the next token. */
int qim__rate_take(qim__rate *r, qim_tenant_id t, qim_user_id u, uint64_t now_ms,
                   uint32_t *retry_after_ms);

#endif
