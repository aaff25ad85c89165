/*
 * hist.c — the log-linear latency histogram of qim-bench (see hist.h).
 *
 * Layout: indexes 0..127 hold the values 0..127 exactly. A value v >= 128 with highest
 * set bit m (7 <= m < QIM_HIST_MAX_BITS) falls in group m - 7, each group being 64
 * buckets of width 2^(m-6): index = 128 + (m - 7) * 64 + ((v >> (m - 6)) - 64).
 */
#include "hist.h"

#include <string.h>

void qim_hist_init(qim_hist *h) {
  memset(h, 0, sizeof *h);
  h->min = UINT64_MAX;
}

unsigned qim_hist_index(uint64_t us) {
  if (us < 2 * QIM_HIST_SUB) return (unsigned)us;
  unsigned m = 63u - (unsigned)__builtin_clzll(us);
  if (m >= QIM_HIST_MAX_BITS) return QIM_HIST_BUCKETS - 1;
  unsigned shift = m - 6;
  return 2 * QIM_HIST_SUB + (m - 7) * QIM_HIST_SUB + (unsigned)((us >> shift) - QIM_HIST_SUB);
}

uint64_t qim_hist_upper(unsigned index) {
  if (index < 2 * QIM_HIST_SUB) return index;
  if (index >= QIM_HIST_BUCKETS - 1) return UINT64_MAX;
  unsigned g = (index - 2 * QIM_HIST_SUB) / QIM_HIST_SUB;
  unsigned sub = (index - 2 * QIM_HIST_SUB) % QIM_HIST_SUB;
  unsigned shift = g + 1; /* m - 6 with m = g + 7 */
  return (((uint64_t)(QIM_HIST_SUB + sub + 1)) << shift) - 1;
}

void qim_hist_record(qim_hist *h, uint64_t us) {
  h->bucket[qim_hist_index(us)]++;
  h->count++;
  h->sum += (double)us;
  if (us < h->min) h->min = us;
  if (us > h->max) h->max = us;
}

void qim_hist_merge(qim_hist *into, const qim_hist *from) {
  for (unsigned i = 0; i < QIM_HIST_BUCKETS; i++) into->bucket[i] += from->bucket[i];
  into->count += from->count;
  into->sum += from->sum;
  if (from->min < into->min) into->min = from->min;
  if (from->max > into->max) into->max = from->max;
}

uint64_t qim_hist_quantile(const qim_hist *h, double q) {
  if (h->count == 0) return 0;
  if (q >= 1.0) return h->max;
  double want = q * (double)h->count;
  uint64_t rank = (uint64_t)want;
  if ((double)rank < want || rank == 0) rank++; /* ceil, at least the first value */
  uint64_t seen = 0;
  for (unsigned i = 0; i < QIM_HIST_BUCKETS; i++) {
    seen += h->bucket[i];
    if (seen >= rank) {
      uint64_t up = qim_hist_upper(i);
      return up > h->max ? h->max : up;
    }
  }
  return h->max;
}

double qim_hist_mean(const qim_hist *h) {
  return h->count ? h->sum / (double)h->count : 0.0;
}

void qim_hist_windows_init(qim_hist_windows *w, uint64_t start_us, uint64_t width_us) {
  memset(w->max_us, 0, sizeof w->max_us);
  w->start_us = start_us;
  w->width_us = width_us ? width_us : 1;
}

void qim_hist_windows_record(qim_hist_windows *w, uint64_t at_us, uint64_t value_us) {
  if (at_us < w->start_us) return;
  uint64_t i = (at_us - w->start_us) / w->width_us;
  if (i >= QIM_HIST_WINDOWS_MAX) return;
  uint32_t v = value_us > UINT32_MAX ? UINT32_MAX : (uint32_t)value_us;
  if (v > w->max_us[i]) w->max_us[i] = v;
}

unsigned qim_hist_windows_worst(const qim_hist_windows *w, unsigned k, uint32_t *out) {
  unsigned n = 0;
  for (uint32_t i = 0; k && i < QIM_HIST_WINDOWS_MAX; i++) {
    uint32_t v = w->max_us[i];
    if (!v || (n == k && v <= w->max_us[out[n - 1]])) continue;
    unsigned j = n < k ? n++ : n - 1; /* insertion from the end, dropping the smallest */
    while (j > 0 && w->max_us[out[j - 1]] < v) {
      out[j] = out[j - 1];
      j--;
    }
    out[j] = i;
  }
  return n;
}
