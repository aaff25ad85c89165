/*
 * push.c — handing materialized entries to connected users: the sink registry (one sink per
 * ConnectionShardId, registered by the gateway thread that owns it), the online routes
 * (user → connection shards, reference counted per session) and the PushBatches themselves.
 *
 * Materializers call in here only after the store's DurabilityReceipt and the lane's watermark
 * advance, so nothing is pushed that a crash could take back.
 *
 * Sharing: the entries of every batch made from one dispatch point into one reference-counted
 * body (DESIGN.md §1 rule 5): a 1,000-member group with everyone online copies no body.
 *
 * Locks: routes live in striped hash tables (the gateway's loops add and remove routes while
 * workers look them up, and no stripe is held across a sink call); sinks are read under a
 * rwlock held across the sink call, so unregister waits for calls in progress.
 */
#include <errno.h>
#include <string.h>

#include "mailbox/mailbox_int.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

#define STRIPES 64

typedef struct route {
  struct route *next;
  qim_tenant_id tenant;
  qim_user_id user;
  size_t n;                      /* connection shards */
  qim_connection_shard_id *cs;
  uint32_t *refs;                /* sessions per connection shard */
} route;

typedef struct stripe {
  pthread_mutex_t mu;
  route **buckets;
  size_t nbuckets, count;
} stripe;

typedef struct sink {
  qim_connection_shard_id cs;
  qim_mailbox_push_sink fn;
  void *ctx;
} sink;

struct mb_push {
  stripe stripes[STRIPES];
  atomic_size_t routes;          /* users with at least one route: lets lanes skip lookups */
  pthread_rwlock_t sinks_mu;
  sink *sinks;
  size_t nsinks;
};

/* One batch under construction (mb_push_builder.slots). */
typedef struct mb_push_slot {
  qim_connection_shard_id cs;
  struct push_box *box;
} mb_push_slot;

/* A PushBatch and what it holds on to; the batch is the first member (the sink's handle). */
typedef struct push_box {
  qim_push_batch batch;
  size_t cap;
  mb_body *body;
} push_box;

static uint64_t user_hash(qim_tenant_id t, qim_user_id u) {
  uint64_t h = t.v.hi * 0x9E3779B97F4A7C15u ^ t.v.lo ^ u.v.hi * 0xC2B2AE3D27D4EB4Fu ^ u.v.lo;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9u;
  return h ^ (h >> 29);
}

int qim__mb_push_new(mb_push **out) {
  mb_push *p = qim_calloc(1, sizeof *p);
  for (int i = 0; i < STRIPES; i++) {
    pthread_mutex_init(&p->stripes[i].mu, NULL);
    p->stripes[i].nbuckets = 16;
    p->stripes[i].buckets = qim_calloc(16, sizeof(route *));
  }
  pthread_rwlock_init(&p->sinks_mu, NULL);
  *out = p;
  return 0;
}

static void route_free(route *r) {
  qim_free(r->cs);
  qim_free(r->refs);
  qim_free(r);
}

void qim__mb_push_free(mb_push *p) {
  if (!p) return;
  for (int i = 0; i < STRIPES; i++) {
    stripe *s = &p->stripes[i];
    for (size_t b = 0; b < s->nbuckets; b++)
      for (route *r = s->buckets[b], *next; r; r = next) {
        next = r->next;
        route_free(r);
      }
    qim_free(s->buckets);
    pthread_mutex_destroy(&s->mu);
  }
  pthread_rwlock_destroy(&p->sinks_mu);
  qim_free(p->sinks);
  qim_free(p);
}

/* ---- routes ------------------------------------------------------------------------------------ */

static stripe *stripe_of(mb_push *p, uint64_t h) { return &p->stripes[h % STRIPES]; }

/* The bucket chain of (t, u) in its stripe. Holds s->mu. */
static route **chain(stripe *s, uint64_t h) { return &s->buckets[(h / STRIPES) % s->nbuckets]; }

static route *find(stripe *s, uint64_t h, qim_tenant_id t, qim_user_id u) {
  for (route *r = *chain(s, h); r; r = r->next)
    if (qim_u128_eq(r->tenant.v, t.v) && qim_u128_eq(r->user.v, u.v)) return r;
  return NULL;
}

