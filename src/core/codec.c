/*
 * codec.c — the big-endian writer and bounds-checked reader of codec.h.
 */
#include "core/codec.h"

#include <errno.h>
#include <string.h>

#include "qim/ids.h"
#include "qim/mem.h"

/* Makes room for `n` more bytes; growth doubles so encoding is linear. */
static uint8_t *w_room(qim__wbuf *w, size_t n) {
  if (w->err) return NULL;
  if (n > SIZE_MAX / 2 - w->n) {
    w->err = -E2BIG;
    return NULL;
  }
  if (w->n + n > w->cap) {
    size_t cap = w->cap ? w->cap : 64;
    while (cap < w->n + n) cap *= 2;
    w->p = qim_realloc(w->p, cap);
    w->cap = cap;
  }
  uint8_t *at = w->p + w->n;
  w->n += n;
  return at;
}

static void w_be(qim__wbuf *w, uint64_t v, int width) {
  uint8_t *at = w_room(w, (size_t)width);
  if (!at) return;
  for (int i = width - 1; i >= 0; i--, v >>= 8) at[i] = (uint8_t)v;
}

void qim__w_u8(qim__wbuf *w, uint8_t v) { w_be(w, v, 1); }
void qim__w_u16(qim__wbuf *w, uint16_t v) { w_be(w, v, 2); }
void qim__w_u32(qim__wbuf *w, uint32_t v) { w_be(w, v, 4); }
void qim__w_u64(qim__wbuf *w, uint64_t v) { w_be(w, v, 8); }

void qim__w_u128(qim__wbuf *w, qim_u128 v) {
  w_be(w, v.hi, 8);
  w_be(w, v.lo, 8);
}

void qim__w_bool(qim__wbuf *w, bool v) { w_be(w, v ? 1 : 0, 1); }

void qim__w_enum(qim__wbuf *w, int v, int max) {
  if (v < 0 || v > max) {
    if (!w->err) w->err = -EINVAL;
    return;
  }
  w_be(w, (uint64_t)v, 1);
}

void qim__w_raw(qim__wbuf *w, const void *p, size_t n) {
  uint8_t *at = w_room(w, n);
  if (at && n) memcpy(at, p, n);
}

void qim__w_count(qim__wbuf *w, size_t count) {
  if (count > UINT32_MAX) {
    if (!w->err) w->err = -E2BIG;
    return;
  }
  w_be(w, count, 4);
}

void qim__w_bytes(qim__wbuf *w, const uint8_t *p, size_t n) {
  qim__w_count(w, n);
  qim__w_raw(w, p, n);
}

int qim__w_finish(qim__wbuf *w, qim_bytes *out) {
  if (w->err) {
    int err = w->err;
    qim_free(w->p);
    *w = (qim__wbuf){0};
    return err;
  }
  out->p = w->p;
  out->n = w->n;
  return 0;
}

/* ---- reader --------------------------------------------------------------------- */

/* The next n bytes, or NULL (and the sticky error) if fewer remain. */
static const uint8_t *r_take(qim__rbuf *r, size_t n) {
  if (r->err) return NULL;
  if (n > r->n - r->off) {
    r->err = -EINVAL;
    return NULL;
  }
  const uint8_t *at = r->p + r->off;
  r->off += n;
  return at;
}

static uint64_t r_be(qim__rbuf *r, int width) {
  const uint8_t *at = r_take(r, (size_t)width);
  uint64_t v = 0;
  if (at)
    for (int i = 0; i < width; i++) v = v << 8 | at[i];
  return v;
}

uint8_t qim__r_u8(qim__rbuf *r) { return (uint8_t)r_be(r, 1); }
uint16_t qim__r_u16(qim__rbuf *r) { return (uint16_t)r_be(r, 2); }
uint32_t qim__r_u32(qim__rbuf *r) { return (uint32_t)r_be(r, 4); }
uint64_t qim__r_u64(qim__rbuf *r) { return r_be(r, 8); }

qim_u128 qim__r_u128(qim__rbuf *r) {
  uint64_t hi = r_be(r, 8);
  uint64_t lo = r_be(r, 8);
  return (qim_u128){hi, lo};
}

int qim__r_enum(qim__rbuf *r, int max) {
  int v = (int)r_be(r, 1);
  if (v > max) {
    if (!r->err) r->err = -EINVAL;
    return 0;
  }
  return v;
}

bool qim__r_bool(qim__rbuf *r) { return qim__r_enum(r, 1) == 1; }

void qim__r_raw(qim__rbuf *r, void *out, size_t n) {
  const uint8_t *at = r_take(r, n);
  if (at) memcpy(out, at, n);
  else memset(out, 0, n);
}

size_t qim__r_count(qim__rbuf *r, size_t min_elem_size) {
  size_t count = r_be(r, 4);
  if (r->err) return 0;
  if (min_elem_size && count > (r->n - r->off) / min_elem_size) {
    r->err = -EINVAL;
    return 0;
  }
  return count;
}

void qim__r_bytes(qim__rbuf *r, qim_bytes *out) {
  size_t n = qim__r_count(r, 1);
  const uint8_t *at = r_take(r, n);
  out->p = at && n ? qim_memdup(at, n) : NULL;
  out->n = at ? n : 0;
}

int qim__r_finish(const qim__rbuf *r) {
  if (r->err) return r->err;
  return r->off == r->n ? 0 : -EINVAL;
}
