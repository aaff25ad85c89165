/*
 * test_commit_in_reserve.c — the one-transaction commit (intents.reserve with `commit`,
 * commit_in_reserve): a fresh send whose conversation has nothing unpublished is
 * Committed by its reserve alone and leaves exactly what the staged steps leave; a step
 * failing inside it leaves the intent Reserved for the staged path and recovery, which
 * finish it once; the fanout's wake-up fires on the store's writer, once per message,
 * before its ACK, on both paths; and the outbox stays in seq order per conversation with
 * concurrent senders and with staged and in-reserve sends mixed in one conversation.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

#include "commit_fixture.h"
#include "qim/err.h"

enum { SENDERS = 4 };

static const qim_user_id alice = {{0, 1}}, bob = {{0, 2}};

static qim_commit_stats stats_of(fx *f) {
  qim_commit_stats s;
  qim_commit_get_stats(f->commit, &s);
  return s;
}

static uint64_t write_ops(fx *f) {
  qim_store_stats s;
  qim_store_get_stats(f->store, &s);
  return s.operations;
}

/* The same send in both fixtures: fixed trace id, the same text, the same key. */
static qim_authenticated_send same_send(fx *f, qim_user_id from, qim_conversation_id conv,
                                        uint64_t cmid, const char *text) {
  qim_authenticated_send s = fx_send(f, from, conv, cmid, text);
  memset(s.trace_id.b, 0, sizeof s.trace_id.b);
  s.trace_id.b[15] = (uint8_t)cmid;
  return s;
}

/* Sends three messages to a direct and a group conversation; returns the write operations
 * the store ran for them. */
static uint64_t send_script(fx *f, qim_conversation_id *dm, qim_conversation_id *grp) {
  *dm = fx_direct(f, alice, bob);
  *grp = fx_group(f, 1, alice, &bob, 1);
  uint64_t before = write_ops(f);
  const char *texts[] = {"one", "two", "three"};
  for (int i = 0; i < 3; i++) {
    qim_authenticated_send s =
        same_send(f, i == 1 ? bob : alice, i == 2 ? *grp : *dm, (uint64_t)i + 1, texts[i]);
    qim_commit_result r;
    assert_int_equal(qim_commit_send_sync(f->commit, &s, &r), 0);
    assert_int_equal(r.reserve, QIM_RESERVE_RESULT_FRESH);
  }
  return write_ops(f) - before;
}

static void assert_same_history(fx *a, fx *b, qim_conversation_id conv) {
  qim_message_record *ha, *hb;
  size_t na = fx_history(a, conv, alice, &ha), nb = fx_history(b, conv, alice, &hb);
  assert_int_equal(na, nb);
  for (size_t i = 0; i < na; i++) assert_true(qim_message_record_equal(&ha[i], &hb[i]));
  fx_history_free(ha, na);
  fx_history_free(hb, nb);
}

static void test_one_transaction_commit_leaves_what_the_staged_steps_leave(void **state) {
  (void)state;
  fx staged, fused;
  fx_open_staged(&staged);
  fx_open(&fused, NULL);
  qim_conversation_id dm, grp, dm2, grp2;
  uint64_t staged_ops = send_script(&staged, &dm, &grp);
  uint64_t fused_ops = send_script(&fused, &dm2, &grp2);
  assert_int_equal(stats_of(&staged).committed_in_reserve, 0);
  assert_int_equal(stats_of(&fused).committed_in_reserve, 3);
  assert_int_equal(staged_ops, 3 * 4); /* reserve and three advances each */
  assert_int_equal(fused_ops, 3);      /* the reserve alone */
  /* History rows, outbox envelopes (intent with its frozen audience, record, state
   * OUTBOXED) and the Committed intents are the same, byte for byte. */
  assert_same_history(&staged, &fused, dm);
  assert_same_history(&staged, &fused, grp);
  fx_outbox os, of;
  fx_outbox_read(&staged, &os);
  fx_outbox_read(&fused, &of);
  assert_int_equal(os.n, 3);
  assert_int_equal(of.n, 3);
  for (size_t i = 0; i < os.n; i++) {
    assert_int_equal(os.offsets[i], of.offsets[i]);
    assert_int_equal(of.env[i].intent.state, QIM_COMMIT_STATE_OUTBOXED);
    assert_true(qim_committed_envelope_equal(&os.env[i], &of.env[i]));
  }
  fx_outbox_free(&os);
  fx_outbox_free(&of);
  for (uint64_t cmid = 1; cmid <= 3; cmid++) {
    qim_commit_key k = fx_key(&fused, cmid == 2 ? bob : alice, cmid);
    qim_loaded_commit ls, lf;
    assert_int_equal(qim_commit_load_sync(staged.commit, &k, &ls), 0);
    assert_int_equal(qim_commit_load_sync(fused.commit, &k, &lf), 0);
    assert_int_equal(lf.kind, QIM_LOADED_COMMIT_COMMITTED);
    assert_int_equal(ls.kind, QIM_LOADED_COMMIT_COMMITTED);
    assert_memory_equal(&ls.committed, &lf.committed, sizeof ls.committed);
  }
  /* Both remember the keys until the same dedupe deadline (the commit time). */
  qim_commit_task ts, tf;
  qim_manual_clock_advance(&staged.clock, staged.cfg.dedupe_window_ms + 1);
  qim_manual_clock_advance(&fused.clock, fused.cfg.dedupe_window_ms + 1);
  assert_int_equal(qim_commit_forget_sync(staged.commit, &ts), 0);
  assert_int_equal(qim_commit_forget_sync(fused.commit, &tf), 0);
  assert_int_equal(ts.forgotten, 3);
  assert_int_equal(tf.forgotten, 3);
  fx_close(&staged);
  fx_close(&fused);
}

