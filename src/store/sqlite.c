/*
 * sqlite.c — the embedded SQLite backend: opening, threads, bounded queues, group
 * commit and the per-connection statement cache. The operations themselves live in the
 * domain files (sqlite_accounts.c ... sqlite_mailbox.c); see sqlite_int.h.
 *
 * Write path. Callers queue requests on a bounded FIFO (full → -EAGAIN at once). The one
 * writer thread takes everything queued (up to max_batch) and runs it as ONE transaction:
 * BEGIN IMMEDIATE, then each operation, which fails alone: bare, or under a savepoint of
 * its own when it must undo its writes ("Savepoints" below). SQLite may instead roll back
 * the whole transaction (SQLITE_FULL, IOERR, BUSY, NOMEM can); sqlite3_get_autocommit()
 * tells, and then every operation of the batch fails — none is reported done. Otherwise
 * one COMMIT writes the batch to the WAL and the syncer (sqlite_sync.c) makes it durable,
 * and only then are completions posted to the callers' queues: durability before
 * acknowledgement. A failed COMMIT fails the whole batch. The batch is not retried:
 * callers retry idempotently.
 *
 * Read path. Reader threads, each with its own connection, take one request at a time
 * and run it inside a read transaction (WAL gives it a stable snapshot while the writer
 * keeps committing); its answer, too, waits until what it could have seen is durable.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>

#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "store/sqlite_int.h"

#define DEFAULT_QUEUE_CAPACITY 4096
#define DEFAULT_READERS 2
#define DEFAULT_MAX_BATCH 512
#define DEFAULT_CHECKPOINT_FRAMES 16000
#define DEFAULT_SETTLE_ENTRIES 16384
#define MAX_READERS 64
/* An idle writer truncates the WAL after this long, so overwritten (deleted) content
 * does not linger in old WAL frames (DESIGN.md §1 rule 7). */
#define IDLE_CHECKPOINT_MS 1000
#define IDLE_CHECKPOINT_WAIT_MS 50
/* A writer that is never idle truncates it this long after an operation erased content
 * (sq_note_erase), which bounds how long a wiped body survives in the WAL under load
 * (store.h: QIM_STORE_WIPE_BOUND_MS); a truncate that readers or the checkpointer held
 * off is tried again ERASE_RETRY_MS later. */
#define ERASE_TRUNCATE_MS 3000
#define ERASE_RETRY_MS 250
#define BUSY_TIMEOUT_MS 2000

static const sq_op *const ops[SQ_OP_COUNT] = {
#define SQ_TABLE_(E, n, T) [SQ_OP_##E] = &sq_op_##n,
    SQ_OPS(SQ_TABLE_)
#undef SQ_TABLE_
};

/* ---- statement cache ----------------------------------------------------------------- */

struct sq_slot {
  const char *sql;
  sqlite3_stmt *st;
};

static size_t slot_hash(const char *sql, size_t cap) {
  uintptr_t h = (uintptr_t)sql;
  h ^= h >> 17;
  h *= UINT64_C(0x9E3779B97F4A7C15) & UINTPTR_MAX;
  return (size_t)(h >> 7) & (cap - 1);
}

static void slot_put(struct sq_slot *slots, size_t cap, const char *sql, sqlite3_stmt *st) {
  size_t i = slot_hash(sql, cap);
  while (slots[i].sql) i = (i + 1) & (cap - 1);
  slots[i] = (struct sq_slot){sql, st};
}

static void cache_grow(sq_conn *c) {
  size_t cap = c->slot_cap ? c->slot_cap * 2 : 64;
  struct sq_slot *slots = qim_calloc(cap, sizeof *slots);
  for (size_t i = 0; i < c->slot_cap; i++)
    if (c->slots[i].sql) slot_put(slots, cap, c->slots[i].sql, c->slots[i].st);
  qim_free(c->slots);
  c->slots = slots;
  c->slot_cap = cap;
}

static sqlite3_stmt *cache_get(sq_conn *c, const char *sql) {
  if (!c->slot_cap) return NULL;
  for (size_t i = slot_hash(sql, c->slot_cap); c->slots[i].sql; i = (i + 1) & (c->slot_cap - 1))
    if (c->slots[i].sql == sql) return c->slots[i].st;
  return NULL;
}

static void track_used(sq_conn *c, sqlite3_stmt *st);

sqlite3_stmt *sq_prep(sq_conn *c, const char *sql) {
  sqlite3_stmt *st = cache_get(c, sql);
  if (!st) {
    int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
      QIM_LOGE(NULL, "store.sqlite.prepare", "rc=%d msg=\"%s\"", rc, sqlite3_errmsg(c->db));
      return NULL;
    }
    if ((c->slot_n + 1) * 2 > c->slot_cap) cache_grow(c);
    slot_put(c->slots, c->slot_cap, sql, st);
    c->slot_n++;
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  track_used(c, st);
  return st;
}

/* Remembers a statement handed out during the current operation (once). */
static void track_used(sq_conn *c, sqlite3_stmt *st) {
  for (size_t i = 0; i < c->used_n; i++)
    if (c->used[i] == st) return;
  if (c->used_n < sizeof c->used / sizeof c->used[0])
    c->used[c->used_n++] = st;
  else
    c->used_overflow = true;
}

/* Resets every statement the operation used: no statement outlives its operation (an
 * active statement would pin a read snapshot or keep a cursor open across COMMIT). */
static void release_used(sq_conn *c) {
  for (size_t i = 0; i < c->used_n; i++) sqlite3_reset(c->used[i]);
  if (c->used_overflow)
    for (size_t i = 0; i < c->slot_cap; i++)
      if (c->slots[i].sql) sqlite3_reset(c->slots[i].st);
  c->used_n = 0;
  c->used_overflow = false;
}

void sq_reset_used(sq_conn *c) {
  release_used(c);
}

static void cache_free(sq_conn *c) {
  for (size_t i = 0; i < c->slot_cap; i++)
    if (c->slots[i].sql) sqlite3_finalize(c->slots[i].st);
  qim_free(c->slots);
  c->slots = NULL;
  c->slot_cap = c->slot_n = 0;
}

/* ---- status mapping and small helpers ---------------------------------------------------- */

int sq_errno(int rc) {
  switch (rc & 0xFF) {
    case SQLITE_OK:
      return 0;
    case SQLITE_FULL:
      return -ENOSPC;
    case SQLITE_NOMEM:
      return -ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return -EBUSY;
    case SQLITE_CONSTRAINT:
      return -EEXIST;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return -EACCES;
    case SQLITE_CANTOPEN:
      return -ENOENT;
    case SQLITE_TOOBIG:
      return -E2BIG;
    case SQLITE_ABORT:
    case SQLITE_INTERRUPT:
      return -ECANCELED;
    default:
      return -EIO;
  }
}

int sq_step(sq_conn *c, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) return 0;
  if ((rc & 0xFF) != SQLITE_CONSTRAINT)
    QIM_LOGW(NULL, "store.sqlite.step", "rc=%d msg=\"%s\"", sqlite3_extended_errcode(c->db),
             sqlite3_errmsg(c->db));
  return sq_errno(rc);
}

int sq_run(sq_conn *c, sqlite3_stmt *st) {
  int rc = sq_step(c, st);
  return rc > 0 ? 0 : rc;
}

