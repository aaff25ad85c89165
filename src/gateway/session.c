/*
 * session.c — one Tinode session per WebSocket connection: the state machine
 * (connected → {hi} → logged in), the per-session request queue, dispatch to the
 * handlers, the reply helpers every handler uses, and worker jobs.
 *
 * Request order. Tinode clients match replies by id and mostly wait for each reply, but
 * nothing stops a client from sending `sub` and `pub` back to back. A session therefore
 * runs its requests in arrival order, with one rule: a request that changes the session
 * (hi, acc, login, sub, leave, set, del) runs alone — the ones before it must have
 * finished and the ones after it wait — while pub, get and note may overlap each other
 * (a client pipelining publishes must not pay one commit latency per message). The queue
 * is bounded (options.queue_max): beyond it a request is answered 503 at once.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

/* ---- references and attachments ----------------------------------------------------------------- */

void qim__gw_session_ref(gw_session *s) { s->refs++; }

void qim__gw_session_unref(gw_session *s) {
  if (--s->refs) return;
  for (size_t i = 0; i < s->npend; i++) qim_ws_frame_unref(s->pend[i].held);
  qim_free(s->pend);
  qim_free(s->noecho);
  qim_free(s->att);
  qim_free(s);
}

gw_attach *qim__gw_session_attached(gw_session *s, qim_conversation_id conv) {
  for (size_t i = 0; i < s->natt; i++)
    if (qim_u128_eq(s->att[i].conv.v, conv.v)) return &s->att[i];
  return NULL;
}

int qim__gw_session_attach(gw_session *s, qim_conversation_id conv, const char *topic, uint32_t mode,
                          qim_conversation_seq since) {
  gw_attach *a = qim__gw_session_attached(s, conv);
  if (a) {
    a->mode = mode;
    return 0;
  }
  if (s->natt >= s->loop->gw->o.attach_max) return -ENOSPC;
  if (s->natt == s->catt) {
    s->catt = s->catt ? s->catt * 2 : 4;
    s->att = qim_realloc(s->att, s->catt * sizeof *s->att);
  }
  a = &s->att[s->natt++];
  a->conv = conv;
  a->mode = mode;
  a->since = since;
  a->kp_at = 0;
  snprintf(a->topic, sizeof a->topic, "%s", topic);
  qim__gw_index_add(&s->loop->by_conv, qim__gw_key(s->tenant, conv.v), s);
  qim__gw_presence_attach(s, conv, +1);
  return 0;
}

void qim__gw_session_detach(gw_session *s, qim_conversation_id conv) {
  gw_attach *a = qim__gw_session_attached(s, conv);
  if (!a) return;
  qim__gw_index_remove(&s->loop->by_conv, qim__gw_key(s->tenant, conv.v), s);
  qim__gw_presence_attach(s, conv, -1);
  *a = s->att[--s->natt];
}

void qim__gw_session_me(gw_session *s, bool on) {
  if (s->me == on) return;
  s->me = on;
  qim__gw_presence_me(s, on ? +1 : -1);
}

void qim__gw_session_login(gw_session *s, qim_user_id user) {
  qim_gateway *g = s->loop->gw;
  s->state = GW_AUTH;
  s->user = user;
  qim_user_id_format(user, s->uname, sizeof s->uname);
  qim__gw_index_add(&s->loop->by_user, qim__gw_key(s->tenant, user.v), s);
  qim_mailbox_route_add(g->d.mailbox, s->tenant, user, s->loop->cs);
  s->routed = true;
  atomic_fetch_add(&g->st_auth, 1);
}

/* The last byte of a session-made cmid: bit 7 always set (the id is never all-zero), bit 0
 * the noecho mark. */
#define CMID_MARK 0x80u
#define CMID_NOECHO 0x01u

qim_client_message_id qim__gw_session_cmid(gw_session *s, bool noecho) {
  qim_client_message_id id;
  memcpy(id.b, s->nonce, 8);
  uint64_t n = ++s->made;
  for (int i = 0; i < 7; i++) id.b[8 + i] = (uint8_t)(n >> (48 - 8 * i));
  id.b[15] = (uint8_t)(CMID_MARK | (noecho ? CMID_NOECHO : 0));
  return id;
}

