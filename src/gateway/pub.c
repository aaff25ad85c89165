/*
 * pub.c — {pub}: a message into the commit, acknowledged with {ctrl 202 {seq}} only
 * after the commit reports it Committed (durable: it survives kill -9). The session never
 * sends {data} itself: every receiver, the sender's other sessions included, gets the
 * message from the mailbox push once it went through fanout and materialization
 * (push.c). With noecho the sending session is left out of that push.
 *
 * Two paths. A plain message (no head.replace, no mentions) goes straight to the
 * asynchronous commit from the loop; the commit's reserve also moves the sender's
 * read/recv to the new seq. An edit (head.replace) or a message with mentions needs the history
 * module's checks (the replaced message must be the sender's; mentions of non-members are
 * dropped), which block, so it runs qim_history_publish in a worker.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

typedef struct pub_op {
  qim_commit_op op;
  gw_req *req;
  qim_authenticated_send send;
  qim_history_tinode_msg m;
} pub_op;

static void ack(gw_session *s, const gw_req *r, qim_conversation_seq seq) {
  qim__gw_ctrl(s, r, NULL, 202, "accepted", json_pack("{sI}", "seq", (json_int_t)seq));
  qim_gateway *g = s->loop->gw;
  if (g->d.fanout) qim_fanout_notify(g->d.fanout); /* fan out now rather than at the next poll */
}

static void pub_free(pub_op *p) {
  qim_history_tinode_msg_free(&p->m);
  qim_free(p);
}

static void pub_done(qim_commit_op *op) {
  pub_op *p = (pub_op *)op;
  gw_req *r = p->req;
  gw_session *s = r->s;
  gw_loop *l = s->loop;
  const qim_commit_result *res = &op->result;
  if (res->status == 0) {
    qim_conversation_seq seq = res->ack.coordinates.conversation_seq;
    ack(s, r, seq); /* the sender's read/recv moved to seq in the reserve (commit.h) */
  } else {
    if (res->status != QIM_E_COMMIT_PERMISSION_DENIED && res->status != QIM_E_COMMIT_RATE_LIMITED)
      QIM_LOGW(&r->trace, "gateway.pub_failed", "topic=%s err=%s", r->msg.topic, qim_err_name(res->status));
    qim__gw_fail(s, r, res->status);
    qim__gw_session_noecho_drop(s, &p->send.request.client_message_id); /* no echo will come */
  }
  qim__gw_pending_done(s, &p->send.request.client_message_id);
  pub_free(p);
  qim__gw_req_done(r);
  qim__gw_loop_release(l);
}

static void commit_path(gw_req *r, qim_conversation_id conv, const qim_client_message_id *cmid,
                        qim_history_tinode_msg *m) {
  gw_session *s = r->s;
  gw_loop *l = s->loop;
  pub_op *p = qim_calloc(1, sizeof *p);
  p->req = r;
  p->m = *m; /* owns content from here */
  memset(m, 0, sizeof *m);
  p->send.actor = qim__gw_actor(s);
  p->send.trace_id = r->trace;
  p->send.request = (qim_send_message){.request_id = strtoull(r->msg.id, NULL, 10),
                                       .client_message_id = *cmid,
                                       .conversation_id = conv,
                                       .content = p->m.content,
                                       .has_reply_to = p->m.has_reply_to,
                                       .reply_to_conversation_seq = p->m.reply_to};
  p->op.cq = l->cq;
  p->op.done = pub_done;
  p->op.data = p;
  qim__gw_loop_hold(l);
  qim__gw_pending_add(s, cmid);
  if (qim_commit_send(l->gw->d.commit, &p->send, &p->op) != 0) {
    qim__gw_fail(s, r, p->op.result.status);
    qim__gw_session_noecho_drop(s, cmid);
    qim__gw_pending_done(s, cmid);
    pub_free(p);
    qim__gw_req_done(r);
    qim__gw_loop_release(l);
  }
}

/* ---- edits and mentions: qim_history_publish in a worker ------------------------------------- */

