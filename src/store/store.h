/*
 * store.h — the storage interface every qim stage reads and writes through.
 *
 * One struct of function pointers (qim_store_vtable), grouped by domain, implemented by
 * every backend (sqlite: the embedded default; redis: later). All calls are
 * ASYNCHRONOUS: `fn(store, req)` validates and queues the request and returns at once:
 *   0        accepted: req->req.done(req) will run exactly once, on the thread that owns
 *            req->req.cq (an event loop or a worker draining a blocking queue), after
 *            req->req.status and the outputs are set;
 *   <0       refused synchronously (-EAGAIN: the backend's bounded queue is full —
 *            backpressure; -EINVAL: malformed request; -ESHUTDOWN: store closing); the
 *            callback never runs.
 * No event loop ever waits for an fsync. QIM_STORE_SYNC() is the blocking wrapper for
 * tools and tests. A read submitted with a blocking completion queue (a worker that will
 * wait for it) may run on the calling thread inside the call; its completion is still
 * posted to the queue, never run inside the call.
 *
 * Outputs: every pointer/array output is allocated with qim_malloc and owned by the
 * caller after completion; free it with the matching free function in record.h or
 * below (qim_store_*_free). Inputs are borrowed until `done` runs. A failed call owns no
 * outputs (pointers NULL, counts 0).
 *
 * Conventions every backend keeps (the conformance vectors check them):
 *   - A `limit` / `max` / `max_items` of 0 is -EINVAL: every read is bounded by its caller.
 *   - u64 values are at most 2^63-1 where the store keeps or compares them (sqlite
 *     integers are signed); larger inputs are taken as 2^63-1, so UINT64_MAX as an upper
 *     bound means "no bound".
 *   - Storage failures come back in the caller's domain: accounts -errno; conversations
 *     GROUP_UNAVAILABLE (members_at: FANOUT_UNAVAILABLE); intents and history
 *     MESSAGE_STORE_UNAVAILABLE; logs COMMIT_LOG_UNAVAILABLE, or TRANSACTION_ABORTED when the
 *     transaction carrying the write was lost, PUBLICATION_NOT_DURABLE when its commit could
 *     not be confirmed; mailboxes MATERIALIZE_UNAVAILABLE (range: MAILBOX_UNAVAILABLE).
 *   - An id outside the shard configuration (shard >= shard_count, lane >= lanes_per_shard)
 *     is -EINVAL.
 *
 * Redis Cluster shape (no cross-slot transactions): every call that is atomic touches
 * keys of ONE slot — a conversation ({conv} hash tag), a log stream, a user's mailbox
 * or a (shard, lane) — except where a call says "atomic where the backend can" (then it
 * is correct by idempotence and ordering alone). Durability: a completed write is
 * durable, and so is everything a completed read saw (sqlite: the syncer's WAL sync after the
 * COMMIT, sqlite_sync.c; redis: appendfsync always / WAIT) — unless the read was submitted
 * `unconfirmed`: then it is answered as soon as it ran, and may have seen writes whose sync
 * is still under way. That is for a pipeline stage only, one whose every use of the answer
 * is a later write to this same store (the fanout reading the outbox, a lane reading its
 * dispatch log): a backend makes a write durable only after every write before it (sqlite:
 * one WAL, written and synced in order), so a crash may lose what the read saw together
 * with what was derived from it, never the derived write alone. Nothing read this way may
 * reach a client before a write of the caller has completed after it.
 *
 * Committed: a write may carry `committed`, a hint the backend runs once the transaction
 * carrying it has committed with the write's status 0, before that transaction is durable
 * and before `done` (sqlite: on the writer thread, between its COMMIT and the sync). It is
 * for waking the next pipeline stage, which then reads `unconfirmed` what was just written
 * instead of waiting out the sync first: one sync can then cover a message's hops in a row
 * (the commit's outbox record, the fanout's dispatch, the lane's entries), where each hop
 * waited for its own. It must be quick and must not call the store; it may read the
 * request's outputs (set by then) but not free it. Every backend has the moment (redis: the
 * write applied, before its fsync or WAIT), and runs it exactly once per such write.
 */
#ifndef QIM_STORE_H
#define QIM_STORE_H

#include "qim/cq.h"
#include "qim/shard.h"
#include "qim/types.h"

typedef struct qim_store qim_store;
typedef struct qim_store_vtable qim_store_vtable;
typedef struct qim_store_stats qim_store_stats;

/* Every backend instance starts with this header. */
struct qim_store {
  const qim_store_vtable *vt;
};

/* ---- requests ------------------------------------------------------------------ */

/* Common head of every request; embed it as the FIRST member named `req`. */
typedef struct qim_store_req {
  qim_cq_item item;                         /* private: completion delivery */
  qim_cq *cq;                               /* where `done` runs */
  void (*done)(struct qim_store_req *req);  /* completion; may free the request */
  void *data;                               /* caller's */
  int status;                               /* out: 0 or an error (err.h) */
  qim_error error;                          /* out: payload of `status` when it has one */
  bool unconfirmed;                         /* in, reads: answer before what it saw is synced
                                               (see "Durability" above); writes ignore it */
  void (*committed)(struct qim_store_req *req); /* in, writes, optional: see "Committed" */
  void *committed_ctx;                      /* in: the hint's own (wrappers may take `data`) */
  struct qim_store_req *next_;              /* private to the backend */
  int op_;                                  /* private to the backend */
  void *sync_;                              /* private to QIM_STORE_SYNC */
} qim_store_req;

