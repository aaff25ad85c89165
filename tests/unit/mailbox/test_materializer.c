/*
 * test_materializer.c — materialization on SQLite with 3 shards × 2 lanes: event groups and
 * their MailboxSeq (the record's stamped epoch and offset, equal in every lane), Mention,
 * Membership and Control entries reaching offline members, body inlining, a stalled lane that
 * hides nothing and shows everything once it resumes, durability before push, the push
 * registry, one append request per step (its watermark included), the lane errors
 * DispatchCorrupt, ProgressConflict and Unavailable, and a lane that writes on while its last
 * write awaits durability (and what it does when that write is not confirmed).
 */
#include "mb_fixture.h"

typedef struct world {
  fx_env *env;
  qim_mailbox *m;
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->env = fx_env_new("mb-mat");
  qim_mailbox_options o = fx_mb_options();
  w->m = fx_mailbox(w->env->store, &o);
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  qim_mailbox_free(w->m);
  fx_env_free(w->env);
  free(w);
  return 0;
}

static fx_msg text(uint64_t n, qim_user_id sender) {
  return (fx_msg){.n = n, .sender = sender, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
}

/* ---- event groups and seqs -------------------------------------------------------------------- */

static void test_entries_carry_the_records_seq_in_every_lane(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id a = fx_user_on(1, 0, 0), b = fx_user_on(1, 1, 0), c = fx_user_on(1, 1, 1);
  qim_user_id r[] = {a, b, c};
  fx_msg msg = text(1, a);
  msg.chunk_size = 2; /* two chunks: both lanes get entries from chunk 0 */
  qim_mailbox_seq seq = fx_send(w->env->store, &msg, 1, r, 3);
  assert_int_equal(qim_mailbox_seq_epoch(seq), 1); /* stamped by the store after the takeover */
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  for (int i = 0; i < 3; i++) {
    fx_pulled p = fx_pull_all(w->m, r[i], 0, 100);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.e[0].mailbox_seq, seq);
    assert_int_equal(p.e[0].event_id, qim_event_id_make(seq, 0));
    assert_int_equal(p.e[0].event_type, QIM_EVENT_TYPE_MESSAGE);
    assert_true(p.e[0].body_included && p.e[0].has_content);
    assert_true(qim_u128_eq(p.e[0].sender_id.v, a.v));
    /* only the sender's own mailbox gets the cmid */
    assert_int_equal(p.e[0].has_client_message_id, i == 0);
    assert_int_equal(p.covered, seq);
    assert_int_equal(p.watermark, seq);
    fx_pulled_free(&p);
  }
  qim_mailbox_lane_status st;
  assert_int_equal(qim_mailbox_lane_status_get(w->m, 1, 1, &st), 0);
  assert_int_equal(st.state, QIM_MAILBOX_LANE_RUNNING);
  assert_true(st.ready);
  assert_int_equal(st.watermark.materialized, seq);
  assert_int_equal(st.entries, 2);
  assert_int_equal(st.batches, 2); /* b in chunk 0, c in chunk 1 */
}

static void test_mentioned_recipients_get_a_mention_entry_after_the_message(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id a = fx_user_on(0, 0, 0), b = fx_user_on(0, 1, 0), c = fx_user_on(0, 0, 1);
  char payload[400];
  char nb[32], na[32];
  qim_user_id_format(b, nb, sizeof nb);
  qim_user_id_format(a, na, sizeof na);
  snprintf(payload, sizeof payload,
           "{\"txt\":\"hi @b @a\",\"fmt\":[{\"at\":3,\"len\":2,\"key\":0}],"
           "\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}},{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}},"
           "{\"tp\":\"LN\",\"data\":{\"url\":\"x\"}}]}",
           nb, na);
  fx_msg msg = text(2, a);
  msg.payload = payload;
  qim_user_id r[] = {a, b, c};
  qim_mailbox_seq seq = fx_send(w->env->store, &msg, 0, r, 3);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  fx_pulled pb = fx_pull_all(w->m, b, 0, 100);
  assert_int_equal(pb.n, 2);
  assert_int_equal(pb.e[1].event_type, QIM_EVENT_TYPE_MENTION);
  assert_int_equal(pb.e[1].event_ordinal, 1);
  assert_int_equal(pb.e[1].event_id, qim_event_id_make(seq, 1));
  assert_false(pb.e[1].has_content);
  fx_pulled pa = fx_pull_all(w->m, a, 0, 100), pc = fx_pull_all(w->m, c, 0, 100);
  assert_int_equal(pa.n, 1); /* the sender mentioning itself gets no Mention */
  assert_int_equal(pc.n, 1); /* not mentioned */
  fx_pulled_free(&pa), fx_pulled_free(&pb), fx_pulled_free(&pc);
}

