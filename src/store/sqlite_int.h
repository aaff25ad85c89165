/*
 * sqlite_int.h — private to the SQLite backend (src/store/sqlite*.c).
 *
 * The backend is one database file in WAL mode with one writer thread and a few reader
 * threads, each with its own connection. Every vtable call becomes an operation: a
 * descriptor (sq_op) that says whether it writes, how to validate it synchronously,
 * how to execute it on a connection, and how to report storage failures in the
 * caller's domain. The writer runs many operations in one transaction (group commit)
 * with a SAVEPOINT around each; readers run one operation per read transaction, so
 * every read sees one consistent snapshot.
 *
 * Domain files (sqlite_accounts.c, sqlite_conv.c, sqlite_intents.c, sqlite_history.c,
 * sqlite_logs.c, sqlite_mailbox.c) define the operations; sqlite.c owns threads,
 * queues, transactions, the statement cache and the schema.
 */
#ifndef QIM_STORE_SQLITE_INT_H
#define QIM_STORE_SQLITE_INT_H

#include <pthread.h>
/* The pre-update hook's declarations (Debian's library is built with it: sqlite_capture.c). */
#ifndef SQLITE_ENABLE_PREUPDATE_HOOK
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#endif
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "qim/clock.h"
#include "store/store.h"

/* Every operation of the backend: X(ENUM, name, request type). */
#define SQ_OPS(X)                                                       \
  X(USER_CREATE, user_create, qim_store_user_create_req)                \
  X(USER_GET, user_get, qim_store_user_get_req)                         \
  X(USER_UPDATE, user_update, qim_store_user_update_req)                \
  X(CRED_CREATE, cred_create, qim_store_cred_create_req)                \
  X(CRED_GET, cred_get, qim_store_cred_get_req)                         \
  X(CRED_UPDATE, cred_update, qim_store_cred_update_req)                \
  X(APIKEY_PUT, apikey_put, qim_store_apikey_put_req)                   \
  X(APIKEY_GET, apikey_get, qim_store_apikey_get_req)                   \
  X(CONV_CREATE, conv_create, qim_store_conv_create_req)                \
  X(CONV_GET, conv_get, qim_store_conv_get_req)                         \
  X(CONV_UPDATE, conv_update, qim_store_conv_update_req)                \
  X(MEMBERS_CHANGE, members_change, qim_store_members_change_req)       \
  X(MEMBER_GET, member_get, qim_store_member_get_req)                   \
  X(MEMBERS_AT, members_at, qim_store_members_at_req)                   \
  X(MEMBER_RECEIPT, member_receipt, qim_store_member_receipt_req)       \
  X(SUBSCRIPTIONS, subscriptions, qim_store_subscriptions_req)          \
  X(MEMBER_PRIVATE, member_private, qim_store_member_private_req)       \
  X(MEMBERS_PRUNE, members_prune, qim_store_members_prune_req)          \
  X(INTENT_RESERVE, intent_reserve, qim_store_intent_reserve_req)       \
  X(INTENT_ADVANCE, intent_advance, qim_store_intent_advance_req)       \
  X(INTENT_LOAD, intent_load, qim_store_intent_load_req)                \
  X(INTENT_LIST, intent_list, qim_store_intent_list_req)                \
  X(INTENT_FORGET, intent_forget, qim_store_intent_forget_req)          \
  X(RECORD_GET, record_get, qim_store_record_get_req)                   \
  X(RECORD_QUERY, record_query, qim_store_record_query_req)             \
  X(RECORD_SET_STATE, record_set_state, qim_store_record_set_state_req) \
  X(DELLOG_ADD, dellog_add, qim_store_dellog_add_req)                   \
  X(DELLOG_QUERY, dellog_query, qim_store_dellog_query_req)             \
  X(RECORD_EXPIRE, record_expire, qim_store_record_expire_req)          \
  X(LOG_APPEND, log_append, qim_store_log_append_req)                   \
  X(LOG_READ, log_read, qim_store_log_read_req)                         \
  X(CONSUMER_GET, consumer_get, qim_store_log_consumer_get_req)         \
  X(CONSUMER_SET, consumer_set, qim_store_log_consumer_set_req)         \
  X(LOG_TRIM, log_trim, qim_store_log_trim_req)                         \
  X(LOG_REDACT, log_redact, qim_store_log_redact_req)                   \
  X(SHARD_TAKEOVER, shard_takeover, qim_store_shard_takeover_req)       \
  X(SHARD_GET, shard_get, qim_store_shard_get_req)                      \
  X(MAILBOX_APPEND, mailbox_append, qim_store_mailbox_append_req)       \
  X(PROGRESS_GET, progress_get, qim_store_progress_get_req)             \
  X(MAILBOX_RANGE, mailbox_range, qim_store_mailbox_range_req)          \
  X(WATERMARK_GET, watermark_get, qim_store_watermark_get_req)          \
  X(WATERMARK_ADVANCE, watermark_advance, qim_store_watermark_advance_req)

