/*
 * iplimit.c — striped hash table of connection counts per IP (see iplimit.h).
 * A random per-table seed keeps a peer that controls many source addresses (an IPv6
 * prefix) from steering them all into one chain.
 */
#include "gateway/iplimit.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uv.h>

#include "qim/ids.h"
#include "qim/mem.h"

#define STRIPES 64

typedef struct ip_entry {
  struct ip_entry *next;
  uint8_t addr[16];
  unsigned count;
} ip_entry;

typedef struct stripe {
  uv_mutex_t mu;
  ip_entry **buckets;
  size_t nbuckets; /* a power of two */
  size_t entries;
} stripe;

struct qim_iplimit {
  uint64_t seed;
  stripe stripes[STRIPES];
};

static uint64_t hash_addr(const qim_iplimit *t, const uint8_t addr[16]) {
  uint64_t a, b;
  memcpy(&a, addr, 8);
  memcpy(&b, addr + 8, 8);
  return qim_mix64(qim_mix64(a ^ t->seed) ^ b);
}

qim_iplimit *qim_iplimit_new(void) {
  qim_iplimit *t = qim_calloc(1, sizeof *t);
  if (getrandom(&t->seed, sizeof t->seed, 0) != sizeof t->seed) t->seed = (uint64_t)(uintptr_t)t;
  for (int i = 0; i < STRIPES; i++) {
    if (uv_mutex_init(&t->stripes[i].mu)) abort();
    t->stripes[i].nbuckets = 16;
    t->stripes[i].buckets = qim_calloc(16, sizeof(ip_entry *));
  }
  return t;
}

void qim_iplimit_free(qim_iplimit *t) {
  if (!t) return;
  for (int i = 0; i < STRIPES; i++) {
    stripe *s = &t->stripes[i];
    for (size_t b = 0; b < s->nbuckets; b++) {
      for (ip_entry *e = s->buckets[b], *n; e; e = n) {
        n = e->next;
        qim_free(e);
      }
    }
    qim_free(s->buckets);
    uv_mutex_destroy(&s->mu);
  }
  qim_free(t);
}

/* Doubles a stripe's buckets once its chains average more than two entries. */
static void grow(const qim_iplimit *t, stripe *s) {
  size_t n = s->nbuckets * 2;
  ip_entry **nb = qim_calloc(n, sizeof *nb);
  for (size_t b = 0; b < s->nbuckets; b++) {
    for (ip_entry *e = s->buckets[b], *next; e; e = next) {
      next = e->next;
      size_t i = (hash_addr(t, e->addr) / STRIPES) & (n - 1);
      e->next = nb[i];
      nb[i] = e;
    }
  }
  qim_free(s->buckets);
  s->buckets = nb;
  s->nbuckets = n;
}

/* Locks the stripe of addr and returns the chain slot for it. */
static ip_entry **locate(qim_iplimit *t, const uint8_t addr[16], stripe **sp) {
  uint64_t h = hash_addr(t, addr);
  stripe *s = &t->stripes[h % STRIPES];
  uv_mutex_lock(&s->mu);
  *sp = s;
  ip_entry **pp = &s->buckets[(h / STRIPES) & (s->nbuckets - 1)];
  while (*pp && memcmp((*pp)->addr, addr, 16) != 0) pp = &(*pp)->next;
  return pp;
}

unsigned qim_iplimit_acquire(qim_iplimit *t, const uint8_t addr[16]) {
  stripe *s;
  ip_entry **pp = locate(t, addr, &s);
  if (!*pp) {
    ip_entry *e = qim_calloc(1, sizeof *e);
    memcpy(e->addr, addr, 16);
    *pp = e;
    s->entries++;
  }
  unsigned n = ++(*pp)->count;
  if (s->entries > 2 * s->nbuckets) grow(t, s);
  uv_mutex_unlock(&s->mu);
  return n;
}

void qim_iplimit_release(qim_iplimit *t, const uint8_t addr[16]) {
  stripe *s;
  ip_entry **pp = locate(t, addr, &s);
  ip_entry *e = *pp;
  if (e && --e->count == 0) {
    *pp = e->next;
    qim_free(e);
    s->entries--;
  }
  uv_mutex_unlock(&s->mu);
}

unsigned qim_iplimit_count(qim_iplimit *t, const uint8_t addr[16]) {
  stripe *s;
  ip_entry **pp = locate(t, addr, &s);
  unsigned n = *pp ? (*pp)->count : 0;
  uv_mutex_unlock(&s->mu);
  return n;
}
