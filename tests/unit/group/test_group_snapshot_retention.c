/*
 * test_group_snapshot_retention.c — membership snapshot retention (docs/groups.md
 * "Snapshot retention"): a pass keeps the newest snapshot_keep_versions versions of a
 * group; an older version reads MembershipSnapshotUnavailable, except one a message not
 * yet fanned out names — that one is kept and the fanout of the message still works; every
 * kept version reads exactly the members it had.
 */
#include "testsupport.h"

#include "fanout/fanout.h"
#include "group_fixture.h"
#include "qim/err.h"

#define VERSIONS 8

typedef struct rx {
  gx x;
  qim_fanout *fanout;
  /* the member set of each version, as read before any pruning */
  qim_user_id *members[VERSIONS + 1];
  size_t count[VERSIONS + 1];
} rx;

static int setup(void **state) {
  rx *r = calloc(1, sizeof *r);
  qim_group_config cfg;
  qim_group_config_default(&cfg);
  cfg.snapshot_keep_versions = 2;
  cfg.snapshot_prune_batch = 1; /* every pass pages conversation by conversation */
  gx_open(&r->x, "group-retention", &cfg);
  qim_fanout_options fo = {.shards = GX_SHARDS};
  assert_int_equal(qim_fanout_new(r->x.store, &fo, &r->fanout), 0);
  *state = r;
  return 0;
}

static int teardown(void **state) {
  rx *r = *state;
  for (int v = 0; v <= VERSIONS; v++) qim_free(r->members[v]);
  qim_fanout_free(r->fanout);
  gx_close(&r->x);
  free(r);
  return 0;
}

/* The members of group 1 at `version` (status of the store read). */
static int read_at(rx *r, qim_membership_version version, qim_user_id **out, size_t *n) {
  qim_store_members_at_req q = {.tenant_id = GX_TENANT,
                                .conversation_id = qim_group_conversation(gx_group(1)),
                                .version = version,
                                .limit = 1000};
  int rc = QIM_STORE_SYNC(r->x.store, conversations.members_at, &q);
  *out = NULL;
  *n = 0;
  if (rc) return rc;
  assert_false(q.out_has_more);
  *out = qim_calloc(q.out_count + 1, sizeof **out);
  for (size_t i = 0; i < q.out_count; i++) (*out)[i] = q.out_members[i].user_id;
  *n = q.out_count;
  qim_free(q.out_members);
  return 0;
}

static void remember(rx *r, qim_membership_version v) {
  assert_int_equal(read_at(r, v, &r->members[v], &r->count[v]), 0);
}

/* Version v reads exactly what it read before pruning. */
static void assert_exact(rx *r, qim_membership_version v) {
  qim_user_id *m;
  size_t n;
  assert_int_equal(read_at(r, v, &m, &n), 0);
  assert_int_equal(n, r->count[v]);
  assert_memory_equal(m, r->members[v], n * sizeof *m);
  qim_free(m);
}