typedef enum sq_op_id {
#define SQ_ENUM_(E, n, T) SQ_OP_##E,
  SQ_OPS(SQ_ENUM_)
#undef SQ_ENUM_
      SQ_OP_COUNT
} sq_op_id;

typedef struct sq_store sq_store;

#define SQ_INLINE_CONNS 16 /* connections for reads on workers' own threads (sqlite.c) */

/* A connection and its prepared-statement cache. Used by exactly one thread. */
typedef struct sq_conn {
  sqlite3 *db;
  sq_store *st;
  struct sq_slot *slots; /* open-addressed cache keyed by the SQL text's address */
  size_t slot_cap, slot_n;
  sqlite3_stmt *used[32]; /* statements handed out during the current operation */
  size_t used_n;
  bool used_overflow; /* more than fit in used[]: reset the whole cache */
  /* The writer's batch mode (sqlite.c, "Savepoints"): false runs each operation bare;
   * true runs each under a savepoint of its own, so it can fail alone. */
  bool op_savepoints;
  bool redo; /* set by sq_redo: the operation needs its batch run again with savepoints */
} sq_conn;

/*
 * An operation. exec returns 0 or a status (domain errors raised); storage failures
 * come back as -errno from the helpers below and are translated by the runner into
 * the operation's domain: `unavailable` for a failed statement, `aborted` when SQLite
 * rolled the whole transaction back, `not_durable` when COMMIT failed (0 keeps -errno).
 */
typedef struct sq_op {
  const char *name;
  bool write;
  /* Synchronous validation (-EINVAL) that also clears the outputs `discard` frees, so a
   * request failed before it ran owns nothing; NULL = nothing to check. */
  int (*prepare)(const sq_store *st, qim_store_req *r);
  int (*exec)(sq_conn *c, qim_store_req *r);
  void (*discard)(qim_store_req *r); /* frees outputs of a failed op; NULL = none */
  int unavailable, aborted, not_durable;
} sq_op;

#define SQ_DECLARE_OP_(E, n, T) extern const sq_op sq_op_##n;
SQ_OPS(SQ_DECLARE_OP_)
#undef SQ_DECLARE_OP_

/* Bounded FIFO of requests, linked through req->next_. */
typedef struct sq_queue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  qim_store_req *head, *tail;
  uint32_t count, cap;
  uint32_t waiting; /* consumer threads blocked in queue_take */
  bool closing;
} sq_queue;

/* The background checkpointer (sqlite_checkpoint.c); flags under mu. */
typedef struct sq_ckpt {
  pthread_t thread, writeback;
  sq_conn conn;
  int db_fd; /* the database file, for sync_file_range */
  pthread_mutex_t mu;
  pthread_cond_t cv, wb_cv;       /* work for the checkpointer; a pass copying (write-back) */
  pthread_cond_t done_cv;         /* a round ended (the writer waits at the hard bound) */
  /* Held by whoever copies WAL pages into the database file: the checkpointer for a round
   * and what follows it, the writer for its own copy (which skips a copy it cannot have).
   * A store-memory page set reads the file under it, so it never sees a copy half done. */
  pthread_mutex_t copy_mu;
  bool running, closing, copying; /* running: a round asked for or under way */
  uint64_t copied;                /* WAL frames the last pass left copied */
  bool inited, started, wb_started;
} sq_ckpt;