int sq_step_row(sq_conn *c, sqlite3_stmt *st) {
  int rc = sq_step(c, st);
  return rc > 0 ? 0 : rc < 0 ? rc : -ENOENT;
}

int sq_step_u64_or_max(sq_conn *c, sqlite3_stmt *st, uint64_t *out) {
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  *out = rc == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL ? sq_col_u64(st, 0) : UINT64_MAX;
  return 0;
}

int sq_run_matched(sq_conn *c, sqlite3_stmt *st) {
  int rc = sq_run(c, st);
  if (rc) return rc;
  return sqlite3_changes(c->db) ? 0 : -ENOENT;
}

void sq_bind_u128(sqlite3_stmt *st, int i, qim_u128 v) {
  uint8_t b[16];
  for (int k = 0; k < 8; k++) {
    b[k] = (uint8_t)(v.hi >> (56 - 8 * k));
    b[8 + k] = (uint8_t)(v.lo >> (56 - 8 * k));
  }
  sqlite3_bind_blob(st, i, b, 16, SQLITE_TRANSIENT);
}

void sq_bind_id16(sqlite3_stmt *st, int i, const uint8_t b[16]) {
  sqlite3_bind_blob(st, i, b, 16, SQLITE_TRANSIENT);
}

void sq_bind_text(sqlite3_stmt *st, int i, const char *s) {
  if (s)
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

void sq_bind_blob(sqlite3_stmt *st, int i, const void *p, size_t n) {
  /* zeroblob semantics for empty input: a non-NULL empty blob. */
  sqlite3_bind_blob64(st, i, n ? p : "", n, SQLITE_STATIC);
}

qim_u128 sq_col_u128(sqlite3_stmt *st, int i) {
  uint8_t b[16];
  sq_col_id16(st, i, b);
  qim_u128 v = {0, 0};
  for (int k = 0; k < 8; k++) {
    v.hi = (v.hi << 8) | b[k];
    v.lo = (v.lo << 8) | b[8 + k];
  }
  return v;
}

void sq_col_id16(sqlite3_stmt *st, int i, uint8_t out[16]) {
  const void *p = sqlite3_column_blob(st, i);
  int n = sqlite3_column_bytes(st, i);
  memset(out, 0, 16);
  if (p && n == 16) memcpy(out, p, 16);
}

char *sq_col_text(sqlite3_stmt *st, int i) {
  if (sqlite3_column_type(st, i) == SQLITE_NULL) return NULL;
  const unsigned char *s = sqlite3_column_text(st, i);
  return qim_strndup((const char *)s, (size_t)sqlite3_column_bytes(st, i));
}

void sq_col_bytes(sqlite3_stmt *st, int i, qim_bytes *out) {
  const void *p = sqlite3_column_blob(st, i);
  size_t n = (size_t)sqlite3_column_bytes(st, i);
  out->p = n ? qim_memdup(p, n) : NULL;
  out->n = n;
}

/* One statement through the cache, for transaction control: 0 or -errno. */
static int exec_cached(sq_conn *c, const char *sql) {
  sqlite3_stmt *st = sq_prep(c, sql);
  int rc = st ? sq_run(c, st) : sq_last_error(c);
  release_used(c);
  return rc;
}

/* ---- completion ------------------------------------------------------------------------ */

static void run_done(qim_cq_item *it) {
  qim_store_req *r = (qim_store_req *)it; /* `item` is the first member of the request */
  r->done(r);
}

/* Sets the final status; a failed operation owns no outputs. */
static void settle(sq_store *st, qim_store_req *r, int status) {
  r->status = status;
  r->error.code = status;
  if (status != 0) {
    const sq_op *op = ops[r->op_];
    if (op->discard) op->discard(r);
    if (op->write) atomic_fetch_add(&st->stats.failed, 1);
  }
}

/*
 * Posts a batch's completions, one chain per completion queue in batch order: a caller
 * with several requests in the batch (a message's reserve and advances) is woken once.
 * Waking dozens of threads is a real share of a batch's time on a busy machine.
 */
typedef struct cq_chain {
  qim_cq *cq;
  qim_cq_item *first, *last;
} cq_chain;

void sq_post_batch(qim_store_req *list, size_t n) {
  cq_chain stack[64];
  cq_chain *chains = n <= 64 ? stack : qim_malloc(n * sizeof *chains);
  size_t k = 0;
  for (qim_store_req *r = list; r; r = r->next_) {
    r->item.run = run_done;
    r->item.next = NULL;
    size_t i = 0;
    while (i < k && chains[i].cq != r->cq) i++;
    if (i == k)
      chains[k++] = (cq_chain){r->cq, &r->item, &r->item};
    else
      chains[i].last = chains[i].last->next = &r->item;
  }
  /* From here on any request may be freed by its owner: only the chains are touched. */
  for (size_t i = 0; i < k; i++) qim_cq_post_chain(chains[i].cq, chains[i].first, chains[i].last);
  if (chains != stack) qim_free(chains);
}

/* A storage failure (-errno other than the plain semantic ones) in the op's domain. */
static int domain_status(int status, int code) {
  if (status >= 0 || qim_err_is_domain(status)) return status;
  if (status == -ENOENT || status == -EEXIST || status == -EINVAL) return status;
  return code ? qim_err_raise(code) : status;
}

/* What succeeded fails: writes as not durable, reads as unavailable. */
void sq_fail_unsynced(sq_store *st, qim_store_req *list, bool write) {
  for (qim_store_req *r = list; r; r = r->next_) {
    if (r->status != 0) continue; /* failed on its own, outputs already discarded */
    const sq_op *op = ops[r->op_];
    settle(st, r, domain_status(-EIO, write ? op->not_durable : op->unavailable));
  }
}

/* Every request of a list fails as unavailable, unrun: the store stopped (sqlite_sync.c). */
static void fail_stopped(sq_store *st, qim_store_req *list, size_t n) {
  for (qim_store_req *r = list; r; r = r->next_) {
    r->error = (qim_error){0};
    settle(st, r, domain_status(-EIO, ops[r->op_]->unavailable));
  }
  sq_post_batch(list, n);
}

/* ---- queues ------------------------------------------------------------------------------ */

static int queue_init(sq_queue *q, uint32_t cap) {
  memset(q, 0, sizeof *q);
  q->cap = cap;
  int rc = pthread_mutex_init(&q->mu, NULL);
  if (rc) return -rc;
  rc = pthread_cond_init(&q->cv, NULL);
  if (rc) {
    pthread_mutex_destroy(&q->mu);
    return -rc;
  }
  return 0;
}

static void queue_destroy(sq_queue *q) {
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}

static int queue_push(sq_store *st, sq_queue *q, qim_store_req *r) {
  pthread_mutex_lock(&q->mu);
  if (q->closing) {
    pthread_mutex_unlock(&q->mu);
    return -ESHUTDOWN;
  }
  if (q->count >= q->cap) {
    pthread_mutex_unlock(&q->mu);
    atomic_fetch_add(&st->stats.rejected, 1);
    return -EAGAIN;
  }
  r->next_ = NULL;
  if (q->tail)
    q->tail->next_ = r;
  else
    q->head = r;
  q->tail = r;
  q->count++;
  /* A consumer that is busy will find the request when it comes back: only a sleeping
   * one is woken, and after the unlock, so it does not wake straight into our mutex.
   * (Submitting while the store closes is not allowed, so the queue outlives this.) */
  bool wake = q->waiting > 0;
  pthread_mutex_unlock(&q->mu);
  if (wake) pthread_cond_signal(&q->cv);
  return 0;
}

/* Takes up to `max` requests; blocks until one is queued, the queue closes (returns 0
 * with nothing taken) or the CLOCK_REALTIME `deadline` passes (*timed_out); a NULL
 * deadline waits for ever. */
static size_t queue_take_until(sq_queue *q, uint32_t max, qim_store_req **out,
                               const struct timespec *deadline, bool *timed_out) {
  *timed_out = false;
  pthread_mutex_lock(&q->mu);
  q->waiting++;
  if (!q->head && !q->closing && deadline) {
    while (!q->head && !q->closing)
      if (pthread_cond_timedwait(&q->cv, &q->mu, deadline) == ETIMEDOUT) break;
    *timed_out = !q->head && !q->closing;
  }
  while (!q->head && !q->closing && !deadline) pthread_cond_wait(&q->cv, &q->mu);
  q->waiting--;
  qim_store_req *head = q->head, *last = NULL, *r = head;
  size_t n = 0;
  while (r && n < max) last = r, r = r->next_, n++;
  if (n) {
    q->head = r;
    if (!r) q->tail = NULL;
    last->next_ = NULL;
    q->count -= (uint32_t)n;
  }
  pthread_mutex_unlock(&q->mu);
  *out = n ? head : NULL;
  return n;
}

/* queue_take_until with a timeout in ms; timeout_ms < 0 waits for ever. */
static size_t queue_take(sq_queue *q, uint32_t max, qim_store_req **out, int timeout_ms,
                         bool *timed_out) {
  struct timespec ts;
  if (timeout_ms >= 0) ts = qim_deadline_after_ms(CLOCK_REALTIME, timeout_ms);
  return queue_take_until(q, max, out, timeout_ms >= 0 ? &ts : NULL, timed_out);
}

static void queue_close(sq_queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closing = true;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* ---- the writer: group commit ---------------------------------------------------------- */

static unsigned hist_bucket(size_t n) {
  static const size_t upper[7] = {1, 3, 7, 15, 63, 255, 1023};
  for (unsigned i = 0; i < 7; i++)
    if (n <= upper[i]) return i;
  return 7;
}

/*
 * Savepoints. An operation that fails must fail alone, so the others of its batch still
 * commit. A savepoint around each operation gives that, but SQLite then copies every page
 * the operation changes into its in-memory statement journal first (4-KiB copies and
 * 1-KiB chunk allocations): 12 % of the writer thread's samples at 3,000 one-to-one
 * msgs/s, for a rollback almost no operation needs. So a batch runs bare: an operation that
 * fails without having changed a row (sqlite3_total_changes64; most failures are checks
 * made before any write) leaves nothing to undo. One that fails after writing, or asks
 * for it (sq_redo), costs the batch a ROLLBACK, and the batch runs again from its start
 * with a savepoint per operation, where it fails alone as before. Operations are pure
 * functions of the database and their inputs; a request's outputs are reset in between
 * by its op's discard and prepare.
 */
typedef enum { RUN_OK, RUN_LOST, RUN_REDO } run_result;

int sq_redo(sq_conn *c) {
  c->redo = true;
  return -ECANCELED;
}

/* Runs one operation, under its savepoint when c->op_savepoints. RUN_LOST: SQLite lost the
 * whole transaction (the op's status is then left for fail_batch); RUN_REDO: it failed
 * having written, with no savepoint to undo it. */
static run_result run_op(sq_conn *c, qim_store_req *r) {
  const sq_op *op = ops[r->op_];
  uint64_t t0 = sq_now_ns();
  r->error = (qim_error){0};
  if (c->op_savepoints && exec_cached(c, "SAVEPOINT op")) return RUN_LOST;
  if (c->op_savepoints) sq_capture_savepoint(c->st->mem.cap);
  sqlite3_int64 changes = sqlite3_total_changes64(c->db);
  c->redo = false;
  int status = op->exec(c, r);
  release_used(c);
  atomic_fetch_add_explicit(&c->st->stats.op_ns[r->op_], sq_now_ns() - t0, memory_order_relaxed);
  if (sqlite3_get_autocommit(c->db)) {
    r->status = 0; /* not its own failure: fail_batch reports the lost transaction */
    return RUN_LOST;
  }
  if (status == 0) {
    r->status = 0;
    if (!c->op_savepoints) return RUN_OK;
    sq_capture_release(c->st->mem.cap);
    return exec_cached(c, "RELEASE op") == 0 ? RUN_OK : RUN_LOST;
  }
  r->status = domain_status(status, op->unavailable);
  if (!c->op_savepoints)
    return c->redo || sqlite3_total_changes64(c->db) != changes ? RUN_REDO : RUN_OK;
  sq_capture_rollback_to(c->st->mem.cap);
  sq_capture_release(c->st->mem.cap);
  if (exec_cached(c, "ROLLBACK TO op") || exec_cached(c, "RELEASE op")) return RUN_LOST;
  return sqlite3_get_autocommit(c->db) ? RUN_LOST : RUN_OK;
}

/* Runs the requests from `r` on; *ran counts those begun, *tail is the last that ran. */
static run_result run_ops(sq_conn *c, qim_store_req *r, size_t *ran, qim_store_req **tail) {
  run_result res = RUN_OK;
  for (; res == RUN_OK && r; r = r->next_) {
    ++*ran;
    res = run_op(c, r);
    *tail = r;
  }
  return res;
}

/* The batch again from its start, each operation under a savepoint (see "Savepoints"). */
static run_result redo(sq_store *st, sq_conn *c, qim_store_req *list, size_t *ran) {
  atomic_fetch_add_explicit(&st->stats.redos, 1, memory_order_relaxed);
  sq_capture_clear(st->mem.cap);
  if (exec_cached(c, "ROLLBACK")) return RUN_LOST;
  for (qim_store_req *r = list; r; r = r->next_) {
    const sq_op *op = ops[r->op_];
    if (op->discard) op->discard(r);
    if (op->prepare) op->prepare(st, r); /* as at submit, where it returned 0 */
  }
  *ran = 0;
  qim_store_req *tail = NULL;
  c->op_savepoints = true;
  run_result res = exec_cached(c, "BEGIN IMMEDIATE") == 0 ? run_ops(c, list, ran, &tail) : RUN_LOST;
  c->op_savepoints = false;
  return res;
}

/* Fails every op of a lost batch, except those that already failed on their own. */
static void fail_batch(qim_store_req *list, size_t ran, bool commit_failed) {
  size_t i = 0;
  for (qim_store_req *r = list; r; r = r->next_, i++) {
    if (i < ran && r->status != 0) continue;
    const sq_op *op = ops[r->op_];
    int code = commit_failed ? op->not_durable : op->aborted;
    r->status = domain_status(-EIO, code);
  }
}

/*
 * The linger. A COMMIT costs this machine far more than an operation (its fsync and the
 * WAL pages every transaction rewrites: the tails of the logs and indexes, the B-tree
 * paths), so under a steady stream of writes a transaction that stays open a little
 * longer takes the operations that arrive meanwhile, executing each as it comes, and one
 * COMMIT serves them all. Only the COMMIT waits: nothing queued is held back. Whether it
 * pays is measured: `linger_gain` is a moving average (x16) of the operations each linger
 * gathered; when it falls below one (a lone client whose next write waits for this
 * one's answer), the writer commits at once and tries lingering again every 32nd batch.
 */
#define LINGER_PROBE_EVERY 32

static bool linger_wanted(sq_store *st, size_t n) {
  if (!st->opt.commit_linger_us || n >= st->opt.max_batch) return false;
  return st->linger_gain >= 16 || ++st->linger_skipped % LINGER_PROBE_EVERY == 0;
}

/* Runs what arrives until the linger ends or the batch is full; *tail is the last request
 * of the batch so far, *n and *ran its size and how many ran (as run_ops). */
static run_result linger(sq_store *st, sq_conn *c, qim_store_req **tail, size_t *n, size_t *ran) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)st->opt.commit_linger_us * 1000u;
  deadline.tv_sec += (time_t)(ns / 1000000000u);
  deadline.tv_nsec = (long)(ns % 1000000000u);
  size_t gained = 0;
  run_result res = RUN_OK;
  bool timed_out = false;
  while (res == RUN_OK && !timed_out && *n < st->opt.max_batch) {
    qim_store_req *more;
    size_t k = queue_take_until(&st->wq, st->opt.max_batch - (uint32_t)*n, &more, &deadline, &timed_out);
    if (!k) break;
    (*tail)->next_ = more;
    *n += k;
    gained += k;
    res = run_ops(c, more, ran, tail);
  }
  st->linger_gain = st->linger_gain - st->linger_gain / 16 + (uint32_t)(gained > 64 ? 64 : gained);
  atomic_fetch_add_explicit(&st->stats.lingers, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->stats.lingered, gained, memory_order_relaxed);
  return res;
}