static void assert_pruned(rx *r, qim_membership_version v) {
  qim_user_id *m;
  size_t n;
  assert_int_equal(read_at(r, v, &m, &n), QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
}

static qim_membership_version add(rx *r, uint64_t user) {
  qim_authenticated_actor a = gx_actor(1);
  qim_user_id u = gx_user(user);
  qim_group_change_result c;
  assert_int_equal(
      qim_group_add(r->x.groups, &a, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &c), 0);
  return c.membership_version;
}

/* Fans out everything in the outbox; returns the records processed. */
static uint32_t drain(rx *r) {
  uint32_t total = 0, n;
  do {
    assert_int_equal(qim_fanout_run_once(r->fanout, 100, &n), 0);
    total += n;
  } while (n);
  return total;
}

/* Versions 1..5: create (1: owner, 2: + users 2, 3), add 4, remove 2, add 5. */
static void build_history(rx *r) {
  assert_int_equal(gx_create(&r->x, 1, 1, 2, 2), 2);
  assert_int_equal(add(r, 4), 3);
  qim_authenticated_actor a = gx_actor(1);
  qim_group_change_result c;
  assert_int_equal(qim_group_remove(r->x.groups, &a, gx_group(1), gx_user(2), NULL, &c), 0);
  assert_int_equal(c.membership_version, 4);
  assert_int_equal(add(r, 5), 5);
  for (qim_membership_version v = 1; v <= 5; v++) remember(r, v);
}

static void test_unfanned_controls_pin_the_versions_they_name(void **state) {
  rx *r = *state;
  build_history(r);
  qim_group_prune_result res;
  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  /* every change's Control is still in the outbox, unfanned; the first one (of the
   * create) was reserved at version 2, so the count rule's floor 4 is held at 2 */
  assert_int_equal(res.conversations, 1);
  assert_int_equal(res.held, 1);
  assert_false(res.deferred);
  assert_pruned(r, 1);
  for (qim_membership_version v = 2; v <= 5; v++) assert_exact(r, v);
}

static void test_pruned_version_is_unavailable_and_pinned_one_fans_out(void **state) {
  rx *r = *state;
  build_history(r);
  assert_true(drain(r) > 0);
  /* a message at version 5 that the fanout has not seen, then two more versions */
  gx_send(&r->x, 1, 1, 1);
  assert_int_equal(add(r, 6), 6);
  assert_int_equal(add(r, 7), 7);
  remember(r, 6);
  remember(r, 7);

  qim_group_prune_result res;
  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  assert_int_equal(res.conversations, 1);
  assert_int_equal(res.held, 1); /* the count rule allows 6; the message pins 5 */
  assert_true(res.rows > 0);     /* user 2's stretch ended at version 4 */
  for (qim_membership_version v = 1; v <= 4; v++) assert_pruned(r, v);
  for (qim_membership_version v = 5; v <= 7; v++) assert_exact(r, v);

  /* the message and the two Controls fan out from their exact snapshots */
  assert_int_equal(drain(r), 3);

  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  assert_int_equal(res.conversations, 1);
  assert_int_equal(res.held, 0);
  assert_pruned(r, 5);
  assert_exact(r, 6);
  assert_exact(r, 7);
  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  assert_int_equal(res.conversations, 0); /* idempotent */
}

static void test_member_page_cursor_over_pruned_version_is_unavailable(void **state) {
  rx *r = *state;
  build_history(r);
  qim_member_page_request req = {.actor = gx_actor(1), .group_id = gx_group(1), .limit = 1};
  qim_member_page p;
  assert_int_equal(qim_group_member_page(r->x.groups, &req, &p), 0);
  assert_true(p.has_next_cursor); /* frozen at version 5 */
  drain(r);
  assert_int_equal(add(r, 6), 6);
  assert_int_equal(add(r, 7), 7);
  drain(r);
  qim_group_prune_result res;
  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  assert_int_equal(res.conversations, 1);
  req.has_cursor = true;
  req.cursor = p.next_cursor;
  qim_member_page q;
  assert_int_equal(qim_group_member_page(r->x.groups, &req, &q),
                   QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
  qim_member_page_free(&p);
}

static void test_keep_zero_keeps_every_version(void **state) {
  rx *r = *state;
  build_history(r);
  drain(r);
  qim_group_config cfg;
  qim_group_config_default(&cfg);
  cfg.snapshot_keep_versions = 0;
  qim_group_close(r->x.groups);
  assert_int_equal(qim_group_open(r->x.store, r->x.commit, &r->x.clock.clock, &cfg, &r->x.groups),
                   0);
  qim_group_prune_result res;
  assert_int_equal(qim_group_prune_snapshots(r->x.groups, &res), 0);
  assert_int_equal(res.conversations, 0);
  for (qim_membership_version v = 1; v <= 5; v++) assert_exact(r, v);
  assert_int_equal(qim_group_pruner_start(r->x.groups), 0);
  assert_int_equal(qim_group_pruner_start(r->x.groups), -EALREADY);
  qim_group_pruner_stop(r->x.groups);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unfanned_controls_pin_the_versions_they_name, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pruned_version_is_unavailable_and_pinned_one_fans_out,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_member_page_cursor_over_pruned_version_is_unavailable,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_keep_zero_keeps_every_version, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