/* Completions waiting for the sync that makes what they saw durable (sqlite_sync.c). */
typedef struct sq_sync_wait {
  struct sq_sync_wait *next;
  qim_store_req *list; /* linked through next_ */
  size_t n;
  uint64_t commit; /* answered once this COMMIT is durable */
  bool write;      /* a writer batch (or else one read) */
} sq_sync_wait;

/* The syncer: COMMITs return once their frames are written, and it makes them durable. */
typedef struct sq_sync {
  bool on;           /* the thread runs; false: COMMITs sync themselves (no handle) */
  sqlite3_file *wal; /* its own handle on the WAL file */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv, room;  /* work for the syncer; the writer waiting to be less far ahead */
  _Atomic uint64_t begun;   /* COMMITs begun, numbered 1, 2, ... by the writer */
  _Atomic uint64_t durable; /* every COMMIT up to this one is durable (written under mu) */
  uint64_t written;         /* under mu: COMMITs that returned */
  _Atomic bool failed;      /* a sync failed: the store stops (fail-stop) */
  bool closing, inited;
  sq_sync_wait *head, *tail;
} sq_sync;

/* Store-memory mode (sqlite_memory.c): the journal, its segments and the snapshot thread. */
typedef struct sq_memory {
  bool on, inited;
  char *base;              /* the snapshot on the disk (the location's path) */
  char *live;              /* the database in the memory directory */
  char *jdir;              /* base + "-journal": the segments */
  struct sq_capture *cap;  /* the writer's batch, as row changes */
  uint64_t position;       /* writer: the last batch journaled */
  pthread_mutex_t mu;      /* the fields below */
  pthread_cond_t cv;       /* a snapshot is due, or closing */
  int jfd, prev_fd;        /* the segment written; one cut, which the syncer syncs first */
  int spare_fd;            /* snapshot thread: the next segment, laid down (jdir/next) */
  qim_bytes jbuf, prev_buf; /* their records the syncer has still to write */
  uint64_t position_written, since_snapshot, snapshot_bytes;
  uint64_t snapshot_kb; /* from the location (snapshot_kb=); 0 = SNAPSHOT_MIN_BYTES */
  bool snap_due, snap_closing, snap_started;
  bool erase_wanted; /* an erase: the next snapshot copies the WAL up to its cut first */
  pthread_t snap_thread;
  /* The database file's pages written since the last page set (a bitmap under dirty_mu,
   * filled by the VFS). */
  pthread_mutex_t dirty_mu;
  uint8_t *dirty;
  size_t dirty_pages;
  uint32_t page_size;
  char *plog; /* base + "-pages": the page log, the set being written into the base */
} sq_memory;

#define SQ_ERASE_UNPLACED UINT64_MAX

