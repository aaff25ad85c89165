/*
 * push.c — live delivery: the mailbox's PushBatches become frames for the sessions of
 * this loop (its ConnectionShardId). This is the ONLY source of live {data}: a pub is
 * pushed once it is durable, fanned out and materialized, so what a client sees live is
 * exactly what its mailbox holds.
 *
 * Per entry, for each logged-in session of the entry's user on this loop:
 *   Message     attached to the conversation → {data} (not to the sending session of a
 *               noecho pub); on `me` only → {pres topic:"me" what:"msg" src seq act};
 *   Membership  (a group change, docs/groups.md) → {pres what:"acs" src:<member> dacs} to
 *               sessions attached to the group, so the others learn of joins and leaves;
 *               the evicted or banned member itself: {ctrl 205 "evicted" {unsub:true}} on
 *               the topic and {pres topic:"me" what:"gone"}; a deleted group (op "delete"):
 *               {pres what:"gone"} on the topic and on `me`; both detach the sessions;
 *   Control     "qim.history" deletions → {pres what:"del" src:<actor> clear delseq} to
 *               attached sessions (hard: every member's; soft: only the deleter's own),
 *               {pres topic:"me" what:"del"} to `me` sessions; other Controls (edits, read
 *               positions) carry nothing a Tinode client needs live.
 * One serialized frame is shared by every receiver of the same message (or Control) in a
 * batch on this loop.
 *
 * Bodies larger than the inline threshold are not in mailbox entries: the record is read
 * from the store (asynchronously, on this loop) before the entry is delivered. Batches
 * are handled strictly one after the other, so per-user order is the mailbox's order.
 *
 * Topic names. A group is `grp…` for everyone; a direct (P2P) conversation is named by
 * each user after the OTHER user (`usr…`), so the name depends on the entry's user. An
 * entry whose sender is another user names itself: the conversation is direct exactly
 * when its id is qim_conversation_id_direct(user, sender) (a direct conversation's
 * entries come from its two members). For the user's own entries the conversation's kind
 * is looked up once per loop (asynchronously, like a body) and kept in a small
 * direct-mapped table (kinds never change, so it is never stale).
 *
 * `me` as the session list: besides {pres what:"msg"} and "del", a membership change of
 * the entry's own user reaches its `me` sessions as {pres what:"acs"} (joined, mode
 * changed) or {pres what:"gone"} (left, removed, banned).
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/payload.h"
#include "qim/record.h"

#define PUSH_LIMIT 8192 /* batches queued per loop before new ones are dropped */
#define KIND_SLOTS 4096 /* conversation kinds remembered per loop */

struct gw_kind {
  qim_tenant_id tenant;
  qim_conversation_id conv;
  bool used, direct;
  qim_user_id users[2];
};

/* One member's change in a Membership message; user and mode point into the parsed JSON. */
typedef struct gw_change {
  const char *user, *mode; /* mode: "N" when gone; NULL when the change names none */
  bool gone, evicts;       /* evicts: removed or banned (a member who left is not evicted) */
  qim_ws_frame *acs;       /* {pres what:"acs" src:user dacs:mode} on the topic, when mode */
} gw_change;

/* What the last entry delivered needed, kept for the entries after it: a batch holds each
 * message's entries one after the other, so its receivers here share one serialization
 * (and a large group's Control is parsed once, not per member: that per-entry parse and
 * frame build cost the loops a third of their time while a 1,000-member group filled up).
 * Keyed by message id AND topic name: the two users of a direct conversation name it
 * differently, so each needs frames of its own. */
typedef struct gw_cache {
  qim_message_id id;
  char topic[QIM_TOPIC_NAME_CAP];
  bool have;
  /* a Message */
  qim_ws_frame *data, *pres_act, *pres_own;
  /* a Control */
  json_t *json;
  bool deleted; /* Membership op "delete": the whole group is gone */
  gw_change *v; /* Membership changes */
  size_t n;
  bool del; /* a history deletion; other history ops carry nothing a Tinode client needs live */
  qim_ws_frame *del_topic, *del_me; /* to attached sessions, to `me` sessions */
} gw_cache;

