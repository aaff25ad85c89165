/*
 * mailbox.h — per-user mailboxes: materialization of the dispatch logs, lane watermarks and
 * retention, shard ownership and readiness, pushes to connected users, pull pages and signed
 * cursors (seed 004 §3, DESIGN.md §1 and §1b, docs/mailbox.md).
 *
 * One qim_mailbox per process. It owns a small worker pool; every (shard, lane) this node owns
 * is a task on that pool (a unit of work, not a thread) that consumes the shard's dispatch log
 * (LogStream::MailboxDispatch{shard}) from its lane watermark:
 *
 *   for each record:  MailboxSeq = qim_mailbox_seq_make(record.epoch, record.offset) — the
 *                     epoch STAMPED IN THE RECORD, so every lane, chunk and replay computes the
 *                     same value; fence records only move the position;
 *   for each chunk:   one AppendMailboxBatch per (dispatch, lane, chunk) holding the event groups
 *                     of this lane's recipients and the DispatchProgress, atomically;
 *   then:             WatermarkAdvance over the dispatches that are complete and durable, and
 *                     only then PushBatches to connected users.
 *
 * Threads: every function may be called from any thread unless it says "blocking" (those wait
 * for workers or the store and must not run on an event loop). Asynchronous operations follow
 * the store's completion model: the call returns 0 and `done` runs exactly once on op->cq, or
 * the call fails synchronously and `done` never runs.
 *
 * Errors are the seed's MailboxMaterializeError (QIM_E_MATERIALIZE_*) for ownership and
 * materialization, MailboxStoreError (QIM_E_MAILBOX_*) for pulls and cursors, -EINVAL for
 * malformed arguments, each documented where it can occur.
 */
#ifndef QIM_MAILBOX_H
#define QIM_MAILBOX_H

#include <stdbool.h>

#include "qim/clock.h"
#include "qim/cq.h"
#include "qim/shard.h"
#include "qim/types.h"
#include "store/store.h"

typedef struct qim_mailbox qim_mailbox;

/* ---- configuration and lifetime -------------------------------------------------------------- */

#define QIM_MAILBOX_CURSOR_KEY_SIZE 32
#define QIM_MAILBOX_KEEP_ALL UINT32_MAX
#define QIM_MAILBOX_KEEP_FOREVER UINT64_MAX

typedef struct qim_mailbox_options {
  qim_shard_config shards;          /* MUST equal the store's (fixed at creation) */
  uint64_t node_id;                 /* owner id written by shard takeovers; non-zero */
  uint8_t cursor_key[QIM_MAILBOX_CURSOR_KEY_SIZE]; /* HMAC-SHA256 key of cursors; not all zero */
  const qim_clock *clock;           /* NULL = system clock; wall time for retention and
                                       completed_at, monotonic time for scheduling */
  uint32_t workers;                 /* worker threads (default 2) */
  uint32_t read_batch;              /* dispatch records read per lane step (default 256) */
  uint32_t step_entries;            /* entries one lane step plans before it writes (32768):
                                       bigger waves amortize the index pages every batch of a
                                       large group touches (bench/fanout.c) */
  uint32_t idle_poll_ms;            /* fallback: a drained lane looks again after this unless
                                       notified sooner (default 5,000; see qim_mailbox_notify) */
  uint32_t retry_ms;                /* first backoff after a transient failure (50; doubles to 5 s) */
  uint32_t not_ready_retry_ms;      /* retry_after_ms of LaneNotReady (default 100) */
  uint32_t retain_count;            /* a lane keeps at most this many dispatch-log records behind
                                       its watermark (default 1,000,000; QIM_MAILBOX_KEEP_ALL: no
                                       count limit) ... */
  uint64_t retain_age_ms;           /* ... and none created longer ago than this (default 30 days;
                                       QIM_MAILBOX_KEEP_FOREVER: no age limit) */
  uint32_t retention_interval_ms;   /* how often a lane trims (default 60,000) */
  uint32_t pull_default_items;      /* max_items 0 means this (default 256) */
  uint32_t pull_max_items;          /* max_items above this are clamped (default 1000) */
  uint32_t pull_default_bytes;      /* max_bytes 0 means this (default 1 MiB) */
  uint32_t pull_max_bytes;          /* max_bytes above this are clamped (default 4 MiB) */
} qim_mailbox_options;