/* A transaction of SQ_SLOW_NS or longer is logged with how long it ran, how much of that its
 * COMMIT took (writing its frames, a wait for the syncer when the writer is 64 COMMITs ahead
 * of it, a checkpoint from the WAL hook), its operations and its pages. A long run with a
 * short COMMIT is a writer short of CPU, or a batch grown behind an earlier stall; a long
 * COMMIT is the disk or a checkpoint. */
static void note_slow_transaction(sq_store *st, uint64_t ns, uint64_t commit_ns, size_t ops,
                                  uint64_t pages) {
  if (ns < SQ_SLOW_NS) return;
  atomic_fetch_add_explicit(&st->stats.slow_transactions, 1, memory_order_relaxed);
  QIM_LOGW(NULL, "store.sqlite.slow_transaction", "ms=%.1f commit_ms=%.1f ops=%zu pages=%llu",
           (double)ns / 1e6, (double)commit_ns / 1e6, ops, (unsigned long long)pages);
}

static void writer_batch(sq_store *st, qim_store_req *list, size_t n) {
  sq_conn *c = &st->wconn;
  if (sq_sync_failed(st)) {
    fail_stopped(st, list, n);
    return;
  }
  size_t ran = 0;
  uint64_t begun = sq_now_ns(), commit_ns = 0, pages = atomic_load(&st->stats.pages);
  qim_store_req *tail = NULL;
  run_result res = exec_cached(c, "BEGIN IMMEDIATE") == 0 ? run_ops(c, list, &ran, &tail) : RUN_LOST;
  if (res == RUN_OK && linger_wanted(st, n)) res = linger(st, c, &tail, &n, &ran);
  if (res == RUN_REDO) res = redo(st, c, list, &ran);
  bool ok = res == RUN_OK;
  bool commit_failed = false;
  uint64_t commit = 0;
  if (ok) {
    if (st->opt.before_commit) st->opt.before_commit(st->opt.hook_ctx);
    uint64_t t0 = sq_now_ns();
    commit = sq_sync_commit_begin(st);
    if ((st->mem.on && sq_memory_before_commit(c) != 0) || exec_cached(c, "COMMIT") != 0) {
      commit_failed = true;
      ok = false;
    } else if (st->mem.on && sq_memory_after_commit(st) != 0) {
      /* Committed in memory but not journaled: nothing may be answered as durable again. */
      QIM_LOGE(NULL, "store.sqlite.journal_failed", "commit=%llu: the store stops; reopen it",
               (unsigned long long)commit);
      atomic_store_explicit(&st->sync.failed, true, memory_order_release);
    }
    sq_sync_commit_end(st, commit);
    commit_ns = sq_now_ns() - t0;
    atomic_fetch_add_explicit(&st->stats.commit_ns, commit_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->stats.commits, 1, memory_order_relaxed);
  }
  note_slow_transaction(st, sq_now_ns() - begun, commit_ns, n,
                        atomic_load(&st->stats.pages) - pages);
  if (!ok) {
    if (!sqlite3_get_autocommit(c->db)) exec_cached(c, "ROLLBACK");
    sq_capture_clear(st->mem.cap);
    QIM_LOGE(NULL, "store.sqlite.batch_failed", "ops=%zu commit=%d msg=\"%s\"", n, commit_failed,
             sqlite3_errmsg(c->db));
    fail_batch(list, ran, commit_failed);
  }
  atomic_fetch_add(&st->stats.transactions, 1);
  atomic_fetch_add(&st->stats.operations, n);
  atomic_fetch_add(&st->stats.hist[hist_bucket(n)], 1);
  for (qim_store_req *r = list; r; r = r->next_) settle(st, r, r->status);
  if (ok) {
    for (qim_store_req *r = list; r; r = r->next_) /* before the syncer may complete it */
      if (r->committed && r->status == 0) r->committed(r);
    sq_sync_answer(st, list, n, commit, true);
  } else {
    sq_post_batch(list, n); /* nothing of it is visible: no sync to wait for */
  }
}

