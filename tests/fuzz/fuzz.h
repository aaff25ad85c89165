/*
 * fuzz.h — what every harness of tests/fuzz/ shares: the libFuzzer entry points, an
 * invariant check that names the broken property, and a small byte log used to compare
 * two runs of the same parser (one piece versus byte by byte, decode versus re-decode).
 *
 * A harness is one fuzz_<target>.c defining LLVMFuzzerTestOneInput (and
 * LLVMFuzzerInitialize, which must call fuzz_init). The clang sanitizer build links it
 * with libFuzzer; every other build links it with replay_main.c, which runs the checked-in
 * corpus through the same function. A failed FUZZ_CHECK aborts in both, so a crash and a
 * broken invariant look the same to libFuzzer (an artifact is written) and to ctest.
 */
#ifndef QIM_FUZZ_H
#define QIM_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Aborts with the invariant's text: libFuzzer saves the input as a crash artifact. */
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

/* Called first by every LLVMFuzzerInitialize. Errors raised while fuzzing are not evidence
 * for the contract table (random inputs, millions of them): stop recording them. */
static inline void fuzz_init(void) {
  unsetenv("QIM_ERRLOG");
}

/* A growable byte log. */
typedef struct fuzz_log {
  uint8_t *p;
  size_t n, cap;
} fuzz_log;

static inline void fuzz_log_put(fuzz_log *l, const void *p, size_t n) {
  if (l->n + n > l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    while (cap < l->n + n) cap *= 2;
    l->p = qim_realloc(l->p, cap);
    l->cap = cap;
  }
  if (n) memcpy(l->p + l->n, p, n);
  l->n += n;
}

static inline void fuzz_log_u64(fuzz_log *l, uint64_t v) {
  fuzz_log_put(l, &v, sizeof v);
}

/* A NUL-terminated string, or a marker for NULL (so "" and NULL differ). */
static inline void fuzz_log_str(fuzz_log *l, const char *s) {
  if (!s) {
    fuzz_log_put(l, "\xff", 1);
    return;
  }
  fuzz_log_put(l, s, strlen(s) + 1);
}

static inline int fuzz_log_equal(const fuzz_log *a, const fuzz_log *b) {
  return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

static inline void fuzz_log_free(fuzz_log *l) {
  qim_free(l->p);
  *l = (fuzz_log){0};
}

/* A cheap deterministic hash of the input, to derive a piece size from it. */
static inline uint32_t fuzz_hash(const uint8_t *d, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 16777619u;
  return h;
}

#endif
