/*
 * sqlite_vfs.c — a VFS shim that gathers SQLite's WAL appends into one write.
 *
 * Why: a commit writes every dirty page to the WAL as two calls, the 24-byte frame
 * header and the page, so a transaction of 40 pages is 80 pwrite system calls before
 * its fsync. On this machine a system call costs microseconds of hypervisor time, and
 * the writer's COMMITs were half of its CPU (docs/store.md). The shim keeps a WAL
 * file's consecutive writes in a buffer and hands them to the real file in one write
 * when SQLite syncs, reads, truncates, asks for the size, closes, or the buffer fills.
 *
 * Durability is SQLite's: nothing is acknowledged before xSync, and xSync writes the
 * buffer first, then syncs. A write that fails there fails the xSync, so the COMMIT
 * fails as it would have with the write itself failing; the buffer is dropped (SQLite
 * rewrites those frames from the same offset in its next transaction). Other
 * connections see new frames only once the wal-index is updated, which SQLite does after
 * the sync; the writer's own reads of frames it wrote (a cache spill, rewritten
 * checksums) flush first. That needs a sync at every commit: the store runs
 * synchronous=FULL, and with NORMAL (no sync at commit) readers could be pointed at
 * frames still held here. Files other than WAL files get the real VFS's methods
 * untouched.
 *
 * Deferred syncs (sqlite_sync.c). While a thread has deferral on (the writer, around its
 * COMMIT), a WAL sync there writes the buffer out and returns without the fdatasync: the
 * frames are in the page cache when SQLite then publishes them in the wal-index, and the
 * store's syncer makes them durable through a handle of its own (sq_vfs_sync_open), opened
 * on the VFS underneath, before anything that could have seen them is acknowledged.
 *
 * One shim is registered per underlying VFS ("qim-wal+<name>"), so a test's own default
 * VFS (fault injection) keeps working underneath, for the syncer's handle too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "qim/mem.h"
#include "store/sqlite_int.h"

/* Bytes held before a write is forced: the unix VFS writes at most 128 KiB - 1 in one
 * call (a longer one comes back short, as SQLITE_FULL), so a flush is one call of at most
 * this; 30 frames of 4 KiB pages. */
#define WAL_BUFFER_MAX 0x1F000u
#define SHIMS_MAX 8

typedef struct wal_file {
  sqlite3_file base;   /* pMethods = &wal_methods */
  sqlite3_file *real;  /* the underlying file, in the same allocation after this struct */
  unsigned char *buf;  /* pending bytes for [buf_off, buf_off + buf_len) */
  sqlite3_int64 buf_off;
  size_t buf_len;
} wal_file;

static int wal_flush(wal_file *f) {
  if (!f->buf_len) return SQLITE_OK;
  int rc = f->real->pMethods->xWrite(f->real, f->buf, (int)f->buf_len, f->buf_off);
  f->buf_len = 0; /* written or not, SQLite rewrites from its own state after an error */
  return rc;
}

static int wal_close(sqlite3_file *pf) {
  wal_file *f = (wal_file *)pf;
  int rc = wal_flush(f);
  int rc2 = f->real->pMethods->xClose(f->real);
  qim_free(f->buf);
  f->buf = NULL;
  return rc != SQLITE_OK ? rc : rc2;
}

static int wal_read(sqlite3_file *pf, void *out, int n, sqlite3_int64 off) {
  wal_file *f = (wal_file *)pf;
  if (f->buf_len && off < f->buf_off + (sqlite3_int64)f->buf_len && off + n > f->buf_off) {
    int rc = wal_flush(f);
    if (rc != SQLITE_OK) return rc;
  }
  return f->real->pMethods->xRead(f->real, out, n, off);
}

/* Appends to the buffer, or overwrites inside it; anything else writes what is held
 * first and starts a new run at `off`. */
