/*
 * test_group.c — group operations through the public API on a real store and commit:
 * creation, every change and its MembershipVersion and seq position, the permission
 * rules, every GroupMembershipError variant, and the Control message each change commits.
 */
#include "testsupport.h"

#include "../fanout/wrap_store.h"
#include "group_fixture.h"
#include "qim/err.h"

static int setup(void **state) {
  gx *x = calloc(1, sizeof *x);
  qim_group_config cfg;
  qim_group_config_default(&cfg);
  cfg.member_limit = 8;
  gx_open(x, "group", &cfg);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  gx_close(*state);
  free(*state);
  return 0;
}

/* ---- creation ------------------------------------------------------------------------------ */

static void test_create_makes_the_owner_then_the_invitees_in_one_more_version(void **state) {
  gx *x = *state;
  qim_user_id inv[] = {gx_user(2), gx_user(3), gx_user(3), gx_user(1)}; /* a duplicate and the owner */
  qim_group_create_request req = {gx_group(1), inv, 4};
  qim_authenticated_actor a = gx_actor(1);
  qim_group_created out;
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, NULL), 0);
  assert_int_equal(out.membership_version, 2);
  assert_true(qim_u128_eq(out.owner_id.v, gx_user(1).v));
  qim_store_member m;
  assert_int_equal(gx_member(x, 1, 1, &m), 0);
  assert_int_equal(m.role, QIM_GROUP_ROLE_OWNER);
  assert_int_equal(m.mode_want & m.mode_given, qim_group_role_mode(QIM_GROUP_ROLE_OWNER));
  assert_int_equal(gx_member(x, 1, 3, &m), 0);
  assert_int_equal(m.role, QIM_GROUP_ROLE_MEMBER);
  assert_int_equal(m.mode_want & m.mode_given, qim_group_role_mode(QIM_GROUP_ROLE_MEMBER));
  /* the creation's Control message */
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  assert_non_null(j);
  assert_string_equal(gx_str(j, "op"), "create");
  assert_int_equal(gx_int(j, "version"), 2);
  json_t *ch = json_object_get(j, "changes");
  assert_int_equal(json_array_size(ch), 3);
  assert_string_equal(gx_str(json_array_get(ch, 0), "role"), "owner");
  assert_string_equal(gx_str(json_array_get(ch, 1), "mode"), "JRWPS");
  assert_int_equal(env.intent.delivery.audience.kind, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  assert_int_equal(env.intent.delivery.audience.group.membership_version, 2);
  json_decref(j);
  qim_committed_envelope_free(&env);
}

static void test_create_of_a_taken_id_is_already_exists(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 1);
  qim_group_create_request req = {gx_group(1), NULL, 0};
  qim_authenticated_actor a = gx_actor(9);
  qim_group_created out;
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, NULL), QIM_E_GROUP_ALREADY_EXISTS);
}

static void test_create_above_the_member_limit_is_refused_before_writing(void **state) {
  gx *x = *state;
  qim_user_id inv[8];
  for (int i = 0; i < 8; i++) inv[i] = gx_user(10 + (uint64_t)i);
  qim_group_create_request req = {gx_group(2), inv, 8}; /* 1 + 8 > 8 */
  qim_authenticated_actor a = gx_actor(1);
  qim_group_created out;
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, NULL), QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  req.invitee_count = 7; /* exactly the limit */
  assert_int_equal(qim_group_create(x->groups, &a, &req, NULL, &out, NULL), 0);
}

/* ---- add --------------------------------------------------------------------------------------- */

static void test_add_beyond_the_limit_is_member_limit_exceeded_in_the_store(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 5); /* 6 members */
  qim_user_id more[] = {gx_user(20), gx_user(21), gx_user(22)};
  qim_authenticated_actor a = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &a, gx_group(1), more, 3, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  assert_false(gx_is_member(x, 1, 20)); /* all or nothing */
  assert_int_equal(qim_group_add(x->groups, &a, gx_group(1), more, 2, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
  qim_user_id many[9];
  for (int i = 0; i < 9; i++) many[i] = gx_user(100 + (uint64_t)i);
  assert_int_equal(qim_group_add(x->groups, &a, gx_group(1), many, 9, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED); /* refused before the store: more than the limit */
}

static void test_add_of_a_current_member_is_already_exists(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 2);
  qim_user_id u = gx_user(3);
  qim_authenticated_actor a = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &a, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_ALREADY_EXISTS);
}

