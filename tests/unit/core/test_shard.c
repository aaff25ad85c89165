/*
 * test_shard.c — shard.h: the user → shard / lane hash and DispatchId against vectors
 * computed with the b3sum CLI (shard_hash_vectors.txt, dispatch_id_vectors.txt, read from
 * $QIM_SRC), fixed expected placements, distribution sanity, and the packed
 * MailboxSeq / EventId values.
 */
#include <blake3.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/ids.h"
#include "qim/shard.h"
#include "testsupport.h"

/* Opens tests/unit/core/<name> under the source root ctest passes as QIM_SRC. */
static FILE *open_vectors(const char *name) {
  const char *src = getenv("QIM_SRC");
  assert_non_null(src);
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/unit/core/%s", src, name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  return f;
}

static void hex16(const char *hex, uint8_t out[16]) {
  size_t n = 0;
  assert_int_equal(qim_hex_decode(hex, strlen(hex), out, 16, &n), 0);
  assert_int_equal(n, 16);
}

/* ---- DispatchId ---------------------------------------------------------------------- */

static void test_dispatch_id_matches_b3sum_vectors(void **state) {
  (void)state;
  FILE *f = open_vectors("dispatch_id_vectors.txt");
  char line[1024], msg_hex[64], want_hex[64];
  unsigned long shard;
  int checked = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    assert_int_equal(sscanf(line, "%63s %lu %63s", msg_hex, &shard, want_hex), 3);
    qim_message_id msg;
    uint8_t want[16];
    hex16(msg_hex, msg.b);
    hex16(want_hex, want);
    qim_dispatch_id got = qim_dispatch_id_make(&msg, (qim_mailbox_shard_id)shard);
    assert_memory_equal(got.b, want, 16);
    checked++;
  }
  fclose(f);
  assert_int_equal(checked, 9);
}

static void test_dispatch_id_domain_includes_the_nul_byte(void **state) {
  (void)state;
  qim_message_id msg = {{0}};
  uint8_t without_nul[16];
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, "qim.group-dispatch.v1", 21);
  blake3_hasher_update(&h, msg.b, 16);
  blake3_hasher_update(&h, "\0\0\0\0", 4);
  blake3_hasher_finalize(&h, without_nul, 16);
  qim_dispatch_id id = qim_dispatch_id_make(&msg, 0);
  assert_memory_not_equal(id.b, without_nul, 16);
}

static void test_dispatch_id_differs_per_shard_and_message(void **state) {
  (void)state;
  qim_message_id a = {{1}}, b = {{2}};
  qim_dispatch_id a0 = qim_dispatch_id_make(&a, 0), a1 = qim_dispatch_id_make(&a, 1);
  qim_dispatch_id b0 = qim_dispatch_id_make(&b, 0), a0again = qim_dispatch_id_make(&a, 0);
  assert_memory_not_equal(a0.b, a1.b, 16);
  assert_memory_not_equal(a0.b, b0.b, 16);
  assert_memory_equal(a0.b, a0again.b, 16);
}

/* ---- shard and lane hash --------------------------------------------------------------- */

static void test_shard_hash_matches_b3sum_vectors(void **state) {
  (void)state;
  static const uint32_t shard_counts[] = {1, 2, 7, 64, 1000, 65536, UINT32_MAX};
  static const uint32_t lane_counts[] = {1, 2, 16, 255};
  FILE *f = open_vectors("shard_hash_vectors.txt");
  char line[1024], t_hex[64], u_hex[64], h_hex[64];
  int checked = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    assert_int_equal(sscanf(line, "%63s %63s %63s", t_hex, u_hex, h_hex), 3);
    uint8_t tb[16], ub[16];
    hex16(t_hex, tb);
    hex16(u_hex, ub);
    qim_tenant_id t = {qim_u128_from_be(tb)};
    qim_user_id u = {qim_u128_from_be(ub)};
    uint64_t h = strtoull(h_hex, NULL, 16);
    for (size_t i = 0; i < sizeof shard_counts / sizeof shard_counts[0]; i++)
      for (size_t j = 0; j < sizeof lane_counts / sizeof lane_counts[0]; j++) {
        qim_shard_config cfg = {shard_counts[i], lane_counts[j]};
        assert_int_equal(qim_shard_of_user(&cfg, t, u), h % shard_counts[i]);
        assert_int_equal(qim_lane_of_user(&cfg, t, u), (h >> 32) % lane_counts[j]);
      }
    checked++;
  }
  fclose(f);
  assert_int_equal(checked, 5);
}