/*
 * Creates the mailbox over `store` (borrowed; it must outlive the mailbox) and starts the
 * workers. Zero option fields take their defaults. No shard is owned until
 * qim_mailbox_shard_acquire. Returns 0, -EINVAL (invalid shard config, node_id 0, all-zero
 * cursor key) or -errno (threads).
 */
int qim_mailbox_new(qim_store *store, const qim_mailbox_options *opt, qim_mailbox **out);

/* Blocking. Stops every lane after its current step, joins the workers and frees everything.
 * A takeover still queued completes with -ESHUTDOWN (its queue must still be drained by its
 * owner); pulls and cursor opens in flight must have completed. Sinks are not called
 * afterwards. NULL ok. */
void qim_mailbox_free(qim_mailbox *m);

/* ---- shard ownership and readiness ------------------------------------------------------------ */

/* An asynchronous takeover. Caller-owned; fields marked private are the mailbox's. */
typedef struct qim_mailbox_acquire_op {
  qim_cq *cq;                                      /* where `done` runs */
  void (*done)(struct qim_mailbox_acquire_op *op); /* may free the op */
  void *data;                                      /* caller's */
  qim_mailbox_shard_id shard;                      /* in */
  int status;                                      /* out: 0 or an error below */
  qim_shard_takeover out;                          /* out: {shard, the new epoch} */
  qim_log_position fence;                          /* out: where the fence record went */
  qim_cq_item item_;                               /* private */
  struct qim__mb_job *job_;                        /* private */
} qim_mailbox_acquire_op;

/*
 * ShardTakeover{shard, epoch + 1}: the store bumps the shard's epoch, records this node as
 * owner and appends a fence record to the shard's dispatch log (so every later record carries
 * the new epoch and every new MailboxSeq is above every old one). Then each lane reads its
 * watermark and replays the log from there; until a lane has replayed through the fence the
 * shard answers LaneNotReady (qim_mailbox_shard_readiness). A previous owner elsewhere is
 * fenced by the store from that moment (its writes fail with ShardNotOwned).
 * Acquiring a shard this node already owns restarts its lanes under a new epoch (the way to
 * resume a lane halted on a record that has since been repaired).
 * Synchronous: -EINVAL (shard out of range), -EALREADY (a takeover of it is in progress).
 * Asynchronous status: MATERIALIZE_UNAVAILABLE (the store failed, or the shard's epoch is
 * exhausted at 65535: a documented migration re-creates the shard).
 */
int qim_mailbox_shard_acquire(qim_mailbox *m, qim_mailbox_acquire_op *op);
int qim_mailbox_shard_acquire_sync(qim_mailbox *m, qim_mailbox_shard_id shard, qim_shard_takeover *out);

/* Blocking. Stops this node's lanes of `shard` after their current step (no store change: the
 * next owner's takeover fences us). Releasing a shard not owned is a no-op. */
void qim_mailbox_shard_release(qim_mailbox *m, qim_mailbox_shard_id shard);

/*
 * ShardReadiness of a shard on this node, from memory (never blocks):
 *   0 and out->kind READY {replay_from: the log position replay started from} when every lane
 *     has replayed through the takeover's fence;
 *   0 and out->kind LANE_NOT_READY {lane, retry_after_ms} for the first lane still replaying;
 *   MATERIALIZE_READINESS_FAILED when a lane cannot complete its replay (the log was trimmed
 *     past its replay point: PositionUnavailable; or a record in the replay is corrupt);
 *   MATERIALIZE_SHARD_NOT_OWNED when this node does not own the shard (never acquired,
 *     released, or fenced by a newer owner).
 * `err` (may be NULL) receives the error payload.
 */
int qim_mailbox_shard_readiness(qim_mailbox *m, qim_mailbox_shard_id shard, qim_shard_readiness *out,
                                qim_error *err);

/* Blocking helper: polls readiness until READY, an error, or timeout_ms (then returns the last
 * LaneNotReady as MATERIALIZE_LANE_NOT_READY with its payload in err). */
int qim_mailbox_shard_wait_ready(qim_mailbox *m, qim_mailbox_shard_id shard, int timeout_ms,
                                 qim_shard_readiness *out, qim_error *err);

/* ---- stages, status and test controls ------------------------------------------------------------ */

