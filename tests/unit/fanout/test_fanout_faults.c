/*
 * test_fanout_faults.c — faults injected at the store-interface level (wrap_store.h):
 * a combined append + offset call that fails or is killed between its two halves,
 * a stored snapshot that was tampered with, a store that cannot be read, and appends whose
 * completions come late or say the commit was not made durable. After each,
 * a restarted fanout on the real store duplicates nothing and skips nothing.
 */
#include "testsupport.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fanout/fanout.h"
#include "fanout_store_fixture.h"
#include "qim/err.h"
#include "wrap_store.h"

static qim_conversation_id conv_n(uint64_t n) { return (qim_conversation_id){{0xFA, n}}; }

static qim_fanout *fanout_over(qim_store *s) {
  qim_fanout_options o = {.shards = FX_SHARDS, .chunk_size = 32, .max_call_appends = 8};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(s, &o, &f), 0);
  return f;
}

/* Three groups, six messages; returns the number of dispatches the plan makes. */
static void build(qim_store *s) {
  fx_make_group(s, conv_n(1), 1, 3);
  fx_make_group(s, conv_n(2), 100, 250);
  fx_make_group(s, conv_n(3), 1000, 40);
  for (uint64_t seq = 1; seq <= 2; seq++)
    for (uint64_t g = 1; g <= 3; g++) fx_send(s, conv_n(g), seq);
}

/* Every DispatchId appears once in the logs, and each message reaches each member of
 * its frozen snapshot exactly once. */
static void assert_no_duplicates(qim_store *s) {
  fx_dispatches x;
  fx_all_dispatches(s, &x);
  for (size_t i = 0; i < x.n; i++)
    for (size_t j = i + 1; j < x.n; j++) assert_memory_not_equal(x.d[i].dispatch_id.b, x.d[j].dispatch_id.b, 16);
  const uint64_t first[] = {0, 1, 100, 1000}, size[] = {0, 3, 250, 40};
  for (uint64_t g = 1; g <= 3; g++)
    for (uint64_t seq = 1; seq <= 2; seq++) {
      qim_committed_envelope e;
      fx_envelope(&e, conv_n(g), seq);
      assert_int_equal(fx_count_all(&x, &e.intent.coordinates.message_id, NULL), size[g]);
      for (uint64_t u = 0; u < size[g]; u++)
        assert_int_equal(fx_count_recipient(&x, &e.intent.coordinates.message_id, fx_user(first[g] + u)), 1);
      qim_committed_envelope_free(&e);
    }
  fx_dispatches_free(&x);
}

static size_t dispatch_records(qim_store *s) {
  size_t n = 0;
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++) {
    fx_log l;
    fx_read(s, fx_dispatch_stream(sh), &l);
    n += l.n;
    fx_log_free(&l);
  }
  return n;
}

/* ---- the combined call fails between its halves -------------------------------------------- */

static void test_failed_offset_commit_is_transaction_failed_and_a_restart_duplicates_nothing(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-fail");
  qim_store *s = fx_open(dir, "a");
  build(s);
  wrap_store *w = wrap_store_new(s);
  atomic_store(&w->split_append, 1);
  qim_fanout *f = fanout_over(&w->base);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), QIM_E_FANOUT_TRANSACTION_FAILED);
  assert_int_equal(n, 0);
  assert_int_equal(atomic_load(&w->splits), 1);
  size_t written = dispatch_records(s);
  assert_true(written > 0);           /* the appends of the first call are durable ... */
  assert_int_equal(fx_consumer(s), 0); /* ... the offset is not */
  qim_fanout_free(f);
  /* restart on the real store: the written dispatches are found and verified */
  f = fanout_over(s);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  qim_fanout_status st;
  qim_fanout_get_status(f, &st);
  assert_int_equal(st.verified, written);
  assert_no_duplicates(s);
  qim_fanout_free(f);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