/* ---- records the store keeps beyond the seed types -------------------------------- */

typedef enum qim_conversation_kind {
  QIM_CONVERSATION_DIRECT = 0,
  QIM_CONVERSATION_GROUP = 1,
} qim_conversation_kind;

/* Access mode bits, Tinode's order JRWPASDO (PROTOCOL.md §4). */
enum {
  QIM_MODE_J = 1, QIM_MODE_R = 2, QIM_MODE_W = 4, QIM_MODE_P = 8,
  QIM_MODE_A = 16, QIM_MODE_S = 32, QIM_MODE_D = 64, QIM_MODE_O = 128,
};

typedef struct qim_store_user {
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  char *public_json;     /* NULL = none */
  char *private_json;    /* NULL = none */
  qim_timestamp_millis created_at, updated_at;
  uint64_t token_epoch;  /* tokens carrying a lower epoch are revoked */
} qim_store_user;

typedef struct qim_store_credential {
  qim_tenant_id tenant_id;
  char *login;           /* unique per tenant */
  qim_user_id user_id;
  char *secret_hash;     /* argon2id string (libsodium crypto_pwhash_str) */
} qim_store_credential;

typedef struct qim_store_conversation {
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  qim_conversation_kind kind;
  qim_user_id owner_id;                  /* GROUP */
  qim_user_id direct_users[2];           /* DIRECT, lower id first */
  qim_conversation_seq latest_seq;
  uint64_t delid;                        /* delete-operation counter */
  qim_last_activity_id last_activity_id;
  qim_timestamp_millis created_at, updated_at, touched_at;
  char *public_json;                     /* NULL = none */
  uint32_t default_mode_auth, default_mode_anon;
  qim_membership_version membership_version;
  uint32_t member_count;                 /* current members */
  bool deleted;
  qim_conversation_seq retention_floor;  /* highest seq removed by retention (history.expire) */
} qim_store_conversation;

/* A member row as it is NOW (the latest version). */
typedef struct qim_store_member {
  qim_conversation_id conversation_id;
  qim_user_id user_id;
  qim_group_role role;
  uint32_t mode_want, mode_given;        /* effective = want & given */
  qim_conversation_seq joined_at;        /* sees seqs in (joined_at, left_at] */
  bool has_left_at;
  qim_conversation_seq left_at;
  bool banned;
  qim_conversation_seq read_seq, recv_seq;
  uint64_t clear_delid;                  /* this member's `clear` */
  char *private_json;
  qim_timestamp_millis updated_at;
} qim_store_member;

typedef enum qim_store_member_op {
  QIM_STORE_MEMBER_ADD = 0,      /* AlreadyExists if a current member; a returning member
                                    gets a new joined_at (read/recv restart there) */
  QIM_STORE_MEMBER_REMOVE = 1,   /* NotFound if not a current member; sets left_at */
  QIM_STORE_MEMBER_BAN = 2,      /* remove + banned (a later ADD is PermissionDenied); of a
                                    former member: only banned; never a member: NotFound.
                                    There is no unban yet. */
  QIM_STORE_MEMBER_UPDATE = 3,   /* role / modes of a current member (NotFound otherwise) */
} qim_store_member_op;

typedef struct qim_store_member_change {
  qim_store_member_op op;
  qim_user_id user_id;
  qim_group_role role;
  uint32_t mode_want, mode_given;
} qim_store_member_change;

typedef struct qim_store_seq_range {   /* [low, hi) */
  qim_conversation_seq low, hi;
} qim_store_seq_range;

/* Offsets of every stream start at 1 (0 = "before the first record"). */
typedef struct qim_store_log_record {
  uint64_t offset;
  qim_shard_epoch epoch;     /* stamped at append (dispatch streams); 0 for the outbox */
  bool fence;                /* an epoch-bump fence record (no payload) */
  uint8_t key[16];           /* idempotency key given at append */
  qim_bytes payload;
} qim_store_log_record;

/* ---- accounts -------------------------------------------------------------------- */

/* Atomic. -EEXIST if the id exists. */
typedef struct { qim_store_req req; qim_store_user user; } qim_store_user_create_req;
/* -ENOENT if absent. out: user. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_user_id user_id; qim_store_user out; } qim_store_user_get_req;
/* Replaces public/private (NULL = keep), bumps token_epoch when bump_token_epoch. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_user_id user_id; const char *public_json; const char *private_json; bool bump_token_epoch; qim_timestamp_millis now; uint64_t out_token_epoch; } qim_store_user_update_req;
/* Atomic. -EEXIST if (tenant, login) is taken. */
typedef struct { qim_store_req req; qim_store_credential cred; } qim_store_cred_create_req;
/* -ENOENT if absent. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; const char *login; qim_store_credential out; } qim_store_cred_get_req;
/* Replaces the secret hash of the user's credential (password change). */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_user_id user_id; const char *secret_hash; } qim_store_cred_update_req;
/* Idempotent upsert of an API key → tenant mapping. */
typedef struct { qim_store_req req; const char *api_key; qim_tenant_id tenant_id; } qim_store_apikey_put_req;
/* -ENOENT if unknown. */
typedef struct { qim_store_req req; const char *api_key; qim_tenant_id out_tenant_id; } qim_store_apikey_get_req;

/* ---- conversations and members ------------------------------------------------------ */