/* Session-made cmids carry the noecho decision themselves, so any number of pubs may be
 * in the pipeline at once; client-chosen cmids (qim's cmid extension) are remembered until
 * their echo comes back (see GW_NOECHO_MAX). */
static gw_noecho *noecho_find(gw_session *s, const qim_client_message_id *cmid) {
  for (size_t i = 0; i < s->nnoecho; i++)
    if (memcmp(s->noecho[i].cmid.b, cmid->b, sizeof cmid->b) == 0) return &s->noecho[i];
  return NULL;
}

static void noecho_remove(gw_session *s, gw_noecho *e) {
  *e = s->noecho[--s->nnoecho];
}

bool qim__gw_session_noecho_take(gw_session *s, const qim_client_message_id *cmid) {
  if (memcmp(cmid->b, s->nonce, 8) == 0 && (cmid->b[15] & CMID_MARK))
    return cmid->b[15] & CMID_NOECHO;
  gw_noecho *e = noecho_find(s, cmid);
  if (!e) return false;
  noecho_remove(s, e);
  return true;
}

int qim__gw_session_noecho_add(gw_session *s, const qim_client_message_id *cmid) {
  uint64_t now = qim__gw_now(s->loop->gw);
  if (noecho_find(s, cmid)) return 0; /* a retry of a pub still awaiting its echo */
  if (s->nnoecho == GW_NOECHO_MAX)    /* forget the pubs whose echo will not come */
    for (size_t i = s->nnoecho; i-- > 0;)
      if (now - s->noecho[i].at_ms >= GW_NOECHO_TTL_MS) noecho_remove(s, &s->noecho[i]);
  if (s->nnoecho == GW_NOECHO_MAX) return -ENOSPC;
  if (s->nnoecho == s->cnoecho) {
    s->cnoecho = s->cnoecho ? s->cnoecho * 2 : 8;
    s->noecho = qim_realloc(s->noecho, s->cnoecho * sizeof *s->noecho);
  }
  s->noecho[s->nnoecho++] = (gw_noecho){.cmid = *cmid, .at_ms = now};
  return 0;
}

void qim__gw_session_noecho_drop(gw_session *s, const qim_client_message_id *cmid) {
  gw_noecho *e = noecho_find(s, cmid);
  if (e) noecho_remove(s, e);
}

static gw_pending *pending_find(gw_session *s, const qim_client_message_id *cmid) {
  for (size_t i = 0; i < s->npend; i++)
    if (memcmp(s->pend[i].cmid.b, cmid->b, sizeof cmid->b) == 0) return &s->pend[i];
  return NULL;
}

void qim__gw_pending_add(gw_session *s, const qim_client_message_id *cmid) {
  if (pending_find(s, cmid)) return; /* a retry of a pub still in flight */
  if (s->npend == s->cpend) {
    s->cpend = s->cpend ? s->cpend * 2 : 4;
    s->pend = qim_realloc(s->pend, s->cpend * sizeof *s->pend);
  }
  s->pend[s->npend++] = (gw_pending){.cmid = *cmid};
}

bool qim__gw_pending_hold(gw_session *s, const qim_client_message_id *cmid, qim_ws_frame *f) {
  gw_pending *p = pending_find(s, cmid);
  if (!p) return false;
  if (!p->held) p->held = qim_ws_frame_ref(f);
  return true;
}

void qim__gw_pending_done(gw_session *s, const qim_client_message_id *cmid) {
  gw_pending *p = pending_find(s, cmid);
  if (!p) return;
  if (p->held && s->conn) qim_conn_send_frame(s->conn, p->held);
  qim_ws_frame_unref(p->held);
  *p = s->pend[--s->npend];
}

qim_authenticated_actor qim__gw_actor(const gw_session *s) {
  return (qim_authenticated_actor){.tenant_id = s->tenant, .user_id = s->user, .device_id = s->device};
}

/* ---- replies -------------------------------------------------------------------------------------- */

uint64_t qim__gw_now(const qim_gateway *g) { return qim_clock_wall_ms(g->d.clock); }

void qim__gw_send(gw_session *s, char *json, size_t len) {
  if (json && s->conn) qim_conn_send_text(s->conn, json, len);
  qim_free(json);
}

