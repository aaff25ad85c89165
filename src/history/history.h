/*
 * history.h — message history and Tinode's message semantics on the qim records
 * (seed 003, seed 004 HistoryQuery/HistoryPage, DESIGN.md §1 rules 7–8 and §3,
 * PROTOCOL.md §8–§10, docs/history.md).
 *
 * What the gateway calls, per Tinode message:
 *   {pub}              qim_history_publish           (edits: head.replace = ":N")
 *   {get what=data}    qim_history_get_data          (the gateway builds a {data} per record)
 *   {get what=del}     qim_history_get_del
 *   {del what=msg}     qim_history_delete            (soft, hard, recall — judged per message)
 *   {note read|recv}   qim_history_note
 * and for qim's own clients qim_history_read (HistoryQuery → HistoryPage). A retention
 * sweeper (qim_history_sweep, or the periodic task of qim_history_sweeper_start) enforces
 * the retention classes.
 *
 * Visibility: a user sees the seqs of a conversation in (joined_at, left_at] of its member
 * row (left_at absent: up to the latest seq), minus hard-deleted / recalled / expired
 * messages and the ranges it soft-deleted itself. Tinode's `get data` forms are CLIPPED to
 * that, never refused because part of a range is invisible. Reading needs the R mode;
 * a member who left keeps read access to its window; users who never were members, banned
 * users and members without R get HistoryAccessDenied. Changes (publish, delete, notes)
 * need a current member.
 *
 * Every change is also committed through the commit module as a Control message
 * (custom_type QIM_HISTORY_CONTROL_TYPE, JSON in docs/history.md; its own MessageId, no
 * new seq), so offline devices learn of it from their mailboxes. A Control that cannot be
 * committed does not undo the change: the operation reports it in `control_status`.
 *
 * Threads: every function except the pure content conversions blocks on store and commit
 * completions: call it from a worker thread (uv_queue_work, a pool), never from an event
 * loop. Any number of threads may call concurrently.
 *
 * Errors (raised through qim_err_raise, by this module, the commit or the store):
 *   MESSAGE_STORE_HISTORY_ACCESS_DENIED  not a (current, for changes) member, banned, no R
 *                                        (no W for publish is the commit's PermissionDenied);
 *   MESSAGE_STORE_HISTORY_UNAVAILABLE    a HistoryQuery anchor at or below the retention floor;
 *   MESSAGE_STORE_INVALID_RANGE          (extension, ctrl 400) malformed delete ranges, more
 *                                        than del_max_messages over several ranges, too many
 *                                        ranges, a note seq outside 0 < seq <= latest;
 *   MESSAGE_STORE_COMPLIANCE_HOLD        (extension, ctrl 403) hard delete or recall of a
 *                                        message under RetentionClass::ComplianceHold;
 *   MESSAGE_STORE_EDIT_NOT_PERMITTED     (extension, ctrl 403) head.replace names another
 *                                        user's message;
 *   MESSAGE_STORE_INVALID_CONTENT        (extension, ctrl 400) {pub} without content, head not
 *                                        an object, a malformed head.replace;
 *   COMMIT_MESSAGE_TOO_LARGE             the stored form exceeds max_message_size (ctrl 413);
 *   COMMIT_INVALID_REFERENCE             head.replace names no message the sender can see;
 *   MESSAGE_STORE_UNAVAILABLE            the store failed;
 *   MESSAGE_STORE_INVARIANT_VIOLATION    a stored payload that is not what this module wrote;
 *   QIM_AGAIN                            the store's queue is full (backpressure): retry;
 *   CommitError codes                    from the commit of a publish (see commit.h);
 *   -EINVAL                              a malformed call (NULL arguments).
 */
#ifndef QIM_HISTORY_H
#define QIM_HISTORY_H

#include <jansson.h>

#include "commit/commit.h"
#include "qim/clock.h"
#include "qim/config.h"
#include "qim/payload.h"
#include "qim/types.h"
#include "store/store.h"

/* custom_type and schema of the Control messages describing history changes. */
#define QIM_HISTORY_CONTROL_TYPE "qim.history"
#define QIM_HISTORY_CONTROL_SCHEMA 1

/* ---- configuration ------------------------------------------------------------------- */

/* RetentionClass::TenantCustom: how long one tenant keeps its messages (config.h's
 * `tenant_retention` entries). */
typedef qim_config_tenant_retention qim_history_tenant_age;

