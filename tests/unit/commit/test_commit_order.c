/*
 * test_commit_order.c — many sends at once: gap-free unique seqs, one seq per key
 * however often it is retried, reused keys refused, and the outbox in seq order per
 * conversation even when an intent nobody drives is ahead or one keeps failing.
 */
#include <stdatomic.h>

#include "commit_fixture.h"
#include "qim/err.h"

#define THREADS 8

static qim_conversation_id group_of_threads(fx *f, qim_user_id *users) {
  for (int i = 0; i < THREADS; i++) users[i] = fx_user(100 + (uint64_t)i);
  return fx_group(f, 1, users[0], users + 1, THREADS - 1);
}

static void run_senders(fx_sender *s, int n) {
  pthread_t th[THREADS];
  for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&th[i], NULL, fx_send_many, &s[i]), 0);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static void test_concurrent_senders_get_gap_free_unique_seqs(void **state) {
  (void)state;
  enum { PER = 25 };
  fx f;
  fx_open(&f, NULL);
  qim_user_id users[THREADS];
  qim_conversation_id conv = group_of_threads(&f, users);
  fx_sender s[THREADS];
  qim_commit_result res[THREADS][PER];
  for (int i = 0; i < THREADS; i++)
    s[i] = (fx_sender){&f, conv, users[i], PER, (uint64_t)i * 1000 + 1, NULL, res[i]};
  run_senders(s, THREADS);
  uint64_t seqs[THREADS * PER];
  for (int i = 0; i < THREADS; i++) {
    for (int j = 0; j < PER; j++) {
      assert_int_equal(res[i][j].status, 0);
      assert_int_equal(res[i][j].reserve, QIM_RESERVE_RESULT_FRESH);
      seqs[i * PER + j] = res[i][j].ack.coordinates.conversation_seq;
    }
  }
  qsort(seqs, THREADS * PER, sizeof seqs[0], fx_cmp_u64);
  for (int i = 0; i < THREADS * PER; i++) assert_int_equal(seqs[i], (uint64_t)i + 1);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, THREADS * PER);
  for (size_t i = 0; i < o.n; i++) assert_int_equal(o.env[i].record.coordinates.conversation_seq, i + 1);
  fx_outbox_free(&o);
  qim_message_record *h;
  size_t n = fx_history(&f, conv, users[0], &h);
  assert_int_equal(n, THREADS * PER);
  fx_history_free(h, n);
  fx_close(&f);
}

static void test_many_retries_of_one_key_get_one_seq(void **state) {
  (void)state;
  enum { PER = 10 };
  fx f;
  fx_open(&f, NULL);
  qim_user_id users[THREADS];
  qim_conversation_id conv = group_of_threads(&f, users);
  /* Something before it, so the seq is not trivially 1. */
  qim_authenticated_send first = fx_send(&f, users[1], conv, 1, "first");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &first, &r), 0);
  fx_sender s[THREADS];
  qim_commit_result res[THREADS][PER];
  for (int i = 0; i < THREADS; i++) s[i] = (fx_sender){&f, conv, users[0], PER, 42, "same text", res[i]};
  run_senders(s, THREADS);
  int fresh = 0;
  for (int i = 0; i < THREADS; i++) {
    for (int j = 0; j < PER; j++) {
      assert_int_equal(res[i][j].status, 0);
      assert_int_equal(res[i][j].ack.coordinates.conversation_seq, 2);
      assert_memory_equal(&res[i][j].ack, &res[0][0].ack, sizeof res[0][0].ack);
      fresh += res[i][j].reserve == QIM_RESERVE_RESULT_FRESH;
    }
  }
  assert_int_equal(fresh, 1);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 2);
  fx_outbox_free(&o);
  qim_message_record *h;
  size_t n = fx_history(&f, conv, users[0], &h);
  assert_int_equal(n, 2);
  fx_history_free(h, n);
  fx_close(&f);
}

