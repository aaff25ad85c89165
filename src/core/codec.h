/*
 * codec.h — private to src/core (and usable by other rooms that persist their own
 * values): a growable big-endian writer and a bounds-checked reader for the canonical
 * binary encodings of record.h.
 *
 * Both keep a sticky error: after the first failure every further call is a no-op
 * (reads return 0), so an encoder or decoder is written as straight-line code and
 * checks the status once at the end. A reader never reads past its `n` bytes and never
 * allocates more than the remaining input could describe.
 */
#ifndef QIM_CORE_CODEC_H
#define QIM_CORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qim/types.h"

typedef struct qim__wbuf {
  uint8_t *p;
  size_t n, cap;
  int err; /* 0, -EINVAL (value out of range) or -E2BIG (length over u32) */
} qim__wbuf;

void qim__w_u8(qim__wbuf *w, uint8_t v);
void qim__w_u16(qim__wbuf *w, uint16_t v);
void qim__w_u32(qim__wbuf *w, uint32_t v);
void qim__w_u64(qim__wbuf *w, uint64_t v);
void qim__w_u128(qim__wbuf *w, qim_u128 v);
void qim__w_bool(qim__wbuf *w, bool v);
/* An enum as one byte; a value above `max` sets -EINVAL. */
void qim__w_enum(qim__wbuf *w, int v, int max);
void qim__w_raw(qim__wbuf *w, const void *p, size_t n);
/* u32 length + bytes. */
void qim__w_bytes(qim__wbuf *w, const uint8_t *p, size_t n);
/* u32 element count (-E2BIG above UINT32_MAX). */
void qim__w_count(qim__wbuf *w, size_t count);
/* Hands the buffer to *out (0) or frees it and returns the sticky error. */
int qim__w_finish(qim__wbuf *w, qim_bytes *out);

typedef struct qim__rbuf {
  const uint8_t *p;
  size_t n, off;
  int err; /* 0 or -EINVAL */
} qim__rbuf;

static inline qim__rbuf qim__r_init(const uint8_t *p, size_t n) { return (qim__rbuf){p, n, 0, 0}; }
uint8_t qim__r_u8(qim__rbuf *r);
uint16_t qim__r_u16(qim__rbuf *r);
uint32_t qim__r_u32(qim__rbuf *r);
uint64_t qim__r_u64(qim__rbuf *r);
qim_u128 qim__r_u128(qim__rbuf *r);
bool qim__r_bool(qim__rbuf *r);          /* only 0 or 1 */
int qim__r_enum(qim__rbuf *r, int max);  /* 0..max */
void qim__r_raw(qim__rbuf *r, void *out, size_t n);
/* u32 length + bytes into fresh memory (NULL when empty). */
void qim__r_bytes(qim__rbuf *r, qim_bytes *out);
/* A u32 element count whose elements (each at least `min_elem_size` bytes encoded) fit
 * in the rest of the input; 0 with -EINVAL otherwise. */
size_t qim__r_count(qim__rbuf *r, size_t min_elem_size);
/* 0 when no error occurred and every byte was consumed; -EINVAL otherwise. */
int qim__r_finish(const qim__rbuf *r);

#endif
