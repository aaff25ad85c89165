/*
 * seen.c — duplicate and reordering detection for one sender → receiver stream (see seen.h).
 */
#include "seen.h"

void qim_seen_init(qim_seen *s) {
  s->last = -1;
  s->bits = 0;
}

qim_seen_result qim_seen_mark(qim_seen *s, int64_t n) {
  if (n > s->last) {
    int64_t shift = s->last < 0 ? 64 : n - s->last;
    s->bits = shift >= 64 ? 0 : s->bits << shift;
    s->bits |= 1;
    s->last = n;
    return QIM_SEEN_NEW;
  }
  int64_t back = s->last - n;
  if (back >= 64) return QIM_SEEN_OLD;
  uint64_t bit = 1ull << back;
  if (s->bits & bit) return QIM_SEEN_DUP;
  s->bits |= bit;
  return QIM_SEEN_LATE;
}
