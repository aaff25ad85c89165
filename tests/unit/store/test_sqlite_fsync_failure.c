/*
 * test_sqlite_fsync_failure.c — the syncer's WAL sync (src/store/sqlite_sync.c), which
 * makes the writer's COMMITs durable after they return:
 * - nothing a COMMIT wrote is answered, to its writers or to a read that could see it,
 *   before the sync that covers it; the writer goes on committing meanwhile;
 * - a failed sync fails every operation of the batch ("durability not confirmed"), none
 *   is reported done, the store stops (every later operation fails), and a reopened
 *   store works again;
 * - a sync, or a writer's transaction, of 50 ms or longer is logged and counted.
 *
 * The sync is held or failed with the pass-through VFS of pass_vfs.h, registered as the
 * default before the store opens: the syncer's handle on the WAL is opened through it.
 */
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pass_vfs.h"
#include "store_fixture.h"

/* ---- the fault: the pass-through VFS fails WAL syncs while fail_sync is set ---------------- */

static atomic_int fail_sync;
static atomic_int failed_syncs;
static atomic_int hold_sync; /* set: WAL syncs wait until it is cleared */
static atomic_int held_syncs;

static atomic_int delay_sync_ms; /* set: WAL syncs take this long */

static int sync_hook(void) {
  if (atomic_load(&delay_sync_ms)) qim_test_sleep_ms(atomic_load(&delay_sync_ms));
  if (atomic_load(&hold_sync)) {
    atomic_fetch_add(&held_syncs, 1);
    while (atomic_load(&hold_sync)) qim_test_sleep_ms(1);
  }
  if (!atomic_load(&fail_sync)) return SQLITE_OK;
  atomic_fetch_add(&failed_syncs, 1);
  return SQLITE_IOERR_FSYNC;
}

static int shim_install(void **state) {
  pass_vfs_on_wal_sync = sync_hook;
  return pass_vfs_install(state);
}

/* ---- the tests --------------------------------------------------------------------------- */

/* One change to the members of group 1. */
static qim_store_members_change_req members_change(qim_store_member_change *ch) {
  qim_store_members_change_req r = {0};
  r.tenant_id = fx_tenant();
  r.conversation_id = fx_conv(1);
  r.changes = ch;
  r.change_count = 1;
  return r;
}

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
  qim_store_members_change_req members = members_change(&ch);
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

  /* The store has stopped: writes and reads fail, though the disk works again. */
  a.key[0] = 2;
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &append), QIM_E_COMMIT_LOG_UNAVAILABLE);
  qim_store_member_get_req mg = {0};
  mg.tenant_id = fx_tenant();
  mg.conversation_id = fx_conv(1);
  mg.user_id = fx_user(2);
  assert_int_equal(QIM_STORE_SYNC(s, conversations.member_get, &mg), QIM_E_GROUP_UNAVAILABLE);
  qim_store_close(s);

  /* Reopened, it works again. (What failed unconfirmed may or may not be there: the
   * kernel still held its pages.) */
  o = fx_options();
  s = fx_open(dir, NULL, &o);
  a.key[0] = 3;
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &append), 0);
  ch.user_id = fx_user(3);
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_change, &members), 0);
  mg.user_id = fx_user(3);
  assert_int_equal(QIM_STORE_SYNC(s, conversations.member_get, &mg), 0);
  qim_store_member_free(&mg.out);

  qim_store_close(s);
  qim_cq_free(cq);
  fx_gate_destroy(&gate);
  qim_test_rmtree(dir);
}

/* Waits until `n` completions ran on `cq` or `ms` passed; the count reached. */
static int completions_within(qim_cq *cq, int *done, int n, int ms) {
  for (int t = 0; *done < n && t < ms; t += 10) qim_cq_wait(cq, 10);
  return *done;
}

