/*
 * test_fanout_run.c — the outbox consumer on a real SQLite store: exact snapshots,
 * one dispatch per shard for groups of every size, idempotent and byte-identical
 * replays, redaction, determinism violations, MembershipSnapshotUnavailable, and the
 * task's start / notify / halt / stop.
 */
#include "testsupport.h"

#include <time.h>
#include <unistd.h>

#include "fanout/fanout.h"
#include "fanout_store_fixture.h"
#include "qim/err.h"

static const qim_log_stream OUTBOX = {QIM_LOG_STREAM_OUTBOX, 0};

typedef struct env {
  char *dir;
  qim_store *s;
  qim_fanout *f;
} env;

static qim_fanout *fanout_over(qim_store *s, uint32_t chunk) {
  qim_fanout_options o = {.shards = FX_SHARDS, .chunk_size = chunk, .snapshot_page = 97, .idle_poll_ms = 5};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(s, &o, &f), 0);
  return f;
}

static int setup(void **state) {
  env *e = calloc(1, sizeof *e);
  e->dir = qim_test_tmpdir("fanout");
  e->s = fx_open(e->dir, "a");
  e->f = fanout_over(e->s, 64);
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env *e = *state;
  qim_fanout_free(e->f);
  qim_store_close(e->s);
  qim_test_rmtree(e->dir);
  free(e);
  return 0;
}

static qim_conversation_id conv_n(uint64_t n) { return (qim_conversation_id){{0xC0, n}}; }

/* Runs the consumer until the outbox is drained; returns records processed. */
static uint32_t drain(qim_fanout *f) {
  uint32_t total = 0, n;
  do {
    assert_int_equal(qim_fanout_run_once(f, 16, &n), 0);
    total += n;
  } while (n);
  return total;
}

static qim_message_id mid_of(qim_conversation_id conv, uint64_t seq) {
  qim_committed_envelope e;
  fx_envelope(&e, conv, seq);
  qim_message_id m = e.intent.coordinates.message_id;
  qim_committed_envelope_free(&e);
  return m;
}

/* ---- exact snapshots --------------------------------------------------------------------- */

static void test_groups_of_1_2_300_5000_members_each_member_in_exactly_one_dispatch(void **state) {
  env *e = *state;
  const size_t sizes[] = {1, 2, 300, 5000};
  uint64_t first = 1;
  for (size_t g = 0; g < 4; g++) {
    fx_make_group(e->s, conv_n(g), first, sizes[g]);
    fx_send(e->s, conv_n(g), 1);
    fx_send(e->s, conv_n(g), 2);
    first += sizes[g];
  }
  assert_int_equal(drain(e->f), 8);
  assert_int_equal(fx_consumer(e->s), fx_outbox_end(e->s));
  fx_dispatches x;
  fx_all_dispatches(e->s, &x);
  first = 1;
  size_t shards_used = 0;
  for (size_t g = 0; g < 4; g++) {
    for (uint64_t seq = 1; seq <= 2; seq++) {
      qim_message_id mid = mid_of(conv_n(g), seq);
      size_t nd;
      assert_int_equal(fx_count_all(&x, &mid, &nd), sizes[g]);
      for (size_t i = 0; i < sizes[g]; i++) assert_int_equal(fx_count_recipient(&x, &mid, fx_user(first + i)), 1);
      /* exactly one dispatch per shard that has members */
      unsigned seen = 0;
      for (size_t i = 0; i < sizes[g]; i++) seen |= 1u << qim_shard_of_user(&FX_SHARDS, FX_TENANT, fx_user(first + i));
      assert_int_equal(nd, (size_t)__builtin_popcount(seen));
      if (sizes[g] >= 300) assert_int_equal(nd, FX_SHARDS.shard_count); /* spans >= 3 shards */
      shards_used = nd > shards_used ? nd : shards_used;
    }
    first += sizes[g];
  }
  assert_true(shards_used >= 3);
  fx_dispatches_free(&x);
}

