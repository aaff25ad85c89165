/*
 * group.c — group operations (group.h): load the group and the acting member, apply
 * the permission rule (group_rules.c), make the change in one store call, announce it
 * (group_control.c). Reads of the acting member and the change are two store calls; the
 * rule is checked against the rows read just before (docs/groups.md, "Races").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "group/group_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

void qim_group_config_default(qim_group_config *cfg) {
  *cfg = (qim_group_config){.member_limit = 10000, .page_default = 100, .page_max = 1000,
                            .control_changes = 500, .control_attempts = 3,
                            .snapshot_keep_versions = 1000, .snapshot_prune_batch = 1000,
                            .snapshot_prune_interval_ms = 60000};
}

int qim_group_open(qim_store *store, qim_commit *commit, const qim_clock *clock, const qim_group_config *cfg,
                   qim_groups **out) {
  qim_group_config c;
  if (cfg) c = *cfg;
  else qim_group_config_default(&c);
  if (!store || !commit || !clock || !c.member_limit || !c.page_max || !c.control_changes) return -EINVAL;
  if (!c.page_default || c.page_default > c.page_max) c.page_default = c.page_max < 100 ? c.page_max : 100;
  if (!c.control_attempts) c.control_attempts = 1;
  if (!c.snapshot_prune_batch) c.snapshot_prune_batch = 1000;
  if (!c.snapshot_prune_interval_ms) c.snapshot_prune_interval_ms = 60000;
  qim_groups *g = qim_calloc(1, sizeof *g);
  g->store = store;
  g->commit = commit;
  g->clock = clock;
  g->cfg = c;
  qim_periodic_init(&g->pruner);
  *out = g;
  return 0;
}

void qim_group_close(qim_groups *g) {
  if (!g) return;
  qim_periodic_destroy(&g->pruner);
  qim_free(g);
}

/* ---- store access ------------------------------------------------------------------------ */

/* A store status as a group status: GroupMembershipError codes (raised by the store)
 * and a pruned snapshot pass through; backpressure is QIM_AGAIN; the rest Unavailable. */
int qim__group_store_error(int rc) {
  if (rc == -EAGAIN) return QIM_AGAIN;
  if ((rc <= QIM_E_GROUP_PERMISSION_DENIED && rc >= QIM_E_GROUP_UNAVAILABLE) ||
      rc == QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE)
    return rc;
  return qim_err_raise(QIM_E_GROUP_UNAVAILABLE);
}

/* The live group conversation, or NotFound. out owns its strings. */
static int load_group(qim_groups *g, qim_tenant_id t, qim_group_id group, qim_store_conversation *out) {
  qim_store_conv_get_req r = {.tenant_id = t, .conversation_id = qim_group_conversation(group)};
  int rc = QIM_STORE_SYNC(g->store, conversations.get, &r);
  if (rc == -ENOENT) return qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  if (rc) return qim__group_store_error(rc);
  if (r.out.kind != QIM_CONVERSATION_GROUP || r.out.deleted) {
    qim_store_conversation_free(&r.out);
    return qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  }
  *out = r.out;
  return 0;
}

/* A user's row; *current is false when it never was, left, or was banned. */
static int load_member(qim_groups *g, qim_tenant_id t, qim_group_id group, qim_user_id u, qim_store_member *out,
                       bool *current) {
  qim_store_member_get_req r = {.tenant_id = t, .conversation_id = qim_group_conversation(group), .user_id = u};
  int rc = QIM_STORE_SYNC(g->store, conversations.member_get, &r);
  *current = false;
  memset(out, 0, sizeof *out);
  if (rc == -ENOENT) return 0;
  if (rc) return qim__group_store_error(rc);
  *out = r.out;
  *current = !r.out.has_left_at && !r.out.banned;
  return 0;
}

static uint32_t effective_mode(const qim_store_member *m) { return m->mode_want & m->mode_given; }

