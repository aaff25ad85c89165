/*
 * idgen.c — WriterIds and the time-ordered MessageId / LastActivityId generator
 * (clock.h, DESIGN.md §1b).
 *
 * An id is 8 bytes of wall milliseconds, 4 bytes of WriterId and 4 bytes of counter,
 * all big-endian, so byte order is time order and two writers can never collide. A
 * mutex (not a lock-free CAS on a packed state) guards (last_ms, counter): the state is
 * 96 bits wide and an id is made once per committed message, far from contention.
 */
#include "qim/clock.h"

#include <errno.h>
#include <string.h>

#include "qim/err.h"

#define NODE_ID_MAX ((UINT32_C(1) << 24) - 1)
#define THREAD_SLOT_MAX UINT32_C(255)

int qim_writer_id_make(uint32_t node_id, uint32_t thread_slot, qim_writer_id *out) {
  if (node_id > NODE_ID_MAX || thread_slot > THREAD_SLOT_MAX) return -EINVAL;
  *out = node_id << 8 | thread_slot;
  return 0;
}

int qim_id_gen_init(qim_id_gen *g, const qim_clock *clock, qim_writer_id writer, uint64_t tolerance_ms) {
  int rc = pthread_mutex_init(&g->mu, NULL);
  if (rc != 0) return -rc;
  g->clock = clock;
  g->writer = writer;
  g->tolerance_ms = tolerance_ms;
  g->last_ms = 0;
  g->counter = 0;
  return 0;
}

void qim_id_gen_destroy(qim_id_gen *g) { pthread_mutex_destroy(&g->mu); }

/*
 * Picks the (ms, counter) of the next id under g->mu. A clock behind last_ms by at
 * most the tolerance keeps issuing under last_ms, so ids stay monotonic across small
 * NTP steps; a full counter moves on to last_ms + 1 instead of failing (that step
 * counts against the tolerance like a clock that is behind).
 */
static int next_slot(qim_id_gen *g, uint64_t now, uint64_t *ms, uint32_t *counter) {
  if (now > g->last_ms) {
    g->last_ms = now;
    g->counter = 0;
  } else if (g->last_ms - now > g->tolerance_ms) {
    return qim_err_raise(QIM_E_COMMIT_CLOCK_UNSAFE);
  } else if (g->counter == UINT32_MAX) {
    g->last_ms++;
    g->counter = 0;
  } else {
    g->counter++;
  }
  *ms = g->last_ms;
  *counter = g->counter;
  return 0;
}

static void pack(uint8_t b[16], uint64_t ms, uint32_t writer, uint32_t counter) {
  for (int i = 7; i >= 0; i--, ms >>= 8) b[i] = (uint8_t)ms;
  for (int i = 11; i >= 8; i--, writer >>= 8) b[i] = (uint8_t)writer;
  for (int i = 15; i >= 12; i--, counter >>= 8) b[i] = (uint8_t)counter;
}

static int next_id(qim_id_gen *g, uint8_t b[16]) {
  uint64_t ms = 0;
  uint32_t counter = 0;
  /* The clock is read under the lock: read outside, a thread that read an older time
   * but locked later would look like a clock stepping back. */
  pthread_mutex_lock(&g->mu);
  int rc = next_slot(g, qim_clock_wall_ms(g->clock), &ms, &counter);
  pthread_mutex_unlock(&g->mu);
  if (rc == 0) pack(b, ms, g->writer, counter);
  return rc;
}

int qim_id_gen_message_id(qim_id_gen *g, qim_message_id *out) { return next_id(g, out->b); }

int qim_id_gen_last_activity_id(qim_id_gen *g, qim_last_activity_id *out) { return next_id(g, out->b); }

uint64_t qim_message_id_millis(const qim_message_id *id) {
  uint64_t ms = 0;
  for (int i = 0; i < 8; i++) ms = ms << 8 | id->b[i];
  return ms;
}