static void test_membership_and_control_entries_reach_offline_members(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id owner = fx_user_on(2, 0, 0), off1 = fx_user_on(2, 1, 0), off2 = fx_user_on(2, 0, 1);
  qim_user_id r[] = {owner, off1, off2};
  fx_msg mem = {.n = 3, .sender = owner, .type = QIM_MESSAGE_TYPE_CONTROL, .custom_type = QIM_MAILBOX_MEMBERSHIP_TYPE,
                .payload = "{\"op\":\"add\",\"version\":2}", .inline_body = false};
  fx_msg ctl = {.n = 4, .sender = owner, .type = QIM_MESSAGE_TYPE_CONTROL, .custom_type = "qim.edit",
                .payload = "{\"seq\":1}", .inline_body = false};
  fx_msg big = text(5, owner);
  big.inline_body = false; /* a body kept out of mailboxes: fetched from history */
  qim_mailbox_seq s1 = fx_send(w->env->store, &mem, 2, r, 3);
  qim_mailbox_seq s2 = fx_send(w->env->store, &ctl, 2, r, 3);
  qim_mailbox_seq s3 = fx_send(w->env->store, &big, 2, r, 3);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  for (int i = 1; i < 3; i++) { /* nobody is routed: these members are offline */
    fx_pulled p = fx_pull_all(w->m, r[i], 0, 100);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.e[0].mailbox_seq, s1);
    assert_int_equal(p.e[0].event_type, QIM_EVENT_TYPE_MEMBERSHIP);
    assert_true(p.e[0].body_included); /* controls always carry their body */
    assert_memory_equal(p.e[0].content.payload_or_ciphertext.p, "{\"op\"", 5);
    assert_int_equal(p.e[1].mailbox_seq, s2);
    assert_int_equal(p.e[1].event_type, QIM_EVENT_TYPE_CONTROL);
    assert_string_equal(p.e[1].content.custom_type, "qim.edit");
    assert_int_equal(p.e[2].mailbox_seq, s3);
    assert_int_equal(p.e[2].event_type, QIM_EVENT_TYPE_MESSAGE);
    assert_false(p.e[2].body_included);
    assert_false(p.e[2].has_content);
    fx_pulled_free(&p);
  }
}

/* ---- a stalled lane ------------------------------------------------------------------------------ */

#define STALL_MSGS 6

static void test_a_stalled_lane_hides_its_users_entries_until_it_resumes(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  assert_int_equal(qim_mailbox_lane_pause(w->m, 1, 1), 0);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(w->m, 1, 1, &st);
  qim_mailbox_seq stalled_at = st.watermark.materialized; /* the takeover's fence */
  assert_int_equal(stalled_at, qim_mailbox_seq_make(1, 1));
  qim_user_id users[FX_SHARDS][FX_LANES];
  for (int s = 0; s < FX_SHARDS; s++)
    for (int l = 0; l < FX_LANES; l++) users[s][l] = fx_user_on((qim_mailbox_shard_id)s, (qim_lane_id)l, 0);
  qim_mailbox_seq seqs[FX_SHARDS][STALL_MSGS];
  for (int k = 0; k < STALL_MSGS; k++)
    for (int s = 0; s < FX_SHARDS; s++) {
      fx_msg msg = text(100 + (uint64_t)(k * FX_SHARDS + s), users[s][0]);
      seqs[s][k] = fx_send(w->env->store, &msg, (qim_mailbox_shard_id)s, users[s], FX_LANES);
    }
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  /* every other lane progressed */
  for (int s = 0; s < FX_SHARDS; s++)
    for (int l = 0; l < FX_LANES; l++) {
      if (s == 1 && l == 1) continue;
      fx_pulled p = fx_pull_all(w->m, users[s][l], 0, 100);
      assert_int_equal(p.n, STALL_MSGS);
      fx_pulled_free(&p);
    }
  /* the stalled lane's user sees nothing beyond its watermark, which stays put */
  fx_pulled p = fx_pull_all(w->m, users[1][1], 0, 100);
  assert_int_equal(p.n, 0);
  assert_int_equal(p.watermark, stalled_at);
  assert_int_equal(p.covered, stalled_at);
  fx_pulled_free(&p);
  qim_mailbox_lane_status_get(w->m, 1, 1, &st);
  assert_int_equal(st.watermark.materialized, stalled_at);
  qim_mailbox_lane_resume(w->m, 1, 1);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  p = fx_pull_all(w->m, users[1][1], 0, 1); /* one group per page */
  assert_int_equal(p.n, STALL_MSGS);
  for (int k = 0; k < STALL_MSGS; k++) assert_int_equal(p.e[k].mailbox_seq, seqs[1][k]); /* once, in order */
  assert_int_equal(p.pages, STALL_MSGS);
  fx_pulled_free(&p);
}