typedef struct pub_job {
  gw_job j;
  qim_history_pub pub;
  int rc;
} pub_job;

static void pubjob_run(gw_job *j) {
  pub_job *b = (pub_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  qim_history_pub_result res;
  int rc = qim_history_publish(g->d.history, &b->pub, &res);
  b->rc = rc;
  if (rc == 0)
    qim__gw_out_ctrl(&j->out, r->msg.id, r->msg.topic, 202, "accepted",
                     json_pack("{sI}", "seq", (json_int_t)res.commit.ack.coordinates.conversation_seq),
                     qim__gw_now(g));
  else
    qim__gw_out_fail(&j->out, r->msg.id, r->msg.topic, rc, qim__gw_now(g));
}

static void pubjob_after(gw_job *j) {
  pub_job *b = (pub_job *)j;
  qim_gateway *g = j->loop->gw;
  gw_session *s = j->req->s;
  if (g->d.fanout) qim_fanout_notify(g->d.fanout);
  qim__gw_out_flush(s, &j->out); /* the 202 (or the error) first, then a {data} held meanwhile */
  if (b->rc) qim__gw_session_noecho_drop(s, &b->pub.client_message_id);
  qim__gw_pending_done(s, &b->pub.client_message_id);
  qim__gw_job_finish(j);
}

static void history_path(gw_req *r, qim_conversation_id conv, const qim_client_message_id *cmid) {
  gw_session *s = r->s;
  pub_job *b = qim_calloc(1, sizeof *b);
  b->pub = (qim_history_pub){.actor = qim__gw_actor(s), .conversation_id = conv, .client_message_id = *cmid,
                             .request_id = strtoull(r->msg.id, NULL, 10), .head = r->msg.u.pub.head,
                             .content = r->msg.u.pub.content, .trace_id = r->trace};
  b->j.req = r;
  b->j.run = pubjob_run;
  b->j.after = pubjob_after;
  qim__gw_pending_add(s, cmid);
  qim__gw_job_start(s->loop, &b->j);
}

void qim__gw_pub(gw_req *r) {
  gw_session *s = r->s;
  qim_gateway *g = s->loop->gw;
  const qim_proto_pub *m = &r->msg.u.pub;
  qim_conversation_id conv;
  gw_attach *att = NULL;
  if (strcmp(r->msg.topic, "me") == 0 || strcmp(r->msg.topic, "fnd") == 0) {
    qim__gw_ctrl(s, r, NULL, 403, "permission denied", NULL);
  } else if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (!(att = qim__gw_session_attached(s, conv))) {
    qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
  } else if (!(att->mode & QIM_MODE_WRITE)) {
    qim__gw_ctrl(s, r, NULL, 403, "permission denied", NULL);
  } else if (!m->content) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
  } else {
    qim_history_tinode_msg tm;
    int rc = qim_history_content_from_tinode(m->head, m->content, g->d.cfg->max_message_size, 64, &tm);
    if (rc) {
      qim__gw_fail(s, r, rc); /* 413 for MessageTooLarge, 400 for a bad head */
      qim__gw_req_done(r);
      return;
    }
    /* Without the client's cmid there is no retry safety, as in Tinode; the one the
     * session makes carries the noecho mark for push.c. */
    qim_client_message_id cmid = m->has_cmid ? m->cmid : qim__gw_session_cmid(s, m->noecho);
    if (m->has_cmid && m->noecho && qim__gw_session_noecho_add(s, &cmid)) {
      qim_history_tinode_msg_free(&tm);
      qim__gw_ctrl(s, r, NULL, 503, "too many noecho pubs awaiting delivery", NULL);
      qim__gw_req_done(r);
      return;
    }
    if (tm.has_replace || tm.mention_count) {
      qim_history_tinode_msg_free(&tm);
      history_path(r, conv, &cmid);
    } else {
      commit_path(r, conv, &cmid, &tm);
    }
    return;
  }
  qim__gw_req_done(r);
}