int qim__gw_err_code(int rc, const char **text) {
  int code;
  if (rc == QIM_AGAIN || rc == -EAGAIN || rc == -ESHUTDOWN) {
    code = 503;
  } else if (qim_err_is_domain(rc)) {
    code = qim_err_ctrl_code(rc);
    if (code) {
      *text = qim_err_ctrl_text(rc);
      return code;
    }
    code = 500;
  } else {
    switch (rc) {
    case -ENOENT: code = 404; break;
    case -EEXIST: code = 409; break;
    case -EINVAL: code = 400; break;
    case -EACCES: code = 403; break;
    case -EMSGSIZE:
    case -E2BIG: code = 413; break;
    default: code = 500;
    }
  }
  *text = qim_proto_code_text(code);
  return code;
}

void qim__gw_ctrl(gw_session *s, const gw_req *r, const char *topic, int code, const char *text,
                  json_t *params) {
  qim_gateway *g = s->loop->gw;
  if (code >= 400) atomic_fetch_add(&g->st_errors, 1);
  size_t len;
  char *j = qim_proto_ctrl(r ? r->msg.id : NULL, topic ? topic : r ? r->msg.topic : NULL, code,
                           text ? text : qim_proto_code_text(code), params, qim__gw_now(g), &len);
  json_decref(params);
  qim__gw_send(s, j, len);
}

void qim__gw_fail(gw_session *s, const gw_req *r, int rc) {
  const char *text;
  int code = qim__gw_err_code(rc, &text);
  qim__gw_ctrl(s, r, NULL, code, text, NULL);
}

/* ---- frames built in workers ------------------------------------------------------------------------ */

void qim__gw_out_add(gw_out *o, char *buf, size_t len) {
  if (!buf) return;
  if (o->n == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 8;
    o->buf = qim_realloc(o->buf, o->cap * sizeof *o->buf);
    o->len = qim_realloc(o->len, o->cap * sizeof *o->len);
  }
  o->buf[o->n] = buf;
  o->len[o->n++] = len;
}

void qim__gw_out_ctrl(gw_out *o, const char *id, const char *topic, int code, const char *text,
                      json_t *params, uint64_t now) {
  size_t len;
  char *j = qim_proto_ctrl(id, topic, code, text ? text : qim_proto_code_text(code), params, now, &len);
  json_decref(params);
  if (code >= 400) o->errors++;
  qim__gw_out_add(o, j, len);
}

void qim__gw_out_fail(gw_out *o, const char *id, const char *topic, int rc, uint64_t now) {
  const char *text;
  int code = qim__gw_err_code(rc, &text);
  qim__gw_out_ctrl(o, id, topic, code, text, NULL, now);
}

void qim__gw_out_flush(gw_session *s, gw_out *o) {
  atomic_fetch_add(&s->loop->gw->st_errors, o->errors);
  for (size_t i = 0; i < o->n; i++) qim__gw_send(s, o->buf[i], o->len[i]);
  o->n = 0;
  o->errors = 0;
}

void qim__gw_out_free(gw_out *o) {
  for (size_t i = 0; i < o->n; i++) qim_free(o->buf[i]);
  qim_free(o->buf);
  qim_free(o->len);
  memset(o, 0, sizeof *o);
}

static void job_work(uv_work_t *w) {
  gw_job *j = w->data;
  j->run(j);
}

static void job_after(uv_work_t *w, int status) {
  (void)status;
  gw_job *j = w->data;
  gw_loop *l = j->loop;
  if (j->after)
    j->after(j);
  else
    qim__gw_job_finish(j);
  if (j->req) qim__gw_job_finish(j); /* an after() that forgot: never leak the request */
  if (j->destroy) j->destroy(j);
  qim__gw_out_free(&j->out);
  qim_free(j);
  qim__gw_loop_release(l);
}

void qim__gw_job_start(gw_loop *l, gw_job *j) {
  j->loop = l;
  j->work.data = j;
  qim__gw_loop_hold(l);
  int rc = uv_queue_work(l->uv, &j->work, job_work, job_after);
  if (rc) abort(); /* only for invalid arguments: a bug */
}