/* Atomic: creates the conversation and (GROUP) its owner as first member with mode
 * JRWPASDO, role OWNER, at membership_version 1 (DIRECT: both users, role MEMBER, mode
 * JRWPA; direct_users must be distinct, lower id first, else -EINVAL). latest_seq, delid,
 * membership_version, member_count and deleted of `conv` are ignored (a new conversation
 * starts at 0 / 0 / 1 / members / false); created_at = updated_at = touched_at = now.
 * -EEXIST if the id exists. */
typedef struct { qim_store_req req; qim_store_conversation conv; qim_timestamp_millis now; } qim_store_conv_create_req;
/* -ENOENT if absent. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_store_conversation out; } qim_store_conv_get_req;
/* public_json NULL = keep; mark_deleted sets deleted (owner deletes the topic; a
 * deleted conversation takes no more reserves or membership changes). updated_at = now.
 * -ENOENT if absent. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; const char *public_json; bool mark_deleted; qim_timestamp_millis now; } qim_store_conv_update_req;

/*
 * Atomic per conversation, serialized with seq allocation (intents.reserve): applies all
 * changes or none; a new membership_version = old + 1; joined_at / left_at = the
 * conversation's latest_seq at this moment; a new member's read/recv start at joined_at.
 * Rows are versioned [from_version, to_version) so any past version stays readable.
 * Changes apply in order (a later change sees the earlier ones). A role change closes the
 * member's row and opens a new one; mode-only changes keep the row (members_at has no modes).
 * Errors: GROUP_NOT_FOUND (conversation absent or deleted, or REMOVE/UPDATE of a
 * non-member), GROUP_ALREADY_EXISTS (ADD of a current member), GROUP_PERMISSION_DENIED (ADD
 * of a banned user), GROUP_MEMBER_LIMIT_EXCEEDED (member_count would exceed member_limit
 * and grow; member_limit 0 = no limit). -EINVAL: no changes.
 */
typedef struct {
  qim_store_req req;
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  const qim_store_member_change *changes;
  size_t change_count;
  uint32_t member_limit;
  qim_timestamp_millis now;
  qim_membership_version out_version;
  qim_conversation_seq out_position;     /* the latest_seq used for joined_at/left_at */
} qim_store_members_change_req;

/* The member's current row; -ENOENT if the user never was a member. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_user_id user_id; qim_store_member out; } qim_store_member_get_req;

/*
 * Members at EXACTLY `version`, ordered by user id, starting after `after_user`
 * (has_after=false: from the start), at most `limit`; out_has_more when more follow.
 * Members who had left by then are absent (has_left_at is false for every entry).
 * FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE if the version is 0, above the current one or was
 * pruned by retention; -ENOENT if the conversation is unknown.
 */
typedef struct {
  qim_store_req req;
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  qim_membership_version version;
  bool has_after;
  qim_user_id after_user;
  uint32_t limit;
  qim_group_member *out_members;
  size_t out_count;
  bool out_has_more;
} qim_store_members_at_req;

/*
 * Membership snapshot retention (docs/groups.md "Snapshot retention"). Examines the
 * conversations after (after_tenant, after_conversation) in key order (has_after=false:
 * from the first), at most `limit`; for each, raises its membership floor to
 *   min(membership_version - keep_versions + 1,
 *       the lowest version any not-yet-fanned-out message names)
 * and deletes the versioned member rows visible only below the floor. "Not yet fanned
 * out": an intent not COMMITTED, or an outbox record at or after the lowest consumer
 * offset of the outbox (every record when no consumer is registered). The floor never
 * moves back; members_at of a version below it is FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE,
 * every version at or above it reads exactly as before. When more than
 * QIM_STORE_PRUNE_SCAN_MAX outbox records are unfanned the call prunes nothing
 * (out_deferred) rather than scan an unbounded backlog. Atomic where the backend can
 * (correct by idempotence: a repeated call finds nothing more to prune).
 * out_next_*: the last conversation examined (the next call's cursor); out_more: more
 * conversations follow. -EINVAL: keep_versions or limit 0.
 */
#define QIM_STORE_PRUNE_SCAN_MAX 65536
typedef struct {
  qim_store_req req;
  uint32_t keep_versions;
  bool has_after;
  qim_tenant_id after_tenant;
  qim_conversation_id after_conversation;
  uint32_t limit;
  qim_tenant_id out_next_tenant;
  qim_conversation_id out_next_conversation;
  bool out_more;
  bool out_deferred;
  uint32_t out_raised;   /* conversations whose floor rose */
  uint32_t out_held;     /* of those examined, floors held below the count rule by a pin */
  uint64_t out_rows;     /* member rows deleted */
} qim_store_members_prune_req;

/* Forward-only receipts: values at or below the stored ones are ignored; read implies
 * recv; both are clamped to the conversation's latest_seq (nobody reads what does not exist
 * yet). out_* are the stored values afterwards. -ENOENT if not a current member. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_user_id user_id; qim_conversation_seq read_seq, recv_seq; qim_conversation_seq out_read, out_recv; } qim_store_member_receipt_req;

/* The current member's own `private` (Tinode keeps it per subscription; only that user
 * sees it): replaces private_json (NULL clears it) and sets updated_at = now, without a
 * new membership version (it is nobody else's business). -ENOENT if the user is not a
 * current member (never was, left or banned) or the conversation is absent or deleted. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_user_id user_id; const char *private_json; qim_timestamp_millis now; } qim_store_member_private_req;

/* The user's subscriptions: every conversation the user is or was a member of (left and
 * banned ones too, with their left_at / banned), ordered by (last_activity_id,
 * conversation_id) descending, paged by an opaque cursor (a cursor the store did not make
 * is -EINVAL). */
