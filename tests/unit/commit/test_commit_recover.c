/*
 * test_commit_recover.c — intents left behind (by a crash, a failing store, another
 * node) are driven to Committed from what they hold, in seq order per conversation,
 * retried with backoff when they keep failing, and committed keys are forgotten once
 * the dedupe window has passed.
 */
#include <stdatomic.h>

#include "commit_fixture.h"
#include "qim/err.h"

static qim_user_id a, b, c;

static void test_recovery_drives_orphans_in_seq_order_per_conversation(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id one = fx_direct(&f, a, b);
  qim_user_id m[] = {b, c};
  qim_conversation_id grp = fx_group(&f, 9, a, m, 2);
  /* A process got this far, each intent in another state, then died. */
  for (uint64_t i = 1; i <= 3; i++) fx_orphan(&f, a, one, true, i, "one", NULL);
  qim_commit_key k1 = fx_key(&f, a, 1), k2 = fx_key(&f, a, 2);
  fx_advance(&f, &k1, QIM_COMMIT_STATE_RECORDED);
  fx_advance(&f, &k1, QIM_COMMIT_STATE_OUTBOXED);
  fx_advance(&f, &k2, QIM_COMMIT_STATE_RECORDED);
  fx_orphan(&f, b, grp, false, 1, "grp", NULL);
  fx_orphan(&f, c, grp, false, 1, "grp", NULL);
  fx_restart(&f);
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.listed, 5);
  assert_int_equal(t.adopted, 5);
  assert_int_equal(t.committed, 5);
  assert_int_equal(t.failed, 0);
  for (uint64_t i = 1; i <= 3; i++) {
    qim_commit_key k = fx_key(&f, a, i);
    qim_loaded_commit lc;
    assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
    assert_int_equal(lc.kind, QIM_LOADED_COMMIT_COMMITTED);
    assert_int_equal(lc.committed.coordinates.conversation_seq, i);
  }
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 5);
  fx_assert_outbox_ordered(&o);
  fx_outbox_free(&o);
  qim_message_record *h;
  size_t n = fx_history(&f, one, a, &h);
  assert_int_equal(n, 3);
  fx_history_free(h, n);
  n = fx_history(&f, grp, a, &h);
  assert_int_equal(n, 2);
  fx_history_free(h, n);
  /* Nothing left: a second pass finds no work. */
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.listed, 0);
  fx_close(&f);
}

static void test_recovery_leaves_young_orphans_to_their_owner_until_grace_passes(void **state) {
  (void)state;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.recovery_grace_ms = 5000;
  fx f;
  fx_open(&f, &cfg);
  qim_conversation_id conv = fx_direct(&f, a, b);
  fx_orphan(&f, a, conv, true, 1, "young", NULL);
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.listed, 1);
  assert_int_equal(t.adopted, 0);
  qim_manual_clock_advance(&f.clock, 6000);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.adopted, 1);
  assert_int_equal(t.committed, 1);
  fx_close(&f);
}

typedef struct blocker {
  qim_client_message_id cmid;
  atomic_int on;
  atomic_int hits;
} blocker;

static int block_before(hook_store *h, const char *op, qim_store_req *req) {
  blocker *bl = h->ctx;
  if (!atomic_load(&bl->on) || !hook_is_advance(op, req, QIM_COMMIT_STATE_RECORDED)) return 0;
  const qim_store_intent_advance_req *q = (const qim_store_intent_advance_req *)req;
  if (memcmp(q->key.client_message_id.b, bl->cmid.b, 16) != 0) return 0;
  atomic_fetch_add(&bl->hits, 1);
  return QIM_E_MESSAGE_STORE_UNAVAILABLE;
}

static void test_failing_orphan_is_retried_with_backoff_and_never_skipped(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, a, b);
  fx_orphan(&f, a, conv, true, 1, "first", NULL);
  fx_orphan(&f, b, conv, true, 2, "second", NULL);
  blocker bl = {.cmid = fx_cmid(1), .on = 1};
  f.hook->ctx = &bl;
  f.hook->before = block_before;
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.adopted, 2);
  assert_int_equal(t.failed, 1);
  assert_int_equal(t.blocked, 1);
  assert_int_equal(t.committed, 0);
  /* The second is recorded but waits: it never enters the outbox before the first. */
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 0);
  fx_outbox_free(&o);
  /* Backoff: 100 ms, then 200 ms (retry_base_ms = 100). */
  qim_manual_clock_advance(&f.clock, 50);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 0);
  qim_manual_clock_advance(&f.clock, 60);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 1);
  WAIT_FOR(atomic_load(&bl.hits) >= 2, 1000);
  assert_int_equal(atomic_load(&bl.hits), 2);
  qim_manual_clock_advance(&f.clock, 150);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 0);
  qim_commit_stats st;
  qim_commit_get_stats(f.commit, &st);
  assert_int_equal(st.step_failures, 2);
  assert_int_equal(st.step_retries, 1);
  atomic_store(&bl.on, 0);
  qim_manual_clock_advance(&f.clock, 100);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 1);
  qim_commit_key k1 = fx_key(&f, a, 1), k2 = fx_key(&f, b, 2);
  assert_int_equal(fx_wait_committed(&f, &k1).conversation_seq, 1);
  assert_int_equal(fx_wait_committed(&f, &k2).conversation_seq, 2);
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 2);
  assert_int_equal(o.env[0].record.coordinates.conversation_seq, 1);
  fx_outbox_free(&o);
  fx_close(&f);
}

