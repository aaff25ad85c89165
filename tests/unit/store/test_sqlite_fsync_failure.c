/*
 * test_sqlite_fsync_failure.c — a COMMIT whose fsync fails: every operation of the batch
 * fails ("durability not confirmed"), none is reported done, nothing of it is visible, and
 * the store carries on once the disk recovers.
 *
 * The failure is injected with the pass-through VFS of pass_vfs.h, registered as the
 * default before the store opens: it fails xSync on the WAL file while `fail_sync` is set.
 */
#include <sqlite3.h>
#include <stdatomic.h>

#include "pass_vfs.h"
#include "store_fixture.h"

/* ---- the fault: the pass-through VFS fails WAL syncs while fail_sync is set ---------------- */

static atomic_int fail_sync;
static atomic_int failed_syncs;

static int sync_hook(void) {
  if (!atomic_load(&fail_sync)) return SQLITE_OK;
  atomic_fetch_add(&failed_syncs, 1);
  return SQLITE_IOERR_FSYNC;
}

static int shim_install(void **state) {
  pass_vfs_on_wal_sync = sync_hook;
  return pass_vfs_install(state);
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
  return cmocka_run_group_tests(tests, shim_install, pass_vfs_remove);
}
