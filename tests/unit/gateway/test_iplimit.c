/*
 * test_iplimit.c — the per-IP connection counts: counting, release to zero, many
 * distinct addresses (table growth) and concurrent use from several threads.
 */
#include <pthread.h>
#include <string.h>

#include "gateway/iplimit.h"
#include "qim/mem.h"
#include "testsupport.h"

static void v4(uint8_t out[16], uint32_t ip) {
  memset(out, 0, 10);
  out[10] = out[11] = 0xFF;
  out[12] = (uint8_t)(ip >> 24), out[13] = (uint8_t)(ip >> 16);
  out[14] = (uint8_t)(ip >> 8), out[15] = (uint8_t)ip;
}

static void test_counts_go_up_and_back_to_zero(void **state) {
  (void)state;
  qim_iplimit *t = qim_iplimit_new();
  uint8_t a[16], b[16];
  v4(a, 0x7F000001);
  v4(b, 0x0A000001);
  assert_int_equal(qim_iplimit_count(t, a), 0);
  assert_int_equal(qim_iplimit_acquire(t, a), 1);
  assert_int_equal(qim_iplimit_acquire(t, a), 2);
  assert_int_equal(qim_iplimit_acquire(t, b), 1);
  assert_int_equal(qim_iplimit_count(t, a), 2);
  qim_iplimit_release(t, a);
  assert_int_equal(qim_iplimit_count(t, a), 1);
  qim_iplimit_release(t, a);
  assert_int_equal(qim_iplimit_count(t, a), 0);
  assert_int_equal(qim_iplimit_count(t, b), 1);
  qim_iplimit_release(t, b);
  qim_iplimit_free(t);
  qim_iplimit_free(NULL);
}

static void test_many_addresses_keep_separate_counts(void **state) {
  (void)state;
  size_t before = qim_mem_used();
  qim_iplimit *t = qim_iplimit_new();
  size_t empty = qim_mem_used();
  enum { N = 20000 };
  for (uint32_t i = 0; i < N; i++) {
    uint8_t a[16] = {0x20, 0x01, 0x0d, 0xb8};
    memcpy(a + 12, &i, 4); /* distinct IPv6 addresses in one /32 */
    assert_int_equal(qim_iplimit_acquire(t, a), 1);
    if (i % 3 == 0) assert_int_equal(qim_iplimit_acquire(t, a), 2);
  }
  for (uint32_t i = 0; i < N; i++) {
    uint8_t a[16] = {0x20, 0x01, 0x0d, 0xb8};
    memcpy(a + 12, &i, 4);
    assert_int_equal(qim_iplimit_count(t, a), i % 3 == 0 ? 2 : 1);
    qim_iplimit_release(t, a);
    if (i % 3 == 0) qim_iplimit_release(t, a);
  }
  /* Entries are gone; only the grown bucket arrays remain until the table is freed. */
  assert_true(qim_mem_used() - empty < (size_t)N * 16);
  qim_iplimit_free(t);
  assert_int_equal(qim_mem_used(), before);
}

typedef struct worker {
  qim_iplimit *t;
  int id;
} worker;

static void *churn(void *arg) {
  worker *w = arg;
  uint8_t a[16];
  for (int round = 0; round < 2000; round++) {
    v4(a, 0x7F000001u + (uint32_t)(round % 50)); /* shared by every thread */
    qim_iplimit_acquire(w->t, a);
    v4(a, 0x0B000000u + (uint32_t)(w->id * 10000 + round)); /* private */
    qim_iplimit_acquire(w->t, a);
    qim_iplimit_release(w->t, a);
    v4(a, 0x7F000001u + (uint32_t)(round % 50));
    qim_iplimit_release(w->t, a);
  }
  return NULL;
}

static void test_concurrent_use_balances_out(void **state) {
  (void)state;
  qim_iplimit *t = qim_iplimit_new();
  pthread_t th[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){t, i};
    pthread_create(&th[i], NULL, churn, &w[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (uint32_t k = 0; k < 50; k++) {
    uint8_t a[16];
    v4(a, 0x7F000001u + k);
    assert_int_equal(qim_iplimit_count(t, a), 0);
  }
  qim_iplimit_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts_go_up_and_back_to_zero),
      cmocka_unit_test(test_many_addresses_keep_separate_counts),
      cmocka_unit_test(test_concurrent_use_balances_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
