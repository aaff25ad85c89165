/*
 * sqlite_checkpoint.c — the SQLite backend's background checkpointer: copies WAL pages
 * into the database file on a thread and connection of its own, so the writer's COMMITs
 * do not wait behind that copy and its database fsync (docs/store.md, "Checkpoints").
 *
 * Why the writer still takes part: SQLite starts the WAL over from its beginning only
 * when a write transaction begins with every frame copied back. Under a steady stream
 * of writes the checkpointer never sees that moment: the writer adds frames while it
 * copies. So the work is split. The checkpointer copies the bulk (the WAL up to its end
 * when it starts, then the frames added meanwhile, until few are left); then the writer,
 * between two transactions, copies the short remainder itself, and its next transaction
 * starts the WAL over. The writer's part is one stall per WAL cycle instead of the whole
 * copy: 2-8 ms on a fresh store, 35-60 ms on one of a few hundred MB, where the disk's
 * flush after the round's write-back, not the copy of TAIL_FRAMES pages, takes the time
 * (bench/HISTORY.md, "What bounds 2 and 3"). If the checkpointer cannot keep up, or
 * readers keep the WAL from starting over, the writer checkpoints itself past a hard
 * limit, so the WAL stays bounded.
 *
 * Write-back ahead of the fsync: while a round copies, a second thread asks the kernel
 * every WRITEBACK_EVERY_MS to start writing the database file's dirty pages
 * (sync_file_range, which does not wait for them). Otherwise a round's pages all went
 * to the disk at its closing fsync, and the writer's next fsyncs waited behind that
 * flush: at 500 one-to-one msgs/s on a 170 MB store, p99 over five runs was 12-19 ms
 * with it against 14-31 ms without, the slowest delivery 19-34 ms against 38-61.
 *
 * The checkpointer runs at the lowest CPU priority (nice CKPT_NICE): its copy is bulk work
 * with seconds of slack, and on two cores it took the CPU from the loops and the writer
 * while they had messages waiting. One-to-one on a growing store, three rounds of runs at
 * 2,000 / 3,000 / 2,000 / 2,500 msgs/s: p99 at 3,000 33, 81, 42 ms against 49, 145, 110,
 * and at 2,500 34, 37, 46 against 66, 47, 62. If it falls behind, the writer's own copy
 * past 6 B (below) still bounds the WAL.
 *
 * Durability is SQLite's own: a checkpoint syncs the WAL before copying and the
 * database file before it records the copy (synchronous=FULL on this connection too).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "qim/log.h"
#include "store/sqlite_int.h"

/* The thresholds scale with opt.checkpoint_frames (B, WAL pages of 4 KiB; 16000 by
 * default). B pages past the last copy: the writer asks for a round. 2.5 B: the WAL is
 * long enough to start over, once the uncopied tail is at most TAIL_FRAMES (a round is
 * asked for until then). 6 B: the writer copies whatever is left itself, waiting first for
 * a round under way (wait_round), so neither a lagging checkpointer nor readers holding old
 * frames can grow the WAL without bound.
 * Measured on this machine (one-to-one at 4,000 msgs/s): B = 4000 copied the hot pages
 * four times as often and its copies competed with the writer for the CPU; with 16000 the
 * p99 of three runs was 27-61 ms, where checkpointing inline every 10000 pages gave
 * 49-123 in the same hour. */
#define TAIL_FRAMES 256
/* Passes a round makes over a WAL that keeps growing before it leaves the rest. */
#define MAX_PASSES 4
#define WRITEBACK_EVERY_MS 2
#define CKPT_NICE 19

uint64_t sq_ckpt_restart_frames(const sq_store *st) {
  return st->opt.checkpoint_frames * 5ull / 2;
}
uint64_t sq_ckpt_inline_frames(const sq_store *st) {
  return st->opt.checkpoint_frames * 6ull;
}

