/*
 * get.c — the answers of {get} (and of the get embedded in a {sub}) in Tinode's order:
 * desc, sub, data, del (PROTOCOL.md §5, §9, §11.1). Runs in a worker: it reads through
 * blocking store calls and the history and group modules, and appends ready frames to a
 * gw_out that the loop sends.
 *
 * `me`: desc is the user's account; sub lists the user's subscriptions with seq / read /
 * recv / clear / touched / acs / public, so the SDK's unread counts (seq − read) are
 * right. Groups: desc carries the caller's own acs, seq, read, recv and clear; sub lists
 * the members (with read/recv for receipts); data and del come from the history module.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

static json_t *json_or_null(const char *s) { return s ? json_loads(s, JSON_DECODE_ANY, NULL) : NULL; }

static void add_nothing(gw_out *o, const char *id, const char *topic, const char *what, uint64_t now) {
  qim__gw_out_ctrl(o, id, topic, 204, "no content", json_pack("{ss}", "what", what), now);
}

static qim_proto_acs acs_of(uint32_t want, uint32_t given) {
  return (qim_proto_acs){.want = want, .given = given, .mode = want & given};
}

/* ---- me -------------------------------------------------------------------------------------- */

static void me_desc(qim_gateway *g, const qim_authenticated_actor *a, const char *id,
                    const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_store_user_get_req ug = {.tenant_id = a->tenant_id, .user_id = a->user_id};
  int rc = QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug);
  if (rc) {
    qim__gw_out_fail(out, id, "me", rc, now);
    return;
  }
  if (o->has_ims && ug.out.updated_at <= o->ims_ms) {
    qim__gw_out_ctrl(out, id, "me", 304, "not modified", json_pack("{ss}", "what", "desc"), now);
  } else {
    uint32_t self = QIM_MODE_JOIN | QIM_MODE_PRES | QIM_MODE_SHARE;
    qim_proto_acs acs = acs_of(self, self);
    qim_proto_defacs defacs = {.auth = QIM_MODE_JOIN | QIM_MODE_READ | QIM_MODE_WRITE | QIM_MODE_PRES |
                                       QIM_MODE_APPROVE | QIM_MODE_SHARE,
                               .anon = QIM_MODE_NONE};
    json_t *pub = json_or_null(ug.out.public_json), *priv = json_or_null(ug.out.private_json);
    qim_proto_topic_desc d = {.created_ms = ug.out.created_at, .updated_ms = ug.out.updated_at,
                              .touched_ms = ug.out.updated_at, .defacs = &defacs, .acs = &acs,
                              .public_data = pub, .private_data = priv};
    size_t len;
    qim__gw_out_built(out, qim_proto_meta_desc(id, "me", now, &d, &len), &len);
    json_decref(pub);
    json_decref(priv);
  }
  qim_store_user_free(&ug.out);
}

/* A user's public as JSON (NULL when none or unreadable); `keep` owns it. */
static json_t *user_public(qim_gateway *g, qim_tenant_id t, qim_user_id u, json_t *keep) {
  qim_store_user_get_req ug = {.tenant_id = t, .user_id = u};
  if (QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug) != 0) return NULL;
  json_t *p = json_or_null(ug.out.public_json);
  qim_store_user_free(&ug.out);
  if (p) json_array_append_new(keep, p);
  return p;
}

/* One `me` listing entry (§11.1): a group, or a P2P topic named by the peer with the
 * peer's public. `keep` collects the JSON it borrows. */
