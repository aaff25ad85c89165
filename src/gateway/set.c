/*
 * set.c — {set}: metadata and membership changes of `me` and of groups (Tinode MsgClientSet,
 * PROTOCOL.md; docs/gateway.md "Set").
 *
 *   desc.public   `me`: the account's public; a group: its public (needs A or O, Tinode's
 *                 rule for a group's description);
 *   desc.private  `me`: the account's private; a group: stored on the caller's own member
 *                 row (Tinode keeps `private` per subscription, seen by that user only);
 *   sub {mode}    without a user (or with one's own): one's own `want` — a store UPDATE of
 *                 one's own row, a new membership version; the group module has no call
 *                 for narrowing one's own want, so no Control message (docs/groups.md);
 *   sub {user,mode}  another user: mode N bans a current member (Tinode's given N); a
 *                 mode for a non-member invites it (adds it with the role the mode maps
 *                 to); a mode for a member changes its role. Both go through the group
 *                 module, so they get their membership version and Control message,
 *                 and the group's permission rules decide (docs/groups.md).
 * Roles from a mode string (DESIGN.md §3): O is refused (no ownership transfer), A makes
 * an Admin, W a Member, anything else a Guest.
 *
 * defacs, trusted, tags, cred and aux are not stored by qim: 501.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

typedef struct set_job {
  gw_job j;
  qim_authenticated_actor actor;
  bool me;
  qim_conversation_id conv;
  char *public_json, *private_json;
  bool has_sub;
  bool sub_other;               /* sub.user names another user */
  qim_user_id target;           /* sub_other */
  uint32_t mode;                /* sub.mode */
  uint32_t acs_want, acs_given; /* the changed subscription's modes (reply acs) */
  bool has_acs;
} set_job;

static void set_destroy(gw_job *j) {
  set_job *b = (set_job *)j;
  qim_free(b->public_json);
  qim_free(b->private_json);
}

/* Serializes a desc part for the store; -E2BIG beyond max_message_size. */
static int to_json(const json_t *v, uint32_t max, char **out) {
  *out = NULL;
  if (!v) return 0;
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!t) return -ENOMEM;
  int rc = strlen(t) > max ? -E2BIG : 0;
  if (rc == 0) *out = qim_strdup(t);
  free(t);
  return rc;
}

/* ---- members --------------------------------------------------------------------------------- */

/* The user's current row: 0 and *current (false when never a member, left or banned). */
static int member_row(qim_gateway *g, qim_tenant_id t, qim_conversation_id conv, qim_user_id u,
                      bool *current, qim_store_member *m) {
  qim_store_member_get_req mg = {.tenant_id = t, .conversation_id = conv, .user_id = u};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg);
  *current = rc == 0 && !mg.out.has_left_at && !mg.out.banned;
  *m = mg.out;
  if (rc == -ENOENT) {
    memset(m, 0, sizeof *m);
    return 0;
  }
  return rc;
}

int qim__gw_member_want(qim_gateway *g, qim_tenant_id t, qim_conversation_id conv, qim_user_id u,
                        uint32_t want, uint32_t given) {
  qim_store_member_change ch = {.op = QIM_STORE_MEMBER_UPDATE,
                                .user_id = u,
                                .role = QIM_GROUP_ROLE_MEMBER,
                                .mode_want = want & QIM_MODE_BITS,
                                .mode_given = given};
  if (qim_group_role_from_mode(given, &ch.role) != 0) ch.role = QIM_GROUP_ROLE_MEMBER;
  qim_store_members_change_req q = {.tenant_id = t,
                                    .conversation_id = conv,
                                    .changes = &ch,
                                    .change_count = 1,
                                    .member_limit = g->d.cfg->member_limit,
                                    .now = qim__gw_now(g)};
  return QIM_STORE_SYNC(g->d.store, conversations.members_change, &q);
}

/* The role a Tinode mode string asks for; -EPERM for O (no ownership transfer). */
static int role_of_mode(uint32_t mode, qim_group_role *role) {
  if (mode & QIM_MODE_OWNER) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  *role = mode & QIM_MODE_APPROVE ? QIM_GROUP_ROLE_ADMIN
          : mode & QIM_MODE_WRITE ? QIM_GROUP_ROLE_MEMBER
                                  : QIM_GROUP_ROLE_GUEST;
  return 0;
}

