/*
 * commit.h — the message commit: an AuthenticatedSend becomes a durable, ordered,
 * exactly-once message (seed 004 §2, DESIGN.md §1, docs/commit.md).
 *
 * One qim_commit serves every gateway loop of a process. A send is checked (cmid,
 * size, rate limit, clock, write permission, references), reserved under its CommitKey
 * (tenant, sender, client_message_id) — which fixes the seq, the canonical record and
 * the frozen delivery input once and for all — and then driven
 *     Reserved → Recorded (history row) → Outboxed (outbox log) → Committed.
 * The caller's completion runs only after Committed: an ACK is durable.
 *
 * Order: a message enters the outbox only after every lower (seq, order) intent of its
 * conversation has, including intents recovered after a crash (see docs/commit.md).
 * Idempotence: a retried key never gets a second seq — Fresh the first time, Existing
 * (resumed) while in flight, Committed (the ACK replayed) afterwards, and
 * ClientMessageIdReused when the retry's content differs. Committed keys are
 * remembered for `dedupe_window_ms` (default 7 days).
 *
 * Threads: every function may be called from any thread. Completions run on the
 * caller's qim_cq (an event loop's queue, or a blocking queue drained by a worker);
 * the commit's own steps run on its worker threads. The commit talks to storage only
 * through store.h, so it runs unchanged on any conformant backend.
 */
#ifndef QIM_COMMIT_H
#define QIM_COMMIT_H

#include "qim/clock.h"
#include "qim/cq.h"
#include "qim/types.h"
#include "store/store.h"

typedef struct qim_commit qim_commit;

/* ---- configuration ------------------------------------------------------------- */

typedef struct qim_commit_config {
  uint32_t max_message_size;     /* payload + media metadata + custom type; 128 KiB → MessageTooLarge */
  uint32_t inline_body_max;      /* bodies up to this many bytes are inlined into mailboxes (4 KiB) */
  uint32_t max_mentions;         /* mention_targets per message (64) → InvalidReference beyond */
  uint64_t dedupe_window_ms;     /* committed keys remembered this long (7 days) */
  uint32_t rate_per_sec;         /* per-user token refill; 0 disables the rate limit (20) */
  uint32_t rate_burst;           /* bucket size (40) */
  uint32_t rate_max_users;       /* buckets kept before idle (full) ones are swept (65536) */
  uint64_t clock_tolerance_ms;   /* for the id generator the commit makes when given none (1000) */
  uint32_t node_id;              /* WriterId of that generator (node_id << 8 | 0) */
  qim_retention_class retention_class;  /* of client messages (Default) */
  uint32_t workers;              /* threads driving steps after reserve (1) */
  uint32_t maintenance_interval_ms;     /* recover + forget period, first pass at start; 0 = only explicit calls (0) */
  uint64_t recovery_grace_ms;    /* adopt orphan intents older than this; 0 = all: one node (0) */
  uint32_t recovery_page;        /* intents per listing (1024) */
  uint32_t retry_base_ms, retry_max_ms; /* backoff of a failing step: base·2^n capped (100, 30000) */
  bool verify_outbox;            /* read each publication back: envelope.record == intent.record (true) */
  uint32_t outbox_pipeline;      /* OUTBOXED steps of one conversation in flight at once (32) */
  /* Ask the store to commit a fresh send in its reserve transaction when nothing earlier in
   * its conversation is unpublished (intents.reserve `commit`): one durable transaction
   * instead of four. Off: every send takes the staged steps (true) */
  bool commit_in_reserve;
  /* A wake-up hint, called on the store's writer thread (the store's `committed` hint,
   * store.h) each time the transaction that put an intent's record into the outbox has
   * committed — before it is durable and before the ACK, so the outbox's consumer, which
   * reads unconfirmed, starts at once instead of after the sync or at its next poll. It
   * carries no data: the consumer reads the outbox log as always. Must be quick and must not
   * call into the commit or the store. NULL: none. */
  void (*on_outboxed)(void *ctx);
  void *hook_ctx;
} qim_commit_config;

void qim_commit_config_default(qim_commit_config *cfg);