static void me_entry(qim_gateway *g, const qim_authenticated_actor *a, const qim_store_member *m,
                     const qim_store_conversation *c, qim_proto_topic_sub *e, qim_proto_acs *acs,
                     char *topic, json_t *keep) {
  qim__gw_conv_topic(c, a->user_id, topic, QIM_TOPIC_NAME_CAP);
  *acs = acs_of(m->mode_want, m->mode_given);
  memset(e, 0, sizeof *e);
  e->topic = topic;
  e->updated_ms = m->updated_at;
  e->touched_ms = c->touched_at ? c->touched_at : c->updated_at;
  e->acs = acs;
  if (acs->mode & QIM_MODE_READ) {
    /* Tinode leaves seq out for subscriptions without R. */
    e->seq = (uint32_t)c->latest_seq;
    e->read = (uint32_t)m->read_seq;
    e->recv = (uint32_t)m->recv_seq;
  }
  e->clear = (uint32_t)m->clear_delid;
  json_t *pub;
  if (c->kind == QIM_CONVERSATION_DIRECT) {
    qim_user_id peer;
    qim_user_id_parse(topic, strlen(topic), &peer);
    pub = user_public(g, a->tenant_id, peer, keep);
  } else {
    e->subcnt = c->member_count;
    pub = json_or_null(c->public_json);
    if (pub) json_array_append_new(keep, pub);
  }
  json_t *priv = json_or_null(m->private_json);
  if (priv) json_array_append_new(keep, priv);
  e->public_data = pub;
  e->private_data = priv;
}

typedef struct me_filter {
  const qim_proto_get_opts *o;
  qim_user_id viewer;
} me_filter;

/* ims (changed since) and topic (one entry: the SDK asks so after a {pres acs} on me). */
static bool me_keep(const qim_store_member *m, const qim_store_conversation *c, void *ud) {
  const me_filter *f = ud;
  if (f->o->has_ims && m->updated_at <= f->o->ims_ms && c->touched_at <= f->o->ims_ms) return false;
  if (f->o->topic) {
    char name[QIM_TOPIC_NAME_CAP];
    qim__gw_conv_topic(c, f->viewer, name, sizeof name);
    if (strcmp(name, f->o->topic) != 0) return false;
  }
  return true;
}

/* get sub on me: one page of the session list (me.c). A qim extension pages it: after a
 * full page, {ctrl 200 {what:"sub", cursor}} (same id) carries the cursor of the next
 * page, which `get sub {cursor}` asks for. */
static void me_subs(qim_gateway *g, const qim_authenticated_actor *a, const char *id,
                    const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_session_page_request req = {
      .limit = o->limit && o->limit < g->o.me_list_max ? o->limit : g->o.me_list_max};
  uint8_t raw[QIM_PROTO_STR_MAX];
  size_t rawn = 0;
  if (o->cursor) {
    if (qim_b64url_decode(o->cursor, strlen(o->cursor), raw, sizeof raw, &rawn) != 0 || rawn == 0) {
      qim__gw_out_ctrl(out, id, "me", 400, "malformed", json_pack("{ss}", "what", "sub"), now);
      return;
    }
    req.has_cursor = true;
    req.cursor.bytes = (qim_bytes){.p = raw, .n = rawn};
  }
  me_filter f = {.o = o, .viewer = a->user_id};
  qim_session_page page;
  gw_me_rows rows;
  int rc =
      qim__gw_me_sessions(g->d.store, a->tenant_id, a->user_id, &req, me_keep, &f, &page, &rows);
  if (rc == -EINVAL) {
    qim__gw_out_ctrl(out, id, "me", 400, "malformed", json_pack("{ss}", "what", "sub"),
                     now); /* a forged cursor */
    return;
  }
  if (rc) {
    qim__gw_out_fail(out, id, "me", rc, now);
    return;
  }
  size_t n = page.session_count;
  qim_proto_topic_sub *subs = qim_calloc(n + 1, sizeof *subs);
  qim_proto_acs *acs = qim_calloc(n + 1, sizeof *acs);
  char(*topics)[QIM_TOPIC_NAME_CAP] = qim_calloc(n + 1, sizeof *topics);
  json_t *keep = json_array();
  for (size_t i = 0; i < n; i++)
    me_entry(g, a, &rows.members[i], &rows.convs[i], &subs[i], &acs[i], topics[i], keep);
  size_t len;
  if (n == 0)
    add_nothing(out, id, "me", "sub", now);
  else
    qim__gw_out_built(out, qim_proto_meta_sub(id, "me", now, subs, n, &len), &len);
  if (n && page.has_more) {
    char cur[2 * QIM_PROTO_STR_MAX];
    if (qim_b64url_encode(page.next_cursor.bytes.p, page.next_cursor.bytes.n, cur, sizeof cur) > 0)
      qim__gw_out_ctrl(out, id, "me", 200, "ok", json_pack("{ssss}", "what", "sub", "cursor", cur),
                       now);
  }
  json_decref(keep);
  qim_free(subs);
  qim_free(acs);
  qim_free(topics);
  qim__gw_me_rows_free(&rows, n);
  qim_session_page_free(&page);
}

