/*
 * p2p.c — one-to-one (P2P) topics: {sub} to `usr…` creates or joins the direct
 * conversation of the two users, and the topic-name ↔ conversation mapping every handler
 * uses (PROTOCOL.md §3).
 *
 * Naming. Each side names the topic by the OTHER user's id (`usr…`), as in Tinode. The
 * conversation behind it is qim_conversation_id_direct(tenant, a, b) (include/qim/ids.h):
 * a pure function of the tenant and the unordered pair, so both sides find the same
 * conversation without a lookup row, and no `p2p…` name ever reaches the wire.
 *
 * Creation. The first {sub} of either side creates the conversation in the store with
 * both users as members, mode JRWPA each (Tinode's P2P default); a concurrent creation by
 * the other side is an -EEXIST that simply means "it exists now". The peer learns of it
 * by {pres topic:"me" what:"acs" src:<creator>} on its `me` sessions (me.c). Delivery of
 * messages uses the conversation's DIRECT audience (commit_send.c: both users), so fanout
 * reaches exactly the two mailboxes.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define P2P_MODE (QIM_MODE_JOIN | QIM_MODE_READ | QIM_MODE_WRITE | QIM_MODE_PRES | QIM_MODE_APPROVE)

int qim__gw_p2p_peer(const gw_session *s, const char *topic, qim_user_id *peer) {
  if (!topic || strncmp(topic, "usr", 3) != 0 || qim_user_id_parse(topic, strlen(topic), peer) != 0)
    return -ENOENT;
  if (qim_u128_eq(peer->v, s->user.v)) return -ENOENT; /* one's own id is not a P2P topic */
  return 0;
}

int qim__gw_topic_conv(const gw_session *s, const char *topic, qim_conversation_id *conv) {
  qim_user_id peer;
  if (qim__gw_p2p_peer(s, topic, &peer) == 0) {
    *conv = qim_conversation_id_direct(s->tenant, s->user, peer);
    return 0;
  }
  return qim__gw_group_conv(topic, conv);
}

void qim__gw_conv_topic(const qim_store_conversation *c, qim_user_id viewer, char *out,
                        size_t cap) {
  if (c->kind == QIM_CONVERSATION_DIRECT) {
    bool first = qim_u128_eq(c->direct_users[0].v, viewer.v);
    qim_user_id_format(c->direct_users[first ? 1 : 0], out, cap);
  } else {
    qim_group_id_format((qim_group_id){c->conversation_id.v}, out, cap);
  }
}

json_t *qim__gw_acs_json(uint32_t want, uint32_t given) {
  char w[QIM_MODE_STR_CAP], gv[QIM_MODE_STR_CAP], m[QIM_MODE_STR_CAP];
  qim_proto_mode_format(want, w, sizeof w);
  qim_proto_mode_format(given, gv, sizeof gv);
  qim_proto_mode_format(want & given, m, sizeof m);
  return json_pack("{ssssss}", "want", w, "given", gv, "mode", m);
}

typedef struct p2p_job {
  gw_job j;
  qim_authenticated_actor actor;
  qim_user_id peer;
  char uname[QIM_TOPIC_NAME_CAP];
  qim_conversation_id conv;
  uint32_t want; /* set.sub.mode, or QIM_MODE_UNSET */
  int rc;
  bool created;
  uint32_t mode;
  qim_conversation_seq latest;
} p2p_job;

/* Creates the direct conversation unless it exists; b->created says who made it. */
static int ensure_conv(p2p_job *b, qim_gateway *g) {
  qim_store_conv_get_req cg = {.tenant_id = b->actor.tenant_id, .conversation_id = b->conv};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.get, &cg);
  if (rc == 0) {
    b->latest = cg.out.latest_seq;
    rc = cg.out.deleted || cg.out.kind != QIM_CONVERSATION_DIRECT ? -ENOENT : 0;
    qim_store_conversation_free(&cg.out);
    return rc;
  }
  if (rc != -ENOENT) return rc;
  qim_store_user_get_req ug = {.tenant_id = b->actor.tenant_id, .user_id = b->peer};
  if ((rc = QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug)))
    return rc; /* no such user: -ENOENT */
  qim_store_user_free(&ug.out);
  bool first = qim_u128_cmp(b->actor.user_id.v, b->peer.v) < 0;
  qim_store_conv_create_req cr = {.conv = {.tenant_id = b->actor.tenant_id,
                                           .conversation_id = b->conv,
                                           .kind = QIM_CONVERSATION_DIRECT,
                                           .direct_users = {first ? b->actor.user_id : b->peer,
                                                            first ? b->peer : b->actor.user_id}},
                                  .now = qim__gw_now(g)};
  rc = QIM_STORE_SYNC(g->d.store, conversations.create, &cr);
  if (rc == -EEXIST) return 0; /* the peer created it meanwhile */
  b->created = rc == 0;
  return rc;
}

