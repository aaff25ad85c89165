/*
 * sqlite_sync.c — the SQLite backend's syncer: durability after the COMMIT instead of
 * inside it. The writer's COMMIT returns once its WAL frames are written (the WAL shim
 * defers the fdatasync, sqlite_vfs.c); this thread syncs the WAL, one fdatasync for every
 * COMMIT that returned meanwhile, and only then answers what depended on them.
 *
 * Why: about half of a COMMIT was the wait for its fdatasync, time in which the one
 * writer could not execute the next batch (bench/HISTORY.md, "What bounds 2 and 3"). Now
 * the disk syncs one batch while the writer runs the next.
 *
 * What keeps "durable before acknowledged" (DESIGN.md §1):
 * - A writer batch is answered once its COMMIT is durable.
 * - SQLite shows a COMMIT's frames to the other connections before the syncer has synced
 *   them, so a read may see a COMMIT that is not durable yet. Every read is answered once
 *   the last COMMIT begun when it ended is durable (sq_sync_visible): a COMMIT is counted
 *   before it shows anything, so a read that saw it counts it.
 * - A checkpoint syncs the WAL before it copies a frame into the database file: the
 *   checkpointer's connection never defers, and the writer turns deferral off in its WAL
 *   hook, before it checkpoints there. So the database file never holds what the WAL on
 *   disk does not.
 * - The WAL is written in order, so one sync covers every COMMIT that returned before it.
 * - A failed sync stops the store. Linux may drop the pages of a failed write-back and
 *   report the error once, so the WAL on disk may have a hole under frames a later sync
 *   would seem to confirm. Everything waiting fails as not durable, every later operation
 *   fails, and reopening the store recovers what the disk holds. What failed may still be
 *   there after the reopen: "not durable" means unconfirmed, and callers retry
 *   idempotently.
 * - The writer runs at most AHEAD_MAX COMMITs ahead of the disk.
 */
#include <errno.h>

#include "qim/log.h"
#include "qim/mem.h"
#include "store/sqlite_int.h"

#define AHEAD_MAX 64

/* Posts a settled list, or fails it when its durability was not confirmed. */
static void deliver(sq_store *st, qim_store_req *list, size_t n, bool write, bool durable) {
  if (!durable)
    sq_fail_unsynced(st, list, write);
  else if (write)
    atomic_fetch_add_explicit(&st->stats.fsyncs, 1, memory_order_relaxed);
  sq_post_batch(list, n);
}

/* Unlinks the waits due at `durable` (all of them on a failed store), in order. */
static sq_sync_wait *take_due(sq_sync *y, uint64_t durable, bool all) {
  sq_sync_wait *due = NULL, **due_tail = &due, **link = &y->head;
  y->tail = NULL;
  while (*link) {
    sq_sync_wait *w = *link;
    if (all || w->commit <= durable) {
      *link = w->next;
      w->next = NULL;
      *due_tail = w;
      due_tail = &w->next;
    } else {
      y->tail = w;
      link = &w->next;
    }
  }
  return due;
}

/* Answers the waits taken: confirmed when their COMMIT is durable and nothing failed. */
static void answer_due(sq_store *st, sq_sync_wait *due) {
  bool failed = sq_sync_failed(st);
  uint64_t durable = atomic_load(&st->sync.durable);
  while (due) {
    sq_sync_wait *w = due;
    due = w->next;
    atomic_fetch_add_explicit(&st->stats.sync_waits, w->n, memory_order_relaxed);
    deliver(st, w->list, w->n, w->write, !failed && w->commit <= durable);
    qim_free(w);
  }
}

/* One sync of everything written up to `target`; called and returns with y->mu held. */
static void sync_to(sq_store *st, uint64_t target) {
  sq_sync *y = &st->sync;
  pthread_mutex_unlock(&y->mu);
  uint64_t t0 = sq_now_ns();
  /* Store-memory mode: the journal is what the disk holds; the WAL is in memory. */
  int rc = st->mem.on ? (sq_memory_sync(st) ? SQLITE_IOERR_FSYNC : SQLITE_OK)
                      : y->wal->pMethods->xSync(y->wal, SQLITE_SYNC_NORMAL);
  uint64_t ns = sq_now_ns() - t0;
  atomic_fetch_add_explicit(&st->stats.sync_ns, ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&st->stats.syncs, 1, memory_order_relaxed);
  if (ns >= SQ_SLOW_NS) {
    atomic_fetch_add_explicit(&st->stats.slow_syncs, 1, memory_order_relaxed);
    QIM_LOGW(NULL, "store.sqlite.slow_sync", "ms=%.1f commits=%llu", (double)ns / 1e6,
             (unsigned long long)(target - atomic_load(&y->durable)));
  }
  if (rc != SQLITE_OK)
    QIM_LOGE(NULL, "store.sqlite.sync_failed",
             "rc=%d commits_unconfirmed=%llu: the store stops; reopen it", rc,
             (unsigned long long)(target - atomic_load(&y->durable)));
  pthread_mutex_lock(&y->mu);
  if (rc == SQLITE_OK)
    atomic_store(&y->durable, target);
  else
    atomic_store_explicit(&y->failed, true, memory_order_release);
  sq_sync_wait *due = take_due(y, target, rc != SQLITE_OK);
  pthread_cond_broadcast(&y->room);
  pthread_mutex_unlock(&y->mu);
  answer_due(st, due);
  pthread_mutex_lock(&y->mu);
}