void qim__gw_get_me(qim_gateway *g, const qim_authenticated_actor *a, const char *id,
                    const qim_proto_get_query *q, gw_out *out) {
  if (q->what & QIM_PROTO_WHAT_DESC) me_desc(g, a, id, &q->desc, out);
  if (q->what & QIM_PROTO_WHAT_SUB) me_subs(g, a, id, &q->sub, out);
  if (q->what & QIM_PROTO_WHAT_DATA)
    qim__gw_out_ctrl(out, id, "me", 400, "malformed", json_pack("{ss}", "what", "data"), qim__gw_now(g));
}

/* ---- groups ------------------------------------------------------------------------------------ */

/* seq, read and recv of a topic's desc: readers only (Tinode leaves them out without R). */
static void desc_counts(qim_proto_topic_desc *d, const qim_store_conversation *c, const qim_store_member *m) {
  if (!(d->acs->mode & QIM_MODE_READ)) return;
  d->seq = (uint32_t)c->latest_seq;
  d->read = (uint32_t)m->read_seq;
  d->recv = (uint32_t)m->recv_seq;
}

/* The caller's own member row: 0, or GROUP_NOT_FOUND / HISTORY_ACCESS_DENIED style errors. */
static int own_member(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                      qim_store_member *m) {
  qim_store_member_get_req mg = {.tenant_id = a->tenant_id, .conversation_id = conv, .user_id = a->user_id};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg);
  if (rc == -ENOENT) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (rc) return rc;
  *m = mg.out;
  return 0;
}

static void group_desc(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                       const char *topic, const char *id, const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_store_conv_get_req cg = {.tenant_id = a->tenant_id, .conversation_id = conv};
  qim_store_member m = {0};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.get, &cg);
  if (rc == -ENOENT || (rc == 0 && (cg.out.deleted || cg.out.kind != QIM_CONVERSATION_GROUP)))
    rc = qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  if (rc == 0) rc = own_member(g, a, conv, &m);
  /* A member who left, was evicted or banned keeps its row but is outside like a
   * non-member: the desc (seq, touched, subcnt, public) is not for it. */
  if (rc == 0 && (m.has_left_at || m.banned)) rc = qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
  } else if (o->has_ims && cg.out.updated_at <= o->ims_ms && m.updated_at <= o->ims_ms) {
    qim__gw_out_ctrl(out, id, topic, 304, "not modified", json_pack("{ss}", "what", "desc"), now);
  } else {
    qim_proto_acs acs = acs_of(m.mode_want, m.mode_given);
    qim_proto_defacs defacs = {.auth = cg.out.default_mode_auth, .anon = cg.out.default_mode_anon};
    json_t *pub = json_or_null(cg.out.public_json), *priv = json_or_null(m.private_json);
    qim_proto_topic_desc d = {.created_ms = cg.out.created_at, .updated_ms = cg.out.updated_at,
                              .touched_ms = cg.out.touched_at, .acs = &acs, .clear = (uint32_t)m.clear_delid,
                              .subcnt = cg.out.member_count, .public_data = pub, .private_data = priv};
    if (acs.mode & QIM_MODE_SHARE) d.defacs = &defacs;
    desc_counts(&d, &cg.out, &m);
    size_t len;
    qim__gw_out_built(out, qim_proto_meta_desc(id, topic, now, &d, &len), &len);
    json_decref(pub);
    json_decref(priv);
  }
  qim_store_member_free(&m);
  qim_store_conversation_free(&cg.out);
}

