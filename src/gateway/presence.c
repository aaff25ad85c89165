/*
 * presence.c — Tinode's online/offline presence ({pres what:"on"|"off"}), kept bounded.
 *
 * What clients are told (docs/gateway.md "Presence"):
 *   - member presence in a topic: when a user's first session attaches to a topic, the
 *     other sessions attached to it (holding P) get {pres topic:<topic> src:<usr> what:on};
 *     when the user's last session detaches, what:off (Tinode's presSubsOnline);
 *   - topic activity on `me`: when a topic's first session attaches / last one detaches,
 *     its members' `me` sessions get {pres topic:me src:<topic> what:on|off};
 *   - a user online on `me`: when the user's first session attaches to `me` / the last one
 *     leaves, the users sharing a direct (p2p) conversation get {pres topic:me
 *     src:<usr> what:on|off} on their `me`; on "on" the user's `me` gets what:on for each
 *     such contact online and each of its topics that is active (Tinode's reply).
 *
 * How it stays cheap: sessions only count (a registry shared by every loop, one mutex);
 * a count crossing zero marks its entry. Loop 0 takes the marked entries every
 * presence_interval: an entry back in the state clients were last told (an on/off flap)
 * yields nothing, so a user reconnecting within an interval costs no frame at all. Member
 * changes of one topic are limited per interval to presence_fanout_max / (sessions
 * attached), so a 1000-session topic gets at most a few shared frames per interval and a
 * join storm spreads over several intervals (counted as deferred) instead of multiplying.
 * Each change is one frame serialized once and posted to every loop; a loop delivers at
 * most presence_fanout_max frames per change (the rest are counted as capped). Changes
 * needing the store (contacts of a user, members of a topic) run as worker jobs, one at a
 * time in order, so an "off" can never overtake its "on".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define EVENT_LIMIT 65536 /* presence events queued per loop before new ones are dropped */
#define JOBS_MAX 4096     /* presence jobs waiting before new ones are dropped */

/* ---- the registry --------------------------------------------------------------------------- */

typedef struct pent {
  struct pent *next;
  gw_pres_kind kind;
  qim_u128 tenant, conv, user; /* the key (conv zero for ME, user zero for TOPIC) */
  unsigned count;              /* live sessions */
  bool shown;                  /* what clients were last told: on */
  bool dirty;                  /* in the marked list */
  unsigned taken;              /* TOPIC: member changes of this topic in the current take */
  qim_user_id actor;           /* TOPIC: the last user whose session changed the count */
} pent;

typedef struct pres_job pres_job;

struct gw_presence {
  pthread_mutex_t mu;
  pent **b;
  size_t nb, n;
  pent **dirty;
  size_t ndirty, cdirty;
  /* The runner, touched only on loop 0. */
  gw_loop *l0;
  uv_timer_t timer;
  bool timer_on;
  pres_job *qhead, *qtail;
  unsigned qlen;
  bool busy;
};

static uint64_t hash_key(gw_pres_kind k, qim_u128 t, qim_u128 c, qim_u128 u) {
  uint64_t h = qim_mix64((uint64_t)k ^ t.hi ^ qim_mix64(t.lo));
  h = qim_mix64(h ^ c.hi) ^ c.lo;
  h = qim_mix64(h ^ u.hi) ^ u.lo;
  return qim_mix64(h);
}

gw_presence *qim__gw_presence_new(void) {
  gw_presence *p = qim_calloc(1, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  p->nb = 64;
  p->b = qim_calloc(p->nb, sizeof *p->b);
  return p;
}

void qim__gw_presence_free(gw_presence *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nb; i++)
    for (pent *e = p->b[i], *n; e; e = n) {
      n = e->next;
      qim_free(e);
    }
  qim_free(p->b);
  qim_free(p->dirty);
  pthread_mutex_destroy(&p->mu);
  qim_free(p);
}

/* The chain slot holding the key (or where it would go). Under mu. */
static pent **slot(gw_presence *p, gw_pres_kind k, qim_u128 t, qim_u128 c, qim_u128 u) {
  pent **pp = &p->b[hash_key(k, t, c, u) & (p->nb - 1)];
  while (*pp && !((*pp)->kind == k && qim_u128_eq((*pp)->tenant, t) &&
                  qim_u128_eq((*pp)->conv, c) && qim_u128_eq((*pp)->user, u)))
    pp = &(*pp)->next;
  return pp;
}