static void test_add_makes_a_new_version_at_the_current_seq_position(void **state) {
  gx *x = *state;
  qim_membership_version v = gx_create(x, 1, 1, 2, 2);
  gx_send(x, 1, 1, 1);
  gx_send(x, 1, 2, 2);
  qim_user_id u = gx_user(7);
  qim_authenticated_actor a = gx_actor(2); /* a Member (S) invites a Guest */
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &a, gx_group(1), &u, 1, QIM_GROUP_ROLE_GUEST, NULL, &r), 0);
  assert_int_equal(r.membership_version, v + 1);
  assert_int_equal(r.position, 2);
  assert_int_equal(r.control_status, 0);
  assert_int_equal(r.control_count, 1);
  qim_store_member m;
  assert_int_equal(gx_member(x, 1, 7, &m), 0);
  assert_int_equal(m.joined_at, 2);
  assert_int_equal(m.read_seq, 2); /* unread starts at zero */
  assert_int_equal(m.role, QIM_GROUP_ROLE_GUEST);
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  char name[QIM_TOPIC_NAME_CAP];
  gx_name(2, name);
  assert_string_equal(gx_str(j, "op"), "add");
  assert_string_equal(gx_str(j, "actor"), name);
  assert_int_equal(gx_int(j, "position"), 2);
  assert_int_equal(env.record.coordinates.conversation_seq, 2); /* no new seq */
  assert_true(qim_u128_eq(env.record.sender.user_id.v, gx_user(2).v));
  json_decref(j);
  qim_committed_envelope_free(&env);
}

static void test_add_rules_are_enforced_by_mode(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 1);
  qim_user_id g3 = gx_user(3), g4 = gx_user(4);
  qim_authenticated_actor owner = gx_actor(1), member = gx_actor(2), guest = gx_actor(3);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &member, gx_group(1), &g3, 1, QIM_GROUP_ROLE_ADMIN, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &g3, 1, QIM_GROUP_ROLE_GUEST, NULL, &r), 0);
  assert_int_equal(qim_group_add(x->groups, &guest, gx_group(1), &g4, 1, QIM_GROUP_ROLE_GUEST, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &g4, 1, QIM_GROUP_ROLE_OWNER, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &g4, 1, QIM_GROUP_ROLE_ADMIN, NULL, &r), 0);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &g4, 0, QIM_GROUP_ROLE_ADMIN, NULL, &r), -EINVAL);
}

static void test_a_non_member_actor_is_permission_denied_and_an_unknown_group_not_found(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 1);
  qim_user_id u = gx_user(5);
  qim_authenticated_actor stranger = gx_actor(40), owner = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &stranger, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_leave(x->groups, &stranger, gx_group(1), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(99), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_NOT_FOUND);
  assert_int_equal(qim_group_remove(x->groups, &owner, gx_group(1), gx_user(77), NULL, &r), QIM_E_GROUP_NOT_FOUND);
  assert_int_equal(qim_group_set_role(x->groups, &owner, gx_group(1), gx_user(77), QIM_GROUP_ROLE_GUEST, NULL, &r),
                   QIM_E_GROUP_NOT_FOUND);
}

/* ---- remove, ban, leave, roles ------------------------------------------------------------------ */

