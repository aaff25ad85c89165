/*
 * sqlite_memory.c — store-memory mode: the live database in a memory-backed directory,
 * made durable by a journal and snapshots on the disk (docs/store.md, "Next: the database
 * in memory"). Chosen with `sqlite:PATH?memory=DIR`.
 *
 * On the disk, beside PATH:
 * - PATH itself is the base: a whole database (no WAL) at the last snapshot's position.
 *   Opening makes a new one (SQLite's backup, renamed over it); snapshots write into it.
 * - PATH-journal/ holds segments named by the position of their first record. Each writer
 *   batch that committed is one record: magic, payload length, position, an 8-byte BLAKE3
 *   of position and payload, and the payload, the batch's row changes (sqlite_capture.c).
 *   The batch also wrote its position into `meta` ('journal_position'), so a snapshot knows
 *   where it stands.
 *
 * What keeps "durable before acknowledged": the syncer fdatasyncs the journal (not the
 * WAL, which lives in memory) before it answers a batch, in the order the segments were
 * written. Opening never trusts what a killed process left in the memory directory (it
 * may hold a batch the journal does not): it copies the snapshot there and applies every
 * journal record above the snapshot's position, stopping at the first record that is torn.
 *
 * A snapshot (its own thread, once the journal has grown by the snapshot spacing, or soon
 * after an erase) cuts the writer's segment, then takes a page set: the pages the
 * checkpoints wrote into the live file since the last set, read at one commit (set_take:
 * two passes, the second under copy_mu, so no copy is half done), whose position that
 * commit's `meta` row gives. The set is written to PATH-pages and synced, then written
 * into the base in place and synced, then PATH-pages is emptied: a crash part way through
 * the base leaves the set in PATH-pages, and opening writes it again (a double write, as
 * databases protect pages from torn writes). The segments whose records are all at or
 * below the set's position are then removed, one kept as the next segment. PATH-pages never
 * holds more than one set. While the store runs no block of these files is freed (the
 * file system may discard freed blocks, which held up the journal's syncs): PATH-pages and
 * the segments are rewritten in place, and after an erase zeroed in place.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blake3.h"
#include "qim/clock.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/sqlite_int.h"

#define RECORD_MAGIC 0x514a3031u /* "QJ01" */
#define SET_MAGIC 0x51505333u    /* "QPS3": a page set's header (below) */
#define RECORD_HEAD 24           /* magic u32, length u32, position u64, check u64 */
#define SNAPSHOT_MIN_BYTES (256u << 20)
#define STEP_BYTES (1u << 20) /* snapshots are written out this much at a time, */
#define PACE_MB_S 64          /* at most this fast */
#define ERASE_RETRY_MS 250    /* a snapshot after an erase that readers held short, again */
#define SNAPSHOT_NICE 15
#define LEAVING ".leaving" /* sq_memory_leave's copy of the base, beside it */

/* ---- paths and files ------------------------------------------------------------------------ */

static char *path_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = qim_malloc(n);
  snprintf(p, n, "%s%s", a, b);
  return p;
}

static char *segment_path(const sq_memory *m, uint64_t first) {
  char name[40];
  snprintf(name, sizeof name, "/%020" PRIu64, first);
  return path_join(m->jdir, name);
}

static int sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = fsync(fd) ? -errno : 0;
  close(fd);
  return rc;
}

/* A file's data made durable. */
static int sync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = fdatasync(fd) ? -errno : 0;
  close(fd);
  return rc;
}

static bool is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The directory of the base (and of the page log and the journal), made durable. */
static int sync_base_dir(const sq_memory *m) {
  const char *slash = strrchr(m->base, '/');
  char *dir = slash ? qim_strndup(m->base, (size_t)(slash - m->base)) : qim_strdup(".");
  int rc = sync_dir(dir);
  qim_free(dir);
  return rc;
}

static int copy_file(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC), out = -1;
  if (in < 0) return -errno;
  out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int rc = out < 0 ? -errno : 0;
  static __thread char buf[1 << 16];
  for (ssize_t n; rc == 0 && (n = read(in, buf, sizeof buf)) != 0;) {
    if (n < 0 || write(out, buf, (size_t)n) != n) rc = n < 0 ? -errno : -EIO;
  }
  close(in);
  if (out >= 0) close(out);
  return rc;
}

static void record_check(uint64_t position, const uint8_t *p, size_t n, uint8_t out[8]) {
  blake3_hasher h;
  blake3_hasher_init(&h);
  uint8_t pos[8];
  for (int i = 0; i < 8; i++) pos[i] = (uint8_t)(position >> (8 * i));
  blake3_hasher_update(&h, pos, 8);
  blake3_hasher_update(&h, p, n);
  blake3_hasher_finalize(&h, out, 8);
}

static void put32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *b, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* ---- opening: the snapshot into memory, then the journal above it --------------------------- */

/* A live path of the memory directory that names this database, so two stores never share one. */
static char *live_path(const char *memdir, const char *base) {
  uint8_t h[8];
  blake3_hasher hs;
  blake3_hasher_init(&hs);
  char *real = realpath(base, NULL);
  const char *name = real ? real : base;
  blake3_hasher_update(&hs, name, strlen(name));
  blake3_hasher_finalize(&hs, h, sizeof h);
  free(real);
  char tail[48];
  snprintf(tail, sizeof tail, "/qim-%016" PRIx64 ".db", get_le(h, 8));
  return path_join(memdir, tail);
}

/* A database file and the files SQLite keeps beside it: the live copy, or a conversion's. */
static void remove_database(const char *path) {
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    char *p = path_join(path, suffix[i]);
    unlink(p);
    qim_free(p);
  }
}

/* A base that a disk-mode store left with a WAL beside it is folded first. */
static int fold_base(const char *base) {
  char *wal = path_join(base, "-wal");
  bool has_wal = access(wal, F_OK) == 0;
  qim_free(wal);
  if (!has_wal) return 0;
  sqlite3 *db;
  int rc = sqlite3_open_v2(base, &db, SQLITE_OPEN_READWRITE, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", NULL,
                      NULL, NULL);
  sqlite3_close(db);
  return rc == SQLITE_OK ? 0 : sq_errno(rc);
}

/* A database file's page size, from its header (offset 16, big-endian; 1 means 65,536). */
static int page_size_of(const char *path, uint32_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t b[2];
  int rc = fd < 0 ? -errno : pread(fd, b, 2, 16) == 2 ? 0 : -EIO;
  if (fd >= 0) close(fd);
  if (rc == 0) *out = b[0] == 0 && b[1] == 1 ? 65536u : (uint32_t)(b[0] << 8 | b[1]);
  return rc == 0 && *out < 512 ? -EPROTO : rc;
}

