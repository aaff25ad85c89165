/*
 * test_group_rules.c — roles ↔ access modes, the permission rule of every membership
 * change, and the member-page cursor (src/group/group_rules.h). Pure functions, so the
 * full matrix of actor × target roles is checked here; group.c applies the same rules.
 */
#include "testsupport.h"

#include <string.h>

#include "group/group_rules.h"
#include "qim/err.h"
#include "qim/mem.h"
#include "store/store.h"

static const qim_group_role ALL[] = {QIM_GROUP_ROLE_OWNER, QIM_GROUP_ROLE_ADMIN, QIM_GROUP_ROLE_MEMBER,
                                     QIM_GROUP_ROLE_GUEST};
#define M(r) qim_group_role_mode(QIM_GROUP_ROLE_##r)

static void test_roles_map_to_tinode_mode_strings(void **state) {
  (void)state;
  char s[QIM_GROUP_MODE_CAP];
  qim_group_mode_format(M(OWNER), s);
  assert_string_equal(s, "JRWPASDO");
  qim_group_mode_format(M(ADMIN), s);
  assert_string_equal(s, "JRWPASD");
  qim_group_mode_format(M(MEMBER), s);
  assert_string_equal(s, "JRWPS");
  qim_group_mode_format(M(GUEST), s);
  assert_string_equal(s, "JR");
  assert_int_equal(qim_group_mode_format(0, s), 1);
  assert_string_equal(s, "N");
}

static void test_role_from_mode_is_the_inverse_and_rejects_other_sets(void **state) {
  (void)state;
  for (size_t i = 0; i < 4; i++) {
    qim_group_role r;
    assert_int_equal(qim_group_role_from_mode(qim_group_role_mode(ALL[i]), &r), 0);
    assert_int_equal(r, ALL[i]);
    assert_int_equal(qim_group_role_parse(qim_group_role_name(ALL[i]), &r), 0);
    assert_int_equal(r, ALL[i]);
  }
  qim_group_role r;
  assert_int_equal(qim_group_role_from_mode(QIM_MODE_J | QIM_MODE_W, &r), -EINVAL);
  assert_int_equal(qim_group_role_parse("superuser", &r), -EINVAL);
  assert_null(qim_group_role_name((qim_group_role)9));
  assert_int_equal(qim_group_role_mode((qim_group_role)9), 0);
}

static void test_add_needs_s_for_members_and_o_for_admins(void **state) {
  (void)state;
  assert_int_equal(qim_group_rule_add(M(MEMBER), QIM_GROUP_ROLE_MEMBER), 0);
  assert_int_equal(qim_group_rule_add(M(MEMBER), QIM_GROUP_ROLE_GUEST), 0);
  assert_int_equal(qim_group_rule_add(M(MEMBER), QIM_GROUP_ROLE_ADMIN), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_add(M(ADMIN), QIM_GROUP_ROLE_ADMIN), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_add(M(OWNER), QIM_GROUP_ROLE_ADMIN), 0);
  assert_int_equal(qim_group_rule_add(M(GUEST), QIM_GROUP_ROLE_GUEST), QIM_E_GROUP_PERMISSION_DENIED);
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(qim_group_rule_add(qim_group_role_mode(ALL[i]), QIM_GROUP_ROLE_OWNER), QIM_E_GROUP_PERMISSION_DENIED);
  /* by mode, not by role: a member whose S was taken away cannot invite */
  assert_int_equal(qim_group_rule_add(M(MEMBER) & ~(uint32_t)QIM_MODE_S, QIM_GROUP_ROLE_GUEST),
                   QIM_E_GROUP_PERMISSION_DENIED);
}

/* Expected outcome of actor (row) removing target (column): owner, admin, member, guest. */
static const int REMOVE_OK[4][4] = {
    {0, 1, 1, 1}, /* owner removes anyone but an owner */
    {0, 0, 1, 1}, /* admin removes members and guests */
    {0, 0, 0, 0},
    {0, 0, 0, 0},
};

static void test_remove_and_ban_follow_rank_by_mode(void **state) {
  (void)state;
  for (int a = 0; a < 4; a++)
    for (int t = 0; t < 4; t++) {
      int rc = qim_group_rule_remove(qim_group_role_mode(ALL[a]), qim_group_role_mode(ALL[t]));
      assert_int_equal(rc, REMOVE_OK[a][t] ? 0 : QIM_E_GROUP_PERMISSION_DENIED);
    }
}

static void test_owner_cannot_leave_everyone_else_can(void **state) {
  (void)state;
  assert_int_equal(qim_group_rule_leave(M(OWNER)), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_leave(M(ADMIN)), 0);
  assert_int_equal(qim_group_rule_leave(M(MEMBER)), 0);
  assert_int_equal(qim_group_rule_leave(M(GUEST)), 0);
}