typedef struct {
  qim_store_req req;
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  qim_page_cursor cursor;            /* empty = first page */
  uint32_t limit;
  qim_store_member *out_members;     /* parallel arrays of out_count */
  qim_store_conversation *out_convs;
  size_t out_count;
  qim_page_cursor out_next;          /* empty when no more */
} qim_store_subscriptions_req;

/* ---- commit intents ---------------------------------------------------------------- */

/*
 * Atomic per conversation. `proposal` holds everything but the seq and (GROUP) the
 * snapshot fields; for a key never seen (or forgotten after the dedupe window) the store
 * allocates conversation_seq = latest + 1 (Control messages consume no seq: they take
 * the current latest_seq as their position), fills GroupSnapshot.membership_version /
 * member_count / target_shards from the current membership (shards by core's hash with
 * the store's shard config), stores the intent as Reserved and returns FRESH with the
 * completed intent. For a key in flight: EXISTING with the stored intent; committed:
 * COMMITTED with the stored CommittedMessage. If the stored intent's record content
 * differs from the proposal's: COMMIT_CLIENT_MESSAGE_ID_REUSED. "Content" is the
 * conversation and the MessageContent: a retry that minted a new message id or created_at
 * is the same message. After the body was wiped (history.set_state) the comparison is
 * skipped: nothing of the content is kept to compare with.
 * The stored record's coordinates are the intent's. The conversation's latest_seq moves with
 * a FRESH reserve; touched_at (record.created_at) and last_activity_id (if larger) move
 * only with a FRESH reserve of a message that is not a Control (receipts, deletions and
 * membership notices are not activity: they do not reorder a user's session list).
 * Errors: MESSAGE_STORE_INVALID_CLIENT_MESSAGE_ID (zero cmid), -ENOENT
 * (conversation absent or deleted), COMMIT_PERMISSION_DENIED (sender is not a current
 * member; not checked for Control messages, which speak for the system, e.g. about a
 * member who just left), MESSAGE_STORE_INVARIANT_VIOLATION (seq would reach 0x0FFFFFFF).
 * out_order: a per-conversation counter giving the order of intents that share a seq
 * position (a message and the controls after it).
 *
 * `commit` (the one-transaction commit): for a FRESH key whose conversation has no
 * intent with a lower (seq, order) still below OUTBOXED (the rule intents.advance
 * OUTBOXED checks), the same transaction also takes the intent through RECORDED,
 * OUTBOXED, the read-back of the outbox envelope (its record must be the intent's) and
 * COMMITTED (commit time `now`), exactly as the advance steps would; the reply is then
 * COMMITTED with out_committed_here = true and out_position. When a predecessor is
 * unpublished, or one of those steps fails without losing the transaction, the steps
 * are undone and the reply is FRESH / Reserved as without `commit` (the caller takes the
 * staged path). A backend that does not offer it ignores `commit` and answers FRESH.
 * Existing and committed keys answer as without it (out_committed_here false).
 *
 * `authorize` (a client's send): a FRESH reserve of a message that is not a Control also
 * refuses, with COMMIT_PERMISSION_DENIED, a sender who is banned or lacks W in both the
 * wanted and the given mode, checked in the same transaction that allocates the seq (no
 * window between a permission read and the reserve). `sender_read`: the same reserve
 * moves the sender's read and recv up to the new seq, as conversations.member_receipt
 * would (the sender has read what it sent); Existing and committed keys did so at their
 * own reserve. Both are ignored for Control messages.
 */
typedef struct {
  qim_store_req req;
  const qim_commit_intent *proposal;
  bool authorize;                   /* in: also check the sender's ban and W mode */
  bool sender_read;                 /* in: the sender's read/recv move to the new seq */
  bool commit;                      /* in: try the one-transaction commit of a fresh key */
  qim_timestamp_millis now;         /* in: the commit time when `commit` */
  qim_reserve_result out;
  uint64_t out_order;
  bool out_committed_here;          /* this call reserved and committed the key */
  qim_log_position out_position;    /* out_committed_here: of the OutboxPublication */
  uint8_t content_hash_[32];        /* backend scratch: the proposal's content hash, made
                                       when submitted, off the thread that runs the reserve */
} qim_store_intent_reserve_req;

/*
 * Forward-only step of a stored intent to `to` (one step at a time), performing the
 * step's effect in the same transaction:
 *   RECORDED:  writes intent.record as the history row (not for Control messages),
 *   OUTBOXED:  appends the CommittedEnvelope to LogStream::Outbox keyed by message_id
 *              (idempotent) → out_position; every intent of the conversation with a lower
 *              (seq, order) must already be OUTBOXED or COMMITTED, else COMMIT_LOG_INVARIANT_VIOLATION,
 *   COMMITTED: keeps only the CommittedMessage for dedupe until the window passes.
 * Repeating the current state is a no-op success (idempotent; out_position is the outbox
 * position once the intent is OUTBOXED or COMMITTED). A backward or skipping step:
 * MESSAGE_STORE_INVALID_STATE_TRANSITION; unknown key: MESSAGE_STORE_COMMIT_NOT_FOUND.
 * The envelope's intent carries state OUTBOXED.
 */