/* ---- the fanout's wake-up ------------------------------------------------------------------------ */

/* What on_outboxed saw: how often it fired, and how often not on the store's writer. */
typedef struct outboxed_seen {
  atomic_int fired, elsewhere;
} outboxed_seen;

static void outboxed_count(void *ctx) {
  outboxed_seen *o = ctx;
  char name[16] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  if (strcmp(name, "qim-writer") != 0) atomic_fetch_add(&o->elsewhere, 1);
  atomic_fetch_add(&o->fired, 1);
}

/* On both paths the hint comes from the store's `committed` hint (the outbox record's
 * transaction committed, before its sync), once per message, before the message's ACK. */
static void test_on_outboxed_fires_on_the_writer_once_per_message_before_its_ack(void **state) {
  (void)state;
  for (int staged = 0; staged < 2; staged++) {
    outboxed_seen seen = {0};
    qim_commit_config cfg;
    fx_config(&cfg);
    cfg.commit_in_reserve = !staged;
    cfg.on_outboxed = outboxed_count;
    cfg.hook_ctx = &seen;
    fx f;
    fx_open(&f, &cfg);
    qim_conversation_id dm, grp;
    send_script(&f, &dm, &grp); /* returns after the third ACK */
    assert_int_equal(atomic_load(&seen.fired), 3);
    assert_int_equal(atomic_load(&seen.elsewhere), 0);
    assert_int_equal(stats_of(&f).committed_in_reserve, staged ? 0 : 3);
    fx_close(&f);
  }
}

/* ---- a step failing inside the reserve --------------------------------------------------------
 */

/* A trigger, made through a connection of our own, refuses outbox appends while the
 * `fault` table holds a row: the OUTBOXED step fails inside the store, on either path. */
static void sql(fx *f, const char *stmt) {
  char path[600];
  snprintf(path, sizeof path, "%s/qim.db", f->dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char *err = NULL;
  int rc = sqlite3_exec(db, stmt, NULL, NULL, &err);
  if (rc != SQLITE_OK) fail_msg("%s: %s", stmt, err ? err : "?");
  sqlite3_close(db);
}

static void test_failure_inside_the_reserve_leaves_it_reserved_and_recovery_finishes_it_once(
    void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id dm = fx_direct(&f, alice, bob);
  sql(&f,
      "CREATE TABLE fault(x); INSERT INTO fault VALUES(1);"
      "CREATE TRIGGER fault_outbox BEFORE INSERT ON log_records WHEN EXISTS (SELECT 1 FROM fault)"
      " BEGIN SELECT RAISE(ABORT, 'injected'); END;");
  qim_authenticated_send s = fx_send(&f, alice, dm, 1, "held back");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RECOVERABLE);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_FRESH);
  assert_int_equal(stats_of(&f).committed_in_reserve, 0);
  /* Its batch ran bare first, then again with savepoints, where the reserve's own one
   * undid the steps (sqlite.c, "Savepoints"). */
  qim_store_stats ss;
  qim_store_get_stats(f.store, &ss);
  assert_true(ss.redos >= 1);
  /* The reserve undid its steps and stored the intent Reserved; the staged path then
   * recorded it and failed at OUTBOXED. Nothing half-done is visible. */
  qim_commit_key k = fx_key(&f, alice, 1);
  qim_loaded_commit lc;
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_IN_FLIGHT);
  assert_int_equal(lc.intent.state, QIM_COMMIT_STATE_RECORDED);
  assert_int_equal(lc.intent.coordinates.conversation_seq, 1);
  qim_commit_intent_free(&lc.intent);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 0);
  fx_outbox_free(&o);
  /* The fault clears; after the backoff, recovery finishes it. */
  sql(&f, "DELETE FROM fault;");
  qim_manual_clock_advance(&f.clock, 2000);
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  fx_wait_committed(&f, &k);
  /* The store says Committed before the commit retires its live entry; a retry in
   * between would attach to that entry (Existing), so wait for it to go. */
  WAIT_FOR(stats_of(&f).live_entries == 0, 5000);
  assert_int_equal(stats_of(&f).live_entries, 0);
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.env[0].record.coordinates.conversation_seq, 1);
  fx_outbox_free(&o);
  qim_message_record *h;
  assert_int_equal(fx_history(&f, dm, alice, &h), 1);
  fx_history_free(h, 1);
  /* A retry replays the ACK; the next send takes the one-transaction path again. */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_COMMITTED);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  qim_authenticated_send s2 = fx_send(&f, bob, dm, 2, "after");
  assert_int_equal(qim_commit_send_sync(f.commit, &s2, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2);
  assert_int_equal(stats_of(&f).committed_in_reserve, 1);
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 2);
  fx_assert_outbox_ordered(&o);
  fx_outbox_free(&o);
  fx_close(&f);
}

