/*
 * test_materializer.c — materialization on SQLite with 3 shards × 2 lanes: event groups and
 * their MailboxSeq (the record's stamped epoch and offset, equal in every lane), Mention,
 * Membership and Control entries reaching offline members, body inlining, a stalled lane that
 * hides nothing and shows everything once it resumes, durability before push, the push
 * registry, and the lane errors DispatchCorrupt, ProgressConflict and Unavailable.
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_entries_carry_the_records_seq_in_every_lane, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mentioned_recipients_get_a_mention_entry_after_the_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_membership_and_control_entries_reach_offline_members, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_stalled_lane_hides_its_users_entries_until_it_resumes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pull_stops_at_a_paused_lanes_watermark, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
