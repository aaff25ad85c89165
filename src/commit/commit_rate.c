/*
 * commit_rate.c — the per-user send rate limit: a token bucket per (tenant, user).
 *
 * A bucket holds up to `burst` tokens and refills at `per_sec` tokens a second; a send
 * takes one. Tokens are kept in millionths so the refill is exact integer arithmetic.
 * A full bucket is the same as no bucket, so memory stays bounded by the users active
 * within burst/per_sec seconds: when the table grows past max_users, full buckets are
 * swept (and the next sweep waits until the table has doubled again, so a sweep's cost
 * is amortised over the inserts that made it necessary).
 */
#include <pthread.h>
#include <string.h>

#include "commit/commit_int.h"
#include "qim/ids.h"
#include "qim/mem.h"

#define MICRO UINT64_C(1000000)

typedef struct bucket {
  qim_tenant_id tenant;
  qim_user_id user;
  uint64_t micro_tokens;
  uint64_t at_ms;
  struct bucket *next;
} bucket;

struct qim__rate {
  pthread_mutex_t mu;
  bucket **slots;
  size_t nslots, count, sweep_at;
  uint64_t per_sec, burst;
  size_t max_users;
};

qim__rate *qim__rate_new(uint32_t per_sec, uint32_t burst, uint32_t max_users) {
  qim__rate *r = qim_calloc(1, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->nslots = 256;
  r->slots = qim_calloc(r->nslots, sizeof *r->slots);
  r->per_sec = per_sec;
  r->burst = burst;
  r->max_users = max_users ? max_users : 1;
  r->sweep_at = r->max_users;
  return r;
}

void qim__rate_free(qim__rate *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nslots; i++) {
    for (bucket *b = r->slots[i], *next; b; b = next) {
      next = b->next;
      qim_free(b);
    }
  }
  qim_free(r->slots);
  pthread_mutex_destroy(&r->mu);
  qim_free(r);
}

static size_t slot_of(const qim__rate *r, qim_tenant_id t, qim_user_id u) {
  uint64_t h = (t.v.hi * 31 + t.v.lo) * UINT64_C(0x9e3779b97f4a7c15) ^ u.v.hi ^ (u.v.lo * UINT64_C(0xc2b2ae3d27d4eb4f));
  h ^= h >> 29;
  return (size_t)(h & (r->nslots - 1));
}

static void refill(const qim__rate *r, bucket *b, uint64_t now_ms) {
  uint64_t full = r->burst * MICRO;
  if (now_ms > b->at_ms) {
    uint64_t elapsed = now_ms - b->at_ms;
    /* elapsed·per_sec·1000 overflows only after centuries; cap it at "full" anyway. */
    uint64_t add = elapsed >= UINT64_C(1) << 32 ? full : elapsed * r->per_sec * (MICRO / 1000);
    b->micro_tokens = add >= full - b->micro_tokens ? full : b->micro_tokens + add;
  }
  b->at_ms = now_ms;
}

static void grow(qim__rate *r) {
  size_t n = r->nslots * 2;
  bucket **t = qim_calloc(n, sizeof *t);
  bucket **old = r->slots;
  size_t oldn = r->nslots;
  r->slots = t;
  r->nslots = n;
  for (size_t i = 0; i < oldn; i++) {
    for (bucket *b = old[i], *next; b; b = next) {
      next = b->next;
      size_t s = slot_of(r, b->tenant, b->user);
      b->next = t[s];
      t[s] = b;
    }
  }
  qim_free(old);
}

/* Drops every bucket that has refilled completely. */
static void sweep(qim__rate *r, uint64_t now_ms) {
  for (size_t i = 0; i < r->nslots; i++) {
    for (bucket **pp = &r->slots[i]; *pp;) {
      bucket *b = *pp;
      refill(r, b, now_ms);
      if (b->micro_tokens >= r->burst * MICRO) {
        *pp = b->next;
        qim_free(b);
        r->count--;
      } else {
        pp = &b->next;
      }
    }
  }
  r->sweep_at = r->count * 2 > r->max_users ? r->count * 2 : r->max_users;
}

static bucket *bucket_get(qim__rate *r, qim_tenant_id t, qim_user_id u, uint64_t now_ms) {
  size_t s = slot_of(r, t, u);
  for (bucket *b = r->slots[s]; b; b = b->next)
    if (qim_u128_eq(b->user.v, u.v) && qim_u128_eq(b->tenant.v, t.v)) return b;
  if (r->count >= r->sweep_at) sweep(r, now_ms);
  if (r->count >= r->nslots) grow(r);
  bucket *b = qim_calloc(1, sizeof *b);
  b->tenant = t;
  b->user = u;
  b->micro_tokens = r->burst * MICRO;
  b->at_ms = now_ms;
  s = slot_of(r, t, u);
  b->next = r->slots[s];
  r->slots[s] = b;
  r->count++;
  return b;
}

int qim__rate_take(qim__rate *r, qim_tenant_id t, qim_user_id u, uint64_t now_ms, uint32_t *retry_after_ms) {
  pthread_mutex_lock(&r->mu);
  bucket *b = bucket_get(r, t, u, now_ms);
  refill(r, b, now_ms);
  int limited = b->micro_tokens < MICRO;
  if (!limited) {
    b->micro_tokens -= MICRO;
  } else {
    uint64_t missing = MICRO - b->micro_tokens, per_ms = r->per_sec * (MICRO / 1000);
    *retry_after_ms = (uint32_t)((missing + per_ms - 1) / per_ms);
  }
  pthread_mutex_unlock(&r->mu);
  return limited;
}
