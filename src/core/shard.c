/*
 * shard.c — the user → mailbox shard / lane hash and DispatchId (shard.h). Both are
 * persisted facts (a user's mailbox lives where the hash says; a replayed fanout must
 * produce the same DispatchIds), so the byte layouts here are frozen: the test vectors
 * in tests/unit/core pin them.
 */
#include "qim/shard.h"

#include <blake3.h>
#include <errno.h>

#include "qim/ids.h"

/* Domain strings are hashed including their terminating NUL (sizeof, not strlen). */
static const char SHARD_DOMAIN[] = "qim.mailbox-shard.v1";
static const char DISPATCH_DOMAIN[] = "qim.group-dispatch.v1";

/* h = first 8 bytes, big-endian, of blake3(domain\0 || tenant_be16 || user_be16). */
static uint64_t user_hash(qim_tenant_id t, qim_user_id u) {
  uint8_t buf[16], out[8];
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, SHARD_DOMAIN, sizeof SHARD_DOMAIN);
  qim_u128_to_be(t.v, buf);
  blake3_hasher_update(&h, buf, sizeof buf);
  qim_u128_to_be(u.v, buf);
  blake3_hasher_update(&h, buf, sizeof buf);
  blake3_hasher_finalize(&h, out, sizeof out);
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | out[i];
  return v;
}

int qim_shard_config_validate(const qim_shard_config *cfg) {
  if (cfg->shard_count < 1 || cfg->lanes_per_shard < 1 || cfg->lanes_per_shard > 255) return -EINVAL;
  return 0;
}

qim_mailbox_shard_id qim_shard_of_user(const qim_shard_config *cfg, qim_tenant_id t, qim_user_id u) {
  uint32_t count = cfg->shard_count ? cfg->shard_count : 1;
  return (qim_mailbox_shard_id)(user_hash(t, u) % count);
}

qim_lane_id qim_lane_of_user(const qim_shard_config *cfg, qim_tenant_id t, qim_user_id u) {
  uint32_t lanes = cfg->lanes_per_shard ? cfg->lanes_per_shard : 1;
  if (lanes > 255) lanes = 255;
  return (qim_lane_id)((user_hash(t, u) >> 32) % lanes);
}

qim_dispatch_id qim_dispatch_id_make(const qim_message_id *message_id, qim_mailbox_shard_id shard) {
  uint8_t shard_be[4] = {(uint8_t)(shard >> 24), (uint8_t)(shard >> 16), (uint8_t)(shard >> 8), (uint8_t)shard};
  qim_dispatch_id id;
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, DISPATCH_DOMAIN, sizeof DISPATCH_DOMAIN);
  blake3_hasher_update(&h, message_id->b, sizeof message_id->b);
  blake3_hasher_update(&h, shard_be, sizeof shard_be);
  blake3_hasher_finalize(&h, id.b, sizeof id.b);
  return id;
}
