/*
 * test_sqlite_fsync_failure.c — a COMMIT whose fsync fails: every operation of the batch
 * fails ("durability not confirmed"), none is reported done, nothing of it is visible, and
 * the store carries on once the disk recovers.
 *
 * The failure is injected with a pass-through SQLite VFS registered as the default before
 * the store opens: it forwards everything to the real VFS except xSync on the WAL file
 * while `fail_sync` is set.
 */
#include <sqlite3.h>
#include <stdatomic.h>

#include "store_fixture.h"

/* ---- the fault-injecting VFS ------------------------------------------------------------ */

typedef struct shim_file {
  sqlite3_file base;
  sqlite3_file *real;
  int is_wal;
} shim_file;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs shim_vfs;
static atomic_int fail_sync;
static atomic_int failed_syncs;

#define REAL(f) (((shim_file *)(f))->real)
#define FWD(f, m, ...) REAL(f)->pMethods->m(REAL(f), ##__VA_ARGS__)

static int shim_close(sqlite3_file *f) {
  int rc = FWD(f, xClose);
  sqlite3_free(REAL(f));
  return rc;
}
static int shim_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off) {
  return FWD(f, xRead, p, n, off);
}
static int shim_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off) {
  return FWD(f, xWrite, p, n, off);
}
static int shim_truncate(sqlite3_file *f, sqlite3_int64 size) {
  return FWD(f, xTruncate, size);
}
static int shim_sync(sqlite3_file *f, int flags) {
  if (((shim_file *)f)->is_wal && atomic_load(&fail_sync)) {
    atomic_fetch_add(&failed_syncs, 1);
    return SQLITE_IOERR_FSYNC;
  }
  return FWD(f, xSync, flags);
}
static int shim_size(sqlite3_file *f, sqlite3_int64 *size) {
  return FWD(f, xFileSize, size);
}
static int shim_lock(sqlite3_file *f, int l) {
  return FWD(f, xLock, l);
}
static int shim_unlock(sqlite3_file *f, int l) {
  return FWD(f, xUnlock, l);
}
static int shim_check(sqlite3_file *f, int *out) {
  return FWD(f, xCheckReservedLock, out);
}
static int shim_fcntl(sqlite3_file *f, int op, void *arg) {
  return FWD(f, xFileControl, op, arg);
}
static int shim_sector(sqlite3_file *f) {
  return FWD(f, xSectorSize);
}
static int shim_caps(sqlite3_file *f) {
  return FWD(f, xDeviceCharacteristics);
}
static int shim_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp) {
  return FWD(f, xShmMap, pg, sz, ext, pp);
}
static int shim_shm_lock(sqlite3_file *f, int off, int n, int flags) {
  return FWD(f, xShmLock, off, n, flags);
}
static void shim_shm_barrier(sqlite3_file *f) {
  FWD(f, xShmBarrier);
}
static int shim_shm_unmap(sqlite3_file *f, int del) {
  return FWD(f, xShmUnmap, del);
}
static int shim_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp) {
  return FWD(f, xFetch, off, n, pp);
}
static int shim_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
  return FWD(f, xUnfetch, off, p);
}

static const sqlite3_io_methods shim_io = {
    3,
    shim_close,
    shim_read,
    shim_write,
    shim_truncate,
    shim_sync,
    shim_size,
    shim_lock,
    shim_unlock,
    shim_check,
    shim_fcntl,
    shim_sector,
    shim_caps,
    shim_shm_map,
    shim_shm_lock,
    shim_shm_barrier,
    shim_shm_unmap,
    shim_fetch,
    shim_unfetch,
};

static int shim_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)vfs;
  shim_file *s = (shim_file *)f;
  s->base.pMethods = NULL;
  s->real = sqlite3_malloc(real_vfs->szOsFile);
  if (!s->real) return SQLITE_NOMEM;
  memset(s->real, 0, (size_t)real_vfs->szOsFile);
  int rc = real_vfs->xOpen(real_vfs, name, s->real, flags, out);
  if (rc != SQLITE_OK || !s->real->pMethods) {
    sqlite3_free(s->real);
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  s->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  s->base.pMethods = &shim_io;
  return SQLITE_OK;
}

static int shim_install(void **state) {
  (void)state;
  real_vfs = sqlite3_vfs_find(NULL);
  shim_vfs = *real_vfs; /* the other entry points are the real ones */
  shim_vfs.zName = "qim-test-fsync-shim";
  shim_vfs.szOsFile = (int)sizeof(shim_file);
  shim_vfs.xOpen = shim_open;
  shim_vfs.pNext = NULL;
  return sqlite3_vfs_register(&shim_vfs, 1) == SQLITE_OK ? 0 : -1;
}

static int shim_remove(void **state) {
  (void)state;
  sqlite3_vfs_register(real_vfs, 1);
  sqlite3_vfs_unregister(&shim_vfs);
  return 0;
}

/* ---- the test ---------------------------------------------------------------------------- */

static void test_failed_commit_fsync_fails_the_whole_batch(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-fsync");
  fx_gate gate;
  fx_gate_init(&gate);
  qim_store_options o = fx_options();
  o.before_commit = fx_gate_hook;
  o.hook_ctx = &gate;
  qim_store *s = fx_open(dir, NULL, &o);
  fx_create_group(s, 1, 1);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int done = 0;

  qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .payload = {(uint8_t *)"a", 1}};
  a.key[0] = 1;
  qim_store_log_append_req append = {.appends = &a, .append_count = 1};
  qim_store_member_change ch = {QIM_STORE_MEMBER_ADD, fx_user(2), QIM_GROUP_ROLE_MEMBER, 0x2F,
                                0x2F};
  qim_store_members_change_req members = {0};
  members.tenant_id = fx_tenant();
  members.conversation_id = fx_conv(1);
  members.changes = &ch;
  members.change_count = 1;
  fx_async(&append.req, cq, &done);
  fx_async(&members.req, cq, &done);

  fx_gate_arm(&gate);
  assert_int_equal(s->vt->logs.append(s, &append), 0);
  fx_gate_wait_entered(&gate); /* the writer holds a batch with the append, before COMMIT */
  assert_int_equal(s->vt->conversations.members_change(s, &members), 0);
  atomic_store(&fail_sync, 1);
  fx_gate_release(&gate);
  fx_wait_count(cq, &done, 2);
  atomic_store(&fail_sync, 0);

  assert_true(atomic_load(&failed_syncs) >= 1);
  assert_int_equal(append.req.status, QIM_E_COMMIT_LOG_PUBLICATION_NOT_DURABLE);
  assert_int_equal(members.req.status, QIM_E_GROUP_UNAVAILABLE);
  qim_store_stats st;
  qim_store_get_stats(s, &st);
  assert_int_equal(st.failed_operations, 2);

  /* Nothing of the failed batches is visible, and the store works again. */
  qim_store_member_get_req mg = {0};
  mg.tenant_id = fx_tenant();
  mg.conversation_id = fx_conv(1);
  mg.user_id = fx_user(2);
  assert_int_equal(QIM_STORE_SYNC(s, conversations.member_get, &mg), -ENOENT);
  a.key[0] = 2;
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &append), 0);
  assert_int_equal(a.out_position.offset, 1);
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_change, &members), 0);

  qim_store_close(s);
  qim_cq_free(cq);
  fx_gate_destroy(&gate);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failed_commit_fsync_fails_the_whole_batch),
  };
  return cmocka_run_group_tests(tests, shim_install, shim_remove);
}