struct sq_store {
  qim_store base;
  qim_store_options opt;
  char *path;
  int64_t max_page_count; /* 0 = SQLite's default */
  sq_queue wq, rq;
  pthread_t writer;
  pthread_t *readers;
  uint32_t reader_count;
  sq_conn wconn;
  sq_conn *rconns;
  /* Connections for reads run on a worker's own thread (submit_inline in sqlite.c): idle
   * ones wait here; at most SQ_INLINE_CONNS exist. */
  pthread_mutex_t inline_mu;
  sq_conn *inline_idle[SQ_INLINE_CONNS];
  uint32_t inline_idle_n, inline_open;
  bool inline_closed;
  uint64_t wal_frames;  /* WAL size after the last commit (writer thread only) */
  bool erase_pending;   /* writer only: content erased since the WAL was last truncated */
  uint64_t truncate_at; /* writer only: when to truncate it even under load (ms) */
  /* Writer only: how often the WAL started over (wal_hook), and in which of those runs the
   * last erase was committed (SQ_ERASE_UNPLACED until its COMMIT; sqlite.c, erase_wiped). */
  uint64_t wal_generation, erase_generation;
  uint32_t wal_frame_bytes; /* a WAL frame: 24-byte header + one page */
  bool wal_cut; /* writer only: the WAL's size limit is one run, not the hard bound (sqlite.c) */
  sq_ckpt ckpt;
  sq_sync sync;
  sq_memory mem;
  uint32_t linger_gain, linger_skipped; /* writer thread only: see linger() in sqlite.c */
  /* Writer thread only: what each (shard, lane) wrote since it last settled, in lane
   * order (sqlite_mailbox.c); a trigger, not a record: it starts at 0 on open. */
  struct sq_unsettled {
    uint32_t entries, batches;
  } *unsettled;
  struct {
    _Atomic uint64_t operations, transactions, fsyncs, failed, rejected, reads, pages;
    _Atomic uint64_t hist[8];
    _Atomic uint64_t by_op[SQ_OP_COUNT];         /* submissions accepted, per operation */
    _Atomic uint64_t op_ns[SQ_OP_COUNT];         /* time spent executing them */
    _Atomic uint64_t commit_ns, commits;         /* writer COMMITs (WAL write + fsync) */
    _Atomic uint64_t lingers, lingered;          /* lingers, and operations they added */
    _Atomic uint64_t redos;                      /* batches run again with savepoints */
    _Atomic uint64_t reads_inline;               /* reads run on the submitting worker's thread */
    _Atomic uint64_t checkpoint_ns, checkpoints; /* the writer's busy checkpoints, wall time */
    _Atomic uint64_t truncate_ns, truncates;     /* its TRUNCATE checkpoints (idle or erase) */
    _Atomic uint64_t erases;          /* operations that erased content (sq_note_erase) */
    _Atomic uint64_t erase_turnovers; /* erases the WAL's turning over wiped (erase_wiped) */
    _Atomic uint64_t bg_checkpoint_ns, bg_checkpoints; /* the checkpointer's passes */
    _Atomic uint64_t ckpt_wait_ns, ckpt_waits;         /* the writer's waits for a round */
    _Atomic uint64_t writebacks;                       /* write-outs started during them */
    _Atomic uint64_t syncs, sync_ns;                   /* the syncer's WAL syncs, wall time */
    _Atomic uint64_t sync_waits;                       /* completions that waited for one */
    _Atomic uint64_t slow_syncs, slow_transactions;    /* those of SQ_SLOW_NS or longer */
  } stats;
};

/* ---- sqlite.c: connections, statements and status mapping ------------------------- */

/* A WAL sync (the syncer's) or a write transaction (the writer's, BEGIN to the end of its
 * COMMIT) that takes this long is logged (store.sqlite.slow_sync, .slow_transaction) and
 * counted: every message behind it waits as long, and 50 ms is what one-to-one's p99 is
 * meant to stay within (bench/README.md). Each takes 50 ms, so neither logs more than 20
 * lines a second. */
#define SQ_SLOW_NS (50u * 1000000u)

/* Monotonic nanoseconds (the system clock of qim/clock.h; vDSO, no system call): what an
 * operation, a COMMIT or a checkpoint holds its thread up, fsyncs included (op_counts). */
static inline uint64_t sq_now_ns(void) {
  return qim_clock_mono_ns(qim_clock_system());
}

/* Opens a connection on the store's file with its tuning: the writer's (WAL, synchronous
 * FULL; also the checkpointer's) or a reader's (query_only, mapped). */
int sq_conn_open(sq_store *st, sq_conn *c, bool writer);
void sq_conn_close(sq_conn *c);

/* An operation on the writer removed or overwrote message content: its old pages stay in
 * the WAL until a truncate, which the writer then runs within QIM_STORE_WIPE_BOUND_MS even
 * if it never pauses. No effect on other connections. */
void sq_note_erase(sq_conn *c);

/* For an operation that has written and then finds it must undo part of its own writes
 * while the writer runs it without a savepoint (c->op_savepoints false): marks the
 * operation and returns a status for it to return. The writer then rolls the transaction
 * back and runs the whole batch again, each operation under a savepoint (sqlite.c,
 * "Savepoints"), where the operation undoes its part with a savepoint of its own. */
int sq_redo(sq_conn *c);

/* A chunk id as stored in dispatch progress blobs: u32 big-endian. */
static inline void sq_chunk_put(uint8_t p[4], uint32_t chunk) {
  for (int k = 0; k < 4; k++) p[k] = (uint8_t)(chunk >> (24 - 8 * k));
}

/* ---- sqlite_checkpoint.c: the background checkpointer ------------------------------ */