static void test_nothing_is_answered_before_the_sync_that_covers_it(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-sync-hold");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  fx_create_group(s, 1, 1);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int done = 0;
  qim_store_stats before;
  qim_store_get_stats(s, &before);

  atomic_store(&hold_sync, 1);
  qim_store_member_change ch = {QIM_STORE_MEMBER_ADD, fx_user(2), QIM_GROUP_ROLE_MEMBER, 0x2F,
                                0x2F};
  qim_store_members_change_req members = members_change(&ch);
  fx_async(&members.req, cq, &done);
  assert_int_equal(s->vt->conversations.members_change(s, &members), 0);
  /* Its COMMIT returns and the writer takes the next batch, while the sync is held. */
  while (!atomic_load(&held_syncs)) qim_test_sleep_ms(1);
  qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .payload = {(uint8_t *)"a", 1}};
  a.key[0] = 1;
  qim_store_log_append_req append = {.appends = &a, .append_count = 1};
  fx_async(&append.req, cq, &done);
  assert_int_equal(s->vt->logs.append(s, &append), 0);
  qim_store_member_get_req mg = {0};
  mg.tenant_id = fx_tenant();
  mg.conversation_id = fx_conv(1);
  mg.user_id = fx_user(2);
  fx_async(&mg.req, cq, &done);
  assert_int_equal(s->vt->conversations.member_get(s, &mg), 0);
  qim_store_stats mid;
  for (int t = 0; t < 2000; t++) {
    qim_store_get_stats(s, &mid);
    if (mid.transactions - before.transactions >= 2) break;
    qim_test_sleep_ms(1);
  }
  assert_int_equal(mid.transactions - before.transactions, 2);
  assert_int_equal(completions_within(cq, &done, 1, 100), 0); /* nothing answered */

  atomic_store(&hold_sync, 0);
  assert_int_equal(completions_within(cq, &done, 3, 5000), 3);
  assert_int_equal(members.req.status, 0);
  assert_int_equal(append.req.status, 0);
  assert_int_equal(mg.req.status, 0); /* the read saw the change, answered once durable */
  assert_int_equal(mg.out.role, QIM_GROUP_ROLE_MEMBER);
  qim_store_member_free(&mg.out);
  qim_store_stats after;
  qim_store_get_stats(s, &after);
  assert_true(after.sync_waits - before.sync_waits >= 3);
  assert_int_equal(after.fsyncs - before.fsyncs, 2);

  qim_store_close(s);
  qim_cq_free(cq);
  qim_test_rmtree(dir);
}

/* A pipeline stage's read (store.h, "unconfirmed") is answered while the sync of what it
 * saw is still held; the same read without the flag waits for that sync. */
static void test_an_unconfirmed_read_is_answered_before_the_sync(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-sync-unconfirmed");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int done = 0;

  atomic_store(&hold_sync, 1);
  int held = atomic_load(&held_syncs);
  qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .payload = {(uint8_t *)"u", 1}};
  a.key[0] = 7;
  qim_store_log_append_req append = {.appends = &a, .append_count = 1};
  fx_async(&append.req, cq, &done);
  assert_int_equal(s->vt->logs.append(s, &append), 0);
  while (atomic_load(&held_syncs) == held) qim_test_sleep_ms(1); /* its COMMIT returned; sync held */

  qim_store_log_read_req plain = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 8};
  fx_async(&plain.req, cq, &done);
  assert_int_equal(s->vt->logs.read(s, &plain), 0);
  qim_store_log_read_req early = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 8};
  early.req.unconfirmed = true;
  fx_async(&early.req, cq, &done);
  assert_int_equal(s->vt->logs.read(s, &early), 0);
  assert_int_equal(completions_within(cq, &done, 1, 2000), 1);
  assert_int_equal(completions_within(cq, &done, 2, 100), 1); /* only the unconfirmed one */
  assert_int_equal(early.req.status, 0);
  assert_int_equal(early.out_count, 1); /* it saw the unsynced record */
  assert_int_equal(early.out_records[0].payload.n, 1);
  assert_memory_equal(early.out_records[0].payload.p, "u", 1);

  atomic_store(&hold_sync, 0);
  assert_int_equal(completions_within(cq, &done, 3, 5000), 3);
  assert_int_equal(append.req.status, 0);
  assert_int_equal(plain.req.status, 0);
  assert_int_equal(plain.out_count, 1);
  qim_store_log_read_free(&early);
  qim_store_log_read_free(&plain);
  qim_store_close(s);
  qim_cq_free(cq);
  qim_test_rmtree(dir);
}

