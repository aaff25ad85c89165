/*
 * crash.h — what the crash test's parent and its SIGKILLed child share: the workload's
 * shape, the acknowledgement records the child writes to a pipe after each durable
 * completion, and the shared-memory counters its before_commit hook keeps so the parent
 * can tell whether a kill landed inside a transaction.
 */
#ifndef QIM_CRASH_H
#define QIM_CRASH_H

#include <stdatomic.h>
#include <stdint.h>

#include "store/store.h"

#define CRASH_CONVERSATIONS 64  /* one message submitter per conversation */
#define CRASH_LOG_SUBMITTERS 4  /* each appends big batches to dispatch:<i> */
#define CRASH_LOG_BATCH 50      /* appends per log request */
#define CRASH_LOG_PAYLOAD 96
#define CRASH_CONV_BASE 1000    /* conversation i is CRASH_CONV_BASE + i, owner user 1 */
#define CRASH_TENANT 1
#define CRASH_SENDER 1
#define CRASH_ACK_FD 3          /* the child's end of the acknowledgement pipe */

/* Written by the child after the store reported the operation done (durable). */
typedef enum crash_ack_kind {
  CRASH_ACK_MESSAGE = 2, /* a message reached COMMITTED: idx = conversation, value = seq */
  CRASH_ACK_LOG = 3,     /* a log append: idx = dispatch shard, value = offset */
} crash_ack_kind;

typedef struct crash_ack {
  uint32_t kind;
  uint32_t idx;
  uint64_t value;
  uint8_t key[16];       /* the cmid (= message id) or the log key */
} crash_ack;

/* Counters in a MAP_SHARED file: the hook increments `entered` before its pause and
 * `left` after, so entered != left after a kill means it died inside a transaction. */
typedef struct crash_shared {
  _Atomic uint64_t entered, left;
} crash_shared;

/* The deterministic payload of a log append: torn or mixed-up bytes are detectable. */
void crash_log_payload(const uint8_t key[16], uint8_t out[CRASH_LOG_PAYLOAD]);
qim_conversation_id crash_conv(int idx);
qim_store_options crash_options(void);

/* The child: runs the workload until killed (never returns normally). */
int crash_child_main(const char *db_url, const char *shared_path, uint32_t cycle, uint32_t seed);

#endif