/* Wake-up hints. A lane sleeps while its shard's dispatch log has nothing new; these wake it
 * at once — the lanes of `shard`, or one lane — e.g. after the fanout made dispatches durable
 * in that log (the server wires the fanout's on_dispatched hint to notify_lane). A hint
 * carries no data: the lane reads the log from its position as always, so a spurious hint
 * costs one read and a missed one only delay. Lanes also look every idle_poll_ms, a safety
 * net for writers the hints do not reach (another process sharing the store), long enough
 * that an idle server stays quiet; a lane not woken because a dispatch has no recipients in
 * it moves its watermark over that record at its next step. Unknown or unowned shards and
 * lanes out of range are ignored. Any thread; never blocks on a step. */
void qim_mailbox_notify(qim_mailbox *m, qim_mailbox_shard_id shard);
void qim_mailbox_notify_lane(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane);

typedef enum qim_mailbox_stage {
  QIM_MAILBOX_STAGE_MATERIALIZE = 0, /* every lane stops before its next step */
  QIM_MAILBOX_STAGE_PUSH = 1,        /* lanes keep the pushes of their last step and wait */
} qim_mailbox_stage;

/* Pause / resume a stage (tests; e.g. the gateway checks no {data} arrives while
 * materialization is paused). Pausing takes effect at each lane's next step boundary. */
void qim_mailbox_pause(qim_mailbox *m, qim_mailbox_stage stage);
void qim_mailbox_resume(qim_mailbox *m, qim_mailbox_stage stage);
/* The same for one lane (stalling one lane while the others progress). -EINVAL if out of range.
 * lane_pause returns once no step of the lane runs (a step that started before it could
 * otherwise still materialize what is appended after it); never call it from a push sink. */
int qim_mailbox_lane_pause(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane);
int qim_mailbox_lane_resume(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane);

typedef enum qim_mailbox_lane_state {
  QIM_MAILBOX_LANE_IDLE = 0,     /* not owned here */
  QIM_MAILBOX_LANE_RUNNING = 1,  /* replaying or caught up (see `ready`) */
  QIM_MAILBOX_LANE_HALTED = 2,   /* stopped on a record it cannot materialize (last_error) */
  QIM_MAILBOX_LANE_FAILED = 3,   /* replay cannot complete (ReadinessFailed) */
  QIM_MAILBOX_LANE_FENCED = 4,   /* a newer owner took the shard (ShardNotOwned) */
} qim_mailbox_lane_state;

typedef struct qim_mailbox_lane_status {
  qim_mailbox_lane_state state;
  bool ready;                    /* replayed through the takeover's fence */
  bool paused;
  qim_shard_epoch owner_epoch;   /* the epoch this node writes with */
  uint64_t next_offset;          /* next dispatch log offset to read */
  qim_lane_watermark watermark;  /* as last written by this node */
  int last_error;                /* 0 or the last failure of a step (QIM_E_MATERIALIZE_*) */
  uint64_t dispatches, batches, entries, pushes, retries, trimmed;
} qim_mailbox_lane_status;

/* A snapshot of one lane. -EINVAL if out of range. */
int qim_mailbox_lane_status_get(qim_mailbox *m, qim_mailbox_shard_id shard, qim_lane_id lane,
                                qim_mailbox_lane_status *out);

/* Blocking test helper: waits until every running, unpaused lane has looked at its log after
 * this call began and found nothing new (or stopped). 0, or -ETIMEDOUT. */
int qim_mailbox_drain(qim_mailbox *m, int timeout_ms);

/* Makes every owned lane run its retention pass at its next step (instead of waiting for
 * retention_interval_ms); combine with qim_mailbox_drain to wait for it. */
void qim_mailbox_retention_kick(qim_mailbox *m);

/* ---- push ------------------------------------------------------------------------------------------ */

/*
 * A sink receives the PushBatches of one ConnectionShardId: the entries (in mailbox order per
 * user) of users routed to it, one batch per (dispatch, connection shard), with the dispatch's
 * TraceId. It runs on a mailbox worker thread and must be quick: the gateway posts the batch to
 * its loop. The sink OWNS the batch: release it with qim_mailbox_push_batch_free (never free
 * entries one by one: their bodies are shared by every batch of the dispatch). A sink must not
 * call qim_mailbox_push_unregister.
 */
typedef void (*qim_mailbox_push_sink)(qim_push_batch *batch, void *ctx);