/*
 * Creates a commit over `store` (borrowed; must outlive the commit). `clock` (borrowed)
 * drives the rate limit, backoff and the dedupe window; `ids` (borrowed, thread-safe)
 * makes MessageIds / LastActivityIds — NULL: the commit makes its own over `clock` with
 * cfg->node_id and cfg->clock_tolerance_ms. `cfg` NULL = defaults. Starts cfg->workers
 * threads. Returns 0, -EINVAL (bad config) or -errno.
 */
int qim_commit_create(qim_store *store, const qim_clock *clock, qim_id_gen *ids,
                      const qim_commit_config *cfg, qim_commit **out);

/*
 * Stops the workers after the store calls they have in flight complete, and frees the
 * commit. Every operation a caller started must have completed first. Intents not yet
 * Committed stay durable in the store and are finished by the next recovery. NULL ok.
 */
void qim_commit_destroy(qim_commit *c);

/* ---- sending ------------------------------------------------------------------- */

typedef struct qim_commit_result {
  int status;                      /* 0, or a CommitError code (QIM_E_COMMIT_*) / -errno */
  qim_error error;                 /* payload: retry_after_ms (RateLimited), key (Recoverable) */
  qim_reserve_result_kind reserve; /* FRESH: this call reserved the key; EXISTING: it resumed an
                                      in-flight intent; COMMITTED: the ACK was replayed */
  qim_committed_message ack;       /* status 0: what the ACK carries (RequestId is the caller's) */
} qim_commit_result;

/* One send or control commit. The caller owns it; fields marked private are the commit's. */
typedef struct qim_commit_op {
  qim_cq *cq;                          /* where `done` runs */
  void (*done)(struct qim_commit_op *op); /* completion; may free the op */
  void *data;                          /* caller's */
  qim_commit_result result;            /* out */
  qim_cq_item item_;                   /* private */
  struct qim__commit_send *priv_;      /* private */
} qim_commit_op;

/*
 * Commits a client message. `s` is borrowed until `done` runs. Returns 0 when accepted
 * (done runs exactly once, with op->result set), or refuses synchronously with
 * op->result.status set and done never running:
 *   COMMIT_INVALID_CLIENT_MESSAGE_ID  zero cmid
 *   COMMIT_MESSAGE_TOO_LARGE          body over max_message_size      (extension, ctrl 413)
 *   COMMIT_INVALID_REFERENCE          too many mentions                (extension)
 *   COMMIT_PERMISSION_DENIED          a client may not send a Control message
 *   COMMIT_RATE_LIMITED               error.retry_after_ms until a token is back
 *   COMMIT_CLOCK_UNSAFE               the clock stepped back past the tolerance
 *   COMMIT_CLIENT_MESSAGE_ID_REUSED   the key is in flight here with other content (ctrl 409)
 *   -ESHUTDOWN                        the commit is closing
 *   -EINVAL                           op has no cq or done
 * Asynchronous outcomes (result.status): 0 with the ACK after Committed;
 * COMMIT_PERMISSION_DENIED (not a current member / no W mode / unknown or deleted
 * conversation); COMMIT_INVALID_REFERENCE (reply_to seq missing or not visible to the
 * sender, a mention target not a member); COMMIT_CLIENT_MESSAGE_ID_REUSED (the store
 * holds the key with other content or conversation); COMMIT_RECOVERABLE with
 * error.key when a step after reserve failed (the intent is durable and recovery or a
 * retry with the same cmid finishes it); COMMIT_UNAVAILABLE (the store refused or
 * failed before reserve); COMMIT_INVARIANT_VIOLATION (the outbox envelope's record
 * differs from the intent's).
 * The reserve of a fresh key also moves the sender's read and recv up to the message's
 * seq (the sender has read what it sent; store.h, `sender_read`).
 */
int qim_commit_send(qim_commit *c, const qim_authenticated_send *s, qim_commit_op *op);

/*
 * A change made by an internal caller (edit, delete, recall, membership change): a
 * Control message that consumes no seq (it takes the conversation's current seq as its
 * position) and travels the same path. The caller builds the content and authorizes
 * the change; `client_message_id` must be derived from the change so that a retry is
 * idempotent. No rate limit, permission or reference checks. `ctl` is borrowed until
 * done. Errors as for qim_commit_send; -EINVAL when content is not MessageType::Control.
 */