static int plog_finish(sq_memory *m);

/* The base at m->base made a whole database at its position, as both openings (into memory,
 * and back to the default store) need it: a WAL left beside it folded in, its page size
 * read, a page set left in PATH-pages written into it. */
static int base_settle(sq_memory *m) {
  int rc = fold_base(m->base);
  if (rc == 0) rc = page_size_of(m->base, &m->page_size);
  if (rc == 0) rc = plog_finish(m);
  return rc;
}
static void mark_written(void *ctx, sqlite3_int64 off, int n);

/* Whether `path` starts with the 4-byte magic: a segment's first record, a page set. */
static bool starts_with(const char *path, uint32_t magic) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t b[4];
  bool yes = fd >= 0 && pread(fd, b, 4, 0) == 4 && get_le(b, 4) == magic;
  if (fd >= 0) close(fd);
  return yes;
}

/* Whether the files beside a base may hold commits it lacks: a segment that holds a record
 * (written from its start, so it has one there) or a page set not yet in the base. Not
 * knowing (an unreadable directory, a path too long) counts as yes. */
static bool journal_holds_commits(const char *jdir, const char *plog) {
  DIR *d = opendir(jdir);
  if (!d) return true;
  bool holds = starts_with(plog, SET_MAGIC);
  for (struct dirent *e; !holds && (e = readdir(d));) {
    char p[PATH_MAX];
    if (e->d_name[0] == '.') continue;
    holds = (size_t)snprintf(p, sizeof p, "%s/%s", jdir, e->d_name) >= sizeof p ||
            starts_with(p, RECORD_MAGIC);
  }
  closedir(d);
  return holds;
}

/* Removes a journal directory and its segments; 0 when it is gone. */
static int journal_remove(const char *jdir) {
  DIR *d = opendir(jdir);
  if (!d) return -errno;
  for (struct dirent *e; (e = readdir(d));) {
    char p[PATH_MAX];
    if (e->d_name[0] != '.' && (size_t)snprintf(p, sizeof p, "%s/%s", jdir, e->d_name) < sizeof p)
      unlink(p);
  }
  closedir(d);
  return rmdir(jdir) ? -errno : 0;
}

int sq_memory_refuse_plain(const char *path) {
  /* A directory: SQLite's own rollback journal by that name would be a file. One that holds
   * no commit (a first store-memory opening that failed before its first one) is removed,
   * for it stands where SQLite looks for that journal, and the default store it was opens. */
  char *jdir = path_join(path, "-journal"), *plog = path_join(path, "-pages");
  bool memory_store =
      is_dir(jdir) && (journal_holds_commits(jdir, plog) || journal_remove(jdir) != 0);
  qim_free(plog);
  if (memory_store)
    QIM_LOGE(NULL, "store.sqlite.memory_store_opened_plain",
             "path=%s journal=%s: a store-memory store; open it with ?memory=DIR", path, jdir);
  qim_free(jdir);
  return memory_store ? -EEXIST : 0;
}

int sq_memory_prepare(sq_store *st, const char *memdir) {
  sq_memory *m = &st->mem;
  m->on = true;
  m->jfd = m->prev_fd = m->spare_fd = -1;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  m->inited = true;
  m->base = st->path;
  m->jdir = path_join(m->base, "-journal");
  m->live = live_path(memdir, m->base);
  m->plog = path_join(m->base, "-pages");
  pthread_mutex_init(&m->dirty_mu, NULL);
  /* DIR is made if missing, as qimd's data directory is (one level). */
  if (mkdir(memdir, 0700) != 0 && errno != EEXIST) return -errno;
  if (mkdir(m->jdir, 0700) != 0 && errno != EEXIST) return -errno;
  remove_database(m->live);
  char *leaving = path_join(m->base, LEAVING);
  remove_database(leaving); /* a conversion back (sq_memory_leave) cut short before its rename */
  qim_free(leaving);
  int rc = 0;
  if (access(m->base, F_OK) == 0) {
    rc = base_settle(m);
    if (rc == 0) rc = copy_file(m->base, m->live);
  }
  if (rc == 0) rc = sq_vfs_track_writes(m->live, mark_written, m);
  st->path = qim_strdup(m->live);
  return rc;
}

static int meta_position(sqlite3 *db, uint64_t *out) {
  sqlite3_stmt *st;
  *out = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'journal_position'", -1, &st, NULL);
  if (rc != SQLITE_OK) return sq_errno(rc);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *out = (uint64_t)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_errno(rc);
}

static int set_position(sq_conn *c, uint64_t position) {
  sqlite3_stmt *st = sq_prep(c, "INSERT INTO meta(key, value) VALUES('journal_position', ?)"
                                " ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 1, position);
  return sq_run(c, st);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The segments' first positions, ascending. */
static size_t list_segments(const sq_memory *m, uint64_t **out) {
  *out = NULL;
  DIR *d = opendir(m->jdir);
  if (!d) return 0;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char *end;
    uint64_t first = strtoull(e->d_name, &end, 10);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end) continue;
    if (n == cap) *out = qim_realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof **out);
    (*out)[n++] = first;
  }
  closedir(d);
  if (n) qsort(*out, n, sizeof **out, cmp_u64);
  return n;
}

/* One statement of a replay's transaction; an error is logged. */
static int journal_exec(sqlite3 *db, const char *sql) {
  return sq_exec_logged(db, sql, "store.sqlite.journal");
}

/* Applies one segment's records above `*position` to `db`, each in its own transaction;
 * stops at a torn one (1). */
static int replay_segment(sqlite3 *db, sq_replay *y, const char *path, uint64_t *position) {
  FILE *f = fopen(path, "rb");
  if (!f) return -errno;
  int rc = 0;
  uint8_t head[RECORD_HEAD];
  qim_bytes payload = {0};
  while (rc == 0 && fread(head, 1, sizeof head, f) == sizeof head) {
    uint64_t len = get_le(head + 4, 4), pos = get_le(head + 8, 8);
    if (get_le(head, 4) != RECORD_MAGIC || len > (1u << 30)) {
      rc = 1;
      break;
    }
    payload.p = qim_realloc(payload.p, len + 1);
    payload.n = len;
    uint8_t check[8];
    if (fread(payload.p, 1, len, f) != len) {
      rc = 1;
      break;
    }
    record_check(pos, payload.p, len, check);
    if (memcmp(check, head + 16, 8) != 0) {
      rc = 1;
      break;
    }
    if (pos <= *position) continue; /* already in the snapshot */
    if (pos != *position + 1) { /* a record lost between two that were not */
      QIM_LOGE(NULL, "store.sqlite.journal_gap", "expected=%" PRIu64 " found=%" PRIu64,
               *position + 1, pos);
      rc = -EPROTO;
      break;
    }
    rc = journal_exec(db, "BEGIN IMMEDIATE");
    if (rc == 0) rc = sq_replay_apply(y, payload.p, payload.n);
    if (rc == 0) rc = journal_exec(db, "COMMIT");
    if (rc) {
      journal_exec(db, "ROLLBACK");
      QIM_LOGE(NULL, "store.sqlite.journal_replay", "position=%" PRIu64 " rc=%d", pos, rc);
    } else {
      *position = pos;
    }
  }
  qim_free(payload.p);
  fclose(f);
  return rc;
}