/* The group and the acting member's effective modes; PermissionDenied unless it is a
 * current member. conv owns strings on success. */
int qim__group_load_actor(qim_groups *g, const qim_authenticated_actor *a, qim_group_id group,
                      qim_store_conversation *conv, uint32_t *mode) {
  int rc = load_group(g, a->tenant_id, group, conv);
  if (rc) return rc;
  qim_store_member m;
  bool current;
  rc = load_member(g, a->tenant_id, group, a->user_id, &m, &current);
  if (!rc && !current) rc = qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  *mode = effective_mode(&m);
  qim_store_member_free(&m);
  if (rc) qim_store_conversation_free(conv);
  return rc;
}

/* The target of remove / ban / role change: NotFound unless a current member. */
static int load_target(qim_groups *g, qim_tenant_id t, qim_group_id group, qim_user_id u, uint32_t *mode) {
  qim_store_member m;
  bool current;
  int rc = load_member(g, t, group, u, &m, &current);
  if (!rc && !current) rc = qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  *mode = effective_mode(&m);
  qim_store_member_free(&m);
  return rc;
}

/* Applies the changes in one atomic store call: a new version. */
static int apply(qim_groups *g, qim_tenant_id t, qim_group_id group, const qim_store_member_change *changes,
                 size_t n, qim_group_change_result *out) {
  qim_store_members_change_req r = {.tenant_id = t, .conversation_id = qim_group_conversation(group),
                                    .changes = changes, .change_count = n, .member_limit = g->cfg.member_limit,
                                    .now = qim_clock_wall_ms(g->clock)};
  int rc = QIM_STORE_SYNC(g->store, conversations.members_change, &r);
  if (rc) return qim__group_store_error(rc);
  *out = (qim_group_change_result){.membership_version = r.out_version, .position = r.out_position};
  return 0;
}

static qim_store_member_change change_of(qim_store_member_op op, qim_user_id u, qim_group_role role) {
  uint32_t mode = op == QIM_STORE_MEMBER_ADD || op == QIM_STORE_MEMBER_UPDATE ? qim_group_role_mode(role) : 0;
  return (qim_store_member_change){.op = op, .user_id = u, .role = role, .mode_want = mode, .mode_given = mode};
}

/* ---- user lists ------------------------------------------------------------------------------ */

static int user_cmp(const void *a, const void *b) {
  return qim_u128_cmp(((const qim_user_id *)a)->v, ((const qim_user_id *)b)->v);
}

/* A sorted copy of users without duplicates (and without `skip` when has_skip). */
static size_t users_unique(const qim_user_id *users, size_t n, const qim_user_id *skip, qim_user_id **out) {
  qim_user_id *u = n ? qim_memdup(users, n * sizeof *users) : NULL;
  if (n) qsort(u, n, sizeof *u, user_cmp);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip && qim_u128_eq(u[i].v, skip->v)) continue;
    if (k == 0 || !qim_u128_eq(u[k - 1].v, u[i].v)) u[k++] = u[i];
  }
  *out = u;
  return k;
}

static bool users_contain(const qim_user_id *sorted, size_t n, qim_user_id u) {
  return n && bsearch(&u, sorted, n, sizeof u, user_cmp) != NULL;
}

/* ---- announcing --------------------------------------------------------------------------------- */

/* Announces changes that all share `kind` (and, for added / role, `role`). */
static void announce_uniform(qim_groups *g, qim__group_event *ev, const qim_user_id *users, size_t n, const char *kind,
                             bool has_role, qim_group_role role, const qim_trace_id *trace,
                             qim_group_change_result *out) {
  qim__group_change *c = qim_calloc(n ? n : 1, sizeof *c);
  for (size_t i = 0; i < n; i++) c[i] = (qim__group_change){users[i], kind, has_role, role};
  ev->changes = c;
  ev->count = n;
  qim__group_announce(g, ev, trace, out);
  qim_free(c);
}