static void grow(gw_presence *p) {
  size_t nb = p->nb * 2;
  pent **b = qim_calloc(nb, sizeof *b);
  for (size_t i = 0; i < p->nb; i++)
    for (pent *e = p->b[i], *n; e; e = n) {
      n = e->next;
      size_t j = hash_key(e->kind, e->tenant, e->conv, e->user) & (nb - 1);
      e->next = b[j];
      b[j] = e;
    }
  qim_free(p->b);
  p->b = b;
  p->nb = nb;
}

/* The key of a count: ME has no topic, TOPIC no user. */
static void key_of(gw_pres_kind k, qim_conversation_id *conv, qim_user_id *user) {
  if (k == GW_PRES_ME) conv->v = (qim_u128){0, 0};
  if (k == GW_PRES_TOPIC) user->v = (qim_u128){0, 0};
}

void qim__gw_presence_count(gw_presence *p, gw_pres_kind k, qim_tenant_id t,
                            qim_conversation_id conv, qim_user_id user, int delta) {
  qim_user_id actor = user;
  key_of(k, &conv, &user);
  pthread_mutex_lock(&p->mu);
  pent **pp = slot(p, k, t.v, conv.v, user.v);
  pent *e = *pp;
  if (!e && delta > 0) {
    e = qim_calloc(1, sizeof *e);
    *e = (pent){.kind = k, .tenant = t.v, .conv = conv.v, .user = user.v};
    *pp = e;
    if (++p->n > 2 * p->nb) grow(p);
  }
  if (e && !(delta < 0 && e->count == 0)) {
    bool was = e->count > 0;
    e->count = delta > 0 ? e->count + (unsigned)delta : e->count - (unsigned)-delta;
    if (k == GW_PRES_TOPIC) e->actor = actor;
    if (was != (e->count > 0) && !e->dirty) {
      if (p->ndirty == p->cdirty) {
        p->cdirty = p->cdirty ? p->cdirty * 2 : 64;
        p->dirty = qim_realloc(p->dirty, p->cdirty * sizeof *p->dirty);
      }
      p->dirty[p->ndirty++] = e;
      e->dirty = true;
    }
  }
  pthread_mutex_unlock(&p->mu);
}

bool qim__gw_presence_is_on(gw_presence *p, gw_pres_kind k, qim_tenant_id t,
                            qim_conversation_id conv, qim_user_id user) {
  key_of(k, &conv, &user);
  pthread_mutex_lock(&p->mu);
  pent *e = *slot(p, k, t.v, conv.v, user.v);
  bool on = e && e->shown;
  pthread_mutex_unlock(&p->mu);
  return on;
}

size_t qim__gw_presence_entries(gw_presence *p) {
  pthread_mutex_lock(&p->mu);
  size_t n = p->n;
  pthread_mutex_unlock(&p->mu);
  return n;
}

/* Under mu: false when this member change must wait (its topic had its share this take). */
static bool member_turn(gw_presence *p, const pent *e, uint32_t fanout_max, pent ***touched,
                        size_t *nt) {
  pent *t = *slot(p, GW_PRES_TOPIC, e->tenant, e->conv, (qim_u128){0, 0});
  if (!t) return true; /* nobody attached: nobody to tell, nothing to bound */
  unsigned k = fanout_max / (t->count ? t->count : 1);
  if (k == 0) k = 1;
  if (t->taken >= k) return false;
  if (t->taken++ == 0) (*touched)[(*nt)++] = t;
  return true;
}

/* Under mu: frees an entry nobody counts and clients know as off. */
static void maybe_free(gw_presence *p, pent *e) {
  if (e->count || e->shown || e->dirty) return;
  pent **pp = slot(p, e->kind, e->tenant, e->conv, e->user);
  *pp = e->next;
  p->n--;
  qim_free(e);
}