/*
 * The writer's WAL hook, run inside each COMMIT once its frames are published: counts the
 * pages the commit wrote and hands the checkpoint policy the WAL's length
 * (sqlite_checkpoint.c; it replaces SQLite's own auto-checkpoint, which is this same hook
 * copying inline every 1000 frames). The idle TRUNCATE checkpoint still empties the WAL
 * whenever writes pause.
 */
static int wal_hook(void *ctx, sqlite3 *db, const char *name, int frames) {
  sq_store *st = ctx;
  sq_vfs_defer_syncs(false); /* a checkpoint from here syncs the WAL before it copies */
  uint64_t before = st->wal_frames;
  /* Fewer frames than last time: the WAL restarted from its beginning. (A restart into
   * more frames than the last run had goes uncounted: erase_wiped then waits longer.) */
  bool restarted = (uint64_t)frames < before;
  atomic_fetch_add(&st->stats.pages, restarted ? (uint64_t)frames : (uint64_t)frames - before);
  st->wal_frames = (uint64_t)frames;
  if (restarted) st->wal_generation++;
  if (st->erase_generation == SQ_ERASE_UNPLACED) /* this COMMIT carried an erase */
    st->erase_generation = st->wal_generation;
  sq_ckpt_after_commit(st, db, name, frames);
  return SQLITE_OK;
}

