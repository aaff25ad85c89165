/*
 * test_sqlite_wal_gather.c — the store's WAL shim (src/store/sqlite_vfs.c) hands SQLite's
 * frame writes to the file in a few large writes, durably: a group commit of many pages
 * reaches the file in far fewer writes than frames, everything committed reads back after
 * a reopen, and a write that fails when the shim flushes at the COMMIT's sync fails that
 * batch as a failed fsync would (nothing of it visible), after which the store works on.
 *
 * The pass-through VFS of pass_vfs.h, registered as the default underneath, counts and
 * fails the WAL writes that reach it; the shim stacks on it as it stacks on the real one.
 */
#include <sqlite3.h>
#include <stdatomic.h>

#include "pass_vfs.h"
#include "store_fixture.h"

static atomic_int wal_writes;     /* xWrite calls that reached the WAL file */
static atomic_llong wal_bytes;    /* bytes they carried */
static atomic_int fail_wal_write; /* set: every WAL write fails (a full or broken disk) */
static atomic_int failed_writes;

static int write_hook(int bytes) {
  if (atomic_load(&fail_wal_write)) {
    atomic_fetch_add(&failed_writes, 1);
    return SQLITE_IOERR_WRITE;
  }
  atomic_fetch_add(&wal_writes, 1);
  atomic_fetch_add(&wal_bytes, bytes);
  return SQLITE_OK;
}

static int install(void **state) {
  pass_vfs_on_wal_write = write_hook;
  return pass_vfs_install(state);
}

/* ---- helpers ------------------------------------------------------------------------------ */

#define BATCH 64

/* One group commit of BATCH outbox appends with 3 KB payloads each (most of a page). The
 * writer is held before the COMMIT of the first batch, so all but the first queue
 * together. */
static void append_batch(qim_store *s, fx_gate *gate, uint8_t tag, int expect) {
  static uint8_t payload[3000];
  memset(payload, tag, sizeof payload);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  qim_store_log_append a[BATCH];
  qim_store_log_append_req r[BATCH];
  int done = 0;
  fx_gate_arm(gate);
  for (int i = 0; i < BATCH; i++) {
    a[i] = (qim_store_log_append){.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .payload = {payload, sizeof payload}};
    a[i].key[0] = tag;
    a[i].key[1] = (uint8_t)i;
    r[i] = (qim_store_log_append_req){.appends = &a[i], .append_count = 1};
    fx_async(&r[i].req, cq, &done);
    assert_int_equal(s->vt->logs.append(s, &r[i]), 0);
    if (i == 0) fx_gate_wait_entered(gate);
  }
  fx_gate_release(gate);
  fx_wait_count(cq, &done, BATCH);
  for (int i = 0; i < BATCH; i++) assert_int_equal(r[i].req.status, expect);
  qim_cq_free(cq);
}

static size_t outbox_records(qim_store *s) {
  qim_store_log_read_req rd = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 1, .max = 1000};
  assert_int_equal(QIM_STORE_SYNC(s, logs.read, &rd), 0);
  size_t n = rd.out_count;
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(rd.out_records[i].payload.n, 3000);
    qim_store_log_record_free(&rd.out_records[i]);
  }
  qim_free(rd.out_records);
  return n;
}

/* Options whose writer waits at `gate` before each COMMIT. */
static qim_store_options gated_options(fx_gate *gate) {
  fx_gate_init(gate);
  qim_store_options o = fx_options();
  o.before_commit = fx_gate_hook;
  o.hook_ctx = gate;
  return o;
}

/* ---- the tests ---------------------------------------------------------------------------- */

static void test_group_commit_reaches_the_wal_in_few_writes_and_reads_back(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-walgather");
  fx_gate gate;
  qim_store_options o = gated_options(&gate);
  qim_store *s = fx_open(dir, NULL, &o);
  qim_store_stats before, after;
  qim_store_get_stats(s, &before);
  int writes0 = atomic_load(&wal_writes);
  long long bytes0 = atomic_load(&wal_bytes);

  append_batch(s, &gate, 1, 0);

  qim_store_get_stats(s, &after);
  uint64_t frames = after.pages_written - before.pages_written;
  int writes = atomic_load(&wal_writes) - writes0;
  long long bytes = atomic_load(&wal_bytes) - bytes0;
  /* Every frame (header + page) reached the file, in far fewer writes than the two per
   * frame SQLite makes: at most one per 30 frames, plus the WAL header. */
  assert_true(frames >= BATCH);
  assert_true(bytes >= (long long)frames * 4096);
  assert_true(writes > 0);
  assert_true((uint64_t)writes <= frames / 16 + 4);
  qim_store_close(s);

  s = fx_open(dir, NULL, &o); /* the first connection recovers the WAL, if one is left */
  assert_int_equal(outbox_records(s), BATCH);
  qim_store_close(s);
  fx_gate_destroy(&gate);
  qim_test_rmtree(dir);
}

static void test_failed_flush_fails_the_batch_and_the_store_carries_on(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-walfail");
  fx_gate gate;
  qim_store_options o = gated_options(&gate);
  qim_store *s = fx_open(dir, NULL, &o);
  append_batch(s, &gate, 1, 0);

  /* The shim holds the frames until the COMMIT syncs; the write it makes then fails. */
  atomic_store(&fail_wal_write, 1);
  append_batch(s, &gate, 2, QIM_E_COMMIT_LOG_PUBLICATION_NOT_DURABLE);
  atomic_store(&fail_wal_write, 0);
  assert_true(atomic_load(&failed_writes) >= 1);
  assert_int_equal(outbox_records(s), BATCH); /* only the first batch */

  append_batch(s, &gate, 3, 0);
  assert_int_equal(outbox_records(s), 2 * BATCH);
  qim_store_close(s);

  s = fx_open(dir, NULL, &o);
  assert_int_equal(outbox_records(s), 2 * BATCH);
  qim_store_close(s);
  fx_gate_destroy(&gate);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_commit_reaches_the_wal_in_few_writes_and_reads_back),
      cmocka_unit_test(test_failed_flush_fails_the_batch_and_the_store_carries_on),
  };
  return cmocka_run_group_tests(tests, install, pass_vfs_remove);
}