static void *syncer_main(void *arg) {
  sq_store *st = arg;
  sq_sync *y = &st->sync;
  qim_log_name_thread("syncer");
  pthread_mutex_lock(&y->mu);
  for (;;) {
    /* A failed store syncs no more: nothing may be confirmed after the failure. */
    while (!y->closing && (y->written <= atomic_load(&y->durable) || sq_sync_failed(st)))
      pthread_cond_wait(&y->cv, &y->mu);
    if (sq_sync_failed(st) || y->written <= atomic_load(&y->durable)) break; /* closing */
    sync_to(st, y->written);
  }
  pthread_mutex_unlock(&y->mu);
  return NULL;
}

int sq_sync_start(sq_store *st) {
  sq_sync *y = &st->sync;
  pthread_mutex_init(&y->mu, NULL);
  pthread_cond_init(&y->cv, NULL);
  pthread_cond_init(&y->room, NULL);
  y->inited = true;
  int rc = st->mem.on ? SQLITE_OK : sq_vfs_sync_open(st->wconn.db, &y->wal);
  if (rc != SQLITE_OK) {
    QIM_LOGW(NULL, "store.sqlite.syncer", "rc=%d: no handle on the WAL, COMMITs sync themselves",
             rc);
    return 0;
  }
  rc = pthread_create(&y->thread, NULL, syncer_main, st);
  if (rc) {
    sq_vfs_sync_close(y->wal);
    y->wal = NULL;
    return -rc;
  }
  y->on = true;
  return 0;
}

/* The writer has stopped, so every COMMIT begun has returned: one last sync, then what
 * still waits is answered (a failed store fails it). */
void sq_sync_stop(sq_store *st) {
  sq_sync *y = &st->sync;
  if (!y->inited) return;
  if (y->on) {
    pthread_mutex_lock(&y->mu);
    y->closing = true;
    pthread_cond_signal(&y->cv);
    pthread_mutex_unlock(&y->mu);
    pthread_join(y->thread, NULL);
  }
  pthread_mutex_lock(&y->mu);
  sq_sync_wait *due = take_due(y, 0, true);
  pthread_mutex_unlock(&y->mu);
  answer_due(st, due);
  sq_vfs_sync_close(y->wal);
  y->wal = NULL;
  pthread_cond_destroy(&y->room);
  pthread_cond_destroy(&y->cv);
  pthread_mutex_destroy(&y->mu);
  y->inited = y->on = false;
}

uint64_t sq_sync_commit_begin(sq_store *st) {
  sq_sync *y = &st->sync;
  uint64_t commit = atomic_load(&y->begun) + 1; /* only the writer counts, and writes `written` */
  if (y->on && y->written - atomic_load(&y->durable) >= AHEAD_MAX) {
    pthread_mutex_lock(&y->mu);
    while (y->written - atomic_load(&y->durable) >= AHEAD_MAX && !sq_sync_failed(st))
      pthread_cond_wait(&y->room, &y->mu);
    pthread_mutex_unlock(&y->mu);
  }
  atomic_store(&y->begun, commit);
  if (y->on) sq_vfs_defer_syncs(true);
  return commit;
}

void sq_sync_commit_end(sq_store *st, uint64_t commit) {
  sq_sync *y = &st->sync;
  if (!y->on) return; /* the COMMIT synced itself; sq_sync_answer waits for nothing */
  sq_vfs_defer_syncs(false);
  pthread_mutex_lock(&y->mu);
  y->written = commit;
  pthread_cond_signal(&y->cv);
  pthread_mutex_unlock(&y->mu);
}

void sq_sync_answer(sq_store *st, qim_store_req *list, size_t n, uint64_t commit, bool write) {
  sq_sync *y = &st->sync;
  /* Without the syncer a COMMIT synced before it showed anything. Durable here means
   * confirmed before any failure. */
  if (!y->on || atomic_load(&y->durable) >= commit) {
    deliver(st, list, n, write, true);
    return;
  }
  pthread_mutex_lock(&y->mu);
  bool failed = sq_sync_failed(st), due = atomic_load(&y->durable) >= commit;
  if (!failed && !due) {
    sq_sync_wait *w = qim_malloc(sizeof *w);
    *w = (sq_sync_wait){.list = list, .n = n, .commit = commit, .write = write};
    if (y->tail)
      y->tail->next = w;
    else
      y->head = w;
    y->tail = w;
  }
  pthread_mutex_unlock(&y->mu);
  if (failed || due) deliver(st, list, n, write, due);
}