static void test_owner_promotes_admin_admin_removes_members_but_not_admins(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 4); /* 2..5 members */
  qim_authenticated_actor owner = gx_actor(1), admin = gx_actor(2), member = gx_actor(3);
  qim_group_change_result r;
  assert_int_equal(qim_group_set_role(x->groups, &member, gx_group(1), gx_user(4), QIM_GROUP_ROLE_GUEST, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_set_role(x->groups, &owner, gx_group(1), gx_user(2), QIM_GROUP_ROLE_ADMIN, NULL, &r), 0);
  qim_store_member m;
  assert_int_equal(gx_member(x, 1, 2, &m), 0);
  assert_int_equal(m.mode_want & m.mode_given, qim_group_role_mode(QIM_GROUP_ROLE_ADMIN));
  assert_int_equal(qim_group_set_role(x->groups, &admin, gx_group(1), gx_user(3), QIM_GROUP_ROLE_ADMIN, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_set_role(x->groups, &admin, gx_group(1), gx_user(4), QIM_GROUP_ROLE_GUEST, NULL, &r), 0);
  assert_int_equal(qim_group_set_role(x->groups, &admin, gx_group(1), gx_user(2), QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED); /* one's own role */
  assert_int_equal(qim_group_remove(x->groups, &member, gx_group(1), gx_user(4), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_remove(x->groups, &admin, gx_group(1), gx_user(4), NULL, &r), 0);
  assert_false(gx_is_member(x, 1, 4));
  assert_int_equal(qim_group_set_role(x->groups, &owner, gx_group(1), gx_user(3), QIM_GROUP_ROLE_ADMIN, NULL, &r), 0);
  qim_authenticated_actor admin3 = gx_actor(3);
  assert_int_equal(qim_group_remove(x->groups, &admin3, gx_group(1), gx_user(2), NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_remove(x->groups, &admin3, gx_group(1), gx_user(1), NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_remove(x->groups, &owner, gx_group(1), gx_user(2), NULL, &r), 0);
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  assert_string_equal(gx_str(j, "op"), "remove");
  assert_string_equal(gx_str(json_array_get(json_object_get(j, "changes"), 0), "change"), "removed");
  json_decref(j);
  qim_committed_envelope_free(&env);
}

static void test_a_banned_user_cannot_be_added_again(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 2);
  qim_authenticated_actor owner = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_ban(x->groups, &owner, gx_group(1), gx_user(1), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_ban(x->groups, &owner, gx_group(1), gx_user(3), NULL, &r), 0);
  qim_store_member m;
  assert_int_equal(gx_member(x, 1, 3, &m), 0);
  assert_true(m.banned && m.has_left_at);
  qim_user_id u = gx_user(3);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_PERMISSION_DENIED);
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  assert_string_equal(gx_str(j, "op"), "ban");
  json_decref(j);
  qim_committed_envelope_free(&env);
}

static void test_leave_is_attributed_to_the_owner_and_names_the_leaver(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 2);
  qim_authenticated_actor owner = gx_actor(1), member = gx_actor(2);
  qim_group_change_result r;
  assert_int_equal(qim_group_leave(x->groups, &owner, gx_group(1), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  assert_int_equal(qim_group_remove(x->groups, &member, gx_group(1), gx_user(2), NULL, &r), 0); /* = leave */
  assert_false(gx_is_member(x, 1, 2));
  assert_int_equal(r.control_status, 0);
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  char name[QIM_TOPIC_NAME_CAP];
  gx_name(2, name);
  assert_string_equal(gx_str(j, "op"), "leave");
  assert_string_equal(gx_str(j, "actor"), name);
  assert_string_equal(gx_str(json_array_get(json_object_get(j, "changes"), 0), "change"), "left");
  assert_true(qim_u128_eq(env.record.sender.user_id.v, gx_user(1).v));
  json_decref(j);
  qim_committed_envelope_free(&env);
  assert_int_equal(qim_group_leave(x->groups, &member, gx_group(1), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
}

static void test_delete_by_the_owner_removes_everyone_in_one_version_then_marks_the_group_deleted(void **state) {
  gx *x = *state;
  qim_membership_version v = gx_create(x, 1, 1, 2, 3);
  qim_authenticated_actor owner = gx_actor(1), admin = gx_actor(2);
  qim_group_change_result r;
  assert_int_equal(qim_group_set_role(x->groups, &owner, gx_group(1), gx_user(2), QIM_GROUP_ROLE_ADMIN, NULL, &r), 0);
  /* An admin holds A but not O: only the owner ends the group. */
  assert_int_equal(qim_group_delete(x->groups, &admin, gx_group(1), NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  assert_true(gx_is_member(x, 1, 3));
  assert_int_equal(qim_group_delete(x->groups, &owner, gx_group(1), NULL, &r), 0);
  assert_int_equal(r.membership_version, v + 2);
  assert_int_equal(r.control_status, 0);
  for (uint64_t u = 1; u <= 4; u++) assert_false(gx_is_member(x, 1, u));
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  assert_string_equal(gx_str(j, "op"), "delete");
  json_t *ch = json_object_get(j, "changes");
  assert_int_equal(json_array_size(ch), 4);
  for (size_t i = 0; i < 4; i++) assert_string_equal(gx_str(json_array_get(ch, i), "change"), "removed");
  json_decref(j);
  qim_committed_envelope_free(&env);
  qim_store_conv_get_req cg = {.tenant_id = GX_TENANT, .conversation_id = qim_group_conversation(gx_group(1))};
  assert_int_equal(QIM_STORE_SYNC(x->store, conversations.get, &cg), 0);
  assert_true(cg.out.deleted);
  qim_store_conversation_free(&cg.out);
  /* A deleted group is NotFound for every later operation, a second delete included. */
  assert_int_equal(qim_group_delete(x->groups, &owner, gx_group(1), NULL, &r), QIM_E_GROUP_NOT_FOUND);
  qim_user_id u5 = gx_user(5);
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), &u5, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_NOT_FOUND);
}

static void test_big_changes_are_described_in_numbered_parts(void **state) {
  gx *x = *state;
  qim_group_close(x->groups);
  qim_group_config cfg;
  qim_group_config_default(&cfg);
  cfg.control_changes = 2;
  assert_int_equal(qim_group_open(x->store, x->commit, &x->clock.clock, &cfg, &x->groups), 0);
  gx_create(x, 1, 1, 2, 1); /* 2 changes: one part */
  qim_user_id u[5];
  for (int i = 0; i < 5; i++) u[i] = gx_user(10 + (uint64_t)i);
  qim_authenticated_actor owner = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x->groups, &owner, gx_group(1), u, 5, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
  assert_int_equal(r.control_count, 3);
  for (size_t back = 0; back < 3; back++) {
    qim_committed_envelope env;
    json_t *j = gx_control(x, back, &env);
    assert_int_equal(gx_int(j, "parts"), 3);
    assert_int_equal(gx_int(j, "part"), 3 - (json_int_t)back);
    assert_int_equal(gx_int(j, "version"), r.membership_version);
    assert_int_equal(json_array_size(json_object_get(j, "changes")), back == 0 ? 1 : 2);
    json_decref(j);
    qim_committed_envelope_free(&env);
  }
}

/* ---- AdminMembershipChange ------------------------------------------------------------------------ */

static void test_admin_change_needs_an_internal_principal(void **state) {
  gx *x = *state;
  gx_create(x, 1, 1, 2, 2);
  qim_user_id add = gx_user(9), rem = gx_user(2), owner = gx_user(1);
  qim_admin_membership_change ch = {gx_group(1), &add, 1, &rem, 1};
  qim_group_change_result r;
  assert_int_equal(qim_group_admin_change(x->groups, NULL, GX_TENANT, &ch, NULL, &r),
                   QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED);
  qim_internal_principal empty = {"", "x"}, p = {"moderation", "ticket-17"};
  assert_int_equal(qim_group_admin_change(x->groups, &empty, GX_TENANT, &ch, NULL, &r),
                   QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED);
  assert_int_equal(qim_group_admin_change(x->groups, &p, GX_TENANT, &ch, NULL, &r), 0);
  assert_true(gx_is_member(x, 1, 9));
  assert_false(gx_is_member(x, 1, 2));
  qim_committed_envelope env;
  json_t *j = gx_control(x, 0, &env);
  assert_string_equal(gx_str(j, "op"), "admin");
  assert_null(json_object_get(j, "actor"));
  assert_string_equal(gx_str(json_object_get(j, "principal"), "service"), "moderation");
  assert_true(qim_u128_eq(env.record.sender.user_id.v, gx_user(1).v)); /* attributed to the owner */
  json_decref(j);
  qim_committed_envelope_free(&env);
  /* the owner cannot be removed; a user in both lists and an empty change are malformed */
  qim_admin_membership_change bad = {gx_group(1), NULL, 0, &owner, 1};
  assert_int_equal(qim_group_admin_change(x->groups, &p, GX_TENANT, &bad, NULL, &r), QIM_E_GROUP_PERMISSION_DENIED);
  qim_admin_membership_change both = {gx_group(1), &add, 1, &add, 1};
  assert_int_equal(qim_group_admin_change(x->groups, &p, GX_TENANT, &both, NULL, &r), -EINVAL);
  qim_admin_membership_change none = {gx_group(1), NULL, 0, NULL, 0};
  assert_int_equal(qim_group_admin_change(x->groups, &p, GX_TENANT, &none, NULL, &r), -EINVAL);
  qim_admin_membership_change missing = {gx_group(5), &add, 1, NULL, 0};
  assert_int_equal(qim_group_admin_change(x->groups, &p, GX_TENANT, &missing, NULL, &r), QIM_E_GROUP_NOT_FOUND);
}

static void test_admin_change_from_a_service_not_on_the_list_is_refused(void **state) {
  gx *x = *state;
  qim_group_close(x->groups);
  static const char *const allowed[] = {"provisioning"};
  qim_group_config cfg;
  qim_group_config_default(&cfg);
  cfg.internal_services = allowed;
  cfg.internal_service_count = 1;
  assert_int_equal(qim_group_open(x->store, x->commit, &x->clock.clock, &cfg, &x->groups), 0);
  gx_create(x, 1, 1, 2, 1);
  qim_user_id add = gx_user(9);
  qim_admin_membership_change ch = {gx_group(1), &add, 1, NULL, 0};
  qim_internal_principal other = {"moderation", "t"}, ok = {"provisioning", "sync"};
  qim_group_change_result r;
  assert_int_equal(qim_group_admin_change(x->groups, &other, GX_TENANT, &ch, NULL, &r),
                   QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED);
  assert_int_equal(qim_group_admin_change(x->groups, &ok, GX_TENANT, &ch, NULL, &r), 0);
}

/* ---- the store fails ------------------------------------------------------------------------------- */

static void test_a_failing_store_is_unavailable_and_a_failed_control_leaves_the_change(void **state) {
  (void)state;
  /* the real store first; then groups and commit over a wrapper of it */
  gx x;
  gx_open(&x, "group-io", NULL);
  qim_group_close(x.groups);
  qim_commit_destroy(x.commit);
  qim_store *inner = x.store;
  wrap_store *w = wrap_store_new(inner);
  qim_commit_config cc;
  qim_commit_config_default(&cc);
  assert_int_equal(qim_commit_create(&w->base, &x.clock.clock, NULL, &cc, &x.commit), 0);
  assert_int_equal(qim_group_open(&w->base, x.commit, &x.clock.clock, NULL, &x.groups), 0);
  gx_create(&x, 1, 1, 2, 1);
  atomic_store(&w->fail_conv_get, 1);
  qim_user_id u = gx_user(5);
  qim_authenticated_actor owner = gx_actor(1);
  qim_group_change_result r;
  assert_int_equal(qim_group_add(x.groups, &owner, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r),
                   QIM_E_GROUP_UNAVAILABLE);
  atomic_store(&w->fail_conv_get, 0);
  assert_int_equal(qim_group_add(x.groups, &owner, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
  assert_int_equal(r.control_status, 0);
  /* a change whose Control cannot be committed still stands, and says so */
  atomic_store(&w->fail_reserve, 1);
  qim_user_id v = gx_user(6);
  assert_int_equal(qim_group_add(x.groups, &owner, gx_group(1), &v, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
  assert_int_not_equal(r.control_status, 0);
  assert_int_equal(r.control_count, 0);
  assert_true(gx_is_member(&x, 1, 6));
  gx_close(&x);
  wrap_close(&w->base);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_create_makes_the_owner_then_the_invitees_in_one_more_version),
      T(test_create_of_a_taken_id_is_already_exists),
      T(test_create_above_the_member_limit_is_refused_before_writing),
      T(test_add_beyond_the_limit_is_member_limit_exceeded_in_the_store),
      T(test_add_of_a_current_member_is_already_exists),
      T(test_add_makes_a_new_version_at_the_current_seq_position),
      T(test_add_rules_are_enforced_by_mode),
      T(test_a_non_member_actor_is_permission_denied_and_an_unknown_group_not_found),
      T(test_owner_promotes_admin_admin_removes_members_but_not_admins),
      T(test_a_banned_user_cannot_be_added_again),
      T(test_leave_is_attributed_to_the_owner_and_names_the_leaver),
      T(test_delete_by_the_owner_removes_everyone_in_one_version_then_marks_the_group_deleted),
      T(test_big_changes_are_described_in_numbered_parts),
      T(test_admin_change_needs_an_internal_principal),
      T(test_admin_change_from_a_service_not_on_the_list_is_refused),
      cmocka_unit_test(test_a_failing_store_is_unavailable_and_a_failed_control_leaves_the_change),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