/* A paused lane's users pull pages that stop at its watermark, then get the rest. */
static void test_pull_stops_at_a_paused_lanes_watermark(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(0, 1, 0), v = fx_user_on(0, 0, 0);
  qim_user_id r[] = {u, v};
  fx_msg m1 = text(10, v), m2 = text(11, v);
  qim_mailbox_seq s1 = fx_send(w->env->store, &m1, 0, r, 2);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_mailbox_lane_pause(w->m, 0, 1);
  qim_mailbox_seq s2 = fx_send(w->env->store, &m2, 0, r, 2);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  fx_pulled p = fx_pull_all(w->m, u, 0, 100);
  assert_int_equal(p.n, 1);
  assert_int_equal(p.watermark, s1);
  assert_int_equal(p.covered, s1);
  fx_pulled_free(&p);
  fx_pulled pv = fx_pull_all(w->m, v, 0, 100); /* the other lane of the shard moved on */
  assert_int_equal(pv.n, 2);
  fx_pulled_free(&pv);
  qim_mailbox_lane_resume(w->m, 0, 1);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  p = fx_pull_all(w->m, u, s1, 100);
  assert_int_equal(p.n, 1);
  assert_int_equal(p.e[0].mailbox_seq, s2);
  fx_pulled_free(&p);
}

/* ---- push ---------------------------------------------------------------------------------------- */

typedef struct sink_has { fx_sink *sink; size_t want; } sink_has;
static bool sink_reached(void *ctx) {
  sink_has *h = ctx;
  return fx_sink_entries(h->sink) >= h->want;
}

static void test_no_push_is_emitted_before_the_durability_receipt(void **state) {
  world *w = *state;
  fx_sink sink = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_int_equal(qim_mailbox_push_register(w->m, 41, fx_sink_fn, &sink), 0);
  fx_acquire_all(w->m);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_user_id u = fx_user_on(0, 0, 0);
  qim_mailbox_route_add(w->m, fx_tenant(), u, 41);
  fx_msg msg = text(20, u);
  /* Paused until the gate is set: a lane polls every 5 ms and could otherwise materialize
   * the message before it, leaving the gate no commit to hold (a hang, seen under ASan). */
  qim_mailbox_pause(w->m, QIM_MAILBOX_STAGE_MATERIALIZE);
  qim_mailbox_seq seq = fx_send(w->env->store, &msg, 0, &u, 1);
  fx_gate_set(&w->env->gate, 1); /* the next durable commit waits in before_commit */
  qim_mailbox_resume(w->m, QIM_MAILBOX_STAGE_MATERIALIZE);
  fx_gate_wait_entered(&w->env->gate); /* the mailbox batch is written, not yet durable */
  fx_sleep_ms(100);
  assert_int_equal(fx_sink_entries(&sink), 0);
  fx_gate_set(&w->env->gate, 0);
  sink_has h = {&sink, 1};
  assert_true(fx_eventually(sink_reached, &h));
  assert_int_equal(sink.n, 1);
  qim_push_batch *b = sink.batches[0];
  assert_int_equal(b->connection_shard, 41);
  assert_int_equal(b->entry_count, 1);
  assert_int_equal(b->entries[0].mailbox_seq, seq);
  assert_int_equal(b->trace_id.b[15], 20); /* the dispatch's TraceId */
  assert_true(b->entries[0].body_included);
  qim_mailbox_push_unregister(w->m, 41);
  fx_sink_clear(&sink);
}

