/*
 * shard.h — the user → mailbox shard / lane hash, DispatchId, and the packed
 * MailboxSeq / EventId values (DESIGN.md §1b, seed 004 §2).
 *
 * Shard and lane hash (stable, documented in docs/architecture.md):
 *   h = first 8 bytes, big-endian, of blake3("qim.mailbox-shard.v1\0" || tenant_be16 || user_be16)
 *   shard = h % shard_count;  lane = (h >> 32) % lanes_per_shard
 * ("\0" is one NUL byte hashed after the 20-character domain string; tenant_be16 and
 * user_be16 are the 16-byte big-endian encodings of the u128 ids.)
 * shard_count and lanes_per_shard are fixed when a deployment is created; changing
 * them is a migration.
 */
#ifndef QIM_SHARD_H
#define QIM_SHARD_H

#include "qim/types.h"

typedef struct qim_shard_config {
  uint32_t shard_count;      /* >= 1 */
  uint32_t lanes_per_shard;  /* 1..255 */
} qim_shard_config;

/* 0, or -EINVAL when shard_count is 0 or lanes_per_shard is outside 1..255. The hash
 * functions below treat an invalid count as 1 (lanes above 255 as 255) rather than
 * divide by zero: validate configuration once, when it is loaded. */
int qim_shard_config_validate(const qim_shard_config *cfg);

qim_mailbox_shard_id qim_shard_of_user(const qim_shard_config *cfg, qim_tenant_id t, qim_user_id u);
qim_lane_id qim_lane_of_user(const qim_shard_config *cfg, qim_tenant_id t, qim_user_id u);

/* DispatchId = blake3("qim.group-dispatch.v1\0" || message_id (16) || shard_be32)[0..16]:
 * the 21-character domain and one NUL byte (22 bytes), the 16 id bytes as stored, the
 * shard as 4 big-endian bytes; the first 16 bytes of the output. */
qim_dispatch_id qim_dispatch_id_make(const qim_message_id *message_id, qim_mailbox_shard_id shard);

#define QIM_MAILBOX_OFFSET_BITS 40
#define QIM_MAILBOX_OFFSET_MAX ((UINT64_C(1) << QIM_MAILBOX_OFFSET_BITS) - 1)

static inline qim_mailbox_seq qim_mailbox_seq_make(qim_shard_epoch epoch, uint64_t offset) {
  return ((uint64_t)epoch << QIM_MAILBOX_OFFSET_BITS) | (offset & QIM_MAILBOX_OFFSET_MAX);
}
static inline qim_shard_epoch qim_mailbox_seq_epoch(qim_mailbox_seq s) {
  return (qim_shard_epoch)(s >> QIM_MAILBOX_OFFSET_BITS);
}
static inline uint64_t qim_mailbox_seq_offset(qim_mailbox_seq s) { return s & QIM_MAILBOX_OFFSET_MAX; }
static inline qim_event_id qim_event_id_make(qim_mailbox_seq s, uint8_t ordinal) {
  return (s << 8) | ordinal;
}

#endif