static void test_member_removed_after_reserve_still_receives_added_after_does_not(void **state) {
  env *e = *state;
  qim_conversation_id c = conv_n(50);
  fx_make_group(e->s, c, 100, 10); /* users 100..109 */
  fx_send(e->s, c, 1);             /* frozen: 100..109 */
  fx_change(e->s, c, QIM_STORE_MEMBER_REMOVE, 105, 1);
  fx_change(e->s, c, QIM_STORE_MEMBER_ADD, 200, 1);
  fx_send(e->s, c, 2); /* frozen: without 105, with 200 */
  drain(e->f);
  fx_dispatches x;
  fx_all_dispatches(e->s, &x);
  qim_message_id m1 = mid_of(c, 1), m2 = mid_of(c, 2);
  assert_int_equal(fx_count_recipient(&x, &m1, fx_user(105)), 1);
  assert_int_equal(fx_count_recipient(&x, &m1, fx_user(200)), 0);
  assert_int_equal(fx_count_recipient(&x, &m2, fx_user(105)), 0);
  assert_int_equal(fx_count_recipient(&x, &m2, fx_user(200)), 1);
  assert_int_equal(fx_count_all(&x, &m1, NULL), 10);
  assert_int_equal(fx_count_all(&x, &m2, NULL), 10);
  fx_dispatches_free(&x);
}

static void test_direct_audience_is_delivered_exactly_as_frozen(void **state) {
  env *e = *state;
  qim_user_id two[3] = {fx_user(7), fx_user(8), fx_user(7)};
  qim_committed_envelope m;
  fx_envelope(&m, conv_n(60), 1);
  fx_direct(&m, two, 3);
  fx_outbox_put(e->s, &m);
  drain(e->f);
  fx_dispatches x;
  fx_all_dispatches(e->s, &x);
  assert_int_equal(fx_count_recipient(&x, &m.intent.coordinates.message_id, fx_user(7)), 1);
  assert_int_equal(fx_count_recipient(&x, &m.intent.coordinates.message_id, fx_user(8)), 1);
  assert_int_equal(fx_count_all(&x, &m.intent.coordinates.message_id, NULL), 2);
  assert_int_equal(x.d[0].membership_version, 0);
  fx_dispatches_free(&x);
  qim_committed_envelope_free(&m);
}

static void test_membership_control_also_reaches_the_users_it_names(void **state) {
  env *e = *state;
  qim_conversation_id c = conv_n(70);
  fx_make_group(e->s, c, 300, 3);
  fx_change(e->s, c, QIM_STORE_MEMBER_REMOVE, 302, 1);
  qim_committed_envelope m;
  fx_envelope(&m, c, 9);
  fx_freeze(e->s, &m, c); /* 300, 301 */
  char name[QIM_TOPIC_NAME_CAP], json[128];
  qim_user_id_format(fx_user(302), name, sizeof name);
  snprintf(json, sizeof json, "{\"op\":\"remove\",\"changes\":[{\"user\":\"%s\",\"change\":\"removed\"}]}", name);
  for (int k = 0; k < 2; k++) {
    qim_message_content *ct = k ? &m.record.content : &m.intent.record.content;
    qim_bytes_free(&ct->payload_or_ciphertext);
    ct->message_type = QIM_MESSAGE_TYPE_CONTROL;
    ct->custom_type = qim_strdup(QIM_FANOUT_MEMBERSHIP_TYPE);
    ct->payload_or_ciphertext = (qim_bytes){(uint8_t *)qim_strdup(json), strlen(json)};
  }
  fx_outbox_put(e->s, &m);
  drain(e->f);
  fx_dispatches x;
  fx_all_dispatches(e->s, &x);
  assert_int_equal(fx_count_recipient(&x, &m.intent.coordinates.message_id, fx_user(302)), 1);
  assert_int_equal(fx_count_all(&x, &m.intent.coordinates.message_id, NULL), 3);
  fx_dispatches_free(&x);
  qim_committed_envelope_free(&m);
}