static void test_only_a_member_holding_o_deletes_the_group(void **state) {
  (void)state;
  assert_int_equal(qim_group_rule_delete(M(OWNER)), 0);
  assert_int_equal(qim_group_rule_delete(M(ADMIN)), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_delete(M(MEMBER)), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_delete(M(GUEST)), QIM_E_GROUP_PERMISSION_DENIED);
}

static void test_role_changes_admin_needs_owner_member_guest_needs_admin(void **state) {
  (void)state;
  /* promote / demote admins: owner only */
  assert_int_equal(qim_group_rule_set_role(M(OWNER), M(MEMBER), QIM_GROUP_ROLE_ADMIN), 0);
  assert_int_equal(qim_group_rule_set_role(M(OWNER), M(ADMIN), QIM_GROUP_ROLE_MEMBER), 0);
  assert_int_equal(qim_group_rule_set_role(M(ADMIN), M(MEMBER), QIM_GROUP_ROLE_ADMIN), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_set_role(M(ADMIN), M(ADMIN), QIM_GROUP_ROLE_GUEST), QIM_E_GROUP_PERMISSION_DENIED);
  /* member <-> guest: A */
  assert_int_equal(qim_group_rule_set_role(M(ADMIN), M(MEMBER), QIM_GROUP_ROLE_GUEST), 0);
  assert_int_equal(qim_group_rule_set_role(M(ADMIN), M(GUEST), QIM_GROUP_ROLE_MEMBER), 0);
  assert_int_equal(qim_group_rule_set_role(M(MEMBER), M(GUEST), QIM_GROUP_ROLE_MEMBER), QIM_E_GROUP_PERMISSION_DENIED);
  /* the owner role is never assigned, and the owner's role never changed */
  assert_int_equal(qim_group_rule_set_role(M(OWNER), M(ADMIN), QIM_GROUP_ROLE_OWNER), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_set_role(M(OWNER), M(OWNER), QIM_GROUP_ROLE_ADMIN), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_rule_set_role(M(OWNER), M(MEMBER), (qim_group_role)7), QIM_E_GROUP_PERMISSION_DENIED);
}

static void test_listing_members_needs_r(void **state) {
  (void)state;
  assert_int_equal(qim_group_rule_list(M(GUEST)), 0);
  assert_int_equal(qim_group_rule_list(QIM_MODE_J), QIM_E_GROUP_PERMISSION_DENIED);
}

static void test_cursor_round_trips_and_binds_to_its_group(void **state) {
  (void)state;
  qim_group_cursor c = {.conversation_id = {{1, 2}}, .version = 77, .last_user = {{0xAB, 0xCD}}}, d;
  qim_page_cursor pc;
  qim_group_cursor_encode(&c, &pc);
  assert_int_equal(pc.bytes.n, QIM_GROUP_CURSOR_SIZE);
  assert_int_equal(qim_group_cursor_decode(&pc, c.conversation_id, &d), 0);
  assert_int_equal(d.version, 77);
  assert_true(d.last_user.v.hi == 0xAB && d.last_user.v.lo == 0xCD);
  assert_int_equal(qim_group_cursor_decode(&pc, (qim_conversation_id){{1, 3}}, &d), -EINVAL);
  pc.bytes.n--;
  assert_int_equal(qim_group_cursor_decode(&pc, c.conversation_id, &d), -EINVAL);
  pc.bytes.n++;
  pc.bytes.p[0] = 2;
  assert_int_equal(qim_group_cursor_decode(&pc, c.conversation_id, &d), -EINVAL);
  pc.bytes.p[0] = 1;
  memset(pc.bytes.p + 17, 0, 8); /* version 0 never exists */
  assert_int_equal(qim_group_cursor_decode(&pc, c.conversation_id, &d), -EINVAL);
  qim_free(pc.bytes.p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roles_map_to_tinode_mode_strings),
      cmocka_unit_test(test_role_from_mode_is_the_inverse_and_rejects_other_sets),
      cmocka_unit_test(test_add_needs_s_for_members_and_o_for_admins),
      cmocka_unit_test(test_remove_and_ban_follow_rank_by_mode),
      cmocka_unit_test(test_owner_cannot_leave_everyone_else_can),
      cmocka_unit_test(test_only_a_member_holding_o_deletes_the_group),
      cmocka_unit_test(test_role_changes_admin_needs_owner_member_guest_needs_admin),
      cmocka_unit_test(test_listing_members_needs_r),
      cmocka_unit_test(test_cursor_round_trips_and_binds_to_its_group),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