typedef struct gw_push {
  qim_cq_item it;
  gw_loop *l;
  qim_push_batch *b;
  size_t next;                   /* entry being delivered */
  struct gw_push *qnext;
  qim_store_record_get_req get;  /* the body of entry `next`, when not inline */
  bool fetching, fetched;
  qim_store_conv_get_req kind; /* the conversation of entry `next`, when its kind is unknown */
  gw_cache cache;
} gw_push;

static void cache_clear(gw_cache *c) {
  qim_ws_frame_unref(c->data);
  qim_ws_frame_unref(c->pres_act);
  qim_ws_frame_unref(c->pres_own);
  for (size_t i = 0; i < c->n; i++) qim_ws_frame_unref(c->v[i].acs);
  qim_free(c->v);
  qim_ws_frame_unref(c->del_topic);
  qim_ws_frame_unref(c->del_me);
  json_decref(c->json);
  *c = (gw_cache){0};
}

/* Does c hold what entry e, named `topic` for its user, needs? */
static bool cache_hit(const gw_cache *c, const qim_mailbox_entry *e, const char *topic) {
  return c->have && memcmp(c->id.b, e->coordinates.message_id.b, 16) == 0 && strcmp(c->topic, topic) == 0;
}

/* Empties c and keys it to entry e; the caller fills it. */
static void cache_set(gw_cache *c, const qim_mailbox_entry *e, const char *topic) {
  cache_clear(c);
  c->have = true;
  c->id = e->coordinates.message_id;
  snprintf(c->topic, sizeof c->topic, "%s", topic);
}

static void push_free(gw_push *p) {
  cache_clear(&p->cache);
  if (p->fetched) qim_message_record_free(&p->get.out);
  qim_mailbox_push_batch_free(p->b);
  qim_free(p);
}

/* `len` is read after the builder ran (it is the builder's output). */
static qim_ws_frame *frame_of(char *json, const size_t *len) {
  if (!json) return NULL;
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, json, *len);
  qim_free(json);
  return f;
}

static void send_frame(gw_session *s, qim_ws_frame *f, _Atomic uint64_t *counter) {
  if (f && s->conn && qim_conn_send_frame(s->conn, f) == 0) atomic_fetch_add(counter, 1);
}

/* ---- messages --------------------------------------------------------------------------------- */

char *qim__gw_data_frame(const qim_proto_data_frame *base, const qim_message_content *c, size_t *len) {
  qim_proto_data_frame d = *base;
  qim_json_span body, h;
  json_t *head = NULL, *content = NULL;
  if (qim_payload_split_tinode(c, &body, &h) == 0) { /* the stored text, as it is */
    d.content_raw = body.p, d.content_raw_len = body.n;
    d.head_raw = h.p, d.head_raw_len = h.n;
  } else if (qim_history_content_to_tinode(c, &head, &content) == 0) {
    d.head = head, d.content = content;
  } else {
    return NULL;
  }
  char *frame = qim_proto_data(&d, len);
  json_decref(head);
  json_decref(content);
  return frame;
}