typedef struct {
  qim_store_req req;
  qim_commit_key key;
  qim_commit_state to;
  qim_timestamp_millis now;
  qim_log_position out_position;     /* OUTBOXED */
} qim_store_intent_advance_req;

/* LoadedCommit or MESSAGE_STORE_COMMIT_NOT_FOUND. */
typedef struct { qim_store_req req; qim_commit_key key; qim_loaded_commit out; } qim_store_intent_load_req;

/* Intents not COMMITTED, ordered by (conversation, seq, order); has_conversation=false
 * lists all conversations. At most `limit`. */
typedef struct {
  qim_store_req req;
  bool has_conversation;
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  uint32_t limit;
  qim_commit_intent *out_intents;
  size_t out_count;
} qim_store_intent_list_req;

/* Forgets committed keys whose commit time (advance's `now`) is before `before` (dedupe
 * window); in-flight intents are never forgotten. */
typedef struct { qim_store_req req; qim_timestamp_millis before; uint64_t out_forgotten; } qim_store_intent_forget_req;

/* ---- history ----------------------------------------------------------------------- */

/* -ENOENT if no such record. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_conversation_seq seq; qim_message_record out; } qim_store_record_get_req;

/*
 * Records of one conversation visible to `viewer`: seq in (window_low, window_high],
 * inside the union of `ranges` ([low, hi), any order, may overlap) when range_count > 0,
 * not hard-deleted (state Deleted or Recalled with a wiped body are still returned with
 * their state, unless skip_deleted), not in the viewer's own soft-delete dellog (an
 * everyone-dellog hides nothing here: hard deletes show as the record's state); newest
 * first when direction OLDER. At most max_items and about max_bytes of payload (at least
 * one record; max_bytes 0 = no byte bound); out_has_more when more records qualify.
 */
typedef struct {
  qim_store_req req;
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  qim_user_id viewer;
  qim_conversation_seq window_low, window_high;
  const qim_store_seq_range *ranges;
  size_t range_count;
  qim_history_direction direction;
  bool skip_deleted;
  uint32_t max_items, max_bytes;
  qim_message_record *out_records;
  size_t out_count;
  bool out_has_more;
} qim_store_record_query_req;

/* Sets state (and updated_at); wipe_body erases content everywhere the store holds it,
 * in the same transaction: the history row, the commit intent, inline mailbox entries,
 * and the log records that carry the body — the outbox envelope (keyed by message id)
 * and the mailbox dispatch of every shard (keyed by message id, or by DispatchId if
 * appended before that key) are rewritten with the
 * body dropped (payload_or_ciphertext empty, no media_metadata; offsets, keys, ids,
 * message type, custom type, schema version and every other field kept: the fanout's
 * definition of "redacted"). sqlite overwrites freed bytes (secure_delete), and the old
 * page images leave the WAL at most QIM_STORE_WIPE_BOUND_MS later: as it starts over under
 * steady writes, or else by a truncating checkpoint. -ENOENT if no such record. */
#define QIM_STORE_WIPE_BOUND_MS 5000
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_conversation_seq seq; qim_message_state state; bool wipe_body; qim_timestamp_millis now; } qim_store_record_set_state_req;

/* Atomic per conversation: delid += 1; a dellog row per range for `for_user`
 * (has_for_user=false: everyone); for a user, that member's clear = new delid.
 * Ranges are already validated and merged by the caller (-EINVAL: none, or low >= hi).
 * -ENOENT: conversation, or for_user never a member. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; bool has_for_user; qim_user_id for_user; const qim_store_seq_range *ranges; size_t range_count; uint64_t out_delid; } qim_store_dellog_add_req;

/* Dellog ranges visible to `viewer` (its own and everyone's) with delid in
 * [since_delid, before_delid) (before 0 = no bound), ordered by (delid, low), at most
 * `limit`; out_delids[i] is the delid of out_ranges[i] (both owned: qim_free).
 * out_max_delid: the conversation's current delid. -ENOENT: conversation. */
typedef struct { qim_store_req req; qim_tenant_id tenant_id; qim_conversation_id conversation_id; qim_user_id viewer; uint64_t since_delid, before_delid; uint32_t limit; qim_store_seq_range *out_ranges; uint64_t *out_delids; size_t out_count; uint64_t out_max_delid; } qim_store_dellog_query_req;

/* One conversation touched by an expiry: its retention_floor before and after. */
typedef struct qim_store_retention_floor {
  qim_conversation_id conversation_id;
  qim_conversation_seq previous, floor;
} qim_store_retention_floor;

/* Retention: records of `tenant_id` and `retention_class` created in [after, before) whose
 * body is not already wiped, oldest first, at most `limit` (0 = all): bodies wiped
 * everywhere (as set_state with wipe_body), state Deleted, and each conversation's
 * retention_floor raised to the highest seq expired in it. out_count = records affected;
 * out_more = records remain beyond the limit; out_floors (owned: qim_free) = one entry
 * per conversation whose floor rose, ordered by conversation id. */
typedef struct {
  qim_store_req req;
  qim_retention_class retention_class;
  qim_tenant_id tenant_id;
  qim_timestamp_millis after, before;
  qim_timestamp_millis now;
  uint32_t limit;
  uint64_t out_count;
  bool out_more;
  qim_store_retention_floor *out_floors;
  size_t out_floor_count;
} qim_store_record_expire_req;

/* ---- logs -------------------------------------------------------------------------- */