/* True when the WAL was emptied. */
static bool idle_checkpoint(sq_store *st) {
  /* TRUNCATE waits for readers through the busy handler; a long read must not hold up the
   * writer: give up quickly (SQLITE_BUSY) and try again at the next pause. */
  if (pthread_mutex_trylock(&st->ckpt.copy_mu) != 0) return false; /* a copy or a page set */
  sqlite3_busy_timeout(st->wconn.db, IDLE_CHECKPOINT_WAIT_MS);
  uint64_t t0 = sq_now_ns();
  int rc = sqlite3_wal_checkpoint_v2(st->wconn.db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  sqlite3_busy_timeout(st->wconn.db, BUSY_TIMEOUT_MS);
  pthread_mutex_unlock(&st->ckpt.copy_mu);
  atomic_fetch_add_explicit(&st->stats.truncate_ns, sq_now_ns() - t0, memory_order_relaxed);
  if (rc == SQLITE_OK) atomic_fetch_add_explicit(&st->stats.truncates, 1, memory_order_relaxed);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY)
    QIM_LOGW(NULL, "store.sqlite.checkpoint", "rc=%d msg=\"%s\"", rc, sqlite3_errmsg(st->wconn.db));
  return rc == SQLITE_OK;
}

static uint64_t mono_ms(void) { return sq_now_ns() / 1000000u; }

void sq_note_erase(sq_conn *c) {
  sq_store *st = c->st;
  if (c != &st->wconn) return;
  atomic_fetch_add_explicit(&st->stats.erases, 1, memory_order_relaxed);
  if (st->mem.on) sq_memory_note_erase(st);
  st->erase_generation = SQ_ERASE_UNPLACED; /* its COMMIT will say which run holds it */
  if (st->erase_pending) return; /* the bound runs from the oldest erase not yet wiped */
  st->erase_pending = true;
  st->truncate_at = mono_ms() + ERASE_TRUNCATE_MS;
}

/*
 * Erased content leaves the WAL without a truncate when writes keep the WAL turning over.
 * Its old page images are in frames of the run (generation) its erase was committed in,
 * and in whatever an older, longer run left past that run's end. Once the WAL has started
 * over after that run, and the file holds no more than the new run's own frames, every
 * frame in it was written after the erase. While an erase is pending, the WAL's size limit
 * (wal_limit_set) makes SQLite cut the file back to one run at the first COMMIT of each run,
 * and a run under steady writes grows to sq_ckpt_restart_frames before it starts over, so
 * the second condition follows. Checked against the file itself, not assumed. Until then
 * the TRUNCATE at truncate_at stays due: it blocks the writer while it copies every
 * uncopied frame and syncs the database (~200-400 ms on a store of a few hundred MB at
 * 5,000 one-to-one msgs/s), where the WAL turning over costs nothing extra.
 */
static bool erase_wiped(sq_store *st) {
  if (st->wal_generation <= st->erase_generation) return false; /* also while unplaced */
  const char *wal = sqlite3_filename_wal(sqlite3_db_filename(st->wconn.db, "main"));
  struct stat sb;
  if (!wal || stat(wal, &sb) != 0) return false;
  return (uint64_t)sb.st_size <= 32 + st->wal_frames * st->wal_frame_bytes;
}

/*
 * How long SQLite lets the WAL file stay (journal_size_limit, on the writer's connection:
 * the one that writes frames). It applies the limit at the first COMMIT after each
 * start-over, cutting the file back to it. On the disk the limit is the hard bound
 * (sq_ckpt_inline_frames), which a run under steady writes does not reach, so the file
 * keeps its length and each run overwrites blocks it already has: a cut freed the run's
 * tail every ~0.8 s at 5,000 one-to-one msgs/s (the file system discards freed blocks),
 * in the writer's COMMIT, 5-57 ms each, and the next run allocated them again, so its
 * syncs carried the file's growth too (bench/HISTORY.md, "Thirtieth session").
 * While an erase is pending, and always in store-memory mode (the WAL is in memory there,
 * where a cut is cheap and the bytes are RAM), the limit is one run
 * (sq_ckpt_restart_frames): the next start-over cuts the file back to what a run
 * overwrites, which erase_wiped relies on. The writer moves between the two (writer_main).
 */
static int wal_limit_set(sq_store *st, bool cut) {
  uint64_t frames = cut ? sq_ckpt_restart_frames(st) : sq_ckpt_inline_frames(st);
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA journal_size_limit=%llu",
           (unsigned long long)(32 + frames * st->wal_frame_bytes));
  int rc = sq_exec_logged(st->wconn.db, sql, "store.sqlite.pragma");
  if (rc == 0) st->wal_cut = cut;
  return rc;
}

static void *writer_main(void *arg) {
  sq_store *st = arg;
  bool dirty = false;
  qim_log_name_thread("writer");
  for (;;) {
    qim_store_req *list;
    bool timed_out;
    size_t n =
        queue_take(&st->wq, st->opt.max_batch, &list, dirty ? IDLE_CHECKPOINT_MS : -1, &timed_out);
    if (n) {
      writer_batch(st, list, n);
      dirty = true;
      if (st->erase_pending && erase_wiped(st)) {
        st->erase_pending = false;
        atomic_fetch_add_explicit(&st->stats.erase_turnovers, 1, memory_order_relaxed);
      }
      if (st->erase_pending && mono_ms() >= st->truncate_at) timed_out = true;
    }
    if (dirty && timed_out) {
      dirty = !idle_checkpoint(st); /* busy readers: try again at the next pause or retry */
      if (!dirty) st->erase_pending = false;
      else if (st->erase_pending) st->truncate_at = mono_ms() + ERASE_RETRY_MS;
    } else if (!n && !timed_out) {
      break; /* closing and drained */
    }
    bool cut = st->mem.on || st->erase_pending;
    if (cut != st->wal_cut) wal_limit_set(st, cut); /* a failure is logged; tried again */
  }
  return NULL;
}

/* ---- readers ------------------------------------------------------------------------------ */

static void reader_run(sq_store *st, sq_conn *c, qim_store_req *r) {
  const sq_op *op = ops[r->op_];
  r->error = (qim_error){0};
  r->next_ = NULL;
  int status = sq_sync_failed(st) ? -EIO : exec_cached(c, "BEGIN");
  if (status == 0) {
    uint64_t t0 = sq_now_ns();
    status = op->exec(c, r);
    release_used(c);
    atomic_fetch_add_explicit(&st->stats.op_ns[r->op_], sq_now_ns() - t0, memory_order_relaxed);
    int end = exec_cached(c, status == 0 ? "COMMIT" : "ROLLBACK");
    if (status == 0) status = end;
  }
  atomic_fetch_add(&st->stats.reads, 1);
  settle(st, r, domain_status(status, op->unavailable));
  if (r->unconfirmed)
    sq_post_batch(r, 1); /* its caller's next write is synced after what it saw (store.h) */
  else
    sq_sync_answer(st, r, 1, sq_sync_visible(st), false);
}

typedef struct reader_arg {
  sq_store *st;
  sq_conn *c;
} reader_arg;

static void *reader_main(void *arg) {
  reader_arg a = *(reader_arg *)arg;
  qim_free(arg);
  qim_log_name_thread("reader");
  for (;;) {
    qim_store_req *r;
    bool timed_out;
    if (!queue_take(&a.st->rq, 1, &r, -1, &timed_out)) break;
    reader_run(a.st, a.c, r);
  }
  return NULL;
}

/* ---- reads on the caller's thread -------------------------------------------------------- */

/*
 * A worker (its completion queue is a blocking one) waits for its read anyway: handing the
 * read to a reader thread and the answer back costs two thread wake-ups, each dearer on
 * this machine than the read itself. So the read runs right here, on a connection taken
 * from a small pool, and its completion is posted to the caller's queue as always (never
 * run inside the call). Event loops never get this: their reads stay on the reader
 * threads, so no loop runs SQL. With every pooled connection busy, the read is queued.
 */