/* Another user's subscription: ban, invite or role change through the group module. */
static int set_other(set_job *b, qim_gateway *g, const gw_req *r) {
  qim_group_id gid = {b->conv.v};
  qim_group_change_result res;
  bool current;
  qim_store_member m;
  int rc = member_row(g, b->actor.tenant_id, b->conv, b->target, &current, &m);
  qim_group_role have = m.role;
  qim_store_member_free(&m);
  if (rc) return rc;
  if (b->mode == QIM_MODE_NONE) {
    rc = qim_group_ban(g->d.groups, &b->actor, gid, b->target, &r->trace, &res);
    b->acs_want = b->acs_given = QIM_MODE_NONE;
    b->has_acs = rc == 0;
    return rc;
  }
  qim_group_role role = QIM_GROUP_ROLE_GUEST;
  if ((rc = role_of_mode(b->mode, &role))) return rc;
  if (!current)
    rc = qim_group_add(g->d.groups, &b->actor, gid, &b->target, 1, role, &r->trace, &res);
  else if (have != role)
    rc = qim_group_set_role(g->d.groups, &b->actor, gid, b->target, role, &r->trace, &res);
  b->acs_want = b->acs_given = qim_group_role_mode(role);
  b->has_acs = rc == 0;
  return rc;
}

/* One's own want. */
static int set_own(set_job *b, qim_gateway *g) {
  bool current;
  qim_store_member m;
  int rc = member_row(g, b->actor.tenant_id, b->conv, b->actor.user_id, &current, &m);
  uint32_t want = m.mode_want, given = m.mode_given;
  qim_store_member_free(&m);
  if (rc) return rc;
  if (!current) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  uint32_t asked = b->mode & QIM_MODE_BITS;
  if (asked != want &&
      (rc = qim__gw_member_want(g, b->actor.tenant_id, b->conv, b->actor.user_id, asked, given)))
    return rc;
  b->acs_want = asked;
  b->acs_given = given;
  b->has_acs = true;
  return 0;
}

/* ---- descriptions ------------------------------------------------------------------------------
 */

static int set_group_desc(set_job *b, qim_gateway *g) {
  bool current;
  qim_store_member m;
  int rc = member_row(g, b->actor.tenant_id, b->conv, b->actor.user_id, &current, &m);
  uint32_t mode = current ? m.mode_want & m.mode_given : 0;
  qim_store_member_free(&m);
  if (rc) return rc;
  if (!current) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (b->private_json) {
    qim_store_member_private_req p = {.tenant_id = b->actor.tenant_id,
                                      .conversation_id = b->conv,
                                      .user_id = b->actor.user_id,
                                      .private_json = b->private_json,
                                      .now = qim__gw_now(g)};
    if ((rc = QIM_STORE_SYNC(g->d.store, conversations.member_private, &p))) return rc;
  }
  if (!b->public_json) return 0;
  /* Tinode: only the owner and admins change a group's description. */
  if (!(mode & (QIM_MODE_APPROVE | QIM_MODE_OWNER)))
    return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  qim_store_conv_update_req u = {.tenant_id = b->actor.tenant_id,
                                 .conversation_id = b->conv,
                                 .public_json = b->public_json,
                                 .now = qim__gw_now(g)};
  return QIM_STORE_SYNC(g->d.store, conversations.update, &u);
}

