/*
 * test_history_delete.c — {del what:"msg"}: the per-message judgement of DESIGN.md §3
 * (table-driven over role × sender × age × hard), range validation (table-driven), mixed
 * hard ranges, ComplianceHold, clipping to the window, access, `get del`, delid and clear
 * bookkeeping, and the Control message of each delete.
 */
#include "history_fixture.h"
#include "testsupport.h"

#define OWNER 1
#define ADMIN 2
#define MEMBER 3
#define OTHER 4

static int setup(void **state) {
  hx *x = calloc(1, sizeof *x);
  qim_history_config cfg;
  hx_config(&cfg);
  cfg.del_max_messages = 10;
  cfg.max_ranges = 4;
  hx_open(x, "hdelete", &cfg);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  hx_close(*state);
  free(*state);
  return 0;
}

/* Group g: OWNER, ADMIN (JRWPASD), MEMBER and OTHER (JRWPS). */
static void make_group(hx *x, uint64_t g) {
  hx_group_create(x, g, OWNER, MEMBER, 2);
  hx_group_add(x, g, OWNER, ADMIN, QIM_GROUP_ROLE_ADMIN);
}

static int del(hx *x, uint64_t g, uint64_t actor, bool hard, const qim_store_seq_range *r, size_t n,
               qim_history_delete_result *out) {
  qim_history_delete_req d = {.actor = hx_actor(actor),
                              .conversation_id = hx_conv(g),
                              .ranges = r,
                              .range_count = n,
                              .hard = hard,
                              .trace_id = qim_trace_id_new()};
  return qim_history_delete(x->history, &d, out);
}

static bool sees(hx *x, uint64_t g, uint64_t user, qim_conversation_seq seq) {
  char got[256];
  qim_history_get q = {.ranges = (qim_store_seq_range[]){{seq, 0}}, .range_count = 1};
  assert_int_equal(hx_get(x, g, user, &q, got, sizeof got, NULL), 0);
  return got[0] != '\0';
}

/* ---- the judgement -------------------------------------------------------------------------- */

enum outcome { HIDDEN, DELETED, RECALLED };

typedef struct rule_case {
  const char *name;
  uint64_t actor, sender;
  bool old, hard;
  enum outcome want;
} rule_case;

static const rule_case RULES[] = {
    {"a member soft-deletes another's message", MEMBER, OTHER, false, false, HIDDEN},
    {"a member without D asking hard gets a soft delete", MEMBER, OTHER, false, true, HIDDEN},
    {"the sender recalls its young message without D", MEMBER, MEMBER, false, true, RECALLED},
    {"the sender cannot recall an old message: soft", MEMBER, MEMBER, true, true, HIDDEN},
    {"a sender asking soft only hides", MEMBER, MEMBER, false, false, HIDDEN},
    {"a holder of D deletes a young message of another", ADMIN, OTHER, false, true, DELETED},
    {"a holder of D cannot delete an old message: soft", ADMIN, OTHER, true, true, HIDDEN},
    {"a holder of D recalls its own young message", ADMIN, ADMIN, false, true, RECALLED},
    {"the owner deletes an old message of another", OWNER, OTHER, true, true, DELETED},
    {"the owner deletes its own old message", OWNER, OWNER, true, true, DELETED},
    {"the owner recalls its own young message", OWNER, OWNER, false, true, RECALLED},
    {"the owner asking soft only hides", OWNER, OTHER, true, false, HIDDEN},
};

static void check_hidden(hx *x, uint64_t g, const rule_case *c, qim_conversation_seq seq,
                         const qim_history_delete_result *r) {
  assert_int_equal(hx_state(x, g, seq), QIM_MESSAGE_STATE_NORMAL);
  assert_false(sees(x, g, c->actor, seq));
  assert_true(sees(x, g, c->actor == OTHER ? MEMBER : OTHER, seq));
  assert_int_equal(r->soft_count, 1);
  assert_int_equal(r->hard_count, 0);
  assert_int_equal(r->hidden, 1);
  assert_int_equal(r->delid, r->soft_delid);
  qim_store_member m = hx_member(x, g, c->actor);
  assert_int_equal(m.clear_delid, r->soft_delid);
  qim_store_member_free(&m);
  qim_committed_envelope env = {0};
  json_t *j = hx_last_control(x, &env);
  assert_string_equal(hx_str(j, "op"), "del");
  assert_true(json_is_false(json_object_get(j, "hard")));
  assert_int_equal(hx_int(j, "delid"), (json_int_t)r->soft_delid);
  assert_int_equal(env.intent.delivery.audience.kind, QIM_DELIVERY_AUDIENCE_DIRECT);
  assert_int_equal(env.intent.delivery.audience.direct.recipient_count, 1);
  assert_true(
      qim_u128_eq(env.intent.delivery.audience.direct.recipients[0].v, hx_user(c->actor).v));
  qim_committed_envelope_free(&env);
  json_decref(j);
}