/* One append inside log.append (see below). */
typedef struct qim_store_log_append {
  qim_log_stream stream;
  uint8_t key[16];           /* idempotency key: a repeated key returns the first position */
  qim_bytes payload;
  qim_log_position out_position;
  qim_shard_epoch out_epoch; /* the epoch stamped into the record (dispatch streams) */
  bool out_existed;          /* the key was already in the stream */
} qim_store_log_append;

/*
 * Appends every entry (dense offsets assigned by the store; a dispatch record stamped
 * with its shard's current epoch atomically with the append), then, when has_consumer,
 * sets the consumer's offset — all in one transaction where the backend can (sqlite),
 * otherwise entries first and the offset last (correct by idempotence).
 * Errors: COMMIT_LOG_PUBLICATION_NOT_DURABLE (durability not confirmed),
 * COMMIT_LOG_TRANSACTION_ABORTED, COMMIT_LOG_UNAVAILABLE.
 */
typedef struct {
  qim_store_req req;
  qim_store_log_append *appends;
  size_t append_count;
  bool has_consumer;
  const char *consumer;
  qim_log_stream consumer_stream;
  uint64_t consumer_offset;  /* next offset the consumer will read */
} qim_store_log_append_req;

/* Records with offset >= from, at most max. COMMIT_LOG_POSITION_UNAVAILABLE if `from` is
 * below the trim point. out_end = next offset after the last record of the stream (1 for
 * a stream never written); out_trim = the trim point (0 until a trim). A fence has an
 * all-zero key and an empty payload. */
typedef struct { qim_store_req req; qim_log_stream stream; uint64_t from; uint32_t max; qim_store_log_record *out_records; size_t out_count; uint64_t out_end; uint64_t out_trim; } qim_store_log_read_req;

/* A consumer's committed offset (0 when never set). */
typedef struct { qim_store_req req; const char *consumer; qim_log_stream stream; uint64_t out_offset; } qim_store_log_consumer_get_req;
typedef struct { qim_store_req req; const char *consumer; qim_log_stream stream; uint64_t offset; } qim_store_log_consumer_set_req;

/* Removes records below `below`, but never below the lowest registered consumer offset of
 * the stream nor below `protect` (a producer's replay point; 0 = none) nor past the end;
 * on the outbox, never past the record of an intent still Outboxed (its commit reads the
 * record back before Committed). The trim point never moves back. out_trim: the trim
 * point afterwards. */
typedef struct { qim_store_req req; qim_log_stream stream; uint64_t below; uint64_t protect; uint64_t out_trim; } qim_store_log_trim_req;

/* Replaces the payload of one record by `payload` (deleted means gone), keeping offset,
 * key and epoch. COMMIT_LOG_POSITION_UNAVAILABLE if trimmed or never written. */
typedef struct { qim_store_req req; qim_log_position position; qim_bytes payload; } qim_store_log_redact_req;

/* ---- mailboxes and shards ---------------------------------------------------------- */

/*
 * Shard takeover: atomically epoch = epoch + 1, owner = `owner`, and a fence record
 * appended to LogStream::MailboxDispatch{shard}, stamped with the new epoch. out_epoch:
 * the new epoch; out_fence: the fence's position. A shard never taken over has epoch 0
 * (appends before any takeover are stamped 0). MATERIALIZE_UNAVAILABLE past epoch 65535.
 */
typedef struct { qim_store_req req; qim_mailbox_shard_id shard; uint64_t owner; qim_shard_epoch out_epoch; qim_log_position out_fence; } qim_store_shard_takeover_req;
typedef struct { qim_store_req req; qim_mailbox_shard_id shard; qim_shard_epoch out_epoch; uint64_t out_owner; } qim_store_shard_get_req;

/*
 * AppendMailboxBatch: entries + progress in one atomic write, idempotent by
 * (user, mailbox_seq, event_ordinal) and by (dispatch_id, lane, chunk). Fenced:
 * `owner_epoch` must equal the shard's current epoch, checked inside the same
 * transaction (MATERIALIZE_SHARD_NOT_OWNED otherwise, checked before idempotence).
 * out: DurabilityReceipt (a replayed chunk gets the original one and writes nothing).
 * MATERIALIZE_PROGRESS_CONFLICT if the stored progress disagrees with the batch: another
 * shard, mailbox seq or message, or completed chunks the batch's progress lacks. -EINVAL:
 * a batch inconsistent in itself (progress for another dispatch/shard/lane, progress not
 * including chunk_id, an entry with another mailbox_seq, entries of two messages: a batch
 * is a chunk of one message's dispatch, which is how a hard delete finds its copies).
 *
 * Several batches and the lane's watermark in ONE transaction (so a materializer step costs
 * one durable write): `batch` points to `batch_count` batches (0 reads as 1), all of one
 * (shard, lane); `out_receipts`, when set, gets each one's receipt (`out` the first's). All or
 * nothing: the first batch that fails fails the request and nothing is written. `advance_to`
 * (0: none) then moves LaneWatermark.materialized forward to it, as watermark_advance would
 * with the stored floor, in the same transaction; with it, a batch whose chunk is already
 * stored at another mailbox seq is PROGRESS_CONFLICT (the watermark never passes it).
 */
typedef struct {
  qim_store_req req;
  const qim_append_mailbox_batch *batch;
  qim_shard_epoch owner_epoch;
  qim_durability_receipt out;
  size_t batch_count;
  qim_durability_receipt *out_receipts;
  qim_mailbox_seq advance_to;
} qim_store_mailbox_append_req;

