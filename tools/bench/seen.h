/*
 * seen.h — which of one sender's numbered messages a receiver has had, to tell fresh
 * deliveries from duplicates and from late (reordered) ones without keeping every number:
 * the highest number seen plus a 64-bit map of the 63 numbers below it. O(1) per
 * delivery and 16 bytes per (receiver, sender) pair.
 */
#ifndef QIM_BENCH_SEEN_H
#define QIM_BENCH_SEEN_H

#include <stdint.h>

typedef struct qim_seen {
  int64_t last;  /* highest number seen, -1 before the first */
  uint64_t bits; /* bit i set: number last - i was seen (bit 0 is last itself) */
} qim_seen;

typedef enum qim_seen_result {
  QIM_SEEN_NEW = 0, /* above everything seen: in order (or after a gap) */
  QIM_SEEN_LATE,    /* below the highest but not seen before: a later one overtook it */
  QIM_SEEN_DUP,     /* seen before */
  QIM_SEEN_OLD,     /* 64 or more below the highest: cannot tell late from duplicate */
} qim_seen_result;

void qim_seen_init(qim_seen *s);

/* Records number n (>= 0) and says what it was. */
qim_seen_result qim_seen_mark(qim_seen *s, int64_t n);

#endif /* QIM_BENCH_SEEN_H */
