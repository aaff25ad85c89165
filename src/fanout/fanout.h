/*
 * fanout.h — the outbox consumer: turns each committed message into one GroupDispatch
 * per target mailbox shard (DESIGN.md §1, seed 004 §2).
 *
 * The fanout reads LogStream::Outbox from its committed consumer offset (consumer
 * "fanout"), resolves each envelope's FROZEN audience — Direct{recipients}, or the
 * group's member set at EXACTLY the reserved membership_version — and appends one
 * DispatchLogRecord per target shard to LogStream::MailboxDispatch{shard}, keyed by its
 * DispatchId (idempotent), with the outbox offset committed in the SAME store call
 * (logs.append with has_consumer: one transaction on SQLite, correct by idempotence
 * elsewhere). Nothing but the envelope and the exact snapshot goes into a dispatch, so a
 * replay produces byte-identical records; when an append finds its key already present
 * the stored bytes are compared with the plan, and a difference other than a redacted
 * body is FanoutError::DeterminismViolation: reported, logged, and the consumer stays on
 * that outbox position (it is never skipped).
 *
 * Threads: every call here blocks on store completions, so it runs on a worker thread
 * (the task started by qim_fanout_start, or a test), never on an event loop. One fanout
 * instance consumes the outbox; a second one would only redo idempotent work.
 */
#ifndef QIM_FANOUT_H
#define QIM_FANOUT_H

#include <stdbool.h>

#include "qim/shard.h"
#include "qim/types.h"
#include "store/store.h"

/* The consumer name under which the outbox offset is committed. */
#define QIM_FANOUT_CONSUMER "fanout"
/* custom_type of the Control messages that describe membership changes (docs/groups.md).
 * Their users named in "changes" receive the event besides the frozen snapshot, so a
 * removed member learns of its removal. */
#define QIM_FANOUT_MEMBERSHIP_TYPE "qim.membership"

typedef struct qim_fanout_options {
  qim_shard_config shards;   /* MUST equal the store's (fixed at creation; docs/fanout.md) */
  uint32_t chunk_size;       /* recipients per RecipientChunk; default 256 */
  uint32_t snapshot_page;    /* members per members_at read; default 1000 */
  uint32_t batch;            /* outbox records per task step; default 512 */
  uint32_t max_call_appends; /* dispatch appends per store call; default 512 */
  uint32_t idle_poll_ms;     /* task: fallback poll when the outbox is drained; default 1000 */
  uint32_t retry_ms;         /* task: first backoff after a transient error; default 100 */
  uint32_t trim_every;       /* consumed outbox records between outbox trims; default 512 */
  /* A wake-up hint, called on the store's writer thread once the transaction of a store
   * call that appended dispatches to the log of `shard` with recipients in `lane` has
   * committed (store.h, "Committed": before it is durable; a lane reads its log
   * unconfirmed): once per such (shard, lane) and call. It carries no data — the lane
   * reads its shard's log as always — so the server wires it to qim_mailbox_notify_lane
   * without the stages knowing each other. Must be quick and must not call into the
   * fanout or the store. NULL: none. */
  void (*on_dispatched)(void *ctx, qim_mailbox_shard_id shard, qim_lane_id lane);
  void *hook_ctx;
} qim_fanout_options;

/* ---- pure planning (no store) ------------------------------------------------------------ */

/*
 * Builds the FanoutPlan of one envelope for a resolved recipient list (any order,
 * duplicates allowed): recipients are sorted by user id and grouped by
 * qim_shard_of_user(shards, tenant, user); one GroupDispatch per shard that has any, in
 * ascending shard order, recipients in RecipientChunks of chunk_size (chunk ids 0, 1, …),
 * DispatchId = qim_dispatch_id_make(message_id, shard), source_message / content /
 * trace_id from the envelope's record and intent, inline_body / created_at from its
 * FrozenDeliveryInput, membership_version from a GroupSnapshot audience (0 for Direct).
 * A pure function: same inputs, same plan. out owns everything; free with
 * qim_fanout_plan_free. -EINVAL for chunk_size 0 or an invalid shard config.
 */
int qim_fanout_plan_make(const qim_committed_envelope *env, qim_log_position source,
                         const qim_user_id *recipients, size_t count, const qim_shard_config *shards,
                         uint32_t chunk_size, qim_fanout_plan *out);
void qim_fanout_plan_free(qim_fanout_plan *p);

/*
 * The users named in a membership Control message (content.custom_type
 * QIM_FANOUT_MEMBERSHIP_TYPE, JSON {"changes":[{"user":"usr…"},…]}); *out is NULL and
 * *count 0 for any other content or unparsable JSON (deterministic either way).
 * *out is owned by the caller (qim_free).
 */
void qim_fanout_membership_users(const qim_message_content *c, qim_user_id **out, size_t *count);

