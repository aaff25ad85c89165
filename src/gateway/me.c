/*
 * me.c — keeping a user's `me` topic (the session list) current from anywhere in the
 * gateway: {pres topic:"me" src:<topic as the user names it> what …} to every session of
 * that user that is attached to `me`, on every loop.
 *
 * Other handlers call qim__gw_me_pres when something changes a user's list outside the
 * message pipeline — a P2P conversation created by the peer ("acs"), a topic deleted or
 * the user removed ("gone"), a description changed ("upd"). Changes that travel the
 * pipeline (messages, membership Controls, deletions) are turned into the same frames by
 * push.c. Like note.c's notices, a {pres} is one shared frame posted as an event to each
 * loop (bounded per loop; a full loop drops it and counts it in events_dropped).
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/mem.h"
#include "qim/record.h"

#define ME_EVENT_LIMIT 65536 /* {pres} on me queued per loop before new ones are dropped */

typedef struct me_event {
  qim_cq_item it;
  gw_loop *l;
  qim_tenant_id tenant;
  qim_user_id user;
  qim_ws_frame *f;
} me_event;

static void me_event_run(qim_cq_item *it) {
  me_event *ev = (me_event *)it;
  gw_loop *l = ev->l;
  qim__gw_loop_posted_done(l);
  if (!l->stopping) {
    size_t n;
    gw_session *const *v = qim__gw_index_find(&l->by_user, qim__gw_key(ev->tenant, ev->user.v), &n);
    for (size_t i = 0; i < n; i++)
      if (v[i]->conn && v[i]->me && qim_conn_send_frame(v[i]->conn, ev->f) == 0)
        atomic_fetch_add(&l->gw->st_pres, 1);
  }
  qim_ws_frame_unref(ev->f);
  qim_free(ev);
}

void qim__gw_me_pres(qim_gateway *g, qim_tenant_id tenant, qim_user_id user,
                     const qim_proto_pres_frame *pr) {
  size_t len;
  char *json = qim_proto_pres(pr, &len);
  if (!json) return;
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, json, len);
  qim_free(json);
  if (!f) return;
  for (unsigned i = 0; i < g->nloops; i++) {
    me_event *ev = qim_calloc(1, sizeof *ev);
    *ev = (me_event){.it = {.run = me_event_run},
                     .l = &g->loops[i],
                     .tenant = tenant,
                     .user = user,
                     .f = qim_ws_frame_ref(f)};
    if (!qim__gw_loop_post(ev->l, &ev->it, ME_EVENT_LIMIT)) {
      atomic_fetch_add(&g->st_dropped, 1);
      qim_ws_frame_unref(ev->f);
      qim_free(ev);
    }
  }
  qim_ws_frame_unref(f);
}

void qim__gw_me_gone(qim_gateway *g, qim_tenant_id tenant, qim_user_id user, const char *topic) {
  qim_proto_pres_frame pr = {.topic = "me", .src = topic, .what = "gone"};
  qim__gw_me_pres(g, tenant, user, &pr);
}

void qim__gw_me_upd(qim_gateway *g, qim_tenant_id tenant, qim_user_id user, const char *topic) {
  qim_proto_pres_frame pr = {.topic = "me", .src = topic, .what = "upd"};
  qim__gw_me_pres(g, tenant, user, &pr);
}

/* ---- the session list
 * ----------------------------------------------------------------------------- */

void qim__gw_me_rows_free(gw_me_rows *rows, size_t n) {
  for (size_t i = 0; rows->members && i < n; i++) {
    qim_store_member_free(&rows->members[i]);
    qim_store_conversation_free(&rows->convs[i]);
  }
  qim_free(rows->members);
  qim_free(rows->convs);
  rows->members = NULL;
  rows->convs = NULL;
}

static bool current(const qim_store_member *m, const qim_store_conversation *c) {
  return !m->has_left_at && !m->banned && !c->deleted;
}