/* The user's own row (want/given) after applying set.sub.mode; *fresh when it changed. */
static int own_mode(p2p_job *b, qim_gateway *g, uint32_t *want, uint32_t *given, bool *fresh) {
  qim_store_member_get_req mg = {
      .tenant_id = b->actor.tenant_id, .conversation_id = b->conv, .user_id = b->actor.user_id};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg);
  if (rc) return rc;
  bool gone = mg.out.has_left_at || mg.out.banned;
  *want = mg.out.mode_want;
  *given = mg.out.mode_given;
  qim_store_member_free(&mg.out);
  if (gone) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (b->want == QIM_MODE_UNSET || (b->want & QIM_MODE_BITS) == *want) return 0;
  qim_store_member_change ch = {.op = QIM_STORE_MEMBER_UPDATE,
                                .user_id = b->actor.user_id,
                                .role = QIM_GROUP_ROLE_MEMBER,
                                .mode_want = b->want & QIM_MODE_BITS,
                                .mode_given = *given};
  qim_store_members_change_req q = {.tenant_id = b->actor.tenant_id,
                                    .conversation_id = b->conv,
                                    .changes = &ch,
                                    .change_count = 1,
                                    .now = qim__gw_now(g)};
  if ((rc = QIM_STORE_SYNC(g->d.store, conversations.members_change, &q))) return rc;
  *want = b->want & QIM_MODE_BITS;
  *fresh = true;
  return 0;
}

static void p2p_run(gw_job *j) {
  p2p_job *b = (p2p_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g);
  uint32_t want = 0, given = 0;
  bool fresh = false;
  int rc = ensure_conv(b, g);
  if (rc == 0) rc = own_mode(b, g, &want, &given, &fresh);
  b->rc = rc;
  if (rc == -ENOENT) {
    qim__gw_out_ctrl(&j->out, r->msg.id, r->msg.topic, 404, "topic not found", NULL, now);
    return;
  }
  if (rc) {
    qim__gw_out_fail(&j->out, r->msg.id, r->msg.topic, rc, now);
    return;
  }
  b->mode = want & given;
  json_t *params =
      b->created || fresh ? json_pack("{so}", "acs", qim__gw_acs_json(want, given)) : NULL;
  qim__gw_out_ctrl(&j->out, r->msg.id, r->msg.topic, 200, "ok", params, now);
  if (r->msg.u.sub.get.present && r->msg.u.sub.get.what)
    qim__gw_get_p2p(g, &b->actor, b->conv, b->peer, r->msg.topic, r->msg.id, &r->msg.u.sub.get,
                    &j->out);
}

static void p2p_after(gw_job *j) {
  p2p_job *b = (p2p_job *)j;
  gw_session *s = j->req->s;
  qim_gateway *g = j->loop->gw;
  if (b->rc == 0 && qim__gw_session_open(s) &&
      qim__gw_session_attach(s, b->conv, j->req->msg.topic, b->mode, b->latest) != 0)
    QIM_LOGW(&j->req->trace, "gateway.attach_failed", "topic=%s", j->req->msg.topic);
  if (b->rc == 0 && b->created) {
    /* The peer's contact list gains the creator (Tinode: pres acs on the peer's me). */
    char mode[QIM_MODE_STR_CAP];
    qim_proto_mode_format(P2P_MODE, mode, sizeof mode);
    qim_proto_pres_frame pr = {
        .topic = "me", .src = b->uname, .what = "acs", .dacs_want = mode, .dacs_given = mode};
    qim__gw_me_pres(g, b->actor.tenant_id, b->peer, &pr);
  }
  qim__gw_job_finish(j);
}

void qim__gw_sub_p2p(gw_req *r) {
  gw_session *s = r->s;
  qim_gateway *g = s->loop->gw;
  qim_user_id peer;
  qim_conversation_id conv = {{0, 0}};
  if (qim__gw_p2p_peer(s, r->msg.topic, &peer) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (qim__gw_session_attached(
                 s, (conv = qim_conversation_id_direct(s->tenant, s->user, peer)))) {
    qim__gw_ctrl(s, r, NULL, 304, "already subscribed", NULL);
  } else if (s->natt >= g->o.attach_max) {
    qim__gw_ctrl(s, r, NULL, 422, "policy violation", NULL);
  } else {
    const qim_proto_set_query *set = &r->msg.u.sub.set;
    p2p_job *b = qim_calloc(1, sizeof *b);
    b->actor = qim__gw_actor(s);
    b->peer = peer;
    b->conv = conv;
    snprintf(b->uname, sizeof b->uname, "%s", s->uname);
    b->want = set->present && set->sub.present && !set->sub.user ? set->sub.mode : QIM_MODE_UNSET;
    b->j.req = r;
    b->j.run = p2p_run;
    b->j.after = p2p_after;
    qim__gw_job_start(s->loop, &b->j);
    return;
  }
  qim__gw_req_done(r);
}
