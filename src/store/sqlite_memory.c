/*
 * sqlite_memory.c — store-memory mode: the live database in a memory-backed directory,
 * made durable by a journal and snapshots on the disk (docs/store.md, "Next: the database
 * in memory"). Chosen with `sqlite:PATH?memory=DIR`.
 *
 * On the disk, beside PATH:
 * - PATH itself is the last snapshot: a whole database (no WAL), replaced by rename.
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
 * A snapshot (its own thread, once the journal has grown by SNAPSHOT_MIN_BYTES or an erase
 * is due) appends to PATH-pages the pages the checkpoints changed since the last one, read
 * right after a checkpoint round (the database file then stands at one commit, whose
 * position its `meta` row gives); once that page log is larger than the database, the
 * snapshot is a whole new base instead: the writer's segment is cut first, so every record of the
 * older segments is at or below the position the snapshot's read begins at; SQLite's backup
 * copies one consistent read of the live database to PATH.tmp, which is synced and renamed
 * over PATH; then the older segments are removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blake3.h"
#include "qim/clock.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/sqlite_int.h"

#define RECORD_MAGIC 0x514a3031u /* "QJ01" */
#define RECORD_HEAD 24           /* magic u32, length u32, position u64, check u64 */
#define SNAPSHOT_MIN_BYTES (256u << 20)
#define STEP_BYTES (1u << 20) /* snapshots are written out this much at a time, */
#define PACE_MB_S 64          /* at most this fast */

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