typedef struct qim_history_config {
  uint64_t msg_delete_age_ms;  /* non-owner hard delete and sender recall window (600 s) */
  uint32_t max_message_size;   /* stored payload + media metadata (131072) → MessageTooLarge */
  uint32_t max_mentions;       /* Drafty MN targets kept per message (64); more are dropped */
  uint32_t get_default_limit;  /* get data without limit (32, API.md) */
  uint32_t get_max_limit;      /* larger limits are clamped (256) */
  uint32_t max_ranges;         /* ranges per get/del request (256) → InvalidRange */
  uint32_t del_max_messages;   /* messages over several delete ranges (1024) → InvalidRange */
  uint32_t page_default_items; /* HistoryQuery max_items 0 (50) */
  uint32_t page_max_items;     /* clamp (1000) */
  uint32_t page_max_bytes;     /* clamp of max_bytes, and max_bytes 0 (4 MiB) */
  uint32_t del_max_ranges_out; /* get del: rows returned when the request has no limit (1024) */
  uint64_t ephemeral_age_ms;   /* RetentionClass::Ephemeral24h (24 h) */
  /* The tenants the sweeper visits, and the TenantCustom ages. Borrowed, copied by open. */
  const qim_tenant_id *tenants;
  size_t tenant_count;
  const qim_history_tenant_age *tenant_ages;
  size_t tenant_age_count;
  uint32_t sweep_interval_ms; /* the sweeper task's period (60 s) */
  uint32_t sweep_batch;       /* records per store expire call (1000) */
  uint32_t control_attempts;  /* tries of a Control commit that failed transiently (3) */
} qim_history_config;

void qim_history_config_default(qim_history_config *cfg);
/* Takes msg_delete_age_ms, max_message_size and the TenantCustom ages (tenant_retention)
 * from qimd's configuration; the sweeper visits every tenant an API key selects or a
 * tenant_retention entry names (written into tenant_buf; at most tenant_cap). tenant_ages
 * points into `c`, which must outlive qim_history_open (open copies both lists). */
void qim_history_config_from(qim_history_config *cfg, const qim_config *c,
                             qim_tenant_id *tenant_buf, size_t tenant_cap);

typedef struct qim_history qim_history;

/* `store`, `commit` and `clock` are borrowed and must outlive the history object; the
 * clock gives "now" for msg_delete_age and retention (tests pass a manual clock).
 * -EINVAL for a zero limit in cfg. */
int qim_history_open(qim_store *store, qim_commit *commit, const qim_clock *clock,
                     const qim_history_config *cfg, qim_history **out);
/* Stops the sweeper if running. NULL ok. */
void qim_history_close(qim_history *h);

/* ---- reading ------------------------------------------------------------------------- */

/*
 * HistoryQuery → HistoryPage. Older: seqs below `anchor` (0 = from the latest), newest
 * first; Newer: seqs above `anchor`, oldest first. Records in the caller's window that it
 * has not soft-deleted, including tombstones (state Deleted / Recalled, body empty) so a
 * client can show "message deleted"; Edited originals keep their body. max_items 0 =
 * page_default_items, max_bytes 0 = page_max_bytes, both clamped; at least one record
 * when any is left. earliest_available_conversation_seq = max(joined_at, retention floor)
 * + 1 (at most latest + 1). A non-zero anchor at or below the retention floor is
 * HistoryUnavailable. out owns its records (qim_history_page_free).
 */
int qim_history_read(qim_history *h, const qim_history_query *q, qim_history_page *out);

/* Tinode `get data` (PROTOCOL.md §9). */
typedef struct qim_history_get {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  qim_conversation_seq since;  /* inclusive; 0 = none */
  qim_conversation_seq before; /* exclusive; 0 = none */
  uint32_t limit;              /* 0 = get_default_limit; clamped to get_max_limit */
  /* When range_count > 0 they replace since/before: [low, hi), hi 0 = just low. */
  const qim_store_seq_range *ranges;
  size_t range_count;
} qim_history_get;

/*
 * The `limit` newest visible messages inside the requested seqs, newest first (Tinode's
 * ORDER BY seqid DESC LIMIT n). Hard-deleted, recalled and expired messages and the
 * caller's soft deletes are left out; everything is clipped to the window, so a request
 * wholly outside it returns no records (ctrl 204), never an error. has_more: more visible
 * messages matched than were returned. Errors: HistoryAccessDenied; InvalidRange for more
 * than max_ranges ranges or a range with 0 < hi < low.
 */