void qim__gw_job_finish(gw_job *j) {
  if (!j->req) return;
  qim__gw_out_flush(j->req->s, &j->out);
  qim__gw_req_done(j->req);
  j->req = NULL;
}

/* ---- the request queue ----------------------------------------------------------------------------- */

static void req_free(gw_req *r) {
  qim_proto_msg_free(&r->msg);
  qim_free(r);
}

/* Checks the session state a request needs; false after answering (or dropping) it. */
static bool state_allows(gw_session *s, gw_req *r) {
  qim_proto_kind k = r->msg.kind;
  if (k == QIM_PROTO_HI) return true;
  if (s->state == GW_NEW) {
    /* Before {hi}: 409, but a {note} is dropped without a reply (PROTOCOL.md §2). */
    if (k != QIM_PROTO_NOTE) qim__gw_ctrl(s, r, NULL, 409, "command out of sequence", NULL);
    return false;
  }
  if (k == QIM_PROTO_ACC || k == QIM_PROTO_LOGIN) return true;
  if (s->state != GW_AUTH) {
    if (k != QIM_PROTO_NOTE) qim__gw_ctrl(s, r, NULL, 401, "authentication required", NULL);
    return false;
  }
  return true;
}

static void dispatch(gw_req *r) {
  gw_session *s = r->s;
  atomic_fetch_add(&s->loop->gw->st_requests, 1);
  if (!state_allows(s, r)) {
    qim__gw_req_done(r);
    return;
  }
  switch (r->msg.kind) {
  case QIM_PROTO_HI: qim__gw_hi(r); break;
  case QIM_PROTO_ACC: qim__gw_acc(r); break;
  case QIM_PROTO_LOGIN: qim__gw_login(r); break;
  case QIM_PROTO_SUB: qim__gw_sub(r); break;
  case QIM_PROTO_LEAVE: qim__gw_leave(r); break;
  case QIM_PROTO_PUB: qim__gw_pub(r); break;
  case QIM_PROTO_GET: qim__gw_get(r); break;
  case QIM_PROTO_SET: qim__gw_set(r); break;
  case QIM_PROTO_DEL: qim__gw_del(r); break;
  case QIM_PROTO_NOTE: qim__gw_note(r); break;
  case QIM_PROTO_SYNC: qim__gw_sync(r); break;
  default:
    qim__gw_ctrl(s, r, NULL, 501, "not implemented", NULL);
    qim__gw_req_done(r);
  }
}

static void pump(gw_session *s) {
  while (s->qhead && s->conn && !s->excl_running) {
    gw_req *r = s->qhead;
    if (r->excl && s->running) return;
    s->qhead = r->next;
    if (!s->qhead) s->qtail = NULL;
    s->qlen--;
    r->next = NULL;
    s->running++;
    s->excl_running = r->excl;
    qim__gw_session_ref(s);
    dispatch(r);
  }
}

void qim__gw_req_done(gw_req *r) {
  gw_session *s = r->s;
  if (r->excl) s->excl_running = false;
  s->running--;
  req_free(r);
  pump(s);
  qim__gw_session_unref(s);
}

static bool exclusive(qim_proto_kind k) {
  return k != QIM_PROTO_PUB && k != QIM_PROTO_GET && k != QIM_PROTO_NOTE;
}

/* The session's request token bucket (request_rate per second, request_burst deep): false
 * when this request is one too many. Loop time, so a wall clock step changes nothing. */
static bool rate_ok(gw_session *s) {
  const qim_config *c = s->loop->gw->d.cfg;
  uint64_t now = uv_now(s->loop->uv);
  double burst = c->request_burst ? c->request_burst : 1;
  if (s->req_at == 0)
    s->req_tokens = burst;
  else if (now > s->req_at)
    s->req_tokens += (double)(now - s->req_at) * c->request_rate / 1000.0;
  if (s->req_tokens > burst) s->req_tokens = burst;
  s->req_at = now ? now : 1;
  if (s->req_tokens < 1.0) return false;
  s->req_tokens -= 1.0;
  return true;
}

