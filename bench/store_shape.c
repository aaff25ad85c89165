/*
 * store_shape.c — which shape of per-message writes lets a SQLite WAL store (journal_mode=WAL,
 * synchronous=FULL, group commit) answer one-to-one chat messages fast on this disk, at
 * 2,000-6,000 msgs/s. Four shapes end with the same keyed tables:
 *
 *   keyed   each message's rows go straight into the keyed B-trees in the writer's
 *           transaction (the shape qimd has now: ~10 random leaf pages dirtied per message,
 *           so a WAL page per row and a checkpointer rewriting the same pages again);
 *   staged  each message is ONE ~1 KB row appended to a log-ordered staging table (its
 *           INTEGER PRIMARY KEY is a counter: every insert lands on the rightmost leaf);
 *           a merger thread with its own connection moves staged messages into the keyed
 *           tables in sorted passes (thousands of messages a pass, so a destination leaf is
 *           written once a pass for many rows) and deletes the merged range;
 *   staged_sliced  staged, but the merger writes a pass in slices by destination key range
 *           (about one per SLICE_MSGS messages of the pass), a write transaction each, so
 *           the writer's transactions run between slices rather than behind a whole pass;
 *           it records the merged-through stage id in the last slice and then trims the
 *           stage in chunks of at most TRIM_CHUNK rows;
 *   staged_split   the stage table in a file of its own (its own WAL and write lock: the
 *           writer writes only that file); the merger writes a pass and its merged-through
 *           id into the main file in one transaction, which the writer never waits for,
 *           then trims the stage file in chunks of at most TRIM_CHUNK rows.
 *
 * Why: qimd's one-to-one p99 is bound by how many pages a commit writes and the checkpoint
 * that copies them back; this measures whether staging cuts that cost and what its merges
 * cost in their turn (the merger holds the single write lock while it writes), and whether
 * slicing the merge or moving the stage to its own file keeps that lock off the writer's path.
 *
 * The model: U users in U/2 fixed pairs, each pair a conversation. A message (random sender,
 * its partner receives) writes intents, records, two mailbox rows, progress, log, and
 * updates conversations.latest_seq and the sender's members.read_seq. WAL pages are counted
 * with sqlite3_wal_hook (both files' for staged_split); per file, a checkpointer thread
 * (own connection, nice 19) copies a round every 16000 frames written, and the writer
 * finishes the copy between transactions once the WAL is 2.5 x 16000 frames long and only
 * a short tail is uncopied, so the WAL starts over (qimd's policy, src/store/sqlite_checkpoint.c,
 * without its write-back thread); in staged_split the merger, the main file's only writer, does
 * that finishing copy for it.
 *
 * The load is a paced open loop: message i of a step is due at t0 + i/R; the writer takes
 * every message due (at most 2000), commits them in one transaction, and a message's
 * latency is COMMIT's return minus its due time. Steps run back to back on one database
 * per shape (it grows through them, as in the real benchmark); the first second of a step
 * is warm-up. A step ends at --seconds, or up to 2 s later while the writer drains what was
 * due; messages still unwritten then count with their wait so far (a lower bound) and are
 * reported as unwritten=.
 *
 * Usage: qim-bench-store_shape DIR [--rates LIST] [--seconds S] [--users U]
 *                              [--merge-every N] [--shapes LIST]
 *   DIR must be on a real disk (tmpfs is refused); the databases are removed at the end.
 * Output: one "RESULT scenario=store_shape ..." line per shape and rate, then a table.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* gettid; the build passes it, a bare compile may not */
#endif
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "procstat.h"
#include "qim/clock.h"

#define TMPFS_MAGIC 0x01021994ul
#define RAMFS_MAGIC 0x858458f6ul
#define MAX_RATES 16
#define MAX_RATE 50000u
#define BATCH_MAX 2000u
#define WARMUP_S 1.0
#define PAUSE_S 2.0
#define DRAIN_S 2.0
#define PAGE_SIZE 4096
/* Checkpoint policy (frames of PAGE_SIZE): a round per CKPT_EVERY frames past the last
 * copy; the WAL may start over once RESTART_FRAMES long with at most TAIL_FRAMES uncopied;
 * past HARD_FRAMES the writer copies whatever is left itself. Passes a round makes. */
#define CKPT_EVERY 16000ll
#define RESTART_FRAMES (CKPT_EVERY * 5 / 2)
#define HARD_FRAMES (CKPT_EVERY * 6)
#define TAIL_FRAMES 256ll
#define ROUND_PASSES 4
#define CKPT_NICE 19
#define MERGE_IDLE_S 2.0
#define MERGE_POLL_S 0.005
#define MERGE_PASS_MAX 200000u /* messages read into memory per pass: ~180 MB */
#define THREAD_LOOPS_MAX 100000000ull
#define LOCK_WAIT_MAX_S 60.0
/* staged_sliced: a slice per SLICE_MSGS messages of a pass keeps its transaction near 10 ms
 * at these rates (a whole pass of 4,000-12,000 took 90-490 ms). Both chunked shapes trim the
 * stage TRIM_CHUNK rows a transaction, so the writer waits at most one chunk. */
#define SLICE_MSGS 250u
#define TRIM_CHUNK 500
#define ID 16
#define BODY 150
#define PAYLOAD 200

enum { SHAPE_KEYED, SHAPE_STAGED, SHAPE_SLICED, SHAPE_SPLIT, NSHAPES };
static const char *const shape_names[NSHAPES] = {"keyed", "staged", "staged_sliced",
                                                 "staged_split"};
/* The main file (every shape's keyed tables) and staged_split's stage file. */
enum { FILE_MAIN, FILE_STAGE, NFILES };

typedef struct config {
  const char *dir;
  unsigned rates[MAX_RATES];
  int nrates;
  double seconds;
  unsigned users, merge_every;
  int shapes[NSHAPES], nshapes;
} config;

/* One message: everything its rows need. The staged row is this struct's bytes (host
 * order, written and read by this process only): fields ordered so it has no padding. */
typedef struct msg {
  int64_t pos;     /* global message number: the stage id and the log position */
  int64_t seq;     /* in its conversation */
  int64_t mseq[2]; /* in the sender's [0] and the receiver's [1] mailbox */
  uint32_t user[2];
  uint32_t conv, state;
  uint8_t sender_id[ID], cmid[ID], progress_id[ID], log_key[ID];
  uint8_t intent_body[BODY], record_body[BODY], mbox_body[2][BODY];
  uint8_t payload[PAYLOAD];
} msg;
_Static_assert(sizeof(msg) == 32 + 16 + 4 * ID + 4 * BODY + PAYLOAD, "msg must have no padding");

/* ---- small tools --------------------------------------------------------------------- */

static char g_db[NFILES][4096]; /* the database files in use, removed on any exit */

static void remove_db(const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm"};
  char p[sizeof g_db[0] + 8];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%.*s%s", (int)sizeof g_db[0] - 1, path, suffixes[i]);
    unlink(p);
  }
}

__attribute__((format(printf, 1, 2))) static _Noreturn void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "qim-bench-store_shape: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  for (int f = 0; f < NFILES; f++)
    if (g_db[f][0]) remove_db(g_db[f]);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct timespec ts_of(double t) {
  struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
  if (ts.tv_nsec > 999999999L) ts.tv_nsec = 999999999L;
  if (ts.tv_nsec < 0) ts.tv_nsec = 0;
  return ts;
}