size_t qim__gw_presence_take(gw_presence *p, uint32_t fanout_max, gw_pres_change **out,
                             uint64_t *deferred) {
  *out = NULL;
  pthread_mutex_lock(&p->mu);
  size_t nd = p->ndirty, n = 0, keep = 0, nt = 0, nf = 0;
  pent **list = p->dirty;
  p->dirty = NULL;
  p->ndirty = p->cdirty = 0;
  gw_pres_change *ch = nd ? qim_calloc(nd, sizeof *ch) : NULL;
  pent **touched = nd ? qim_calloc(nd, sizeof *touched) : NULL;
  pent **fin = nd ? qim_calloc(nd, sizeof *fin) : NULL; /* unmarked now: maybe freed */
  for (size_t i = 0; i < nd; i++) {
    pent *e = list[i];
    bool on = e->count > 0;
    if (on != e->shown && e->kind == GW_PRES_MEMBER &&
        !member_turn(p, e, fanout_max, &touched, &nt)) {
      list[keep++] = e; /* stays marked for the next take (keep <= i: nothing unread is lost) */
      (*deferred)++;
      continue;
    }
    e->dirty = false;
    fin[nf++] = e;
    if (on == e->shown) continue; /* a flap: clients already know this state */
    e->shown = on;
    ch[n++] = (gw_pres_change){.kind = e->kind,
                               .tenant = {e->tenant},
                               .conv = {e->conv},
                               .user = {e->user},
                               .actor = e->actor,
                               .on = on};
  }
  for (size_t i = 0; i < nt; i++) touched[i]->taken = 0;
  for (size_t i = 0; i < nf; i++) maybe_free(p, fin[i]);
  if (keep) { /* nothing was marked meanwhile (we hold mu): the kept list is the list */
    p->dirty = list;
    p->ndirty = keep;
    p->cdirty = nd;
  } else {
    qim_free(list);
  }
  pthread_mutex_unlock(&p->mu);
  qim_free(touched);
  qim_free(fin);
  if (!n) {
    qim_free(ch);
    ch = NULL;
  }
  *out = ch;
  return n;
}

/* ---- session hooks ----------------------------------------------------------------------------
 */

void qim__gw_presence_attach(gw_session *s, qim_conversation_id conv, int delta) {
  gw_presence *p = s->loop->gw->pres;
  qim__gw_presence_count(p, GW_PRES_MEMBER, s->tenant, conv, s->user, delta);
  qim__gw_presence_count(p, GW_PRES_TOPIC, s->tenant, conv, s->user, delta);
}

void qim__gw_presence_me(gw_session *s, int delta) {
  qim__gw_presence_count(s->loop->gw->pres, GW_PRES_ME, s->tenant, (qim_conversation_id){{0, 0}},
                         s->user, delta);
}

/* ---- shared frames posted to every loop ---------------------------------------------------------
 */

/* One notice per item; `user` is the item's subject (its own sessions are skipped in a
 * topic). */
typedef struct pres_item {
  qim_user_id user;
  bool on;
  qim_ws_frame *f;
} pres_item;

/* Immutable once posted; freed by the last loop done with it. */
typedef struct pres_batch {
  _Atomic unsigned refs;
  bool to_me; /* to the `me` sessions of `users`; else to the sessions attached to conv */
  qim_tenant_id tenant;
  qim_conversation_id conv;
  char topic[QIM_TOPIC_NAME_CAP]; /* the topic's group name (topic batches) */
  pres_item *items;
  size_t n, cap;
  qim_user_id *users;
  size_t nusers, cusers;
} pres_batch;

typedef struct pres_event {
  qim_cq_item it;
  gw_loop *l;
  pres_batch *b;
} pres_event;

static qim_ws_frame *pres_frame(const char *topic, const char *src, bool on) {
  size_t len;
  qim_proto_pres_frame pf = {.topic = topic, .src = src, .what = on ? "on" : "off"};
  char *j = qim_proto_pres(&pf, &len);
  if (!j) return NULL;
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, j, len);
  qim_free(j);
  return f;
}

static pres_batch *batch_new(bool to_me, qim_tenant_id t, qim_conversation_id conv) {
  pres_batch *b = qim_calloc(1, sizeof *b);
  atomic_init(&b->refs, 1);
  b->to_me = to_me;
  b->tenant = t;
  b->conv = conv;
  qim_group_id_format((qim_group_id){conv.v}, b->topic, sizeof b->topic);
  return b;
}

static void batch_item(pres_batch *b, qim_user_id user, bool on, const char *topic,
                       const char *src) {
  qim_ws_frame *f = pres_frame(topic, src, on);
  if (!f) return;
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4;
    b->items = qim_realloc(b->items, b->cap * sizeof *b->items);
  }
  b->items[b->n++] = (pres_item){.user = user, .on = on, .f = f};
}

static void batch_user(pres_batch *b, qim_user_id u) {
  if (b->nusers == b->cusers) {
    b->cusers = b->cusers ? b->cusers * 2 : 16;
    b->users = qim_realloc(b->users, b->cusers * sizeof *b->users);
  }
  b->users[b->nusers++] = u;
}