static void test_push_routes_are_counted_per_session_and_connection_shard(void **state) {
  world *w = *state;
  fx_sink s1 = {.mu = PTHREAD_MUTEX_INITIALIZER}, s2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_int_equal(qim_mailbox_push_register(w->m, 1, fx_sink_fn, &s1), 0);
  assert_int_equal(qim_mailbox_push_register(w->m, 2, fx_sink_fn, &s2), 0);
  assert_int_equal(qim_mailbox_push_register(w->m, 2, fx_sink_fn, &s2), -EEXIST);
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(2, 0, 0), v = fx_user_on(2, 0, 1), off = fx_user_on(2, 1, 0);
  qim_user_id r[] = {u, v, off};
  qim_mailbox_route_add(w->m, fx_tenant(), u, 1);
  qim_mailbox_route_add(w->m, fx_tenant(), u, 1); /* a second session on the same shard */
  qim_mailbox_route_add(w->m, fx_tenant(), u, 2);
  qim_mailbox_route_add(w->m, fx_tenant(), v, 2);
  fx_msg m1 = text(30, off);
  fx_send(w->env->store, &m1, 2, r, 3);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  assert_int_equal(s1.n, 1);
  assert_int_equal(s1.batches[0]->entry_count, 1);
  assert_true(qim_u128_eq(s1.batches[0]->entries[0].user_id.v, u.v));
  assert_int_equal(s2.n, 1); /* u and v share lane 0: one batch for the dispatch */
  assert_int_equal(s2.batches[0]->entry_count, 2);
  /* one session of u on shard 1 leaves: still routed; the second leaves: gone */
  assert_int_equal(qim_mailbox_route_remove(w->m, fx_tenant(), u, 1), 0);
  fx_msg m2 = text(31, off);
  fx_send(w->env->store, &m2, 2, r, 3);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  assert_int_equal(s1.n, 2);
  assert_int_equal(qim_mailbox_route_remove(w->m, fx_tenant(), u, 1), 0);
  assert_int_equal(qim_mailbox_route_remove(w->m, fx_tenant(), u, 1), -ENOENT);
  qim_mailbox_push_unregister(w->m, 2); /* v's and u's batches for shard 2 are dropped now */
  fx_msg m3 = text(32, off);
  fx_send(w->env->store, &m3, 2, r, 3);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  assert_int_equal(s1.n, 2);
  assert_int_equal(s2.n, 2);
  fx_pulled p = fx_pull_all(w->m, v, 0, 100); /* the mailbox has everything regardless */
  assert_int_equal(p.n, 3);
  fx_pulled_free(&p);
  qim_mailbox_push_unregister(w->m, 1);
  fx_sink_clear(&s1), fx_sink_clear(&s2);
}

static void test_paused_stages_hold_materialization_and_pushes(void **state) {
  world *w = *state;
  fx_sink sink = {.mu = PTHREAD_MUTEX_INITIALIZER};
  qim_mailbox_push_register(w->m, 5, fx_sink_fn, &sink);
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(1, 0, 0);
  qim_mailbox_route_add(w->m, fx_tenant(), u, 5);
  qim_mailbox_pause(w->m, QIM_MAILBOX_STAGE_MATERIALIZE);
  fx_msg m1 = text(40, u);
  qim_mailbox_seq s1 = fx_send(w->env->store, &m1, 1, &u, 1);
  qim_mailbox_notify(w->m, 1);
  fx_sleep_ms(100);
  fx_pulled p = fx_pull_all(w->m, u, 0, 100);
  assert_int_equal(p.n, 0);
  fx_pulled_free(&p);
  assert_int_equal(fx_sink_entries(&sink), 0);
  /* materialization resumes but pushes are held */
  qim_mailbox_pause(w->m, QIM_MAILBOX_STAGE_PUSH);
  qim_mailbox_resume(w->m, QIM_MAILBOX_STAGE_MATERIALIZE);
  qim_mailbox_lane_status st;
  do {
    fx_sleep_ms(5);
    qim_mailbox_lane_status_get(w->m, 1, 0, &st);
  } while (st.watermark.materialized < s1);
  fx_sleep_ms(50);
  assert_int_equal(fx_sink_entries(&sink), 0);
  p = fx_pull_all(w->m, u, 0, 100);
  assert_int_equal(p.n, 1);
  fx_pulled_free(&p);
  qim_mailbox_resume(w->m, QIM_MAILBOX_STAGE_PUSH);
  sink_has h = {&sink, 1};
  assert_true(fx_eventually(sink_reached, &h));
  assert_int_equal(sink.batches[0]->entries[0].mailbox_seq, s1);
  qim_mailbox_push_unregister(w->m, 5);
  fx_sink_clear(&sink);
}