/* Opens its connection and starts its thread; sq_ckpt_stop undoes whatever started. */
int sq_ckpt_start(sq_store *st);
void sq_ckpt_stop(sq_store *st);
/* The writer's part, from its WAL hook after each commit that left `frames` in the WAL:
 * asks for a round, copies the remainder after one, or checkpoints itself when the WAL
 * has grown too long. */
void sq_ckpt_after_commit(sq_store *st, sqlite3 *db, const char *name, int frames);
/* How long the WAL grows under writes before it starts over (frames). */
uint64_t sq_ckpt_restart_frames(const sq_store *st);
/* The hard bound: past it the writer copies the whole WAL itself (frames). */
uint64_t sq_ckpt_inline_frames(const sq_store *st);

/* ---- sqlite_sync.c: durability after the COMMIT ------------------------------------- */

/* Opens the syncer's WAL handle and starts its thread; without a handle COMMITs keep
 * syncing themselves (sync.on false). sq_sync_stop makes everything written durable,
 * answers what waited, and stops. */
int sq_sync_start(sq_store *st);
void sq_sync_stop(sq_store *st);
/* The writer, around each COMMIT: begin numbers it and turns the WAL shim's deferral on
 * (first waiting while the writer is too far ahead of the disk); end records that it
 * returned, with or without success. sq_vfs_defer_syncs(false) in between, from the WAL
 * hook, keeps the checkpoints a COMMIT runs there synced as SQLite does them. */
uint64_t sq_sync_commit_begin(sq_store *st);
void sq_sync_commit_end(sq_store *st, uint64_t commit);
/* Completions, settled: posted once COMMIT `commit` is durable (at once if it is). On a
 * failed sync they are failed instead (sq_fail_unsynced). */
void sq_sync_answer(sq_store *st, qim_store_req *list, size_t n, uint64_t commit, bool write);
/* The COMMIT a read that has just ended may have seen: the last one begun. */
static inline uint64_t sq_sync_visible(sq_store *st) {
  return atomic_load(&st->sync.begun);
}
/* A sync failed: every operation fails from then on; reopen the store to go on. */
static inline bool sq_sync_failed(sq_store *st) {
  return atomic_load_explicit(&st->sync.failed, memory_order_acquire);
}

/* sqlite.c, for the syncer: posts settled completions (one wake per queue), and fails a
 * list whose durability was not confirmed. */
void sq_post_batch(qim_store_req *list, size_t n);
void sq_fail_unsynced(sq_store *st, qim_store_req *list, bool write);

/* A cached statement for `sql` (a string literal: the cache is keyed by its address),
 * reset and unbound, or NULL (then sq_last_error gives the status). The statement is
 * reset again when the operation ends, so it never pins a read snapshot. */
sqlite3_stmt *sq_prep(sq_conn *c, const char *sql);
/* Runs SQL without results on `db` (a store connection's, or the copy a conversion back
 * from store-memory mode replays into); on failure logs `event` with SQLite's message.
 * 0 or -errno. */
int sq_exec_logged(sqlite3 *db, const char *sql, const char *event);
/* The integer a `PRAGMA name` returns; 0 or -errno. */
int sq_pragma_int(sq_conn *c, const char *name, int *out);
/* Resets every statement the current operation used so far: a nested savepoint can only
 * be released once none is still stepping. Their rows are gone after it. */
void sq_reset_used(sq_conn *c);
/* -errno for an SQLite result code (SQLITE_FULL → -ENOSPC, IOERR → -EIO, ...). */
int sq_errno(int sqlite_rc);
/* The -errno for the connection's last error; always negative, and inline so the compiler
 * sees that: a caller returning it after a failed sq_prep never reads what it did not fill. */
static inline int sq_last_error(sq_conn *c) {
  int rc = sq_errno(sqlite3_errcode(c->db));
  return rc < 0 ? rc : -EIO;
}
/* Steps once: 1 = a row, 0 = done, <0 = -errno. */
int sq_step(sq_conn *c, sqlite3_stmt *st);
/* Steps a statement that returns no rows: 0 or -errno. */
int sq_run(sq_conn *c, sqlite3_stmt *st);
/* Steps a lookup that must find its row: 0 = the row is current, -ENOENT = no row, or
 * -errno. */