static void test_concurrent_reuse_with_other_content_is_refused(void **state) {
  (void)state;
  enum { PER = 5 };
  fx f;
  fx_open(&f, NULL);
  qim_user_id users[THREADS];
  qim_conversation_id conv = group_of_threads(&f, users);
  fx_sender s[THREADS];
  qim_commit_result res[THREADS][PER];
  for (int i = 0; i < THREADS; i++)
    s[i] = (fx_sender){&f, conv, users[0], PER, 7, i % 2 ? "version B" : "version A", res[i]};
  run_senders(s, THREADS);
  /* One version wins the key; every send of the other is refused, never mapped to it. */
  int winner = res[0][0].status == 0 ? 0 : 1;
  for (int i = 0; i < THREADS; i++) {
    for (int j = 0; j < PER; j++) {
      if (i % 2 == winner) {
        assert_int_equal(res[i][j].status, 0);
        assert_int_equal(res[i][j].ack.coordinates.conversation_seq, 1);
      } else {
        assert_int_equal(res[i][j].status, QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
      }
    }
  }
  fx_close(&f);
}

/* ---- many sends in flight on one caller queue ------------------------------------------------------- */

typedef struct batch {
  atomic_int done;
} batch;

static void batch_done(qim_commit_op *op) { atomic_fetch_add(&((batch *)op->data)->done, 1); }

static void test_pipelined_sends_keep_outbox_in_seq_order(void **state) {
  (void)state;
  enum { N = 200 };
  fx f;
  fx_open(&f, NULL);
  qim_user_id users[THREADS];
  qim_conversation_id conv = group_of_threads(&f, users);
  qim_conversation_id dm = fx_direct(&f, users[0], users[1]);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  batch b = {0};
  static qim_commit_op ops[N];
  static qim_authenticated_send sends[N];
  static char texts[N][16];
  for (int i = 0; i < N; i++) {
    snprintf(texts[i], sizeof texts[i], "p%d", i);
    bool in_dm = i % 3 == 0;
    sends[i] = fx_send(&f, users[in_dm ? i % 2 : i % 4], in_dm ? dm : conv, (uint64_t)i + 1, texts[i]);
    ops[i] = (qim_commit_op){.cq = cq, .done = batch_done, .data = &b};
    assert_int_equal(qim_commit_send(f.commit, &sends[i], &ops[i]), 0);
  }
  while (atomic_load(&b.done) < N) qim_cq_wait(cq, 1000);
  for (int i = 0; i < N; i++) assert_int_equal(ops[i].result.status, 0);
  qim_cq_free(cq);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, N);
  fx_assert_outbox_ordered(&o);
  fx_outbox_free(&o);
  fx_close(&f);
}

/* ---- intents this process does not drive ----------------------------------------------------------------- */

static void test_orphan_ahead_is_drained_before_a_later_send(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id a = fx_user(1), b = fx_user(2);
  qim_conversation_id conv = fx_direct(&f, a, b);
  assert_int_equal(fx_orphan(&f, a, conv, true, 1, "left behind", NULL), 1);
  qim_authenticated_send s = fx_send(&f, b, conv, 2, "after it");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2);
  qim_commit_key k = fx_key(&f, a, 1);
  qim_message_coordinates c1 = fx_wait_committed(&f, &k);
  assert_int_equal(c1.conversation_seq, 1);
  qim_commit_stats st;
  qim_commit_get_stats(f.commit, &st);
  assert_true(st.order_conflicts >= 1);
  assert_true(st.drains >= 1);
  assert_int_equal(st.adopted, 1);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 2);
  assert_int_equal(o.env[0].record.coordinates.conversation_seq, 1);
  assert_int_equal(o.env[1].record.coordinates.conversation_seq, 2);
  fx_outbox_free(&o);
  fx_close(&f);
}