/* -EEXIST if the connection shard has a sink. */
int qim_mailbox_push_register(qim_mailbox *m, qim_connection_shard_id cs, qim_mailbox_push_sink sink,
                              void *ctx);
/* Blocking only while a sink call is in progress: after it returns the sink is never called
 * again. Unknown connection shards are ignored. */
void qim_mailbox_push_unregister(qim_mailbox *m, qim_connection_shard_id cs);
void qim_mailbox_push_batch_free(qim_push_batch *batch);

/* Online routes, reference counted per (user, connection shard): one add per session that
 * wants pushes, one remove when it goes. A user may be on several connection shards. remove
 * returns -ENOENT when there was no such route. */
void qim_mailbox_route_add(qim_mailbox *m, qim_tenant_id tenant, qim_user_id user, qim_connection_shard_id cs);
int qim_mailbox_route_remove(qim_mailbox *m, qim_tenant_id tenant, qim_user_id user,
                             qim_connection_shard_id cs);

/* ---- cursors ---------------------------------------------------------------------------------------- */

/*
 * A MailboxCursor travels as a token: base64url without padding of
 *   u8 version (1) | u128 tenant | u128 user | u128 device | u32 shard | u8 lane | u16 epoch |
 *   u64 last_applied_seq | 32-byte signed_token
 * (big-endian; 96 bytes, 128 characters). signed_token = HMAC-SHA256(key,
 * "qim.mailbox-cursor.v1\0" || the 64 bytes before it). See docs/mailbox.md.
 */
#define QIM_MAILBOX_CURSOR_TOKEN_LEN 128
#define QIM_MAILBOX_CURSOR_TOKEN_CAP (QIM_MAILBOX_CURSOR_TOKEN_LEN + 1)

/* Signs identity + seq with `key` into *out (out->signed_token is allocated: free with
 * qim_mailbox_cursor_free). */
void qim_mailbox_cursor_sign(const uint8_t key[QIM_MAILBOX_CURSOR_KEY_SIZE], const qim_cursor_identity *id,
                             qim_mailbox_seq last_applied_seq, qim_mailbox_cursor *out);
/* The token of a signed cursor; -EINVAL if its signed_token is not 32 bytes, -ENOSPC if cap is
 * below QIM_MAILBOX_CURSOR_TOKEN_CAP. Returns the length otherwise. */
int qim_mailbox_cursor_format(const qim_mailbox_cursor *c, char *out, size_t cap);
/* Parses a token (not its signature): MAILBOX_CURSOR_INVALID for anything malformed. */
int qim_mailbox_cursor_parse(const char *token, size_t len, qim_mailbox_cursor *out);
/* MAILBOX_CURSOR_INVALID unless the signature is `key`'s and the identity is the actor's own
 * (tenant, user, device) on the user's mailbox shard and lane under `shards`. */
int qim_mailbox_cursor_verify(const uint8_t key[QIM_MAILBOX_CURSOR_KEY_SIZE], const qim_shard_config *shards,
                              const qim_mailbox_cursor *c, const qim_authenticated_actor *actor);
void qim_mailbox_cursor_free(qim_mailbox_cursor *c);

typedef enum qim_mailbox_cursor_from {
  QIM_MAILBOX_CURSOR_FROM_NOW = 0,   /* at the lane watermark: only what comes next (rebuild) */
  QIM_MAILBOX_CURSOR_FROM_FLOOR = 1, /* at the trim floor: everything the mailbox still holds */
} qim_mailbox_cursor_from;

/* Opening a cursor for a device that has none (or after CursorExpired → rebuild). */
typedef struct qim_mailbox_cursor_op {
  qim_cq *cq;
  void (*done)(struct qim_mailbox_cursor_op *op);
  void *data;
  qim_authenticated_actor actor;     /* in */
  qim_mailbox_cursor_from from;      /* in */
  int status;                        /* out: 0, MATERIALIZE_LANE_NOT_READY, MAILBOX_UNAVAILABLE */
  qim_error error;                   /* out: payload */
  qim_mailbox_cursor cursor;         /* out (status 0): owned; qim_mailbox_cursor_free */
  qim_store_watermark_get_req wm_;   /* private */
  qim_mailbox *m_;                   /* private */
} qim_mailbox_cursor_op;

/* Fails synchronously (op->status set, done never runs) with LaneNotReady / ReadinessFailed,
 * MAILBOX_UNAVAILABLE when the store refuses, -EINVAL without cq / done. */