static void sleep_until(double t) {
  struct timespec ts = ts_of(t);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Bytes this process (every thread) caused to be written to storage; 0 if unknown
 * (qim-bench's /proc reader, tools/bench/procstat.h). */
static uint64_t io_write_bytes(void) {
  qim_proc_sample s;
  return qim_proc_sample_read(getpid(), &s) == 0 ? s.write_bytes : 0;
}

/* xoshiro256**: a message needs ~900 random bytes, too many for sqlite3_randomness. */
static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t rnd(uint64_t s[4]) {
  uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

static void fill(uint64_t s[4], uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rnd(s);
    memcpy(p + i, &r, n - i < 8 ? n - i : 8);
  }
}

/* ---- a fair write lock ------------------------------------------------------------------ */

/* SQLite lets one connection write at a time. Writer and merger take turns through this
 * ticket lock rather than SQLite's busy handler, whose sleeps (up to 100 ms) would show as
 * latency, and rather than a plain mutex, which a writer that is behind would re-take
 * before the merger ever woke. */
typedef struct fairlock {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t next, serving;
} fairlock;

static void fair_lock(fairlock *l) {
  double give_up = now_s() + LOCK_WAIT_MAX_S;
  pthread_mutex_lock(&l->mu);
  uint64_t me = l->next++;
  while (me != l->serving) {
    if (now_s() > give_up) die("write lock held over %.0f s", LOCK_WAIT_MAX_S);
    struct timespec ts = ts_of(now_s() + 1.0);
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
  }
  pthread_mutex_unlock(&l->mu);
}

static void fair_unlock(fairlock *l) {
  pthread_mutex_lock(&l->mu);
  l->serving++;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* ---- the database ------------------------------------------------------------------------ */

/* What happened in a step's measured window; under bench.mu. merge_ms_max: a pass from
 * reading the stage to its keyed rows' last commit; slices: the merger's transactions on the
 * keyed tables, merge_lock_ms_max and _sum: their longest and total time
 * (a whole pass, a slice, or in staged_split one that holds the main file's lock only); trims and
 * trim_ms_max: chunked stage trims, the longest's transaction. wal_max: the longest WAL of any
 * file. */
typedef struct window {
  uint64_t merges, merge_msgs, slices, trims, rounds, wal_max;
  double merge_ms_max, merge_lock_ms_max, merge_lock_ms_sum, trim_ms_max, round_ms_max;
} window;

typedef struct bench bench;

/* One database file's WAL as the checkpoint policy sees it; fields under bench.mu. */
typedef struct walfile {
  bench *b;
  int file;
  pthread_cond_t cv; /* wakes this file's checkpointer */
  bool round_due, round_running;
  int64_t frames_written, wal_size, copied; /* from the WAL hook and the copies */
} walfile;

struct bench {
  const config *cfg;
  int shape, nfiles;   /* staged_split uses both files, the other shapes FILE_MAIN only */
  uint8_t (*uid)[ID];  /* users' 16-byte ids */
  fairlock wl[NFILES]; /* a file's writers take turns through its lock */
  walfile wf[NFILES];
  pthread_mutex_t mu;
  bool stop; /* under mu */
  window win;
  atomic_llong staged_top, merged; /* last stage id committed by the writer, merged */
  double hard_deadline;            /* the threads' loops end by then whatever happens */
};

typedef struct stmts {
  sqlite3 *db;
  sqlite3_stmt *begin, *begin_read, *commit, *intent, *record, *mailbox, *progress, *log, *conv,
      *member, *stage_put, *stage_get, *stage_del, *stage_trim, *set_merged;
} stmts;

static void exec(sqlite3 *db, const char *sql) {
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) die("%s: %s", sql, err);
}

static sqlite3_stmt *prep(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
    die("%s: %s", sql, sqlite3_errmsg(db));
  return st;
}

static void run(sqlite3 *db, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE) die("%s: %s", sqlite3_sql(st), sqlite3_errmsg(db));
  sqlite3_reset(st);
}

/* The WAL hook (writer's and merger's connections), inside each COMMIT and under the file's
 * fair lock (or from its only writer), so a file's calls come one at a time: `frames` is its
 * WAL's length after the commit. Counts the frames written and asks the file's checkpointer
 * for a round per CKPT_EVERY of them. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames) {
  (void)db, (void)name;
  walfile *f = arg;
  bench *b = f->b;
  int64_t n = frames;
  pthread_mutex_lock(&b->mu);
  bool restarted = n < f->wal_size; /* a restart into a longer run goes uncounted */
  f->frames_written += restarted ? n : n - f->wal_size;
  f->wal_size = n;
  if (restarted) f->copied = 0;
  if ((uint64_t)n > b->win.wal_max) b->win.wal_max = (uint64_t)n;
  bool long_wal = n >= RESTART_FRAMES;
  if (!f->round_running && n - f->copied >= (long_wal ? TAIL_FRAMES : CKPT_EVERY)) {
    f->round_due = true;
    pthread_cond_signal(&f->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return SQLITE_OK;
}

/* A connection to one of the files; a writing one counts its frames through the hook. */
static sqlite3 *open_conn(bench *b, int file, bool writes) {
  sqlite3 *db = NULL;
  const char *path = g_db[file];
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
    die("open %s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_busy_timeout(db, 10000); /* a safety net: the fair lock orders the writers */
  /* The files are deleted at the end: closing need not copy the WAL back first. */
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
  char sql[512];
  snprintf(sql, sizeof sql,
           "PRAGMA page_size=%d; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
           "PRAGMA wal_autocheckpoint=0; PRAGMA cache_size=-32768; PRAGMA secure_delete=OFF;"
           "PRAGMA journal_size_limit=%lld;",
           PAGE_SIZE, 32 + RESTART_FRAMES * (PAGE_SIZE + 24));
  exec(db, sql);
  /* After wal_autocheckpoint, which installs a hook of its own in place of any other. */
  if (writes) sqlite3_wal_hook(db, wal_hook, &b->wf[file]);
  return db;
}

static void close_conn(sqlite3 *db) {
  sqlite3_stmt *st;
  for (int i = 0; i < 64 && (st = sqlite3_next_stmt(db, NULL)); i++) sqlite3_finalize(st);
  sqlite3_close(db);
}

#define STAGE_TABLE "CREATE TABLE stage(id INTEGER PRIMARY KEY, msg BLOB NOT NULL);"

/* The main file's tables (in staged_split its stage table stays empty and unused). */
static const char schema[] =
    "CREATE TABLE intents(sender BLOB NOT NULL, cmid BLOB NOT NULL, state INT NOT NULL,"
    " body BLOB, UNIQUE(sender, cmid));"
    "CREATE TABLE records(conv INT NOT NULL, seq INT NOT NULL, sender BLOB NOT NULL, body BLOB,"
    " UNIQUE(conv, seq));"
    "CREATE TABLE mailbox(user INT NOT NULL, mseq INT NOT NULL, conv INT NOT NULL,"
    " seq INT NOT NULL, body BLOB, UNIQUE(user, mseq));"
    "CREATE TABLE progress(id BLOB PRIMARY KEY, conv INT NOT NULL, seq INT NOT NULL);"
    "CREATE TABLE log(pos INTEGER PRIMARY KEY, key BLOB NOT NULL, payload BLOB, UNIQUE(key));"
    "CREATE TABLE conversations(conv INTEGER PRIMARY KEY, latest_seq INT NOT NULL);"
    "CREATE TABLE members(conv INT NOT NULL, user INT NOT NULL, read_seq INT NOT NULL,"
    " PRIMARY KEY(conv, user));" STAGE_TABLE;

/* staged_sliced and staged_split: the merged-through stage id, in the main file, so stage
 * rows at or below it are known merged however far their trim got. */
static const char state_schema[] =
    "CREATE TABLE merge_state(k INTEGER PRIMARY KEY, through INT NOT NULL);"
    "INSERT INTO merge_state(k, through) VALUES(0, 0);";

static void prepare_txn(stmts *s, sqlite3 *db) {
  s->db = db;
  s->begin = prep(db, "BEGIN IMMEDIATE");
  s->begin_read = prep(db, "BEGIN");
  s->commit = prep(db, "COMMIT");
}

static sqlite3_stmt *prep_insert(sqlite3 *db, bool replace, const char *rest) {
  char sql[256];
  snprintf(sql, sizeof sql, "INSERT%s INTO %s", replace ? " OR REPLACE" : "", rest);
  return prep(db, sql);
}

/* The keyed tables' writes; `replace` makes re-applying a row a no-op (staged_sliced). */
static void prepare_keyed(stmts *s, bool replace) {
  sqlite3 *db = s->db;
  s->intent = prep_insert(db, replace, "intents(sender, cmid, state, body) VALUES(?,?,?,?)");
  s->record = prep_insert(db, replace, "records(conv, seq, sender, body) VALUES(?,?,?,?)");
  s->mailbox = prep_insert(db, replace, "mailbox(user, mseq, conv, seq, body) VALUES(?,?,?,?,?)");
  s->progress = prep_insert(db, replace, "progress(id, conv, seq) VALUES(?,?,?)");
  s->log = prep_insert(db, replace, "log(pos, key, payload) VALUES(?,?,?)");
  s->conv = prep(db, "UPDATE conversations SET latest_seq = ?2 WHERE conv = ?1");
  s->member = prep(db, "UPDATE members SET read_seq = ?3 WHERE conv = ?1 AND user = ?2");
}

static void prepare_stage(stmts *s) {
  sqlite3 *db = s->db;
  s->stage_put = prep(db, "INSERT INTO stage(id, msg) VALUES(?,?)");
  s->stage_get = prep(db, "SELECT msg FROM stage WHERE id > ?1 AND id <= ?2 ORDER BY id");
  s->stage_del = prep(db, "DELETE FROM stage WHERE id <= ?1");
  s->stage_trim = prep(db, "DELETE FROM stage WHERE id > ?1 AND id <= ?2");
}

static void prepare_state(stmts *s) {
  s->set_merged = prep(s->db, "UPDATE merge_state SET through = ?1 WHERE k = 0");
}

/* Every conversation and member row (before any timing), and the users' ids. */
static void setup(bench *b, stmts *s) {
  unsigned users = b->cfg->users;
  sqlite3_randomness((int)(users * (unsigned)ID), b->uid);
  sqlite3_stmt *c = prep(s->db, "INSERT INTO conversations(conv, latest_seq) VALUES(?, 0)");
  sqlite3_stmt *m = prep(s->db, "INSERT INTO members(conv, user, read_seq) VALUES(?, ?, 0)");
  run(s->db, s->begin);
  for (unsigned u = 0; u < users; u++) {
    if (u % 2 == 0) {
      sqlite3_bind_int64(c, 1, u / 2);
      run(s->db, c);
    }
    sqlite3_bind_int64(m, 1, u / 2);
    sqlite3_bind_int64(m, 2, u);
    run(s->db, m);
  }
  run(s->db, s->commit);
  sqlite3_finalize(c);
  sqlite3_finalize(m);
}

/* ---- one message's rows ----------------------------------------------------------------- */

static void put_intent(const stmts *s, const msg *m) {
  sqlite3_bind_blob(s->intent, 1, m->sender_id, ID, SQLITE_STATIC);
  sqlite3_bind_blob(s->intent, 2, m->cmid, ID, SQLITE_STATIC);
  sqlite3_bind_int(s->intent, 3, (int)m->state);
  sqlite3_bind_blob(s->intent, 4, m->intent_body, BODY, SQLITE_STATIC);
  run(s->db, s->intent);
}

static void put_record(const stmts *s, const msg *m) {
  sqlite3_bind_int64(s->record, 1, m->conv);
  sqlite3_bind_int64(s->record, 2, m->seq);
  sqlite3_bind_blob(s->record, 3, m->sender_id, ID, SQLITE_STATIC);
  sqlite3_bind_blob(s->record, 4, m->record_body, BODY, SQLITE_STATIC);
  run(s->db, s->record);
}

static void put_mailbox(const stmts *s, const msg *m, int side) {
  sqlite3_bind_int64(s->mailbox, 1, m->user[side]);
  sqlite3_bind_int64(s->mailbox, 2, m->mseq[side]);
  sqlite3_bind_int64(s->mailbox, 3, m->conv);
  sqlite3_bind_int64(s->mailbox, 4, m->seq);
  sqlite3_bind_blob(s->mailbox, 5, m->mbox_body[side], BODY, SQLITE_STATIC);
  run(s->db, s->mailbox);
}

static void put_progress(const stmts *s, const msg *m) {
  sqlite3_bind_blob(s->progress, 1, m->progress_id, ID, SQLITE_STATIC);
  sqlite3_bind_int64(s->progress, 2, m->conv);
  sqlite3_bind_int64(s->progress, 3, m->seq);
  run(s->db, s->progress);
}

static void put_log(const stmts *s, const msg *m) {
  sqlite3_bind_int64(s->log, 1, m->pos);
  sqlite3_bind_blob(s->log, 2, m->log_key, ID, SQLITE_STATIC);
  sqlite3_bind_blob(s->log, 3, m->payload, PAYLOAD, SQLITE_STATIC);
  run(s->db, s->log);
}

static void put_conv(const stmts *s, int64_t conv, int64_t seq) {
  sqlite3_bind_int64(s->conv, 1, conv);
  sqlite3_bind_int64(s->conv, 2, seq);
  run(s->db, s->conv);
}

static void put_member(const stmts *s, int64_t conv, int64_t user, int64_t read_seq) {
  sqlite3_bind_int64(s->member, 1, conv);
  sqlite3_bind_int64(s->member, 2, user);
  sqlite3_bind_int64(s->member, 3, read_seq);
  run(s->db, s->member);
}

/* The keyed shape: all of a message's rows, where their keys fall. */
static void put_keyed(const stmts *s, const msg *m) {
  put_intent(s, m);
  put_record(s, m);
  put_mailbox(s, m, 0);
  put_mailbox(s, m, 1);
  put_progress(s, m);
  put_log(s, m);
  put_conv(s, m->conv, m->seq);
  put_member(s, m->conv, m->user[0], m->seq);
}

static void put_staged(const stmts *s, const msg *m) {
  sqlite3_bind_int64(s->stage_put, 1, m->pos);
  sqlite3_bind_blob(s->stage_put, 2, m, (int)sizeof *m, SQLITE_STATIC);
  run(s->db, s->stage_put);
}

/* ---- the checkpointer ---------------------------------------------------------------------- */

/* Waits (at most 100 ms) for a round to be asked for; true when one is, marked running. */
static bool round_wanted(walfile *f) {
  bench *b = f->b;
  pthread_mutex_lock(&b->mu);
  if (!f->round_due && !b->stop) {
    struct timespec ts = ts_of(now_s() + 0.1);
    pthread_cond_timedwait(&f->cv, &b->mu, &ts);
  }
  bool go = f->round_due && !b->stop;
  if (go) {
    f->round_due = false;
    f->round_running = true;
  }
  pthread_mutex_unlock(&b->mu);
  return go;
}

/* One round: PASSIVE passes until the uncopied tail is short (the WAL grows meanwhile). */
static void copy_round(walfile *f, sqlite3 *db) {
  bench *b = f->b;
  double t0 = now_s();
  for (int pass = 0; pass < ROUND_PASSES; pass++) {
    int log = 0, done = 0;
    int rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) die("checkpoint: %s", sqlite3_errmsg(db));
    if (rc != SQLITE_OK) break;
    pthread_mutex_lock(&b->mu);
    if (done <= f->wal_size) f->copied = done; /* else the WAL restarted under the copy */
    pthread_mutex_unlock(&b->mu);
    if (log - done < TAIL_FRAMES) break;
  }
  double ms = (now_s() - t0) * 1e3;
  pthread_mutex_lock(&b->mu);
  f->round_running = false;
  b->win.rounds++;
  if (ms > b->win.round_ms_max) b->win.round_ms_max = ms;
  pthread_mutex_unlock(&b->mu);
}

/* One file's checkpointer. */
static void *checkpointer_main(void *arg) {
  walfile *f = arg;
  bench *b = f->b;
  /* Linux gives each thread its own nice value; lowering it needs no privilege. The copy
   * is bulk work with seconds of slack: it must not take the CPU from the writer. */
  if (setpriority(PRIO_PROCESS, (id_t)gettid(), CKPT_NICE) != 0)
    fprintf(stderr, "qim-bench-store_shape: checkpointer nice %d: %s\n", CKPT_NICE,
            strerror(errno));
  sqlite3 *db = open_conn(b, f->file, false);
  for (uint64_t i = 0; i < THREAD_LOOPS_MAX && now_s() < b->hard_deadline; i++) {
    if (round_wanted(f)) copy_round(f, db);
    pthread_mutex_lock(&b->mu);
    bool stop = b->stop;
    pthread_mutex_unlock(&b->mu);
    if (stop) break;
  }
  close_conn(db);
  return NULL;
}

/* By a file's writer between its transactions: once the WAL is long and a round has left
 * only a short tail uncopied (or past the hard bound), the writer copies the rest itself, so
 * that its next transaction starts the WAL over (SQLite restarts it only at a write
 * transaction that begins with every frame copied; under steady writes the checkpointer
 * never sees that). Returns the copy's ms, or -1 when none was due. */
static double copy_tail(walfile *f, sqlite3 *db) {
  bench *b = f->b;
  pthread_mutex_lock(&b->mu);
  int64_t n = f->wal_size, left = n - f->copied;
  bool go = !f->round_running && ((n >= RESTART_FRAMES && left <= TAIL_FRAMES) || n >= HARD_FRAMES);
  pthread_mutex_unlock(&b->mu);
  if (!go) return -1;
  double t0 = now_s();
  int log = 0, done = 0;
  int rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY) die("checkpoint: %s", sqlite3_errmsg(db));
  double ms = (now_s() - t0) * 1e3;
  pthread_mutex_lock(&b->mu);
  if (rc == SQLITE_OK && done <= f->wal_size) f->copied = done;
  pthread_mutex_unlock(&b->mu);
  return ms;
}

/* ---- the merger (staged shapes) ---------------------------------------------------------- */

typedef struct mbox_ref {
  const msg *m;
  int side;
} mbox_ref;

typedef struct merger {
  bench *b;
  stmts st;       /* the main file: the keyed tables */
  stmts stage_st; /* staged_split: the stage file */
  stmts *src;     /* where the stage table is: &st, or &stage_st */
  size_t cap;
  msg *buf;
  const msg **intents, **records, **progress, **logs;
  mbox_ref *mbox;
  int64_t *conv_max, *user_max; /* highest seq of the pass, per conversation / sender */
} merger;

static int cmp_i64(int64_t a, int64_t b) {
  return a < b ? -1 : a > b;
}

#define MSG_OF(p) (*(const msg *const *)(p))

static int cmp_intent(const void *a, const void *b) {
  int c = memcmp(MSG_OF(a)->sender_id, MSG_OF(b)->sender_id, ID);
  return c ? c : memcmp(MSG_OF(a)->cmid, MSG_OF(b)->cmid, ID);
}

static int cmp_record(const void *a, const void *b) {
  int c = cmp_i64(MSG_OF(a)->conv, MSG_OF(b)->conv);
  return c ? c : cmp_i64(MSG_OF(a)->seq, MSG_OF(b)->seq);
}

static int cmp_progress(const void *a, const void *b) {
  return memcmp(MSG_OF(a)->progress_id, MSG_OF(b)->progress_id, ID);
}

/* The log by its random key: that index is the one whose leaves a pass would scatter. Its
 * positions are all past the table's end, so the table's own inserts stay at its edge. */
static int cmp_log(const void *a, const void *b) {
  return memcmp(MSG_OF(a)->log_key, MSG_OF(b)->log_key, ID);
}

static int cmp_mbox(const void *a, const void *b) {
  const mbox_ref *x = a, *y = b;
  int c = cmp_i64(x->m->user[x->side], y->m->user[y->side]);
  return c ? c : cmp_i64(x->m->mseq[x->side], y->m->mseq[y->side]);
}

static void merger_init(merger *g, bench *b) {
  memset(g, 0, sizeof *g);
  g->b = b;
  unsigned every = b->cfg->merge_every;
  g->cap = every * 4 < MERGE_PASS_MAX ? every * 4 : MERGE_PASS_MAX;
  if (g->cap < every) g->cap = every;
  g->buf = malloc(g->cap * sizeof *g->buf);
  g->intents = malloc(g->cap * sizeof *g->intents);
  g->records = malloc(g->cap * sizeof *g->records);
  g->progress = malloc(g->cap * sizeof *g->progress);
  g->logs = malloc(g->cap * sizeof *g->logs);
  g->mbox = malloc(2 * g->cap * sizeof *g->mbox);
  g->conv_max = calloc(b->cfg->users / 2, sizeof *g->conv_max);
  g->user_max = calloc(b->cfg->users, sizeof *g->user_max);
  if (!g->buf || !g->intents || !g->records || !g->progress || !g->logs || !g->mbox ||
      !g->conv_max || !g->user_max)
    die("out of memory for a merge pass of %zu messages", g->cap);
}

static void merger_free(merger *g) {
  free(g->buf);
  free(g->intents);
  free(g->records);
  free(g->progress);
  free(g->logs);
  free(g->mbox);
  free(g->conv_max);
  free(g->user_max);
}

/* Stage rows (from, to] into g->buf, in a read transaction: committed rows never change,
 * so reading them needs no write lock. */
static size_t read_stage(merger *g, int64_t from, int64_t to) {
  stmts *s = g->src;
  run(s->db, s->begin_read);
  sqlite3_bind_int64(s->stage_get, 1, from);
  sqlite3_bind_int64(s->stage_get, 2, to);
  size_t n = 0;
  int rc;
  while (n < g->cap && (rc = sqlite3_step(s->stage_get)) == SQLITE_ROW) {
    if (sqlite3_column_bytes(s->stage_get, 0) != (int)sizeof(msg)) die("stage row of bad size");
    memcpy(&g->buf[n++], sqlite3_column_blob(s->stage_get, 0), sizeof(msg));
  }
  sqlite3_reset(s->stage_get);
  run(s->db, s->commit);
  return n;
}

/* Sorts each destination's rows by its key, outside the write lock. */
static void sort_pass(merger *g, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const msg *m = &g->buf[i];
    g->intents[i] = g->records[i] = g->progress[i] = g->logs[i] = m;
    g->mbox[2 * i] = (mbox_ref){m, 0};
    g->mbox[2 * i + 1] = (mbox_ref){m, 1};
    if (m->seq > g->conv_max[m->conv]) g->conv_max[m->conv] = m->seq;
    if (m->seq > g->user_max[m->user[0]]) g->user_max[m->user[0]] = m->seq;
  }
  qsort(g->intents, n, sizeof *g->intents, cmp_intent);
  qsort(g->records, n, sizeof *g->records, cmp_record);
  qsort(g->progress, n, sizeof *g->progress, cmp_progress);
  qsort(g->logs, n, sizeof *g->logs, cmp_log);
  qsort(g->mbox, 2 * n, sizeof *g->mbox, cmp_mbox);
}

