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

/*
 * The slowest value recorded in each fixed window of time: whether a run's tail is one
 * stall or spread over the run, which a percentile alone cannot tell. Windows past
 * QIM_HIST_WINDOWS_MAX (or before start) are not kept.
 */
#define QIM_HIST_WINDOWS_MAX 6000
typedef struct qim_hist_windows {
  uint64_t start_us, width_us;
  uint32_t max_us[QIM_HIST_WINDOWS_MAX]; /* 0: nothing recorded in that window */
} qim_hist_windows;

/* Empties `w`: windows of width_us (> 0) from start_us on. */
void qim_hist_windows_init(qim_hist_windows *w, uint64_t start_us, uint64_t width_us);

/* Counts `value_us` in the window holding time `at_us`. */
void qim_hist_windows_record(qim_hist_windows *w, uint64_t at_us, uint64_t value_us);

/* Writes the indexes of the (at most k) windows with the largest maxima, largest first
 * (ties: the earlier window first), to out; returns how many. */
unsigned qim_hist_windows_worst(const qim_hist_windows *w, unsigned k, uint32_t *out);

/* Bucket index of `us` and the largest value that bucket holds (exposed for tests). */
unsigned qim_hist_index(uint64_t us);
uint64_t qim_hist_upper(unsigned index);

#endif /* QIM_BENCH_HIST_H */
