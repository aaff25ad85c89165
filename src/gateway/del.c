/*
 * del.c — {del what:"msg"}: soft delete (hidden for the requester), hard delete and
 * recall, judged per message by the history module (DESIGN.md §3, PROTOCOL.md §9). The
 * reply is {ctrl 200 {del: <delid>}}; the {pres what:"del"} notices reach the other
 * sessions from the pipeline: the history module commits every deletion as a Control
 * message, and push.c turns it into {pres}.
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

void qim__gw_del(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_del *m = &r->msg.u.del;
  qim_conversation_id conv;
  if (m->what != QIM_PROTO_DEL_MSG) {
    /* Deleting topics, subscriptions, users and credentials is not offered. */
    qim__gw_ctrl(s, r, NULL, 501, "not implemented", NULL);
  } else if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0) {
    qim__gw_ctrl(s, r, NULL, 404, "topic not found", NULL);
  } else if (!qim__gw_session_attached(s, conv)) {
    qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
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
