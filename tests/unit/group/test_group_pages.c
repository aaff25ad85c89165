/*
 * test_group_pages.c — member pages: a listing pages one frozen membership version, so
 * members joining and leaving on another thread while it pages never make a member
 * appear twice or go missing; cursors are bound to their group and version.
 */
#include "testsupport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "group_fixture.h"
#include "qim/err.h"

static int setup(void **state) {
  gx *x = calloc(1, sizeof *x);
  gx_open(x, "group-pages", NULL);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  gx_close(*state);
  free(*state);
  return 0;
}

typedef struct churn {
  gx *x;
  atomic_int stop;
  atomic_int changes;
} churn;

/* Joins users 5000.. and removes members 2.. one at a time until stopped. */
static void *churn_main(void *arg) {
  churn *c = arg;
  qim_authenticated_actor owner = gx_actor(1);
  for (uint64_t k = 0; !atomic_load(&c->stop); k++) {
    qim_user_id u = gx_user(5000 + k);
    qim_group_change_result r;
    assert_int_equal(qim_group_add(c->x->groups, &owner, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
    assert_int_equal(qim_group_remove(c->x->groups, &owner, gx_group(1), gx_user(2 + k), NULL, &r), 0);
    atomic_fetch_add(&c->changes, 2);
  }
  return NULL;
}

static int member_cmp(const void *a, const void *b) {
  return qim_u128_cmp(((const qim_group_member *)a)->user_id.v, ((const qim_group_member *)b)->user_id.v);
}

static void test_member_pages_stay_consistent_while_members_join_and_leave(void **state) {
  gx *x = *state;
  qim_membership_version v0 = gx_create(x, 1, 1, 2, 299); /* 300 members */
  churn c = {.x = x};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, churn_main, &c), 0);
  while (atomic_load(&c.changes) < 2) nanosleep(&(struct timespec){0, 1000000L}, NULL);
  qim_member_page_request req = {.actor = gx_actor(1), .group_id = gx_group(1), .limit = 7};
  qim_group_member *all = NULL;
  size_t n = 0;
  int pages = 0, changes_at_start = atomic_load(&c.changes);
  for (;;) {
    qim_member_page p;
    assert_int_equal(qim_group_member_page(x->groups, &req, &p), 0);
    pages++;
    all = realloc(all, (n + p.member_count + 1) * sizeof *all);
    memcpy(all + n, p.members, p.member_count * sizeof *all);
    n += p.member_count;
    if (req.has_cursor) qim_free(req.cursor.bytes.p);
    req.has_cursor = p.has_next_cursor;
    req.cursor = p.next_cursor;
    assert_int_equal(p.has_more, p.has_next_cursor);
    p.has_next_cursor = false;
    p.next_cursor = (qim_page_cursor){0};
    qim_member_page_free(&p);
    if (!req.has_cursor) break;
    nanosleep(&(struct timespec){0, 2000000L}, NULL); /* let the churn thread change things */
  }
  atomic_store(&c.stop, 1);
  pthread_join(t, NULL);
  assert_true(atomic_load(&c.changes) > changes_at_start); /* the group did change while paging */
  assert_true(pages >= 40);
  /* ordered, no member twice, and exactly the snapshot of the listing's version */
  for (size_t i = 1; i < n; i++) assert_true(member_cmp(&all[i - 1], &all[i]) < 0);
  qim_store_conv_get_req cg = {.tenant_id = GX_TENANT, .conversation_id = qim_group_conversation(gx_group(1))};
  assert_int_equal(QIM_STORE_SYNC(x->store, conversations.get, &cg), 0);
  qim_store_conversation_free(&cg.out);
  assert_true(cg.out.membership_version > v0);
  size_t found_version = 0;
  for (qim_membership_version v = v0; v <= cg.out.membership_version && !found_version; v++) {
    qim_store_members_at_req r = {.tenant_id = GX_TENANT, .conversation_id = cg.out.conversation_id, .version = v,
                                  .limit = 1000};
    assert_int_equal(QIM_STORE_SYNC(x->store, conversations.members_at, &r), 0);
    if (r.out_count == n) {
      size_t same = 0;
      for (size_t i = 0; i < n; i++) same += qim_u128_eq(r.out_members[i].user_id.v, all[i].user_id.v);
      if (same == n) found_version = v;
    }
    qim_free(r.out_members);
  }
  assert_true(found_version > v0); /* the first page's version, not the creation's nor a mix */
  free(all);
}

static void test_cursors_are_bound_to_their_group_and_a_missing_version_is_snapshot_unavailable(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 9);
  gx_create(x, 2, 1, 2, 9);
  qim_member_page_request req = {.actor = gx_actor(1), .group_id = gx_group(1), .limit = 4};
  qim_member_page p;
  assert_int_equal(qim_group_member_page(x->groups, &req, &p), 0);
  assert_int_equal(p.member_count, 4);
  assert_true(p.has_more && p.has_next_cursor);
  req.has_cursor = true;
  req.cursor = p.next_cursor;
  req.group_id = gx_group(2);
  qim_member_page q;
  assert_int_equal(qim_group_member_page(x->groups, &req, &q), -EINVAL);
  req.group_id = gx_group(1);
  req.cursor.bytes.p[24] += 9; /* a version above the current one */
  assert_int_equal(qim_group_member_page(x->groups, &req, &q), QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
  req.cursor.bytes.n--;
  assert_int_equal(qim_group_member_page(x->groups, &req, &q), -EINVAL);
  req.cursor.bytes.n++;
  qim_member_page_free(&p);
}

static void test_listing_needs_a_current_member_with_r(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 2);
  qim_member_page_request req = {.actor = gx_actor(50), .group_id = gx_group(1)};
  qim_member_page p;
  assert_int_equal(qim_group_member_page(x->groups, &req, &p), QIM_E_GROUP_PERMISSION_DENIED);
  req.group_id = gx_group(3);
  assert_int_equal(qim_group_member_page(x->groups, &req, &p), QIM_E_GROUP_NOT_FOUND);
  req.actor = gx_actor(2);
  req.group_id = gx_group(1);
  req.limit = 0; /* default page size: all three fit */
  assert_int_equal(qim_group_member_page(x->groups, &req, &p), 0);
  assert_int_equal(p.member_count, 3);
  assert_false(p.has_more);
  assert_false(p.has_next_cursor);
  assert_int_equal(p.members[0].role, QIM_GROUP_ROLE_OWNER);
  qim_member_page_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_member_pages_stay_consistent_while_members_join_and_leave, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cursors_are_bound_to_their_group_and_a_missing_version_is_snapshot_unavailable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_listing_needs_a_current_member_with_r, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