/* Placements that must never change (a user's mailbox lives where they say). */
static void test_shard_placement_is_stable(void **state) {
  (void)state;
  qim_shard_config c64 = {64, 16}, c1000 = {1000, 16};
  qim_tenant_id t0 = {{0, 0}}, t1 = {{0, 1}};
  qim_user_id u1 = {{0, 1}}, u2 = {{0x0123456789abcdefu, 0x0123456789abcdefu}};
  assert_int_equal(qim_shard_of_user(&c64, t0, u1), 6);
  assert_int_equal(qim_shard_of_user(&c1000, t0, u1), 622);
  assert_int_equal(qim_lane_of_user(&c64, t0, u1), 13);
  assert_int_equal(qim_shard_of_user(&c64, t1, u1), 19);
  assert_int_equal(qim_shard_of_user(&c1000, t1, u1), 531);
  assert_int_equal(qim_lane_of_user(&c64, t1, u1), 9);
  assert_int_equal(qim_shard_of_user(&c64, t1, u2), 23);
  assert_int_equal(qim_shard_of_user(&c1000, t1, u2), 943);
  assert_int_equal(qim_lane_of_user(&c64, t1, u2), 7);
}

static void test_shard_and_lane_spread_users_evenly(void **state) {
  (void)state;
  enum { SHARDS = 64, LANES = 16, USERS = 64000 };
  qim_shard_config cfg = {SHARDS, LANES};
  qim_tenant_id t = {{0, 1}};
  unsigned shards[SHARDS] = {0}, lanes[LANES] = {0};
  for (uint64_t i = 0; i < USERS; i++) {
    qim_user_id u = {{0, i + 1}}; /* sequential ids: the worst case for a weak hash */
    shards[qim_shard_of_user(&cfg, t, u)]++;
    lanes[qim_lane_of_user(&cfg, t, u)]++;
  }
  /* Expected 1000 per shard, sd ~31: a 20% band is > 6 sd wide. */
  for (int s = 0; s < SHARDS; s++) assert_in_range(shards[s], 800, 1200);
  for (int l = 0; l < LANES; l++) assert_in_range(lanes[l], 3600, 4400);
}

static void test_shard_config_validation(void **state) {
  (void)state;
  assert_int_equal(qim_shard_config_validate(&(qim_shard_config){1, 1}), 0);
  assert_int_equal(qim_shard_config_validate(&(qim_shard_config){1024, 255}), 0);
  assert_int_equal(qim_shard_config_validate(&(qim_shard_config){0, 1}), -EINVAL);
  assert_int_equal(qim_shard_config_validate(&(qim_shard_config){1, 0}), -EINVAL);
  assert_int_equal(qim_shard_config_validate(&(qim_shard_config){1, 256}), -EINVAL);
  /* An invalid config still hashes without dividing by zero. */
  qim_shard_config zero = {0, 0};
  qim_user_id u = {{0, 5}};
  qim_tenant_id t = {{0, 1}};
  assert_int_equal(qim_shard_of_user(&zero, t, u), 0);
  assert_int_equal(qim_lane_of_user(&zero, t, u), 0);
}

/* ---- MailboxSeq and EventId -------------------------------------------------------------- */

static void test_mailbox_seq_packs_epoch_above_offset(void **state) {
  (void)state;
  qim_mailbox_seq s = qim_mailbox_seq_make(3, 12345);
  assert_int_equal(qim_mailbox_seq_epoch(s), 3);
  assert_true(qim_mailbox_seq_offset(s) == 12345);
  /* Every seq of a later epoch sorts above every seq of an earlier one. */
  assert_true(qim_mailbox_seq_make(4, 0) > qim_mailbox_seq_make(3, QIM_MAILBOX_OFFSET_MAX));
  qim_mailbox_seq top = qim_mailbox_seq_make(UINT16_MAX, QIM_MAILBOX_OFFSET_MAX);
  assert_true(top <= (uint64_t)INT64_MAX); /* fits SQLite's signed 64-bit integers */
  assert_int_equal(qim_mailbox_seq_epoch(top), UINT16_MAX);
  qim_event_id e = qim_event_id_make(s, 2);
  assert_true(e >> 8 == s);
  assert_int_equal(e & 0xFF, 2);
  assert_true(qim_event_id_make(s, 255) < qim_event_id_make(s + 1, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dispatch_id_matches_b3sum_vectors),
      cmocka_unit_test(test_dispatch_id_domain_includes_the_nul_byte),
      cmocka_unit_test(test_dispatch_id_differs_per_shard_and_message),
      cmocka_unit_test(test_shard_hash_matches_b3sum_vectors),
      cmocka_unit_test(test_shard_placement_is_stable),
      cmocka_unit_test(test_shard_and_lane_spread_users_evenly),
      cmocka_unit_test(test_shard_config_validation),
      cmocka_unit_test(test_mailbox_seq_packs_epoch_above_offset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