static void test_dispatches_carry_the_epoch_of_their_shard_at_append(void **state) {
  env *e = *state;
  qim_conversation_id c = conv_n(65);
  fx_make_group(e->s, c, 1, 300); /* every shard */
  fx_send(e->s, c, 1);
  drain(e->f);
  qim_store_shard_takeover_req t = {.shard = 2, .owner = 77};
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.shard_takeover, &t), 0);
  assert_true(t.out_epoch >= 1);
  fx_send(e->s, c, 2);
  drain(e->f);
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++) {
    fx_log l;
    fx_read(e->s, fx_dispatch_stream(sh), &l);
    size_t fences = 0, dispatches = 0;
    for (size_t i = 0; i < l.n; i++) {
      if (l.r[i].fence) {
        fences++;
        continue;
      }
      /* the first message went out before the takeover, the second after it */
      qim_shard_epoch want = sh == 2 && dispatches == 1 ? t.out_epoch : (sh == 2 ? t.out_epoch - 1 : 0);
      assert_int_equal(l.r[i].epoch, want);
      dispatches++;
    }
    assert_int_equal(dispatches, 2);
    assert_int_equal(fences, sh == 2 ? 1 : 0);
    fx_log_free(&l);
  }
}

/* ---- replays ------------------------------------------------------------------------------- */

/* The same membership history and outbox in any store. */
static void build_history(qim_store *s) {
  fx_make_group(s, conv_n(1), 1, 40);
  fx_make_group(s, conv_n(2), 1000, 700);
  for (uint64_t seq = 1; seq <= 5; seq++) {
    fx_send(s, conv_n(1), seq);
    fx_send(s, conv_n(2), seq);
    fx_change(s, conv_n(1), QIM_STORE_MEMBER_REMOVE, 1 + seq, 1);
    fx_change(s, conv_n(2), QIM_STORE_MEMBER_ADD, 5000 + seq * 10, 10);
  }
}

static void assert_logs_identical(qim_store *a, qim_store *b) {
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++) {
    fx_log la, lb;
    fx_read(a, fx_dispatch_stream(sh), &la);
    fx_read(b, fx_dispatch_stream(sh), &lb);
    assert_int_equal(la.n, lb.n);
    assert_true(la.n > 0);
    for (size_t i = 0; i < la.n; i++) {
      assert_int_equal(la.r[i].offset, lb.r[i].offset);
      assert_int_equal(la.r[i].epoch, lb.r[i].epoch);
      assert_memory_equal(la.r[i].key, lb.r[i].key, 16);
      assert_true(qim_bytes_equal(&la.r[i].payload, &lb.r[i].payload));
    }
    fx_log_free(&la);
    fx_log_free(&lb);
  }
}

static void test_two_replays_into_fresh_stores_produce_byte_identical_dispatch_logs(void **state) {
  env *e = *state;
  build_history(e->s);
  fx_log outbox;
  fx_read(e->s, OUTBOX, &outbox);
  assert_int_equal(outbox.n, 10);
  qim_store *fresh[2];
  for (int k = 0; k < 2; k++) {
    fresh[k] = fx_open(e->dir, k ? "c" : "b");
    /* the same membership history; then the very same outbox bytes */
    fx_make_group(fresh[k], conv_n(1), 1, 40);
    fx_make_group(fresh[k], conv_n(2), 1000, 700);
    for (uint64_t seq = 1; seq <= 5; seq++) {
      fx_change(fresh[k], conv_n(1), QIM_STORE_MEMBER_REMOVE, 1 + seq, 1);
      fx_change(fresh[k], conv_n(2), QIM_STORE_MEMBER_ADD, 5000 + seq * 10, 10);
    }
    for (size_t i = 0; i < outbox.n; i++) {
      qim_store_log_append a = {.stream = OUTBOX, .payload = outbox.r[i].payload};
      memcpy(a.key, outbox.r[i].key, 16);
      qim_store_log_append_req r = {.appends = &a, .append_count = 1};
      assert_int_equal(QIM_STORE_SYNC(fresh[k], logs.append, &r), 0);
    }
    qim_fanout *f = fanout_over(fresh[k], 64);
    assert_int_equal(drain(f), 10);
    qim_fanout_free(f);
  }
  drain(e->f);
  assert_logs_identical(fresh[0], fresh[1]);
  assert_logs_identical(e->s, fresh[0]);
  fx_log_free(&outbox);
  qim_store_close(fresh[0]);
  qim_store_close(fresh[1]);
}