/* Where each destination's sorted rows stand while a pass is written slice by slice. */
typedef struct cursors {
  size_t intent, record, mbox, progress, log;
  unsigned conv, user;
} cursors;

/* The slice of a random 16-byte key (intent's sender, progress id, log key): its first two
 * bytes scaled, so the slices cut the key order into consecutive ranges. */
static unsigned key_slice(const uint8_t *key, unsigned slices) {
  return (unsigned)((((uint64_t)key[0] << 8) | key[1]) * slices >> 16);
}

/* The slice of a conversation: consecutive ranges of conversations, hence of users (a
 * conversation's users are 2c and 2c+1), so a slice's mailbox, records, conversations and
 * members rows all fall in the same key ranges. */
static unsigned conv_slice(uint64_t conv, unsigned convs, unsigned slices) {
  return (unsigned)(conv * slices / convs);
}

static unsigned mbox_slice(const mbox_ref *r, unsigned convs, unsigned slices) {
  return conv_slice(r->m->user[r->side] / 2, convs, slices);
}

/* The inserted rows of slice k of `slices` (all of them when slices is 1), one destination
 * after another, each in its key order: a sorted array is cut where its key leaves the
 * slice's range. Slice ranges only grow with k, so `<= k` takes exactly this slice's rows. */
static void write_slice_rows(merger *g, size_t n, unsigned k, unsigned slices, cursors *c) {
  const stmts *s = &g->st;
  unsigned convs = g->b->cfg->users / 2;
  for (; c->intent < n && key_slice(g->intents[c->intent]->sender_id, slices) <= k; c->intent++)
    put_intent(s, g->intents[c->intent]);
  for (; c->record < n && conv_slice(g->records[c->record]->conv, convs, slices) <= k; c->record++)
    put_record(s, g->records[c->record]);
  for (; c->mbox < 2 * n && mbox_slice(&g->mbox[c->mbox], convs, slices) <= k; c->mbox++)
    put_mailbox(s, g->mbox[c->mbox].m, g->mbox[c->mbox].side);
  for (; c->progress < n && key_slice(g->progress[c->progress]->progress_id, slices) <= k;
       c->progress++)
    put_progress(s, g->progress[c->progress]);
  for (; c->log < n && key_slice(g->logs[c->log]->log_key, slices) <= k; c->log++)
    put_log(s, g->logs[c->log]);
}