static qim__group_event event_of(const char *op, const qim_authenticated_actor *a, const qim_store_conversation *conv,
                                 const qim_group_change_result *res) {
  return (qim__group_event){.op = op, .tenant = a ? a->tenant_id : conv->tenant_id,
                            .conversation_id = conv->conversation_id, .version = res->membership_version,
                            .position = res->position, .actor = a, .actor_still_member = a != NULL,
                            .owner = conv->owner_id};
}

/* ---- create ---------------------------------------------------------------------------------------- */

static int create_conversation(qim_groups *g, const qim_authenticated_actor *a, qim_group_id group) {
  uint64_t now = qim_clock_wall_ms(g->clock);
  qim_store_conv_create_req r = {.now = now};
  r.conv = (qim_store_conversation){.tenant_id = a->tenant_id, .conversation_id = qim_group_conversation(group),
                                    .kind = QIM_CONVERSATION_GROUP, .owner_id = a->user_id, .created_at = now,
                                    .updated_at = now, .touched_at = now,
                                    .default_mode_auth = qim_group_role_mode(QIM_GROUP_ROLE_MEMBER)};
  int rc = QIM_STORE_SYNC(g->store, conversations.create, &r);
  if (rc == -EEXIST) return qim_err_raise(QIM_E_GROUP_ALREADY_EXISTS);
  return rc ? qim__group_store_error(rc) : 0;
}

/* The Control of a creation names the owner and every invitee. */
static void announce_create(qim_groups *g, const qim_authenticated_actor *a, qim_group_id group,
                            const qim_user_id *inv, size_t n, const qim_trace_id *trace, qim_group_change_result *res) {
  qim__group_change *c = qim_calloc(n + 1, sizeof *c);
  c[0] = (qim__group_change){a->user_id, "added", true, QIM_GROUP_ROLE_OWNER};
  for (size_t i = 0; i < n; i++) c[i + 1] = (qim__group_change){inv[i], "added", true, QIM_GROUP_ROLE_MEMBER};
  qim__group_event ev = {.op = "create", .tenant = a->tenant_id, .conversation_id = qim_group_conversation(group),
                         .version = res->membership_version, .position = res->position, .actor = a,
                         .actor_still_member = true, .owner = a->user_id, .changes = c, .count = n + 1};
  qim__group_announce(g, &ev, trace, res);
  qim_free(c);
}

int qim_group_create(qim_groups *g, const qim_authenticated_actor *actor, const qim_group_create_request *req,
                     const qim_trace_id *trace, qim_group_created *out, qim_group_change_result *change) {
  qim_user_id *inv;
  size_t n = users_unique(req->invitees, req->invitee_count, &actor->user_id, &inv);
  int rc = n + 1 > g->cfg.member_limit ? qim_err_raise(QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED) : 0;
  if (!rc) rc = create_conversation(g, actor, req->group_id);
  qim_group_change_result res = {.membership_version = 1};
  if (!rc && n) {
    qim_store_member_change *ch = qim_malloc(n * sizeof *ch);
    for (size_t i = 0; i < n; i++) ch[i] = change_of(QIM_STORE_MEMBER_ADD, inv[i], QIM_GROUP_ROLE_MEMBER);
    rc = apply(g, actor->tenant_id, req->group_id, ch, n, &res);
    qim_free(ch);
  }
  if (!rc) {
    QIM_LOGI(trace, "group.created", "members=%zu version=%llu", n + 1, (unsigned long long)res.membership_version);
    announce_create(g, actor, req->group_id, inv, n, trace, &res);
    *out = (qim_group_created){req->group_id, actor->user_id, res.membership_version};
    if (change) *change = res;
  }
  qim_free(inv);
  return rc;
}

/* ---- add, remove, ban, leave, role ---------------------------------------------------------------- */