/* One member entry of a group's `sub` listing. */
static void member_entry(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                         qim_user_id u, qim_proto_topic_sub *e, qim_proto_acs *acs, char *name, json_t *keep) {
  memset(e, 0, sizeof *e);
  qim_user_id_format(u, name, QIM_TOPIC_NAME_CAP);
  e->user = name;
  qim_store_member_get_req mg = {.tenant_id = a->tenant_id, .conversation_id = conv, .user_id = u};
  if (QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg) == 0) {
    *acs = acs_of(mg.out.mode_want, mg.out.mode_given);
    e->acs = acs;
    e->updated_ms = mg.out.updated_at;
    e->read = (uint32_t)mg.out.read_seq;
    e->recv = (uint32_t)mg.out.recv_seq;
    if (qim_u128_eq(u.v, a->user_id.v) && mg.out.private_json) {
      json_t *p = json_or_null(mg.out.private_json);
      if (p) {
        json_array_append_new(keep, p);
        e->private_data = p;
      }
    }
    qim_store_member_free(&mg.out);
  }
  qim_store_user_get_req ug = {.tenant_id = a->tenant_id, .user_id = u};
  if (QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug) == 0) {
    json_t *p = json_or_null(ug.out.public_json);
    if (p) {
      json_array_append_new(keep, p);
      e->public_data = p;
    }
    qim_store_user_free(&ug.out);
  }
}

/* get sub {user: X}: that one member (the SDK asks so after a pres acs). */
static void group_sub_one(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                          const char *topic, const char *id, const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_user_id u;
  qim_store_member self = {0};
  int rc = own_member(g, a, conv, &self);
  bool allowed = rc == 0 && !self.has_left_at && !self.banned && (self.mode_want & self.mode_given & QIM_MODE_READ);
  qim_store_member_free(&self);
  if (rc == 0 && !allowed) rc = qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
    return;
  }
  qim_store_member_get_req mg = {.tenant_id = a->tenant_id, .conversation_id = conv};
  bool found = qim_user_id_parse(o->user, strlen(o->user), &u) == 0;
  if (found) {
    mg.user_id = u;
    found = QIM_STORE_SYNC(g->d.store, conversations.member_get, &mg) == 0;
    if (found) found = !mg.out.has_left_at && !mg.out.banned;
    qim_store_member_free(&mg.out);
  }
  qim_proto_topic_sub e;
  qim_proto_acs acs;
  char name[QIM_TOPIC_NAME_CAP];
  json_t *keep = json_array();
  if (found) member_entry(g, a, conv, u, &e, &acs, name, keep);
  size_t len;
  if (!found || (o->has_ims && e.updated_ms <= o->ims_ms))
    add_nothing(out, id, topic, "sub", now);
  else
    qim__gw_out_built(out, qim_proto_meta_sub(id, topic, now, &e, 1, &len), &len);
  json_decref(keep);
}

/* The page's cursor from the request (qim extension get.sub.cursor, base64url): -EINVAL
 * when it does not decode (the group module checks the rest). */
static int page_cursor(const char *text, uint8_t *buf, qim_member_page_request *pr) {
  size_t n = 0;
  if (!text) return 0;
  if (qim_b64url_decode(text, strlen(text), buf, QIM_GROUP_CURSOR_SIZE, &n) != 0) return -EINVAL;
  pr->has_cursor = true;
  pr->cursor.bytes = (qim_bytes){buf, n};
  return 0;
}

/* A page of the member list: {meta sub} (or ctrl 204), then, when more members follow,
 * {ctrl 200 {what:"sub", cursor}} — the cursor (base64url) freezes the membership
 * version of the first page, so paging is stable while members join and leave. */