int sq_step_row(sq_conn *c, sqlite3_stmt *st);
/* Steps a one-row aggregate (min, max) of u64 values: *out is its value, UINT64_MAX when
 * NULL (no rows); 0 or -errno. */
int sq_step_u64_or_max(sq_conn *c, sqlite3_stmt *st, uint64_t *out);
/* Runs an UPDATE that must match a row: 0, -ENOENT when it matched none, or -errno. */
int sq_run_matched(sq_conn *c, sqlite3_stmt *st);
/* Rows changed by the last statement. */
static inline int sq_changes(sq_conn *c) {
  return sqlite3_changes(c->db);
}

/* Binding and reading ids: 16-byte big-endian blobs, so they sort like the numbers. */
void sq_bind_u128(sqlite3_stmt *st, int i, qim_u128 v);
void sq_bind_id16(sqlite3_stmt *st, int i, const uint8_t b[16]);
/* A conversation's key: the tenant at `first`, the conversation at first + 1. */
static inline void sq_bind_conv(sqlite3_stmt *st, int first, qim_tenant_id t,
                                qim_conversation_id conv) {
  sq_bind_u128(st, first, t.v);
  sq_bind_u128(st, first + 1, conv.v);
}
/* SQLite integers are signed: a u64 above 2^63-1 is bound as 2^63-1. No quantity the
 * store keeps gets there (seqs, offsets, mailbox seqs, millis), and for a bound in a query
 * (up_to_seq = UINT64_MAX, "everything") the clamped value means the same. */
static inline void sq_bind_u64(sqlite3_stmt *st, int i, uint64_t v) {
  sqlite3_bind_int64(st, i, v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v);
}
/* NULL binds SQL NULL. */
void sq_bind_text(sqlite3_stmt *st, int i, const char *s);
/* Bytes bound without a copy: they must stay valid until the statement's last step. */
void sq_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n);
qim_u128 sq_col_u128(sqlite3_stmt *st, int i);
void sq_col_id16(sqlite3_stmt *st, int i, uint8_t out[16]);
static inline uint64_t sq_col_u64(sqlite3_stmt *st, int i) {
  return (uint64_t)sqlite3_column_int64(st, i);
}
/* A qim_malloc'd copy, or NULL for SQL NULL. */
char *sq_col_text(sqlite3_stmt *st, int i);
void sq_col_bytes(sqlite3_stmt *st, int i, qim_bytes *out);

/* The stream id stored in the log tables: 0 = outbox, 2^32 | shard = a dispatch stream. */
static inline int64_t sq_stream_id(qim_log_stream s) {
  return s.kind == QIM_LOG_STREAM_OUTBOX ? 0 : (INT64_C(1) << 32) | s.shard;
}
/* A log record's row: its stream's slot (0 = outbox, 1 + shard = a dispatch stream) above
 * the offset's 40 bits, so a stream's records are one ascending run of rowids and a read
 * or a trim is a range of the table itself, with no index beside it (schema 7). Offsets
 * stay below 2^40 (the dispatch offset is a MailboxSeq's low 40 bits; an outbox offset
 * that would pass it fails, CommitLogError::Unavailable), and the slot fits the 23 bits
 * above them. */
#define SQ_LOG_OFFSET_BITS 40
#define SQ_LOG_OFFSET_MAX ((UINT64_C(1) << SQ_LOG_OFFSET_BITS) - 1)
#define SQ_LOG_SHARDS_MAX ((UINT32_C(1) << 22))
static inline int64_t sq_log_pos(int64_t stream, uint64_t offset) {
  int64_t slot = stream ? (stream & INT64_C(0xffffffff)) + 1 : 0;
  return (int64_t)((uint64_t)slot << SQ_LOG_OFFSET_BITS | offset);
}
static inline uint64_t sq_log_pos_offset(int64_t pos) { return (uint64_t)pos & SQ_LOG_OFFSET_MAX; }
/* The first row past the stream's run (offset 2^40, which no record has). */
static inline int64_t sq_log_pos_end(int64_t stream) {
  return sq_log_pos(stream, 0) + (INT64_C(1) << SQ_LOG_OFFSET_BITS);
}
/* A stream of this store: the outbox, or the dispatch stream of a configured shard. */
static inline bool sq_stream_valid(const sq_store *st, qim_log_stream s) {
  if (s.kind == QIM_LOG_STREAM_OUTBOX) return true;
  return s.kind == QIM_LOG_STREAM_MAILBOX_DISPATCH && s.shard < st->opt.shards.shard_count;
}