static void batch_unref(pres_batch *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  for (size_t i = 0; i < b->n; i++) qim_ws_frame_unref(b->items[i].f);
  qim_free(b->items);
  qim_free(b->users);
  qim_free(b);
}

/* Sends `f` unless this loop's budget for the batch is spent (then counts it as capped). */
static void send_budget(gw_session *s, qim_ws_frame *f, uint32_t *budget, uint64_t *sent,
                        uint64_t *capped) {
  if (*budget == 0) {
    (*capped)++;
    return;
  }
  (*budget)--;
  (*sent)++;
  qim_conn_send_frame(s->conn, f);
}

/* Member presence in a topic: to its attached sessions holding P, not the subject's own. A
 * session that names the topic otherwise (p2p: usr<peer>) gets a frame of its own. */
static void deliver_topic(gw_loop *l, const pres_batch *b, uint32_t *budget, uint64_t *sent,
                          uint64_t *capped) {
  size_t n;
  gw_session *const *v = qim__gw_index_find(&l->by_conv, qim__gw_key(b->tenant, b->conv.v), &n);
  for (size_t i = 0; i < n; i++) {
    gw_session *s = v[i];
    gw_attach *a = s->conn ? qim__gw_session_attached(s, b->conv) : NULL;
    if (!a || !(a->mode & QIM_MODE_P)) continue;
    for (size_t k = 0; k < b->n; k++) {
      if (qim_u128_eq(b->items[k].user.v, s->user.v)) continue;
      if (strcmp(a->topic, b->topic) == 0) {
        send_budget(s, b->items[k].f, budget, sent, capped);
        continue;
      }
      char src[QIM_TOPIC_NAME_CAP];
      qim_user_id_format(b->items[k].user, src, sizeof src);
      qim_ws_frame *f = pres_frame(a->topic, src, b->items[k].on);
      if (f) send_budget(s, f, budget, sent, capped);
      qim_ws_frame_unref(f);
    }
  }
}

static void deliver_me(gw_loop *l, const pres_batch *b, uint32_t *budget, uint64_t *sent,
                       uint64_t *capped) {
  for (size_t u = 0; u < b->nusers; u++) {
    size_t n;
    gw_session *const *v =
        qim__gw_index_find(&l->by_user, qim__gw_key(b->tenant, b->users[u].v), &n);
    for (size_t i = 0; i < n; i++)
      if (v[i]->conn && v[i]->me)
        for (size_t k = 0; k < b->n; k++) send_budget(v[i], b->items[k].f, budget, sent, capped);
  }
}

static void event_run(qim_cq_item *it) {
  pres_event *ev = (pres_event *)it;
  gw_loop *l = ev->l;
  qim_gateway *g = l->gw;
  qim__gw_loop_posted_done(l);
  if (!l->stopping) {
    uint32_t budget = g->d.cfg->presence_fanout_max;
    uint64_t sent = 0, capped = 0;
    if (ev->b->to_me)
      deliver_me(l, ev->b, &budget, &sent, &capped);
    else
      deliver_topic(l, ev->b, &budget, &sent, &capped);
    atomic_fetch_add(&g->st_pres_onoff, sent);
    atomic_fetch_add(&g->st_capped, capped);
  }
  batch_unref(ev->b);
  qim_free(ev);
}

/* Posts the batch to every loop and drops the caller's reference. */
static void post_all(qim_gateway *g, pres_batch *b) {
  if (!b) return;
  if (b->n && (!b->to_me || b->nusers))
    for (unsigned i = 0; i < g->nloops; i++) {
      pres_event *ev = qim_calloc(1, sizeof *ev);
      *ev = (pres_event){.it = {.run = event_run}, .l = &g->loops[i], .b = b};
      atomic_fetch_add(&b->refs, 1);
      if (!qim__gw_loop_post(ev->l, &ev->it, EVENT_LIMIT)) {
        atomic_fetch_add(&g->st_dropped, 1);
        batch_unref(b);
        qim_free(ev);
      }
    }
  batch_unref(b);
}

/* ---- changes that need the store: one job at a time, in order ----------------------------------
 */

struct pres_job {
  gw_job j;
  pres_job *next;
  gw_pres_change c;
  pres_batch *out[2]; /* posted after the job, in this order */
};