static sq_conn *inline_take(sq_store *st) {
  pthread_mutex_lock(&st->inline_mu);
  sq_conn *c = NULL;
  bool open_new = false;
  if (!st->inline_closed && st->inline_idle_n) {
    c = st->inline_idle[--st->inline_idle_n];
  } else if (!st->inline_closed && st->inline_open < SQ_INLINE_CONNS) {
    st->inline_open++;
    open_new = true;
  }
  pthread_mutex_unlock(&st->inline_mu);
  if (!open_new) return c;
  c = qim_calloc(1, sizeof *c);
  if (sq_conn_open(st, c, false) == 0) return c;
  qim_free(c);
  pthread_mutex_lock(&st->inline_mu);
  st->inline_open--;
  pthread_mutex_unlock(&st->inline_mu);
  return NULL;
}

static void inline_give(sq_store *st, sq_conn *c) {
  pthread_mutex_lock(&st->inline_mu);
  st->inline_idle[st->inline_idle_n++] = c;
  pthread_mutex_unlock(&st->inline_mu);
}

/* True when the read ran (and its completion is posted). */
static bool submit_inline(sq_store *st, qim_store_req *r) {
  sq_conn *c = inline_take(st);
  if (!c) return false;
  atomic_fetch_add_explicit(&st->stats.reads_inline, 1, memory_order_relaxed);
  reader_run(st, c, r);
  inline_give(st, c);
  return true;
}

static void inline_close_all(sq_store *st) {
  pthread_mutex_lock(&st->inline_mu);
  st->inline_closed = true;
  for (uint32_t i = 0; i < st->inline_idle_n; i++) {
    sq_conn_close(st->inline_idle[i]);
    qim_free(st->inline_idle[i]);
  }
  st->inline_idle_n = st->inline_open = 0;
  pthread_mutex_unlock(&st->inline_mu);
}

/* ---- submission ------------------------------------------------------------------------ */

static int submit(qim_store *s, qim_store_req *r, sq_op_id id) {
  sq_store *st = (sq_store *)s;
  if (!r || !r->cq || !r->done) return -EINVAL;
  const sq_op *op = ops[id];
  if (op->prepare) {
    int rc = op->prepare(st, r);
    if (rc) return rc;
  }
  r->op_ = (int)id;
  r->status = 0;
  r->error = (qim_error){0};
  bool ran = !op->write && qim_cq_is_blocking(r->cq) && submit_inline(st, r);
  int rc = ran ? 0 : queue_push(st, op->write ? &st->wq : &st->rq, r);
  if (rc == 0) atomic_fetch_add_explicit(&st->stats.by_op[id], 1, memory_order_relaxed);
  return rc;
}

#define SQ_SUBMIT_(E, n, T)                          \
  static int submit_##n(qim_store *s, T *r) {        \
    return submit(s, r ? &r->req : NULL, SQ_OP_##E); \
  }
SQ_OPS(SQ_SUBMIT_)
#undef SQ_SUBMIT_

/* ---- connections and lifecycle ------------------------------------------------------------ */

/*
 * Process-wide SQLite settings, made once before the library initializes. Memory
 * statistics cost a global mutex around every sqlite3_malloc/free, taken by the writer
 * and every reader; nothing here reads them. The page cache is SQLite's own behind a
 * truncate that skips needless walks (sqlite_pcache.c). If something else already
 * initialized SQLite, sqlite3_config refuses (SQLITE_MISUSE) and the defaults stay:
 * slower, never wrong.
 */
static pthread_once_t sqlite_once = PTHREAD_ONCE_INIT;

static void sqlite_global_init(void) {
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  sq_pcache_install();
  sqlite3_initialize();
}

/*
 * "unix-excl": the first connection takes one POSIX lock on the whole file for the process,
 * and the WAL index lives in this process's heap instead of a mapped -shm file. Every WAL
 * read or write lock is then a memory operation: with the default VFS each transaction made
 * two to four fcntl calls (~29 per message in the commit bench). The price: no other
 * process can open the database while the store is open (tools read it once qimd has
 * stopped); after a crash the next open rebuilds the index from the WAL as before.
 * A default VFS other than the stock "unix" (a test's fault-injecting shim) is kept.
 */
static const char *store_vfs(void) {
  sqlite3_vfs *def = sqlite3_vfs_find(NULL);
  bool stock = def && strcmp(def->zName, "unix") == 0;
  return stock && sqlite3_vfs_find("unix-excl") ? "unix-excl" : NULL;
}

/* Per-connection tuning (docs/store.md, "Costs on this machine"). Readers do not map the
 * database file: in WAL mode SQLite unmaps a connection's whole mapping whenever it starts a
 * read after another commit, so every step of the fanout and the lanes paid a munmap (a TLB
 * shootdown of the other core) and a page fault per page it touched again. Their page cache
 * is emptied by every commit too, so a bigger one would not help. The writer's cache is 32 MiB:
 * a settling pass dirties a page of the per-user mailbox index per user of the lane (a
 * group of 1,000: ~1,000 pages), more than SQLite's default 2 MB holds, so the transaction
 * spilled pages to the WAL and read them back. */
#define READER_PRAGMAS "PRAGMA mmap_size=0; PRAGMA temp_store=MEMORY;"
#define WRITER_PRAGMAS "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-32768;"

int sq_exec_logged(sqlite3 *db, const char *sql, const char *event) {
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc == SQLITE_OK) return 0;
  QIM_LOGE(NULL, event, "rc=%d msg=\"%s\"", rc, err ? err : "?");
  sqlite3_free(err);
  return sq_errno(rc);
}

int sq_pragma_int(sq_conn *c, const char *name, int *out) {
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA %s", name);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK) return sq_last_error(c);
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : sq_errno(rc);
}

/* Records the frame size for erase_wiped and sets the WAL's first limit. */
static int wal_size_limit(sq_store *st) {
  int page = 0;
  int rc = sq_pragma_int(&st->wconn, "page_size", &page);
  if (rc) return rc;
  st->wal_frame_bytes = (uint32_t)page + 24;
  return wal_limit_set(st, st->mem.on);
}

