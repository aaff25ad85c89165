/*
 * del.c — {del}:
 *   msg    soft delete (hidden for the requester), hard delete and recall, judged per
 *          message by the history module (DESIGN.md §3, PROTOCOL.md §9). The reply is
 *          {ctrl 200 {del: <delid>}}; the {pres what:"del"} notices reach the other sessions
 *          from the pipeline: the history module commits every deletion as a Control
 *          message, and push.c turns it into {pres}.
 *   topic  the owner deletes its group (qim_group_delete: everyone leaves in one version,
 *          then the conversation is marked deleted); members learn it from the Control
 *          ({pres what:"gone"}, push.c).
 *   sub    an owner or admin evicts another member (qim_group_remove); the evicted
 *          member's sessions learn it from the Control (push.c).
 *   user, cred  not offered (501): qim has no account deletion nor credential validation.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

typedef struct del_job {
  gw_job j;
  qim_history_delete_req d;
  qim_store_seq_range *ranges;
} del_job;

static void del_destroy(gw_job *j) { qim_free(((del_job *)j)->ranges); }

static void del_run(gw_job *j) {
  del_job *b = (del_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  qim_history_delete_result res = {0};
  int rc = qim_history_delete(g->d.history, &b->d, &res);
  if (rc == 0)
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", json_pack("{sI}", "del", (json_int_t)res.delid),
                     qim__gw_now(g));
  else
    qim__gw_out_fail(&j->out, r->msg.id, NULL, rc, qim__gw_now(g));
  qim_history_delete_result_free(&res);
}

static void del_after(gw_job *j) {
  qim_gateway *g = j->loop->gw;
  if (g->d.fanout) qim_fanout_notify(g->d.fanout); /* the Controls travel the pipeline */
  qim__gw_job_finish(j);
}

/* ---- del topic, del sub --------------------------------------------------------------------- */

typedef struct group_job {
  gw_job j;
  qim_authenticated_actor actor;
  qim_conversation_id conv;
  bool topic;       /* del topic; else del sub of `user` */
  qim_user_id user;
  int rc;
} group_job;

static void group_run(gw_job *j) {
  group_job *b = (group_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  qim_group_change_result res;
  qim_group_id gid = {b->conv.v};
  b->rc = b->topic ? qim_group_delete(g->d.groups, &b->actor, gid, &r->trace, &res)
                   : qim_group_remove(g->d.groups, &b->actor, gid, b->user, &r->trace, &res);
  if (b->rc == QIM_E_GROUP_NOT_FOUND)
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 404, b->topic ? "topic not found" : "user not found", NULL,
                     qim__gw_now(g));
  else if (b->rc)
    qim__gw_out_fail(&j->out, r->msg.id, NULL, b->rc, qim__gw_now(g));
  else
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", NULL, qim__gw_now(g));
}

static void group_after(gw_job *j) {
  group_job *b = (group_job *)j;
  qim_gateway *g = j->loop->gw;
  if (b->rc == 0 && b->topic) qim__gw_session_detach(j->req->s, b->conv);
  if (g->d.fanout) qim_fanout_notify(g->d.fanout);
  qim__gw_job_finish(j);
}

/* del topic / del sub of a group topic; false when answered at once. */
static bool group_change(gw_req *r, qim_conversation_id conv, bool topic) {
  gw_session *s = r->s;
  const char *user = r->msg.u.del.user;
  qim_user_id u = {{0, 0}};
  if (!topic && (!user || qim_user_id_parse(user, strlen(user), &u) != 0)) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
    return false;
  }
  if (!topic && qim_u128_eq(u.v, s->user.v)) {
    /* One's own subscription ends with {leave unsub:true} (Tinode refuses it too). */
    qim__gw_ctrl(s, r, NULL, 403, "permission denied", NULL);
    return false;
  }
  group_job *b = qim_calloc(1, sizeof *b);
  b->actor = qim__gw_actor(s);
  b->conv = conv;
  b->topic = topic;
  b->user = u;
  b->j.req = r;
  b->j.run = group_run;
  b->j.after = group_after;
  qim__gw_job_start(s->loop, &b->j);
  return true;
}

void qim__gw_del(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_del *m = &r->msg.u.del;
  qim_conversation_id conv;
  if (m->what == QIM_PROTO_DEL_USER || m->what == QIM_PROTO_DEL_CRED) {
    /* No account deletion, no credential validation in qim (docs/gateway.md). */
    qim__gw_ctrl(s, r, NULL, 501, "not implemented", NULL);
  } else if (m->what == QIM_PROTO_DEL_TOPIC && qim__gw_group_conv(r->msg.topic, &conv) == 0) {
    if (group_change(r, conv, true)) return;
  } else if (m->what != QIM_PROTO_DEL_MSG && m->what != QIM_PROTO_DEL_SUB) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (!qim__gw_session_attached(s, conv)) {
    qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
  } else if (m->what == QIM_PROTO_DEL_SUB) {
    if (group_change(r, conv, false)) return;
  } else if (m->delseq.n == 0) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
  } else {
    del_job *b = qim_calloc(1, sizeof *b);
    b->ranges = qim_calloc(m->delseq.n, sizeof *b->ranges);
    for (size_t i = 0; i < m->delseq.n; i++)
      b->ranges[i] = (qim_store_seq_range){m->delseq.v[i].low, m->delseq.v[i].hi};
    b->d = (qim_history_delete_req){.actor = qim__gw_actor(s), .conversation_id = conv, .ranges = b->ranges,
                                    .range_count = m->delseq.n, .hard = m->hard, .trace_id = r->trace};
    b->j.req = r;
    b->j.run = del_run;
    b->j.after = del_after;
    b->j.destroy = del_destroy;
    qim__gw_job_start(s->loop, &b->j);
    return;
  }
  qim__gw_req_done(r);
}
