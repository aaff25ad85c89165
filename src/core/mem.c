/*
 * mem.c — the allocator wrapper of mem.h: byte accounting, abort-on-OOM for internal
 * sizes, NULL-on-failure plus fault injection for peer-controlled sizes.
 *
 * Accounting uses malloc_usable_size() so qim_free() needs no size header in front of
 * each block (which would break alignment guarantees and tools like ASan). The counter
 * is a relaxed atomic: it is a statistic, not a synchronisation point.
 */
#include "qim/mem.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic size_t used_bytes;
/* Countdown of try-allocations until the injected failure; 0 = no fault armed. */
static _Atomic unsigned fail_countdown;

/* Larger requests cannot succeed; refusing them early keeps sanitizers from reporting
 * "allocation size too big" for what is an ordinary failure. */
#define MAX_REQUEST ((size_t)PTRDIFF_MAX)

static void account_add(void *p) {
  if (p) atomic_fetch_add_explicit(&used_bytes, malloc_usable_size(p), memory_order_relaxed);
}

static void account_sub(void *p) {
  if (p) atomic_fetch_sub_explicit(&used_bytes, malloc_usable_size(p), memory_order_relaxed);
}

/* The OOM policy for internal sizes: report with a fixed string (no allocation) and abort. */
static _Noreturn void oom(size_t n) {
  char msg[96];
  int len = snprintf(msg, sizeof msg, "qim: out of memory allocating %zu bytes\n", n);
  if (len > 0) {
    ssize_t w = write(STDERR_FILENO, msg, (size_t)len);
    (void)w;
  }
  abort();
}

void *qim_malloc(size_t n) {
  if (n > MAX_REQUEST) oom(n);
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  account_add(p);
  return p;
}

void *qim_calloc(size_t count, size_t n) {
  if (n && count > MAX_REQUEST / n) oom(SIZE_MAX);
  void *p = count && n ? calloc(count, n) : calloc(1, 1); /* a zero size still gives a block */
  if (!p) oom(count * n);
  account_add(p);
  return p;
}

void *qim_realloc(void *p, size_t n) {
  if (n > MAX_REQUEST) oom(n);
  size_t old = p ? malloc_usable_size(p) : 0;
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  /* The old block is gone (or reused): swap its size for the new one in one step each. */
  atomic_fetch_sub_explicit(&used_bytes, old, memory_order_relaxed);
  account_add(q);
  return q;
}

char *qim_strdup(const char *s) {
  if (!s) return NULL;
  return qim_memdup(s, strlen(s) + 1);
}

char *qim_strndup(const char *s, size_t n) {
  if (!s) return NULL;
  size_t len = strnlen(s, n);
  char *d = qim_malloc(len + 1);
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

void *qim_memdup(const void *p, size_t n) {
  void *d = qim_malloc(n);
  if (n) memcpy(d, p, n);
  return d;
}

void qim_free(void *p) {
  if (!p) return;
  account_sub(p);
  free(p);
}

/* True when the armed fault fires on this call (each arming fires once). */
static int fault_fires(void) {
  unsigned cur = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  while (cur != 0) {
    if (atomic_compare_exchange_weak_explicit(&fail_countdown, &cur, cur - 1, memory_order_relaxed,
                                              memory_order_relaxed))
      return cur == 1;
  }
  return 0;
}

void *qim_trymalloc(size_t n) {
  if (fault_fires() || n > MAX_REQUEST) return NULL;
  void *p = malloc(n ? n : 1);
  account_add(p);
  return p;
}

void *qim_tryrealloc(void *p, size_t n) {
  if (fault_fires() || n > MAX_REQUEST) return NULL;
  size_t old = p ? malloc_usable_size(p) : 0;
  void *q = realloc(p, n ? n : 1);
  if (!q) return NULL; /* p is untouched and still counted */
  atomic_fetch_sub_explicit(&used_bytes, old, memory_order_relaxed);
  account_add(q);
  return q;
}

size_t qim_mem_used(void) { return atomic_load_explicit(&used_bytes, memory_order_relaxed); }

void qim_mem_fail_after(unsigned n) { atomic_store_explicit(&fail_countdown, n, memory_order_relaxed); }