static void test_replay_from_the_start_verifies_every_dispatch_and_appends_nothing(void **state) {
  env *e = *state;
  build_history(e->s);
  drain(e->f);
  qim_fanout_status st;
  qim_fanout_get_status(e->f, &st);
  assert_true(st.dispatches > 10);
  assert_int_equal(st.verified, 0);
  fx_dispatches before;
  fx_all_dispatches(e->s, &before);
  fx_consumer_set(e->s, 0);
  qim_fanout *again = fanout_over(e->s, 64);
  assert_int_equal(drain(again), 10);
  qim_fanout_status st2;
  qim_fanout_get_status(again, &st2);
  assert_int_equal(st2.dispatches, 0);
  assert_int_equal(st2.verified, st.dispatches);
  fx_dispatches after;
  fx_all_dispatches(e->s, &after);
  assert_int_equal(after.n, before.n);
  fx_dispatches_free(&before);
  fx_dispatches_free(&after);
  qim_fanout_free(again);
}

/* Rewrites the first dispatch record of shard `sh` through logs.redact. */
static void rewrite_dispatch(qim_store *s, uint32_t sh, bool tamper) {
  fx_log l;
  fx_read(s, fx_dispatch_stream(sh), &l);
  assert_true(l.n > 0);
  qim_bytes repl;
  if (tamper) {
    qim_group_dispatch d;
    assert_int_equal(qim_group_dispatch_decode(l.r[0].payload.p, l.r[0].payload.n, &d), 0);
    d.recipient_chunks[0].recipient_ids[0] = fx_user(99999);
    assert_int_equal(qim_group_dispatch_encode(&d, &repl), 0);
    qim_group_dispatch_free(&d);
  } else {
    assert_int_equal(qim_fanout_dispatch_redact(&l.r[0].payload, &repl), 0);
  }
  qim_store_log_redact_req r = {.position = {fx_dispatch_stream(sh), l.r[0].offset}, .payload = repl};
  assert_int_equal(QIM_STORE_SYNC(s, logs.redact, &r), 0);
  qim_free(repl.p);
  fx_log_free(&l);
}

static void test_redacted_dispatch_body_is_not_a_violation_on_replay(void **state) {
  env *e = *state;
  build_history(e->s);
  drain(e->f);
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++) rewrite_dispatch(e->s, sh, false);
  fx_consumer_set(e->s, 0);
  assert_int_equal(drain(e->f), 10);
}

static void test_tampered_dispatch_record_is_a_violation_and_the_consumer_stays_on_it(void **state) {
  env *e = *state;
  build_history(e->s);
  drain(e->f);
  rewrite_dispatch(e->s, 1, true);
  fx_consumer_set(e->s, 0);
  /* the tampered record belongs to the first outbox record that reached shard 1 */
  uint32_t n;
  int rc = qim_fanout_run_once(e->f, 16, &n);
  assert_int_equal(rc, QIM_E_FANOUT_DETERMINISM_VIOLATION);
  uint64_t stuck = fx_consumer(e->s), first = fx_outbox_first(e->s);
  assert_int_equal(n, stuck - first);
  assert_true(stuck < fx_outbox_end(e->s));
  for (int i = 0; i < 3; i++) { /* every retry stops on the same position */
    assert_int_equal(qim_fanout_run_once(e->f, 16, &n), QIM_E_FANOUT_DETERMINISM_VIOLATION);
    assert_int_equal(n, 0);
    assert_int_equal(fx_consumer(e->s), stuck);
  }
}

/* ---- snapshots that cannot be read ------------------------------------------------------------ */