static void test_retry_of_an_orphan_resumes_it_as_existing(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id a = fx_user(1), b = fx_user(2);
  qim_conversation_id conv = fx_direct(&f, a, b);
  assert_int_equal(fx_orphan(&f, a, conv, true, 5, "retry me", NULL), 1);
  qim_commit_key k = fx_key(&f, a, 5);
  fx_advance(&f, &k, QIM_COMMIT_STATE_RECORDED);
  qim_authenticated_send s = fx_send(&f, a, conv, 5, "retry me");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_EXISTING);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  /* A retry with other content is still a reuse. */
  qim_authenticated_send other = fx_send(&f, a, conv, 5, "something else");
  assert_int_equal(qim_commit_send_sync(f.commit, &other, &r), QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
  fx_close(&f);
}

typedef struct blocker {
  qim_client_message_id cmid;
  atomic_int on;
} blocker;

/* Fails every RECORDED step of one key while `on`. */
static int block_before(hook_store *h, const char *op, qim_store_req *req) {
  blocker *b = h->ctx;
  if (!atomic_load(&b->on) || !hook_is_advance(op, req, QIM_COMMIT_STATE_RECORDED)) return 0;
  const qim_store_intent_advance_req *a = (const qim_store_intent_advance_req *)req;
  return memcmp(a->key.client_message_id.b, b->cmid.b, 16) == 0 ? -EIO : 0;
}

static void test_failing_intent_holds_back_only_its_conversation(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_user_id a = fx_user(1), b = fx_user(2), c = fx_user(3);
  qim_conversation_id conv = fx_direct(&f, a, b), other = fx_direct(&f, a, c);
  blocker bl = {.cmid = fx_cmid(1), .on = 1};
  f.hook->ctx = &bl;
  f.hook->before = block_before;
  qim_authenticated_send s1 = fx_send(&f, a, conv, 1, "stuck");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s1, &r), QIM_E_COMMIT_RECOVERABLE);
  /* The next message of the conversation waits behind it (never skipped); its sender
   * is told Recoverable rather than held for as long as the first keeps failing. */
  qim_authenticated_send s2 = fx_send(&f, b, conv, 2, "behind");
  assert_int_equal(qim_commit_send_sync(f.commit, &s2, &r), QIM_E_COMMIT_RECOVERABLE);
  qim_commit_key k2 = fx_key(&f, b, 2);
  assert_true(fx_key_equal(&r.error.key, &k2));
  /* Another conversation is not held back. */
  qim_authenticated_send s3 = fx_send(&f, a, other, 3, "elsewhere");
  assert_int_equal(qim_commit_send_sync(f.commit, &s3, &r), 0);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  fx_outbox_free(&o);
  /* Still failing: recovery retries it with backoff, counts and logs it. */
  qim_manual_clock_advance(&f.clock, 1000);
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 1);
  qim_commit_stats st;
  WAIT_FOR((qim_commit_get_stats(f.commit, &st), st.step_failures >= 2), 1000);
  assert_int_equal(st.step_failures, 2);
  /* The store recovers: both commit, in order; the retry of the second gets its ACK. */
  atomic_store(&bl.on, 0);
  qim_manual_clock_advance(&f.clock, 1000);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  qim_commit_key k1 = fx_key(&f, a, 1);
  assert_int_equal(fx_wait_committed(&f, &k1).conversation_seq, 1);
  assert_int_equal(qim_commit_send_sync(f.commit, &s2, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2);
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 3);
  fx_assert_outbox_ordered(&o);
  fx_outbox_free(&o);
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concurrent_senders_get_gap_free_unique_seqs),
      cmocka_unit_test(test_many_retries_of_one_key_get_one_seq),
      cmocka_unit_test(test_concurrent_reuse_with_other_content_is_refused),
      cmocka_unit_test(test_pipelined_sends_keep_outbox_in_seq_order),
      cmocka_unit_test(test_orphan_ahead_is_drained_before_a_later_send),
      cmocka_unit_test(test_retry_of_an_orphan_resumes_it_as_existing),
      cmocka_unit_test(test_failing_intent_holds_back_only_its_conversation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