static void check_gone(hx *x, uint64_t g, const rule_case *c, qim_conversation_seq seq,
                       const qim_history_delete_result *r) {
  qim_message_state want =
      c->want == RECALLED ? QIM_MESSAGE_STATE_RECALLED : QIM_MESSAGE_STATE_DELETED;
  qim_message_record rec = hx_record(x, g, seq);
  assert_int_equal(rec.state, want);
  assert_int_equal(rec.content.payload_or_ciphertext.n, 0);
  qim_message_record_free(&rec);
  for (uint64_t u = OWNER; u <= OTHER; u++) assert_false(sees(x, g, u, seq));
  assert_int_equal(r->hard_count, 1);
  assert_int_equal(r->soft_count, 0);
  assert_int_equal(c->want == RECALLED ? r->recalled : r->deleted, 1);
  assert_int_equal(r->delid, r->hard_delid);
  qim_committed_envelope env = {0};
  json_t *j = hx_last_control(x, &env);
  assert_string_equal(hx_str(j, "op"), "del");
  assert_true(json_is_true(json_object_get(j, "hard")));
  assert_string_equal(hx_str(j, "actor"), hx_name(c->actor));
  json_t *list = json_object_get(j, c->want == RECALLED ? "recalled" : "deleted");
  assert_int_equal(json_array_size(list), 1);
  assert_int_equal(hx_int(json_array_get(list, 0), "low"), (json_int_t)seq);
  assert_null(json_object_get(json_array_get(list, 0), "hi"));
  assert_int_equal(env.intent.delivery.audience.kind, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  qim_committed_envelope_free(&env);
  json_decref(j);
  /* get del tells every member, including one who did nothing */
  qim_history_del_query q = {.actor = hx_actor(OTHER), .conversation_id = hx_conv(g)};
  qim_history_del_page p;
  assert_int_equal(qim_history_get_del(x->history, &q, &p), 0);
  assert_int_equal(p.range_count, 1);
  assert_int_equal(p.ranges[0].low, seq);
  assert_int_equal(p.clear, r->hard_delid);
  qim_history_del_page_free(&p);
}

static void test_every_delete_rule(void **state) {
  hx *x = *state;
  for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
    const rule_case *c = &RULES[i];
    uint64_t g = 100 + i;
    make_group(x, g);
    qim_conversation_seq seq = hx_pub(x, g, c->sender, "to be deleted");
    if (c->old) qim_manual_clock_advance(&x->clock, x->cfg.msg_delete_age_ms + 1);
    qim_store_conversation before = hx_conversation(x, g);
    qim_history_delete_result r;
    qim_store_seq_range one = {seq, 0};
    int rc = del(x, g, c->actor, c->hard, &one, 1, &r);
    if (rc) fail_msg("case '%s': rc %d", c->name, rc);
    assert_int_equal(r.delid, before.delid + 1);
    print_message("case: %s\n", c->name);
    if (c->want == HIDDEN)
      check_hidden(x, g, c, seq, &r);
    else
      check_gone(x, g, c, seq, &r);
    assert_int_equal(r.control_status, 0);
    qim_store_conversation_free(&before);
    qim_history_delete_result_free(&r);
  }
}

/* ---- validation
 * ---------------------------------------------------------------------------------- */

typedef struct range_case {
  const char *name;
  qim_store_seq_range r[5];
  size_t n;
  int rc;
  qim_conversation_seq first_low, last_hi; /* the soft ranges written, when rc == 0 */
} range_case;

static const range_case RANGES[] = {
    {"low 0", {{0, 3}}, 1, QIM_E_MESSAGE_STORE_INVALID_RANGE, 0, 0},
    {"low above the latest", {{41, 0}}, 1, QIM_E_MESSAGE_STORE_INVALID_RANGE, 0, 0},
    {"hi below low", {{5, 3}}, 1, QIM_E_MESSAGE_STORE_INVALID_RANGE, 0, 0},
    {"hi past the latest is clipped to latest + 1", {{38, 1000}}, 1, 0, 38, 41},
    {"hi equal to low is one message", {{7, 7}}, 1, 0, 7, 8},
    {"more than the maximum over several ranges",
     {{1, 7}, {10, 16}},
     2,
     QIM_E_MESSAGE_STORE_INVALID_RANGE,
     0,
     0},
    {"exactly the maximum over several ranges", {{1, 6}, {10, 15}}, 2, 0, 1, 15},
    {"one long range is not limited", {{1, 30}}, 1, 0, 1, 30},
    {"overlapping ranges merge into one", {{3, 5}, {4, 20}}, 2, 0, 3, 20},
    {"more ranges than max_ranges",
     {{1, 0}, {3, 0}, {5, 0}, {7, 0}, {9, 0}},
     5,
     QIM_E_MESSAGE_STORE_INVALID_RANGE,
     0,
     0},
    {"no ranges", {{0}}, 0, QIM_E_MESSAGE_STORE_INVALID_RANGE, 0, 0},
};