/* ---- lane errors ----------------------------------------------------------------------------------- */

typedef struct lane_in { qim_mailbox *m; qim_mailbox_shard_id shard; qim_lane_id lane; int state; } lane_in;
static bool lane_reached(void *ctx) {
  lane_in *x = ctx;
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(x->m, x->shard, x->lane, &st);
  return (int)st.state == x->state;
}

/* A lane's published next_offset has reached `offset` (it is published when the write before
 * it is confirmed durable, which may come after the lane halted on the next record). */
typedef struct lane_at_in { qim_mailbox *m; qim_mailbox_shard_id shard; qim_lane_id lane; uint64_t offset; } lane_at_in;
static bool lane_at(void *ctx) {
  lane_at_in *x = ctx;
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(x->m, x->shard, x->lane, &st);
  return st.next_offset == x->offset;
}

static void expect_halted(qim_mailbox *m, qim_mailbox_shard_id shard, int error) {
  for (qim_lane_id l = 0; l < FX_LANES; l++) {
    lane_in x = {m, shard, l, QIM_MAILBOX_LANE_HALTED};
    assert_true(fx_eventually(lane_reached, &x));
    qim_mailbox_lane_status st;
    qim_mailbox_lane_status_get(m, shard, l, &st);
    assert_int_equal(st.last_error, error);
  }
}

/* Undecodable, another shard's, and a version-1 record without its sender: each halts both
 * lanes of its shard on that record (never skipped); repairing the record (redaction keeps the
 * position) and acquiring again resumes. */
static void test_a_corrupt_dispatch_halts_its_lanes_until_repaired(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id u[FX_SHARDS];
  qim_mailbox_seq bad[FX_SHARDS];
  for (qim_mailbox_shard_id s = 0; s < FX_SHARDS; s++) {
    u[s] = fx_user_on(s, 0, 0);
    fx_msg ok = text(50 + s, u[s]);
    fx_send(w->env->store, &ok, s, &u[s], 1);
    uint8_t key[16] = {0xBA, (uint8_t)s};
    fx_msg other = text(60 + s, u[s]);
    qim_group_dispatch d = fx_dispatch(&other, s, &u[s], 1);
    qim_bytes payload = {(uint8_t *)qim_strdup("not a dispatch"), 14};
    if (s == 1) { /* addressed to another shard */
      d.target_shard = 2;
      d.dispatch_id = qim_dispatch_id_make(&d.source_message.message_id, 2);
    }
    if (s == 2) d.sender_id = (qim_user_id){{0, 0}}; /* what a version-1 record decodes to */
    if (s != 0) {
      qim_bytes_free(&payload);
      assert_int_equal(qim_group_dispatch_encode(&d, &payload), 0);
    }
    bad[s] = fx_append_raw(w->env->store, s, key, &payload);
    qim_bytes_free(&payload);
    qim_group_dispatch_free(&d);
    fx_msg after = text(70 + s, u[s]);
    fx_send(w->env->store, &after, s, &u[s], 1);
    qim_mailbox_notify(w->m, s);
  }
  for (qim_mailbox_shard_id s = 0; s < FX_SHARDS; s++) {
    expect_halted(w->m, s, QIM_E_MATERIALIZE_DISPATCH_CORRUPT);
    lane_at_in at = {w->m, s, 0, qim_mailbox_seq_offset(bad[s])};
    fx_eventually(lane_at, &at);
    qim_mailbox_lane_status st;
    qim_mailbox_lane_status_get(w->m, s, 0, &st);
    assert_int_equal(st.next_offset, qim_mailbox_seq_offset(bad[s])); /* stuck on it */
    assert_int_equal(st.state, QIM_MAILBOX_LANE_HALTED);
    fx_pulled p = fx_pull_all(w->m, u[s], 0, 100);
    assert_int_equal(p.n, 1);
    fx_pulled_free(&p);
  }
  /* repair shard 0's record and take the shard again */
  fx_msg fixed = text(80, u[0]);
  qim_group_dispatch d = fx_dispatch(&fixed, 0, &u[0], 1);
  qim_store_log_redact_req rr = {0};
  rr.position = (qim_log_position){{QIM_LOG_STREAM_MAILBOX_DISPATCH, 0}, qim_mailbox_seq_offset(bad[0])};
  assert_int_equal(qim_group_dispatch_encode(&d, &rr.payload), 0);
  assert_int_equal(QIM_STORE_SYNC(w->env->store, logs.redact, &rr), 0);
  qim_bytes_free(&rr.payload);
  qim_group_dispatch_free(&d);
  assert_int_equal(qim_mailbox_shard_acquire_sync(w->m, 0, NULL), 0);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  fx_pulled p = fx_pull_all(w->m, u[0], 0, 100);
  assert_int_equal(p.n, 3);
  assert_int_equal(p.e[1].mailbox_seq, bad[0]); /* the repaired record keeps its seq */
  fx_pulled_free(&p);
}

