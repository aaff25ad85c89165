/*
 * test_takeover.c — shard ownership: a new owner answers LaneNotReady until each lane has
 * replayed through the takeover's fence, then Ready{replay_from}; a stale owner is fenced by
 * the store (ShardNotOwned); a lane that lags across a takeover computes the same MailboxSeq as
 * the lanes that materialized a dispatch before it; ReadinessFailed when the log was trimmed
 * past a lane's replay point.
 */
#include "mb_fixture.h"

typedef struct world {
  fx_env *env;
  qim_mailbox *nodes[4]; /* freed by teardown when a failed assertion skipped the test's own free */
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->env = fx_env_new("mb-take");
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  for (int i = 0; i < 4; i++) qim_mailbox_free(w->nodes[i]);
  fx_env_free(w->env);
  free(w);
  return 0;
}

static qim_mailbox *node(world *w, uint64_t id) {
  qim_mailbox_options o = fx_mb_options();
  o.node_id = id;
  qim_mailbox *m = fx_mailbox(w->env->store, &o);
  int i = 0;
  while (w->nodes[i]) i++;
  w->nodes[i] = m;
  return m;
}

static void drop(world *w, qim_mailbox *m) {
  for (int i = 0; i < 4; i++)
    if (w->nodes[i] == m) w->nodes[i] = NULL;
  qim_mailbox_free(m);
}

typedef struct not_ready { qim_mailbox *m; qim_mailbox_shard_id shard; qim_lane_id lane; } not_ready;
/* The shard's first lane still replaying is `lane` (the ones before it are ready). */
static bool first_not_ready_is(void *ctx) {
  not_ready *x = ctx;
  qim_shard_readiness rd;
  return qim_mailbox_shard_readiness(x->m, x->shard, &rd, NULL) == 0 &&
         rd.kind == QIM_SHARD_READINESS_LANE_NOT_READY && rd.lane == x->lane;
}

static fx_msg text(uint64_t n, qim_user_id sender) {
  return (fx_msg){.n = n, .sender = sender, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
}

typedef struct lane_in { qim_mailbox *m; qim_mailbox_shard_id shard; qim_lane_id lane; int state; } lane_in;
static bool lane_reached(void *ctx) {
  lane_in *x = ctx;
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(x->m, x->shard, x->lane, &st);
  return (int)st.state == x->state;
}

static void test_a_new_owner_answers_lane_not_ready_until_it_has_replayed(void **state) {
  world *w = *state;
  qim_user_id u = fx_user_on(0, 1, 0), v = fx_user_on(0, 0, 0);
  qim_user_id r[] = {u, v};
  fx_msg m1 = text(1, v);
  qim_mailbox_seq s1 = fx_send(w->env->store, &m1, 0, r, 2); /* before anyone owns the shard */
  assert_int_equal(qim_mailbox_seq_epoch(s1), 0);
  qim_mailbox *m = node(w, 7);
  qim_shard_readiness rd;
  qim_error err;
  assert_int_equal(qim_mailbox_shard_readiness(m, 0, &rd, &err), QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  qim_mailbox_lane_pause(m, 0, 1);
  qim_shard_takeover tk;
  assert_int_equal(qim_mailbox_shard_acquire_sync(m, 0, &tk), 0);
  assert_int_equal(tk.shard, 0);
  assert_int_equal(tk.epoch, 1);
  not_ready x = {m, 0, 1};
  assert_true(fx_eventually(first_not_ready_is, &x)); /* lane 0 replays; lane 1 is held */
  assert_int_equal(qim_mailbox_shard_wait_ready(m, 0, 50, &rd, &err), QIM_E_MATERIALIZE_LANE_NOT_READY);
  assert_int_equal(err.lane, 1);
  assert_int_equal(err.retry_after_ms, 100);
  assert_int_equal(qim_mailbox_shard_readiness(m, 0, &rd, &err), 0);
  assert_int_equal(rd.kind, QIM_SHARD_READINESS_LANE_NOT_READY);
  assert_int_equal(rd.lane, 1);
  assert_int_equal(rd.retry_after_ms, 100);
  /* the replaying lane's users are told to come back; the ready lane's are served */
  qim_mailbox_cursor c = fx_cursor(m, u, 0);
  qim_mailbox_pull_request rq = fx_pull_request(u, &c, 10, 0);
  qim_mailbox_page page;
  qim_mailbox_cursor next;
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, &err), QIM_E_MATERIALIZE_LANE_NOT_READY);
  assert_int_equal(err.lane, 1);
  assert_int_equal(err.retry_after_ms, 100);
  qim_mailbox_cursor_free(&c);
  qim_mailbox_cursor oc;
  qim_authenticated_actor ua = fx_actor(u, 1);
  assert_int_equal(qim_mailbox_cursor_open_sync(m, &ua, QIM_MAILBOX_CURSOR_FROM_NOW, &oc, &err),
                   QIM_E_MATERIALIZE_LANE_NOT_READY);
  fx_pulled pv = fx_pull_all(m, v, 0, 10);
  assert_int_equal(pv.n, 1);
  assert_int_equal(pv.e[0].mailbox_seq, s1);
  fx_pulled_free(&pv);
  qim_mailbox_lane_resume(m, 0, 1);
  assert_int_equal(qim_mailbox_shard_wait_ready(m, 0, 10000, &rd, &err), 0);
  assert_int_equal(rd.kind, QIM_SHARD_READINESS_READY);
  assert_int_equal(rd.replay_from.stream.kind, QIM_LOG_STREAM_MAILBOX_DISPATCH);
  assert_int_equal(rd.replay_from.offset, 0); /* nothing was materialized before */
  fx_pulled pu = fx_pull_all(m, u, 0, 10);
  assert_int_equal(pu.n, 1);
  assert_int_equal(pu.e[0].mailbox_seq, s1); /* the record's epoch (0), not the owner's (1) */
  fx_pulled_free(&pu);
  drop(w, m);
}