/* One round: passes over the WAL until its uncopied tail is short. */
static void copy_round(sq_store *st) {
  sq_ckpt *k = &st->ckpt;
  for (int pass = 0; pass < MAX_PASSES; pass++) {
    int log = 0, done = 0;
    uint64_t t0 = sq_now_ns();
    pthread_mutex_lock(&k->mu);
    k->copying = true;
    pthread_cond_signal(&k->wb_cv);
    pthread_mutex_unlock(&k->mu);
    int rc = sqlite3_wal_checkpoint_v2(k->conn.db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    pthread_mutex_lock(&k->mu);
    k->copying = false;
    pthread_mutex_unlock(&k->mu);
    atomic_fetch_add_explicit(&st->stats.bg_checkpoint_ns, sq_now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->stats.bg_checkpoints, 1, memory_order_relaxed);
    if (rc != SQLITE_OK) {
      if (rc != SQLITE_BUSY)
        QIM_LOGW(NULL, "store.sqlite.checkpoint", "background=1 rc=%d msg=\"%s\"", rc,
                 sqlite3_errmsg(k->conn.db));
      return;
    }
    pthread_mutex_lock(&k->mu);
    k->copied = (uint64_t)done;
    pthread_mutex_unlock(&k->mu);
    if (log - done < TAIL_FRAMES) return;
  }
}

static void *ckpt_main(void *arg) {
  sq_store *st = arg;
  sq_ckpt *k = &st->ckpt;
  qim_log_name_thread("checkpoint");
  /* Linux gives each thread its own nice value; lowering a priority needs no privilege. */
  if (setpriority(PRIO_PROCESS, (id_t)gettid(), CKPT_NICE) != 0)
    QIM_LOGW(NULL, "store.sqlite.checkpoint", "nice=%d errno=%d", CKPT_NICE, errno);
  pthread_mutex_lock(&k->mu);
  for (;;) {
    while (!k->running && !k->closing) pthread_cond_wait(&k->cv, &k->mu);
    if (k->closing) break;
    pthread_mutex_unlock(&k->mu);
    pthread_mutex_lock(&k->copy_mu);
    copy_round(st);
    pthread_mutex_unlock(&k->copy_mu);
    pthread_mutex_lock(&k->mu);
    k->running = false;
    pthread_cond_broadcast(&k->done_cv);
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

/* The write-back thread: starts the database file's write-out while a pass copies. */
static void *writeback_main(void *arg) {
  sq_store *st = arg;
  sq_ckpt *k = &st->ckpt;
  qim_log_name_thread("writeback");
  const struct timespec every = {0, WRITEBACK_EVERY_MS * 1000000L};
  bool warned = false;
  pthread_mutex_lock(&k->mu);
  for (;;) {
    while (!k->copying && !k->closing) pthread_cond_wait(&k->wb_cv, &k->mu);
    if (k->closing) break;
    pthread_mutex_unlock(&k->mu);
    if (sync_file_range(k->db_fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0) {
      atomic_fetch_add_explicit(&st->stats.writebacks, 1, memory_order_relaxed);
    } else if (!warned) { /* not fatal: the round's own fsync still writes everything */
      QIM_LOGW(NULL, "store.sqlite.writeback", "errno=%d", errno);
      warned = true;
    }
    nanosleep(&every, NULL);
    pthread_mutex_lock(&k->mu);
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

int sq_ckpt_start(sq_store *st) {
  sq_ckpt *k = &st->ckpt;
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
  pthread_cond_init(&k->wb_cv, NULL);
  pthread_cond_init(&k->done_cv, NULL);
  pthread_mutex_init(&k->copy_mu, NULL);
  k->db_fd = -1;
  k->inited = true;
  int rc = sq_conn_open(st, &k->conn, true);
  if (rc) return rc;
  k->db_fd = open(st->path, O_RDONLY | O_CLOEXEC);
  if (k->db_fd < 0) return -errno;
  rc = pthread_create(&k->thread, NULL, ckpt_main, st);
  if (rc) return -rc;
  k->started = true;
  rc = pthread_create(&k->writeback, NULL, writeback_main, st);
  if (rc) return -rc;
  k->wb_started = true;
  return 0;
}

void sq_ckpt_stop(sq_store *st) {
  sq_ckpt *k = &st->ckpt;
  if (!k->inited) return;
  pthread_mutex_lock(&k->mu);
  k->closing = true;
  pthread_cond_signal(&k->cv);
  pthread_cond_signal(&k->wb_cv);
  pthread_cond_broadcast(&k->done_cv);
  pthread_mutex_unlock(&k->mu);
  if (k->started) pthread_join(k->thread, NULL);
  if (k->wb_started) pthread_join(k->writeback, NULL);
  k->started = k->wb_started = false;
  if (k->db_fd >= 0) close(k->db_fd);
  sq_conn_close(&k->conn);
  pthread_cond_destroy(&k->done_cv);
  pthread_cond_destroy(&k->wb_cv);
  pthread_cond_destroy(&k->cv);
  pthread_mutex_destroy(&k->copy_mu);
  pthread_mutex_destroy(&k->mu);
  k->inited = false;
}

/* The writer checkpoints itself (the remainder after a round, or past the hard limit). A
 * store-memory page set holding copy_mu makes it skip this copy; the next COMMIT decides
 * again. */
static void copy_inline(sq_store *st, sqlite3 *db, const char *name) {
  if (pthread_mutex_trylock(&st->ckpt.copy_mu) != 0) return;
  uint64_t t0 = sq_now_ns();
  sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  pthread_mutex_unlock(&st->ckpt.copy_mu);
  atomic_fetch_add_explicit(&st->stats.checkpoint_ns, sq_now_ns() - t0, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->stats.checkpoints, 1, memory_order_relaxed);
}

/* k->mu held. The WAL is at the hard bound while a round is under way. SQLite runs one
 * checkpoint at a time, so the writer's own copy would only get SQLITE_BUSY: a round that
 * gets no CPU (nice 19, both cores busy) holds the checkpoint lock while the WAL grows on.
 * The writer waits for the round to end instead; its commits pause meanwhile, which is the
 * CPU the round was missing. */
static void wait_round(sq_store *st) {
  sq_ckpt *k = &st->ckpt;
  uint64_t t0 = sq_now_ns();
  while (k->running && !k->closing) pthread_cond_wait(&k->done_cv, &k->mu);
  atomic_fetch_add_explicit(&st->stats.ckpt_wait_ns, sq_now_ns() - t0, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->stats.ckpt_waits, 1, memory_order_relaxed);
}

void sq_ckpt_after_commit(sq_store *st, sqlite3 *db, const char *name, int frames) {
  sq_ckpt *k = &st->ckpt;
  uint64_t n = frames > 0 ? (uint64_t)frames : 0;
  bool finish = false;
  pthread_mutex_lock(&k->mu);
  if (n < k->copied) k->copied = 0; /* the WAL started over */
  if (k->running && n >= sq_ckpt_inline_frames(st)) wait_round(st);
  if (!k->running) {
    uint64_t left = n - k->copied;
    bool long_wal = n >= sq_ckpt_restart_frames(st);
    finish = (long_wal && left <= TAIL_FRAMES) || n >= sq_ckpt_inline_frames(st);
    if (finish) {
      k->copied = 0;
    } else if (left >= (long_wal ? 1 : st->opt.checkpoint_frames)) {
      k->running = true;
      pthread_cond_signal(&k->cv);
    }
  }
  pthread_mutex_unlock(&k->mu);
  if (finish) copy_inline(st, db, name);
}
