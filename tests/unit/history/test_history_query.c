/*
 * test_history_query.c — reading history: every Tinode `get data` form (table-driven),
 * clipping to the caller's window, per-user filtering, HistoryQuery paging, the errors a
 * read can produce (HistoryAccessDenied, HistoryUnavailable, InvalidRange, Unavailable,
 * InvariantViolation), and a stored payload's head and content given back exactly.
 */
#include "../fanout/wrap_store.h"
#include "history_fixture.h"
#include "testsupport.h"

static int setup(void **state) {
  hx *x = calloc(1, sizeof *x);
  qim_history_config cfg;
  hx_config(&cfg);
  cfg.get_max_limit = 30;
  cfg.max_ranges = 4;
  hx_open(x, "hquery", &cfg);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  hx_close(*state);
  free(*state);
  return 0;
}

/* ---- get data forms --------------------------------------------------------------------- */

typedef struct get_case {
  const char *name;
  qim_conversation_seq since, before;
  uint32_t limit;
  qim_store_seq_range ranges[5];
  size_t range_count;
  int rc;
  const char *want; /* seqs, newest first */
  bool more;
} get_case;

static const get_case GET_CASES[] = {
    {"latest N", 0, 0, 5, {{0}}, 0, 0, "40,39,38,37,36", true},
    {"default limit is the configured default (32 > max 30: clamped)",
     0,
     0,
     0,
     {{0}},
     0,
     0,
     "40,39,38,37,36,35,34,33,32,31,30,29,28,27,26,25,24,23,22,21,20,19,18,17,16,15,14,13,12,11",
     true},
    {"limit above the maximum is clamped",
     0,
     0,
     1000,
     {{0}},
     0,
     0,
     "40,39,38,37,36,35,34,33,32,31,30,29,28,27,26,25,24,23,22,21,20,19,18,17,16,15,14,13,12,11",
     true},
    {"before is exclusive, newest first", 0, 10, 3, {{0}}, 0, 0, "9,8,7", true},
    {"since is inclusive, still newest first", 35, 0, 0, {{0}}, 0, 0, "40,39,38,37,36,35", false},
    {"since and before", 5, 8, 0, {{0}}, 0, 0, "7,6,5", false},
    {"since at or above before is empty", 8, 8, 0, {{0}}, 0, 0, "", false},
    {"before 1 is empty", 0, 1, 0, {{0}}, 0, 0, "", false},
    {"since beyond the latest is empty", 41, 0, 0, {{0}}, 0, 0, "", false},
    {"ranges: hi omitted means one message", 0, 0, 0, {{1, 3}, {10, 0}}, 2, 0, "10,2,1", false},
    {"ranges: the SDK's [1, 31) with a limit",
     0,
     0,
     10,
     {{1, 31}},
     1,
     0,
     "30,29,28,27,26,25,24,23,22,21",
     true},
    {"ranges overlap and are merged", 0, 0, 0, {{5, 8}, {6, 10}}, 2, 0, "9,8,7,6,5", false},
    {"ranges replace since and before", 30, 35, 0, {{1, 2}}, 1, 0, "1", false},
    {"a range past the latest is clipped", 0, 0, 0, {{38, 1000}}, 1, 0, "40,39,38", false},
    {"hi equal to low is empty", 0, 0, 0, {{4, 4}}, 1, 0, "", false},
    {"low 0 reads as 1", 0, 0, 0, {{0, 3}}, 1, 0, "2,1", false},
    {"hi below low is malformed",
     0,
     0,
     0,
     {{9, 3}},
     1,
     QIM_E_MESSAGE_STORE_INVALID_RANGE,
     "",
     false},
    {"more ranges than max_ranges",
     0,
     0,
     0,
     {{1, 2}, {3, 4}, {5, 6}, {7, 8}, {9, 10}},
     5,
     QIM_E_MESSAGE_STORE_INVALID_RANGE,
     "",
     false},
};

