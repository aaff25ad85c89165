/*
 * note.c — {note}: typing notices (kp), receipts (read, recv) and data notes. None gets a
 * reply (PROTOCOL.md §10); their effects are ephemeral notices, as in Tinode:
 *   {info topic from what seq} to every other session attached to the topic, and for
 *   receipts {pres topic:"me" src:<topic> what seq} to the same user's sessions that are
 *   on `me` but not attached to the topic.
 * Receipts are stored first (history, forward-only: a stale seq changes nothing and
 * notifies nobody).
 *
 * Sessions of one topic live on every loop, so a notice is one shared frame posted as an
 * event to each loop (bounded per loop; a full loop drops the notice and counts it), and
 * each loop delivers it from its own indexes — to at most presence_fanout_max sessions
 * (the rest are counted as capped), so a notice to a huge topic costs a bounded amount.
 * Typing notices are limited per session and topic to one per typing_interval (Tinode's
 * SDK sends one every 3 s while the user types); the others are dropped and counted.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define EVENT_LIMIT 65536 /* notices queued per loop before new ones are dropped */

struct gw_event {
  qim_cq_item it;
  gw_loop *l;
  qim_tenant_id tenant;
  qim_conversation_id conv;
  qim_user_id user;     /* whose sessions get pres_me */
  uint64_t exclude;     /* the sending connection */
  qim_ws_frame *info;   /* to attached sessions; NULL = none */
  qim_ws_frame *info_peer; /* P2P: to the peer's attached sessions (topic = the sender's usr…) */
  qim_ws_frame *pres_me; /* to the user's `me` sessions not attached; NULL = none */
};

/* Sends f to s unless the notice's budget on this loop is spent (then counts it). */
static void send_bounded(gw_session *s, qim_ws_frame *f, uint32_t *budget, uint64_t *capped) {
  if (*budget == 0) {
    (*capped)++;
    return;
  }
  (*budget)--;
  qim_conn_send_frame(s->conn, f);
}

static void deliver(gw_loop *l, const gw_event *ev) {
  size_t n;
  gw_session *const *v;
  uint32_t budget = l->gw->d.cfg->presence_fanout_max;
  uint64_t capped = 0;
  if (ev->info) {
    v = qim__gw_index_find(&l->by_conv, qim__gw_key(ev->tenant, ev->conv.v), &n);
    for (size_t i = 0; i < n; i++) {
      bool peer = ev->info_peer && !qim_u128_eq(v[i]->user.v, ev->user.v);
      if (v[i]->conn && v[i]->conn_id != ev->exclude)
        send_bounded(v[i], peer ? ev->info_peer : ev->info, &budget, &capped);
    }
  }
  if (ev->pres_me) {
    v = qim__gw_index_find(&l->by_user, qim__gw_key(ev->tenant, ev->user.v), &n);
    for (size_t i = 0; i < n; i++)
      if (v[i]->conn && v[i]->me && v[i]->conn_id != ev->exclude && !qim__gw_session_attached(v[i], ev->conv))
        send_bounded(v[i], ev->pres_me, &budget, &capped);
  }
  if (capped) atomic_fetch_add(&l->gw->st_capped, capped);
}

void qim__gw_event_run(qim_cq_item *it) {
  gw_event *ev = (gw_event *)it;
  gw_loop *l = ev->l;
  qim__gw_loop_posted_done(l);
  if (!l->stopping) deliver(l, ev);
  qim_ws_frame_unref(ev->info);
  qim_ws_frame_unref(ev->info_peer);
  qim_ws_frame_unref(ev->pres_me);
  qim_free(ev);
}

/* `len` is read after the builder ran (it is the builder's output). */
static qim_ws_frame *frame_of(char *json, const size_t *len) {
  if (!json) return NULL;
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, json, *len);
  qim_free(json);
  return f;
}

/* Posts the notice to every loop (this one included). Takes the frames' references. */
static void broadcast(gw_session *s, qim_conversation_id conv, qim_ws_frame *info,
                      qim_ws_frame *info_peer, qim_ws_frame *pres_me) {
  qim_gateway *g = s->loop->gw;
  for (unsigned i = 0; i < g->nloops; i++) {
    gw_event *ev = qim_calloc(1, sizeof *ev);
    *ev = (gw_event){.it = {.run = qim__gw_event_run}, .l = &g->loops[i], .tenant = s->tenant, .conv = conv,
                     .user = s->user, .exclude = s->conn_id};
    ev->info = info ? qim_ws_frame_ref(info) : NULL;
    ev->info_peer = info_peer ? qim_ws_frame_ref(info_peer) : NULL;
    ev->pres_me = pres_me ? qim_ws_frame_ref(pres_me) : NULL;
    if (!qim__gw_loop_post(ev->l, &ev->it, EVENT_LIMIT)) {
      atomic_fetch_add(&g->st_dropped, 1);
      qim_ws_frame_unref(ev->info);
      qim_ws_frame_unref(ev->info_peer);
      qim_ws_frame_unref(ev->pres_me);
      qim_free(ev);
    }
  }
  qim_ws_frame_unref(info);
  qim_ws_frame_unref(info_peer);
  qim_ws_frame_unref(pres_me);
}

