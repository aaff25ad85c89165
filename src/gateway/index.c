/*
 * index.c — per-loop indexes of sessions: (tenant, user) → the user's logged-in sessions,
 * (tenant, conversation) → the sessions attached to it. A chained hash table that doubles
 * when it holds more keys than buckets; each key holds a small array of sessions. Only
 * the owning loop touches it, so there is no lock.
 */
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/mem.h"

static uint64_t key_hash(gw_key k) {
  uint64_t h = k.tenant.hi * 0x9E3779B97F4A7C15u ^ k.tenant.lo ^ k.id.hi * 0xC2B2AE3D27D4EB4Fu ^ k.id.lo;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9u;
  return h ^ (h >> 29);
}

static bool key_eq(gw_key a, gw_key b) { return qim_u128_eq(a.tenant, b.tenant) && qim_u128_eq(a.id, b.id); }

void qim__gw_index_init(gw_index *x) {
  x->nb = 64;
  x->count = 0;
  x->b = qim_calloc(x->nb, sizeof *x->b);
}

void qim__gw_index_free(gw_index *x) {
  if (!x->b) return;
  for (size_t i = 0; i < x->nb; i++)
    for (gw_bucket *b = x->b[i], *next; b; b = next) {
      next = b->next;
      qim_free(b->v);
      qim_free(b);
    }
  qim_free(x->b);
  x->b = NULL;
}

static void grow(gw_index *x) {
  size_t nb = x->nb * 2;
  gw_bucket **nbk = qim_calloc(nb, sizeof *nbk);
  for (size_t i = 0; i < x->nb; i++)
    for (gw_bucket *b = x->b[i], *next; b; b = next) {
      next = b->next;
      size_t j = key_hash(b->key) % nb;
      b->next = nbk[j];
      nbk[j] = b;
    }
  qim_free(x->b);
  x->b = nbk;
  x->nb = nb;
}

static gw_bucket **slot(const gw_index *x, gw_key k) {
  gw_bucket **p = &x->b[key_hash(k) % x->nb];
  while (*p && !key_eq((*p)->key, k)) p = &(*p)->next;
  return p;
}

void qim__gw_index_add(gw_index *x, gw_key k, gw_session *s) {
  gw_bucket **p = slot(x, k);
  gw_bucket *b = *p;
  if (!b) {
    if (x->count >= x->nb) {
      grow(x);
      p = slot(x, k);
    }
    b = qim_calloc(1, sizeof *b);
    b->key = k;
    *p = b;
    x->count++;
  }
  for (size_t i = 0; i < b->n; i++)
    if (b->v[i] == s) return;
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 2;
    b->v = qim_realloc(b->v, b->cap * sizeof *b->v);
  }
  b->v[b->n++] = s;
}

void qim__gw_index_remove(gw_index *x, gw_key k, gw_session *s) {
  gw_bucket **p = slot(x, k);
  gw_bucket *b = *p;
  if (!b) return;
  for (size_t i = 0; i < b->n; i++)
    if (b->v[i] == s) {
      b->v[i] = b->v[--b->n];
      break;
    }
  if (b->n) return;
  *p = b->next;
  qim_free(b->v);
  qim_free(b);
  x->count--;
}

gw_session *const *qim__gw_index_find(const gw_index *x, gw_key k, size_t *n) {
  gw_bucket *b = *slot(x, k);
  *n = b ? b->n : 0;
  return b ? b->v : NULL;
}