/* The same dispatch at a second log position would give its recipients a second seq: the lane
 * stops with ProgressConflict instead. */
static void test_a_dispatch_seen_again_at_another_position_is_a_progress_conflict(void **state) {
  world *w = *state;
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(1, 0, 0), v = fx_user_on(1, 1, 0);
  qim_user_id r[] = {u, v};
  fx_msg msg = text(90, u);
  qim_group_dispatch d = fx_dispatch(&msg, 1, r, 2);
  qim_mailbox_seq first = fx_append(w->env->store, &d);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_bytes payload;
  assert_int_equal(qim_group_dispatch_encode(&d, &payload), 0);
  uint8_t other_key[16] = {0xDD};
  fx_append_raw(w->env->store, 1, other_key, &payload);
  qim_bytes_free(&payload);
  qim_group_dispatch_free(&d);
  qim_mailbox_notify(w->m, 1);
  expect_halted(w->m, 1, QIM_E_MATERIALIZE_PROGRESS_CONFLICT);
  fx_pulled p = fx_pull_all(w->m, v, 0, 100);
  assert_int_equal(p.n, 1); /* still exactly once, at the first seq */
  assert_int_equal(p.e[0].mailbox_seq, first);
  fx_pulled_free(&p);
}

/* A store that refuses writes for a while: the lane reports Unavailable, backs off, and the
 * entries land exactly once when the store is back. */
static void test_store_failures_are_retried_and_reported_unavailable(void **state) {
  world *w = *state;
  fx_wrap *wrap = fx_wrap_new(w->env->store);
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(&wrap->base, &o);
  fx_acquire_all(m);
  qim_user_id u = fx_user_on(0, 1, 0), v = fx_user_on(0, 1, 1);
  qim_user_id r[] = {u, v};
  fx_wrap_set(wrap, FX_MB_APPEND, FX_REFUSE, 1, 3);
  fx_msg msg = text(95, u);
  msg.chunk_size = 1;
  qim_mailbox_seq seq = fx_send(w->env->store, &msg, 0, r, 2);
  qim_mailbox_notify(m, 0);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(m, 0, 1, &st);
  assert_int_equal(st.last_error, QIM_E_MATERIALIZE_UNAVAILABLE);
  assert_true(st.retries >= 1);
  assert_int_equal(st.watermark.materialized, seq);
  for (int i = 0; i < 2; i++) {
    fx_pulled p = fx_pull_all(m, r[i], 0, 100);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.e[0].mailbox_seq, seq);
    fx_pulled_free(&p);
  }
  qim_mailbox_free(m);
  fx_wrap_free(wrap);
}