static void grow(stripe *s) {
  size_t n = s->nbuckets * 2;
  route **b = qim_calloc(n, sizeof *b);
  for (size_t i = 0; i < s->nbuckets; i++)
    for (route *r = s->buckets[i], *next; r; r = next) {
      next = r->next;
      route **c = &b[(user_hash(r->tenant, r->user) / STRIPES) % n];
      r->next = *c;
      *c = r;
    }
  qim_free(s->buckets);
  s->buckets = b;
  s->nbuckets = n;
}

void qim_mailbox_route_add(qim_mailbox *m, qim_tenant_id tenant, qim_user_id user, qim_connection_shard_id cs) {
  mb_push *p = m->push;
  uint64_t h = user_hash(tenant, user);
  stripe *s = stripe_of(p, h);
  pthread_mutex_lock(&s->mu);
  route *r = find(s, h, tenant, user);
  if (!r) {
    if (s->count + 1 > 2 * s->nbuckets) grow(s);
    r = qim_calloc(1, sizeof *r);
    r->tenant = tenant, r->user = user;
    route **c = chain(s, h);
    r->next = *c;
    *c = r;
    s->count++;
    atomic_fetch_add(&p->routes, 1);
  }
  size_t i = 0;
  while (i < r->n && r->cs[i] != cs) i++;
  if (i == r->n) {
    r->cs = qim_realloc(r->cs, (r->n + 1) * sizeof *r->cs);
    r->refs = qim_realloc(r->refs, (r->n + 1) * sizeof *r->refs);
    r->cs[i] = cs, r->refs[i] = 0;
    r->n++;
  }
  r->refs[i]++;
  pthread_mutex_unlock(&s->mu);
}