int qim_mailbox_cursor_open(qim_mailbox *m, qim_mailbox_cursor_op *op);
int qim_mailbox_cursor_open_sync(qim_mailbox *m, const qim_authenticated_actor *actor,
                                 qim_mailbox_cursor_from from, qim_mailbox_cursor *out, qim_error *err);

/* ---- pull -------------------------------------------------------------------------------------------- */

/*
 * MailboxPullRequest → MailboxPage. The entries of the actor's mailbox after
 * cursor.last_applied_seq (range.after_seq is ignored: the signed value wins) up to
 * min(range.up_to_seq, lane watermark) (up_to_seq 0 = the watermark), within max_items /
 * max_bytes (0 = defaults; clamped), in (seq, ordinal) order, never splitting an event group.
 * covered_through_seq covers only complete groups: the last returned group's seq when
 * has_more, else the bound itself — also when the user has no entries in it.
 * next_cursor is signed at covered_through_seq.
 * Errors (status; payload in error):
 *   MAILBOX_CURSOR_INVALID      bad signature, or not the actor's (tenant/user/device/shard/lane)
 *   MAILBOX_CURSOR_EXPIRED      {trim_watermark = the lane floor}: entries after the cursor were
 *                               trimmed (last_applied_seq + 1 < floor), or the cursor is ahead of
 *                               what the shard holds (above the watermark, or its epoch's record
 *                               at that offset is gone) — the client rebuilds
 *   MAILBOX_GROUP_TOO_LARGE     the next event group alone exceeds max_items or max_bytes
 *   MAILBOX_CORRUPT_ENTRY       a stored entry does not decode or is not this user's
 *   MAILBOX_INVARIANT_VIOLATION the store returned entries out of range, order or split
 *   MAILBOX_UNAVAILABLE         the store failed
 *   MATERIALIZE_LANE_NOT_READY  {lane, retry_after_ms}: this node owns the shard and the lane is
 *                               still replaying after a takeover
 *   MATERIALIZE_READINESS_FAILED the lane's replay cannot complete here
 *   -EINVAL                     range.tenant_id/user_id are not the actor's, or no cq / done
 * The checks that need no store (cursor, readiness, arguments) and a refused store submission
 * fail synchronously: the call returns the error with op->status / op->error set, and `done`
 * never runs. Everything else arrives in `done`.
 */
typedef struct qim_mailbox_pull_op {
  qim_cq *cq;
  void (*done)(struct qim_mailbox_pull_op *op);
  void *data;
  qim_mailbox_pull_request request;  /* in; borrowed until done */
  int status;                        /* out */
  qim_error error;                   /* out */
  qim_mailbox_page page;             /* out (status 0): owned; qim_mailbox_page_free */
  qim_mailbox_cursor next_cursor;    /* out (status 0): owned; qim_mailbox_cursor_free */
  struct qim__mb_pull *priv_;        /* private */
} qim_mailbox_pull_op;

int qim_mailbox_pull(qim_mailbox *m, qim_mailbox_pull_op *op);
/* Blocking helper: returns the status; on 0 *page and *next are owned by the caller. */
int qim_mailbox_pull_sync(qim_mailbox *m, const qim_mailbox_pull_request *req, qim_mailbox_page *page,
                          qim_mailbox_cursor *next, qim_error *err);

/* ---- events (pure) ------------------------------------------------------------------------------------ */

/* custom_type of the Control messages that describe membership changes (docs/groups.md). */
#define QIM_MAILBOX_MEMBERSHIP_TYPE "qim.membership"

/* The EventType of a message's first entry: Membership for a Control with custom_type
 * QIM_MAILBOX_MEMBERSHIP_TYPE, Control for any other Control, Message otherwise. */
qim_event_type qim_mailbox_event_type(const qim_message_content *c);

/* The users a message mentions (Drafty "MN" entities whose data.val is a "usr…" name; see
 * docs/mailbox.md), sorted and unique, at most QIM_MAILBOX_MENTIONS_MAX; *out NULL when none.
 * A pure function of the content (replays agree). Caller frees *out with qim_free. */
#define QIM_MAILBOX_MENTIONS_MAX 64
void qim_mailbox_mentions(const qim_message_content *c, qim_user_id **out, size_t *count);

#endif