static void test_sigkill_between_dispatch_appends_and_offset_commit_duplicates_nothing(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-kill");
  qim_store *s = fx_open(dir, "a");
  build(s);
  qim_store_close(s); /* no store threads across fork */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    qim_store *cs = fx_open(dir, "a");
    wrap_store *w = wrap_store_new(cs);
    atomic_store(&w->split_append, 1);
    atomic_store(&w->kill_after_split, 1);
    qim_fanout *f = fanout_over(&w->base);
    uint32_t n;
    qim_fanout_run_once(f, 100, &n);
    _exit(3); /* not reached: the wrapper kills the process */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  s = fx_open(dir, "a");
  size_t written = dispatch_records(s);
  assert_true(written > 0);
  assert_int_equal(fx_consumer(s), 0);
  qim_fanout *f = fanout_over(s);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  assert_int_equal(fx_consumer(s), fx_outbox_end(s));
  assert_no_duplicates(s);
  qim_fanout_free(f);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- a stored snapshot that changed --------------------------------------------------------- */

/* Drops the last member of every page (the count no longer matches the frozen one). */
static void drop_one(qim_store_members_at_req *r, void *ctx) {
  (void)ctx;
  if (r->out_count) r->out_count--;
}

/* Replaces one member by another user of the same shard: same count, same shards, so
 * only the byte comparison of a replay can see it. */
static void swap_one(qim_store_members_at_req *r, void *ctx) {
  (void)ctx;
  for (size_t i = 0; i < r->out_count; i++) {
    if (!qim_u128_eq(r->out_members[i].user_id.v, fx_user(101).v)) continue;
    qim_mailbox_shard_id want = qim_shard_of_user(&FX_SHARDS, FX_TENANT, fx_user(101));
    for (uint64_t u = 900000;; u++)
      if (qim_shard_of_user(&FX_SHARDS, FX_TENANT, fx_user(u)) == want) {
        r->out_members[i].user_id = fx_user(u);
        return;
      }
  }
}

static void test_tampered_snapshot_is_a_violation_on_first_play(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-tamper1");
  qim_store *s = fx_open(dir, "a");
  build(s);
  wrap_store *w = wrap_store_new(s);
  w->tamper = drop_one;
  qim_fanout *f = fanout_over(&w->base);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  assert_int_equal(n, 0);
  assert_int_equal(fx_consumer(s), 0);
  assert_int_equal(dispatch_records(s), 0);
  qim_fanout_free(f);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

static void test_replay_after_the_stored_snapshot_was_tampered_with_is_a_violation(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-tamper2");
  qim_store *s = fx_open(dir, "a");
  build(s);
  qim_fanout *f = fanout_over(s);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  qim_fanout_free(f);
  size_t written = dispatch_records(s);
  fx_consumer_set(s, 0); /* replay everything */
  wrap_store *w = wrap_store_new(s);
  w->tamper = swap_one;
  f = fanout_over(&w->base);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  /* conv 2 (users 100..349) has the second outbox record */
  assert_int_equal(n, 1);
  assert_int_equal(fx_consumer(s), fx_outbox_first(s) + 1);
  assert_int_equal(dispatch_records(s), written); /* nothing rewritten */
  qim_fanout_free(f);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* The same tampering, done to the SQLite file itself while the store is closed: the
 * versioned member rows of user 101 now name another user of the same shard. */
static void tamper_file(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/a.db", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  qim_store_members_at_req probe = {.out_count = 1};
  qim_group_member m = {.user_id = fx_user(101)};
  probe.out_members = &m;
  swap_one(&probe, NULL);
  uint8_t from[16], to[16];
  qim_u128_to_be(fx_user(101).v, from);
  qim_u128_to_be(m.user_id.v, to);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "UPDATE member_versions SET user = ?1 WHERE user = ?2", -1, &st, NULL),
                   SQLITE_OK);
  sqlite3_bind_blob(st, 1, to, 16, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, from, 16, SQLITE_STATIC);
  assert_int_equal(sqlite3_step(st), SQLITE_DONE);
  assert_true(sqlite3_changes(db) >= 1);
  sqlite3_finalize(st);
  sqlite3_close(db);
}

static void test_replay_after_the_snapshot_rows_were_tampered_with_on_disk_is_a_violation(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-tamper3");
  qim_store *s = fx_open(dir, "a");
  build(s);
  qim_fanout *f = fanout_over(s);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  qim_fanout_free(f);
  fx_consumer_set(s, 0);
  qim_store_close(s);
  tamper_file(dir);
  s = fx_open(dir, "a");
  size_t written = dispatch_records(s);
  f = fanout_over(s);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  assert_int_equal(n, 1);
  assert_int_equal(fx_consumer(s), fx_outbox_first(s) + 1);
  assert_int_equal(dispatch_records(s), written);
  qim_fanout_free(f);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- the store cannot be read --------------------------------------------------------------- */

static void test_unreadable_outbox_is_unavailable(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-io");
  qim_store *s = fx_open(dir, "a");
  build(s);
  wrap_store *w = wrap_store_new(s);
  atomic_store(&w->fail_read, 1);
  qim_fanout *f = fanout_over(&w->base);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), QIM_E_FANOUT_UNAVAILABLE);
  atomic_store(&w->fail_read, 0);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  qim_fanout_free(f);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- appends in flight ------------------------------------------------------------------------- */

/* The fanout goes on once an append has COMMITTED: a run completes every record while the
 * appends' completions (their syncs) are still outstanding, and they are settled later. */
static void test_the_fanout_goes_on_while_its_appends_await_their_completion(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-park");
  qim_store *s = fx_open(dir, "a");
  build(s);
  wrap_store *w = wrap_store_new(s);
  atomic_store(&w->park_append, 1);
  qim_fanout *f = fanout_over(&w->base);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  assert_true(w->intercepted >= 1); /* whose completions are parked, or still to come */
  qim_fanout_status st;
  qim_fanout_get_status(f, &st);
  assert_int_equal(st.records, 6);
  assert_int_equal(fx_consumer(s), 7); /* the offset is committed (and, read this way, durable) */
  wrap_release_parked(w);
  qim_fanout_free(f); /* settles the released completions */
  assert_no_duplicates(s);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* An append that committed but whose sync failed surfaces as the next run's error; a restart
 * on the store finds the offset committed and duplicates nothing. */
static void test_an_append_committed_but_not_confirmed_fails_the_next_run(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("fanout-unconfirmed");
  qim_store *s = fx_open(dir, "a");
  build(s);
  wrap_store *w = wrap_store_new(s);
  atomic_store(&w->unconfirm_append, 1);
  qim_fanout *f = fanout_over(&w->base);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 6);
  assert_int_equal(fx_consumer(s), 7);
  /* The completions come after the syncs: until then a run finds nothing more to do. */
  int rc = 0;
  for (int i = 0; i < 500 && rc == 0; i++) {
    rc = qim_fanout_run_once(f, 100, &n);
    assert_int_equal(n, 0);
    if (rc == 0) qim_test_sleep_ms(10);
  }
  assert_int_equal(rc, QIM_E_FANOUT_TRANSACTION_FAILED);
  assert_true(w->intercepted >= 1);
  atomic_store(&w->unconfirm_append, 0);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  qim_fanout_free(f);
  f = fanout_over(s);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 0);
  assert_no_duplicates(s);
  qim_fanout_free(f);
  wrap_close(&w->base);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failed_offset_commit_is_transaction_failed_and_a_restart_duplicates_nothing),
      cmocka_unit_test(test_sigkill_between_dispatch_appends_and_offset_commit_duplicates_nothing),
      cmocka_unit_test(test_tampered_snapshot_is_a_violation_on_first_play),
      cmocka_unit_test(test_replay_after_the_stored_snapshot_was_tampered_with_is_a_violation),
      cmocka_unit_test(test_replay_after_the_snapshot_rows_were_tampered_with_on_disk_is_a_violation),
      cmocka_unit_test(test_unreadable_outbox_is_unavailable),
      cmocka_unit_test(test_the_fanout_goes_on_while_its_appends_await_their_completion),
      cmocka_unit_test(test_an_append_committed_but_not_confirmed_fails_the_next_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