int qim_history_get_data(qim_history *h, const qim_history_get *g, qim_history_page *out);

/* Tinode `get del`: dellog ranges visible to the caller (its own and everyone's) with
 * delid in [since, before) (0 = unbounded), clipped to its window. */
typedef struct qim_history_get_del {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  uint64_t since, before;
  uint32_t limit; /* rows; 0 = del_max_ranges_out */
} qim_history_del_query;

typedef struct qim_history_del_page {
  uint64_t clear;              /* meta.del.clear: the highest delid returned (0: none) */
  qim_store_seq_range *ranges; /* meta.del.delseq, [low, hi) ordered by delid; owned */
  size_t range_count;          /* 0: reply ctrl 204 {what:"del"} */
} qim_history_del_page;

int qim_history_get_del(qim_history *h, const qim_history_del_query *g, qim_history_del_page *out);
void qim_history_del_page_free(qim_history_del_page *p);

/* ---- deleting ------------------------------------------------------------------------- */

/* Tinode {del what:"msg"}. Ranges as in delseq: [low, hi), hi 0 = just low. */
typedef struct qim_history_delete_req {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  const qim_store_seq_range *ranges;
  size_t range_count;
  bool hard;
  qim_trace_id trace_id;
} qim_history_delete_req;

typedef struct qim_history_delete_result {
  uint64_t delid;                   /* ctrl params.del: the highest delid made (or the current) */
  uint64_t hard_delid;              /* 0: nothing went for everyone */
  qim_store_seq_range *hard_ranges; /* Deleted or Recalled for everyone: pres del to all readers */
  size_t hard_count;
  uint64_t soft_delid;              /* 0: nothing hidden for the requester alone */
  qim_store_seq_range *soft_ranges; /* pres del to the requester's other sessions */
  size_t soft_count;
  uint32_t deleted, recalled, hidden; /* messages by outcome */
  int control_status;                 /* 0, or the commit error of a Control (the change stands) */
} qim_history_delete_result;

/*
 * Validates (each range 0 < low <= latest, low <= hi, hi clipped to latest + 1; more than
 * del_max_messages over several ranges → InvalidRange), clips to the requester's window
 * and decides per message (DESIGN.md §3):
 *   soft (hard=false): hidden for the requester — a dellog row for it, its clear updated;
 *   hard: the requester's own message within msg_delete_age → Recalled for everyone (no D
 *   needed); otherwise the owner (O) at any time, or a holder of D within msg_delete_age
 *   → Deleted for everyone; anything else in the range → hidden for the requester, as in
 *   Tinode. Gone for everyone means the body is wiped everywhere the store holds it (history,
 *   intent, mailboxes, logs) and a dellog row for everyone; each part increments delid.
 * A hard delete or recall touching a ComplianceHold message refuses the whole request
 * (ComplianceHold) before anything changes. Needs a current member with R. out owns its
 * arrays (qim_history_delete_result_free).
 */
int qim_history_delete(qim_history *h, const qim_history_delete_req *d,
                       qim_history_delete_result *out);
void qim_history_delete_result_free(qim_history_delete_result *r);

/* ---- publishing --------------------------------------------------------------------------- */

/* A {pub} as the gateway decoded it. head and content are borrowed. */
typedef struct qim_history_pub {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  qim_client_message_id client_message_id; /* the client's cmid, or one the gateway made */
  qim_request_id request_id;
  const json_t *head;    /* NULL or a JSON object */
  const json_t *content; /* required */
  qim_trace_id trace_id;
} qim_history_pub;

typedef struct qim_history_pub_result {
  qim_commit_result commit; /* status, ACK (seq for ctrl 202), reserve kind */
  bool edit;                /* head.replace named `replaced` */
  qim_conversation_seq replaced;
  qim_conversation_seq read, recv; /* the sender's receipts afterwards */
  int control_status;              /* an edit's Control commit */
} qim_history_pub_result;

/*
 * Converts the {pub} (qim_history_content_from_tinode), commits it (commit.h), then marks
 * it read and received by its sender. With head.replace = ":N" it is an edit: N must be a
 * message the sender can see (else InvalidReference) and sent by the sender (else
 * EditNotPermitted); the new text is stored as a new seq, N becomes Edited, and a Control
 * tells every member's devices. Returns out->commit.status.
 */
int qim_history_publish(qim_history *h, const qim_history_pub *p, qim_history_pub_result *out);

/* ---- receipts ---------------------------------------------------------------------------- */