typedef struct failall {
  atomic_int on;
} failall;

static int fail_outbox_before(hook_store *h, const char *op, qim_store_req *req) {
  failall *fa = h->ctx;
  return atomic_load(&fa->on) && hook_is_advance(op, req, QIM_COMMIT_STATE_OUTBOXED) ? -EIO : 0;
}

static void test_restart_finishes_sends_whose_steps_failed(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, a, b);
  failall fa = {.on = 1};
  f.hook->ctx = &fa;
  f.hook->before = fail_outbox_before;
  qim_commit_result r;
  for (uint64_t i = 1; i <= 4; i++) {
    qim_authenticated_send s = fx_send(&f, i % 2 ? a : b, conv, i, "pending");
    assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RECOVERABLE);
    assert_int_equal(r.error.key.client_message_id.b[15], i);
  }
  fx_restart(&f); /* a fresh hook: the store works again */
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.adopted, 4);
  assert_int_equal(t.committed, 4);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 4);
  for (size_t i = 0; i < o.n; i++) assert_int_equal(o.env[i].record.coordinates.conversation_seq, i + 1);
  fx_outbox_free(&o);
  /* The clients' retries replay the ACKs. */
  qim_authenticated_send s = fx_send(&f, b, conv, 2, "pending");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_COMMITTED);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2);
  fx_close(&f);
}

#define WINDOW_MS (UINT64_C(7) * 24 * 3600 * 1000)

static void test_committed_key_is_forgotten_after_the_dedupe_window(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  assert_int_equal(f.cfg.dedupe_window_ms, WINDOW_MS); /* the documented default: 7 days */
  qim_conversation_id conv = fx_direct(&f, a, b);
  qim_authenticated_send s = fx_send(&f, a, conv, 1, "remember me");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_commit_task t;
  qim_manual_clock_advance(&f.clock, WINDOW_MS);
  assert_int_equal(qim_commit_forget_sync(f.commit, &t), 0);
  assert_int_equal(t.forgotten, 0); /* exactly the window: still remembered */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_COMMITTED);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  qim_manual_clock_advance(&f.clock, 1);
  assert_int_equal(qim_commit_forget_sync(f.commit, &t), 0);
  assert_int_equal(t.forgotten, 1);
  qim_loaded_commit lc;
  qim_commit_key k = fx_key(&f, a, 1);
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  /* Past the window the key is new: a retry that late is another message. */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_FRESH);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2);
  qim_commit_stats st;
  qim_commit_get_stats(f.commit, &st);
  assert_int_equal(st.forgotten, 1);
  fx_close(&f);
}

static void test_maintenance_recovers_at_start_and_forgets_periodically(void **state) {
  (void)state;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.maintenance_interval_ms = 20;
  cfg.dedupe_window_ms = 60000;
  fx f;
  fx_open(&f, &cfg);
  qim_conversation_id conv = fx_direct(&f, a, b);
  fx_orphan(&f, a, conv, true, 1, "found at start", NULL);
  fx_restart(&f); /* the first maintenance pass runs at start */
  qim_commit_key k = fx_key(&f, a, 1);
  assert_int_equal(fx_wait_committed(&f, &k).conversation_seq, 1);
  fx_orphan(&f, b, conv, true, 2, "found later", NULL);
  qim_commit_key k2 = fx_key(&f, b, 2);
  qim_manual_clock_advance(&f.clock, 20);
  assert_int_equal(fx_wait_committed(&f, &k2).conversation_seq, 2);
  qim_manual_clock_advance(&f.clock, 61000);
  qim_loaded_commit lc;
  int rc = 0;
  WAIT_FOR((rc = qim_commit_load_sync(f.commit, &k, &lc)) == QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND, 5000);
  assert_int_equal(rc, QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  a = fx_user(1);
  b = fx_user(2);
  c = fx_user(3);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_recovery_drives_orphans_in_seq_order_per_conversation),
      cmocka_unit_test(test_recovery_leaves_young_orphans_to_their_owner_until_grace_passes),
      cmocka_unit_test(test_failing_orphan_is_retried_with_backoff_and_never_skipped),
      cmocka_unit_test(test_restart_finishes_sends_whose_steps_failed),
      cmocka_unit_test(test_committed_key_is_forgotten_after_the_dedupe_window),
      cmocka_unit_test(test_maintenance_recovers_at_start_and_forgets_periodically),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