/* ---- slow syncs and transactions are reported ------------------------------------------- */

/* One outbox append, waited for. */
static void append_one(qim_store *s, uint8_t key) {
  qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .payload = {(uint8_t *)"s", 1}};
  a.key[0] = key;
  qim_store_log_append_req append = {.appends = &a, .append_count = 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &append), 0);
}

/* What one append made slow by `knob` (set to 60 ms around it) left: the store's stats
 * before and after, the `event` lines logged meanwhile and the last of them. */
typedef struct slow_run {
  qim_store_stats before, after;
  size_t lines;
  bool logged;
  char last[512];
} slow_run;

static void slow_append(qim_store *s, atomic_int *knob, uint8_t key, const char *event,
                        slow_run *out) {
  qim_test_log_start(QIM_LOG_WARN);
  qim_store_get_stats(s, &out->before);
  atomic_store(knob, 60);
  append_one(s, key);
  atomic_store(knob, 0);
  qim_store_get_stats(s, &out->after);
  out->lines = qim_test_log_count(event, NULL, NULL);
  out->logged = qim_test_log_last(event, out->last, sizeof out->last);
  qim_test_log_stop();
}

static void test_a_sync_of_50_ms_is_logged_and_counted(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-slow-sync");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  slow_run r; /* the append is answered once the syncer's (delayed) sync covered its COMMIT */
  slow_append(s, &delay_sync_ms, 1, "store.sqlite.slow_sync", &r);

  assert_true(r.after.slow_syncs - r.before.slow_syncs >= 1);
  assert_int_equal(r.lines, r.after.slow_syncs - r.before.slow_syncs); /* one line each */
  assert_true(r.logged);
  assert_true(qim_test_log_field(r.last, " ms=") >= 50.0);
  assert_true(qim_test_log_field(r.last, " commits=") >= 1.0);
  assert_int_equal(r.after.slow_transactions, r.before.slow_transactions); /* the COMMIT did not wait */
  qim_store_close(s);
  qim_test_rmtree(dir);
}

static atomic_int commit_sleep_ms; /* the writer's before_commit hook sleeps this long */

static void sleep_before_commit(void *ctx) {
  (void)ctx;
  if (atomic_load(&commit_sleep_ms)) qim_test_sleep_ms(atomic_load(&commit_sleep_ms));
}

static void test_a_transaction_of_50_ms_is_logged_and_counted(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-slow-transaction");
  qim_store_options o = fx_options();
  o.before_commit = sleep_before_commit;
  qim_store *s = fx_open(dir, NULL, &o);
  slow_run r; /* the hook sleeps between the batch's operations and its COMMIT */
  slow_append(s, &commit_sleep_ms, 2, "store.sqlite.slow_transaction", &r);

  assert_int_equal(r.after.slow_transactions - r.before.slow_transactions, 1);
  assert_int_equal(r.lines, 1);
  assert_true(r.logged);
  assert_true(qim_test_log_field(r.last, " ms=") >= 50.0);
  /* The time went before the COMMIT: the line tells a slow run from a slow COMMIT. */
  assert_true(qim_test_log_field(r.last, " commit_ms=") < qim_test_log_field(r.last, " ms="));
  assert_int_equal((int)qim_test_log_field(r.last, " ops="), 1);
  assert_true(qim_test_log_field(r.last, " pages=") >= 1.0);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failed_commit_fsync_fails_the_whole_batch),
      cmocka_unit_test(test_nothing_is_answered_before_the_sync_that_covers_it),
      cmocka_unit_test(test_an_unconfirmed_read_is_answered_before_the_sync),
      cmocka_unit_test(test_a_sync_of_50_ms_is_logged_and_counted),
      cmocka_unit_test(test_a_transaction_of_50_ms_is_logged_and_counted),
  };
  return cmocka_run_group_tests(tests, shim_install, pass_vfs_remove);
}
