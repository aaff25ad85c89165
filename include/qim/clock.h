/*
 * clock.h — wall and monotonic clocks behind an interface tests can replace, and the
 * time-ordered MessageId / LastActivityId generator (DESIGN.md §1b).
 */
#ifndef QIM_CLOCK_H
#define QIM_CLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "qim/types.h"

typedef struct qim_clock {
  uint64_t (*wall_ms)(void *ctx);   /* milliseconds since the Unix epoch */
  uint64_t (*mono_ns)(void *ctx);   /* monotonic nanoseconds */
  void *ctx;
} qim_clock;

/* The process-wide real clock (CLOCK_REALTIME / CLOCK_MONOTONIC). */
const qim_clock *qim_clock_system(void);

/* The instant `ms` from now on `clock_id` (the clock the condition variable waits on:
 * CLOCK_REALTIME unless it was set up with another), for pthread_cond_timedwait. Reads
 * the real clock, never a qim_clock: condition variables only know the system's. */
struct timespec qim_deadline_after_ms(clockid_t clock_id, int64_t ms);
/* Initializes a condition variable whose timed waits use CLOCK_MONOTONIC (deadlines from
 * qim_deadline_after_ms(CLOCK_MONOTONIC, ...)), so stepping the wall clock moves no wait. */
void qim_cond_init_monotonic(pthread_cond_t *cv);

static inline uint64_t qim_clock_wall_ms(const qim_clock *c) { return c->wall_ms(c->ctx); }
static inline uint64_t qim_clock_mono_ns(const qim_clock *c) { return c->mono_ns(c->ctx); }

/* A clock tests move by hand; `clock` is the interface to pass around. */
typedef struct qim_manual_clock {
  qim_clock clock;
  _Atomic uint64_t wall;
  _Atomic uint64_t mono;
} qim_manual_clock;
void qim_manual_clock_init(qim_manual_clock *c, uint64_t wall_ms);
void qim_manual_clock_set_wall(qim_manual_clock *c, uint64_t wall_ms);
void qim_manual_clock_advance(qim_manual_clock *c, uint64_t ms); /* wall and mono */

/* WriterId = node id (24 bits, from configuration) << 8 | thread slot (8 bits): unique per
 * running node and thread, never a bare thread index. -EINVAL if out of range. */
int qim_writer_id_make(uint32_t node_id, uint32_t thread_slot, qim_writer_id *out);
static inline uint32_t qim_writer_id_node(qim_writer_id w) { return w >> 8; }
static inline uint32_t qim_writer_id_slot(qim_writer_id w) { return w & 0xFF; }

/*
 * MessageId layout (16 bytes, big-endian, sorts by time): 8 bytes wall milliseconds,
 * 4 bytes WriterId, 4 bytes counter. Monotonic per generator: within one millisecond
 * (or while the clock is behind the last issued millisecond by at most `tolerance_ms`)
 * the counter increments. A clock that steps back further makes next() fail with
 * QIM_E_COMMIT_CLOCK_UNSAFE (raised) until it catches up. Thread-safe.
 * When the 2^32 counter values of a millisecond are used up the generator moves on to
 * the next millisecond rather than fail (that millisecond counts as "issued", so it is
 * subject to the tolerance like a clock that is behind). MessageIds and LastActivityIds
 * of one generator come from the same sequence, so they are mutually unique and ordered.
 * init returns -errno if the mutex cannot be made; on error next() leaves *out untouched.
 */
typedef struct qim_id_gen {
  const qim_clock *clock;
  qim_writer_id writer;
  uint64_t tolerance_ms;
  pthread_mutex_t mu;
  uint64_t last_ms;
  uint32_t counter;
} qim_id_gen;

int qim_id_gen_init(qim_id_gen *g, const qim_clock *clock, qim_writer_id writer, uint64_t tolerance_ms);
void qim_id_gen_destroy(qim_id_gen *g);
int qim_id_gen_message_id(qim_id_gen *g, qim_message_id *out);
int qim_id_gen_last_activity_id(qim_id_gen *g, qim_last_activity_id *out);
/* The milliseconds embedded in an id made by the generator. */
uint64_t qim_message_id_millis(const qim_message_id *id);

/*
 * RFC 3339 UTC with milliseconds, always 24 characters: "2015-10-06T18:07:29.841Z".
 * format clamps values past 9999-12-31T23:59:59.999Z to that instant (fixed width).
 * parse accepts that form and Tinode's trimmed ones (Go drops trailing zeros of the
 * fraction): "…:29.84Z", "…:29.8Z", "…:29Z" (20–24 chars); only 'T' and 'Z' in upper
 * case, no offsets, year >= 1970, every field range-checked (no leap second);
 * -EINVAL otherwise.
 */
#define QIM_TIMESTAMP_CAP 25
void qim_timestamp_format(qim_timestamp_millis ms, char out[QIM_TIMESTAMP_CAP]);
int qim_timestamp_parse(const char *in, size_t len, qim_timestamp_millis *out);

#endif