static void set_run(gw_job *j) {
  set_job *b = (set_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g);
  int rc = 0;
  if (b->me && (b->public_json || b->private_json)) {
    qim_store_user_update_req u = {.tenant_id = b->actor.tenant_id,
                                   .user_id = b->actor.user_id,
                                   .public_json = b->public_json,
                                   .private_json = b->private_json,
                                   .now = now};
    rc = QIM_STORE_SYNC(g->d.store, accounts.user_update, &u);
  } else if (!b->me && (b->public_json || b->private_json)) {
    rc = set_group_desc(b, g);
    if (rc == 0 && b->public_json) qim__gw_me_upd_group(g, &b->actor, b->conv); /* members' session lists */
  }
  if (rc == 0 && b->has_sub) rc = b->sub_other ? set_other(b, g, r) : set_own(b, g);
  if (rc) {
    qim__gw_out_fail(&j->out, r->msg.id, NULL, rc, now);
    return;
  }
  json_t *params = NULL;
  if (b->has_acs) {
    char w[QIM_MODE_STR_CAP], gv[QIM_MODE_STR_CAP], m[QIM_MODE_STR_CAP];
    qim_proto_mode_format(b->acs_want, w, sizeof w);
    qim_proto_mode_format(b->acs_given, gv, sizeof gv);
    qim_proto_mode_format(b->acs_want & b->acs_given ? b->acs_want & b->acs_given : QIM_MODE_NONE,
                          m, sizeof m);
    params = json_pack("{s{ssssss}}", "acs", "want", w, "given", gv, "mode", m);
  }
  qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", params, now);
}

static void set_after(gw_job *j) {
  qim_gateway *g = j->loop->gw;
  if (g->d.fanout) qim_fanout_notify(g->d.fanout); /* membership Controls travel the pipeline */
  qim__gw_job_finish(j);
}

/* ---- the request
 * --------------------------------------------------------------------------------- */

/* What qim does not store: 501 for any of it. */
static bool offered(const qim_proto_set_query *q, bool me) {
  if (q->what & ~(uint32_t)(QIM_PROTO_WHAT_DESC | QIM_PROTO_WHAT_SUB)) return false;
  if ((q->what & QIM_PROTO_WHAT_DESC) && (q->desc.has_defacs || q->desc.trusted_data ||
                                          (!q->desc.public_data && !q->desc.private_data)))
    return false;
  if ((q->what & QIM_PROTO_WHAT_SUB) && (me || q->sub.mode == QIM_MODE_UNSET)) return false;
  return true;
}

/* Fills the job from the request: 0, or the ctrl code to answer with. */
static int prepare(set_job *b, gw_session *s, const qim_proto_set_query *q) {
  uint32_t max = s->loop->gw->d.cfg->max_message_size;
  if ((q->what & QIM_PROTO_WHAT_DESC) && (to_json(q->desc.public_data, max, &b->public_json) ||
                                          to_json(q->desc.private_data, max, &b->private_json)))
    return 413;
  if (!(q->what & QIM_PROTO_WHAT_SUB)) return 0;
  b->has_sub = true;
  b->mode = q->sub.mode;
  if (q->sub.user && strcmp(q->sub.user, s->uname) != 0) {
    if (qim_user_id_parse(q->sub.user, strlen(q->sub.user), &b->target) != 0) return 400;
    b->sub_other = true;
  }
  return 0;
}

void qim__gw_set(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_set_query *q = &r->msg.u.set.q;
  bool me = strcmp(r->msg.topic, "me") == 0;
  qim_conversation_id conv = {{0, 0}};
  if (!me && qim__gw_group_conv(r->msg.topic, &conv) != 0) {
    bool p2p = strncmp(r->msg.topic, "usr", 3) == 0 || strcmp(r->msg.topic, "fnd") == 0;
    qim__gw_ctrl(s, r, NULL, p2p ? 501 : 404, p2p ? "not implemented" : "topic not found", NULL);
  } else if (!me && !qim__gw_session_attached(s, conv)) {
    qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
  } else if (!offered(q, me)) {
    qim__gw_ctrl(s, r, NULL, 501, "not implemented", NULL);
  } else {
    set_job *b = qim_calloc(1, sizeof *b);
    int code = prepare(b, s, q);
    if (code) {
      set_destroy(&b->j);
      qim_free(b);
      qim__gw_ctrl(s, r, NULL, code, code == 413 ? "too large" : "malformed", NULL);
      qim__gw_req_done(r);
      return;
    }
    b->actor = qim__gw_actor(s);
    b->me = me;
    b->conv = conv;
    b->j.req = r;
    b->j.run = set_run;
    b->j.after = set_after;
    b->j.destroy = set_destroy;
    qim__gw_job_start(s->loop, &b->j);
    return;
  }
  qim__gw_req_done(r);
}
