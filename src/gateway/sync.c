/*
 * sync.c — qim's {sync} extension: a qim device pulls its user's mailbox from a signed
 * MailboxCursor and gets MailboxPages as {sync} frames (docs/protocol.md §3.11, §4.6), and
 * the cursor such a device is given at login.
 *
 * Cursors belong to a device: the mailbox signs (tenant, user, device, shard, lane) into
 * every cursor and refuses one presented by another identity. A qim client sends a stable
 * `hi.device`, hashed into its DeviceId (auth.c), so the cursor it kept survives reconnects;
 * Tinode clients have a per-session DeviceId and no use for {sync} (refused without one).
 *
 * Everything is asynchronous on the session's loop: the mailbox's pull and cursor opens
 * complete on the loop's queue (the gateway never reads store internals itself). When the
 * cursor is behind the mailbox's trim floor (or ahead of a shard that lost its tail) the
 * answer is {ctrl 410 "cursor expired"} carrying a fresh cursor at the lane watermark in
 * params, so the client's rebuild needs no extra call: keep that cursor, re-read history
 * (`get data` per conversation), then sync from it.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/payload.h"
#include "qim/record.h"

/* A page goes out as one WebSocket frame; keep it well inside the connection's 4 MB output
 * queue whatever the client asks. */
#define SYNC_MAX_ITEMS 1000
#define SYNC_MAX_BYTES (1u << 20)

typedef struct sync_op {
  gw_req *req;
  qim_mailbox_cursor cursor; /* the cursor pulled from (parsed or opened) */
  qim_mailbox_cursor_op open;
  qim_mailbox_pull_op pull;
  qim_error expired; /* the CursorExpired payload while a fresh cursor is opened */
  /* Names of the conversations of the page's own entries (see "Topic names"). */
  struct sync_conv *convs;
  size_t nconv, named; /* convs[0..named) have their name */
  qim_store_conv_get_req get;
} sync_op;

typedef struct sync_conv {
  qim_conversation_id conv;
  char topic[QIM_TOPIC_NAME_CAP];
} sync_conv;

static void op_free(sync_op *o) {
  qim_mailbox_cursor_free(&o->cursor);
  qim_free(o->convs);
  qim_free(o);
}

/* Ends the request and the loop hold taken when it started. */
static void finish(sync_op *o) {
  gw_loop *l = o->req->s->loop;
  qim__gw_req_done(o->req);
  op_free(o);
  qim__gw_loop_release(l);
}

/* ---- entries → frame
 * ------------------------------------------------------------------------------- */

/* True when e's sender is another user, whose id then says what the conversation is. */
static bool sender_is_peer(const qim_mailbox_entry *e) {
  return !qim_u128_eq(e->sender_id.v, e->user_id.v) &&
         !qim_u128_eq(e->sender_id.v, (qim_u128){0, 0});
}

/* The conversation as e's user names it; convs holds the names of the conversations of
 * the user's own entries (a conversation missing there, gone from the store, keeps the
 * group form its id has). */
static void entry_topic(const sync_op *o, const qim_mailbox_entry *e,
                        char topic[QIM_TOPIC_NAME_CAP]) {
  qim_conversation_id conv = e->coordinates.conversation_id;
  if (sender_is_peer(e) &&
      qim_u128_eq(qim_conversation_id_direct(e->tenant_id, e->user_id, e->sender_id).v, conv.v)) {
    qim_user_id_format(e->sender_id, topic, QIM_TOPIC_NAME_CAP);
    return;
  }
  if (!sender_is_peer(e))
    for (size_t i = 0; i < o->named; i++)
      if (qim_u128_eq(o->convs[i].conv.v, conv.v)) {
        memcpy(topic, o->convs[i].topic, QIM_TOPIC_NAME_CAP);
        return;
      }
  qim_group_id_format((qim_group_id){conv.v}, topic, QIM_TOPIC_NAME_CAP);
}

/* What a client applies: a message's Tinode head/content; a Control's (membership change,
 * delete, edit, read position) own JSON, documented in docs/groups.md and docs/history.md. */