/* Applies the journal's records above the position `db`'s `meta` holds, segment by segment
 * (the rest of a segment past a torn record was never acknowledged; the next one goes on);
 * `*position` is where `db` stands afterwards. */
static int replay_journal(sqlite3 *db, const sq_memory *m, uint64_t *position, size_t *segments,
                          int *torn) {
  int rc = meta_position(db, position);
  uint64_t *firsts = NULL;
  size_t n = rc ? 0 : list_segments(m, &firsts);
  sq_replay *y = NULL;
  if (rc == 0 && n) rc = sq_replay_new(db, &y);
  *torn = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    char *path = segment_path(m, firsts[i]);
    rc = replay_segment(db, y, path, position);
    qim_free(path);
    if (rc == 1) {
      (*torn)++;
      rc = 0;
    }
  }
  sq_replay_free(y);
  qim_free(firsts);
  *segments = n;
  return rc;
}

int sq_memory_replay(sq_store *st) {
  sq_memory *m = &st->mem;
  uint64_t position;
  size_t n;
  int torn;
  int rc = replay_journal(st->wconn.db, m, &position, &n, &torn);
  if (rc) return rc;
  m->position = m->position_written = position;
  QIM_LOGI(NULL, "store.sqlite.journal_replayed", "position=%" PRIu64 " segments=%zu torn=%d",
           position, n, torn);
  return 0;
}

/* ---- leaving store-memory mode -------------------------------------------------------------- */

/* The journal's commits applied to a copy of the base, synced; then the copy renamed over
 * the base and the journal and page log removed, so PATH is a whole default store. Until
 * the rename, the base and the journal are as they were (a crash loses nothing and the
 * next opening, either way, starts again); after it, the base holds every record the
 * journal does, so a crash before the journal is gone leaves only records a replay skips. */
static int leave_into(const sq_memory *m, const char *tmp, uint64_t *position, size_t *segments,
                      int *torn) {
  sqlite3 *db = NULL;
  remove_database(tmp); /* what a leaving cut short left: never applied to a new copy */
  int rc = copy_file(m->base, tmp);
  if (rc == 0) rc = sq_errno(sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE, NULL));
  /* The copy is thrown away unless it is whole, so its commits need no sync of their own
   * and no journal on the disk: one sync at the end. */
  if (rc == 0) rc = journal_exec(db, "PRAGMA journal_mode=MEMORY; PRAGMA synchronous=OFF;");
  if (rc == 0) rc = replay_journal(db, m, position, segments, torn);
  if (db) sqlite3_close(db);
  return rc == 0 ? sync_path(tmp) : rc;
}

int sq_memory_leave(const char *path) {
  sq_memory m = {.base = (char *)path};
  m.jdir = path_join(path, "-journal");
  if (!is_dir(m.jdir)) { /* a default store already */
    qim_free(m.jdir);
    return 0;
  }
  m.plog = path_join(path, "-pages");
  char *tmp = path_join(path, LEAVING);
  uint64_t position = 0;
  size_t segments = 0;
  int torn = 0;
  int rc = base_settle(&m);
  if (rc == 0) rc = leave_into(&m, tmp, &position, &segments, &torn);
  if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
  if (rc == 0) rc = sync_base_dir(&m);
  if (rc == 0 && unlink(m.plog) != 0 && errno != ENOENT) rc = -errno;
  if (rc == 0) rc = journal_remove(m.jdir);
  if (rc == 0) rc = sync_base_dir(&m);
  if (rc) remove_database(tmp);
  qim_log(rc ? QIM_LOG_ERROR : QIM_LOG_INFO, NULL, "store.sqlite.memory_left",
          "path=%s position=%" PRIu64 " segments=%zu torn=%d rc=%d", path, position, segments,
          torn, rc);
  qim_free(tmp);
  qim_free(m.plog);
  qim_free(m.jdir);
  return rc;
}

/* ---- page sets: the pages the copies changed, through the page log into the base ---------------- */

/* The VFS's report of a write to the live database file. */
static void mark_written(void *ctx, sqlite3_int64 off, int n) {
  sq_memory *m = ctx;
  uint32_t ps = m->page_size ? m->page_size : 4096;
  pthread_mutex_lock(&m->dirty_mu);
  for (uint64_t pg = (uint64_t)off / ps; n > 0 && pg <= ((uint64_t)off + (uint64_t)n - 1) / ps; pg++) {
    if (pg >= m->dirty_pages) {
      size_t cap = m->dirty_pages ? m->dirty_pages : 1u << 16;
      while (cap <= pg) cap *= 2;
      m->dirty = qim_realloc(m->dirty, cap / 8);
      memset(m->dirty + m->dirty_pages / 8, 0, (cap - m->dirty_pages) / 8);
      m->dirty_pages = cap;
    }
    m->dirty[pg / 8] |= (uint8_t)(1u << (pg % 8));
  }
  pthread_mutex_unlock(&m->dirty_mu);
}

/* The pages written since the last call, as a bitmap of `*pages` bits; the map starts over. */
static uint8_t *dirty_take(sq_memory *m, size_t *pages) {
  pthread_mutex_lock(&m->dirty_mu);
  *pages = m->dirty_pages;
  uint8_t *bits = qim_malloc(*pages / 8 + 1);
  if (*pages) memcpy(bits, m->dirty, *pages / 8);
  if (m->dirty) memset(m->dirty, 0, *pages / 8);
  pthread_mutex_unlock(&m->dirty_mu);
  return bits;
}

/* A set that was not written: its pages stay owed to the next one. */
static void dirty_give_back(sq_memory *m, const uint8_t *bits, size_t pages) {
  pthread_mutex_lock(&m->dirty_mu);
  for (size_t i = 0; i < pages / 8 && i < m->dirty_pages / 8; i++) m->dirty[i] |= bits[i];
  pthread_mutex_unlock(&m->dirty_mu);
}

static void dirty_clear(sq_memory *m) {
  size_t pages;
  qim_free(dirty_take(m, &pages));
}