static void test_snapshot_above_the_current_version_is_unavailable_and_not_skipped(void **state) {
  env *e = *state;
  qim_conversation_id c = conv_n(80);
  fx_make_group(e->s, c, 1, 5);
  fx_send(e->s, c, 1);
  qim_committed_envelope m;
  fx_envelope(&m, c, 2);
  fx_freeze(e->s, &m, c);
  m.intent.delivery.audience.group.membership_version += 5; /* a version that does not exist */
  uint64_t bad = fx_outbox_put(e->s, &m);
  qim_committed_envelope_free(&m);
  fx_send(e->s, c, 3);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(e->f, 16, &n), QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
  assert_int_equal(n, 1); /* the record before it was done */
  assert_int_equal(fx_consumer(e->s), bad);
  assert_int_equal(qim_fanout_run_once(e->f, 16, &n), QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
  assert_int_equal(n, 0);
  assert_int_equal(fx_consumer(e->s), bad);
}

static void test_undecodable_outbox_record_stops_the_consumer(void **state) {
  env *e = *state;
  qim_store_log_append a = {.stream = OUTBOX, .payload = {(uint8_t *)"junk", 4}};
  a.key[0] = 0xEE;
  qim_store_log_append_req r = {.appends = &a, .append_count = 1};
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.append, &r), 0);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(e->f, 16, &n), -EBADMSG);
  assert_int_equal(n, 0);
  assert_int_equal(fx_consumer(e->s), 0); /* never set */
}

/* ---- batching --------------------------------------------------------------------------------- */

static void test_small_call_limits_split_batches_without_losing_a_record(void **state) {
  env *e = *state;
  build_history(e->s);
  qim_fanout_options o = {.shards = FX_SHARDS, .chunk_size = 5, .max_call_appends = 3};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(e->s, &o, &f), 0);
  uint32_t n;
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 10);
  assert_int_equal(fx_consumer(e->s), fx_outbox_end(e->s));
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0); /* drained */
  assert_int_equal(n, 0);
  fx_dispatches x;
  fx_all_dispatches(e->s, &x);
  for (size_t i = 0; i < x.n; i++)
    for (size_t c = 0; c < x.d[i].chunk_count; c++) assert_true(x.d[i].recipient_chunks[c].recipient_count <= 5);
  fx_dispatches_free(&x);
  qim_fanout_free(f);
}

/* ---- retention ------------------------------------------------------------------------------- */

/* Reads the outbox at `from`: 0, or the store's error (PositionUnavailable once trimmed). */
static int outbox_read_at(qim_store *s, uint64_t from) {
  qim_store_log_read_req r = {.stream = OUTBOX, .from = from, .max = 1};
  int rc = QIM_STORE_SYNC(s, logs.read, &r);
  qim_store_log_read_free(&r);
  return rc;
}

static void test_consumed_outbox_records_are_trimmed_every_trim_every_records(void **state) {
  env *e = *state;
  fx_make_group(e->s, conv_n(80), 1, 3);
  uint64_t first = fx_send(e->s, conv_n(80), 1);
  for (uint64_t seq = 2; seq <= 10; seq++) fx_send(e->s, conv_n(80), seq);
  qim_fanout_options o = {.shards = FX_SHARDS, .trim_every = 4};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(e->s, &o, &f), 0);
  uint32_t n;
  qim_fanout_status st;
  assert_int_equal(qim_fanout_run_once(f, 3, &n), 0);
  qim_fanout_get_status(f, &st);
  assert_int_equal(st.outbox_trim, 0); /* 3 consumed: not yet */
  assert_int_equal(outbox_read_at(e->s, first), 0);
  assert_int_equal(qim_fanout_run_once(f, 3, &n), 0);
  qim_fanout_get_status(f, &st);
  assert_int_equal(st.outbox_trim, first + 6); /* below the committed offset */
  assert_int_equal(outbox_read_at(e->s, first + 5), QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  assert_int_equal(outbox_read_at(e->s, first + 6), 0);
  assert_int_equal(qim_fanout_run_once(f, 100, &n), 0);
  assert_int_equal(n, 4);
  qim_fanout_get_status(f, &st);
  assert_int_equal(st.outbox_trim, first + 10);
  assert_int_equal(fx_consumer(e->s), first + 10);
  fx_dispatches x; /* every message was dispatched before its record went */
  fx_all_dispatches(e->s, &x);
  bool seen[11] = {0};
  for (size_t i = 0; i < x.n; i++) seen[x.d[i].source_message.conversation_seq] = true;
  for (int seq = 1; seq <= 10; seq++) assert_true(seen[seq]);
  fx_dispatches_free(&x);
  qim_fanout_free(f);
}