/* The updated conversations and members of slice k, and clears their pass maxima. */
static void write_slice_counters(merger *g, unsigned k, unsigned slices, cursors *c) {
  const stmts *s = &g->st;
  unsigned convs = g->b->cfg->users / 2;
  for (; c->conv < convs && conv_slice(c->conv, convs, slices) <= k; c->conv++) {
    if (g->conv_max[c->conv]) put_conv(s, c->conv, g->conv_max[c->conv]);
    g->conv_max[c->conv] = 0;
  }
  /* user order is (conv, user) order: conv = u / 2 */
  for (; c->user < 2 * convs && conv_slice(c->user / 2, convs, slices) <= k; c->user++) {
    if (g->user_max[c->user]) put_member(s, c->user / 2, c->user, g->user_max[c->user]);
    g->user_max[c->user] = 0;
  }
}

static void write_slice(merger *g, size_t n, unsigned k, unsigned slices, cursors *c) {
  write_slice_rows(g, n, k, slices, c);
  write_slice_counters(g, k, slices, c);
}

static void set_merged(const stmts *s, int64_t to) {
  sqlite3_bind_int64(s->set_merged, 1, to);
  run(s->db, s->set_merged);
}

/* One merger transaction on the keyed tables, that took ms. */
static void count_txn(bench *b, double ms) {
  pthread_mutex_lock(&b->mu);
  b->win.slices++;
  b->win.merge_lock_ms_sum += ms;
  if (ms > b->win.merge_lock_ms_max) b->win.merge_lock_ms_max = ms;
  pthread_mutex_unlock(&b->mu);
}