typedef struct { qim_store_req req; qim_dispatch_id dispatch_id; qim_lane_id lane; bool out_found; qim_dispatch_progress out; } qim_store_progress_get_req;

/* A user's entries with after_seq < mailbox_seq <= up_to_seq, ordered by (seq, ordinal),
 * whole event groups only, within max_items / max_bytes (see MailboxRangeQuery; max_bytes
 * 0 = no byte bound; the first group is returned whatever its bytes).
 * MAILBOX_GROUP_TOO_LARGE: the first group alone has more than max_items entries.
 * MAILBOX_CORRUPT_ENTRY: a stored entry does not decode. The trim floor is the caller's to
 * check (watermark_get). */
typedef struct { qim_store_req req; qim_mailbox_range_query query; qim_mailbox_entry *out_entries; size_t out_count; bool out_has_more; } qim_store_mailbox_range_req;

typedef struct { qim_store_req req; qim_mailbox_shard_id shard; qim_lane_id lane; qim_lane_watermark out; } qim_store_watermark_get_req;
/* Forward-only (lower values are ignored); fenced by owner_epoch like mailbox append.
 * Trims the lane's entries (and its dispatch bookkeeping) with mailbox_seq < floor.
 * -EINVAL: floor > materialized. */
typedef struct { qim_store_req req; qim_watermark_advance advance; qim_shard_epoch owner_epoch; } qim_store_watermark_advance_req;

/* ---- the vtable ---------------------------------------------------------------------- */

struct qim_store_vtable {
  const char *name; /* "sqlite", "redis" */
  struct {
    int (*user_create)(qim_store *, qim_store_user_create_req *);
    int (*user_get)(qim_store *, qim_store_user_get_req *);
    int (*user_update)(qim_store *, qim_store_user_update_req *);
    int (*cred_create)(qim_store *, qim_store_cred_create_req *);
    int (*cred_get)(qim_store *, qim_store_cred_get_req *);
    int (*cred_update)(qim_store *, qim_store_cred_update_req *);
    int (*apikey_put)(qim_store *, qim_store_apikey_put_req *);
    int (*apikey_get)(qim_store *, qim_store_apikey_get_req *);
  } accounts;
  struct {
    int (*create)(qim_store *, qim_store_conv_create_req *);
    int (*get)(qim_store *, qim_store_conv_get_req *);
    int (*update)(qim_store *, qim_store_conv_update_req *);
    int (*members_change)(qim_store *, qim_store_members_change_req *);
    int (*member_get)(qim_store *, qim_store_member_get_req *);
    int (*members_at)(qim_store *, qim_store_members_at_req *);
    int (*member_receipt)(qim_store *, qim_store_member_receipt_req *);
    int (*subscriptions)(qim_store *, qim_store_subscriptions_req *);
    int (*member_private)(qim_store *, qim_store_member_private_req *);
    int (*members_prune)(qim_store *, qim_store_members_prune_req *);
  } conversations;
  struct {
    int (*reserve)(qim_store *, qim_store_intent_reserve_req *);
    int (*advance)(qim_store *, qim_store_intent_advance_req *);
    int (*load)(qim_store *, qim_store_intent_load_req *);
    int (*list_in_flight)(qim_store *, qim_store_intent_list_req *);
    int (*forget)(qim_store *, qim_store_intent_forget_req *);
  } intents;
  struct {
    int (*get)(qim_store *, qim_store_record_get_req *);
    int (*query)(qim_store *, qim_store_record_query_req *);
    int (*set_state)(qim_store *, qim_store_record_set_state_req *);
    int (*dellog_add)(qim_store *, qim_store_dellog_add_req *);
    int (*dellog_query)(qim_store *, qim_store_dellog_query_req *);
    int (*expire)(qim_store *, qim_store_record_expire_req *);
  } history;
  struct {
    int (*append)(qim_store *, qim_store_log_append_req *);
    int (*read)(qim_store *, qim_store_log_read_req *);
    int (*consumer_get)(qim_store *, qim_store_log_consumer_get_req *);
    int (*consumer_set)(qim_store *, qim_store_log_consumer_set_req *);
    int (*trim)(qim_store *, qim_store_log_trim_req *);
    int (*redact)(qim_store *, qim_store_log_redact_req *);
  } logs;
  struct {
    int (*shard_takeover)(qim_store *, qim_store_shard_takeover_req *);
    int (*shard_get)(qim_store *, qim_store_shard_get_req *);
    int (*append)(qim_store *, qim_store_mailbox_append_req *);
    int (*progress_get)(qim_store *, qim_store_progress_get_req *);
    int (*range)(qim_store *, qim_store_mailbox_range_req *);
    int (*watermark_get)(qim_store *, qim_store_watermark_get_req *);
    int (*watermark_advance)(qim_store *, qim_store_watermark_advance_req *);
  } mailboxes;
  /* Backend-wide counters (qim_store_get_stats). */
  void (*stats)(qim_store *, qim_store_stats *out);
  /* Waits for queued work, stops threads, frees the instance. */
  void (*close)(qim_store *);
};

/* ---- opening, counters and helpers ------------------------------------------------- */

/* The mailbox layout a store is created with when its options name none: on one node,
 * few lanes do the same work in fewer, larger steps (docs/mailbox.md, "Layout"). */
#define QIM_STORE_DEFAULT_SHARDS 1
#define QIM_STORE_DEFAULT_LANES 1