static int wal_write(sqlite3_file *pf, const void *data, int n, sqlite3_int64 off) {
  wal_file *f = (wal_file *)pf;
  sqlite3_int64 end = f->buf_off + (sqlite3_int64)f->buf_len;
  if (f->buf_len && off >= f->buf_off && off + n <= end) {
    memcpy(f->buf + (off - f->buf_off), data, (size_t)n);
    return SQLITE_OK;
  }
  if (f->buf_len && (off != end || f->buf_len + (size_t)n > WAL_BUFFER_MAX)) {
    int rc = wal_flush(f);
    if (rc != SQLITE_OK) return rc;
  }
  if ((size_t)n > WAL_BUFFER_MAX) return f->real->pMethods->xWrite(f->real, data, n, off);
  if (!f->buf_len) f->buf_off = off;
  if (!f->buf) f->buf = qim_malloc(WAL_BUFFER_MAX);
  memcpy(f->buf + f->buf_len, data, (size_t)n);
  f->buf_len += (size_t)n;
  return SQLITE_OK;
}

static int wal_truncate(sqlite3_file *pf, sqlite3_int64 size) {
  wal_file *f = (wal_file *)pf;
  int rc = wal_flush(f);
  return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static _Thread_local bool defer_syncs;

void sq_vfs_defer_syncs(bool on) {
  defer_syncs = on;
}

static int wal_sync(sqlite3_file *pf, int flags) {
  wal_file *f = (wal_file *)pf;
  int rc = wal_flush(f);
  if (rc != SQLITE_OK || defer_syncs) return rc;
  return f->real->pMethods->xSync(f->real, flags);
}

static int wal_size(sqlite3_file *pf, sqlite3_int64 *out) {
  wal_file *f = (wal_file *)pf;
  int rc = wal_flush(f);
  return rc != SQLITE_OK ? rc : f->real->pMethods->xFileSize(f->real, out);
}

#define REAL(pf) (((wal_file *)(pf))->real)
/* The rest pass straight through to the real file. */
static int wal_lock(sqlite3_file *pf, int l) { return REAL(pf)->pMethods->xLock(REAL(pf), l); }
static int wal_unlock(sqlite3_file *pf, int l) { return REAL(pf)->pMethods->xUnlock(REAL(pf), l); }
static int wal_reserved(sqlite3_file *pf, int *out) {
  return REAL(pf)->pMethods->xCheckReservedLock(REAL(pf), out);
}
static int wal_fcntl(sqlite3_file *pf, int op, void *arg) {
  if (op == SQLITE_FCNTL_SIZE_HINT || op == SQLITE_FCNTL_SYNC) { /* they act on the file */
    int rc = wal_flush((wal_file *)pf);
    if (rc != SQLITE_OK) return rc;
  }
  return REAL(pf)->pMethods->xFileControl(REAL(pf), op, arg);
}
static int wal_sector(sqlite3_file *pf) { return REAL(pf)->pMethods->xSectorSize(REAL(pf)); }
static int wal_device(sqlite3_file *pf) {
  return REAL(pf)->pMethods->xDeviceCharacteristics(REAL(pf));
}

/* Version 1: SQLite maps neither shared memory nor pages of a WAL file. */
static const sqlite3_io_methods wal_methods = {
    .iVersion = 1, .xClose = wal_close, .xRead = wal_read, .xWrite = wal_write,
    .xTruncate = wal_truncate, .xSync = wal_sync, .xFileSize = wal_size, .xLock = wal_lock,
    .xUnlock = wal_unlock, .xCheckReservedLock = wal_reserved, .xFileControl = wal_fcntl,
    .xSectorSize = wal_sector, .xDeviceCharacteristics = wal_device};

static pthread_mutex_t shim_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- tracked database files (store-memory mode's page snapshots) ------------------------- */

/* A main database file whose writes someone follows: every xWrite is reported (offset,
 * length) before it is passed on; everything else passes straight through. */
typedef struct db_file {
  sqlite3_file base;
  sqlite3_file *real; /* after the larger wal_file's room, as the VFS sizes every file */
  sq_vfs_write_fn fn;
  void *ctx;
} db_file;

_Static_assert(sizeof(db_file) <= sizeof(wal_file), "a tracked file fits the room the VFS gives");

#define TRACKED_MAX 4
static struct tracked {
  char name[256]; /* the file's last path component */
  sq_vfs_write_fn fn;
  void *ctx;
} tracked[TRACKED_MAX];

static const char *last_component(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int sq_vfs_track_writes(const char *path, sq_vfs_write_fn fn, void *ctx) {
  const char *name = last_component(path);
  if (strlen(name) >= sizeof tracked[0].name) return -ENAMETOOLONG;
  pthread_mutex_lock(&shim_mu);
  int rc = -ENOSPC;
  for (int i = 0; i < TRACKED_MAX && rc; i++)
    if (!tracked[i].fn) {
      snprintf(tracked[i].name, sizeof tracked[i].name, "%s", name);
      tracked[i].fn = fn;
      tracked[i].ctx = ctx;
      rc = 0;
    }
  pthread_mutex_unlock(&shim_mu);
  return rc;
}

void sq_vfs_untrack_writes(void *ctx) {
  pthread_mutex_lock(&shim_mu);
  for (int i = 0; i < TRACKED_MAX; i++)
    if (tracked[i].ctx == ctx) tracked[i] = (struct tracked){0};
  pthread_mutex_unlock(&shim_mu);
}

static bool tracked_of(const char *path, sq_vfs_write_fn *fn, void **ctx) {
  if (!path) return false;
  const char *name = last_component(path);
  bool found = false;
  pthread_mutex_lock(&shim_mu);
  for (int i = 0; i < TRACKED_MAX && !found; i++)
    if (tracked[i].fn && strcmp(tracked[i].name, name) == 0) {
      *fn = tracked[i].fn;
      *ctx = tracked[i].ctx;
      found = true;
    }
  pthread_mutex_unlock(&shim_mu);
  return found;
}

#define DREAL(pf) (((db_file *)(pf))->real)
static int db_close(sqlite3_file *pf) { return DREAL(pf)->pMethods->xClose(DREAL(pf)); }
static int db_read(sqlite3_file *pf, void *out, int n, sqlite3_int64 off) {
  return DREAL(pf)->pMethods->xRead(DREAL(pf), out, n, off);
}
static int db_write(sqlite3_file *pf, const void *data, int n, sqlite3_int64 off) {
  db_file *f = (db_file *)pf;
  f->fn(f->ctx, off, n);
  return f->real->pMethods->xWrite(f->real, data, n, off);
}
static int db_truncate(sqlite3_file *pf, sqlite3_int64 size) {
  return DREAL(pf)->pMethods->xTruncate(DREAL(pf), size);
}
static int db_sync(sqlite3_file *pf, int flags) { return DREAL(pf)->pMethods->xSync(DREAL(pf), flags); }
static int db_size(sqlite3_file *pf, sqlite3_int64 *out) {
  return DREAL(pf)->pMethods->xFileSize(DREAL(pf), out);
}
static int db_lock(sqlite3_file *pf, int l) { return DREAL(pf)->pMethods->xLock(DREAL(pf), l); }
static int db_unlock(sqlite3_file *pf, int l) { return DREAL(pf)->pMethods->xUnlock(DREAL(pf), l); }
static int db_reserved(sqlite3_file *pf, int *out) {
  return DREAL(pf)->pMethods->xCheckReservedLock(DREAL(pf), out);
}
static int db_fcntl(sqlite3_file *pf, int op, void *arg) {
  return DREAL(pf)->pMethods->xFileControl(DREAL(pf), op, arg);
}
static int db_sector(sqlite3_file *pf) { return DREAL(pf)->pMethods->xSectorSize(DREAL(pf)); }
static int db_device(sqlite3_file *pf) { return DREAL(pf)->pMethods->xDeviceCharacteristics(DREAL(pf)); }
static int db_shm_map(sqlite3_file *pf, int i, int size, int extend, void volatile **out) {
  return DREAL(pf)->pMethods->xShmMap(DREAL(pf), i, size, extend, out);
}
static int db_shm_lock(sqlite3_file *pf, int off, int n, int flags) {
  return DREAL(pf)->pMethods->xShmLock(DREAL(pf), off, n, flags);
}
static void db_shm_barrier(sqlite3_file *pf) { DREAL(pf)->pMethods->xShmBarrier(DREAL(pf)); }
static int db_shm_unmap(sqlite3_file *pf, int del) { return DREAL(pf)->pMethods->xShmUnmap(DREAL(pf), del); }
/* No mapped pages: a write through a mapping would pass by db_write. */
static int db_fetch(sqlite3_file *pf, sqlite3_int64 off, int n, void **out) {
  (void)pf, (void)off, (void)n;
  *out = NULL;
  return SQLITE_OK;
}
static int db_unfetch(sqlite3_file *pf, sqlite3_int64 off, void *p) {
  (void)pf, (void)off, (void)p;
  return SQLITE_OK;
}

static const sqlite3_io_methods db_methods = {
    .iVersion = 3, .xClose = db_close, .xRead = db_read, .xWrite = db_write,
    .xTruncate = db_truncate, .xSync = db_sync, .xFileSize = db_size, .xLock = db_lock,
    .xUnlock = db_unlock, .xCheckReservedLock = db_reserved, .xFileControl = db_fcntl,
    .xSectorSize = db_sector, .xDeviceCharacteristics = db_device, .xShmMap = db_shm_map,
    .xShmLock = db_shm_lock, .xShmBarrier = db_shm_barrier, .xShmUnmap = db_shm_unmap,
    .xFetch = db_fetch, .xUnfetch = db_unfetch};

/* ---- the VFS ---------------------------------------------------------------------------- */

typedef struct shim {
  sqlite3_vfs vfs; /* pAppData = the real VFS */
  char name[64];
} shim;

static int shim_open(sqlite3_vfs *v, const char *name, sqlite3_file *pf, int flags, int *out_flags) {
  sqlite3_vfs *real = v->pAppData;
  sq_vfs_write_fn fn;
  void *ctx;
  if ((flags & SQLITE_OPEN_MAIN_DB) && tracked_of(name, &fn, &ctx)) {
    db_file *f = (db_file *)pf;
    memset(f, 0, sizeof(wal_file));
    f->real = (sqlite3_file *)((char *)pf + sizeof(wal_file));
    f->fn = fn;
    f->ctx = ctx;
    int rc = real->xOpen(real, name, f->real, flags, out_flags);
    f->base.pMethods = f->real->pMethods ? &db_methods : NULL;
    return rc;
  }
  if (!(flags & SQLITE_OPEN_WAL)) return real->xOpen(real, name, pf, flags, out_flags);
  wal_file *f = (wal_file *)pf;
  memset(f, 0, sizeof *f);
  f->real = (sqlite3_file *)(f + 1);
  int rc = real->xOpen(real, name, f->real, flags, out_flags);
  /* Without methods SQLite calls no xClose: the file is as if never opened. */
  f->base.pMethods = f->real->pMethods ? &wal_methods : NULL;
  return rc;
}

#define VREAL(v) ((sqlite3_vfs *)(v)->pAppData)
static int shim_delete(sqlite3_vfs *v, const char *n, int sync) {
  return VREAL(v)->xDelete(VREAL(v), n, sync);
}
static int shim_access(sqlite3_vfs *v, const char *n, int flags, int *out) {
  return VREAL(v)->xAccess(VREAL(v), n, flags, out);
}
static int shim_full(sqlite3_vfs *v, const char *n, int cap, char *out) {
  return VREAL(v)->xFullPathname(VREAL(v), n, cap, out);
}
static void *shim_dlopen(sqlite3_vfs *v, const char *n) { return VREAL(v)->xDlOpen(VREAL(v), n); }
static void shim_dlerror(sqlite3_vfs *v, int cap, char *out) { VREAL(v)->xDlError(VREAL(v), cap, out); }
static void (*shim_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) {
  return VREAL(v)->xDlSym(VREAL(v), h, s);
}
static void shim_dlclose(sqlite3_vfs *v, void *h) { VREAL(v)->xDlClose(VREAL(v), h); }
static int shim_random(sqlite3_vfs *v, int n, char *out) {
  return VREAL(v)->xRandomness(VREAL(v), n, out);
}
static int shim_sleep(sqlite3_vfs *v, int us) { return VREAL(v)->xSleep(VREAL(v), us); }
static int shim_time(sqlite3_vfs *v, double *out) { return VREAL(v)->xCurrentTime(VREAL(v), out); }
static int shim_lasterr(sqlite3_vfs *v, int cap, char *out) {
  return VREAL(v)->xGetLastError(VREAL(v), cap, out);
}
static int shim_time64(sqlite3_vfs *v, sqlite3_int64 *out) {
  sqlite3_vfs *r = VREAL(v);
  if (r->iVersion >= 2 && r->xCurrentTimeInt64) return r->xCurrentTimeInt64(r, out);
  double d;
  int rc = r->xCurrentTime(r, &d);
  *out = (sqlite3_int64)(d * 86400000.0);
  return rc;
}

static shim shims[SHIMS_MAX];
static size_t shim_count;

static void shim_init(shim *s, sqlite3_vfs *real) {
  snprintf(s->name, sizeof s->name, "qim-wal+%s", real->zName);
  int sz = (int)sizeof(wal_file) + real->szOsFile; /* a WAL file holds the real one after it */
  s->vfs = (sqlite3_vfs){
      .iVersion = 2, .szOsFile = sz, .mxPathname = real->mxPathname, .zName = s->name,
      .pAppData = real, .xOpen = shim_open, .xDelete = shim_delete, .xAccess = shim_access,
      .xFullPathname = shim_full, .xDlOpen = shim_dlopen, .xDlError = shim_dlerror,
      .xDlSym = shim_dlsym, .xDlClose = shim_dlclose, .xRandomness = shim_random,
      .xSleep = shim_sleep, .xCurrentTime = shim_time, .xGetLastError = shim_lasterr,
      .xCurrentTimeInt64 = shim_time64};
}

const char *sq_vfs_wal_gather(const char *base) {
  sqlite3_vfs *real = sqlite3_vfs_find(base);
  if (!real) return base;
  pthread_mutex_lock(&shim_mu);
  const char *name = NULL;
  for (size_t i = 0; i < shim_count && !name; i++)
    if (shims[i].vfs.pAppData == real) name = shims[i].name;
  if (!name && shim_count < SHIMS_MAX) {
    shim *s = &shims[shim_count];
    shim_init(s, real);
    if (sqlite3_vfs_register(&s->vfs, 0) == SQLITE_OK) {
      shim_count++;
      name = s->name;
    }
  }
  pthread_mutex_unlock(&shim_mu);
  return name ? name : base; /* no slot left: the real VFS, unbuffered */
}

/* The VFS under shim `name`, or VFS `name` itself when it is no shim. */
static sqlite3_vfs *underneath(const char *name) {
  sqlite3_vfs *v = sqlite3_vfs_find(name);
  pthread_mutex_lock(&shim_mu);
  for (size_t i = 0; v && i < shim_count; i++)
    if (v == &shims[i].vfs) {
      v = VREAL(v);
      break;
    }
  pthread_mutex_unlock(&shim_mu);
  return v;
}

/* The WAL file of connection `db` opened again, on the VFS under the shim: SQLite takes no locks on WAL
 * files, so this handle is a plain descriptor of the same file, and closing it releases
 * nothing of the connections'. */
int sq_vfs_sync_open(sqlite3 *db, sqlite3_file **out) {
  *out = NULL;
  sqlite3_vfs *conn_vfs = NULL;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &conn_vfs);
  const char *wal_path = sqlite3_filename_wal(sqlite3_db_filename(db, "main"));
  sqlite3_vfs *v = conn_vfs ? underneath(conn_vfs->zName) : NULL;
  if (!v || !wal_path) return SQLITE_ERROR;
  sqlite3_file *f = qim_calloc(1, (size_t)v->szOsFile);
  int got = 0;
  int rc = v->xOpen(v, wal_path, f, SQLITE_OPEN_READWRITE | SQLITE_OPEN_WAL, &got);
  if (rc != SQLITE_OK || !f->pMethods) {
    if (f->pMethods) f->pMethods->xClose(f);
    qim_free(f);
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  *out = f;
  return SQLITE_OK;
}

void sq_vfs_sync_close(sqlite3_file *f) {
  if (!f) return;
  f->pMethods->xClose(f);
  qim_free(f);
}