/* staged: the whole pass and the stage delete in one transaction holding the one write
 * lock. */
static void merge_whole(merger *g, size_t n, int64_t to) {
  bench *b = g->b;
  const stmts *s = &g->st;
  cursors c = {0};
  fair_lock(&b->wl[FILE_MAIN]);
  double t1 = now_s();
  run(s->db, s->begin);
  write_slice(g, n, 0, 1, &c);
  sqlite3_bind_int64(s->stage_del, 1, to);
  run(s->db, s->stage_del);
  run(s->db, s->commit);
  double ms = (now_s() - t1) * 1e3;
  fair_unlock(&b->wl[FILE_MAIN]);
  count_txn(b, ms);
}

/* staged_sliced: a transaction per slice, taking and releasing the write lock each time so
 * the writer's transactions run in between. The last slice records the merged-through id;
 * a crash before it leaves the stage rows and the old id, and the restart re-applies the
 * whole pass: the slices already committed are written again with INSERT OR REPLACE and
 * the same absolute counter values, so nothing is lost or counted twice (idempotent rather
 * than exactly-once; good enough for this benchmark). */
static void merge_sliced(merger *g, size_t n, int64_t to, unsigned slices) {
  bench *b = g->b;
  const stmts *s = &g->st;
  cursors c = {0};
  for (unsigned k = 0; k < slices; k++) {
    fair_lock(&b->wl[FILE_MAIN]);
    double t1 = now_s();
    run(s->db, s->begin);
    write_slice(g, n, k, slices, &c);
    if (k == slices - 1) set_merged(s, to);
    run(s->db, s->commit);
    double ms = (now_s() - t1) * 1e3;
    fair_unlock(&b->wl[FILE_MAIN]);
    count_txn(b, ms);
  }
}

/* staged_split: the pass and its merged-through id in one main-file transaction. The writer
 * never takes the main file's lock and the merger is that file's only writer, so no fair
 * lock: this transaction delays nobody. A crash after it leaves stage rows at or below the
 * recorded id, which a restart skips and trims. */
static void merge_split(merger *g, size_t n, int64_t to) {
  const stmts *s = &g->st;
  cursors c = {0};
  double t1 = now_s();
  run(s->db, s->begin);
  write_slice(g, n, 0, 1, &c);
  set_merged(s, to);
  run(s->db, s->commit);
  count_txn(g->b, (now_s() - t1) * 1e3);
}

/* Deletes the merged stage rows (from, to] (ids are consecutive) in chunks of TRIM_CHUNK,
 * a transaction each under the stage's write lock, so the writer waits at most one chunk.
 * The merged-through id is already durable: a crash part way leaves rows it skips. */
static void trim_stage(merger *g, int64_t from, int64_t to, fairlock *wl) {
  bench *b = g->b;
  const stmts *s = g->src;
  for (int64_t lo = from; lo < to; lo += TRIM_CHUNK) {
    int64_t hi = to - lo > TRIM_CHUNK ? lo + TRIM_CHUNK : to;
    fair_lock(wl);
    double t = now_s();
    run(s->db, s->begin);
    sqlite3_bind_int64(s->stage_trim, 1, lo);
    sqlite3_bind_int64(s->stage_trim, 2, hi);
    run(s->db, s->stage_trim);
    run(s->db, s->commit);
    double ms = (now_s() - t) * 1e3;
    fair_unlock(wl);
    pthread_mutex_lock(&b->mu);
    b->win.trims++;
    if (ms > b->win.trim_ms_max) b->win.trim_ms_max = ms;
    pthread_mutex_unlock(&b->mu);
  }
}

static void count_pass(bench *b, size_t n, double pass_ms) {
  pthread_mutex_lock(&b->mu);
  b->win.merges++;
  b->win.merge_msgs += n;
  if (pass_ms > b->win.merge_ms_max) b->win.merge_ms_max = pass_ms;
  pthread_mutex_unlock(&b->mu);
}

/* About one slice per SLICE_MSGS messages of the pass. */
static unsigned slices_for(size_t n) {
  size_t k = (n + SLICE_MSGS - 1) / SLICE_MSGS;
  return k ? (unsigned)k : 1;
}

/* A pass: read the waiting stage rows, sort them outside any write lock, write them as the
 * shape does, then (the chunked shapes) trim the stage. */
