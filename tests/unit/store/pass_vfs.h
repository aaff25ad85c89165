/*
 * pass_vfs.h — a pass-through SQLite VFS for the store's tests, registered as the
 * default before a store opens: it forwards everything to the real VFS, and lets a test
 * watch or fail the writes and syncs of WAL files through two hooks. The store's own WAL
 * shim (src/store/sqlite_vfs.c) stacks on top of it as it does on the real one.
 */
#ifndef QIM_TEST_PASS_VFS_H
#define QIM_TEST_PASS_VFS_H

#include <sqlite3.h>
#include <string.h>

/* Called for every xWrite / xSync of a WAL file; SQLITE_OK forwards it, anything else is
 * returned to SQLite instead. NULL forwards. */
static int (*pass_vfs_on_wal_write)(int bytes);
static int (*pass_vfs_on_wal_sync)(void);

typedef struct pass_file {
  sqlite3_file base;
  sqlite3_file *real;
  int is_wal;
} pass_file;

static sqlite3_vfs *pass_real_vfs;
static sqlite3_vfs pass_vfs;

#define PASS_REAL(f) (((pass_file *)(f))->real)
#define PASS_FWD(f, m, ...) PASS_REAL(f)->pMethods->m(PASS_REAL(f), ##__VA_ARGS__)

static int pass_close(sqlite3_file *f) {
  int rc = PASS_FWD(f, xClose);
  sqlite3_free(PASS_REAL(f));
  return rc;
}
static int pass_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off) {
  return PASS_FWD(f, xRead, p, n, off);
}
static int pass_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off) {
  if (((pass_file *)f)->is_wal && pass_vfs_on_wal_write) {
    int rc = pass_vfs_on_wal_write(n);
    if (rc != SQLITE_OK) return rc;
  }
  return PASS_FWD(f, xWrite, p, n, off);
}
static int pass_truncate(sqlite3_file *f, sqlite3_int64 size) { return PASS_FWD(f, xTruncate, size); }
static int pass_sync(sqlite3_file *f, int flags) {
  if (((pass_file *)f)->is_wal && pass_vfs_on_wal_sync) {
    int rc = pass_vfs_on_wal_sync();
    if (rc != SQLITE_OK) return rc;
  }
  return PASS_FWD(f, xSync, flags);
}
static int pass_size(sqlite3_file *f, sqlite3_int64 *size) { return PASS_FWD(f, xFileSize, size); }
static int pass_lock(sqlite3_file *f, int l) { return PASS_FWD(f, xLock, l); }
static int pass_unlock(sqlite3_file *f, int l) { return PASS_FWD(f, xUnlock, l); }
static int pass_check(sqlite3_file *f, int *out) { return PASS_FWD(f, xCheckReservedLock, out); }
static int pass_fcntl(sqlite3_file *f, int op, void *arg) { return PASS_FWD(f, xFileControl, op, arg); }
static int pass_sector(sqlite3_file *f) { return PASS_FWD(f, xSectorSize); }
static int pass_caps(sqlite3_file *f) { return PASS_FWD(f, xDeviceCharacteristics); }
static int pass_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp) {
  return PASS_FWD(f, xShmMap, pg, sz, ext, pp);
}
static int pass_shm_lock(sqlite3_file *f, int off, int n, int flags) {
  return PASS_FWD(f, xShmLock, off, n, flags);
}
static void pass_shm_barrier(sqlite3_file *f) { PASS_FWD(f, xShmBarrier); }
static int pass_shm_unmap(sqlite3_file *f, int del) { return PASS_FWD(f, xShmUnmap, del); }
static int pass_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
  return PASS_FWD(f, xFetch, off, n, pp);
}
static int pass_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
  return PASS_FWD(f, xUnfetch, off, p);
}

static const sqlite3_io_methods pass_io = {
    .iVersion = 3, .xClose = pass_close, .xRead = pass_read, .xWrite = pass_write,
    .xTruncate = pass_truncate, .xSync = pass_sync, .xFileSize = pass_size, .xLock = pass_lock,
    .xUnlock = pass_unlock, .xCheckReservedLock = pass_check, .xFileControl = pass_fcntl,
    .xSectorSize = pass_sector, .xDeviceCharacteristics = pass_caps, .xShmMap = pass_shm_map,
    .xShmLock = pass_shm_lock, .xShmBarrier = pass_shm_barrier, .xShmUnmap = pass_shm_unmap,
    .xFetch = pass_fetch, .xUnfetch = pass_unfetch};

static int pass_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)vfs;
  pass_file *s = (pass_file *)f;
  s->base.pMethods = NULL;
  s->real = sqlite3_malloc(pass_real_vfs->szOsFile);
  if (!s->real) return SQLITE_NOMEM;
  memset(s->real, 0, (size_t)pass_real_vfs->szOsFile);
  int rc = pass_real_vfs->xOpen(pass_real_vfs, name, s->real, flags, out);
  if (rc != SQLITE_OK || !s->real->pMethods) {
    sqlite3_free(s->real);
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  s->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  s->base.pMethods = &pass_io;
  return SQLITE_OK;
}

/* cmocka group setup / teardown. */
static int pass_vfs_install(void **state) {
  (void)state;
  pass_real_vfs = sqlite3_vfs_find(NULL);
  pass_vfs = *pass_real_vfs; /* the other entry points are the real ones */
  pass_vfs.zName = "qim-test-pass";
  pass_vfs.szOsFile = (int)sizeof(pass_file);
  pass_vfs.xOpen = pass_open;
  pass_vfs.pNext = NULL;
  return sqlite3_vfs_register(&pass_vfs, 1) == SQLITE_OK ? 0 : -1;
}

static int pass_vfs_remove(void **state) {
  (void)state;
  sqlite3_vfs_register(pass_real_vfs, 1);
  sqlite3_vfs_unregister(&pass_vfs);
  return 0;
}

#endif