static void remove_live(const char *live) {
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    char *p = path_join(live, suffix[i]);
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

static int file_position(const char *path, uint64_t *out);
static int plog_apply(sq_memory *m, uint64_t *position);
static void mark_written(void *ctx, sqlite3_int64 off, int n);

int sq_memory_prepare(sq_store *st, const char *memdir) {
  sq_memory *m = &st->mem;
  m->on = true;
  m->jfd = m->prev_fd = -1;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  m->inited = true;
  m->base = st->path;
  m->jdir = path_join(m->base, "-journal");
  m->live = live_path(memdir, m->base);
  m->plog = path_join(m->base, "-pages");
  pthread_mutex_init(&m->dirty_mu, NULL);
  if (mkdir(m->jdir, 0700) != 0 && errno != EEXIST) return -errno;
  remove_live(m->live);
  int rc = 0;
  if (access(m->base, F_OK) == 0) {
    rc = fold_base(m->base);
    if (rc == 0) rc = copy_file(m->base, m->live);
    uint64_t position = 0;
    if (rc == 0) rc = page_size_of(m->live, &m->page_size);
    if (rc == 0) rc = file_position(m->live, &position);
    if (rc == 0) rc = plog_apply(m, &position);
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

/* Applies one segment's records above `*position`; stops at a torn one (1). */
static int replay_segment(sq_store *st, sq_replay *y, const char *path, uint64_t *position) {
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
    sq_conn *c = &st->wconn;
    rc = sq_exec_logged(c, "BEGIN IMMEDIATE", "store.sqlite.journal");
    if (rc == 0) rc = sq_replay_apply(y, payload.p, payload.n);
    if (rc == 0) rc = sq_exec_logged(c, "COMMIT", "store.sqlite.journal");
    if (rc) {
      sq_exec_logged(c, "ROLLBACK", "store.sqlite.journal");
      QIM_LOGE(NULL, "store.sqlite.journal_replay", "position=%" PRIu64 " rc=%d", pos, rc);
    } else {
      *position = pos;
    }
  }
  qim_free(payload.p);
  fclose(f);
  return rc;
}

int sq_memory_replay(sq_store *st) {
  sq_memory *m = &st->mem;
  uint64_t position;
  int rc = meta_position(st->wconn.db, &position);
  uint64_t *firsts = NULL;
  size_t n = rc ? 0 : list_segments(m, &firsts);
  sq_replay *y = NULL;
  if (rc == 0 && n) rc = sq_replay_new(st->wconn.db, &y);
  int torn = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    char *path = segment_path(m, firsts[i]);
    rc = replay_segment(st, y, path, &position);
    qim_free(path);
    if (rc == 1) { /* the rest of that segment was never acknowledged; the next one goes on */
      torn++;
      rc = 0;
    }
  }
  sq_replay_free(y);
  qim_free(firsts);
  if (rc) return rc;
  m->position = m->position_written = position;
  QIM_LOGI(NULL, "store.sqlite.journal_replayed", "position=%" PRIu64 " segments=%zu torn=%d",
           position, n, torn);
  return 0;
}

/* ---- the page log: the pages each snapshot changed --------------------------------------- */

#define SET_MAGIC 0x51505331u /* "QPS1" */

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

static void dirty_clear(sq_memory *m) {
  pthread_mutex_lock(&m->dirty_mu);
  if (m->dirty) memset(m->dirty, 0, m->dirty_pages / 8);
  pthread_mutex_unlock(&m->dirty_mu);
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

void sq_memory_after_round(sq_store *st) {
  sq_memory *m = &st->mem;
  pthread_mutex_lock(&m->mu);
  bool wanted = m->set_wanted;
  pthread_mutex_unlock(&m->mu);
  if (!wanted) return;
  pthread_mutex_lock(&m->dirty_mu);
  size_t pages = m->dirty_pages;
  uint8_t *bits = qim_malloc(pages / 8 + 1);
  if (pages) memcpy(bits, m->dirty, pages / 8);
  if (m->dirty) memset(m->dirty, 0, pages / 8);
  pthread_mutex_unlock(&m->dirty_mu);
  uint32_t ps = m->page_size;
  int rc = 0, fd = open(m->live, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) rc = -errno;
  uint64_t db_pages = rc ? 0 : (uint64_t)sb.st_size / ps, position = 0;
  qim_bytes set = {0};
  uint32_t count = 0;
  for (size_t pg = 0; rc == 0 && pg < pages && pg < db_pages; pg++) {
    if (!(bits[pg / 8] & (1u << (pg % 8)))) continue;
    set.p = qim_realloc(set.p, set.n + 4 + ps);
    put32(set.p + set.n, (uint32_t)pg);
    if (pread(fd, set.p + set.n + 4, ps, (off_t)(pg * ps)) != (ssize_t)ps) rc = -EIO;
    set.n += 4 + ps;
    count++;
  }
  if (fd >= 0) close(fd);
  qim_free(bits);
  if (rc == 0) rc = file_position(m->live, &position);
  pthread_mutex_lock(&m->mu);
  qim_free(m->set.p);
  m->set = set;
  m->set_count = count;
  m->set_position = position;
  m->set_db_pages = db_pages;
  m->set_rc = rc;
  m->set_wanted = false;
  m->set_ready = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

/* Appends the set the checkpointer read: header (magic, count), the pages, trailer
 * (position, pages in the file, BLAKE3 of all before it), written out paced, then synced. */
static int plog_append(sq_memory *m) {
  int fd = open(m->plog, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  uint8_t head[8], tail[24];
  put32(head, SET_MAGIC);
  put32(head + 4, m->set_count);
  put64(tail, m->set_position);
  put64(tail + 8, m->set_db_pages);
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, head, sizeof head);
  blake3_hasher_update(&h, m->set.p, m->set.n);
  blake3_hasher_update(&h, tail, 16);
  blake3_hasher_finalize(&h, tail + 16, 8);
  int rc = pwrite(fd, head, sizeof head, (off_t)m->plog_len) == sizeof head ? 0 : -EIO;
  uint64_t off = m->plog_len + sizeof head, t0 = sq_now_ns();
  for (size_t at = 0; rc == 0 && at < m->set.n; at += STEP_BYTES) {
    size_t n = m->set.n - at < STEP_BYTES ? m->set.n - at : STEP_BYTES;
    if (pwrite(fd, m->set.p + at, n, (off_t)(off + at)) != (ssize_t)n) rc = -EIO;
    sync_file_range(fd, (off64_t)(off + at), (off64_t)n,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    uint64_t due = t0 + (at + n) * 1000u / PACE_MB_S, now = sq_now_ns();
    if (due > now) usleep((useconds_t)((due - now) / 1000u));
  }
  off += m->set.n;
  if (rc == 0 && pwrite(fd, tail, sizeof tail, (off_t)off) != sizeof tail) rc = -EIO;
  if (rc == 0 && fdatasync(fd)) rc = -errno;
  close(fd);
  if (rc == 0) m->plog_len = off + sizeof tail;
  return rc;
}

/* Opening: the page log's sets above the base's position written into the live copy. */
static int plog_apply(sq_memory *m, uint64_t *position) {
  FILE *f = fopen(m->plog, "rb");
  if (!f) return 0;
  int live = open(m->live, O_WRONLY | O_CLOEXEC);
  int rc = live < 0 ? -errno : 0;
  uint8_t head[8], tail[24];
  qim_bytes set = {0};
  uint32_t ps = m->page_size;
  uint64_t applied = 0;
  while (rc == 0 && fread(head, 1, sizeof head, f) == sizeof head && get_le(head, 4) == SET_MAGIC) {
    uint64_t count = get_le(head + 4, 4);
    set.p = qim_realloc(set.p, count * (4 + ps) + 1);
    set.n = count * (4 + ps);
    if (fread(set.p, 1, set.n, f) != set.n || fread(tail, 1, sizeof tail, f) != sizeof tail) break;
    blake3_hasher h;
    uint8_t check[8];
    blake3_hasher_init(&h);
    blake3_hasher_update(&h, head, sizeof head);
    blake3_hasher_update(&h, set.p, set.n);
    blake3_hasher_update(&h, tail, 16);
    blake3_hasher_finalize(&h, check, 8);
    if (memcmp(check, tail + 16, 8) != 0) break; /* torn: it and what follows never counted */
    uint64_t pos = get_le(tail, 8), db_pages = get_le(tail + 8, 8);
    if (pos <= *position) continue; /* the base is newer (a fold was cut short) */
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
      const uint8_t *e = set.p + i * (4 + ps);
      if (pwrite(live, e + 4, ps, (off_t)(get_le(e, 4) * ps)) != (ssize_t)ps) rc = -EIO;
    }
    if (rc == 0 && ftruncate(live, (off_t)(db_pages * ps))) rc = -errno;
    *position = pos;
    applied++;
  }
  qim_free(set.p);
  fclose(f);
  if (live >= 0) close(live);
  QIM_LOGI(NULL, "store.sqlite.page_log_applied", "sets=%" PRIu64 " position=%" PRIu64 " rc=%d",
           applied, *position, rc);
  return rc;
}

static int write_base(sq_store *st, uint64_t *position, bool paced);
static void remove_below(sq_memory *m, uint64_t first_kept);

/* ---- the writer's side ------------------------------------------------------------------------ */

/*
 * A segment is written in place over zeros laid down when it is made, as long as the
 * snapshot spacing plus a quarter: an fdatasync of a file that grows (or of blocks that
 * fallocate only reserved) also commits the file system's journal, a second device flush
 * per sync. Replay reads the zeros after the last record as the end of the segment.
 */
static int open_segment_at(sq_memory *m, const char *path, int *fd) {
  *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (*fd < 0) return -errno;
  uint64_t size = m->snapshot_bytes + m->snapshot_bytes / 4, t0 = sq_now_ns();
  static const uint8_t zeros[1 << 16];
  int rc = 0;
  /* Paced like the snapshots: a burst of zeros would hold up the journal's syncs. */
  for (uint64_t off = 0; rc == 0 && off < size; off += sizeof zeros) {
    if (write(*fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) rc = -EIO;
    if ((off + sizeof zeros) % STEP_BYTES) continue;
    sync_file_range(*fd, (off64_t)(off + sizeof zeros - STEP_BYTES), STEP_BYTES,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    uint64_t due = t0 + (off + sizeof zeros) * 1000u / PACE_MB_S, now = sq_now_ns();
    if (due > now) usleep((useconds_t)((due - now) / 1000u));
  }
  if (rc == 0 && (fdatasync(*fd) || lseek(*fd, 0, SEEK_SET) != 0)) rc = -errno;
  return rc;
}

static int open_segment(sq_memory *m, uint64_t first, int *fd) {
  char *path = segment_path(m, first);
  int rc = open_segment_at(m, path, fd);
  qim_free(path);
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
  if (rc == 0) rc = write_base(st, &position, false);
  if (rc == 0 && position != m->position) rc = -EPROTO;
  if (rc == 0 && unlink(m->plog) != 0 && errno != ENOENT) rc = -errno;
  m->plog_len = 0;
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
  m->fold_wanted = true; /* the base and the page log may hold the erased content */
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
  /* The new segment is laid down under a name no replay reads, outside the lock the writer
   * takes for every batch, and renamed to its first position under it. */
  char *next = path_join(m->jdir, "/next");
  int fd = -1;
  bool made = open_segment_at(m, next, &fd) == 0;
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

/*
 * The copy is quick and its write-out paced. SQLite's backup copies one read of the live
 * database into the page cache in one step, so the read (which keeps the WAL from starting
 * over) is short; then the file goes to the disk STEP_BYTES at a time, each step waited for
 * (sync_file_range) and the steps spread to at most PACE_MB_S, so the journal's small
 * syncs, which on this disk flush whatever the device holds, never wait behind a whole
 * snapshot. Measured: the copy paced page by page instead, its read held the WAL for the
 * whole copy and one-to-one's p99 at 4,000-5,000 msgs/s went to 78-227 ms.
 */

static int copy_paced(sqlite3 *src, sqlite3 *dst, const char *tmp, bool paced) {
  sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
  int rc = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(dst);
  int fin = b ? sqlite3_backup_finish(b) : SQLITE_OK;
  if (rc == SQLITE_DONE) rc = fin;
  sqlite3_exec(src, "COMMIT", NULL, NULL, NULL); /* the read ends here */
  if (rc != SQLITE_OK) return rc;
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SQLITE_CANTOPEN;
  struct stat sb;
  uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0, t0 = sq_now_ns();
  for (uint64_t off = 0; paced && off < size; off += STEP_BYTES) {
    sync_file_range(fd, (off64_t)off, STEP_BYTES,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    uint64_t due = t0 + (off + STEP_BYTES) * 1000u / PACE_MB_S; /* ns at PACE_MB_S MB/s */
    uint64_t now = sq_now_ns();
    if (due > now) usleep((useconds_t)((due - now) / 1000u));
  }
  if (fdatasync(fd)) rc = SQLITE_IOERR_FSYNC;
  close(fd);
  return rc;
}

static int backup_to(sq_store *st, const char *tmp, uint64_t *position, bool paced) {
  sqlite3 *src = NULL, *dst = NULL;
  unlink(tmp);
  int rc = sqlite3_open_v2(st->mem.live, &src, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(dst, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;", NULL, NULL, NULL);
  /* The read that pins one commit for the whole copy, and the position it stands at. */
  if (rc == SQLITE_OK) rc = sqlite3_exec(src, "BEGIN", NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = meta_position(src, position) ? SQLITE_IOERR : SQLITE_OK;
  if (rc == SQLITE_OK) rc = copy_paced(src, dst, tmp, paced);
  sqlite3_close(src);
  sqlite3_close(dst);
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
static int write_base(sq_store *st, uint64_t *position, bool paced) {
  sq_memory *m = &st->mem;
  char *tmp = path_join(m->base, ".tmp");
  int rc = backup_to(st, tmp, position, paced);
  if (rc == 0 && rename(tmp, m->base) != 0) rc = -errno;
  char *slash = strrchr(m->base, '/');
  char *dir = slash ? qim_strndup(m->base, (size_t)(slash - m->base)) : qim_strdup(".");
  if (rc == 0) rc = sync_dir(dir);
  qim_free(dir);
  if (rc) unlink(tmp);
  qim_free(tmp);
  return rc;
}

/* Removes the segments whose records are all at or below `position`: a segment's last
 * record is one below the next segment's first. */
static void remove_covered(sq_memory *m, uint64_t position) {
  uint64_t *firsts;
  size_t n = list_segments(m, &firsts);
  for (size_t i = 0; i + 1 < n; i++)
    if (firsts[i + 1] <= position + 1) {
      char *path = segment_path(m, firsts[i]);
      unlink(path);
      qim_free(path);
    }
  qim_free(firsts);
  sync_dir(m->jdir);
}

/* The pages the checkpoints changed since the last set, read by the checkpointer right after
 * a round (sq_memory_after_round) and appended to the page log. */
static int take_set(sq_store *st, uint64_t *position) {
  sq_memory *m = &st->mem;
  pthread_mutex_lock(&m->mu);
  m->set_wanted = true;
  m->set_ready = false;
  pthread_mutex_unlock(&m->mu);
  sq_ckpt_request(st);
  pthread_mutex_lock(&m->mu);
  while (!m->set_ready && !m->snap_closing) {
    struct timespec at = qim_deadline_after_ms(CLOCK_REALTIME, 100);
    pthread_cond_timedwait(&m->cv, &m->mu, &at);
    if (!m->set_ready) { /* a round that ended before it saw the request */
      pthread_mutex_unlock(&m->mu);
      sq_ckpt_request(st);
      pthread_mutex_lock(&m->mu);
    }
  }
  int rc = m->set_ready ? m->set_rc : -ECANCELED;
  *position = m->set_position;
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) rc = plog_append(m);
  return rc;
}

int sq_memory_snapshot(sq_store *st) {
  sq_memory *m = &st->mem;
  rotate(st);
  struct stat sb;
  uint64_t live = stat(m->live, &sb) == 0 ? (uint64_t)sb.st_size : 0, position = 0;
  uint64_t t0 = sq_now_ns();
  /* The page log past the database's size: fold it into a new base. */
  pthread_mutex_lock(&m->mu);
  bool fold = m->plog_len > live || m->fold_wanted;
  m->fold_wanted = false;
  pthread_mutex_unlock(&m->mu);
  int rc;
  if (fold) {
    dirty_clear(m);
    rc = write_base(st, &position, true);
    if (rc == 0 && unlink(m->plog) != 0 && errno != ENOENT) rc = -errno;
    if (rc == 0) m->plog_len = 0;
  } else {
    rc = take_set(st, &position);
  }
  if (rc == 0) remove_covered(m, position);
  QIM_LOGI(NULL, "store.sqlite.snapshot", "position=%" PRIu64 " fold=%d pages=%u ms=%" PRIu64
           " rc=%d", position, fold, fold ? 0 : m->set_count, (sq_now_ns() - t0) / 1000000u, rc);
  return rc;
}

void *sq_memory_snapshot_main(void *arg) {
  sq_store *st = arg;
  sq_memory *m = &st->mem;
  qim_log_name_thread("snapshot");
  pthread_mutex_lock(&m->mu);
  for (;;) {
    while (!m->snap_due && !m->snap_closing) pthread_cond_wait(&m->cv, &m->mu);
    if (m->snap_closing) break;
    pthread_mutex_unlock(&m->mu);
    sq_memory_snapshot(st);
    pthread_mutex_lock(&m->mu);
    m->snap_due = false;
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
  m->prev_fd = m->jfd = -1;
  qim_bytes_free(&m->jbuf);
  qim_bytes_free(&m->prev_buf);
  sq_vfs_untrack_writes(m);
  if (m->live) remove_live(m->live);
  qim_free(m->live);
  qim_free(m->plog);
  qim_free(m->dirty);
  qim_free(m->set.p);
  pthread_mutex_destroy(&m->dirty_mu);
  qim_free(m->jdir);
  qim_free(m->base);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
  m->inited = false;
}