/* The position a database file stands at, read from the file alone (no WAL, no locks). */
static int file_position(const char *path, uint64_t *out) {
  char *uri = sqlite3_mprintf("file:%s?immutable=1", path);
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
  sqlite3_free(uri);
  rc = rc == SQLITE_OK ? meta_position(db, out) : sq_errno(rc);
  sqlite3_close(db);
  return rc;
}

/*
 * A page set in PATH-pages, laid out for direct I/O (the set is the snapshot's bulk: no
 * page-cache copies of it) and written in place, so no block of the file is freed or
 * allocated while the store runs (the file system discards freed blocks, and the journal's
 * syncs waited behind that): the header, one page (magic, count, position, pages in the
 * database file, and a BLAKE3 of the pages, the index and the header before it); the pages
 * from the second page on; then the index, padded to whole pages (a u32 page number per
 * page, in the order written: a page may come twice, and the later wins). One sync covers
 * it all: a set whose header reached the disk but not all its pages fails the check and
 * counts as never written. An empty page log is one whose header is zeros. A set is
 * gathered and written a slice at a time, so a snapshot holds SLICE_BYTES of pages.
 */
#define HEADER 32 /* of its page */
#define SLICE_BYTES (1u << 20)

typedef struct page_set {
  uint32_t *index; /* page numbers, in the order the pages were written */
  size_t count, cap, flushed;
  uint64_t position, db_pages;
  blake3_hasher hash;
  int fd;            /* PATH-pages */
  uint8_t *slice;    /* pages gathered, not yet written */
  size_t in_slice, slice_pages;
  uint64_t t0;       /* pacing: when the first slice went out */
  bool paced;
} page_set;

/* Direct I/O where the page size allows it and the file system has it (tmpfs has not). */
static int open_direct(const sq_memory *m, const char *path, int flags) {
  int fd = m->page_size % 4096 ? -1 : open(path, flags | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) fd = open(path, flags | O_CLOEXEC, 0600);
  return fd;
}

/* Aligned for direct I/O; like qim_malloc, a failure aborts (mem.h's policy). */
static void *aligned_buffer(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n) != 0) abort();
  return p;
}

static void *slice_new(const sq_memory *m, size_t *pages) {
  *pages = SLICE_BYTES / m->page_size ? SLICE_BYTES / m->page_size : 1;
  return aligned_buffer(*pages * m->page_size);
}

/* Pauses so that `done` bytes written since t0 go out at most PACE_MB_S. */
static void pace(uint64_t t0, uint64_t done) {
  uint64_t due = t0 + done * 1000u / PACE_MB_S, now = sq_now_ns(); /* ns at PACE_MB_S MB/s */
  if (due > now) usleep((useconds_t)((due - now) / 1000u));
}

/* Writes zeros over [0, size) of `fd` in place (nothing freed: the file system discards
 * freed blocks, and the journal's syncs waited behind that), paced like the snapshots, so
 * a burst of zeros does not hold up the journal's syncs either; then syncs. */
static int zero_in_place(sq_memory *m, int fd, uint64_t size) {
  static _Alignas(4096) const uint8_t zeros[1 << 16]; /* aligned: the page log is written with direct I/O */
  uint64_t t0 = sq_now_ns();
  int rc = 0;
  for (uint64_t off = 0; rc == 0 && off < size; off += sizeof zeros) {
    size_t n = size - off < sizeof zeros ? (size_t)(size - off) : sizeof zeros;
    if (pwrite(fd, zeros, n, (off_t)off) != (ssize_t)n) rc = -EIO;
    if ((off + n) % STEP_BYTES && off + n < size) continue;
    sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    pace(t0, off + n);
    pthread_mutex_lock(&m->mu);
    if (m->snap_closing) rc = -ECANCELED; /* zeros the store no longer needs */
    pthread_mutex_unlock(&m->mu);
  }
  return rc == 0 && fdatasync(fd) ? -errno : rc;
}

static int slice_flush(const sq_memory *m, page_set *s) {
  if (!s->in_slice) return 0;
  size_t n = s->in_slice * m->page_size;
  if (pwrite(s->fd, s->slice, n, (off_t)((1 + s->flushed) * m->page_size)) != (ssize_t)n)
    return -EIO;
  blake3_hasher_update(&s->hash, s->slice, n);
  s->flushed += s->in_slice;
  s->in_slice = 0;
  if (s->paced) pace(s->t0, (uint64_t)s->flushed * m->page_size);
  return 0;
}

/* Adds pages [first, first + n) as the live file holds them now. Not `strict`: the file
 * may have shrunk meanwhile, and what it no longer reaches is left out. */
static int set_add_run(const sq_memory *m, page_set *s, int live, uint64_t first, size_t n,
                       bool strict) {
  uint32_t ps = m->page_size;
  while (n) {
    size_t k = s->slice_pages - s->in_slice < n ? s->slice_pages - s->in_slice : n;
    ssize_t r = pread(live, s->slice + s->in_slice * ps, k * ps, (off_t)(first * ps));
    if (r != (ssize_t)(k * ps)) {
      if (strict || r < 0) return -EIO;
      k = (size_t)r / ps;
      n = k; /* the rest is past the file's end */
    }
    if (s->count + k > s->cap) {
      s->cap = (s->count + k) * 2;
      s->index = qim_realloc(s->index, s->cap * sizeof *s->index);
    }
    for (size_t i = 0; i < k; i++) s->index[s->count++] = (uint32_t)(first + i);
    s->in_slice += k;
    first += k;
    n -= k;
    if (s->in_slice == s->slice_pages) {
      int rc = slice_flush(m, s);
      if (rc) return rc;
    }
    if (!k) break;
  }
  return 0;
}

/* Adds the pages `bits` marks below `limit`, runs of neighbours read at once. */
static int set_gather(const sq_memory *m, page_set *s, int live, const uint8_t *bits,
                      size_t pages, uint64_t limit, bool strict) {
  size_t scan = pages < limit ? pages : (size_t)limit;
  for (size_t pg = 0; pg < scan;) {
    if (!(bits[pg / 8] & (1u << (pg % 8)))) {
      pg++;
      continue;
    }
    size_t end = pg;
    while (end < scan && (bits[end / 8] & (1u << (end % 8)))) end++;
    int rc = set_add_run(m, s, live, pg, end - pg, strict);
    if (rc) return rc;
    pg = end;
  }
  return 0;
}