static void entry_body(const qim_mailbox_entry *e, qim_proto_sync_entry *x, json_t **head,
                       json_t **content) {
  if (!e->has_content || !e->body_included || e->event_type == QIM_EVENT_TYPE_MENTION) return;
  const qim_bytes *b = &e->content.payload_or_ciphertext;
  qim_json_span body, h;
  if (e->event_type == QIM_EVENT_TYPE_MESSAGE) {
    if (qim_payload_split_tinode(&e->content, &body, &h) == 0) {
      x->content_raw = body.p, x->content_raw_len = body.n; /* the stored text, as it is */
      x->head_raw = h.p, x->head_raw_len = h.n;
    } else if (qim_history_content_to_tinode(&e->content, head, content) != 0) {
      return;
    }
  } else if (!(*content = b->n ? json_loadb((const char *)b->p, b->n, 0, NULL) : NULL)) {
    return;
  }
  x->body_included = true;
  x->head = *head;
  x->content = *content;
}

typedef struct sync_names {
  char topic[QIM_TOPIC_NAME_CAP], from[QIM_TOPIC_NAME_CAP];
  json_t *head, *content;
} sync_names;

static char *page_frame(const sync_op *o, const qim_mailbox_page *p, const char *cursor,
                        size_t *len) {
  const gw_req *r = o->req;
  size_t n = p->entry_count;
  qim_proto_sync_entry *x = qim_calloc(n ? n : 1, sizeof *x);
  sync_names *nm = qim_calloc(n ? n : 1, sizeof *nm);
  for (size_t i = 0; i < n; i++) {
    const qim_mailbox_entry *e = &p->entries[i];
    entry_topic(o, e, nm[i].topic);
    qim_user_id_format(e->sender_id, nm[i].from, sizeof nm[i].from);
    bool has_seq =
        e->event_type == QIM_EVENT_TYPE_MESSAGE || e->event_type == QIM_EVENT_TYPE_MENTION;
    x[i] = (qim_proto_sync_entry){.event_id = e->event_id,
                                  .type = e->event_type,
                                  .topic = nm[i].topic,
                                  .seq = has_seq ? (uint32_t)e->coordinates.conversation_seq : 0,
                                  .from = nm[i].from,
                                  .ts_ms = e->created_at,
                                  .cmid = e->has_client_message_id ? &e->client_message_id : NULL};
    entry_body(e, &x[i], &nm[i].head, &nm[i].content);
  }
  qim_proto_sync_frame f = {.id = r->msg.id,
                            .entries = x,
                            .n = n,
                            .covered = p->covered_through_seq,
                            .watermark = p->lane_watermark,
                            .more = p->has_more,
                            .cursor = cursor};
  char *j = qim_proto_sync_reply(&f, len);
  for (size_t i = 0; i < n; i++) {
    json_decref(nm[i].head);
    json_decref(nm[i].content);
  }
  qim_free(nm);
  qim_free(x);
  return j;
}

/* ---- the request
 * ------------------------------------------------------------------------------------ */