/* Node `a` owns shard 2 and has materialized one message to u (shard 2, lane 0): its seq. */
static qim_mailbox_seq own_with_one_message(world *w, qim_mailbox *a, qim_user_id u) {
  assert_int_equal(qim_mailbox_shard_acquire_sync(a, 2, NULL), 0);
  qim_shard_readiness rd;
  assert_int_equal(qim_mailbox_shard_wait_ready(a, 2, 10000, &rd, NULL), 0);
  fx_msg m1 = text(2, u);
  qim_mailbox_seq s1 = fx_send(w->env->store, &m1, 2, &u, 1);
  assert_int_equal(qim_mailbox_drain(a, 10000), 0);
  return s1;
}

static void test_a_stale_owner_is_fenced_by_the_store(void **state) {
  world *w = *state;
  qim_mailbox *a = node(w, 7), *b = node(w, 8);
  qim_shard_readiness rd;
  qim_user_id u = fx_user_on(2, 0, 0);
  qim_mailbox_seq s1 = own_with_one_message(w, a, u);
  qim_mailbox_pause(a, QIM_MAILBOX_STAGE_MATERIALIZE); /* A is slow: B takes over meanwhile */
  qim_shard_takeover tk;
  assert_int_equal(qim_mailbox_shard_acquire_sync(b, 2, &tk), 0);
  assert_int_equal(tk.epoch, 2);
  fx_msg m2 = text(3, u);
  qim_mailbox_seq s2 = fx_send(w->env->store, &m2, 2, &u, 1);
  assert_int_equal(qim_mailbox_seq_epoch(s2), 2);
  qim_mailbox_resume(a, QIM_MAILBOX_STAGE_MATERIALIZE);
  lane_in x = {a, 2, 0, QIM_MAILBOX_LANE_FENCED};
  assert_true(fx_eventually(lane_reached, &x));
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(a, 2, 0, &st);
  assert_int_equal(st.last_error, QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  qim_error err;
  assert_int_equal(qim_mailbox_shard_readiness(a, 2, &rd, &err), QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  assert_int_equal(qim_mailbox_shard_wait_ready(b, 2, 10000, &rd, NULL), 0);
  assert_int_equal(qim_mailbox_drain(b, 10000), 0);
  fx_pulled p = fx_pull_all(b, u, 0, 10);
  assert_int_equal(p.n, 2);
  assert_int_equal(p.e[0].mailbox_seq, s1);
  assert_int_equal(p.e[1].mailbox_seq, s2);
  fx_pulled_free(&p);
  /* A's pulls are served from the store now that it no longer owns the shard */
  p = fx_pull_all(a, u, 0, 10);
  assert_int_equal(p.n, 2);
  fx_pulled_free(&p);
  drop(w, a);
  drop(w, b);
}

/* The lane without recipients meets the fence first (the other is paused): the paused
 * one, never scheduled again once the shard is fenced, reports the fence too. */
static void test_a_fence_met_by_one_lane_is_reported_by_every_lane(void **state) {
  world *w = *state;
  qim_mailbox *a = node(w, 7), *b = node(w, 8);
  qim_user_id u = fx_user_on(2, 0, 0);
  own_with_one_message(w, a, u);
  assert_int_equal(qim_mailbox_lane_pause(a, 2, 0), 0);
  assert_int_equal(qim_mailbox_shard_acquire_sync(b, 2, NULL), 0);
  fx_msg m2 = text(3, u);
  fx_send(w->env->store, &m2, 2, &u, 1);
  lane_in one = {a, 2, 1, QIM_MAILBOX_LANE_FENCED};
  assert_true(fx_eventually(lane_reached, &one));
  qim_mailbox_lane_resume(a, 2, 0);
  lane_in zero = {a, 2, 0, QIM_MAILBOX_LANE_FENCED};
  assert_true(fx_eventually(lane_reached, &zero));
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(a, 2, 0, &st);
  assert_int_equal(st.last_error, QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  drop(w, a);
  drop(w, b);
}

static void test_a_lane_lagging_across_a_takeover_computes_the_same_seq(void **state) {
  world *w = *state;
  qim_mailbox *a = node(w, 7);
  assert_int_equal(qim_mailbox_shard_acquire_sync(a, 1, NULL), 0);
  qim_shard_readiness rd;
  assert_int_equal(qim_mailbox_shard_wait_ready(a, 1, 10000, &rd, NULL), 0);
  qim_mailbox_lane_pause(a, 1, 1); /* lane 1 lags */
  qim_user_id fast = fx_user_on(1, 0, 0), slow = fx_user_on(1, 1, 0);
  qim_user_id r[] = {fast, slow};
  fx_msg m1 = text(4, fast);
  m1.chunk_size = 1; /* two chunks: fast's in 0, slow's in 1 */
  qim_mailbox_seq s1 = fx_send(w->env->store, &m1, 1, r, 2);
  assert_int_equal(qim_mailbox_drain(a, 10000), 0);
  drop(w, a); /* the owner goes away with lane 1 behind */
  qim_mailbox *b = node(w, 8);
  qim_shard_takeover tk;
  assert_int_equal(qim_mailbox_shard_acquire_sync(b, 1, &tk), 0);
  assert_int_equal(tk.epoch, 2);
  fx_msg m2 = text(5, fast);
  qim_mailbox_seq s2 = fx_send(w->env->store, &m2, 1, r, 2);
  assert_int_equal(qim_mailbox_shard_wait_ready(b, 1, 10000, &rd, NULL), 0);
  /* replay starts after the lagging lane's watermark: the first takeover's fence */
  assert_int_equal(rd.replay_from.offset, 2);
  assert_int_equal(qim_mailbox_drain(b, 10000), 0);
  fx_pulled pf = fx_pull_all(b, fast, 0, 10), ps = fx_pull_all(b, slow, 0, 10);
  assert_int_equal(pf.n, 2);
  assert_int_equal(ps.n, 2);
  assert_int_equal(pf.e[0].mailbox_seq, s1);
  assert_int_equal(ps.e[0].mailbox_seq, s1); /* same seq though materialized under epoch 2 */
  assert_int_equal(qim_mailbox_seq_epoch(s1), 1);
  assert_int_equal(ps.e[1].mailbox_seq, s2);
  assert_true(s2 > s1);
  assert_int_equal(qim_mailbox_seq_epoch(s2), 2);
  fx_pulled_free(&pf), fx_pulled_free(&ps);
  drop(w, b);
}

static void test_readiness_fails_when_the_log_was_trimmed_past_replay_from(void **state) {
  world *w = *state;
  qim_mailbox *a = node(w, 7);
  assert_int_equal(qim_mailbox_shard_acquire_sync(a, 2, NULL), 0);
  qim_user_id u = fx_user_on(2, 1, 0);
  fx_msg m1 = text(6, u);
  fx_send(w->env->store, &m1, 2, &u, 1);
  assert_int_equal(qim_mailbox_drain(a, 10000), 0);
  drop(w, a);
  fx_msg m2 = text(7, u), m3 = text(8, u);
  fx_send(w->env->store, &m2, 2, &u, 1);
  qim_mailbox_seq s3 = fx_send(w->env->store, &m3, 2, &u, 1);
  /* somebody trims the log past the lanes' watermarks */
  qim_store_log_trim_req t = {0};
  t.stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, 2};
  t.below = qim_mailbox_seq_offset(s3);
  assert_int_equal(QIM_STORE_SYNC(w->env->store, logs.trim, &t), 0);
  assert_int_equal(t.out_trim, qim_mailbox_seq_offset(s3));
  qim_mailbox *b = node(w, 8);
  assert_int_equal(qim_mailbox_shard_acquire_sync(b, 2, NULL), 0);
  lane_in x = {b, 2, 1, QIM_MAILBOX_LANE_FAILED};
  assert_true(fx_eventually(lane_reached, &x));
  qim_shard_readiness rd;
  qim_error err;
  assert_int_equal(qim_mailbox_shard_readiness(b, 2, &rd, &err), QIM_E_MATERIALIZE_READINESS_FAILED);
  assert_int_equal(qim_mailbox_shard_wait_ready(b, 2, 1000, &rd, &err), QIM_E_MATERIALIZE_READINESS_FAILED);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(b, 2, 1, &st);
  assert_int_equal(st.last_error, QIM_E_MATERIALIZE_READINESS_FAILED);
  assert_false(st.ready);
  qim_mailbox_cursor c = fx_cursor(b, u, 0);
  qim_mailbox_pull_request rq = fx_pull_request(u, &c, 10, 0);
  qim_mailbox_page page;
  qim_mailbox_cursor next;
  assert_int_equal(qim_mailbox_pull_sync(b, &rq, &page, &next, &err), QIM_E_MATERIALIZE_READINESS_FAILED);
  qim_mailbox_cursor_free(&c);
  drop(w, b);
}

/* Every takeover bumps the epoch by one and leaves a fence; lanes advance over fences. */
static void test_each_takeover_appends_a_fence_with_the_next_epoch(void **state) {
  world *w = *state;
  qim_mailbox *m = node(w, 7);
  qim_shard_takeover tk;
  qim_mailbox_acquire_op op;
  for (int i = 1; i <= 3; i++) {
    assert_int_equal(qim_mailbox_shard_acquire_sync(m, 0, &tk), 0);
    assert_int_equal(tk.epoch, i);
  }
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(m, 0, 0, &st);
  assert_int_equal(st.watermark.materialized, qim_mailbox_seq_make(3, 3)); /* the third fence */
  assert_int_equal(st.owner_epoch, 3);
  memset(&op, 0, sizeof op);
  op.shard = FX_SHARDS; /* out of range */
  op.cq = (qim_cq *)1;
  op.done = (void (*)(qim_mailbox_acquire_op *))1;
  assert_int_equal(qim_mailbox_shard_acquire(m, &op), -EINVAL);
  drop(w, m);
}

static void count_done(qim_mailbox_acquire_op *op) { (*(int *)op->data)++; }

static void *free_mailbox(void *m) {
  qim_mailbox_free(m);
  return NULL;
}

/* Freeing the mailbox completes a takeover that never got a worker with -ESHUTDOWN. */
static void test_a_queued_takeover_completes_with_shutdown_when_the_mailbox_goes(void **state) {
  world *w = *state;
  qim_mailbox_options o = fx_mb_options();
  o.workers = 1;
  qim_mailbox *m = fx_mailbox(w->env->store, &o);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int done = 0;
  qim_mailbox_acquire_op a = {.cq = cq, .done = count_done, .data = &done, .shard = 0};
  qim_mailbox_acquire_op b = {.cq = cq, .done = count_done, .data = &done, .shard = 1};
  fx_gate_set(&w->env->gate, 1);
  assert_int_equal(qim_mailbox_shard_acquire(m, &a), 0);
  fx_gate_wait_entered(&w->env->gate); /* the only worker waits in a's takeover */
  assert_int_equal(qim_mailbox_shard_acquire(m, &b), 0);
  assert_int_equal(qim_mailbox_shard_acquire(m, &b), -EALREADY); /* shard 1 is being taken */
  pthread_t t;
  pthread_create(&t, NULL, free_mailbox, m);
  fx_sleep_ms(200); /* free has stopped the pool (it is joining the busy worker) */
  fx_gate_set(&w->env->gate, 0);
  pthread_join(t, NULL);
  while (done < 2) qim_cq_wait(cq, 1000);
  assert_int_equal(a.status, 0);
  assert_int_equal(a.out.epoch, 1);
  assert_int_equal(b.status, -ESHUTDOWN);
  qim_cq_free(cq);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_a_new_owner_answers_lane_not_ready_until_it_has_replayed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_stale_owner_is_fenced_by_the_store, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_fence_met_by_one_lane_is_reported_by_every_lane, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_lane_lagging_across_a_takeover_computes_the_same_seq, setup, teardown),
      cmocka_unit_test_setup_teardown(test_readiness_fails_when_the_log_was_trimmed_past_replay_from, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_each_takeover_appends_a_fence_with_the_next_epoch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_queued_takeover_completes_with_shutdown_when_the_mailbox_goes, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