static void group_subs(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                       const char *topic, const char *id, const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  if (o->user) {
    group_sub_one(g, a, conv, topic, id, o, out);
    return;
  }
  uint32_t max = o->limit && o->limit < g->o.member_list_max ? o->limit : g->o.member_list_max;
  qim_member_page_request pr = {.actor = *a, .group_id = {conv.v}, .limit = max};
  qim_member_page page = {0};
  uint8_t cbuf[QIM_GROUP_CURSOR_SIZE];
  int rc = page_cursor(o->cursor, cbuf, &pr);
  if (rc == 0) rc = qim_group_member_page(g->d.groups, &pr, &page);
  if (rc == -EINVAL) {
    qim__gw_out_ctrl(out, id, topic, 400, "malformed", json_pack("{ss}", "what", "sub"), now);
    return;
  }
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
    return;
  }
  qim_proto_topic_sub *subs = qim_calloc(page.member_count + 1, sizeof *subs);
  qim_proto_acs *acs = qim_calloc(page.member_count + 1, sizeof *acs);
  char(*names)[QIM_TOPIC_NAME_CAP] = qim_calloc(page.member_count + 1, sizeof *names);
  json_t *keep = json_array();
  size_t n = 0;
  for (size_t i = 0; i < page.member_count; i++) {
    member_entry(g, a, conv, page.members[i].user_id, &subs[n], &acs[n], names[n], keep);
    if (o->has_ims && subs[n].updated_ms <= o->ims_ms) continue;
    n++;
  }
  size_t len;
  if (n == 0)
    add_nothing(out, id, topic, "sub", now);
  else
    qim__gw_out_built(out, qim_proto_meta_sub(id, topic, now, subs, n, &len), &len);
  if (page.has_more && page.has_next_cursor) {
    char text[2 * QIM_GROUP_CURSOR_SIZE];
    if (qim_b64url_encode(page.next_cursor.bytes.p, page.next_cursor.bytes.n, text, sizeof text) >= 0)
      qim__gw_out_ctrl(out, id, topic, 200, "ok", json_pack("{ssss}", "what", "sub", "cursor", text), now);
  }
  json_decref(keep);
  qim_free(subs);
  qim_free(acs);
  qim_free(names);
  qim_member_page_free(&page);
}

static void group_data(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                       const char *topic, const char *id, const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_store_seq_range *ranges = NULL;
  if (o->has_ranges && o->ranges.n) {
    ranges = qim_calloc(o->ranges.n, sizeof *ranges);
    for (size_t i = 0; i < o->ranges.n; i++) ranges[i] = (qim_store_seq_range){o->ranges.v[i].low, o->ranges.v[i].hi};
  }
  qim_history_get q = {.actor = *a, .conversation_id = conv, .since = o->since, .before = o->before,
                       .limit = o->limit, .ranges = ranges, .range_count = ranges ? o->ranges.n : 0};
  qim_history_page page = {0};
  int rc = qim_history_get_data(g->d.history, &q, &page);
  qim_free(ranges);
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
    return;
  }
  size_t count = 0;
  for (size_t i = 0; i < page.record_count; i++) {
    const qim_message_record *r = &page.records[i];
    char from[QIM_TOPIC_NAME_CAP];
    qim_user_id_format(r->sender.user_id, from, sizeof from);
    qim_proto_data_frame d = {.topic = topic, .from = from, .ts_ms = r->created_at,
                              .seq = (uint32_t)r->coordinates.conversation_seq};
    size_t n;
    char *t = qim__gw_data_frame(&d, &r->content, &n);
    if (!t) continue;
    qim__gw_out_add(out, t, n);
    count++;
  }
  qim_history_page_free(&page);
  if (count)
    qim__gw_out_ctrl(out, id, topic, 208, "delivered", json_pack("{sssI}", "what", "data", "count", (json_int_t)count),
                     now);
  else
    add_nothing(out, id, topic, "data", now);
}

static void group_del(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                      const char *topic, const char *id, const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_history_del_query q = {.actor = *a, .conversation_id = conv, .since = o->since, .before = o->before,
                             .limit = o->limit};
  qim_history_del_page page = {0};
  int rc = qim_history_get_del(g->d.history, &q, &page);
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
  } else if (page.range_count == 0) {
    add_nothing(out, id, topic, "del", now);
  } else {
    qim_proto_range *r = qim_calloc(page.range_count, sizeof *r);
    for (size_t i = 0; i < page.range_count; i++) {
      r[i].low = (uint32_t)page.ranges[i].low;
      r[i].hi = page.ranges[i].hi == page.ranges[i].low + 1 ? 0 : (uint32_t)page.ranges[i].hi;
    }
    size_t len;
    qim__gw_out_built(out, qim_proto_meta_del(id, topic, now, (uint32_t)page.clear, r, page.range_count, &len), &len);
    qim_free(r);
  }
  qim_history_del_page_free(&page);
}

void qim__gw_get_group(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                       const char *topic, const char *id, const qim_proto_get_query *q, gw_out *out) {
  if (q->what & QIM_PROTO_WHAT_DESC) group_desc(g, a, conv, topic, id, &q->desc, out);
  if (q->what & QIM_PROTO_WHAT_SUB) group_subs(g, a, conv, topic, id, &q->sub, out);
  if (q->what & QIM_PROTO_WHAT_DATA) group_data(g, a, conv, topic, id, &q->data, out);
  if (q->what & QIM_PROTO_WHAT_DEL) group_del(g, a, conv, topic, id, &q->del, out);
}

