/*
 * hist.h — a fixed-size log-linear histogram of latencies in microseconds for qim-bench.
 * Values below 128 µs are exact; above, each power of two is split into 64 buckets, so a
 * reported percentile is within 1.6% of the true value. Recording is O(1) with no
 * allocation, so the hot path of a load generator can afford one record per delivery;
 * histograms of several connections or processes merge by adding counts.
 */
#ifndef QIM_BENCH_HIST_H
#define QIM_BENCH_HIST_H

#include <stdint.h>

/* Largest value kept apart; larger ones count in the top bucket (2^40 µs is 12 days). */
#define QIM_HIST_MAX_BITS 40
#define QIM_HIST_SUB 64
#define QIM_HIST_BUCKETS (2 * QIM_HIST_SUB + (QIM_HIST_MAX_BITS - 7) * QIM_HIST_SUB)

typedef struct qim_hist {
  uint64_t count;
  uint64_t min, max; /* exact; min is UINT64_MAX while empty */
  double sum;
  uint64_t bucket[QIM_HIST_BUCKETS];
} qim_hist;

/* Empties `h`. */
void qim_hist_init(qim_hist *h);

/* Counts one value (µs). */
void qim_hist_record(qim_hist *h, uint64_t us);

/* Adds every count of `from` into `into`. */
void qim_hist_merge(qim_hist *into, const qim_hist *from);

/*
 * The value at quantile `q` (0 < q <= 1): the smallest bucket value v such that at least
 * ceil(q * count) recorded values are <= v. Reported as the bucket's upper bound, clipped
 * to the exact max, so it never understates. 0 when empty; q >= 1 gives the exact max.
 */
uint64_t qim_hist_quantile(const qim_hist *h, double q);

/* Mean of the recorded values; 0 when empty. */
double qim_hist_mean(const qim_hist *h);

/* Bucket index of `us` and the largest value that bucket holds (exposed for tests). */
unsigned qim_hist_index(uint64_t us);
uint64_t qim_hist_upper(unsigned index);

#endif /* QIM_BENCH_HIST_H */
