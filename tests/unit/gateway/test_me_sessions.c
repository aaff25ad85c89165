/*
 * test_me_sessions.c — the session list behind `get sub` on `me` (src/gateway/me.c,
 * qim__gw_me_sessions) against a real SQLite store: groups and direct conversations
 * together, newest activity first, unread counts from read positions, conversations the
 * user left skipped, and paging by the store's cursor without gaps or repeats.
 */
#include "../store/store_fixture.h"
#include "gateway/gateway_int.h"

/* User 1's world: groups 1 (owner 1) and 2 (owner 1), direct conversations with users 2
 * and 3, and group 3 (owner 4) that user 1 joined and left. */
static qim_conversation_id direct(uint64_t a, uint64_t b) {
  return qim_conversation_id_direct(fx_tenant(), fx_user(a), fx_user(b));
}

static void create_direct(qim_store *s, uint64_t a, uint64_t b) {
  qim_store_conv_create_req r = {0};
  r.conv.tenant_id = fx_tenant();
  r.conv.conversation_id = direct(a, b);
  r.conv.kind = QIM_CONVERSATION_DIRECT;
  bool first = qim_u128_cmp(fx_user(a).v, fx_user(b).v) < 0;
  r.conv.direct_users[0] = fx_user(first ? a : b);
  r.conv.direct_users[1] = fx_user(first ? b : a);
  r.now = 1000;
  assert_int_equal(QIM_STORE_SYNC(s, conversations.create, &r), 0);
}

static void member_op(qim_store *s, qim_conversation_id conv, uint64_t user,
                      qim_store_member_op op) {
  qim_store_member_change ch = {.op = op,
                                .user_id = fx_user(user),
                                .role = QIM_GROUP_ROLE_MEMBER,
                                .mode_want = 0x2F,
                                .mode_given = 0x2F};
  qim_store_members_change_req q = {.tenant_id = fx_tenant(),
                                    .conversation_id = conv,
                                    .changes = &ch,
                                    .change_count = 1,
                                    .now = 2000};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_change, &q), 0);
}

/* A message by `sender` in `conv`; `n` orders activity (it makes the LastActivityId). */
static void post(qim_store *s, qim_conversation_id conv, uint64_t sender, uint64_t n) {
  qim_commit_intent p = fx_proposal(0, sender, n, "hello");
  p.coordinates.conversation_id = conv;
  p.record.coordinates = p.coordinates;
  fx_commit(s, &p);
  qim_commit_intent_free(&p);
}

static void read_up_to(qim_store *s, qim_conversation_id conv, uint64_t user,
                       qim_conversation_seq seq) {
  qim_store_member_receipt_req q = {
      .tenant_id = fx_tenant(), .conversation_id = conv, .user_id = fx_user(user), .read_seq = seq};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.member_receipt, &q), 0);
}

typedef struct world {
  char *dir;
  qim_store *s;
} world;

static int setup(void **state) {
  world *w = qim_calloc(1, sizeof *w);
  w->dir = qim_test_tmpdir("me_sessions");
  qim_store_options o = fx_options();
  w->s = fx_open(w->dir, NULL, &o);
  fx_create_group(w->s, 1, 1);
  fx_create_group(w->s, 2, 1);
  fx_create_group(w->s, 3, 4);
  create_direct(w->s, 1, 2);
  create_direct(w->s, 3, 1);
  member_op(w->s, fx_conv(3), 1, QIM_STORE_MEMBER_ADD);
  post(w->s, fx_conv(1), 1, 1);   /* group 1: seq 1 */
  post(w->s, direct(1, 2), 2, 2); /* direct 1-2: seq 1 */
  post(w->s, fx_conv(2), 1, 3);   /* group 2: seq 1 */
  post(w->s, direct(1, 3), 3, 4); /* direct 1-3: seq 1 */
  post(w->s, fx_conv(3), 4, 5);   /* group 3: seq 1 (user 1 still a member) */
  post(w->s, direct(1, 2), 2, 6); /* direct 1-2: seq 2, the newest activity of user 1 */
  member_op(w->s, fx_conv(3), 1, QIM_STORE_MEMBER_REMOVE);
  post(w->s, fx_conv(3), 4, 7); /* group 3 moves on without user 1 */
  read_up_to(w->s, direct(1, 2), 1, 1);
  read_up_to(w->s, fx_conv(1), 1, 1);
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  qim_store_close(w->s);
  qim_test_rmtree(w->dir);
  qim_free(w);
  return 0;
}

static void check(const qim_session_page *page, size_t i, qim_conversation_id conv,
                  qim_conversation_seq seq, uint32_t unread) {
  assert_true(i < page->session_count);
  assert_true(qim_u128_eq(page->sessions[i].conversation_id.v, conv.v));
  assert_int_equal(page->sessions[i].latest_conversation_seq, seq);
  assert_int_equal(page->sessions[i].unread_count, unread);
}