/* A lane that finds several dispatches writes them, and moves its watermark over them, in ONE
 * append request; a lane without recipients in them advances alone. */
static void test_a_step_writes_its_batches_and_watermark_in_one_request(void **state) {
  world *w = *state;
  fx_wrap *wrap = fx_wrap_new(w->env->store);
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(&wrap->base, &o);
  fx_acquire_all(m);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  assert_int_equal(qim_mailbox_lane_pause(m, 0, 1), 0);
  int appends = fx_wrap_calls(wrap, FX_MB_APPEND), advances = fx_wrap_calls(wrap, FX_WM_ADVANCE);
  qim_user_id u = fx_user_on(0, 1, 0), v = fx_user_on(0, 1, 1);
  qim_user_id r[] = {u, v};
  qim_mailbox_seq last = 0;
  for (uint64_t n = 0; n < 3; n++) {
    fx_msg msg = text(110 + n, u);
    last = fx_send(w->env->store, &msg, 0, r, 2);
  }
  assert_int_equal(qim_mailbox_lane_resume(m, 0, 1), 0);
  qim_mailbox_notify(m, 0);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  assert_int_equal(fx_wrap_calls(wrap, FX_MB_APPEND) - appends, 1);
  assert_true(fx_wrap_calls(wrap, FX_WM_ADVANCE) - advances >= 1); /* lane 0: nothing to write */
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(m, 0, 1, &st);
  assert_int_equal(st.watermark.materialized, last);
  assert_int_equal(st.batches, 3);
  fx_pulled p = fx_pull_all(m, v, 0, 100);
  assert_int_equal(p.n, 3);
  assert_int_equal(p.e[2].mailbox_seq, last);
  fx_pulled_free(&p);
  qim_mailbox_free(m);
  fx_wrap_free(wrap);
}

/* ---- writes in flight (flight.c) ------------------------------------------------------------------ */

static fx_gate *held_gate; /* the completions of mailbox appends wait here while it is armed */
static void hold_completion(fx_wrap *w, qim_store_req *r) {
  (void)w, (void)r;
  fx_gate_hook(held_gate);
}

typedef struct calls_at { fx_wrap *wrap; int want; } calls_at;
static bool appends_reached(void *ctx) {
  calls_at *c = ctx;
  return fx_wrap_calls(c->wrap, FX_MB_APPEND) >= c->want;
}

/* A mailbox over `wrap`, ready, with `u` routed to connection shard `cs` and its pushes in
 * `sink`; every completion of a mailbox append passes through `hook` first. */
static qim_mailbox *routed_mailbox(fx_wrap *wrap, fx_sink *sink, qim_connection_shard_id cs, qim_user_id u,
                                   void (*hook)(fx_wrap *, qim_store_req *)) {
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(&wrap->base, &o);
  assert_int_equal(qim_mailbox_push_register(m, cs, fx_sink_fn, sink), 0);
  fx_acquire_all(m);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  qim_mailbox_route_add(m, fx_tenant(), u, cs);
  pthread_mutex_lock(&wrap->mu);
  wrap->hook_op = FX_MB_APPEND;
  wrap->hook = hook;
  pthread_mutex_unlock(&wrap->mu);
  return m;
}

/* A lane's step goes on once its write has COMMITTED: the next message is written while the
 * first one's confirmation is still held back, and neither is pushed before its write is
 * confirmed; then both are pushed, in order. */
