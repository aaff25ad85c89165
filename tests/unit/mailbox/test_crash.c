/*
 * test_crash.c — replay after a crash at every boundary of materialization, injected at the
 * storage interface (a forwarding wrapper store), so each step is replayed even where SQLite
 * would merge steps into one transaction:
 *   - after the k-th AppendMailboxBatch reached the store (its owner never saw the receipt),
 *     for every k — which includes after a batch and before the watermark advance, and in the
 *     middle of a multi-chunk dispatch;
 *   - before the k-th batch; after and before each watermark advance;
 *   - during a takeover (the fence is written, the owner dies), and a second crash during the
 *     next owner's replay.
 * Afterwards a fresh owner takes the shard over; every recipient must end with each event
 * exactly once, with the seq of the record (so the same seq every entry written before the
 * crash already had), Mention entries included.
 */
#include "mb_fixture.h"

#define USERS 6
#define MSGS 3

typedef struct workload {
  qim_user_id users[USERS];  /* alternating lanes 0 / 1 of shard 0 */
  qim_mailbox_seq seq[MSGS];
  bool mentioned[USERS];
} workload;

/* Three dispatches into shard 0: 3 chunks, 1 chunk, and 2 chunks with mentions. */
static void write_log(qim_store *s, workload *wl) {
  for (int i = 0; i < USERS; i++) wl->users[i] = fx_user_on(0, (qim_lane_id)(i % 2), (uint64_t)(i / 2));
  fx_msg m1 = {.n = 1, .sender = wl->users[0], .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true, .chunk_size = 2};
  fx_msg m2 = {.n = 2, .sender = wl->users[1], .type = QIM_MESSAGE_TYPE_CONTROL, .custom_type = "qim.recall",
               .payload = "{\"seq\":1}"};
  char payload[300], n3[32], n4[32];
  qim_user_id_format(wl->users[3], n3, sizeof n3);
  qim_user_id_format(wl->users[4], n4, sizeof n4);
  snprintf(payload, sizeof payload, "{\"txt\":\"@x @y\",\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}},"
           "{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}}]}", n3, n4);
  fx_msg m3 = {.n = 3, .sender = wl->users[2], .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true,
               .chunk_size = 4, .payload = payload};
  wl->seq[0] = fx_send(s, &m1, 0, wl->users, USERS);
  wl->seq[1] = fx_send(s, &m2, 0, wl->users, USERS);
  wl->seq[2] = fx_send(s, &m3, 0, wl->users, USERS);
  wl->mentioned[3] = wl->mentioned[4] = true;
}

/* Every entry the store holds for a user, whatever the watermark. */
static qim_store_mailbox_range_req raw_entries(qim_store *s, qim_user_id u) {
  qim_store_mailbox_range_req r = {0};
  r.query = (qim_mailbox_range_query){fx_tenant(), u, 0, INT64_MAX, 1000, 0};
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.range, &r), 0);
  return r;
}

static void raw_free(qim_store_mailbox_range_req *r) {
  for (size_t i = 0; i < r->out_count; i++) qim_mailbox_entry_free(&r->out_entries[i]);
  qim_free(r->out_entries);
}

/* Each event exactly once, at its record's seq; and what was there before is unchanged. */
static void check_mailboxes(qim_store *s, qim_mailbox *m, const workload *wl, qim_store_mailbox_range_req *before) {
  for (int i = 0; i < USERS; i++) {
    qim_store_mailbox_range_req r = raw_entries(s, wl->users[i]);
    size_t want = MSGS + wl->mentioned[i];
    assert_int_equal(r.out_count, want);
    size_t k = 0;
    for (int d = 0; d < MSGS; d++) {
      assert_int_equal(r.out_entries[k].mailbox_seq, wl->seq[d]);
      assert_int_equal(r.out_entries[k].event_ordinal, 0);
      k++;
      if (d == 2 && wl->mentioned[i]) {
        assert_int_equal(r.out_entries[k].mailbox_seq, wl->seq[d]);
        assert_int_equal(r.out_entries[k].event_type, QIM_EVENT_TYPE_MENTION);
        k++;
      }
    }
    for (size_t b = 0; before && b < before[i].out_count; b++) {
      bool found = false;
      for (size_t a = 0; a < r.out_count; a++) found |= qim_mailbox_entry_equal(&before[i].out_entries[b], &r.out_entries[a]);
      assert_true(found);
    }
    raw_free(&r);
    fx_pulled p = fx_pull_all(m, wl->users[i], 0, 100); /* and the watermark covers them */
    assert_int_equal(p.n, want);
    fx_pulled_free(&p);
  }
}

/* Runs an owner over `wrap` until it "dies" (or finishes), then frees it. */
static void run_until_crash(fx_wrap *wrap, uint64_t node) {
  qim_mailbox_options o = fx_mb_options();
  o.node_id = node;
  qim_mailbox *m = fx_mailbox(&wrap->base, &o);
  qim_mailbox_shard_acquire_sync(m, 0, NULL); /* fails when the crash hits the takeover */
  for (int i = 0; i < 400 && !fx_wrap_dead(wrap); i++)
    if (qim_mailbox_drain(m, 25) == 0) break;
  qim_mailbox_free(m);
}