static void merge_once(merger *g) {
  bench *b = g->b;
  int shape = b->shape;
  int64_t from = atomic_load(&b->merged), top = atomic_load(&b->staged_top);
  int64_t to = top - from > (int64_t)g->cap ? from + (int64_t)g->cap : top;
  double t0 = now_s();
  size_t n = read_stage(g, from, to);
  if (n != (size_t)(to - from))
    die("stage (%lld, %lld]: %zu rows", (long long)from, (long long)to, n);
  sort_pass(g, n);
  if (shape == SHAPE_STAGED)
    merge_whole(g, n, to);
  else if (shape == SHAPE_SLICED)
    merge_sliced(g, n, to, slices_for(n));
  else
    merge_split(g, n, to);
  double pass_ms = (now_s() - t0) * 1e3;
  atomic_store(&b->merged, to);
  count_pass(b, n, pass_ms);
  if (shape == SHAPE_STAGED) return;
  trim_stage(g, from, to, &b->wl[shape == SHAPE_SPLIT ? FILE_STAGE : FILE_MAIN]);
  if (shape == SHAPE_SPLIT) copy_tail(&b->wf[FILE_MAIN], g->st.db); /* its only writer */
}

/* The merger's connections and statements, as its shape needs them. */
static void merger_open(merger *g) {
  bench *b = g->b;
  int shape = b->shape;
  prepare_txn(&g->st, open_conn(b, FILE_MAIN, true));
  prepare_keyed(&g->st, shape == SHAPE_SLICED);
  if (shape != SHAPE_STAGED) prepare_state(&g->st);
  g->src = &g->st;
  if (shape == SHAPE_SPLIT) {
    prepare_txn(&g->stage_st, open_conn(b, FILE_STAGE, true));
    g->src = &g->stage_st;
  }
  prepare_stage(g->src);
}

/* Merges when --merge-every messages wait, or MERGE_IDLE_S after the last merge began. */
static void *merger_main(void *arg) {
  merger *g = arg;
  bench *b = g->b;
  merger_open(g);
  double last = now_s();
  for (uint64_t i = 0; i < THREAD_LOOPS_MAX && now_s() < b->hard_deadline; i++) {
    pthread_mutex_lock(&b->mu);
    bool stop = b->stop;
    pthread_mutex_unlock(&b->mu);
    if (stop) break;
    int64_t waiting = atomic_load(&b->staged_top) - atomic_load(&b->merged);
    if (waiting >= (int64_t)b->cfg->merge_every ||
        (waiting > 0 && now_s() - last >= MERGE_IDLE_S)) {
      last = now_s();
      merge_once(g);
    } else {
      sleep_until(now_s() + MERGE_POLL_S);
    }
  }
  close_conn(g->st.db);
  if (g->src != &g->st) close_conn(g->stage_st.db);
  return NULL;
}

/* ---- the writer ------------------------------------------------------------------------- */

typedef struct writer {
  bench *b;
  stmts st;     /* on the file it writes: the main file, or staged_split's stage file */
  fairlock *wl; /* that file's lock */
  walfile *wf;
  uint64_t rng[4];
  int64_t pos;
  int64_t *conv_seq, *user_mseq;
  uint64_t ckpts; /* the writer's own copies in the window, and the slowest */
  double ckpt_ms_max, lock_ms_max;
} writer;

static void make_msg(writer *w, msg *m) {
  unsigned users = w->b->cfg->users;
  uint32_t s = (uint32_t)(rnd(w->rng) % users), r = s ^ 1u;
  m->pos = ++w->pos;
  m->user[0] = s;
  m->user[1] = r;
  m->conv = s / 2;
  m->state = 3; /* committed */
  m->seq = ++w->conv_seq[m->conv];
  m->mseq[0] = ++w->user_mseq[s];
  m->mseq[1] = ++w->user_mseq[r];
  memcpy(m->sender_id, w->b->uid[s], ID);
  /* cmid through payload are contiguous: ids, bodies and payload in one fill */
  fill(w->rng, (uint8_t *)m + offsetof(msg, cmid), sizeof *m - offsetof(msg, cmid));
}

/* n messages in one transaction; returns when COMMIT returned. */
static double write_batch(writer *w, uint64_t n) {
  bench *b = w->b;
  double q = now_s();
  fair_lock(w->wl);
  double got = now_s();
  if ((got - q) * 1e3 > w->lock_ms_max) w->lock_ms_max = (got - q) * 1e3;
  run(w->st.db, w->st.begin);
  msg m;
  for (uint64_t i = 0; i < n; i++) {
    make_msg(w, &m);
    if (b->shape == SHAPE_KEYED)
      put_keyed(&w->st, &m);
    else
      put_staged(&w->st, &m);
  }
  run(w->st.db, w->st.commit);
  double done = now_s();
  fair_unlock(w->wl);
  if (b->shape != SHAPE_KEYED) atomic_store(&b->staged_top, w->pos);
  return done;
}

/* Between transactions: the writer's own finishing copy of the file it writes. */
static void finish_copy(writer *w) {
  double ms = copy_tail(w->wf, w->st.db);
  if (ms < 0) return;
  w->ckpts++;
  if (ms > w->ckpt_ms_max) w->ckpt_ms_max = ms;
}

/* ---- a step ------------------------------------------------------------------------------ */

typedef struct step_result {
  int shape;
  unsigned rate;
  uint64_t msgs, written, unwritten, commits;
  double p50, p90, p99, max, write_mb_per_msg, wal_pages_per_msg;
  window win;
  uint64_t writer_ckpts;
  double writer_ckpt_ms_max, lock_ms_max;
} step_result;

typedef struct snap {
  uint64_t write_bytes;
  int64_t frames;
} snap;

/* Frames written to every file's WAL; under b->mu. */
static int64_t all_frames(const bench *b) {
  int64_t n = 0;
  for (int f = 0; f < b->nfiles; f++) n += b->wf[f].frames_written;
  return n;
}

static snap open_window(writer *w) {
  bench *b = w->b;
  snap s = {io_write_bytes(), 0};
  pthread_mutex_lock(&b->mu);
  s.frames = all_frames(b);
  memset(&b->win, 0, sizeof b->win);
  for (int f = 0; f < b->nfiles; f++)
    if ((uint64_t)b->wf[f].wal_size > b->win.wal_max) b->win.wal_max = (uint64_t)b->wf[f].wal_size;
  pthread_mutex_unlock(&b->mu);
  w->ckpts = 0;
  w->ckpt_ms_max = w->lock_ms_max = 0;
  return s;
}

static void close_window(writer *w, snap s0, step_result *r) {
  bench *b = w->b;
  uint64_t bytes = io_write_bytes();
  pthread_mutex_lock(&b->mu);
  int64_t frames = all_frames(b) - s0.frames;
  r->win = b->win;
  pthread_mutex_unlock(&b->mu);
  double msgs = r->written ? (double)r->written : 1;
  r->write_mb_per_msg = bytes ? (double)(bytes - s0.write_bytes) / 1e6 / msgs : -1;
  r->wal_pages_per_msg = (double)frames / msgs;
  r->writer_ckpts = w->ckpts;
  r->writer_ckpt_ms_max = w->ckpt_ms_max;
  r->lock_ms_max = w->lock_ms_max;
}

static void percentiles(double *lat, uint64_t n, step_result *r) {
  if (!n) return;
  qsort(lat, n, sizeof *lat, cmp_double);
  r->p50 = lat[(n - 1) / 2];
  r->p90 = lat[(uint64_t)((double)(n - 1) * 0.90)];
  r->p99 = lat[(uint64_t)((double)(n - 1) * 0.99)];
  r->max = lat[n - 1];
}