/* ---- P2P topics
 * ------------------------------------------------------------------------------------ */

/* desc of a P2P topic: the caller's own acs, seq, read, recv and clear, and the peer's
 * public (Tinode shows the other user's card as the topic's). */
static void p2p_desc(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                     qim_user_id peer, const char *topic, const char *id,
                     const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_store_conv_get_req cg = {.tenant_id = a->tenant_id, .conversation_id = conv};
  qim_store_member m = {0};
  int rc = QIM_STORE_SYNC(g->d.store, conversations.get, &cg);
  if (rc == 0 && (cg.out.deleted || cg.out.kind != QIM_CONVERSATION_DIRECT)) rc = -ENOENT;
  if (rc == 0) rc = own_member(g, a, conv, &m);
  if (rc == -ENOENT) {
    qim__gw_out_ctrl(out, id, topic, 404, "topic not found", NULL, now);
  } else if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
  } else if (o->has_ims && cg.out.updated_at <= o->ims_ms && m.updated_at <= o->ims_ms) {
    qim__gw_out_ctrl(out, id, topic, 304, "not modified", json_pack("{ss}", "what", "desc"), now);
  } else {
    json_t *keep = json_array();
    qim_proto_acs acs = acs_of(m.mode_want, m.mode_given);
    json_t *priv = json_or_null(m.private_json);
    if (priv) json_array_append_new(keep, priv);
    qim_proto_topic_desc d = {.created_ms = cg.out.created_at,
                              .updated_ms = cg.out.updated_at,
                              .touched_ms = cg.out.touched_at,
                              .acs = &acs,
                              .clear = (uint32_t)m.clear_delid,
                              .public_data = user_public(g, a->tenant_id, peer, keep),
                              .private_data = priv};
    desc_counts(&d, &cg.out, &m);
    size_t len;
    qim__gw_out_built(out, qim_proto_meta_desc(id, topic, now, &d, &len), &len);
    json_decref(keep);
  }
  qim_store_member_free(&m);
  qim_store_conversation_free(&cg.out);
}

/* sub of a P2P topic: both users (the caller and the peer), as Tinode lists them. */
static void p2p_subs(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                     qim_user_id peer, const char *topic, const char *id,
                     const qim_proto_get_opts *o, gw_out *out) {
  uint64_t now = qim__gw_now(g);
  qim_store_member own = {0};
  int rc = own_member(g, a, conv, &own);
  qim_store_member_free(&own);
  if (rc) {
    qim__gw_out_fail(out, id, topic, rc, now);
    return;
  }
  qim_user_id users[2] = {a->user_id, peer};
  qim_proto_topic_sub subs[2];
  qim_proto_acs acs[2];
  char names[2][QIM_TOPIC_NAME_CAP];
  json_t *keep = json_array();
  size_t n = 0;
  for (size_t i = 0; i < 2; i++) {
    member_entry(g, a, conv, users[i], &subs[n], &acs[n], names[n], keep);
    if ((o->user && strcmp(names[n], o->user) != 0) ||
        (o->has_ims && subs[n].updated_ms <= o->ims_ms))
      continue;
    n++;
  }
  size_t len;
  if (n == 0)
    add_nothing(out, id, topic, "sub", now);
  else
    qim__gw_out_built(out, qim_proto_meta_sub(id, topic, now, subs, n, &len), &len);
  json_decref(keep);
}

void qim__gw_get_p2p(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                     qim_user_id peer, const char *topic, const char *id,
                     const qim_proto_get_query *q, gw_out *out) {
  if (q->what & QIM_PROTO_WHAT_DESC) p2p_desc(g, a, conv, peer, topic, id, &q->desc, out);
  if (q->what & QIM_PROTO_WHAT_SUB) p2p_subs(g, a, conv, peer, topic, id, &q->sub, out);
  if (q->what & QIM_PROTO_WHAT_DATA) group_data(g, a, conv, topic, id, &q->data, out);
  if (q->what & QIM_PROTO_WHAT_DEL) group_del(g, a, conv, topic, id, &q->del, out);
}