/* Sentinel "open" end of a versioned membership row. */
#define SQ_VERSION_OPEN INT64_MAX

/* ---- cross-domain helpers (each defined in its domain's file) -------------------------- */

/* sqlite_logs.c: one append inside the current transaction; key NULL = a fence record.
 * A repeated key returns the first position with *existed = true. */
int sq_log_append_one(sq_conn *c, qim_log_stream stream, const uint8_t key[16],
                      const qim_bytes *payload, bool fence, uint64_t *offset,
                      qim_shard_epoch *epoch, bool *existed);
/* sqlite_logs.c: the payload of the record at `offset` of a stream (-ENOENT: none). */
int sq_log_payload_at(sq_conn *c, qim_log_stream stream, uint64_t offset, qim_bytes *out);
/* sqlite_mailbox.c: the shard's current epoch (0 before the first takeover). */
int sq_shard_epoch(sq_conn *c, qim_mailbox_shard_id shard, qim_shard_epoch *epoch);
/* sqlite_mailbox.c: drops the content of every mailbox entry of one message. */
int sq_mailbox_wipe_message(sq_conn *c, const qim_message_id *message_id);
/* sqlite_logs.c: drops the body of one message from the outbox envelope and the mailbox
 * dispatch of every shard that holds one (deleted means gone; history.set_state). */
int sq_logs_wipe_message(sq_conn *c, const qim_message_id *message_id);
/* sqlite_intents.c: the outbox offset of the earliest intent still Outboxed, whose commit
 * reads its record back (UINT64_MAX: none). Scans the in-flight index: only intents not
 * yet Committed, a window's worth at most. */
int sq_intents_lowest_outboxed(sq_conn *c, uint64_t *out);
/* sqlite_intents.c: drops the record content from the stored intent of a message. */
int sq_intent_wipe_body(sq_conn *c, const qim_commit_key *key);
/* sqlite_history.c: empties a record's content in place (type and schema version kept). */
void sq_content_wipe(qim_message_content *content);
/* sqlite_conv.c: the target shards of the current membership, ascending. */
int sq_conv_target_shards(sq_conn *c, qim_tenant_id t, qim_conversation_id conv,
                          qim_mailbox_shard_id **out, size_t *count);
/* sqlite_conv.c: true when `user` is a current member of the conversation; with `writer`
 * also not banned and holding W in both its wanted and its given mode. */
int sq_member_may_send(sq_conn *c, qim_tenant_id t, qim_conversation_id conv, qim_user_id user,
                       bool writer, bool *out);
/* sqlite_conv.c: the member's read and recv move up to `seq` (forward only; the caller
 * knows seq is at most the conversation's latest_seq). */
int sq_member_read_up_to(sq_conn *c, qim_tenant_id t, qim_conversation_id conv, qim_user_id user,
                         qim_conversation_seq seq);

/* sqlite_vfs.c: the name of a VFS that gathers WAL appends into one write per sync on
 * top of VFS `base` (NULL: the default), registering it on first use; `base` itself when
 * that is not possible. */
const char *sq_vfs_wal_gather(const char *base);
/* While on, this thread's WAL syncs write the shim's buffer out but leave the fdatasync to
 * the store's syncer. */
void sq_vfs_defer_syncs(bool on);
/* A handle of its own on the (existing) WAL file of connection `db`, through the VFS under
 * the shim, for the syncer: SQLITE_OK or an SQLite error. */
int sq_vfs_sync_open(sqlite3 *db, sqlite3_file **out);
void sq_vfs_sync_close(sqlite3_file *f);
/* Main database files named like `path` (its last component), opened through the shim from
 * now on, report each write (offset, length) to fn before it is made, and map no pages.
 * 0, or -ENOSPC when four are followed already. sq_vfs_untrack_writes forgets ctx's. */
typedef void (*sq_vfs_write_fn)(void *ctx, sqlite3_int64 off, int n);
int sq_vfs_track_writes(const char *path, sq_vfs_write_fn fn, void *ctx);
void sq_vfs_untrack_writes(void *ctx);