typedef enum qim_history_note_kind {
  QIM_HISTORY_NOTE_RECV = 0,
  QIM_HISTORY_NOTE_READ = 1,
} qim_history_note_kind;

typedef struct qim_history_note_req {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  qim_history_note_kind what;
  qim_conversation_seq seq;
  qim_trace_id trace_id;
} qim_history_note_req;

typedef struct qim_history_note_result {
  bool changed;                    /* false: stale (seq <= the stored value), nothing to send */
  qim_conversation_seq read, recv; /* stored afterwards */
  uint32_t unread;                 /* latest seq of the window − read */
  int control_status;              /* the read-position Control to the reader's own devices */
} qim_history_note_result;

/*
 * {note what:"recv"|"read"}: forward-only (stale values ignored; read implies recv);
 * 0 < seq <= latest (InvalidRange otherwise: the gateway drops the note silently). A read
 * that moved is committed as a Control whose audience is Direct{reader}: only the reader's
 * own devices get the new position; others get the ephemeral {info} from the gateway.
 * Needs a current member with R.
 */
int qim_history_note(qim_history *h, const qim_history_note_req *n, qim_history_note_result *out);

/* unread = (left_at or latest) − read, never negative. Pure. */
uint32_t qim_history_unread(const qim_store_conversation *c, const qim_store_member *m);

/* ---- retention ------------------------------------------------------------------------- */

typedef struct qim_history_sweep_result {
  uint64_t expired;         /* records whose body was wiped this pass */
  uint32_t conversations;   /* conversations whose retention floor rose */
  uint32_t controls_failed; /* Controls that could not be committed */
} qim_history_sweep_result;

/*
 * One pass over the configured tenants: Ephemeral24h records older than ephemeral_age_ms
 * and TenantCustom records older than their tenant's age are expired (body wiped
 * everywhere, state Deleted, retention floor raised), in batches of sweep_batch; per
 * conversation whose floor rose, a dellog row for everyone over the newly expired seqs
 * and a Control. Default and ComplianceHold records never expire. `out` may be NULL.
 */
int qim_history_sweep(qim_history *h, qim_history_sweep_result *out);
/* Runs qim_history_sweep every sweep_interval_ms on a thread of its own until
 * qim_history_sweeper_stop or close. -EALREADY when running. */
int qim_history_sweeper_start(qim_history *h);
void qim_history_sweeper_stop(qim_history *h);

/* ---- content: Tinode head/content ↔ MessageContent (pure, any thread) ------------------- */

/* What a {pub} carries besides the content. */
typedef struct qim_history_tinode_msg {
  qim_message_content content; /* owned */
  qim_user_id *mentions;       /* owned; Drafty MN targets, distinct, at most max_mentions */
  size_t mention_count;
  bool has_reply_to; /* head.reply ":N" */
  qim_conversation_seq reply_to;
  bool has_replace; /* head.replace ":N" */
  qim_conversation_seq replace;
} qim_history_tinode_msg;

/*
 * Maps a {pub}'s head and content onto MessageContent (docs/history.md):
 *   payload_or_ciphertext = canonical JSON {"content":…,"head":…} (keys sorted, compact;
 *   head without "sender", which only the server sets), schema_version 1;
 *   message_type Custom (custom_type = head.mime) for a mime other than text/plain and
 *   text/x-drafty, else Media when head.attachments or a Drafty EX/IM/AU/VD entity
 *   references an attachment (data.ref), else Text;
 *   media_metadata = {"attachments":[…]} listing those references.
 * Errors: InvalidContent (no content, head not an object, head.replace not ":N"),
 * MessageTooLarge (payload + metadata above max_message_size). On error *out is zeroed.
 */
int qim_history_content_from_tinode(const json_t *head, const json_t *content,
                                    uint32_t max_message_size, uint32_t max_mentions,
                                    qim_history_tinode_msg *out);
void qim_history_tinode_msg_free(qim_history_tinode_msg *m);

/*
 * The reverse: *head (NULL when the message had none) and *content (JSON null for a wiped
 * body) as new references. A payload that is not the Tinode envelope (opaque ciphertext of
 * a qim client, schema_version != 1) becomes content = base64 string with head
 * {"mime": custom_type or "application/octet-stream"}. MESSAGE_STORE_INVARIANT_VIOLATION
 * for a schema-1 payload that does not parse.
 */
int qim_history_content_to_tinode(const qim_message_content *c, json_t **head, json_t **content);

#endif