static void reply_page(sync_op *o) {
  gw_session *s = o->req->s;
  char tok[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  int n = qim_mailbox_cursor_format(&o->pull.next_cursor, tok, sizeof tok);
  size_t len;
  char *j = n > 0 ? page_frame(o, &o->pull.page, tok, &len) : NULL;
  if (j)
    qim__gw_send(s, j, len);
  else
    qim__gw_ctrl(s, o->req, NULL, 500, "internal error", NULL);
  qim_mailbox_page_free(&o->pull.page);
  qim_mailbox_cursor_free(&o->pull.next_cursor);
}

/* {ctrl 410} with the trim floor and, when one could be opened, a cursor at the watermark. */
static void reply_expired(sync_op *o, const qim_mailbox_cursor *fresh) {
  char floor[24], tok[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  snprintf(floor, sizeof floor, "%llu", (unsigned long long)o->expired.trim_watermark);
  json_t *params = json_pack("{ss}", "trim_watermark", floor);
  if (fresh && qim_mailbox_cursor_format(fresh, tok, sizeof tok) > 0)
    json_object_set_new(params, "cursor", json_string(tok));
  const char *text;
  int code = qim__gw_err_code(QIM_E_MAILBOX_CURSOR_EXPIRED, &text);
  qim__gw_ctrl(o->req->s, o->req, NULL, code, text, params);
}

static void rebuild_opened(qim_mailbox_cursor_op *op) {
  sync_op *o = op->data;
  reply_expired(o, op->status == 0 ? &op->cursor : NULL);
  if (op->status == 0) qim_mailbox_cursor_free(&op->cursor);
  finish(o);
}

/* The rebuild cursor: FROM_NOW, taken before the client re-reads history. */
static void open_rebuild(sync_op *o) {
  gw_session *s = o->req->s;
  o->open = (qim_mailbox_cursor_op){.cq = s->loop->cq,
                                    .done = rebuild_opened,
                                    .data = o,
                                    .actor = qim__gw_actor(s),
                                    .from = QIM_MAILBOX_CURSOR_FROM_NOW};
  if (qim_mailbox_cursor_open(s->loop->gw->d.mailbox, &o->open) != 0) {
    reply_expired(o, NULL);
    finish(o);
  }
}

/* ---- naming the user's own conversations
 * ------------------------------------------------------------ */

/* Lists the distinct conversations of the page's entries that do not name themselves. */
static void collect_convs(sync_op *o) {
  const qim_mailbox_page *p = &o->pull.page;
  for (size_t i = 0; i < p->entry_count; i++) {
    const qim_mailbox_entry *e = &p->entries[i];
    if (sender_is_peer(e)) continue;
    qim_conversation_id conv = e->coordinates.conversation_id;
    size_t k = 0;
    while (k < o->nconv && !qim_u128_eq(o->convs[k].conv.v, conv.v)) k++;
    if (k < o->nconv) continue;
    if (!o->convs) o->convs = qim_calloc(p->entry_count, sizeof *o->convs);
    o->convs[o->nconv++].conv = conv;
  }
}

static void name_next(sync_op *o);

static void conv_read(qim_store_req *req) {
  sync_op *o = req->data;
  sync_conv *c = &o->convs[o->named];
  if (req->status == 0) {
    qim__gw_conv_topic(&o->get.out, o->req->s->user, c->topic, sizeof c->topic);
    qim_store_conversation_free(&o->get.out);
  } else {
    qim_group_id_format((qim_group_id){c->conv.v}, c->topic, sizeof c->topic);
  }
  o->named++;
  name_next(o);
}

/* Names convs[named..] one read at a time, then replies with the page. */
static void name_next(sync_op *o) {
  gw_session *s = o->req->s;
  qim_store *st = s->loop->gw->d.store;
  while (o->named < o->nconv && qim__gw_session_open(s)) {
    memset(&o->get, 0, sizeof o->get);
    o->get.req.cq = s->loop->cq;
    o->get.req.done = conv_read;
    o->get.req.data = o;
    o->get.tenant_id = s->tenant;
    o->get.conversation_id = o->convs[o->named].conv;
    if (st->vt->conversations.get(st, &o->get) == 0) return;
    /* Not asked: the entries keep the group form of the id. */
    qim_group_id_format((qim_group_id){o->convs[o->named].conv.v}, o->convs[o->named].topic,
                        QIM_TOPIC_NAME_CAP);
    o->named++;
  }
  if (qim__gw_session_open(s)) {
    reply_page(o);
  } else {
    qim_mailbox_page_free(&o->pull.page);
    qim_mailbox_cursor_free(&o->pull.next_cursor);
  }
  finish(o);
}

static void pulled(qim_mailbox_pull_op *op) {
  sync_op *o = op->data;
  gw_session *s = o->req->s;
  if (op->status == QIM_E_MAILBOX_CURSOR_EXPIRED) {
    o->expired = op->error;
    if (qim__gw_session_open(s)) {
      open_rebuild(o);
      return;
    }
  } else if (op->status == 0) {
    collect_convs(o);
    name_next(o);
    return;
  } else {
    if (op->status != QIM_E_MAILBOX_CURSOR_INVALID)
      QIM_LOGW(&o->req->trace, "gateway.sync_failed", "err=%s", qim_err_name(op->status));
    qim__gw_fail(s, o->req, op->status);
  }
  finish(o);
}

static void pull(sync_op *o) {
  gw_session *s = o->req->s;
  const qim_proto_sync *m = &o->req->msg.u.sync;
  qim_authenticated_actor a = qim__gw_actor(s);
  o->pull = (qim_mailbox_pull_op){
      .cq = s->loop->cq,
      .done = pulled,
      .data = o,
      .request = {
          .actor = a,
          .cursor = o->cursor,
          .range = {.tenant_id = a.tenant_id,
                    .user_id = a.user_id,
                    .after_seq = o->cursor.last_applied_seq,
                    .max_items = m->limit < SYNC_MAX_ITEMS ? m->limit : SYNC_MAX_ITEMS,
                    .max_bytes = m->max_bytes < SYNC_MAX_BYTES ? m->max_bytes : SYNC_MAX_BYTES}}};
  if (qim_mailbox_pull(s->loop->gw->d.mailbox, &o->pull) != 0) pulled(&o->pull);
}

static void floor_opened(qim_mailbox_cursor_op *op) {
  sync_op *o = op->data;
  gw_session *s = o->req->s;
  if (op->status != 0 || !qim__gw_session_open(s)) {
    if (op->status) qim__gw_fail(s, o->req, op->status);
    if (op->status == 0) qim_mailbox_cursor_free(&op->cursor);
    finish(o);
    return;
  }
  o->cursor = op->cursor;
  pull(o);
}

void qim__gw_sync(gw_req *r) {
  gw_session *s = r->s;
  gw_loop *l = s->loop;
  const qim_proto_sync *m = &r->msg.u.sync;
  if (!s->device_stable) {
    qim__gw_ctrl(s, r, NULL, 400, "hi.device required", NULL);
    qim__gw_req_done(r);
    return;
  }
  sync_op *o = qim_calloc(1, sizeof *o);
  o->req = r;
  qim__gw_loop_hold(l);
  if (m->cursor) {
    int rc = qim_mailbox_cursor_parse(m->cursor, strlen(m->cursor), &o->cursor);
    if (rc) {
      qim__gw_fail(s, r, rc);
      finish(o);
      return;
    }
    pull(o);
    return;
  }
  /* No cursor: everything the mailbox still holds. */
  o->open = (qim_mailbox_cursor_op){.cq = l->cq,
                                    .done = floor_opened,
                                    .data = o,
                                    .actor = qim__gw_actor(s),
                                    .from = QIM_MAILBOX_CURSOR_FROM_FLOOR};
  if (qim_mailbox_cursor_open(l->gw->d.mailbox, &o->open) != 0) {
    qim__gw_fail(s, r, o->open.status);
    finish(o);
  }
}

/* ---- the login cursor
 * ------------------------------------------------------------------------------- */

void qim__gw_sync_login_cursor(qim_gateway *g, const qim_authenticated_actor *a, json_t *params) {
  qim_mailbox_cursor c;
  qim_error err;
  int rc = qim_mailbox_cursor_open_sync(g->d.mailbox, a, QIM_MAILBOX_CURSOR_FROM_NOW, &c, &err);
  if (rc) {
    /* The login stands; the client syncs without a cursor (or logs in again) later. */
    QIM_LOGW(NULL, "gateway.login_cursor_failed", "err=%s", qim_err_name(rc));
    return;
  }
  char tok[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  if (qim_mailbox_cursor_format(&c, tok, sizeof tok) > 0)
    json_object_set_new(params, "cursor", json_string(tok));
  qim_mailbox_cursor_free(&c);
}