static void test_lists_groups_and_direct_by_activity_with_unread_counts(void **state) {
  world *w = *state;
  qim_session_page_request req = {.limit = 16};
  qim_session_page page;
  gw_me_rows rows;
  assert_int_equal(
      qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, NULL, NULL, &page, &rows), 0);
  assert_int_equal(page.session_count, 4); /* group 3 was left: not in the list */
  check(&page, 0, direct(1, 2), 2, 1);
  check(&page, 1, direct(1, 3), 1, 1);
  check(&page, 2, fx_conv(2), 1, 1);
  check(&page, 3, fx_conv(1), 1, 0);
  for (size_t i = 1; i < page.session_count; i++)
    assert_true(memcmp(page.sessions[i - 1].last_activity_id.b, page.sessions[i].last_activity_id.b,
                       16) > 0);
  assert_int_equal(rows.convs[0].kind, QIM_CONVERSATION_DIRECT);
  char name[QIM_TOPIC_NAME_CAP], want[QIM_TOPIC_NAME_CAP];
  qim__gw_conv_topic(&rows.convs[0], fx_user(1), name, sizeof name);
  qim_user_id_format(fx_user(2), want, sizeof want);
  assert_string_equal(name, want); /* user 1 names the direct conversation after user 2 */
  qim__gw_conv_topic(&rows.convs[0], fx_user(2), name, sizeof name);
  qim_user_id_format(fx_user(1), want, sizeof want);
  assert_string_equal(name, want); /* and user 2 after user 1 */
  assert_false(page.has_more);
  qim__gw_me_rows_free(&rows, page.session_count);
  qim_session_page_free(&page);
}

static void test_pages_follow_each_other_without_gaps_or_repeats(void **state) {
  world *w = *state;
  qim_session_page_request req = {.limit = 3};
  qim_session_page p1, p2;
  gw_me_rows r1, r2;
  assert_int_equal(qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, NULL, NULL, &p1, &r1),
                   0);
  assert_int_equal(p1.session_count, 3);
  assert_true(p1.has_more && p1.has_next_cursor);
  check(&p1, 2, fx_conv(2), 1, 1);
  req.has_cursor = true;
  req.cursor = p1.next_cursor;
  assert_int_equal(qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, NULL, NULL, &p2, &r2),
                   0);
  /* The left group 3 sits between group 2 and group 1 in activity order: skipped. */
  assert_int_equal(p2.session_count, 1);
  check(&p2, 0, fx_conv(1), 1, 0);
  assert_false(p2.has_more);
  qim__gw_me_rows_free(&r1, p1.session_count);
  qim__gw_me_rows_free(&r2, p2.session_count);
  qim_session_page_free(&p1);
  qim_session_page_free(&p2);
}

static bool only_direct(const qim_store_member *m, const qim_store_conversation *c, void *ud) {
  (void)m;
  (*(int *)ud)++;
  return c->kind == QIM_CONVERSATION_DIRECT;
}

static void test_filter_and_bad_requests(void **state) {
  world *w = *state;
  int seen = 0;
  qim_session_page_request req = {.limit = 1};
  qim_session_page page;
  gw_me_rows rows;
  assert_int_equal(
      qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, only_direct, &seen, &page, &rows),
      0);
  assert_int_equal(page.session_count, 1);
  check(&page, 0, direct(1, 2), 2, 1);
  qim__gw_me_rows_free(&rows, page.session_count);
  qim_session_page_free(&page);
  req.limit = 0;
  assert_int_equal(
      qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, NULL, NULL, &page, &rows), -EINVAL);
  uint8_t junk[5] = {1, 2, 3, 4, 5};
  req = (qim_session_page_request){.limit = 2, .has_cursor = true, .cursor = {{junk, sizeof junk}}};
  assert_int_equal(
      qim__gw_me_sessions(w->s, fx_tenant(), fx_user(1), &req, NULL, NULL, &page, &rows), -EINVAL);
  assert_int_equal(page.session_count, 0);
  /* A user with nothing: an empty page. */
  req = (qim_session_page_request){.limit = 2};
  assert_int_equal(
      qim__gw_me_sessions(w->s, fx_tenant(), fx_user(9), &req, NULL, NULL, &page, &rows), 0);
  assert_int_equal(page.session_count, 0);
  assert_false(page.has_more);
  qim__gw_me_rows_free(&rows, 0);
  qim_session_page_free(&page);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_lists_groups_and_direct_by_activity_with_unread_counts,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_pages_follow_each_other_without_gaps_or_repeats, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_filter_and_bad_requests, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