int qim_mailbox_route_remove(qim_mailbox *m, qim_tenant_id tenant, qim_user_id user, qim_connection_shard_id cs) {
  mb_push *p = m->push;
  uint64_t h = user_hash(tenant, user);
  stripe *s = stripe_of(p, h);
  pthread_mutex_lock(&s->mu);
  route *r = find(s, h, tenant, user);
  size_t i = 0;
  while (r && i < r->n && r->cs[i] != cs) i++;
  if (!r || i == r->n) {
    pthread_mutex_unlock(&s->mu);
    return -ENOENT;
  }
  if (--r->refs[i] == 0) {
    r->n--;
    r->cs[i] = r->cs[r->n], r->refs[i] = r->refs[r->n];
  }
  if (r->n == 0) {
    for (route **pp = chain(s, h); *pp; pp = &(*pp)->next)
      if (*pp == r) {
        *pp = r->next;
        break;
      }
    route_free(r);
    s->count--;
    atomic_fetch_sub(&p->routes, 1);
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

bool qim__mb_push_has_routes(mb_push *p) { return atomic_load_explicit(&p->routes, memory_order_relaxed) > 0; }

/* Copies the user's connection shards into cs[0..cap); returns how many there are. */
static size_t routes_of(mb_push *p, qim_tenant_id t, qim_user_id u, qim_connection_shard_id *cs, size_t cap) {
  uint64_t h = user_hash(t, u);
  stripe *s = stripe_of(p, h);
  pthread_mutex_lock(&s->mu);
  route *r = find(s, h, t, u);
  size_t n = r ? r->n : 0;
  for (size_t i = 0; i < n && i < cap; i++) cs[i] = r->cs[i];
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* ---- sinks ---------------------------------------------------------------------------------------- */

int qim_mailbox_push_register(qim_mailbox *m, qim_connection_shard_id cs, qim_mailbox_push_sink fn, void *ctx) {
  if (!fn) return -EINVAL;
  mb_push *p = m->push;
  pthread_rwlock_wrlock(&p->sinks_mu);
  for (size_t i = 0; i < p->nsinks; i++)
    if (p->sinks[i].cs == cs) {
      pthread_rwlock_unlock(&p->sinks_mu);
      return -EEXIST;
    }
  p->sinks = qim_realloc(p->sinks, (p->nsinks + 1) * sizeof *p->sinks);
  p->sinks[p->nsinks++] = (sink){cs, fn, ctx};
  pthread_rwlock_unlock(&p->sinks_mu);
  return 0;
}

void qim_mailbox_push_unregister(qim_mailbox *m, qim_connection_shard_id cs) {
  mb_push *p = m->push;
  pthread_rwlock_wrlock(&p->sinks_mu); /* waits for sink calls in progress */
  for (size_t i = 0; i < p->nsinks; i++)
    if (p->sinks[i].cs == cs) {
      p->sinks[i] = p->sinks[--p->nsinks];
      break;
    }
  pthread_rwlock_unlock(&p->sinks_mu);
}

void qim_mailbox_push_batch_free(qim_push_batch *batch) {
  if (!batch) return;
  push_box *box = (push_box *)batch;
  qim__mb_body_unref(box->body);
  qim_free(box->batch.entries);
  qim_free(box);
}

uint64_t qim__mb_push_emit(mb_push *p, mb_held *held) {
  uint64_t delivered = 0;
  pthread_rwlock_rdlock(&p->sinks_mu);
  while (held) {
    mb_held *next = held->next;
    qim_push_batch *b = held->batch;
    sink *s = NULL;
    for (size_t i = 0; i < p->nsinks && !s; i++)
      if (p->sinks[i].cs == b->connection_shard) s = &p->sinks[i];
    if (s) {
      s->fn(b, s->ctx); /* the sink owns the batch now */
      delivered++;
    } else {
      qim_mailbox_push_batch_free(b); /* nobody serves that connection shard any more */
    }
    qim_free(held);
    held = next;
  }
  pthread_rwlock_unlock(&p->sinks_mu);
  return delivered;
}

/* ---- building batches --------------------------------------------------------------------------------- */

void qim__mb_push_begin(mb_push_builder *b, mb_push *p, mb_body *body, const qim_trace_id *trace) {
  *b = (mb_push_builder){.p = p, .body = body, .trace = *trace};
}

static push_box *slot_box(mb_push_builder *b, qim_connection_shard_id cs) {
  for (size_t i = 0; i < b->n; i++)
    if (b->slots[i].cs == cs) return b->slots[i].box;
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4;
    b->slots = qim_realloc(b->slots, b->cap * sizeof *b->slots);
  }
  push_box *box = qim_calloc(1, sizeof *box);
  box->batch.connection_shard = cs;
  box->batch.trace_id = b->trace;
  box->body = qim__mb_body_ref(b->body);
  b->slots[b->n++] = (mb_push_slot){cs, box};
  return box;
}

static void box_append(push_box *box, const qim_mailbox_entry *e, size_t n) {
  qim_push_batch *pb = &box->batch;
  if (pb->entry_count + n > box->cap) {
    box->cap = (pb->entry_count + n) * 2;
    pb->entries = qim_realloc(pb->entries, box->cap * sizeof *pb->entries);
  }
  memcpy(pb->entries + pb->entry_count, e, n * sizeof *e); /* contents stay in the shared body */
  pb->entry_count += n;
}

void qim__mb_push_add(mb_push_builder *b, const qim_mailbox_entry *entries, size_t n) {
  if (!qim__mb_push_has_routes(b->p)) return;
  qim_connection_shard_id cs[8];
  for (size_t i = 0; i < n;) {
    size_t j = i + 1; /* the user's whole group */
    while (j < n && qim_u128_eq(entries[j].user_id.v, entries[i].user_id.v)) j++;
    size_t k = routes_of(b->p, entries[i].tenant_id, entries[i].user_id, cs, 8);
    qim_connection_shard_id *all = cs;
    if (k > 8) { /* a user on many connection shards: rare, take them all */
      all = qim_malloc(k * sizeof *all);
      size_t again = routes_of(b->p, entries[i].tenant_id, entries[i].user_id, all, k);
      if (again < k) k = again; /* routes may change between the two looks */
    }
    for (size_t c = 0; c < k; c++) box_append(slot_box(b, all[c]), entries + i, j - i);
    if (all != cs) qim_free(all);
    i = j;
  }
}

size_t qim__mb_push_finish(mb_push_builder *b, mb_held ***tail) {
  size_t n = b->n;
  for (size_t i = 0; i < b->n; i++) {
    mb_held *h = qim_malloc(sizeof *h);
    h->next = NULL;
    h->batch = &b->slots[i].box->batch;
    **tail = h;
    *tail = &h->next;
  }
  qim_free(b->slots);
  *b = (mb_push_builder){0};
  return n;
}