/* ---- order with concurrent and mixed sends ------------------------------------------------------
 */

/* SENDERS threads into one group, `per` messages each; then the outbox holds every
 * message once, in seq order, seqs dense from 1. */
static void run_group_senders(fx *f, int per) {
  qim_user_id users[SENDERS];
  for (int i = 0; i < SENDERS; i++) users[i] = fx_user(10 + (uint64_t)i);
  qim_conversation_id grp = fx_group(f, 2, users[0], users + 1, SENDERS - 1);
  fx_sender s[SENDERS];
  pthread_t th[SENDERS];
  qim_commit_result *res = calloc((size_t)(SENDERS * per), sizeof *res);
  for (int i = 0; i < SENDERS; i++) {
    s[i] = (fx_sender){f, grp, users[i], per, (uint64_t)(i + 1) * 1000, NULL, res + i * per};
    assert_int_equal(pthread_create(&th[i], NULL, fx_send_many, &s[i]), 0);
  }
  for (int i = 0; i < SENDERS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < SENDERS * per; i++) assert_int_equal(res[i].status, 0);
  free(res);
  fx_outbox o;
  fx_outbox_read(f, &o);
  assert_int_equal(o.n, (size_t)(SENDERS * per));
  fx_assert_outbox_ordered(&o);
  for (size_t i = 0; i < o.n; i++)
    assert_int_equal(o.env[i].record.coordinates.conversation_seq, i + 1);
  fx_outbox_free(&o);
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f->commit, &t), 0);
  assert_int_equal(t.listed, 0); /* nothing left in flight */
}

static void test_four_threads_into_one_group_keep_the_outbox_in_seq_order(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  run_group_senders(&f, 25);
  assert_true(stats_of(&f).committed_in_reserve > 0);
  fx_close(&f);
}

/* Every third reserve reaches the store without `commit`, as from a backend or caller
 * that takes the staged path: those stay Reserved, and the in-reserve sends after them
 * fall back until they are published. */
static int staged_every_third(hook_store *h, const char *op, qim_store_req *req) {
  (void)h;
  if (strcmp(op, "intents.reserve") != 0) return 0;
  qim_store_intent_reserve_req *q = (qim_store_intent_reserve_req *)req;
  uint8_t low = q->proposal->key.client_message_id.b[15];
  if (low % 3 == 0) q->commit = false;
  return 0;
}

static void test_staged_and_in_reserve_sends_mixed_in_one_conversation_keep_seq_order(
    void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  f.hook->before = staged_every_third;
  run_group_senders(&f, 30);
  f.hook->before = NULL;
  qim_commit_stats st = stats_of(&f);
  assert_true(st.committed_in_reserve > 0);
  assert_true(st.committed_in_reserve < st.fresh); /* some took the staged steps */
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_transaction_commit_leaves_what_the_staged_steps_leave),
      cmocka_unit_test(test_on_outboxed_fires_on_the_writer_once_per_message_before_its_ack),
      cmocka_unit_test(
          test_failure_inside_the_reserve_leaves_it_reserved_and_recovery_finishes_it_once),
      cmocka_unit_test(test_four_threads_into_one_group_keep_the_outbox_in_seq_order),
      cmocka_unit_test(test_staged_and_in_reserve_sends_mixed_in_one_conversation_keep_seq_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