static void test_delete_ranges_are_validated_like_tinode(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub_many(x, 1, OTHER, 40);
  for (size_t i = 0; i < sizeof RANGES / sizeof RANGES[0]; i++) {
    const range_case *c = &RANGES[i];
    qim_store_conversation before = hx_conversation(x, 1);
    qim_history_delete_result r;
    int rc = del(x, 1, MEMBER, false, c->r, c->n, &r);
    qim_store_conversation after = hx_conversation(x, 1);
    bool ok = rc == c->rc;
    if (ok && rc == 0)
      ok = r.soft_count >= 1 && r.soft_ranges[0].low == c->first_low &&
           r.soft_ranges[r.soft_count - 1].hi == c->last_hi && after.delid == before.delid + 1;
    if (ok && rc != 0) ok = after.delid == before.delid; /* refused before anything changed */
    if (!ok) fail_msg("case '%s': rc %d (want %d)", c->name, rc, c->rc);
    if (rc == 0) qim_history_delete_result_free(&r);
    qim_store_conversation_free(&before);
    qim_store_conversation_free(&after);
  }
}

/* ---- mixed ranges, holds, windows, access
 * ---------------------------------------------------------- */

static void test_a_hard_range_splits_into_recalled_and_hidden(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub(x, 1, OWNER, "a");
  hx_pub(x, 1, MEMBER, "b");
  hx_pub(x, 1, OTHER, "c");
  hx_pub(x, 1, MEMBER, "d");
  qim_history_delete_result r;
  assert_int_equal(del(x, 1, MEMBER, true, (qim_store_seq_range[]){{1, 5}}, 1, &r), 0);
  assert_int_equal(r.recalled, 2);
  assert_int_equal(r.hidden, 2);
  assert_int_equal(r.hard_count, 2); /* {2} and {4} */
  assert_int_equal(r.hard_ranges[0].low, 2);
  assert_int_equal(r.hard_ranges[1].low, 4);
  assert_int_equal(r.soft_count, 2); /* {1} and {3} */
  assert_int_equal(r.soft_ranges[0].low, 1);
  assert_int_equal(r.soft_ranges[1].low, 3);
  assert_int_equal(r.delid, r.soft_delid);
  assert_int_equal(r.soft_delid, r.hard_delid + 1);
  assert_false(sees(x, 1, OTHER, 2));
  assert_true(sees(x, 1, OTHER, 3));
  assert_false(sees(x, 1, MEMBER, 3));
  qim_history_delete_result_free(&r);
  /* deleting what is already gone again is harmless and still reported */
  assert_int_equal(del(x, 1, MEMBER, true, (qim_store_seq_range[]){{2, 0}}, 1, &r), 0);
  assert_int_equal(hx_state(x, 1, 2), QIM_MESSAGE_STATE_RECALLED);
  assert_int_equal(r.recalled, 1);
  qim_history_delete_result_free(&r);
}

static void test_compliance_hold_refuses_hard_delete_and_recall_but_not_soft(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub(x, 1, OTHER, "plain");
  qim_conversation_seq held =
      hx_send_class(x, 1, MEMBER, "held", QIM_RETENTION_CLASS_COMPLIANCE_HOLD);
  qim_store_conversation before = hx_conversation(x, 1);
  qim_history_delete_result r;
  assert_int_equal(del(x, 1, OWNER, true, (qim_store_seq_range[]){{1, 3}}, 1, &r),
                   QIM_E_MESSAGE_STORE_COMPLIANCE_HOLD);
  assert_int_equal(hx_state(x, 1, 1), QIM_MESSAGE_STATE_NORMAL); /* nothing happened */
  assert_int_equal(del(x, 1, MEMBER, true, (qim_store_seq_range[]){{held, 0}}, 1, &r),
                   QIM_E_MESSAGE_STORE_COMPLIANCE_HOLD); /* recall */
  qim_store_conversation mid = hx_conversation(x, 1);
  assert_int_equal(mid.delid, before.delid);
  assert_int_equal(del(x, 1, OTHER, true, (qim_store_seq_range[]){{held, 0}}, 1, &r),
                   0); /* no rights: soft */
  assert_int_equal(r.hidden, 1);
  assert_int_equal(hx_state(x, 1, held), QIM_MESSAGE_STATE_NORMAL);
  qim_history_delete_result_free(&r);
  qim_store_conversation_free(&before);
  qim_store_conversation_free(&mid);
}