static void enqueue(gw_session *s, gw_req *r) {
  qim_gateway *g = s->loop->gw;
  if (!rate_ok(s)) {
    /* Tinode-like 429; the connection stays. A note has no reply: it just goes. */
    atomic_fetch_add(&g->st_rate_limited, 1);
    if (r->msg.kind != QIM_PROTO_NOTE) qim__gw_ctrl(s, r, NULL, 429, "too many requests", NULL);
    req_free(r);
    return;
  }
  if (s->qlen >= g->o.queue_max) {
    /* Too far ahead: answer now (a note just goes), keep the connection. */
    if (r->msg.kind != QIM_PROTO_NOTE) qim__gw_ctrl(s, r, NULL, 503, "too many requests in flight", NULL);
    req_free(r);
    return;
  }
  r->s = s;
  r->excl = exclusive(r->msg.kind);
  r->trace = qim_trace_id_new();
  if (s->qtail)
    s->qtail->next = r;
  else
    s->qhead = r;
  s->qtail = r;
  s->qlen++;
  pump(s);
}

/* ---- connection callbacks ---------------------------------------------------------------------------- */

void qim__gw_on_open(qim_conn *c, void *ud) {
  qim_gateway *g = ud;
  gw_loop *l = &g->loops[qim_conn_loop_index(c)];
  gw_session *s = qim_calloc(1, sizeof *s);
  s->loop = l;
  s->conn = c;
  s->conn_id = qim_conn_id(c);
  s->refs = 1;
  s->tenant = *qim_conn_tenant(c);
  randombytes_buf(&s->device, sizeof s->device);
  randombytes_buf(s->nonce, sizeof s->nonce);
  qim_conn_set_data(c, s);
  atomic_fetch_add(&g->st_sessions, 1);
}

static void reply_malformed(gw_session *s, const qim_proto_error *e) {
  qim_gateway *g = s->loop->gw;
  atomic_fetch_add(&g->st_errors, 1);
  size_t len;
  char *j = qim_proto_ctrl_error(e, qim__gw_now(g), &len);
  qim__gw_send(s, j, len);
}

void qim__gw_on_message(qim_conn *c, int opcode, const uint8_t *data, size_t len, void *ud) {
  (void)ud;
  gw_session *s = qim_conn_data(c);
  if (!s) return;
  if (opcode == QIM_WS_OP_TEXT && len == 1 && data[0] == '1') {
    qim_conn_send_text(c, "0", 1); /* the SDK's network probe */
    return;
  }
  qim_proto_error e;
  gw_req *r = qim_calloc(1, sizeof *r);
  int rc = opcode == QIM_WS_OP_TEXT ? qim_proto_decode((const char *)data, len, 0, &r->msg, &e) : -EINVAL;
  if (rc) {
    if (opcode != QIM_WS_OP_TEXT) {
      memset(&e, 0, sizeof e);
      e.code = 400;
      e.text = "malformed";
    }
    if (!e.silent) reply_malformed(s, &e);
    req_free(r);
    return;
  }
  enqueue(s, r);
}

void qim__gw_on_close(qim_conn *c, int code, void *ud) {
  (void)code;
  qim_gateway *g = ud;
  gw_session *s = qim_conn_data(c);
  if (!s) return;
  qim_conn_set_data(c, NULL);
  s->conn = NULL;
  for (size_t i = 0; i < s->natt; i++) {
    qim__gw_index_remove(&s->loop->by_conv, qim__gw_key(s->tenant, s->att[i].conv.v), s);
    qim__gw_presence_attach(s, s->att[i].conv, -1);
  }
  s->natt = 0;
  qim__gw_session_me(s, false);
  if (s->state == GW_AUTH) {
    qim__gw_index_remove(&s->loop->by_user, qim__gw_key(s->tenant, s->user.v), s);
    atomic_fetch_sub(&g->st_auth, 1);
  }
  if (s->routed) qim_mailbox_route_remove(g->d.mailbox, s->tenant, s->user, s->loop->cs);
  s->routed = false;
  while (s->qhead) {
    gw_req *r = s->qhead;
    s->qhead = r->next;
    req_free(r);
  }
  s->qtail = NULL;
  s->qlen = 0;
  atomic_fetch_sub(&g->st_sessions, 1);
  qim__gw_session_unref(s);
}
