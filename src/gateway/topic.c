/*
 * topic.c — {sub} and {leave}: attaching a session to `me` or a group, creating groups
 * (`new…`), joining them, leaving and unsubscribing. {set} is set.c.
 *
 * Joining. A user who is not a member subscribes to a group whose default mode for
 * authenticated users (defacs.auth) includes J: the gateway adds the user as a Member
 * through the group module's AdminMembershipChange, with the internal principal
 * {service "gateway", subject <the user>} — a join by policy rather than by another
 * member's invitation — so the join gets its membership version, its seq position and
 * its Control message like every other change (docs/groups.md).
 *
 * Reply order (PROTOCOL.md §5): the {ctrl} of the sub first, then the answers of an
 * embedded get, all with the request's id.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define GATEWAY_SERVICE "gateway"

int qim__gw_group_conv(const char *topic, qim_conversation_id *conv) {
  qim_group_id g;
  if (!topic || qim_group_id_parse(topic, strlen(topic), &g) != 0) return -ENOENT;
  *conv = qim_group_conversation(g);
  return 0;
}

static bool wants_get(const gw_req *r) { return r->msg.u.sub.get.present && r->msg.u.sub.get.what; }

/* ---- me ----------------------------------------------------------------------------------------- */

typedef struct get_job {
  gw_job j;
  qim_authenticated_actor actor;
  qim_conversation_id conv;
  char topic[QIM_TOPIC_NAME_CAP];
  bool me, p2p;
  qim_user_id peer; /* p2p */
  const qim_proto_get_query *q;
} get_job;

static void get_run(gw_job *j) {
  get_job *g = (get_job *)j;
  qim_gateway *gw = j->loop->gw;
  if (g->me)
    qim__gw_get_me(gw, &g->actor, j->req->msg.id, g->q, &j->out);
  else if (g->p2p)
    qim__gw_get_p2p(gw, &g->actor, g->conv, g->peer, g->topic, j->req->msg.id, g->q, &j->out);
  else
    qim__gw_get_group(gw, &g->actor, g->conv, g->topic, j->req->msg.id, g->q, &j->out);
}

/* Answers the embedded (or plain) get of request r in a worker, then finishes r. */
static void start_get(gw_req *r, bool me, qim_conversation_id conv, const char *topic,
                      const qim_proto_get_query *q) {
  get_job *g = qim_calloc(1, sizeof *g);
  g->actor = qim__gw_actor(r->s);
  g->conv = conv;
  g->me = me;
  g->q = q;
  g->p2p = !me && qim__gw_p2p_peer(r->s, topic, &g->peer) == 0;
  snprintf(g->topic, sizeof g->topic, "%s", topic);
  g->j.req = r;
  g->j.run = get_run;
  qim__gw_job_start(r->s->loop, &g->j);
}

void qim__gw_get(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_get_query *q = &r->msg.u.get.q;
  qim_conversation_id conv = {{0, 0}};
  if (strcmp(r->msg.topic, "me") == 0) {
    start_get(r, true, conv, "me", q);
    return;
  }
  if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (!qim__gw_session_attached(s, conv) &&
             !(q->what & (QIM_PROTO_WHAT_DESC | QIM_PROTO_WHAT_SUB))) {
    qim__gw_ctrl(s, r, NULL, 403, "permission denied", NULL);
  } else {
    start_get(r, false, conv, r->msg.topic, q);
    return;
  }
  qim__gw_req_done(r);
}

static void sub_me(gw_req *r) {
  gw_session *s = r->s;
  if (s->me) {
    qim__gw_ctrl(s, r, NULL, 304, "already subscribed", NULL);
    qim__gw_req_done(r);
    return;
  }
  qim__gw_session_me(s, true);
  qim__gw_ctrl(s, r, NULL, 200, "ok", NULL);
  if (wants_get(r))
    start_get(r, true, (qim_conversation_id){{0, 0}}, "me", &r->msg.u.sub.get);
  else
    qim__gw_req_done(r);
}