/* A fresh owner recovers the shard; returns it (caller frees). */
static qim_mailbox *recover(qim_store *s) {
  qim_mailbox_options o = fx_mb_options();
  o.node_id = 99;
  qim_mailbox *m = fx_mailbox(s, &o);
  assert_int_equal(qim_mailbox_shard_acquire_sync(m, 0, NULL), 0);
  qim_shard_readiness rd;
  assert_int_equal(qim_mailbox_shard_wait_ready(m, 0, 10000, &rd, NULL), 0);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  return m;
}

/* One crash case: `action` on the nth call of `op`, then (optionally) a second crash at the
 * second owner's first batch, then recovery and the checks. */
static int crash_case(fx_op op, fx_action action, int nth, bool second_crash) {
  fx_env *env = fx_env_new("mb-crash");
  workload wl = {0};
  write_log(env->store, &wl);
  fx_wrap *wrap = fx_wrap_new(env->store);
  fx_wrap_set(wrap, op, action, nth, 1);
  run_until_crash(wrap, 7);
  int appends = fx_wrap_calls(wrap, FX_MB_APPEND);
  qim_store_mailbox_range_req before[USERS];
  for (int i = 0; i < USERS; i++) before[i] = raw_entries(env->store, wl.users[i]);
  if (second_crash) {
    fx_wrap *again = fx_wrap_new(env->store);
    fx_wrap_set(again, FX_MB_APPEND, FX_CRASH_AFTER, 1, 1);
    run_until_crash(again, 8);
    fx_wrap_free(again);
  }
  qim_mailbox *m = recover(env->store);
  check_mailboxes(env->store, m, &wl, before);
  for (int i = 0; i < USERS; i++) raw_free(&before[i]);
  qim_mailbox_free(m);
  fx_wrap_free(wrap);
  fx_env_free(env);
  return appends;
}

/* 6 batches per lane (3 + 1 + 2 chunks) in 3 waves, one append request per wave (the last
 * one also advances the watermark) → 6 appends; 7 never triggers (the baseline). */
static void test_crash_after_every_batch_replays_to_exactly_once(void **state) {
  (void)state;
  for (int nth = 1; nth <= 6; nth++) crash_case(FX_MB_APPEND, FX_CRASH_AFTER, nth, false);
  assert_int_equal(crash_case(FX_MB_APPEND, FX_CRASH_AFTER, 7, false),
                   6); /* no crash: 6 requests */
}

static void test_crash_before_every_batch_replays_to_exactly_once(void **state) {
  (void)state;
  for (int nth = 1; nth <= 6; nth++) crash_case(FX_MB_APPEND, FX_CRASH_BEFORE, nth, false);
}

static void test_crash_around_every_watermark_advance_replays_to_exactly_once(void **state) {
  (void)state;
  for (int nth = 1; nth <= 3; nth++) {
    crash_case(FX_WM_ADVANCE, FX_CRASH_AFTER, nth, false);
    crash_case(FX_WM_ADVANCE, FX_CRASH_BEFORE, nth, false);
  }
}

static void test_crash_during_takeover_and_again_during_replay(void **state) {
  (void)state;
  crash_case(FX_SHARD_TAKEOVER, FX_CRASH_AFTER, 1, false);
  crash_case(FX_SHARD_TAKEOVER, FX_CRASH_BEFORE, 1, false);
  crash_case(FX_WM_GET, FX_CRASH_BEFORE, 1, true); /* between the fence and the lanes' start */
  for (int nth = 1; nth <= 6; nth += 2) crash_case(FX_MB_APPEND, FX_CRASH_AFTER, nth, true);
}

/* A failing progress read during replay is retried; nothing is written twice. */
static void test_failed_progress_reads_during_replay_are_retried(void **state) {
  (void)state;
  fx_env *env = fx_env_new("mb-crash");
  workload wl = {0};
  write_log(env->store, &wl);
  fx_wrap *first = fx_wrap_new(env->store);
  fx_wrap_set(first, FX_MB_APPEND, FX_CRASH_AFTER, 2, 1);
  run_until_crash(first, 7);
  fx_wrap *flaky = fx_wrap_new(env->store);
  fx_wrap_set(flaky, FX_PROGRESS_GET, FX_REFUSE, 1, 2);
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(&flaky->base, &o);
  assert_int_equal(qim_mailbox_shard_acquire_sync(m, 0, NULL), 0);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  assert_true(fx_wrap_calls(flaky, FX_PROGRESS_GET) > 2);
  check_mailboxes(env->store, m, &wl, NULL);
  qim_mailbox_free(m);
  fx_wrap_free(flaky);
  fx_wrap_free(first);
  fx_env_free(env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crash_after_every_batch_replays_to_exactly_once),
      cmocka_unit_test(test_crash_before_every_batch_replays_to_exactly_once),
      cmocka_unit_test(test_crash_around_every_watermark_advance_replays_to_exactly_once),
      cmocka_unit_test(test_crash_during_takeover_and_again_during_replay),
      cmocka_unit_test(test_failed_progress_reads_during_replay_are_retried),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