typedef struct qim_store_options {
  qim_shard_config shards;     /* fixed at creation; a mismatch on reopen is -EINVAL. A field
                                  left 0 takes the store's own value, or the default above
                                  for a store being created */
  qim_shard_config *layout_out; /* optional: where the store writes the layout in effect */
  uint32_t queue_capacity;     /* bounded submission queues, writes and reads each (default
                                  4096); full → -EAGAIN */
  uint32_t reader_threads;     /* default 2 (at most 64) */
  uint32_t max_batch;          /* operations per group commit (default 512) */
  uint32_t commit_linger_us;   /* under a steady stream of writes, how long the writer keeps a
                                  transaction open for more operations before its COMMIT
                                  (0, the default: commit what was queued at once) */
  uint32_t checkpoint_frames;  /* sqlite: WAL pages between background checkpoints; the WAL
                                  starts over at 2.5 times this and the writer copies inline
                                  at 6 times (default 16000, 64 MB; tests use small ones) */
  uint32_t settle_entries;     /* sqlite: mailbox entries a lane writes before they enter the
                                  per-user index, in one sorted pass (default 16384; or 1/64
                                  as many batches; 1 = at every watermark advance) */
  /* Test hook, called by the writer thread before each fsync'ing COMMIT (e.g. a slow
   * fsync for liveness tests). NULL in production. */
  void (*before_commit)(void *ctx);
  void *hook_ctx;
} qim_store_options;

/* Opens a backend by URL: "sqlite:PATH[?max_page_count=N]" (N caps the database size in
 * pages; tests use it to provoke SQLITE_FULL), later "redis://host:port/...". -EINVAL for
 * an unknown scheme, bad options or a shard configuration other than the one the store
 * was created with; -errno when the backend cannot start. */
int qim_store_open(const char *url, const qim_store_options *opt, qim_store **out);
static inline void qim_store_close(qim_store *s) { if (s) s->vt->close(s); }

/* Counters for tests and benchmarks (backend-wide, monotonic). */
struct qim_store_stats {
  uint64_t operations;            /* write operations executed (each in a transaction) */
  uint64_t transactions;          /* write transactions (batches) attempted */
  uint64_t fsyncs;                /* durable commits (sqlite: COMMITs the syncer confirmed) */
  uint64_t failed_operations;     /* write operations completed with a non-zero status */
  uint64_t rejected_backpressure; /* submissions refused with -EAGAIN (queue full) */
  uint64_t reads;                 /* read operations executed */
  uint64_t reads_inline;          /* of those, run on the submitting worker's own thread */
  uint64_t pages_written;         /* pages the commits wrote to the log (sqlite: WAL frames) */
  uint64_t lingers;               /* transactions kept open for more writes (commit_linger_us) */
  uint64_t lingered;              /* write operations those lingers added to their transaction */
  uint64_t redos;                 /* sqlite: batches run again with a savepoint per operation,
                                     after one failed having written (sqlite.c, "Savepoints") */
  uint64_t checkpoints;           /* sqlite: checkpoints on the writer's own thread (stalls) */
  uint64_t checkpoints_background; /* sqlite: passes of the background checkpointer */
  uint64_t checkpoint_waits;      /* sqlite: times the writer, its WAL at the hard bound, waited
                                     for the checkpointer's round to end (sqlite_checkpoint.c) */
  uint64_t writebacks;            /* sqlite: write-outs of the database file started during them */
  uint64_t wal_truncates;         /* sqlite: WAL truncates (writes paused, or an erase due) */
  uint64_t erases;                /* sqlite: operations that erased content (a wipe, an expiry,
                                     a redact), each owing the files a wipe */
  uint64_t erase_turnovers;       /* sqlite: erases wiped from the WAL by its starting over */
  uint64_t syncs;                 /* sqlite: the syncer's WAL syncs (each covers every COMMIT
                                     written before it) */
  uint64_t sync_waits;            /* sqlite: completions held back until one of those */
  uint64_t slow_syncs;            /* sqlite: syncs that took 50 ms or longer (each logged as
                                     store.sqlite.slow_sync: the disk held every write back) */
  uint64_t slow_transactions;     /* sqlite: write transactions that took 50 ms or longer from
                                     BEGIN to the end of COMMIT (store.sqlite.slow_transaction) */
  uint64_t batch_hist[8]; /* batches of size 1, 2-3, 4-7, 8-15, 16-63, 64-255, 256-1023, 1024+ */
};
void qim_store_get_stats(qim_store *s, qim_store_stats *out);

/* Blocking wrapper: QIM_STORE_SYNC(store, intents.reserve, &r) submits and waits for the
 * completion on a private queue of the calling thread (it sets r.req.cq and r.req.done);
 * returns the submit error or r.req.status. Not for use on an event loop thread. */
int qim__store_sync_prepare(qim_store_req *r);
int qim__store_sync_finish(int submit_rc, qim_store_req *r);
#define QIM_STORE_SYNC(s, call, r) \
  qim__store_sync_finish((qim__store_sync_prepare(&(r)->req), (s)->vt->call((s), (r))), &(r)->req)

/* Frees outputs of store records. */
void qim_store_user_free(qim_store_user *u);
void qim_store_credential_free(qim_store_credential *c);
void qim_store_conversation_free(qim_store_conversation *c);
void qim_store_member_free(qim_store_member *m);
void qim_store_log_record_free(qim_store_log_record *r);
/* Frees the records a logs.read returned and leaves it with none. */
void qim_store_log_read_free(qim_store_log_read_req *r);

#endif