int sq_conn_open(sq_store *st, sq_conn *c, bool writer) {
  pthread_once(&sqlite_once, sqlite_global_init);
  memset(c, 0, sizeof *c);
  c->st = st;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(st->path, &c->db, flags, sq_vfs_wal_gather(store_vfs()));
  if (rc != SQLITE_OK) {
    QIM_LOGE(NULL, "store.sqlite.open", "path=\"%s\" msg=\"%s\"", st->path,
             c->db ? sqlite3_errmsg(c->db) : "out of memory");
    sqlite3_close(c->db);
    c->db = NULL;
    return sq_errno(rc);
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
  char *err = NULL;
  /* temp_store=MEMORY on the writer keeps the savepoints' statement journal in memory: it
   * holds one operation's pages at most (RELEASE empties it), and an operation touching
   * more than 16 pages (the one-transaction commit) would otherwise spill it to a temp file
   * and write every page it saves, for the rest of the transaction. */
  const char *pragmas = writer ? "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                                 "PRAGMA secure_delete=ON; PRAGMA foreign_keys=ON;" WRITER_PRAGMAS
                               : "PRAGMA secure_delete=ON; PRAGMA query_only=ON;" READER_PRAGMAS;
  rc = sqlite3_exec(c->db, pragmas, NULL, NULL, &err);
  if (rc == SQLITE_OK && writer && st->max_page_count > 0) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld", (long long)st->max_page_count);
    rc = sqlite3_exec(c->db, sql, NULL, NULL, &err);
  }
  if (rc != SQLITE_OK) {
    QIM_LOGE(NULL, "store.sqlite.pragma", "msg=\"%s\"", err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(c->db);
    c->db = NULL;
    return sq_errno(rc);
  }
  return 0;
}

void sq_conn_close(sq_conn *c) {
  if (!c->db) return;
  cache_free(c);
  sqlite3_close(c->db);
  c->db = NULL;
}

/* One line at close: how many of each operation ran and the microseconds they took
 * (name=count/us), then the writer's COMMITs and busy checkpoints, what lingering added,
 * the transactions and WAL pages written, and the page-cache truncates asked for and
 * passed on (sqlite_pcache.c; process-wide, every connection's): for profiling a workload (which stage reads
 * or writes how often, what it costs, and how many pages a message costs the WAL). */
static void log_op_counts(sq_store *st) {
  char text[4096];
  size_t len = 0;
  for (int i = 0; i < SQ_OP_COUNT && len < sizeof text - 96; i++) {
    uint64_t n = atomic_load(&st->stats.by_op[i]), ns = atomic_load(&st->stats.op_ns[i]);
    if (n) len += (size_t)snprintf(text + len, sizeof text - len, "%s%s=%llu/%llu", len ? " " : "",
                                   ops[i]->name, (unsigned long long)n,
                                   (unsigned long long)(ns / 1000));
  }
  uint64_t truncates, walked;
  sq_pcache_counts(&truncates, &walked);
  if (len)
    QIM_LOGI(NULL, "store.sqlite.op_counts",
             "%s commit=%llu/%llu sync=%llu/%llu checkpoint=%llu/%llu bg_checkpoint=%llu/%llu "
             "ckpt_wait=%llu/%llu truncate=%llu/%llu erase_turnovers=%llu lingered=%llu redos=%llu transactions=%llu pages=%llu "
             "pcache_truncates=%llu/%llu slow_syncs=%llu slow_transactions=%llu",
             text, (unsigned long long)atomic_load(&st->stats.commits),
             (unsigned long long)(atomic_load(&st->stats.commit_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.syncs),
             (unsigned long long)(atomic_load(&st->stats.sync_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.checkpoints),
             (unsigned long long)(atomic_load(&st->stats.checkpoint_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.bg_checkpoints),
             (unsigned long long)(atomic_load(&st->stats.bg_checkpoint_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.ckpt_waits),
             (unsigned long long)(atomic_load(&st->stats.ckpt_wait_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.truncates),
             (unsigned long long)(atomic_load(&st->stats.truncate_ns) / 1000),
             (unsigned long long)atomic_load(&st->stats.erase_turnovers),
             (unsigned long long)atomic_load(&st->stats.lingered),
             (unsigned long long)atomic_load(&st->stats.redos),
             (unsigned long long)atomic_load(&st->stats.transactions),
             (unsigned long long)atomic_load(&st->stats.pages), (unsigned long long)truncates,
             (unsigned long long)walked, (unsigned long long)atomic_load(&st->stats.slow_syncs),
             (unsigned long long)atomic_load(&st->stats.slow_transactions));
}

static void store_close(qim_store *s) {
  sq_store *st = (sq_store *)s;
  log_op_counts(st);
  /* Closing a queue lets its threads drain what is queued, then exit. */
  queue_close(&st->wq);
  queue_close(&st->rq);
  pthread_join(st->writer, NULL);
  for (uint32_t i = 0; i < st->reader_count; i++) pthread_join(st->readers[i], NULL);
  sq_memory_stop(st); /* its snapshot thread asks the checkpointer for rounds */
  sq_sync_stop(st);   /* after every COMMIT and read: it answers what still waits */
  sq_ckpt_stop(st);
  for (uint32_t i = 0; i < st->opt.reader_threads; i++) sq_conn_close(&st->rconns[i]);
  inline_close_all(st);
  pthread_mutex_destroy(&st->inline_mu);
  sq_conn_close(&st->wconn); /* the last connection checkpoints and removes the WAL */
  sq_memory_free(st);
  queue_destroy(&st->wq);
  queue_destroy(&st->rq);
  qim_free(st->readers);
  qim_free(st->rconns);
  qim_free(st->unsettled);
  qim_free(st->path);
  qim_free(st);
}

static void store_stats(qim_store *s, qim_store_stats *out) {
  sq_store *st = (sq_store *)s;
  *out = (qim_store_stats){
      .operations = atomic_load(&st->stats.operations),
      .transactions = atomic_load(&st->stats.transactions),
      .fsyncs = atomic_load(&st->stats.fsyncs),
      .failed_operations = atomic_load(&st->stats.failed),
      .rejected_backpressure = atomic_load(&st->stats.rejected),
      .reads = atomic_load(&st->stats.reads),
      .pages_written = atomic_load(&st->stats.pages),
      .reads_inline = atomic_load(&st->stats.reads_inline),
      .lingers = atomic_load(&st->stats.lingers),
      .lingered = atomic_load(&st->stats.lingered),
      .redos = atomic_load(&st->stats.redos),
      .checkpoints = atomic_load(&st->stats.checkpoints),
      .checkpoints_background = atomic_load(&st->stats.bg_checkpoints),
      .checkpoint_waits = atomic_load(&st->stats.ckpt_waits),
      .writebacks = atomic_load(&st->stats.writebacks),
      .wal_truncates = atomic_load(&st->stats.truncates),
      .erases = atomic_load(&st->stats.erases),
      .erase_turnovers = atomic_load(&st->stats.erase_turnovers),
      .syncs = atomic_load(&st->stats.syncs),
      .sync_waits = atomic_load(&st->stats.sync_waits),
      .slow_syncs = atomic_load(&st->stats.slow_syncs),
      .slow_transactions = atomic_load(&st->stats.slow_transactions),
  };
  for (int i = 0; i < 8; i++) out->batch_hist[i] = atomic_load(&st->stats.hist[i]);
}

static const qim_store_vtable sqlite_vtable = {
    .name = "sqlite",
    .accounts = {submit_user_create, submit_user_get, submit_user_update, submit_cred_create,
                 submit_cred_get, submit_cred_update, submit_apikey_put, submit_apikey_get},
    .conversations = {submit_conv_create, submit_conv_get, submit_conv_update,
                      submit_members_change, submit_member_get, submit_members_at,
                      submit_member_receipt, submit_subscriptions, submit_member_private,
                      submit_members_prune},
    .intents = {submit_intent_reserve, submit_intent_advance, submit_intent_load,
                submit_intent_list, submit_intent_forget},
    .history = {submit_record_get, submit_record_query, submit_record_set_state, submit_dellog_add,
                submit_dellog_query, submit_record_expire},
    .logs = {submit_log_append, submit_log_read, submit_consumer_get, submit_consumer_set,
             submit_log_trim, submit_log_redact},
    .mailboxes = {submit_shard_takeover, submit_shard_get, submit_mailbox_append,
                  submit_progress_get, submit_mailbox_range, submit_watermark_get,
                  submit_watermark_advance},
    .stats = store_stats,
    .close = store_close,
};

/* "PATH", then "?" and "&"-separated parameters: max_page_count=N (a size cap, used by
 * tests to provoke SQLITE_FULL), memory=DIR (store-memory mode, sqlite_memory.c; *memdir
 * is then a copy the caller frees), snapshot_kb=N (its snapshots' spacing, default 256 MiB
 * of journal; tests use small ones), from_memory=1 (*leave: a store-memory store opened
 * as a default one, converted first; a no-op on a default store). */
static int parse_location(const char *loc, sq_store *st, char **memdir, bool *leave) {
  const char *q = strchr(loc, '?');
  st->path = q ? qim_strndup(loc, (size_t)(q - loc)) : qim_strdup(loc);
  if (!*st->path) return -EINVAL;
  while (q) {
    const char *arg = q + 1, *next = strchr(arg, '&');
    size_t len = next ? (size_t)(next - arg) : strlen(arg);
    q = next;
    static const char pages[] = "max_page_count=", memory[] = "memory=",
                      snapshot[] = "snapshot_kb=", from_memory[] = "from_memory=1";
    if (len > strlen(memory) && strncmp(arg, memory, strlen(memory)) == 0 && !*memdir) {
      *memdir = qim_strndup(arg + strlen(memory), len - strlen(memory));
      continue;
    }
    if (len == strlen(from_memory) && strncmp(arg, from_memory, len) == 0) {
      *leave = true;
      continue;
    }
    bool is_pages = len > strlen(pages) && strncmp(arg, pages, strlen(pages)) == 0;
    bool is_snap = len > strlen(snapshot) && strncmp(arg, snapshot, strlen(snapshot)) == 0;
    if (!is_pages && !is_snap) return -EINVAL;
    size_t klen = strlen(is_pages ? pages : snapshot);
    char num[24], *end;
    if (len - klen >= sizeof num) return -EINVAL;
    memcpy(num, arg + klen, len - klen);
    num[len - klen] = 0;
    errno = 0;
    long long v = strtoll(num, &end, 10);
    if (errno || *end || v <= 0) return -EINVAL;
    if (is_pages)
      st->max_page_count = v;
    else
      st->mem.snapshot_kb = (uint64_t)v; /* store-memory: a snapshot per this much journal */
  }
  return 0;
}

static void apply_defaults(qim_store_options *o) {
  if (!o->queue_capacity) o->queue_capacity = DEFAULT_QUEUE_CAPACITY;
  if (!o->reader_threads) o->reader_threads = DEFAULT_READERS;
  if (o->reader_threads > MAX_READERS) o->reader_threads = MAX_READERS;
  if (!o->max_batch) o->max_batch = DEFAULT_MAX_BATCH;
  if (!o->checkpoint_frames) o->checkpoint_frames = DEFAULT_CHECKPOINT_FRAMES;
  if (!o->settle_entries) o->settle_entries = DEFAULT_SETTLE_ENTRIES;
}

/* Starts the syncer, the checkpointer, the writer, then the readers; *writer_started
 * tells the failure path what to undo (open_fail stops the first two either way). */
static int start_threads(sq_store *st, bool *writer_started) {
  int rc = sq_sync_start(st);
  if (rc == 0) rc = sq_ckpt_start(st);
  if (rc) return rc;
  rc = pthread_create(&st->writer, NULL, writer_main, st);
  if (rc) return -rc;
  *writer_started = true;
  st->readers = qim_calloc(st->opt.reader_threads, sizeof *st->readers);
  for (uint32_t i = 0; i < st->opt.reader_threads; i++) {
    reader_arg *a = qim_malloc(sizeof *a);
    *a = (reader_arg){st, &st->rconns[i]};
    rc = pthread_create(&st->readers[i], NULL, reader_main, a);
    if (rc) {
      qim_free(a);
      return -rc;
    }
    st->reader_count++;
  }
  return 0;
}

/* Releases a store whose threads may be partly started (open failure path). */
static void open_fail(sq_store *st, bool threads) {
  if (threads) {
    store_close(&st->base);
    return;
  }
  sq_memory_stop(st);
  sq_sync_stop(st);
  sq_ckpt_stop(st);
  for (uint32_t i = 0; st->rconns && i < st->opt.reader_threads; i++) sq_conn_close(&st->rconns[i]);
  sq_conn_close(&st->wconn);
  sq_memory_free(st);
  queue_destroy(&st->wq);
  queue_destroy(&st->rq);
  pthread_mutex_destroy(&st->inline_mu);
  qim_free(st->rconns);
  qim_free(st->unsettled);
  qim_free(st->path);
  qim_free(st);
}

int qim__sqlite_open(const char *location, const qim_store_options *opt, qim_store **out) {
  if (!opt || opt->shards.lanes_per_shard > 255) return -EINVAL;
  sq_store *st = qim_calloc(1, sizeof *st);
  st->base.vt = &sqlite_vtable;
  st->opt = *opt;
  st->linger_gain = 16; /* linger from the start; the average decides from there */
  pthread_mutex_init(&st->inline_mu, NULL);
  apply_defaults(&st->opt);
  int rc = queue_init(&st->wq, st->opt.queue_capacity);
  if (rc == 0) rc = queue_init(&st->rq, st->opt.queue_capacity);
  if (rc) {
    qim_free(st);
    return rc;
  }
  char *memdir = NULL;
  bool leave = false;
  rc = parse_location(location, st, &memdir, &leave);
  if (rc == 0 && leave) rc = memdir ? -EINVAL : sq_memory_leave(st->path);
  if (rc == 0) rc = memdir ? sq_memory_prepare(st, memdir) : sq_memory_refuse_plain(st->path);
  qim_free(memdir);
  if (rc == 0) rc = sq_conn_open(st, &st->wconn, true);
  if (rc == 0) rc = wal_size_limit(st);
  if (rc == 0) rc = sq_schema_layout(&st->wconn, &st->opt.shards);
  if (rc == 0) rc = sq_schema_migrate(&st->wconn, &st->opt.shards);
  if (rc == 0 && st->mem.on) rc = sq_memory_replay(st);
  if (rc == 0 && st->mem.on) rc = sq_memory_start(st);
  if (rc == 0 && opt->layout_out) *opt->layout_out = st->opt.shards;
  if (rc == 0)
    st->unsettled = qim_calloc((size_t)st->opt.shards.shard_count * st->opt.shards.lanes_per_shard,
                               sizeof *st->unsettled);
  if (rc == 0) {
    /* The hook counts pages against the WAL's size: start from what is in it already
     * (the schema, or what a crash left), not from zero. */
    int log_frames = 0, done = 0;
    sqlite3_wal_checkpoint_v2(st->wconn.db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log_frames, &done);
    st->wal_frames = log_frames > 0 ? (uint64_t)log_frames : 0;
    sqlite3_wal_hook(st->wconn.db, wal_hook, st);
  }
  if (rc == 0) {
    st->rconns = qim_calloc(st->opt.reader_threads, sizeof *st->rconns);
    for (uint32_t i = 0; rc == 0 && i < st->opt.reader_threads; i++)
      rc = sq_conn_open(st, &st->rconns[i], false);
  }
  if (rc) {
    open_fail(st, false);
    return rc;
  }
  bool writer_started = false;
  rc = start_threads(st, &writer_started);
  if (rc) {
    open_fail(st, writer_started);
    return rc;
  }
  *out = &st->base;
  return 0;
}