int qim_group_add(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, const qim_user_id *users,
                  size_t count, qim_group_role role, const qim_trace_id *trace, qim_group_change_result *out) {
  if (count == 0 || qim_group_role_mode(role) == 0) return -EINVAL;
  if (count > g->cfg.member_limit) return qim_err_raise(QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  qim_store_conversation conv;
  uint32_t mode;
  int rc = qim__group_load_actor(g, actor, group, &conv, &mode);
  if (rc) return rc;
  qim_user_id *u;
  size_t n = users_unique(users, count, NULL, &u);
  qim_store_member_change *ch = qim_malloc(n * sizeof *ch);
  for (size_t i = 0; i < n; i++) ch[i] = change_of(QIM_STORE_MEMBER_ADD, u[i], role);
  rc = qim_group_rule_add(mode, role);
  if (!rc) rc = apply(g, actor->tenant_id, group, ch, n, out);
  if (!rc) {
    qim__group_event ev = event_of("add", actor, &conv, out);
    announce_uniform(g, &ev, u, n, "added", true, role, trace, out);
  }
  qim_free(ch);
  qim_free(u);
  qim_store_conversation_free(&conv);
  return rc;
}

/* Remove or ban another member. */
static int remove_other(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                        bool ban, const qim_trace_id *trace, qim_group_change_result *out) {
  qim_store_conversation conv;
  uint32_t mode, target;
  int rc = qim__group_load_actor(g, actor, group, &conv, &mode);
  if (rc) return rc;
  rc = load_target(g, actor->tenant_id, group, user, &target);
  if (!rc) rc = qim_group_rule_remove(mode, target);
  qim_store_member_change ch = change_of(ban ? QIM_STORE_MEMBER_BAN : QIM_STORE_MEMBER_REMOVE, user, 0);
  if (!rc) rc = apply(g, actor->tenant_id, group, &ch, 1, out);
  if (!rc) {
    qim__group_event ev = event_of(ban ? "ban" : "remove", actor, &conv, out);
    announce_uniform(g, &ev, &user, 1, ban ? "banned" : "removed", false, 0, trace, out);
  }
  qim_store_conversation_free(&conv);
  return rc;
}

int qim_group_remove(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                     const qim_trace_id *trace, qim_group_change_result *out) {
  if (qim_u128_eq(user.v, actor->user_id.v)) return qim_group_leave(g, actor, group, trace, out);
  return remove_other(g, actor, group, user, false, trace, out);
}

int qim_group_ban(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                  const qim_trace_id *trace, qim_group_change_result *out) {
  if (qim_u128_eq(user.v, actor->user_id.v)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return remove_other(g, actor, group, user, true, trace, out);
}

int qim_group_leave(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group,
                    const qim_trace_id *trace, qim_group_change_result *out) {
  qim_store_conversation conv;
  uint32_t mode;
  int rc = qim__group_load_actor(g, actor, group, &conv, &mode);
  if (rc) return rc;
  rc = qim_group_rule_leave(mode);
  qim_store_member_change ch = change_of(QIM_STORE_MEMBER_REMOVE, actor->user_id, 0);
  if (!rc) rc = apply(g, actor->tenant_id, group, &ch, 1, out);
  if (!rc) {
    qim__group_event ev = event_of("leave", actor, &conv, out);
    ev.actor_still_member = false;
    announce_uniform(g, &ev, &actor->user_id, 1, "left", false, 0, trace, out);
  }
  qim_store_conversation_free(&conv);
  return rc;
}

int qim_group_set_role(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                       qim_group_role role, const qim_trace_id *trace, qim_group_change_result *out) {
  if (qim_group_role_mode(role) == 0) return -EINVAL;
  if (qim_u128_eq(user.v, actor->user_id.v)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  qim_store_conversation conv;
  uint32_t mode, target;
  int rc = qim__group_load_actor(g, actor, group, &conv, &mode);
  if (rc) return rc;
  rc = load_target(g, actor->tenant_id, group, user, &target);
  if (!rc) rc = qim_group_rule_set_role(mode, target, role);
  qim_store_member_change ch = change_of(QIM_STORE_MEMBER_UPDATE, user, role);
  if (!rc) rc = apply(g, actor->tenant_id, group, &ch, 1, out);
  if (!rc) {
    qim__group_event ev = event_of("role", actor, &conv, out);
    announce_uniform(g, &ev, &user, 1, "role", true, role, trace, out);
  }
  qim_store_conversation_free(&conv);
  return rc;
}

/* ---- AdminMembershipChange ------------------------------------------------------------------------- */

/* A principal is internal when both names are given and, if a list is configured, the
 * service is on it. */
static int check_principal(qim_groups *g, const qim_internal_principal *p) {
  if (!p || !p->service_name || !*p->service_name || !p->subject || !*p->subject)
    return qim_err_raise(QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED);
  for (size_t i = 0; i < g->cfg.internal_service_count; i++)
    if (strcmp(g->cfg.internal_services[i], p->service_name) == 0) return 0;
  return g->cfg.internal_service_count ? qim_err_raise(QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED) : 0;
}

/* The changes of an admin change: adds (Members) then removals, with their JSON parts. */
static int admin_changes(const qim_user_id *add, size_t na, const qim_user_id *rem, size_t nr, qim_user_id owner,
                         qim_store_member_change *ch, qim__group_change *ann) {
  for (size_t i = 0; i < nr; i++) {
    if (users_contain(add, na, rem[i])) return -EINVAL;
    if (qim_u128_eq(rem[i].v, owner.v)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  }
  for (size_t i = 0; i < na; i++) {
    ch[i] = change_of(QIM_STORE_MEMBER_ADD, add[i], QIM_GROUP_ROLE_MEMBER);
    ann[i] = (qim__group_change){add[i], "added", true, QIM_GROUP_ROLE_MEMBER};
  }
  for (size_t i = 0; i < nr; i++) {
    ch[na + i] = change_of(QIM_STORE_MEMBER_REMOVE, rem[i], 0);
    ann[na + i] = (qim__group_change){rem[i], "removed", false, 0};
  }
  return 0;
}

int qim_group_admin_change(qim_groups *g, const qim_internal_principal *principal, qim_tenant_id tenant,
                           const qim_admin_membership_change *change, const qim_trace_id *trace,
                           qim_group_change_result *out) {
  int rc = check_principal(g, principal);
  if (rc) return rc;
  if (change->add_count + change->remove_count == 0) return -EINVAL;
  if (change->add_count > g->cfg.member_limit) return qim_err_raise(QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  qim_store_conversation conv;
  rc = load_group(g, tenant, change->group_id, &conv);
  if (rc) return rc;
  qim_user_id *add, *rem;
  size_t na = users_unique(change->add, change->add_count, NULL, &add);
  size_t nr = users_unique(change->remove, change->remove_count, NULL, &rem);
  qim_store_member_change *ch = qim_malloc((na + nr) * sizeof *ch);
  qim__group_change *ann = qim_malloc((na + nr) * sizeof *ann);
  rc = admin_changes(add, na, rem, nr, conv.owner_id, ch, ann);
  if (!rc) rc = apply(g, tenant, change->group_id, ch, na + nr, out);
  if (!rc) {
    QIM_LOGI(trace, "group.admin_change", "service=%s added=%zu removed=%zu version=%llu", principal->service_name,
             na, nr, (unsigned long long)out->membership_version);
    qim__group_event ev = event_of("admin", NULL, &conv, out);
    ev.principal = principal;
    ev.changes = ann;
    ev.count = na + nr;
    qim__group_announce(g, &ev, trace, out);
  }
  qim_free(ann);
  qim_free(ch);
  qim_free(add);
  qim_free(rem);
  qim_store_conversation_free(&conv);
  return rc;
}