static void test_a_lane_writes_on_while_its_last_write_awaits_durability_and_pushes_in_order(void **state) {
  world *w = *state;
  fx_wrap *wrap = fx_wrap_new(w->env->store);
  fx_sink sink = {.mu = PTHREAD_MUTEX_INITIALIZER};
  qim_user_id u = fx_user_on(0, 1, 0);
  fx_gate gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  held_gate = &gate;
  fx_gate_set(&gate, 1);
  qim_mailbox *m = routed_mailbox(wrap, &sink, 43, u, hold_completion);
  int base = fx_wrap_calls(wrap, FX_MB_APPEND);
  fx_msg first = text(130, u), second = text(131, u);
  qim_mailbox_seq s1 = fx_send(w->env->store, &first, 0, &u, 1);
  qim_mailbox_notify(m, 0);
  fx_gate_wait_entered(&gate); /* the first write committed; its confirmation is held */
  qim_mailbox_seq s2 = fx_send(w->env->store, &second, 0, &u, 1);
  qim_mailbox_notify(m, 0);
  calls_at c = {wrap, base + 2};
  assert_true(fx_eventually(appends_reached, &c));
  fx_sleep_ms(50);
  assert_int_equal(fx_sink_entries(&sink), 0);
  fx_gate_set(&gate, 0);
  sink_has h = {&sink, 2};
  assert_true(fx_eventually(sink_reached, &h));
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  assert_int_equal(sink.n, 2);
  assert_int_equal(sink.batches[0]->entries[0].mailbox_seq, s1);
  assert_int_equal(sink.batches[1]->entries[0].mailbox_seq, s2);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(m, 0, 1, &st);
  assert_int_equal(st.watermark.materialized, s2);
  assert_int_equal(st.pushes, 2);
  qim_mailbox_push_unregister(m, 43);
  fx_sink_clear(&sink);
  qim_mailbox_free(m);
  fx_wrap_free(wrap);
}

static atomic_int unconfirmed_left;
static void unconfirm_completion(fx_wrap *w, qim_store_req *r) {
  (void)w;
  if (r->status == 0 && atomic_fetch_sub(&unconfirmed_left, 1) > 0)
    r->status = qim_err_raise(QIM_E_MATERIALIZE_UNAVAILABLE); /* committed, never confirmed */
}

/* A write that committed and then was not confirmed pushes nothing: the lane drops the step,
 * replays it from the stored progress (its entries stay written once), and goes on. */
static void test_a_committed_write_that_is_not_confirmed_is_replayed_and_never_pushed(void **state) {
  world *w = *state;
  fx_wrap *wrap = fx_wrap_new(w->env->store);
  fx_sink sink = {.mu = PTHREAD_MUTEX_INITIALIZER};
  qim_user_id u = fx_user_on(0, 1, 0);
  atomic_store(&unconfirmed_left, 1);
  qim_mailbox *m = routed_mailbox(wrap, &sink, 44, u, unconfirm_completion);
  fx_msg lost = text(140, u), next = text(141, u);
  qim_mailbox_seq s1 = fx_send(w->env->store, &lost, 0, &u, 1);
  qim_mailbox_notify(m, 0);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(m, 0, 1, &st);
  assert_true(st.retries >= 1);
  assert_int_equal(st.watermark.materialized, s1);
  assert_int_equal(fx_sink_entries(&sink), 0);
  qim_mailbox_seq s2 = fx_send(w->env->store, &next, 0, &u, 1);
  qim_mailbox_notify(m, 0);
  sink_has h = {&sink, 1};
  assert_true(fx_eventually(sink_reached, &h));
  assert_int_equal(sink.batches[0]->entries[0].mailbox_seq, s2);
  fx_pulled p = fx_pull_all(m, u, 0, 100);
  assert_int_equal(p.n, 2);
  assert_int_equal(p.e[0].mailbox_seq, s1);
  assert_int_equal(p.e[1].mailbox_seq, s2);
  fx_pulled_free(&p);
  qim_mailbox_push_unregister(m, 44);
  fx_sink_clear(&sink);
  qim_mailbox_free(m);
  fx_wrap_free(wrap);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_entries_carry_the_records_seq_in_every_lane, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_step_writes_its_batches_and_watermark_in_one_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mentioned_recipients_get_a_mention_entry_after_the_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_membership_and_control_entries_reach_offline_members, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_stalled_lane_hides_its_users_entries_until_it_resumes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pull_stops_at_a_paused_lanes_watermark, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_push_is_emitted_before_the_durability_receipt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_push_routes_are_counted_per_session_and_connection_shard, setup, teardown),
      cmocka_unit_test_setup_teardown(test_paused_stages_hold_materialization_and_pushes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_corrupt_dispatch_halts_its_lanes_until_repaired, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_dispatch_seen_again_at_another_position_is_a_progress_conflict, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_store_failures_are_retried_and_reported_unavailable, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_a_lane_writes_on_while_its_last_write_awaits_durability_and_pushes_in_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_committed_write_that_is_not_confirmed_is_replayed_and_never_pushed,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