static void test_deletes_are_clipped_to_the_window(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub_many(x, 1, OWNER, 5);
  hx_group_add(x, 1, OWNER, 9, QIM_GROUP_ROLE_MEMBER); /* joined_at 5 */
  hx_pub_many(x, 1, OWNER, 2);
  qim_store_conversation before = hx_conversation(x, 1);
  qim_history_delete_result r;
  assert_int_equal(del(x, 1, 9, false, (qim_store_seq_range[]){{1, 4}}, 1, &r), 0);
  assert_int_equal(r.soft_count, 0);
  assert_int_equal(r.delid, before.delid); /* nothing it could see: nothing changed */
  qim_history_delete_result_free(&r);
  assert_int_equal(del(x, 1, 9, false, (qim_store_seq_range[]){{1, 100}}, 1, &r), 0);
  assert_int_equal(r.soft_count, 1);
  assert_int_equal(r.soft_ranges[0].low, 6);
  assert_int_equal(r.soft_ranges[0].hi, 8);
  qim_history_delete_result_free(&r);
  qim_store_conversation_free(&before);
}

static void test_deletes_by_non_members_or_former_members_are_access_denied(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub_many(x, 1, OWNER, 3);
  qim_history_delete_result r;
  assert_int_equal(del(x, 1, 50, false, (qim_store_seq_range[]){{1, 0}}, 1, &r),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  hx_group_leave(x, 1, OTHER);
  assert_int_equal(del(x, 1, OTHER, false, (qim_store_seq_range[]){{1, 0}}, 1, &r),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
}

/* ---- get del
 * ---------------------------------------------------------------------------------------- */

static void test_get_del_lists_own_and_everyones_ranges_since_a_delid(void **state) {
  hx *x = *state;
  make_group(x, 1);
  hx_pub_many(x, 1, OTHER, 10);
  qim_history_delete_result r1, r2, r3;
  assert_int_equal(del(x, 1, MEMBER, false, (qim_store_seq_range[]){{1, 3}}, 1, &r1),
                   0); /* MEMBER's */
  assert_int_equal(del(x, 1, OTHER, false, (qim_store_seq_range[]){{4, 6}}, 1, &r2),
                   0); /* OTHER's */
  assert_int_equal(del(x, 1, OWNER, true, (qim_store_seq_range[]){{8, 0}}, 1, &r3),
                   0); /* everyone's */
  qim_history_del_query q = {.actor = hx_actor(MEMBER), .conversation_id = hx_conv(1)};
  qim_history_del_page p;
  assert_int_equal(qim_history_get_del(x->history, &q, &p), 0);
  assert_int_equal(p.range_count, 2);
  assert_int_equal(p.ranges[0].low, 1);
  assert_int_equal(p.ranges[0].hi, 3);
  assert_int_equal(p.ranges[1].low, 8);
  assert_int_equal(p.clear, r3.delid);
  qim_history_del_page_free(&p);
  q.since = r1.delid + 1;
  assert_int_equal(qim_history_get_del(x->history, &q, &p), 0);
  assert_int_equal(p.range_count, 1);
  assert_int_equal(p.ranges[0].low, 8);
  qim_history_del_page_free(&p);
  q.since = r3.delid + 1;
  assert_int_equal(qim_history_get_del(x->history, &q, &p), 0);
  assert_int_equal(p.range_count, 0); /* ctrl 204 */
  assert_int_equal(p.clear, 0);
  qim_history_del_page_free(&p);
  /* a member who joined later does not hear of seqs before its window */
  hx_group_add(x, 1, OWNER, 9, QIM_GROUP_ROLE_MEMBER);
  q = (qim_history_del_query){.actor = hx_actor(9), .conversation_id = hx_conv(1)};
  assert_int_equal(qim_history_get_del(x->history, &q, &p), 0);
  assert_int_equal(p.range_count, 0);
  qim_history_del_page_free(&p);
  q.actor = hx_actor(77);
  assert_int_equal(qim_history_get_del(x->history, &q, &p),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  qim_history_delete_result_free(&r1);
  qim_history_delete_result_free(&r2);
  qim_history_delete_result_free(&r3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_delete_rule, setup, teardown),
      cmocka_unit_test_setup_teardown(test_delete_ranges_are_validated_like_tinode, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_hard_range_splits_into_recalled_and_hidden, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_compliance_hold_refuses_hard_delete_and_recall_but_not_soft, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deletes_are_clipped_to_the_window, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_deletes_by_non_members_or_former_members_are_access_denied, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_del_lists_own_and_everyones_ranges_since_a_delid,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