/* ---- groups ----------------------------------------------------------------------------------------- */

typedef struct sub_job {
  gw_job j;
  qim_authenticated_actor actor;
  char uname[QIM_TOPIC_NAME_CAP];
  bool create;
  qim_conversation_id conv;
  char topic[QIM_TOPIC_NAME_CAP];
  char *public_json;
  uint32_t want;   /* set.sub.mode: the mode the user asks for; QIM_MODE_UNSET = the default */
  int rc;          /* 0: attach with `mode` */
  uint32_t mode, want_out, given_out;
  qim_conversation_seq latest; /* the conversation's seq when attaching (push.c skips older) */
} sub_job;

static void sub_destroy(gw_job *j) { qim_free(((sub_job *)j)->public_json); }

static int create_group(sub_job *b, qim_gateway *g, const gw_req *r) {
  qim_group_id gid = {qim_u128_random()};
  qim_group_create_request cr = {.group_id = gid};
  qim_group_created created;
  int rc = qim_group_create(g->d.groups, &b->actor, &cr, &r->trace, &created, NULL);
  if (rc) return rc;
  b->conv = qim_group_conversation(gid);
  qim_group_id_format(gid, b->topic, sizeof b->topic);
  if (b->public_json) {
    qim_store_conv_update_req u = {.tenant_id = b->actor.tenant_id, .conversation_id = b->conv,
                                   .public_json = b->public_json, .now = qim__gw_now(g)};
    rc = QIM_STORE_SYNC(g->d.store, conversations.update, &u);
    if (rc) QIM_LOGW(&r->trace, "gateway.group_public_failed", "topic=%s err=%s", b->topic, qim_err_name(rc));
  }
  b->mode = b->want_out = b->given_out = qim_group_role_mode(QIM_GROUP_ROLE_OWNER);
  QIM_LOGI(&r->trace, "gateway.group_created", "topic=%s owner=%s", b->topic, b->uname);
  return 0;
}

/* The user's own `want` (Tinode: {sub set:{sub:{mode}}}): stored as the member's want mode,
 * so the effective mode is want & given. A change of the user's own row that the group
 * rules leave to the user; the store makes it a new membership version. */
static int apply_want(sub_job *b, qim_gateway *g, uint32_t given) {
  return qim__gw_member_want(g, b->actor.tenant_id, b->conv, b->actor.user_id, b->want, given);
}

/* Reads the actor's member row: 0 and *current when it is a current member. */
static int own_row(sub_job *b, qim_gateway *g, bool *current, uint32_t *want, uint32_t *given) {
  qim_store_member_get_req mg = {.tenant_id = b->actor.tenant_id, .conversation_id = b->conv,
                                 .user_id = b->actor.user_id};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg);
  if (rc == 0 && mg.out.banned) rc = qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  *current = rc == 0 && !mg.out.has_left_at;
  *want = mg.out.mode_want;
  *given = mg.out.mode_given;
  qim_store_member_free(&mg.out);
  return rc == -ENOENT ? 0 : rc;
}

/* A live group the user may join by default; fills b->latest. */
static int joinable(sub_job *b, qim_gateway *g, bool need_join) {
  qim_store_conv_get_req cg = {.tenant_id = b->actor.tenant_id, .conversation_id = b->conv};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.get, &cg);
  if (rc == -ENOENT || (rc == 0 && (cg.out.kind != QIM_CONVERSATION_GROUP || cg.out.deleted)))
    rc = qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  else if (rc == 0 && need_join && !(cg.out.default_mode_auth & QIM_MODE_JOIN))
    rc = qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (rc == 0) b->latest = cg.out.latest_seq;
  qim_store_conversation_free(&cg.out);
  return rc;
}