/* Moves row i of a store page into the output (or frees it when filtered out). */
static bool take_row(qim_store_subscriptions_req *q, size_t i, gw_me_keep keep, void *ud,
                     qim_session_page *page, gw_me_rows *rows) {
  qim_store_member *m = &q->out_members[i];
  qim_store_conversation *c = &q->out_convs[i];
  if (!current(m, c) || (keep && !keep(m, c, ud))) {
    qim_store_member_free(m);
    qim_store_conversation_free(c);
    return false;
  }
  size_t k = page->session_count++;
  bool reader = (m->mode_want & m->mode_given) & QIM_MODE_READ;
  page->sessions[k] = (qim_session_summary){
      .conversation_id = c->conversation_id,
      .latest_conversation_seq = c->latest_seq,
      .last_activity_id = c->last_activity_id,
      .unread_count =
          reader && c->latest_seq > m->read_seq ? (uint32_t)(c->latest_seq - m->read_seq) : 0};
  rows->members[k] = *m;
  rows->convs[k] = *c;
  return true;
}

int qim__gw_me_sessions(qim_store *st, qim_tenant_id tenant, qim_user_id user,
                        const qim_session_page_request *req, gw_me_keep keep, void *ud,
                        qim_session_page *page, gw_me_rows *rows) {
  *page = (qim_session_page){0};
  *rows = (gw_me_rows){0};
  if (req->limit == 0) return -EINVAL;
  page->sessions = qim_calloc(req->limit, sizeof *page->sessions);
  rows->members = qim_calloc(req->limit, sizeof *rows->members);
  rows->convs = qim_calloc(req->limit, sizeof *rows->convs);
  qim_page_cursor cur = {{0}};
  if (req->has_cursor && req->cursor.bytes.n) qim_bytes_copy(&cur.bytes, &req->cursor.bytes);
  int rc = 0;
  /* Each store page asks for at most the places left, so a full page ends exactly at the
   * store's cursor: the next page starts right after the last row this one returned. */
  while (page->session_count < req->limit) {
    qim_store_subscriptions_req q = {.tenant_id = tenant,
                                     .user_id = user,
                                     .cursor = cur,
                                     .limit = req->limit - (uint32_t)page->session_count};
    rc = QIM_STORE_SYNC(st, conversations.subscriptions, &q);
    qim_bytes_free(&cur.bytes);
    if (rc) break;
    for (size_t i = 0; i < q.out_count; i++) take_row(&q, i, keep, ud, page, rows);
    qim_free(q.out_members);
    qim_free(q.out_convs);
    cur = q.out_next; /* owned from here */
    if (cur.bytes.n == 0) break;
  }
  if (rc) {
    qim_bytes_free(&cur.bytes);
    qim__gw_me_rows_free(rows, page->session_count);
    qim_session_page_free(page);
    return rc;
  }
  page->has_more = cur.bytes.n != 0;
  page->has_next_cursor = page->has_more;
  page->next_cursor = cur;
  return 0;
}

/* ---- a group's description changed
 * ----------------------------------------------------------------- */

void qim__gw_me_upd_group(qim_gateway *g, const qim_authenticated_actor *a,
                          qim_conversation_id conv) {
  char topic[QIM_TOPIC_NAME_CAP];
  qim_group_id_format((qim_group_id){conv.v}, topic, sizeof topic);
  qim_member_page_request req = {.actor = *a, .group_id = {conv.v}};
  qim_page_cursor next = {{0}};
  for (;;) {
    qim_member_page page = {0};
    if (qim_group_member_page(g->d.groups, &req, &page) != 0) break;
    for (size_t i = 0; i < page.member_count; i++)
      qim__gw_me_upd(g, a->tenant_id, page.members[i].user_id, topic);
    bool more = page.has_more && page.has_next_cursor && page.next_cursor.bytes.n;
    qim_bytes_free(&next.bytes);
    if (more) qim_bytes_copy(&next.bytes, &page.next_cursor.bytes);
    qim_member_page_free(&page);
    if (!more) break;
    req.has_cursor = true;
    req.cursor = next;
  }
  qim_bytes_free(&next.bytes);
}