/* The index after the pages, then the header at the front, then the one sync. */
static int set_finish_log(const sq_memory *m, page_set *s) {
  int rc = slice_flush(m, s);
  uint32_t ps = m->page_size;
  size_t ilen = (s->count * 4 + ps - 1) / ps * ps;
  uint8_t *buf = aligned_buffer(ilen + ps), *head = buf + ilen;
  memset(buf, 0, ilen + ps);
  for (size_t i = 0; i < s->count; i++) put32(buf + 4 * i, s->index[i]);
  put32(head, SET_MAGIC);
  put32(head + 4, (uint32_t)s->count);
  put64(head + 8, s->position);
  put64(head + 16, s->db_pages);
  blake3_hasher_update(&s->hash, buf, s->count * 4);
  blake3_hasher_update(&s->hash, head, 24);
  blake3_hasher_finalize(&s->hash, head + 24, 8);
  off_t at = (off_t)((1 + s->count) * ps);
  if (rc == 0 && ilen && pwrite(s->fd, buf, ilen, at) != (ssize_t)ilen) rc = -EIO;
  if (rc == 0 && pwrite(s->fd, head, ps, 0) != (ssize_t)ps) rc = -EIO;
  if (rc == 0 && fdatasync(s->fd)) rc = -errno;
  free(buf);
  return rc;
}

/*
 * Gathers the pages the copies wrote since the last set, at one commit, and writes them to
 * PATH-pages (synced). Two passes, as a live migration copies memory: the first reads them
 * while the checkpoints go on, holding nothing up; the second holds copy_mu, so no copy is
 * half done and the file stands at one commit, and reads again what was written since the
 * first began. Holding the checkpointer for the whole read instead (at nice 19, 300 MB on a
 * loaded machine took it 1.4-2.9 s) held the writer at the WAL's hard bound: p99 1.5-2.1 s
 * at 5,000 msgs/s. `cover` (an erase): the WAL copied up to now first.
 */