typedef struct qim_commit_control {
  qim_authenticated_actor actor;        /* whom the change is attributed to (a current member) */
  qim_conversation_id conversation_id;
  qim_client_message_id client_message_id;
  qim_message_content content;          /* message_type == QIM_MESSAGE_TYPE_CONTROL */
  qim_retention_class retention_class;
  qim_trace_id trace_id;
  /* NULL: the conversation's audience (its two users, or the group snapshot at reserve).
   * Otherwise a DIRECT audience frozen as given — e.g. only the actor's own devices learn
   * of its read position (history). Borrowed until done; -EINVAL when it is not DIRECT or
   * has no recipients. */
  const qim_delivery_audience *audience;
} qim_commit_control;

int qim_commit_send_control(qim_commit *c, const qim_commit_control *ctl, qim_commit_op *op);

/* Blocking helpers for tests and tools (never on an event loop): return result.status. */
int qim_commit_send_sync(qim_commit *c, const qim_authenticated_send *s, qim_commit_result *out);
int qim_commit_send_control_sync(qim_commit *c, const qim_commit_control *ctl, qim_commit_result *out);

/* ---- loading a key ------------------------------------------------------------- */

typedef struct qim_commit_load_op {
  qim_cq *cq;
  void (*done)(struct qim_commit_load_op *op);
  void *data;
  qim_commit_key key;                  /* in */
  int status;                          /* out: 0, MESSAGE_STORE_COMMIT_NOT_FOUND, or an error */
  qim_loaded_commit out;               /* status 0: IN_FLIGHT (owns intent) or COMMITTED;
                                          free with qim_commit_intent_free(&out.intent) */
  qim_store_intent_load_req req_;      /* private */
} qim_commit_load_op;

/* LoadedCommit (InFlight / Committed) or CommitNotFound. Returns 0 or a submit error
 * (done never runs then). */
int qim_commit_load(qim_commit *c, qim_commit_load_op *op);
int qim_commit_load_sync(qim_commit *c, const qim_commit_key *key, qim_loaded_commit *out);

/* ---- recovery and the dedupe window ----------------------------------------------- */

typedef struct qim_commit_task {
  qim_cq *cq;
  void (*done)(struct qim_commit_task *t);
  void *data;
  int status;                 /* out: 0 or the listing / forget error */
  uint64_t listed;            /* in-flight intents seen */
  uint64_t adopted;           /* orphans this pass took over (not driven by a live send) */
  uint64_t committed;         /* of those, driven to Committed */
  uint64_t failed;            /* of those, whose step failed (retried later with backoff) */
  uint64_t blocked;           /* of those, waiting behind one that failed (never skipped) */
  uint64_t retried;           /* failed intents whose backoff had passed, restarted */
  uint64_t forgotten;         /* forget: committed keys dropped */
  qim_cq_item item_;          /* private */
  struct qim__commit_pass *pass_; /* private */
} qim_commit_task;

/*
 * Recovery: restarts local intents whose backoff passed, then lists every intent not
 * Committed (store intents.list_in_flight) and drives each orphan — older than
 * recovery_grace_ms, not driven by a live send — to Committed from what it holds, in
 * (seq, order) order per conversation. Completes when every adopted intent reached
 * Committed, failed, or waits behind one that failed (a failed one keeps its
 * conversation waiting and is retried with backoff by later passes; it is never
 * skipped). Returns 0 or a submit error.
 */
int qim_commit_recover(qim_commit *c, qim_commit_task *t);
int qim_commit_recover_sync(qim_commit *c, qim_commit_task *out);

/* The dedupe window: forgets committed keys committed before now − dedupe_window_ms. */
int qim_commit_forget(qim_commit *c, qim_commit_task *t);
int qim_commit_forget_sync(qim_commit *c, qim_commit_task *out);

/* ---- counters ---------------------------------------------------------------------- */

typedef struct qim_commit_stats {
  uint64_t sends, acks, fresh, existing, replayed, refused;
  uint64_t step_failures, step_retries, order_conflicts, drains, adopted, recovered;
  uint64_t invariant_violations, forgotten, rate_limited;
  uint64_t committed_in_reserve; /* of `fresh`: committed in the reserve's own transaction */
  uint64_t live_entries;      /* intents driven right now */
} qim_commit_stats;

void qim_commit_get_stats(qim_commit *c, qim_commit_stats *out);

#endif