static void test_every_get_data_form(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 40);
  char got[1024];
  for (size_t i = 0; i < sizeof GET_CASES / sizeof GET_CASES[0]; i++) {
    const get_case *c = &GET_CASES[i];
    qim_history_get q = {.since = c->since,
                         .before = c->before,
                         .limit = c->limit,
                         .ranges = c->ranges,
                         .range_count = c->range_count};
    bool more = false;
    int rc = hx_get(x, 1, 2, &q, got, sizeof got, &more);
    if (rc != c->rc || strcmp(got, c->want) != 0 || (rc == 0 && more != c->more))
      fail_msg("case '%s': rc %d (want %d), got [%s] (want [%s]), more %d", c->name, rc, c->rc, got,
               c->want, more);
  }
}

/* ---- windows ------------------------------------------------------------------------------- */

static void test_a_late_joiner_sees_only_after_joining_and_never_an_error(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 20);
  hx_group_add(x, 1, 1, 9, QIM_GROUP_ROLE_MEMBER); /* joined_at = 20 */
  hx_pub_many(x, 1, 1, 15);
  char got[512];
  qim_history_get sdk = {.limit = 10, .ranges = (qim_store_seq_range[]){{1, 31}}, .range_count = 1};
  assert_int_equal(hx_get(x, 1, 9, &sdk, got, sizeof got, NULL), 0);
  assert_string_equal(got, "30,29,28,27,26,25,24,23,22,21");
  qim_history_get old = {.before = 15};
  assert_int_equal(hx_get(x, 1, 9, &old, got, sizeof got, NULL), 0);
  assert_string_equal(got, "");
  qim_history_get all = {.limit = 100, .since = 1};
  assert_int_equal(hx_get(x, 1, 9, &all, got, sizeof got, NULL), 0);
  assert_string_equal(got, "35,34,33,32,31,30,29,28,27,26,25,24,23,22,21");
}

static void test_a_member_who_left_reads_up_to_its_departure(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 5);
  hx_group_leave(x, 1, 2); /* left_at = 5 */
  hx_pub_many(x, 1, 1, 3);
  char got[256];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 2, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "5,4,3,2,1");
  qim_history_query hq = {.actor = hx_actor(2), .conversation_id = hx_conv(1)};
  qim_history_page p;
  assert_int_equal(qim_history_read(x->history, &hq, &p), 0);
  assert_int_equal(p.record_count, 5);
  assert_int_equal(p.latest_conversation_seq, 8);
  qim_history_page_free(&p);
  /* a small page from the latest starts above the departure: read again within the window */
  hx_pub_many(x, 1, 1, 10);
  hq.max_items = 3;
  assert_int_equal(qim_history_read(x->history, &hq, &p), 0);
  assert_int_equal(p.record_count, 3);
  assert_int_equal(p.records[0].coordinates.conversation_seq, 5);
  assert_int_equal(p.records[2].coordinates.conversation_seq, 3);
  assert_true(p.has_more);
  qim_history_page_free(&p);
}

static void test_soft_deletes_are_filtered_per_user(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 2);
  hx_pub_many(x, 1, 1, 10);
  qim_history_delete_req d = {.actor = hx_actor(2),
                              .conversation_id = hx_conv(1),
                              .ranges = (qim_store_seq_range[]){{5, 8}},
                              .range_count = 1};
  qim_history_delete_result r;
  assert_int_equal(qim_history_delete(x->history, &d, &r), 0);
  qim_history_delete_result_free(&r);
  char got[256];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 2, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "10,9,8,4,3,2,1");
  assert_int_equal(hx_get(x, 1, 3, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "10,9,8,7,6,5,4,3,2,1");
}

static void test_hard_deletes_vanish_from_get_data_but_stay_as_tombstones_in_pages(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 2, 4);
  qim_history_delete_req d = {.actor = hx_actor(1),
                              .conversation_id = hx_conv(1),
                              .ranges = (qim_store_seq_range[]){{2, 0}},
                              .range_count = 1,
                              .hard = true};
  qim_history_delete_result r;
  assert_int_equal(qim_history_delete(x->history, &d, &r), 0);
  qim_history_delete_result_free(&r);
  char got[64];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 2, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "4,3,1");
  qim_history_query hq = {.actor = hx_actor(2), .conversation_id = hx_conv(1)};
  qim_history_page p;
  assert_int_equal(qim_history_read(x->history, &hq, &p), 0);
  assert_int_equal(p.record_count, 4);
  assert_int_equal(p.records[2].coordinates.conversation_seq, 2);
  assert_int_equal(p.records[2].state, QIM_MESSAGE_STATE_DELETED);
  assert_int_equal(p.records[2].content.payload_or_ciphertext.n, 0);
  qim_history_page_free(&p);
}