/* sqlite_pcache.c: makes SQLite's default page cache, behind a truncate that skips what
 * cannot remove a page, the process's page cache (before sqlite3_initialize; an SQLite
 * result code). sq_pcache_counts: the truncates asked for since and those passed on. */
int sq_pcache_install(void);
void sq_pcache_counts(uint64_t *all, uint64_t *walked);

/* sqlite_schema.c: fills the fields of `shards` left 0 from the database's own layout,
 * or with QIM_STORE_DEFAULT_* when it has none yet (a new file). */
int sq_schema_layout(sq_conn *c, qim_shard_config *shards);

/* ---- sqlite_capture.c: a transaction's row changes as bytes, applied again -------------- */

typedef struct sq_capture sq_capture;
typedef struct sq_replay sq_replay;
/* Starts recording every row change on `db` (its pre-update hook) against the tables its
 * schema has now: 0 or -errno. sq_capture_free removes the hook. */
int sq_capture_new(sqlite3 *db, sq_capture **out);
void sq_capture_free(sq_capture *cap);
/* The connection's owner tells the capture about its savepoints, so what a ROLLBACK TO
 * undoes leaves the bytes too (the hook has already seen it). NULL does nothing. */
void sq_capture_savepoint(sq_capture *cap);
void sq_capture_release(sq_capture *cap);
void sq_capture_rollback_to(sq_capture *cap);
/* Empties it: the transaction rolled back, or its bytes were taken. */
void sq_capture_clear(sq_capture *cap);
/* The bytes so far: 0, or -EPROTO when a change could not be recorded (a table or column
 * that appeared after sq_capture_new, or savepoints nested too deep). */
int sq_capture_bytes(const sq_capture *cap, const uint8_t **p, size_t *n);
/* Applies captured bytes on `db` (same schema), in the caller's transaction: 0, -EINVAL
 * for bytes that do not decode, or -errno. */
int sq_replay_new(sqlite3 *db, sq_replay **out);
int sq_replay_apply(sq_replay *y, const uint8_t *p, size_t n);
void sq_replay_free(sq_replay *y);

/* ---- sqlite_memory.c: store-memory mode ------------------------------------------------- */

/* Opening without memory=: -EEXIST (logged) when `path` is a store-memory store (its
 * journal directory holds a commit): its file lacks what the journal holds, so opening it
 * as a plain database would lose acknowledged writes. 0 otherwise, a journal directory
 * that holds none removed first. */
int sq_memory_refuse_plain(const char *path);
/* Opening with from_memory=1: a store-memory store at `path` made a default store again
 * (its pending page set and every journal record above the base's position applied, the
 * journal and page log removed); 0 at once when `path` has no journal directory. */
int sq_memory_leave(const char *path);
/* Opening: the snapshot at st->path copied into `memdir`, st->path now the copy there. */
int sq_memory_prepare(sq_store *st, const char *memdir);
/* After the schema's migrations: the journal's records above the snapshot applied. */
int sq_memory_replay(sq_store *st);
/* Capture on the writer's connection, the first segment, the snapshot thread. */
int sq_memory_start(sq_store *st);
/* The writer, inside a batch's transaction just before its COMMIT (the batch's position
 * into `meta`), and after a COMMIT that succeeded (its record appended): 0 or -errno. */
int sq_memory_before_commit(sq_conn *c);
int sq_memory_after_commit(sq_store *st);
/* The syncer: makes every record written so far durable. 0 or -errno. */
int sq_memory_sync(sq_store *st);
/* An erase: a snapshot soon, so the segments holding the erased content go. */
void sq_memory_note_erase(sq_store *st);
/* The checkpointer, after each round: reads the changed pages when a snapshot wants them. */
/* One snapshot now (the snapshot thread; tests). */
int sq_memory_snapshot(sq_store *st);
void *sq_memory_snapshot_main(void *arg);
/* Closing: the thread and the capture (before the connections close), then the rest. */
void sq_memory_stop(sq_store *st);
void sq_memory_free(sq_store *st);

/* sqlite.c: schema creation and migrations on the writer connection. */
int sq_schema_migrate(sq_conn *c, const qim_shard_config *shards);

#endif