static int set_take(sq_store *st, page_set *s, bool cover) {
  sq_memory *m = &st->mem;
  int live = open(m->live, O_RDONLY | O_CLOEXEC);
  s->fd = open_direct(m, m->plog, O_WRONLY | O_CREAT);
  if (live < 0 || s->fd < 0) {
    int rc = -errno;
    if (live >= 0) close(live);
    return rc;
  }
  s->slice = slice_new(m, &s->slice_pages);
  s->t0 = sq_now_ns();
  s->paced = true;
  blake3_hasher_init(&s->hash);
  size_t n1, n2;
  uint8_t *first = dirty_take(m, &n1), *second = NULL;
  int rc = set_gather(m, s, live, first, n1, UINT64_MAX, false);
  pthread_mutex_lock(&st->ckpt.copy_mu);
  s->paced = false; /* no pause while the checkpointer waits for copy_mu */
  /* The checkpointer's connection: its thread uses it only under copy_mu. */
  if (cover) sqlite3_wal_checkpoint_v2(st->ckpt.conn.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  second = dirty_take(m, &n2);
  struct stat sb;
  if (rc == 0 && fstat(live, &sb) != 0) rc = -errno;
  if (rc == 0) s->db_pages = (uint64_t)sb.st_size / m->page_size;
  if (rc == 0) rc = set_gather(m, s, live, second, n2, s->db_pages, true);
  if (rc == 0) rc = slice_flush(m, s); /* the file may move on once copy_mu is let go */
  if (rc == 0) rc = file_position(m->live, &s->position);
  pthread_mutex_unlock(&st->ckpt.copy_mu);
  close(live);
  if (rc == 0) rc = set_finish_log(m, s);
  if (rc) { /* the pages stay owed to the next set */
    dirty_give_back(m, first, n1);
    dirty_give_back(m, second, n2);
  }
  qim_free(first);
  qim_free(second);
  return rc;
}

/* The set's pages read back from PATH-pages and written into the base in place, runs of
 * neighbours at once, then the base cut to its size and synced. A crash part way leaves
 * the set in PATH-pages, and opening writes it again (plog_finish). The base is written
 * through the page cache, its write-out started after each slice: on a grown store most
 * runs are one page, and with direct I/O each was its own request, queued ahead of the
 * journal's syncs (6-step sequences at 5,000 msgs/s: 13 of 18 steps within 50 ms with
 * direct I/O, 17 of 18 without; the snapshot thread's CPU per set up to a third less). */
static int base_apply(sq_memory *m, page_set *s, bool paced) {
  uint32_t ps = m->page_size;
  int in = open_direct(m, m->plog, O_RDONLY), out = open(m->base, O_WRONLY | O_CLOEXEC);
  int rc = in < 0 || out < 0 ? -errno : 0;
  uint8_t *slice = slice_new(m, &s->slice_pages);
  uint64_t t0 = sq_now_ns();
  for (size_t at = 0; rc == 0 && at < s->count; at += s->slice_pages) {
    size_t k = s->count - at < s->slice_pages ? s->count - at : s->slice_pages;
    if (pread(in, slice, k * ps, (off_t)((1 + at) * ps)) != (ssize_t)(k * ps)) rc = -EIO;
    for (size_t i = 0; rc == 0 && i < k;) {
      size_t j = i + 1;
      while (j < k && s->index[at + j] == s->index[at + j - 1] + 1) j++;
      size_t n = (j - i) * ps;
      if (pwrite(out, slice + i * ps, n, (off_t)((uint64_t)s->index[at + i] * ps)) != (ssize_t)n)
        rc = -EIO;
      i = j;
    }
    if (rc == 0 && sync_file_range(out, 0, 0, SYNC_FILE_RANGE_WRITE)) rc = -errno;
    if (paced) pace(t0, (uint64_t)(at + k) * ps);
  }
  if (rc == 0 && ftruncate(out, (off_t)(s->db_pages * ps))) rc = -errno;
  if (rc == 0 && fdatasync(out)) rc = -errno;
  free(slice);
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return rc;
}

/* The page log emptied once its set is in the base: its header zeroed, the file kept at its
 * size (no block freed), so the next set is written in place. After an erase all of it is
 * zeroed: its pages beyond the set may hold the erased bytes. */
static int plog_clear(sq_memory *m, bool erase) {
  int fd = open_direct(m, m->plog, O_WRONLY | O_CREAT);
  if (fd < 0) return -errno;
  struct stat sb;
  int rc = fstat(fd, &sb) ? -errno : 0;
  if (rc == 0 && erase) {
    rc = zero_in_place(m, fd, (uint64_t)sb.st_size);
  } else if (rc == 0) {
    uint8_t *zero = aligned_buffer(m->page_size);
    memset(zero, 0, m->page_size);
    if (pwrite(fd, zero, m->page_size, 0) != (ssize_t)m->page_size) rc = -EIO;
    free(zero);
    if (rc == 0 && fdatasync(fd)) rc = -errno;
  }
  close(fd);
  if (rc == 0) rc = sync_base_dir(m);
  return rc;
}

/* Marks a set's pages written again: a set that did not reach the base is owed to the next. */
static void dirty_mark_set(sq_memory *m, const page_set *s) {
  for (size_t i = 0; i < s->count; i++)
    mark_written(m, (sqlite3_int64)((uint64_t)s->index[i] * m->page_size), (int)m->page_size);
}

/* Reads PATH-pages' header and index, and checks the whole set against its BLAKE3; 1 when
 * it holds no whole set (empty, or torn by a crash while it was written: the base was then
 * not yet touched). */
static int plog_read(sq_memory *m, page_set *s) {
  uint32_t ps = m->page_size;
  int fd = open(m->plog, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 1 : -errno;
  struct stat sb;
  uint8_t head[HEADER], check[8];
  int rc = fstat(fd, &sb) != 0 ? -errno : 1;
  uint64_t size = rc == 1 ? (uint64_t)sb.st_size : 0;
  if (size >= HEADER && pread(fd, head, HEADER, 0) == HEADER && get_le(head, 4) == SET_MAGIC) {
    s->count = get_le(head + 4, 4);
    if (size >= (1 + s->count) * ps + s->count * 4) {
      s->flushed = s->count;
      s->position = get_le(head + 8, 8);
      s->db_pages = get_le(head + 16, 8);
      s->index = qim_malloc(s->count * 4 + 1);
      uint8_t *idx = qim_malloc(s->count * 4 + 1), *buf = qim_malloc(SLICE_BYTES);
      blake3_hasher_init(&s->hash);
      bool ok = true;
      for (uint64_t at = 0; ok && at < s->count * ps; at += SLICE_BYTES) {
        size_t n = s->count * ps - at < SLICE_BYTES ? s->count * ps - at : SLICE_BYTES;
        ok = pread(fd, buf, n, (off_t)(ps + at)) == (ssize_t)n;
        blake3_hasher_update(&s->hash, buf, n);
      }
      off_t idx_at = (off_t)((1 + s->count) * ps);
      ok = ok && pread(fd, idx, s->count * 4, idx_at) == (ssize_t)(s->count * 4);
      blake3_hasher_update(&s->hash, idx, s->count * 4);
      blake3_hasher_update(&s->hash, head, 24);
      blake3_hasher_finalize(&s->hash, check, 8);
      if (ok && memcmp(check, head + 24, 8) == 0) {
        for (size_t i = 0; i < s->count; i++) s->index[i] = (uint32_t)get_le(idx + 4 * i, 4);
        rc = 0;
      }
      qim_free(idx);
      qim_free(buf);
    }
  }
  close(fd);
  return rc;
}

/* Opening: a set the last run wrote to PATH-pages but may not have finished writing into
 * the base goes into it now (again, if it did: each page is whole). */
static int plog_finish(sq_memory *m) {
  page_set s = {0};
  int rc = plog_read(m, &s);
  if (rc == 0) rc = base_apply(m, &s, false);
  if (rc == 0 || rc == 1) rc = plog_clear(m, false);
  QIM_LOGI(NULL, "store.sqlite.page_log_finished", "pages=%zu position=%" PRIu64 " rc=%d",
           s.count, s.position, rc);
  qim_free(s.index);
  return rc;
}

static int write_base(sq_store *st, uint64_t *position);
static void remove_below(sq_memory *m, uint64_t first_kept);

/* ---- the writer's side ------------------------------------------------------------------------ */

/*
 * A segment is written in place over zeros laid down when it is made, as long as the
 * snapshot spacing plus a quarter: an fdatasync of a file that grows (or of blocks that
 * fallocate only reserved) also commits the file system's journal, a second device flush
 * per sync. Replay reads the zeros after the last record as the end of the segment.
 */
static int open_segment_at(sq_memory *m, const char *path, int *fd) {
  *fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (*fd < 0) return -errno;
  return zero_in_place(m, *fd, m->snapshot_bytes + m->snapshot_bytes / 4);
}

/* The next segment, laid down as zeros under a name no replay reads, ahead of the cut that
 * will need it: the snapshot thread makes it after each snapshot (and when it starts).
 * Laid down at the cut itself, its 5 s of paced writes fell into the step the snapshot did. */
static void spare_prepare(sq_memory *m) {
  if (m->spare_fd >= 0) return;
  char *next = path_join(m->jdir, "/next");
  if (open_segment_at(m, next, &m->spare_fd) != 0 && m->spare_fd >= 0) {
    close(m->spare_fd);
    m->spare_fd = -1;
  }
  qim_free(next);
}

/* The first segment at opening: the spare the last run left, if it is whole (zeros, or a
 * recycled segment's old records, which a replay skips), or a new one. */
static int open_segment(sq_memory *m, uint64_t first, int *fd) {
  char *path = segment_path(m, first), *next = path_join(m->jdir, "/next");
  struct stat sb;
  uint64_t size = m->snapshot_bytes + m->snapshot_bytes / 4;
  int rc = -1;
  if (stat(next, &sb) == 0 && (uint64_t)sb.st_size == size && rename(next, path) == 0) {
    *fd = open(path, O_WRONLY | O_CLOEXEC);
    rc = *fd < 0 ? -errno : 0;
  }
  if (rc) rc = open_segment_at(m, path, fd);
  qim_free(path);
  qim_free(next);
  return rc ? rc : sync_dir(m->jdir);
}

int sq_memory_start(sq_store *st) {
  sq_memory *m = &st->mem;
  m->snapshot_bytes = m->snapshot_kb ? m->snapshot_kb * 1024 : SNAPSHOT_MIN_BYTES;
  /* What opening did is in no segment (a new store's schema and layout, a migration, the
   * records just replayed): the open starts from a base that holds it all. */
  uint64_t position = 0;
  int page = 0;
  int rc = sq_pragma_int(&st->wconn, "page_size", &page);
  m->page_size = (uint32_t)page;
  dirty_clear(m); /* what is written from here on goes into the next page set */
  if (rc == 0) rc = write_base(st, &position);
  if (rc == 0 && position != m->position) rc = -EPROTO;
  if (rc == 0) rc = plog_clear(m, false);
  if (rc == 0) remove_below(m, UINT64_MAX);
  if (rc == 0) rc = sq_capture_new(st->wconn.db, &m->cap);
  if (rc == 0) rc = open_segment(m, m->position + 1, &m->jfd);
  if (rc == 0) rc = pthread_create(&m->snap_thread, NULL, sq_memory_snapshot_main, st) ? -EAGAIN : 0;
  if (rc == 0) m->snap_started = true;
  return rc;
}

int sq_memory_before_commit(sq_conn *c) {
  sq_memory *m = &c->st->mem;
  return set_position(c, m->position + 1);
}

int sq_memory_after_commit(sq_store *st) {
  sq_memory *m = &st->mem;
  const uint8_t *p;
  size_t n;
  int rc = sq_capture_bytes(m->cap, &p, &n);
  if (rc) {
    sq_capture_clear(m->cap);
    return rc;
  }
  uint64_t position = ++m->position;
  uint8_t head[RECORD_HEAD];
  put32(head, RECORD_MAGIC);
  put32(head + 4, (uint32_t)n);
  put64(head + 8, position);
  record_check(position, p, n, head + 16);
  pthread_mutex_lock(&m->mu);
  m->jbuf.p = qim_realloc(m->jbuf.p, m->jbuf.n + sizeof head + n);
  memcpy(m->jbuf.p + m->jbuf.n, head, sizeof head);
  memcpy(m->jbuf.p + m->jbuf.n + sizeof head, p, n);
  m->jbuf.n += sizeof head + n;
  m->since_snapshot += sizeof head + n;
  m->position_written = position;
  bool due = m->since_snapshot >= m->snapshot_bytes && !m->snap_due;
  if (due) {
    m->snap_due = true;
    pthread_cond_signal(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
  sq_capture_clear(m->cap);
  return 0;
}

void sq_memory_note_erase(sq_store *st) {
  sq_memory *m = &st->mem;
  pthread_mutex_lock(&m->mu);
  m->snap_due = true;
  m->erase_wanted = true;
  pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

/* ---- the syncer's side ------------------------------------------------------------------------ */

/* Writes what is pending for one segment and syncs it. */
static int write_sync(int fd, qim_bytes *pending) {
  int rc = 0;
  for (size_t at = 0; rc == 0 && at < pending->n;) {
    ssize_t w = write(fd, pending->p + at, pending->n - at);
    if (w < 0 && errno != EINTR) rc = -errno;
    if (w > 0) at += (size_t)w;
  }
  qim_bytes_free(pending);
  return rc == 0 && fdatasync(fd) ? -errno : rc;
}

/*
 * The syncer, not the writer, writes the records: the writer only appends them to a buffer.
 * A writer appending to the journal itself waited whenever its page was being written out
 * by the sync under way (a page under write-back cannot change), ~400 µs a batch: its
 * COMMITs took 625 µs against 193 for today's store. The order is kept: the records of a
 * segment cut by a snapshot (prev) are written and synced before the new one's.
 */
int sq_memory_sync(sq_store *st) {
  sq_memory *m = &st->mem;
  pthread_mutex_lock(&m->mu);
  int prev = m->prev_fd, cur = m->jfd;
  qim_bytes prev_buf = m->prev_buf, cur_buf = m->jbuf;
  m->prev_fd = -1;
  m->prev_buf = m->jbuf = (qim_bytes){0};
  pthread_mutex_unlock(&m->mu);
  int rc = 0;
  if (prev >= 0) {
    rc = write_sync(prev, &prev_buf);
    close(prev);
  }
  if (rc == 0)
    rc = write_sync(cur, &cur_buf);
  else
    qim_bytes_free(&cur_buf);
  return rc;
}

/* ---- snapshots --------------------------------------------------------------------------------- */

/* Cuts the writer's segment: the new one starts above every record written so far. Returns
 * the first position of the new segment. */
static uint64_t rotate(sq_store *st) {
  sq_memory *m = &st->mem;
  /* The new segment (the spare) is renamed to its first position under the lock the writer
   * takes for every batch. */
  char *next = path_join(m->jdir, "/next");
  spare_prepare(m); /* ready already, unless the last snapshot could not make it */
  int fd = m->spare_fd;
  m->spare_fd = -1;
  bool made = fd >= 0;
  pthread_mutex_lock(&m->mu);
  while (m->prev_fd >= 0 && !m->snap_closing) { /* the syncer still owes the last one a sync */
    pthread_mutex_unlock(&m->mu);
    usleep(1000);
    pthread_mutex_lock(&m->mu);
  }
  uint64_t first = m->position_written + 1;
  char *path = segment_path(m, first);
  made = made && rename(next, path) == 0;
  qim_free(path);
  if (made) {
    m->prev_fd = m->jfd;
    m->prev_buf = m->jbuf; /* its records not yet written */
    m->jbuf = (qim_bytes){0};
    m->jfd = fd;
  } else {
    if (fd >= 0) close(fd);
    first = 0; /* keep writing the old one; no segment is removed this time */
  }
  m->since_snapshot = 0;
  m->snapshot_bytes = m->snapshot_kb ? m->snapshot_kb * 1024 : SNAPSHOT_MIN_BYTES;
  pthread_mutex_unlock(&m->mu);
  if (made) sync_dir(m->jdir);
  unlink(next);
  qim_free(next);
  return first;
}

/* SQLite's backup of one read of the live database (the WAL's commits in it) to `tmp`,
 * synced; `*position` is where that read stands. Opening's new base only: it writes the
 * whole database at once. */
static int backup_to(sq_store *st, const char *tmp, uint64_t *position) {
  sqlite3 *src = NULL, *dst = NULL;
  unlink(tmp);
  int rc = sqlite3_open_v2(st->mem.live, &src, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(dst, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;", NULL, NULL, NULL);
  /* The read that pins one commit for the whole copy, and the position it stands at. */
  if (rc == SQLITE_OK) rc = sqlite3_exec(src, "BEGIN", NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = meta_position(src, position) ? SQLITE_IOERR : SQLITE_OK;
  sqlite3_backup *b = rc == SQLITE_OK ? sqlite3_backup_init(dst, "main", src, "main") : NULL;
  if (rc == SQLITE_OK) rc = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(dst);
  int fin = b ? sqlite3_backup_finish(b) : SQLITE_OK;
  if (rc == SQLITE_DONE) rc = fin;
  sqlite3_close(src);
  sqlite3_close(dst);
  if (rc == SQLITE_OK && sync_path(tmp) != 0) rc = SQLITE_IOERR_FSYNC;
  return rc == SQLITE_OK ? 0 : sq_errno(rc);
}

static void remove_below(sq_memory *m, uint64_t first_kept) {
  uint64_t *firsts;
  size_t n = list_segments(m, &firsts);
  for (size_t i = 0; i < n; i++)
    if (firsts[i] < first_kept) {
      char *path = segment_path(m, firsts[i]);
      unlink(path);
      qim_free(path);
    }
  qim_free(firsts);
  sync_dir(m->jdir);
}

/* The live database as the new base: copied, synced, renamed over it. */
static int write_base(sq_store *st, uint64_t *position) {
  sq_memory *m = &st->mem;
  char *tmp = path_join(m->base, ".tmp");
  int rc = backup_to(st, tmp, position);
  if (rc == 0 && rename(tmp, m->base) != 0) rc = -errno;
  if (rc == 0) rc = sync_base_dir(m);
  if (rc) unlink(tmp);
  qim_free(tmp);
  return rc;
}

/* A covered segment kept as the next one (the spare) instead of removed: its blocks are
 * neither freed nor allocated again (the file system discards freed blocks, and the
 * journal's syncs waited behind that). Its old records stay until overwritten; a replay
 * skips them, as every one is at or below the position of the base that covers it. */
static bool recycle(sq_memory *m, const char *path) {
  struct stat sb;
  uint64_t size = m->snapshot_bytes + m->snapshot_bytes / 4;
  if (m->spare_fd >= 0 || stat(path, &sb) != 0 || (uint64_t)sb.st_size != size) return false;
  char *next = path_join(m->jdir, "/next");
  bool ok = rename(path, next) == 0;
  if (ok) m->spare_fd = open(next, O_WRONLY | O_CLOEXEC);
  qim_free(next);
  return ok && m->spare_fd >= 0;
}

/* After an erase the spare is zeroed in place: a recycled segment's old records may hold
 * the erased bytes. */
static void spare_wipe(sq_memory *m) {
  if (m->spare_fd >= 0) close(m->spare_fd);
  m->spare_fd = -1;
  spare_prepare(m);
}

/* Removes the segments whose records are all at or below `position` (a segment's last
 * record is one below the next segment's first), one kept as the spare. */
static void remove_covered(sq_memory *m, uint64_t position) {
  uint64_t *firsts;
  size_t n = list_segments(m, &firsts);
  for (size_t i = 0; i + 1 < n; i++)
    if (firsts[i + 1] <= position + 1) {
      char *path = segment_path(m, firsts[i]);
      if (!recycle(m, path)) unlink(path);
      qim_free(path);
    }
  qim_free(firsts);
  sync_dir(m->jdir);
}

/*
 * A snapshot: the journal's segment cut; a page set (the pages the copies changed since the
 * last, written to the page log, then into the base); the segments it covers removed. After
 * an erase the set first copies the WAL into the file up to the cut, so the segments that
 * held the erased content go too, and the erased pages (overwritten: secure_delete) reach
 * the base in place.
 */
int sq_memory_snapshot(sq_store *st) {
  sq_memory *m = &st->mem;
  pthread_mutex_lock(&m->mu);
  uint64_t journal = m->since_snapshot;
  bool erase = m->erase_wanted;
  m->erase_wanted = false;
  pthread_mutex_unlock(&m->mu);
  QIM_LOGI(NULL, "store.sqlite.snapshot_begin", "journal_bytes=%" PRIu64 " erase=%d", journal, erase);
  if (erase) spare_wipe(m); /* the segment after the cut starts as zeros */
  uint64_t cut = rotate(st);
  uint64_t t0 = sq_now_ns(), t1;
  page_set s = {.fd = -1};
  int rc = set_take(st, &s, erase);
  t1 = sq_now_ns();
  if (rc == 0) rc = base_apply(m, &s, true);
  if (rc == 0) rc = plog_clear(m, erase);
  if (s.fd >= 0) close(s.fd);
  if (rc) dirty_mark_set(m, &s);
  if (rc == 0) remove_covered(m, s.position);
  if (erase && (rc || (cut && s.position + 1 < cut))) { /* readers held the copy short */
    pthread_mutex_lock(&m->mu);
    m->erase_wanted = true;
    pthread_mutex_unlock(&m->mu);
  }
  uint64_t t3 = sq_now_ns();
  struct timespec cpu; /* the snapshot thread's, from its start: what snapshots cost the CPU */
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  QIM_LOGI(NULL, "store.sqlite.snapshot",
           "position=%" PRIu64 " cut=%" PRIu64 " erase=%d pages=%zu set_ms=%" PRIu64
           " base_ms=%" PRIu64 " thread_cpu_ms=%" PRIu64 " rc=%d",
           s.position, cut, erase, s.count, (t1 - t0) / 1000000u, (t3 - t1) / 1000000u,
           (uint64_t)cpu.tv_sec * 1000u + (uint64_t)cpu.tv_nsec / 1000000u, rc);
  qim_free(s.index);
  free(s.slice);
  /* After the log line: its time is not the snapshot's. After an erase, the covered segment
   * kept as the spare is zeroed. */
  if (erase) spare_wipe(m);
  spare_prepare(m);
  return rc;
}

void *sq_memory_snapshot_main(void *arg) {
  sq_store *st = arg;
  sq_memory *m = &st->mem;
  qim_log_name_thread("snapshot");
  /* Bulk work with seconds of slack, like the checkpointer's (sqlite_checkpoint.c). One-to-one
   * at 5,000 msgs/s, six steps on one growing store: p99 13-118 ms at nice 15 against
   * 11-958 at 0 (bench/HISTORY.md, twenty-fourth session). Not fatal if refused. */
  if (setpriority(PRIO_PROCESS, (id_t)gettid(), SNAPSHOT_NICE) != 0)
    QIM_LOGW(NULL, "store.sqlite.snapshot", "nice=%d errno=%d", SNAPSHOT_NICE, errno);
  spare_prepare(m);
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (!m->snap_due && !m->snap_closing) pthread_cond_wait(&m->cv, &m->mu);
    if (m->snap_closing) break;
    pthread_mutex_unlock(&m->mu);
    sq_memory_snapshot(st);
    pthread_mutex_lock(&m->mu);
    m->snap_due = m->erase_wanted; /* not yet covered: again, after a pause */
    if (m->snap_due && !m->snap_closing) {
      struct timespec at = qim_deadline_after_ms(CLOCK_REALTIME, ERASE_RETRY_MS);
      pthread_cond_timedwait(&m->cv, &m->mu, &at);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

void sq_memory_stop(sq_store *st) {
  sq_memory *m = &st->mem;
  if (!m->inited) return;
  if (m->snap_started) {
    pthread_mutex_lock(&m->mu);
    m->snap_closing = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->snap_thread, NULL);
    m->snap_started = false;
  }
  sq_capture_free(m->cap);
  m->cap = NULL;
}

void sq_memory_free(sq_store *st) {
  sq_memory *m = &st->mem;
  if (!m->inited) return;
  if (m->prev_fd >= 0) close(m->prev_fd);
  if (m->jfd >= 0) close(m->jfd);
  if (m->spare_fd >= 0) close(m->spare_fd); /* its file stays: the next opening takes it */
  m->prev_fd = m->jfd = m->spare_fd = -1;
  qim_bytes_free(&m->jbuf);
  qim_bytes_free(&m->prev_buf);
  sq_vfs_untrack_writes(m);
  if (m->live) remove_database(m->live);
  qim_free(m->live);
  qim_free(m->plog);
  qim_free(m->dirty);
  pthread_mutex_destroy(&m->dirty_mu);
  qim_free(m->jdir);
  qim_free(m->base);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  m->inited = false;
}