/* ---- HistoryQuery
 * ---------------------------------------------------------------------------------- */

typedef struct page_case {
  const char *name;
  qim_history_direction dir;
  qim_conversation_seq anchor;
  uint32_t items, bytes;
  size_t count;
  qim_conversation_seq first, last;
  bool more;
} page_case;

static const page_case PAGE_CASES[] = {
    {"older from the latest", QIM_HISTORY_DIRECTION_OLDER, 0, 3, 0, 3, 12, 10, true},
    {"older from an anchor", QIM_HISTORY_DIRECTION_OLDER, 5, 10, 0, 4, 4, 1, false},
    {"newer from an anchor, oldest first", QIM_HISTORY_DIRECTION_NEWER, 9, 10, 0, 3, 10, 12, false},
    {"newer from zero is the beginning", QIM_HISTORY_DIRECTION_NEWER, 0, 2, 0, 2, 1, 2, true},
    {"default page size", QIM_HISTORY_DIRECTION_OLDER, 0, 0, 0, 12, 12, 1, false},
    {"a byte budget smaller than one record still returns one", QIM_HISTORY_DIRECTION_OLDER, 0, 10,
     1, 1, 12, 12, true},
    {"an anchor past the latest", QIM_HISTORY_DIRECTION_OLDER, 99, 2, 0, 2, 12, 11, true},
    {"newer from the latest is empty", QIM_HISTORY_DIRECTION_NEWER, 12, 5, 0, 0, 0, 0, false},
};

static void test_history_pages_in_both_directions(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 12);
  for (size_t i = 0; i < sizeof PAGE_CASES / sizeof PAGE_CASES[0]; i++) {
    const page_case *c = &PAGE_CASES[i];
    qim_history_query q = {.actor = hx_actor(2),
                           .conversation_id = hx_conv(1),
                           .direction = c->dir,
                           .anchor = c->anchor,
                           .max_items = c->items,
                           .max_bytes = c->bytes};
    qim_history_page p;
    assert_int_equal(qim_history_read(x->history, &q, &p), 0);
    bool ok = p.record_count == c->count && p.has_more == c->more &&
              p.latest_conversation_seq == 12 && p.earliest_available_conversation_seq == 1;
    if (ok && c->count)
      ok = p.records[0].coordinates.conversation_seq == c->first &&
           p.records[c->count - 1].coordinates.conversation_seq == c->last;
    if (!ok) fail_msg("case '%s': %zu records, more %d", c->name, p.record_count, p.has_more);
    qim_history_page_free(&p);
  }
}

static void test_earliest_available_follows_the_join(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 6);
  hx_group_add(x, 1, 1, 5, QIM_GROUP_ROLE_GUEST);
  hx_pub_many(x, 1, 1, 2);
  qim_history_query q = {.actor = hx_actor(5), .conversation_id = hx_conv(1)};
  qim_history_page p;
  assert_int_equal(qim_history_read(x->history, &q, &p), 0);
  assert_int_equal(p.earliest_available_conversation_seq, 7);
  assert_int_equal(p.record_count, 2);
  qim_history_page_free(&p);
  /* newer from the beginning, one at a time: the first visible one, and more after it */
  q.direction = QIM_HISTORY_DIRECTION_NEWER;
  q.max_items = 1;
  assert_int_equal(qim_history_read(x->history, &q, &p), 0);
  assert_int_equal(p.record_count, 1);
  assert_int_equal(p.records[0].coordinates.conversation_seq, 7);
  assert_true(p.has_more);
  qim_history_page_free(&p);
  /* older across the join: what lies below is not "more" */
  q.direction = QIM_HISTORY_DIRECTION_OLDER;
  q.max_items = 5;
  assert_int_equal(qim_history_read(x->history, &q, &p), 0);
  assert_int_equal(p.record_count, 2);
  assert_false(p.has_more);
  qim_history_page_free(&p);
}