/*
 * Redaction, as the determinism check understands it. A dispatch is REDACTED when its
 * content carries no body: payload_or_ciphertext empty and no media_metadata (everything
 * else — ids, recipients, type, custom_type, schema — is kept). Whoever wipes a body from
 * the dispatch log (history's hard delete / recall) writes, with logs.redact, the payload
 * made by qim_fanout_dispatch_redact from the stored one.
 * redact: decode `stored`, drop the body, re-encode into *out (caller frees out->p).
 * -EINVAL if `stored` is not a dispatch encoding.
 */
int qim_fanout_dispatch_redact(const qim_bytes *stored, qim_bytes *out);

/*
 * The determinism check of one replayed append: 0 when `stored` equals `planned`
 * byte for byte, or when either side is redacted and the two are equal once both bodies
 * are dropped; QIM_E_FANOUT_DETERMINISM_VIOLATION (raised) otherwise, including when
 * `stored` does not decode.
 */
int qim_fanout_dispatch_check(const qim_bytes *stored, const qim_bytes *planned);

/* ---- the consumer ------------------------------------------------------------------------- */

typedef struct qim_fanout qim_fanout;

/* `store` is borrowed and must outlive the fanout. Zero option fields take defaults.
 * -EINVAL for an invalid shard config. */
int qim_fanout_new(qim_store *store, const qim_fanout_options *opt, qim_fanout **out);
/* Stops the task if running, then frees. Accepts NULL. */
void qim_fanout_free(qim_fanout *f);

/*
 * Resolves the audience of one envelope through the store (members_at at EXACTLY the
 * frozen version, paged) and builds its plan. Errors:
 *   FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE  the version is above the group's current one
 *                                           or was pruned (store);
 *   FANOUT_DETERMINISM_VIOLATION            the snapshot read disagrees with what reserve
 *                                           froze (member_count or target_shards);
 *   FANOUT_UNAVAILABLE                      the store failed (-errno, store unavailable);
 *   QIM_AGAIN                               the store's queue is full (retry later).
 */
int qim_fanout_plan_envelope(qim_fanout *f, const qim_committed_envelope *env, qim_log_position source,
                             qim_fanout_plan *out);

/*
 * Processes up to `max` outbox records from the committed consumer offset: plans them,
 * appends their dispatches and commits the offset, as few store calls as the batch
 * limits allow (each call: dispatches + offset, atomically). *processed (may be NULL)
 * counts records whose offset was committed by this call. Every trim_every committed
 * records it also trims the outbox below the committed offset (logs.trim; the store keeps
 * the records unfinished commits still read back). A call goes on once it has COMMITTED
 * (store.h, "Committed"): its completion, the confirmation that it is durable, is taken
 * by a later run or by qim_fanout_free (at most 8 are outstanding). Returns 0 (also when the
 * outbox is drained), QIM_AGAIN on backpressure, or an error, in which case the offset
 * stays on the first record not done:
 *   FANOUT_TRANSACTION_FAILED       the combined append + offset call failed, or an earlier
 *                                   run's call committed and was then not confirmed;
 *   FANOUT_DETERMINISM_VIOLATION    a replayed dispatch differs from the stored one, or a
 *                                   snapshot differs from the frozen audience (logged at
 *                                   error level with the message's TraceId; the offset is
 *                                   set back to that record, so every retry stops there);
 *   FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE, FANOUT_UNAVAILABLE  as above;
 *   -EBADMSG                        an outbox record does not decode as an envelope.
 */
int qim_fanout_run_once(qim_fanout *f, uint32_t max, uint32_t *processed);

/*
 * The task: a worker thread that calls run_once until stopped, sleeping when the outbox
 * is drained until qim_fanout_notify wakes it (the server wires the commit's on_outboxed
 * hint to it) or idle_poll_ms passes. That poll is only a safety net: it bounds the delay
 * when no hint arrives — a writer the hint does not reach, such as another process sharing
 * the store — and costs two reads per poll, so it is long enough for an idle server to stay
 * quiet. After transient errors the task backs off (retry_ms doubling to 5 s).
 * DeterminismViolation, MembershipSnapshotUnavailable and -EBADMSG HALT it on that
 * position (status.halted) until it is stopped and started again.
 * start: -EALREADY if running; -errno if the thread cannot start. stop: waits for the
 * current step to finish; idempotent.
 */
int qim_fanout_start(qim_fanout *f);
void qim_fanout_notify(qim_fanout *f);
void qim_fanout_stop(qim_fanout *f);

typedef struct qim_fanout_status {
  bool running;
  bool halted;
  int last_error;          /* 0 or the last error a step returned */
  uint64_t records;        /* outbox records completed (this instance) */
  uint64_t dispatches;     /* dispatch appends that were new */
  uint64_t verified;       /* appends that existed and matched (replays) */
  uint64_t outbox_trim;    /* the outbox's trim point after this instance's last trim */
} qim_fanout_status;
void qim_fanout_get_status(qim_fanout *f, qim_fanout_status *out);

#endif