/* Joins (or re-attaches) the actor to b->conv; *fresh says whether its access changed. */
static int join_group(sub_job *b, qim_gateway *g, const gw_req *r, bool *fresh) {
  *fresh = false;
  bool current;
  uint32_t want, given;
  int rc = own_row(b, g, &current, &want, &given);
  if (rc == 0) rc = joinable(b, g, !current);
  if (rc) return rc;
  if (!current) {
    qim_internal_principal p = {.service_name = GATEWAY_SERVICE, .subject = b->uname};
    qim_admin_membership_change ch = {.group_id = {b->conv.v}, .add = &b->actor.user_id, .add_count = 1};
    qim_group_change_result res;
    if ((rc = qim_group_admin_change(g->d.groups, &p, b->actor.tenant_id, &ch, &r->trace, &res))) return rc;
    *fresh = true;
    want = given = qim_group_role_mode(QIM_GROUP_ROLE_MEMBER);
  }
  if (b->want != QIM_MODE_UNSET && (b->want & QIM_MODE_BITS) != want) {
    if ((rc = apply_want(b, g, given))) return rc;
    want = b->want & QIM_MODE_BITS;
    *fresh = true;
  }
  b->want_out = want;
  b->given_out = given;
  b->mode = want & given;
  return 0;
}

static void sub_run(gw_job *j) {
  sub_job *b = (sub_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g);
  bool fresh = b->create;
  int rc = b->create ? create_group(b, g, r) : join_group(b, g, r, &fresh);
  b->rc = rc;
  /* Errors are reported on the name the client sent (new… included). */
  if (rc == QIM_E_GROUP_NOT_FOUND) {
    qim__gw_out_ctrl(&j->out, r->msg.id, r->msg.topic, 404, "topic not found", NULL, now);
    return;
  }
  if (rc) {
    qim__gw_out_fail(&j->out, r->msg.id, r->msg.topic, rc, now);
    return;
  }
  json_t *params = NULL;
  if (fresh) params = json_pack("{so}", "acs", qim__gw_acs_json(b->want_out, b->given_out));
  if (b->create) json_object_set_new(params, "tmpname", json_string(r->msg.topic));
  qim__gw_out_ctrl(&j->out, r->msg.id, b->topic, 200, "ok", params, now);
  if (wants_get(r)) qim__gw_get_group(g, &b->actor, b->conv, b->topic, r->msg.id, &r->msg.u.sub.get, &j->out);
}

static void sub_after(gw_job *j) {
  sub_job *b = (sub_job *)j;
  gw_session *s = j->req->s;
  if (b->rc == 0 && qim__gw_session_open(s) &&
      qim__gw_session_attach(s, b->conv, b->topic, b->mode, b->latest) != 0) {
    /* Cannot happen in practice: the limit was checked before the job. */
    QIM_LOGW(&j->req->trace, "gateway.attach_failed", "topic=%s", b->topic);
  }
  qim__gw_job_finish(j);
}