static void test_an_anchor_below_the_retention_floor_is_history_unavailable(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  for (int i = 0; i < 5; i++)
    hx_send_class(x, 1, 1, "short-lived", QIM_RETENTION_CLASS_EPHEMERAL_24H);
  qim_manual_clock_advance(&x->clock, 3600 * 1000);
  hx_pub_many(x, 1, 1, 3); /* 6..8, Default */
  qim_manual_clock_advance(&x->clock, 24 * 3600 * 1000 - 1000);
  assert_int_equal(qim_history_sweep(x->history, NULL), 0);
  qim_history_query q = {.actor = hx_actor(2),
                         .conversation_id = hx_conv(1),
                         .direction = QIM_HISTORY_DIRECTION_OLDER,
                         .anchor = 5};
  qim_history_page p;
  assert_int_equal(qim_history_read(x->history, &q, &p), QIM_E_MESSAGE_STORE_HISTORY_UNAVAILABLE);
  q.direction = QIM_HISTORY_DIRECTION_NEWER;
  q.anchor = 2;
  assert_int_equal(qim_history_read(x->history, &q, &p), QIM_E_MESSAGE_STORE_HISTORY_UNAVAILABLE);
  q.direction = QIM_HISTORY_DIRECTION_OLDER;
  q.anchor = 6; /* the floor + 1: nothing older is kept, but nothing is missing either */
  assert_int_equal(qim_history_read(x->history, &q, &p), 0);
  assert_int_equal(p.earliest_available_conversation_seq, 6);
  assert_int_equal(p.record_count, 5); /* the tombstones of the expired */
  for (size_t i = 0; i < p.record_count; i++)
    assert_int_equal(p.records[i].state, QIM_MESSAGE_STATE_DELETED);
  qim_history_page_free(&p);
  q.anchor = 0; /* from the end: never unavailable */
  assert_int_equal(qim_history_read(x->history, &q, &p), 0);
  qim_history_page_free(&p);
}

/* ---- access
 * -------------------------------------------------------------------------------------- */