/* The paced open loop of one step. Messages before WARMUP_S are written but not measured. */
static void run_step(writer *w, unsigned rate, step_result *r) {
  double secs = w->b->cfg->seconds;
  uint64_t total = (uint64_t)(rate * secs), warm = (uint64_t)(rate * WARMUP_S), nlat = 0;
  double *lat = malloc((total - warm + 1) * sizeof *lat);
  if (!lat) die("out of memory for %llu latencies", (unsigned long long)total);
  memset(r, 0, sizeof *r);
  r->shape = w->b->shape, r->rate = rate, r->msgs = total - warm;
  snap s0 = {0, 0};
  bool measuring = false;
  uint64_t next = 0;
  double t0 = now_s() + 0.005, deadline = t0 + secs + DRAIN_S;
  /* Each turn writes at least one message or sleeps until the next is due. */
  for (uint64_t turn = 0; next < total && turn < 4 * total + 1000 && now_s() < deadline; turn++) {
    double now = now_s(); /* due: messages i with t0 + i/rate <= now */
    uint64_t due = now < t0 ? 0 : (uint64_t)((now - t0) * rate + 1e-6) + 1;
    if (due > total) due = total;
    if (due <= next) {
      sleep_until(t0 + (double)next / rate);
      continue;
    }
    uint64_t n = due - next < BATCH_MAX ? due - next : BATCH_MAX;
    if (!measuring && next + n > warm) s0 = open_window(w), measuring = true;
    double done = write_batch(w, n);
    for (uint64_t i = next; i < next + n; i++)
      if (i >= warm) lat[nlat++] = (done - (t0 + (double)i / rate)) * 1e3;
    r->commits += next + n > warm;
    next += n;
    finish_copy(w);
  }
  if (!measuring) s0 = open_window(w);
  r->written = nlat;
  double end = now_s(); /* still due: their wait so far, a lower bound */
  for (uint64_t i = next > warm ? next : warm; i < total; i++)
    lat[nlat++] = (end - (t0 + (double)i / rate)) * 1e3;
  r->unwritten = nlat - r->written;
  close_window(w, s0, r);
  percentiles(lat, nlat, r);
  free(lat);
}

static double per(uint64_t a, uint64_t b) {
  return b ? (double)a / (double)b : 0;
}

static void print_result(const step_result *r) {
  const window *v = &r->win;
  printf(
      "RESULT scenario=store_shape shape=%s rate=%u msgs=%llu p50_ms=%.2f p90_ms=%.2f "
      "p99_ms=%.2f max_ms=%.2f commits=%llu msgs_per_commit=%.1f write_mb_per_msg=%.4f "
      "wal_pages_per_msg=%.2f merges=%llu merge_ms_max=%.1f merge_msgs_per_pass=%.0f "
      "unwritten=%llu wal_max_frames=%llu lock_wait_ms_max=%.1f merge_lock_ms_max=%.1f "
      "merge_lock_ms_avg=%.1f slices_per_pass=%.1f trims=%llu trim_ms_max=%.1f\n",
      shape_names[r->shape], r->rate, (unsigned long long)r->msgs, r->p50, r->p90, r->p99, r->max,
      (unsigned long long)r->commits, per(r->written, r->commits), r->write_mb_per_msg,
      r->wal_pages_per_msg, (unsigned long long)v->merges, v->merge_ms_max,
      per(v->merge_msgs, v->merges), (unsigned long long)r->unwritten,
      (unsigned long long)v->wal_max, r->lock_ms_max, v->merge_lock_ms_max,
      v->slices ? v->merge_lock_ms_sum / (double)v->slices : 0, per(v->slices, v->merges),
      (unsigned long long)v->trims, v->trim_ms_max);
  fflush(stdout);
}

/* ---- a shape: one database through every rate ----------------------------------------- */

static void bench_init(bench *b, const config *cfg, int shape) {
  memset(b, 0, sizeof *b);
  b->cfg = cfg;
  b->shape = shape;
  b->nfiles = shape == SHAPE_SPLIT ? 2 : 1;
  b->uid = malloc((size_t)cfg->users * ID);
  if (!b->uid) die("out of memory");
  for (int f = 0; f < NFILES; f++) {
    pthread_mutex_init(&b->wl[f].mu, NULL);
    qim_cond_init_monotonic(&b->wl[f].cv);
    b->wf[f].b = b;
    b->wf[f].file = f;
    qim_cond_init_monotonic(&b->wf[f].cv);
  }
  pthread_mutex_init(&b->mu, NULL);
  /* Steps, drains, pauses, and a margin for the setup and the last merge. */
  b->hard_deadline = now_s() + cfg->nrates * (cfg->seconds + DRAIN_S + PAUSE_S) + 120;
}

/* Creates the files and fills the conversations; the writer keeps a connection to the
 * file it writes (staged_split: the stage file, after setting up the main one). */
static void writer_init(writer *w, bench *b) {
  memset(w, 0, sizeof *w);
  w->b = b;
  sqlite3 *db = open_conn(b, FILE_MAIN, true);
  exec(db, schema);
  if (b->shape == SHAPE_SLICED || b->shape == SHAPE_SPLIT) exec(db, state_schema);
  prepare_txn(&w->st, db);
  sqlite3_randomness(sizeof w->rng, w->rng);
  w->rng[0] |= 1; /* xoshiro's state must not be all zero */
  w->conv_seq = calloc(b->cfg->users / 2, sizeof *w->conv_seq);
  w->user_mseq = calloc(b->cfg->users, sizeof *w->user_mseq);
  if (!w->conv_seq || !w->user_mseq) die("out of memory");
  setup(b, &w->st);
  int file = b->shape == SHAPE_SPLIT ? FILE_STAGE : FILE_MAIN;
  if (file == FILE_STAGE) {
    close_conn(db);
    db = open_conn(b, FILE_STAGE, true);
    exec(db, STAGE_TABLE);
    prepare_txn(&w->st, db);
  } else {
    prepare_keyed(&w->st, false);
  }
  prepare_stage(&w->st);
  w->wl = &b->wl[file];
  w->wf = &b->wf[file];
}

static void stop_threads(bench *b) {
  pthread_mutex_lock(&b->mu);
  b->stop = true;
  for (int f = 0; f < NFILES; f++) pthread_cond_broadcast(&b->wf[f].cv);
  pthread_mutex_unlock(&b->mu);
}

static void remove_files(void) {
  for (int f = 0; f < NFILES; f++) {
    remove_db(g_db[f]);
    g_db[f][0] = 0;
  }
}

static void run_shape(const config *cfg, int shape, step_result *res) {
  bench b;
  writer w;
  merger g;
  for (int f = 0; f < NFILES; f++) {
    snprintf(g_db[f], sizeof g_db[f], "%s/qim-store-shape-%d-%s%s.db", cfg->dir, (int)getpid(),
             shape_names[shape], f == FILE_STAGE ? "-stage" : "");
    remove_db(g_db[f]);
  }
  bench_init(&b, cfg, shape);
  writer_init(&w, &b);
  pthread_t ckpt[NFILES], merge;
  for (int f = 0; f < b.nfiles; f++)
    if (pthread_create(&ckpt[f], NULL, checkpointer_main, &b.wf[f])) die("pthread_create");
  if (shape != SHAPE_KEYED) {
    merger_init(&g, &b);
    if (pthread_create(&merge, NULL, merger_main, &g)) die("pthread_create");
  }
  for (int i = 0; i < cfg->nrates; i++) {
    if (i) sleep_until(now_s() + PAUSE_S);
    run_step(&w, cfg->rates[i], &res[i]);
    print_result(&res[i]);
  }
  stop_threads(&b);
  for (int f = 0; f < b.nfiles; f++) pthread_join(ckpt[f], NULL);
  if (shape != SHAPE_KEYED) {
    pthread_join(merge, NULL);
    merger_free(&g);
  }
  close_conn(w.st.db);
  remove_files();
  free(w.conv_seq);
  free(w.user_mseq);
  free(b.uid);
}