/* The {data} of entry e, from its content c (NULL when the body could not be had). */
static void build_message(gw_push *p, const qim_mailbox_entry *e, const qim_message_content *c,
                          const char *topic) {
  gw_cache *k = &p->cache;
  cache_set(k, e, topic);
  if (!c) return;
  char from[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(e->sender_id, from, sizeof from);
  qim_proto_data_frame d = {.topic = topic, .from = from, .ts_ms = e->created_at,
                            .seq = (uint32_t)e->coordinates.conversation_seq};
  size_t len;
  k->data = frame_of(qim__gw_data_frame(&d, c, &len), &len);
}

/* {pres topic:"me" what:"msg"} for entry e, made when a `me` session first needs it. */
static qim_ws_frame *message_pres(gw_cache *k, const qim_mailbox_entry *e, const char *topic, bool own) {
  qim_ws_frame **f = own ? &k->pres_own : &k->pres_act;
  if (*f) return *f;
  char from[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(e->sender_id, from, sizeof from);
  qim_proto_pres_frame pr = {.topic = "me", .src = topic, .what = "msg",
                             .seq = (uint32_t)e->coordinates.conversation_seq,
                             .act = own ? NULL : from}; /* Tinode leaves act out for the sender */
  size_t len;
  return *f = frame_of(qim_proto_pres(&pr, &len), &len);
}

static void deliver_message(gw_push *p, const qim_mailbox_entry *e, const qim_message_content *c,
                            const char *topic, gw_session *const *v, size_t n) {
  qim_gateway *g = p->l->gw;
  qim_conversation_id conv = e->coordinates.conversation_id;
  if (!cache_hit(&p->cache, e, topic)) build_message(p, e, c, topic);
  gw_cache *k = &p->cache;
  bool own = qim_u128_eq(e->sender_id.v, e->user_id.v);
  for (size_t i = 0; i < n; i++) {
    gw_session *s = v[i];
    gw_attach *a = qim__gw_session_attached(s, conv);
    if (a) {
      if (e->coordinates.conversation_seq <= a->since) continue; /* history, not live */
      if (own && e->has_client_message_id && qim__gw_session_noecho_take(s, &e->client_message_id))
        continue;
      if (own && e->has_client_message_id && k->data &&
          qim__gw_pending_hold(s, &e->client_message_id, k->data)) {
        atomic_fetch_add(&g->st_data, 1); /* sent right after the 202 */
        continue;
      }
      send_frame(s, k->data, &g->st_data);
    } else if (s->me) {
      send_frame(s, message_pres(k, e, topic, own), &g->st_pres);
    }
  }
}

/* ---- membership and history Controls ------------------------------------------------------------- */

static json_t *control_json(const qim_mailbox_entry *e) {
  if (!e->has_content || !e->body_included) return NULL;
  const qim_bytes *b = &e->content.payload_or_ciphertext;
  return b->n ? json_loadb((const char *)b->p, b->n, 0, NULL) : NULL;
}

/* true when c holds entry e's Control already; otherwise parses it into c (false): the
 * caller then reads what it needs and builds the frames. */
static bool control_cached(gw_cache *c, const qim_mailbox_entry *e, const char *topic) {
  if (cache_hit(c, e, topic)) return true;
  cache_set(c, e, topic);
  c->json = control_json(e);
  return false;
}

static void to_attached(gw_session *const *v, size_t n, qim_conversation_id conv, qim_ws_frame *f,
                        _Atomic uint64_t *counter) {
  for (size_t i = 0; i < n; i++)
    if (qim__gw_session_attached(v[i], conv)) send_frame(v[i], f, counter);
}

/* The entry's user lost the group: a deleted group ({pres what:"gone"} on the topic) or an
 * eviction (Tinode's {ctrl 205 "evicted" params:{unsub:true}}, which the SDK turns into
 * a gone topic); `me` sessions get {pres topic:"me" what:"gone" src}. Its sessions
 * detach, so they can no longer publish or read there. */
static void deliver_gone(gw_push *p, gw_session *const *v, size_t n, qim_conversation_id conv, const char *topic,
                         bool deleted) {
  qim_gateway *g = p->l->gw;
  size_t len;
  qim_proto_pres_frame tp = {.topic = topic, .what = "gone"}, mp = {.topic = "me", .src = topic, .what = "gone"};
  json_t *unsub = json_pack("{sb}", "unsub", 1);
  qim_ws_frame *ft = deleted ? frame_of(qim_proto_pres(&tp, &len), &len)
                             : frame_of(qim_proto_ctrl(NULL, topic, 205, "evicted", unsub, qim__gw_now(g), &len), &len);
  qim_ws_frame *fm = frame_of(qim_proto_pres(&mp, &len), &len);
  json_decref(unsub);
  for (size_t i = 0; i < n; i++) {
    if (qim__gw_session_attached(v[i], conv)) {
      send_frame(v[i], ft, &g->st_pres);
      qim__gw_session_detach(v[i], conv);
    }
    if (v[i]->me) send_frame(v[i], fm, &g->st_pres);
  }
  qim_ws_frame_unref(ft);
  qim_ws_frame_unref(fm);
}

/* The entry's own user's membership changed (g names it): its `me` sessions not attached
 * to the topic learn it (Tinode: pres acs for a new or changed subscription, gone when it
 * ends). */
static void membership_to_me(gw_push *p, qim_conversation_id conv, const char *topic, const gw_change *g,
                             gw_session *const *v, size_t n) {
  size_t len;
  qim_proto_pres_frame pr = {.topic = "me", .src = topic, .what = g->gone ? "gone" : "acs"};
  if (!g->gone) pr.dacs_want = pr.dacs_given = g->mode;
  qim_ws_frame *f = frame_of(qim_proto_pres(&pr, &len), &len);
  for (size_t i = 0; i < n; i++)
    if (v[i]->me && !qim__gw_session_attached(v[i], conv)) send_frame(v[i], f, &p->l->gw->st_pres);
  qim_ws_frame_unref(f);
}

/* Entry e's Membership changes and their frames in c, unless c holds them. */
static void changes_load(gw_cache *c, const qim_mailbox_entry *e, const char *topic) {
  if (control_cached(c, e, topic)) return;
  const char *op = json_string_value(json_object_get(c->json, "op"));
  c->deleted = op && strcmp(op, "delete") == 0;
  json_t *changes = json_object_get(c->json, "changes");
  if (c->deleted || !json_array_size(changes)) return;
  c->v = qim_calloc(json_array_size(changes), sizeof *c->v);
  size_t i;
  json_t *x;
  json_array_foreach(changes, i, x) {
    const char *user = json_string_value(json_object_get(x, "user"));
    const char *change = json_string_value(json_object_get(x, "change"));
    if (!user || !change) continue;
    gw_change *g = &c->v[c->n++];
    g->user = user;
    g->gone = strcmp(change, "removed") == 0 || strcmp(change, "left") == 0 || strcmp(change, "banned") == 0;
    g->evicts = g->gone && strcmp(change, "left") != 0;
    g->mode = g->gone ? "N" : json_string_value(json_object_get(x, "mode"));
    if (!g->mode) continue;
    size_t len;
    qim_proto_pres_frame pr = {.topic = topic, .src = user, .what = "acs", .dacs_want = g->mode, .dacs_given = g->mode};
    g->acs = frame_of(qim_proto_pres(&pr, &len), &len);
  }
}

static void deliver_membership(gw_push *p, const qim_mailbox_entry *e, const char *topic,
                               gw_session *const *v, size_t n) {
  gw_cache *c = &p->cache;
  changes_load(c, e, topic);
  qim_conversation_id conv = e->coordinates.conversation_id;
  if (c->deleted) { /* the whole group is gone: no per-member acs */
    deliver_gone(p, v, n, conv, topic, true);
    return;
  }
  char self[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(e->user_id, self, sizeof self);
  bool evicted = false;
  for (size_t i = 0; i < c->n; i++) {
    const gw_change *g = &c->v[i];
    bool own = strcmp(g->user, self) == 0;
    evicted = evicted || (own && g->evicts);
    if (!g->mode) continue;
    to_attached(v, n, conv, g->acs, &p->l->gw->st_pres);
    if (own && !g->evicts) membership_to_me(p, conv, topic, g, v, n); /* else deliver_gone tells `me` */
  }
  if (evicted) deliver_gone(p, v, n, conv, topic, false);
}

/* Ranges of a Control's JSON ([{low, hi?}]) appended to r (at most cap). */
static size_t ranges_from(json_t *a, qim_proto_range *r, size_t k, size_t cap) {
  size_t i;
  json_t *x;
  json_array_foreach(a, i, x) {
    if (k == cap) break;
    json_int_t low = json_integer_value(json_object_get(x, "low"));
    json_int_t hi = json_integer_value(json_object_get(x, "hi"));
    if (low <= 0 || low > QIM_PROTO_INT_MAX || hi < 0 || hi > QIM_PROTO_INT_MAX) continue;
    r[k++] = (qim_proto_range){(uint32_t)low, hi == low + 1 ? 0 : (uint32_t)hi};
  }
  return k;
}

/* Entry e's history deletion and its frames in c, unless c holds them. */
static void deletion_load(gw_cache *c, const qim_mailbox_entry *e, const char *topic) {
  if (control_cached(c, e, topic)) return;
  json_t *j = c->json;
  const char *op = json_string_value(json_object_get(j, "op"));
  c->del = op && strcmp(op, "del") == 0;
  if (!c->del) return;
  qim_proto_range r[QIM_PROTO_RANGES_MAX];
  size_t k = ranges_from(json_object_get(j, "deleted"), r, 0, QIM_PROTO_RANGES_MAX);
  k = ranges_from(json_object_get(j, "recalled"), r, k, QIM_PROTO_RANGES_MAX);
  k = ranges_from(json_object_get(j, "ranges"), r, k, QIM_PROTO_RANGES_MAX);
  json_int_t delid = json_integer_value(json_object_get(j, "delid"));
  size_t len;
  qim_proto_pres_frame pr = {.topic = topic, .src = json_string_value(json_object_get(j, "actor")), .what = "del",
                             .clear = (uint32_t)delid, .delseq = r, .delseq_n = k};
  c->del_topic = frame_of(qim_proto_pres(&pr, &len), &len);
  qim_proto_pres_frame me = {.topic = "me", .src = topic, .what = "del", .clear = (uint32_t)delid};
  c->del_me = frame_of(qim_proto_pres(&me, &len), &len);
}

static void deliver_history(gw_push *p, const qim_mailbox_entry *e, const char *topic,
                            gw_session *const *v, size_t n) {
  gw_cache *c = &p->cache;
  deletion_load(c, e, topic);
  if (!c->del) return; /* edit, read, expire: nothing a Tinode client needs live */
  qim_conversation_id conv = e->coordinates.conversation_id;
  for (size_t i = 0; i < n; i++) {
    if (qim__gw_session_attached(v[i], conv))
      send_frame(v[i], c->del_topic, &p->l->gw->st_pres);
    else if (v[i]->me)
      send_frame(v[i], c->del_me, &p->l->gw->st_pres);
  }
}

/* ---- the batch queue ------------------------------------------------------------------------------- */

static void run(gw_loop *l);

static void fetch_done(qim_store_req *req) {
  gw_push *p = (gw_push *)((char *)req - offsetof(gw_push, get));
  gw_loop *l = p->l;
  p->fetching = false;
  p->fetched = req->status == 0;
  if (req->status)
    QIM_LOGW(&p->b->trace_id, "gateway.push_body_missing", "seq=%llu err=%s",
             (unsigned long long)p->get.seq, qim_err_name(req->status));
  if (req->status) p->next++; /* deliver nothing for a body that is gone */
  run(l);
  qim__gw_loop_release(l);
}

/* Starts reading entry e's record; false when it could not be asked (then skip it). */
static bool fetch(gw_push *p, const qim_mailbox_entry *e) {
  gw_loop *l = p->l;
  memset(&p->get, 0, sizeof p->get);
  p->get.req.cq = l->cq;
  p->get.req.done = fetch_done;
  p->get.tenant_id = e->tenant_id;
  p->get.conversation_id = e->coordinates.conversation_id;
  p->get.seq = e->coordinates.conversation_seq;
  qim_store *st = l->gw->d.store;
  qim__gw_loop_hold(l);
  if (st->vt->history.get(st, &p->get) != 0) {
    qim__gw_loop_release(l);
    return false;
  }
  p->fetching = true;
  return true;
}

/* ---- topic names
 * ------------------------------------------------------------------------------------ */

static struct gw_kind *kind_slot(gw_loop *l, qim_conversation_id conv) {
  if (!l->kinds) l->kinds = qim_calloc(KIND_SLOTS, sizeof *l->kinds);
  return &l->kinds[(conv.v.lo ^ conv.v.hi) % KIND_SLOTS];
}

/* The name e's user gives e's conversation (PROTOCOL.md §3); false when its kind is not
 * known yet (then kind_fetch). */
static bool entry_topic(gw_loop *l, const qim_mailbox_entry *e, char *out) {
  qim_conversation_id conv = e->coordinates.conversation_id;
  bool other =
      !qim_u128_eq(e->sender_id.v, e->user_id.v) && !qim_u128_eq(e->sender_id.v, (qim_u128){0, 0});
  if (other) {
    if (qim_u128_eq(qim_conversation_id_direct(e->tenant_id, e->user_id, e->sender_id).v, conv.v))
      qim_user_id_format(e->sender_id, out, QIM_TOPIC_NAME_CAP);
    else
      qim_group_id_format((qim_group_id){conv.v}, out, QIM_TOPIC_NAME_CAP);
    return true;
  }
  struct gw_kind *k = kind_slot(l, conv);
  if (!k->used || !qim_u128_eq(k->conv.v, conv.v) || !qim_u128_eq(k->tenant.v, e->tenant_id.v))
    return false;
  if (!k->direct) {
    qim_group_id_format((qim_group_id){conv.v}, out, QIM_TOPIC_NAME_CAP);
  } else {
    bool first = qim_u128_eq(k->users[0].v, e->user_id.v);
    qim_user_id_format(k->users[first ? 1 : 0], out, QIM_TOPIC_NAME_CAP);
  }
  return true;
}

static void kind_done(qim_store_req *req) {
  gw_push *p = (gw_push *)((char *)req - offsetof(gw_push, kind));
  gw_loop *l = p->l;
  p->fetching = false;
  if (req->status == 0) {
    struct gw_kind *k = kind_slot(l, p->kind.conversation_id);
    *k = (struct gw_kind){.tenant = p->kind.tenant_id,
                          .conv = p->kind.conversation_id,
                          .used = true,
                          .direct = p->kind.out.kind == QIM_CONVERSATION_DIRECT,
                          .users = {p->kind.out.direct_users[0], p->kind.out.direct_users[1]}};
    qim_store_conversation_free(&p->kind.out);
  } else {
    QIM_LOGW(&p->b->trace_id, "gateway.push_conversation_missing", "err=%s",
             qim_err_name(req->status));
    p->next++; /* deliver nothing for a conversation that is gone */
  }
  run(l);
  qim__gw_loop_release(l);
}

/* Starts reading entry e's conversation; false when it could not be asked (skip it). */
static bool kind_fetch(gw_push *p, const qim_mailbox_entry *e) {
  gw_loop *l = p->l;
  memset(&p->kind, 0, sizeof p->kind);
  p->kind.req.cq = l->cq;
  p->kind.req.done = kind_done;
  p->kind.tenant_id = e->tenant_id;
  p->kind.conversation_id = e->coordinates.conversation_id;
  qim_store *st = l->gw->d.store;
  qim__gw_loop_hold(l);
  if (st->vt->conversations.get(st, &p->kind) != 0) {
    qim__gw_loop_release(l);
    return false;
  }
  p->fetching = true;
  return true;
}

static bool is_history_control(const qim_mailbox_entry *e) {
  return e->has_content && e->content.custom_type && strcmp(e->content.custom_type, QIM_HISTORY_CONTROL_TYPE) == 0;
}

/* Delivers entries from p->next on; false when it waits for a body read. */
static bool step(gw_push *p) {
  gw_loop *l = p->l;
  for (; p->next < p->b->entry_count; p->next++) {
    const qim_mailbox_entry *e = &p->b->entries[p->next];
    size_t n;
    gw_session *const *v = qim__gw_index_find(&l->by_user, qim__gw_key(e->tenant_id, e->user_id.v), &n);
    if (n == 0) continue;
    bool wanted = e->event_type == QIM_EVENT_TYPE_MESSAGE ||
                  e->event_type == QIM_EVENT_TYPE_MEMBERSHIP ||
                  (e->event_type == QIM_EVENT_TYPE_CONTROL && is_history_control(e));
    if (!wanted) continue;
    char topic[QIM_TOPIC_NAME_CAP];
    if (!entry_topic(l, e, topic)) {
      if (kind_fetch(p, e)) return false;
      continue;
    }
    if (e->event_type == QIM_EVENT_TYPE_MESSAGE) {
      const qim_message_content *c = e->has_content && e->body_included ? &e->content : NULL;
      /* Not the frames of another user's name for it: those cannot be reused, and the
       * body they were built from is gone (a second read then). */
      if (!c && !cache_hit(&p->cache, e, topic) && !p->fetched) {
        if (fetch(p, e)) return false;
        continue;
      }
      if (!c && p->fetched) c = &p->get.out.content;
      deliver_message(p, e, c, topic, v, n);
      if (p->fetched) {
        qim_message_record_free(&p->get.out);
        p->fetched = false;
      }
    } else if (e->event_type == QIM_EVENT_TYPE_MEMBERSHIP) {
      deliver_membership(p, e, topic, v, n);
    } else {
      deliver_history(p, e, topic, v, n);
    }
  }
  return true;
}

static void run(gw_loop *l) {
  l->push_busy = true;
  while (l->push_head) {
    gw_push *p = l->push_head;
    if (p->fetching || !step(p)) return; /* fetch_done resumes */
    l->push_head = p->qnext;
    if (!l->push_head) l->push_tail = NULL;
    push_free(p);
  }
  l->push_busy = false;
}

static void arrived(qim_cq_item *it) {
  gw_push *p = (gw_push *)it;
  gw_loop *l = p->l;
  qim__gw_loop_posted_done(l);
  atomic_fetch_add(&l->gw->st_batches, 1);
  if (l->stopping) {
    push_free(p);
    return;
  }
  if (l->push_tail)
    l->push_tail->qnext = p;
  else
    l->push_head = p;
  l->push_tail = p;
  if (!l->push_busy) run(l);
}

void qim__gw_push_sink(qim_push_batch *batch, void *ctx) {
  gw_loop *l = ctx;
  gw_push *p = qim_calloc(1, sizeof *p);
  p->it.run = arrived;
  p->l = l;
  p->b = batch;
  if (!qim__gw_loop_post(l, &p->it, PUSH_LIMIT)) {
    atomic_fetch_add(&l->gw->st_dropped, 1);
    QIM_LOGW(&batch->trace_id, "gateway.push_dropped", "cs=%u entries=%zu", l->cs, batch->entry_count);
    qim_mailbox_push_batch_free(batch);
    qim_free(p);
  }
}

void qim__gw_push_drop(gw_loop *l) {
  /* A batch waiting for a body read stays queued: its fetch_done will still run (it holds
   * the loop) and finishes it. Every other waiting batch is dropped: no session is left. */
  gw_push *keep = l->push_head && l->push_head->fetching ? l->push_head : NULL;
  gw_push *p = keep ? keep->qnext : l->push_head;
  while (p) {
    gw_push *next = p->qnext;
    push_free(p);
    p = next;
  }
  if (keep) keep->qnext = NULL;
  l->push_head = l->push_tail = keep;
}