static void test_reads_by_non_members_banned_users_or_without_r_are_access_denied(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 2);
  hx_pub_many(x, 1, 1, 3);
  char got[64];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 42, &q, got, sizeof got, NULL),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  assert_int_equal(hx_get(x, 77, 1, &q, got, sizeof got, NULL),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  qim_authenticated_actor owner = hx_actor(1);
  qim_group_change_result cr;
  assert_int_equal(qim_group_ban(x->groups, &owner, hx_group(1), hx_user(3), NULL, &cr), 0);
  assert_int_equal(hx_get(x, 1, 3, &q, got, sizeof got, NULL),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  /* a member whose given mode lost R */
  qim_store_member_change ch = {.op = QIM_STORE_MEMBER_UPDATE,
                                .user_id = hx_user(2),
                                .role = QIM_GROUP_ROLE_MEMBER,
                                .mode_want = QIM_MODE_J | QIM_MODE_R | QIM_MODE_W,
                                .mode_given = QIM_MODE_J | QIM_MODE_W};
  qim_store_members_change_req mc = {.tenant_id = HX_TENANT,
                                     .conversation_id = hx_conv(1),
                                     .changes = &ch,
                                     .change_count = 1,
                                     .member_limit = 100};
  assert_int_equal(QIM_STORE_SYNC(x->store, conversations.members_change, &mc), 0);
  assert_int_equal(hx_get(x, 1, 2, &q, got, sizeof got, NULL),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  qim_history_query hq = {.actor = hx_actor(42), .conversation_id = hx_conv(1)};
  qim_history_page p;
  assert_int_equal(qim_history_read(x->history, &hq, &p),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
}

static void test_a_failing_store_is_message_store_unavailable(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  wrap_store *w = wrap_store_new(x->store);
  qim_history *h;
  assert_int_equal(qim_history_open(&w->base, x->commit, &x->clock.clock, &x->cfg, &h), 0);
  atomic_store(&w->fail_conv_get, 1);
  qim_history_get q = {.actor = hx_actor(2), .conversation_id = hx_conv(1)};
  qim_history_page p;
  assert_int_equal(qim_history_get_data(h, &q, &p), QIM_E_MESSAGE_STORE_UNAVAILABLE);
  qim_history_close(h);
  w->base.vt->close(&w->base);
}

/* ---- stored content back to Tinode form -------------------------------------------------------- */

static void test_stored_content_gives_back_head_and_content_exactly(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  const char *head =
      "{\"mime\":\"text/"
      "x-drafty\",\"reply\":\":1\",\"forwarded\":\"grpX:3\",\"sender\":\"usrFAKE\"}";
  const char *content =
      "{\"txt\":\"hi "
      "@bob\",\"fmt\":[{\"at\":3,\"len\":4}],\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"usrNOPE\"}"
      "}]}";
  hx_pub(x, 1, 1, "first");
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 2, head, content, &r), 0);
  qim_message_record rec = hx_record(x, 1, 2);
  json_t *got_head, *got_content;
  assert_int_equal(qim_history_content_to_tinode(&rec.content, &got_head, &got_content), 0);
  json_t *want_head =
      json_loads("{\"mime\":\"text/x-drafty\",\"reply\":\":1\",\"forwarded\":\"grpX:3\"}", 0, NULL);
  json_t *want_content = json_loads(content, 0, NULL);
  assert_true(json_equal(got_head, want_head)); /* without "sender": only the server sets it */
  assert_true(json_equal(got_content, want_content));
  /* the same two values, read in place (what {data} and {sync} send) */
  qim_json_span b, h;
  assert_int_equal(qim_payload_split_tinode(&rec.content, &b, &h), 0);
  json_t *in_place_head = json_loadb(h.p, h.n, 0, NULL), *in_place_content = json_loadb(b.p, b.n, 0, NULL);
  assert_true(json_equal(in_place_head, want_head));
  assert_true(json_equal(in_place_content, want_content));
  json_decref(in_place_head), json_decref(in_place_content);
  json_decref(want_head), json_decref(want_content);
  json_decref(got_head), json_decref(got_content);
  qim_message_record_free(&rec);
  /* no head published: none given back */
  rec = hx_record(x, 1, 1);
  assert_int_equal(qim_history_content_to_tinode(&rec.content, &got_head, &got_content), 0);
  assert_null(got_head);
  assert_string_equal(json_string_value(got_content), "first");
  assert_int_equal(qim_payload_split_tinode(&rec.content, &b, &h), 0);
  assert_int_equal(h.n, 0);
  json_decref(got_content);
  qim_message_record_free(&rec);
}

static void test_a_corrupt_stored_payload_is_an_invariant_violation(void **state) {
  (void)state;
  qim_message_record r = {0};
  r.content.schema_version = QIM_PAYLOAD_SCHEMA_TINODE;
  r.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)"{\"head\":1", 9};
  json_t *head, *content;
  assert_int_equal(qim_history_content_to_tinode(&r.content, &head, &content),
                   QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  r.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)"{\"head\":1,\"content\":2}", 22};
  assert_int_equal(qim_history_content_to_tinode(&r.content, &head, &content),
                   QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_get_data_form, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_late_joiner_sees_only_after_joining_and_never_an_error,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_member_who_left_reads_up_to_its_departure, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_soft_deletes_are_filtered_per_user, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_hard_deletes_vanish_from_get_data_but_stay_as_tombstones_in_pages, setup, teardown),
      cmocka_unit_test_setup_teardown(test_history_pages_in_both_directions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_earliest_available_follows_the_join, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_an_anchor_below_the_retention_floor_is_history_unavailable, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_reads_by_non_members_banned_users_or_without_r_are_access_denied, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_failing_store_is_message_store_unavailable, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stored_content_gives_back_head_and_content_exactly, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_corrupt_stored_payload_is_an_invariant_violation,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