/* ---- the task ------------------------------------------------------------------------------------ */

static void wait_status(qim_fanout *f, bool (*cond)(const qim_fanout_status *, uint64_t), uint64_t arg) {
  for (int i = 0; i < 2000; i++) {
    qim_fanout_status st;
    qim_fanout_get_status(f, &st);
    if (cond(&st, arg)) return;
    nanosleep(&(struct timespec){0, 5000000L}, NULL);
  }
  fail_msg("fanout task did not reach the expected status");
}

static bool records_at_least(const qim_fanout_status *st, uint64_t n) { return st->records >= n; }
static bool halted(const qim_fanout_status *st, uint64_t n) { (void)n; return st->halted; }

static void test_task_drains_the_outbox_as_messages_arrive_and_stops(void **state) {
  env *e = *state;
  fx_make_group(e->s, conv_n(90), 1, 20);
  assert_int_equal(qim_fanout_start(e->f), 0);
  assert_int_equal(qim_fanout_start(e->f), -EALREADY);
  for (uint64_t seq = 1; seq <= 30; seq++) {
    fx_send(e->s, conv_n(90), seq);
    qim_fanout_notify(e->f);
  }
  wait_status(e->f, records_at_least, 30);
  qim_fanout_stop(e->f);
  qim_fanout_stop(e->f); /* idempotent */
  qim_fanout_status st;
  qim_fanout_get_status(e->f, &st);
  assert_false(st.running);
  assert_false(st.halted);
  assert_int_equal(fx_consumer(e->s), fx_outbox_end(e->s));
}

static void test_task_halts_on_a_determinism_violation(void **state) {
  env *e = *state;
  build_history(e->s);
  drain(e->f);
  rewrite_dispatch(e->s, 2, true);
  fx_consumer_set(e->s, 0);
  assert_int_equal(qim_fanout_start(e->f), 0);
  wait_status(e->f, halted, 0);
  qim_fanout_status st;
  qim_fanout_get_status(e->f, &st);
  assert_int_equal(st.last_error, QIM_E_FANOUT_DETERMINISM_VIOLATION);
  assert_true(st.running);
  uint64_t stuck = fx_consumer(e->s);
  usleep(50000);
  assert_int_equal(fx_consumer(e->s), stuck);
  qim_fanout_stop(e->f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_groups_of_1_2_300_5000_members_each_member_in_exactly_one_dispatch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_member_removed_after_reserve_still_receives_added_after_does_not, setup, teardown),
      cmocka_unit_test_setup_teardown(test_direct_audience_is_delivered_exactly_as_frozen, setup, teardown),
      cmocka_unit_test_setup_teardown(test_membership_control_also_reaches_the_users_it_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dispatches_carry_the_epoch_of_their_shard_at_append, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_replays_into_fresh_stores_produce_byte_identical_dispatch_logs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_from_the_start_verifies_every_dispatch_and_appends_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_redacted_dispatch_body_is_not_a_violation_on_replay, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tampered_dispatch_record_is_a_violation_and_the_consumer_stays_on_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshot_above_the_current_version_is_unavailable_and_not_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_undecodable_outbox_record_stops_the_consumer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_call_limits_split_batches_without_losing_a_record, setup, teardown),
      cmocka_unit_test_setup_teardown(test_consumed_outbox_records_are_trimmed_every_trim_every_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_task_drains_the_outbox_as_messages_arrive_and_stops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_task_halts_on_a_determinism_violation, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