static const char *what_name(qim_proto_note_what w) {
  switch (w) {
  case QIM_PROTO_NOTE_KP: return "kp";
  case QIM_PROTO_NOTE_KPA: return "kpa";
  case QIM_PROTO_NOTE_KPV: return "kpv";
  case QIM_PROTO_NOTE_READ: return "read";
  case QIM_PROTO_NOTE_RECV: return "recv";
  case QIM_PROTO_NOTE_DATA: return "data";
  default: return "call";
  }
}

static void notify(gw_session *s, const char *topic, qim_conversation_id conv, const qim_proto_note *n,
                   bool receipt) {
  size_t len;
  qim_proto_info_frame inf = {.topic = topic, .from = s->uname, .what = what_name(n->what), .seq = n->seq,
                              .event = n->event, .payload = n->payload};
  qim_ws_frame *info = frame_of(qim_proto_info(&inf, &len), &len);
  qim_ws_frame *info_peer = NULL;
  qim_user_id peer;
  if (qim__gw_p2p_peer(s, topic, &peer) == 0) { /* the peer names the topic by the sender's id */
    inf.topic = s->uname;
    info_peer = frame_of(qim_proto_info(&inf, &len), &len);
  }
  qim_ws_frame *pres = NULL;
  if (receipt) {
    qim_proto_pres_frame p = {.topic = "me", .src = topic, .what = what_name(n->what), .seq = n->seq};
    pres = frame_of(qim_proto_pres(&p, &len), &len);
  }
  broadcast(s, conv, info, info_peer, pres);
}

/* ---- receipts ------------------------------------------------------------------------------------ */

typedef struct note_job {
  gw_job j;
  qim_history_note_req n;
  bool changed;
} note_job;

static void note_run(gw_job *j) {
  note_job *b = (note_job *)j;
  qim_history_note_result res = {0};
  int rc = qim_history_note(j->loop->gw->d.history, &b->n, &res);
  /* Notes have no reply: a bad seq or a missing right just drops it (PROTOCOL.md §10). */
  b->changed = rc == 0 && res.changed;
}

static void note_after(gw_job *j) {
  note_job *b = (note_job *)j;
  gw_req *r = j->req;
  if (b->changed && qim__gw_session_open(r->s)) notify(r->s, r->msg.topic, b->n.conversation_id, &r->msg.u.note, true);
  qim__gw_job_finish(j);
}

/* kp/kpa/kpv: at most one per typing_interval per session and topic (others: true). */
static bool typing_ok(gw_session *s, gw_attach *att, qim_proto_note_what w) {
  if (w != QIM_PROTO_NOTE_KP && w != QIM_PROTO_NOTE_KPA && w != QIM_PROTO_NOTE_KPV) return true;
  uint64_t now = uv_now(s->loop->uv) + 1; /* never 0: 0 means "none yet" */
  if (att->kp_at && now - att->kp_at < s->loop->gw->d.cfg->typing_interval_ms) {
    atomic_fetch_add(&s->loop->gw->st_kp_limited, 1);
    return false;
  }
  att->kp_at = now;
  return true;
}

void qim__gw_note(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_note *m = &r->msg.u.note;
  qim_conversation_id conv;
  if (qim__gw_topic_conv(s, r->msg.topic, &conv) != 0) {
    qim__gw_req_done(r); /* notes to topics we do not have are dropped */
    return;
  }
  gw_attach *att = qim__gw_session_attached(s, conv);
  if (!att && m->what != QIM_PROTO_NOTE_RECV) {
    qim__gw_ctrl(s, r, NULL, 409, "must attach first", NULL);
  } else if (m->what == QIM_PROTO_NOTE_READ || m->what == QIM_PROTO_NOTE_RECV) {
    note_job *b = qim_calloc(1, sizeof *b);
    b->n = (qim_history_note_req){.actor = qim__gw_actor(s), .conversation_id = conv,
                                  .what = m->what == QIM_PROTO_NOTE_READ ? QIM_HISTORY_NOTE_READ
                                                                          : QIM_HISTORY_NOTE_RECV,
                                  .seq = m->seq, .trace_id = r->trace};
    b->j.req = r;
    b->j.run = note_run;
    b->j.after = note_after;
    qim__gw_job_start(s->loop, &b->j);
    return;
  } else if (m->what != QIM_PROTO_NOTE_CALL && (att->mode & QIM_MODE_WRITE) && typing_ok(s, att, m->what)) {
    notify(s, r->msg.topic, conv, m, false); /* kp, kpa, kpv, data: relayed as they are */
  }
  qim__gw_req_done(r);
}