static void sub_group(gw_req *r, bool create) {
  gw_session *s = r->s;
  qim_gateway *g = s->loop->gw;
  qim_conversation_id conv = {{0, 0}};
  if (!create && qim__gw_group_conv(r->msg.topic, &conv) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (!create && qim__gw_session_attached(s, conv)) {
    qim__gw_ctrl(s, r, NULL, 304, "already subscribed", NULL);
  } else if (s->natt >= g->o.attach_max) {
    qim__gw_ctrl(s, r, NULL, 422, "policy violation", NULL);
  } else {
    sub_job *b = qim_calloc(1, sizeof *b);
    const qim_proto_set_query *set = &r->msg.u.sub.set;
    if (create && set->present && set->desc.public_data) {
      char *t = json_dumps(set->desc.public_data, JSON_COMPACT | JSON_ENCODE_ANY);
      if (t && strlen(t) <= g->d.cfg->max_message_size) b->public_json = qim_strdup(t);
      free(t);
    }
    b->actor = qim__gw_actor(s);
    snprintf(b->uname, sizeof b->uname, "%s", s->uname);
    b->want = set->present && set->sub.present && !set->sub.user ? set->sub.mode : QIM_MODE_UNSET;
    b->create = create;
    b->conv = conv;
    snprintf(b->topic, sizeof b->topic, "%s", r->msg.topic);
    b->j.req = r;
    b->j.run = sub_run;
    b->j.after = sub_after;
    b->j.destroy = sub_destroy;
    qim__gw_job_start(s->loop, &b->j);
    return;
  }
  qim__gw_req_done(r);
}

void qim__gw_sub(gw_req *r) {
  const char *t = r->msg.topic;
  if (strcmp(t, "me") == 0)
    sub_me(r);
  else if (strncmp(t, "new", 3) == 0)
    sub_group(r, true);
  else if (strncmp(t, "grp", 3) == 0)
    sub_group(r, false);
  else if (strncmp(t, "usr", 3) == 0)
    qim__gw_sub_p2p(r); /* p2p.c */
  else {
    /* Channels, fnd, sys and slf are not offered by this server; P2P topics are named by
     * the peer's usr… id, never p2p…. */
    bool known = strcmp(t, "fnd") == 0 || strcmp(t, "sys") == 0 || strcmp(t, "slf") == 0 ||
                 strncmp(t, "nch", 3) == 0 || strncmp(t, "chn", 3) == 0 ||
                 strncmp(t, "p2p", 3) == 0;
    qim__gw_ctrl(r->s, r, NULL, known ? 501 : 404, known ? "not implemented" : "topic not found", NULL);
    qim__gw_req_done(r);
  }
}

/* ---- leave ------------------------------------------------------------------------------------------ */

typedef struct leave_job {
  gw_job j;
  qim_authenticated_actor actor;
  qim_conversation_id conv;
  int rc;
} leave_job;

static void leave_run(gw_job *j) {
  leave_job *b = (leave_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  qim_group_change_result res;
  b->rc = qim_group_leave(g->d.groups, &b->actor, (qim_group_id){b->conv.v}, &r->trace, &res);
  if (b->rc)
    qim__gw_out_fail(&j->out, r->msg.id, NULL, b->rc, qim__gw_now(g));
  else
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", NULL, qim__gw_now(g));
}

static void leave_after(gw_job *j) {
  leave_job *b = (leave_job *)j;
  if (b->rc == 0) qim__gw_session_detach(j->req->s, b->conv);
  qim__gw_job_finish(j);
}

void qim__gw_leave(gw_req *r) {
  gw_session *s = r->s;
  bool unsub = r->msg.u.leave.unsub;
  qim_conversation_id conv;
  if (strcmp(r->msg.topic, "me") == 0 || strcmp(r->msg.topic, "fnd") == 0) {
    if (unsub)
      qim__gw_ctrl(s, r, NULL, 403, "permission denied", NULL);
    else if (!s->me || strcmp(r->msg.topic, "fnd") == 0)
      qim__gw_ctrl(s, r, NULL, 304, "not joined", NULL);
    else {
      qim__gw_session_me(s, false);
      qim__gw_ctrl(s, r, NULL, 200, "ok", NULL);
    }
  } else if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0 ||
             !qim__gw_session_attached(s, conv)) {
    if (unsub)
      qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
    else
      qim__gw_ctrl(s, r, NULL, 304, "not joined", NULL);
  } else if (unsub && strncmp(r->msg.topic, "usr", 3) == 0) {
    qim__gw_ctrl(s, r, NULL, 501, "not implemented", NULL); /* unsubscribing from a P2P topic */
  } else if (unsub) {
    leave_job *b = qim_calloc(1, sizeof *b);
    b->actor = qim__gw_actor(s);
    b->conv = conv;
    b->j.req = r;
    b->j.run = leave_run;
    b->j.after = leave_after;
    qim__gw_job_start(s->loop, &b->j);
    return;
  } else {
    qim__gw_session_detach(s, conv);
    qim__gw_ctrl(s, r, NULL, 200, "ok", NULL);
  }
  qim__gw_req_done(r);
}