/* A user came online / went offline on `me`: their p2p contacts' `me` sessions are told;
 * on "on", the user's `me` learns which contacts are online and which topics are active. */
static void me_run(gw_job *j) {
  pres_job *pj = (pres_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_pres_change *c = &pj->c;
  qim_conversation_id none = {{0, 0}};
  char name[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(c->user, name, sizeof name);
  pres_batch *peers = batch_new(true, c->tenant, none),
             *reply = c->on ? batch_new(true, c->tenant, none) : NULL;
  batch_item(peers, c->user, c->on, "me", name);
  if (reply) batch_user(reply, c->user);
  qim_page_cursor cur = {{0}};
  for (size_t seen = 0; seen < g->o.me_list_max;) {
    qim_store_subscriptions_req q = {.tenant_id = c->tenant,
                                     .user_id = c->user,
                                     .cursor = cur,
                                     .limit = g->o.me_list_max - (uint32_t)seen};
    int rc = QIM_STORE_SYNC(g->d.store, conversations.subscriptions, &q);
    qim_bytes_free(&cur.bytes);
    if (rc) break;
    for (size_t i = 0; i < q.out_count; i++, seen++) {
      const qim_store_member *m = &q.out_members[i];
      const qim_store_conversation *cv = &q.out_convs[i];
      if (m->has_left_at || m->banned || cv->deleted) continue;
      if (cv->kind == QIM_CONVERSATION_GROUP) {
        if (reply && qim__gw_presence_is_on(g->pres, GW_PRES_TOPIC, c->tenant, cv->conversation_id,
                                            c->user)) {
          char topic[QIM_TOPIC_NAME_CAP];
          qim_group_id_format((qim_group_id){cv->conversation_id.v}, topic, sizeof topic);
          batch_item(reply, (qim_user_id){{0, 0}}, true, "me", topic);
        }
        continue;
      }
      /* A direct conversation: the contact is the other user. */
      qim_user_id peer =
          qim_u128_eq(cv->direct_users[0].v, c->user.v) ? cv->direct_users[1] : cv->direct_users[0];
      batch_user(peers, peer);
      if (reply && qim__gw_presence_is_on(g->pres, GW_PRES_ME, c->tenant, none, peer)) {
        char pn[QIM_TOPIC_NAME_CAP];
        qim_user_id_format(peer, pn, sizeof pn);
        batch_item(reply, peer, true, "me", pn);
      }
    }
    for (size_t i = 0; i < q.out_count; i++) {
      qim_store_member_free(&q.out_members[i]);
      qim_store_conversation_free(&q.out_convs[i]);
    }
    qim_free(q.out_members);
    qim_free(q.out_convs);
    cur = q.out_next;
    if (cur.bytes.n == 0 || q.out_count == 0) break;
  }
  qim_bytes_free(&cur.bytes);
  pj->out[0] = peers;
  pj->out[1] = reply;
}

/* A topic became active / inactive: its members' `me` sessions are told (at most
 * presence_fanout_max members; the rest are counted as capped). Members are listed as the
 * user whose session changed the count; a topic that is not a group lists nothing. */
static void topic_run(gw_job *j) {
  pres_job *pj = (pres_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_pres_change *c = &pj->c;
  uint32_t max = g->d.cfg->presence_fanout_max;
  pres_batch *b = batch_new(true, c->tenant, c->conv);
  batch_item(b, (qim_user_id){{0, 0}}, c->on, "me", b->topic);
  qim_member_page_request pr = {.actor = {.tenant_id = c->tenant, .user_id = c->actor},
                                .group_id = {c->conv.v}};
  for (;;) {
    qim_member_page page = {0};
    if (qim_group_member_page(g->d.groups, &pr, &page) != 0) break;
    for (size_t i = 0; i < page.member_count; i++) {
      if (page.members[i].has_left_at) continue;
      if (b->nusers < max)
        batch_user(b, page.members[i].user_id);
      else
        atomic_fetch_add(&g->st_capped, 1);
    }
    pr.has_cursor = page.has_next_cursor && page.has_more;
    if (pr.has_cursor) {
      qim_bytes_free(&pr.cursor.bytes);
      pr.cursor = page.next_cursor;
      page.has_next_cursor = false;
      memset(&page.next_cursor, 0, sizeof page.next_cursor);
    }
    qim_member_page_free(&page);
    if (!pr.has_cursor) break;
  }
  qim_bytes_free(&pr.cursor.bytes);
  pj->out[0] = b;
}

static void job_pump(gw_presence *p);

static void job_after(gw_job *j) {
  pres_job *pj = (pres_job *)j;
  gw_loop *l = j->loop;
  gw_presence *p = l->gw->pres;
  for (int i = 0; i < 2; i++) {
    if (!l->stopping)
      post_all(l->gw, pj->out[i]);
    else
      batch_unref(pj->out[i]);
    pj->out[i] = NULL;
  }
  p->busy = false;
  job_pump(p);
}

static void job_destroy(gw_job *j) {
  pres_job *pj = (pres_job *)j;
  batch_unref(pj->out[0]);
  batch_unref(pj->out[1]);
}

static void job_pump(gw_presence *p) {
  if (p->busy || !p->qhead || p->l0->stopping) return;
  pres_job *pj = p->qhead;
  p->qhead = pj->next;
  if (!p->qhead) p->qtail = NULL;
  p->qlen--;
  p->busy = true;
  qim__gw_job_start(p->l0, &pj->j);
}

static void job_add(gw_presence *p, const gw_pres_change *c) {
  qim_gateway *g = p->l0->gw;
  if (p->qlen >= JOBS_MAX) {
    atomic_fetch_add(&g->st_dropped, 1);
    return;
  }
  pres_job *pj = qim_calloc(1, sizeof *pj);
  pj->c = *c;
  pj->j.run = c->kind == GW_PRES_ME ? me_run : topic_run;
  pj->j.after = job_after;
  pj->j.destroy = job_destroy;
  if (p->qtail)
    p->qtail->next = pj;
  else
    p->qhead = pj;
  p->qtail = pj;
  p->qlen++;
  job_pump(p);
}

/* ---- the runner on loop 0
 * ------------------------------------------------------------------------ */

static int change_cmp(const void *a, const void *b) {
  const gw_pres_change *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  int t = memcmp(&x->tenant, &y->tenant, sizeof x->tenant);
  return t ? t : memcmp(&x->conv, &y->conv, sizeof x->conv);
}

/* Every presence_interval: member changes become one batch per topic (each change one
 * frame shared by every receiver); the others become jobs. */
static void on_tick(uv_timer_t *t) {
  gw_presence *p = t->data;
  qim_gateway *g = p->l0->gw;
  if (p->l0->stopping) return;
  gw_pres_change *ch;
  uint64_t deferred = 0;
  size_t n = qim__gw_presence_take(p, g->d.cfg->presence_fanout_max, &ch, &deferred);
  atomic_fetch_add(&g->st_pres_deferred, deferred);
  if (!n) return;
  qsort(ch, n, sizeof *ch, change_cmp);
  pres_batch *b = NULL;
  for (size_t i = 0; i < n; i++) {
    const gw_pres_change *c = &ch[i];
    if (c->kind != GW_PRES_MEMBER) {
      job_add(p, c);
      continue;
    }
    if (!b || !qim_u128_eq(b->conv.v, c->conv.v) || !qim_u128_eq(b->tenant.v, c->tenant.v)) {
      post_all(g, b);
      b = batch_new(false, c->tenant, c->conv);
    }
    char src[QIM_TOPIC_NAME_CAP];
    qim_user_id_format(c->user, src, sizeof src);
    batch_item(b, c->user, c->on, b->topic, src);
  }
  post_all(g, b);
  qim_free(ch);
}

void qim__gw_presence_loop_start(gw_loop *l) {
  gw_presence *p = l->gw->pres;
  if (l->index != 0) return;
  p->l0 = l;
  uint64_t ms = l->gw->d.cfg->presence_interval_ms;
  if (!ms) ms = 250;
  uv_timer_init(l->uv, &p->timer);
  p->timer.data = p;
  uv_timer_start(&p->timer, on_tick, ms, ms);
  p->timer_on = true;
}

void qim__gw_presence_loop_stop(gw_loop *l) {
  gw_presence *p = l->gw->pres;
  if (l->index != 0 || !p->timer_on) return;
  p->timer_on = false;
  uv_timer_stop(&p->timer);
  uv_close((uv_handle_t *)&p->timer, NULL);
  while (p->qhead) { /* not started: nothing of theirs is in flight */
    pres_job *pj = p->qhead;
    p->qhead = pj->next;
    qim_free(pj);
  }
  p->qtail = NULL;
  p->qlen = 0;
}