static void print_row(const step_result *r) {
  const window *v = &r->win;
  printf(
      "%-13s %5u %7.1f %7.1f %7.1f %7.1f %6.1f %8.4f %6.2f %6llu %6.0f(%5.1f) %6.1f %10.1f"
      " %5llu(%4.0fms) %4llu(%5.1f) %7.1fms %6llu\n",
      shape_names[r->shape], r->rate, r->p50, r->p90, r->p99, r->max, per(r->written, r->commits),
      r->write_mb_per_msg, r->wal_pages_per_msg, (unsigned long long)v->merges, v->merge_ms_max,
      v->merge_lock_ms_max, per(v->slices, v->merges), v->trim_ms_max,
      (unsigned long long)v->rounds, v->round_ms_max, (unsigned long long)r->writer_ckpts,
      r->writer_ckpt_ms_max, r->lock_ms_max, (unsigned long long)r->unwritten);
}

static void print_table(const config *cfg, step_result res[][MAX_RATES]) {
  printf("\n%-13s %5s %7s %7s %7s %7s %6s %8s %6s %6s %13s %6s %10s %11s %12s %9s %6s\n", "shape",
         "rate", "p50ms", "p90ms", "p99ms", "maxms", "msg/tx", "MB/msg", "WALpg", "merges",
         "merge_max(lk)", "slices", "trim_maxms", "ckpt_rounds", "wr_ckpt(max)", "lockwait",
         "unwrit");
  for (int s = 0; s < cfg->nshapes; s++)
    for (int i = 0; i < cfg->nrates; i++) print_row(&res[s][i]);
  printf(
      "(ms: latency from due time to COMMIT's return; merge_max(lk): slowest pass, and the"
      " merger's longest keyed-table transaction (staged: the whole pass; staged_sliced: a"
      " slice; staged_split: on the main file, which the writer does not wait for); slices:"
      " per pass; trim_maxms: longest stage-trim chunk; lockwait: the writer's longest wait"
      " for the write lock of the file it writes)\n");
}

/* ---- arguments ---------------------------------------------------------------------------- */

static const char usage[] =
    "Usage: qim-bench-store_shape DIR [--rates LIST] [--seconds S] [--users U]\n"
    "                             [--merge-every N] [--shapes LIST]\n"
    "  DIR            a directory on the disk under test (not tmpfs)\n"
    "  --rates        comma-separated msgs/s, run in order on one database per shape\n"
    "                 (default 2000,3000,4000,5000,6000; each 1..50000, at most 16)\n"
    "  --seconds      per rate, the first second being warm-up (default 8, which keeps\n"
    "                 the four default shapes under ~5 minutes; 2..300)\n"
    "  --users        users, in fixed pairs (default 1000; even, 2..1000000)\n"
    "  --merge-every  staged messages that trigger a merge (default 20000; 1..200000);\n"
    "                 a merge also runs 2 s after the last one\n"
    "  --shapes       comma-separated, each at most once, run in the order given, from\n"
    "                 keyed, staged, staged_sliced, staged_split (default: all four)\n";

static bool parse_uint(const char *s, unsigned long lo, unsigned long hi, const char **end,
                       unsigned *out) {
  char *e;
  errno = 0;
  unsigned long v = strtoul(s, &e, 10);
  if (errno || e == s || *s == '-' || *s == '+' || v < lo || v > hi) return false;
  if (end)
    *end = e;
  else if (*e)
    return false;
  *out = (unsigned)v;
  return true;
}

static bool parse_rates(const char *s, config *c) {
  c->nrates = 0;
  for (int i = 0; i < MAX_RATES; i++) {
    const char *e;
    if (!parse_uint(s, 1, MAX_RATE, &e, &c->rates[c->nrates++])) return false;
    if (*e == 0) return true;
    if (*e != ',') return false;
    s = e + 1;
  }
  return false;
}

/* The shape named by s[0..len), or -1. */
static int shape_of(const char *s, size_t len) {
  for (int k = 0; k < NSHAPES; k++)
    if (strlen(shape_names[k]) == len && !strncmp(s, shape_names[k], len)) return k;
  return -1;
}

static bool parse_shapes(const char *s, config *c) {
  bool seen[NSHAPES] = {false};
  c->nshapes = 0;
  for (int i = 0; i < NSHAPES; i++) {
    size_t len = strcspn(s, ",");
    int k = shape_of(s, len);
    if (k < 0 || seen[k]) return false;
    seen[k] = true;
    c->shapes[c->nshapes++] = k;
    if (s[len] == 0) return true;
    s += len + 1;
  }
  return false;
}

static bool parse_seconds(const char *s, double *out) {
  char *e;
  double v = strtod(s, &e);
  if (e == s || *e || !(v >= 2 && v <= 300)) return false;
  *out = v;
  return true;
}

/* Returns 0, or the exit status: 2 after a message on a bad argument, 1 after --help. */
static int parse_args(int argc, char **argv, config *c) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (a[0] != '-') {
      if (c->dir) {
        fprintf(stderr, "qim-bench-store_shape: one DIR only (%s; --help for usage)\n", a);
        return 2;
      }
      c->dir = a;
      continue;
    } else if (!v) {
      ok = false;
    } else if (!strcmp(a, "--rates")) {
      ok = parse_rates(v, c);
    } else if (!strcmp(a, "--seconds")) {
      ok = parse_seconds(v, &c->seconds);
    } else if (!strcmp(a, "--users")) {
      ok = parse_uint(v, 2, 1000000, NULL, &c->users) && c->users % 2 == 0;
    } else if (!strcmp(a, "--merge-every")) {
      ok = parse_uint(v, 1, MERGE_PASS_MAX, NULL, &c->merge_every);
    } else if (!strcmp(a, "--shapes")) {
      ok = parse_shapes(v, c);
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "qim-bench-store_shape: bad argument: %s%s%s (--help for usage)\n", a,
              v ? " " : "", v ? v : "");
      return 2;
    }
    i++;
  }
  if (!c->dir) fprintf(stderr, "qim-bench-store_shape: DIR is required (--help for usage)\n");
  return c->dir ? 0 : 2;
}

/* The figures mean something only on a real disk: refuse tmpfs and ramfs. */
static bool disk_dir(const char *dir) {
  struct stat st;
  struct statfs fs;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || statfs(dir, &fs) != 0) {
    fprintf(stderr, "qim-bench-store_shape: %s: not a directory\n", dir);
    return false;
  }
  unsigned long type = (unsigned long)fs.f_type;
  if (type == TMPFS_MAGIC || type == RAMFS_MAGIC) {
    fprintf(stderr, "qim-bench-store_shape: %s is in memory (tmpfs): give a real disk\n", dir);
    return false;
  }
  if (strlen(dir) > 3900) {
    fprintf(stderr, "qim-bench-store_shape: %s: path too long\n", dir);
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  config cfg = {.rates = {2000, 3000, 4000, 5000, 6000},
                .nrates = 5,
                .seconds = 8,
                .users = 1000,
                .merge_every = 20000,
                .shapes = {SHAPE_KEYED, SHAPE_STAGED, SHAPE_SLICED, SHAPE_SPLIT},
                .nshapes = NSHAPES};
  int rc = parse_args(argc, argv, &cfg);
  if (rc) return rc == 1 ? 0 : rc;
  if (!disk_dir(cfg.dir)) return 2;
  printf(
      "store_shape: %s, SQLite %s, WAL synchronous=FULL, %u users in %u pairs, %.0f s per "
      "rate (%.0f s warm-up), merge every %u staged messages or %.0f s\n",
      cfg.dir, sqlite3_libversion(), cfg.users, cfg.users / 2, cfg.seconds, WARMUP_S,
      cfg.merge_every, MERGE_IDLE_S);
  fflush(stdout);
  static step_result res[NSHAPES][MAX_RATES];
  double t0 = now_s();
  for (int s = 0; s < cfg.nshapes; s++) {
    if (s) sleep_until(now_s() + PAUSE_S);
    run_shape(&cfg, cfg.shapes[s], res[s]);
  }
  print_table(&cfg, res);
  printf("total %.0f s\n", now_s() - t0);
  return 0;
}
