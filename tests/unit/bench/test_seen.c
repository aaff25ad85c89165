/*
 * test_seen.c — qim-bench's per-stream duplicate/reordering detector (tools/bench/seen.h):
 * in-order streams, gaps, late arrivals, duplicates on both sides of the highest number,
 * and the edge of the 64-number window.
 */
#include "seen.h"
#include "testsupport.h"

static void test_in_order_and_gaps_are_new(void **state) {
  (void)state;
  qim_seen s;
  qim_seen_init(&s);
  for (int64_t n = 0; n < 200; n++) assert_int_equal(qim_seen_mark(&s, n), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 500), QIM_SEEN_NEW); /* a gap (skipped or lost) */
  assert_int_equal(qim_seen_mark(&s, 501), QIM_SEEN_NEW);
}

static void test_first_message_need_not_be_zero(void **state) {
  (void)state;
  qim_seen s;
  qim_seen_init(&s);
  assert_int_equal(qim_seen_mark(&s, 7), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 7), QIM_SEEN_DUP);
  assert_int_equal(qim_seen_mark(&s, 5), QIM_SEEN_LATE);
}

static void test_overtaken_message_is_late_once_then_duplicate(void **state) {
  (void)state;
  qim_seen s;
  qim_seen_init(&s);
  assert_int_equal(qim_seen_mark(&s, 0), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 2), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 1), QIM_SEEN_LATE);
  assert_int_equal(qim_seen_mark(&s, 1), QIM_SEEN_DUP);
  assert_int_equal(qim_seen_mark(&s, 2), QIM_SEEN_DUP);
  assert_int_equal(qim_seen_mark(&s, 0), QIM_SEEN_DUP);
  assert_int_equal(qim_seen_mark(&s, 3), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 1), QIM_SEEN_DUP); /* still remembered after a shift */
}

static void test_window_edge(void **state) {
  (void)state;
  qim_seen s;
  qim_seen_init(&s);
  assert_int_equal(qim_seen_mark(&s, 100), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 37), QIM_SEEN_LATE); /* 63 below: inside */
  assert_int_equal(qim_seen_mark(&s, 37), QIM_SEEN_DUP);
  assert_int_equal(qim_seen_mark(&s, 36), QIM_SEEN_OLD); /* 64 below: outside */
  assert_int_equal(qim_seen_mark(&s, 101), QIM_SEEN_NEW);
  assert_int_equal(qim_seen_mark(&s, 37), QIM_SEEN_OLD);   /* shifted out */
  assert_int_equal(qim_seen_mark(&s, 1000), QIM_SEEN_NEW); /* a jump beyond the map clears it */
  assert_int_equal(qim_seen_mark(&s, 999), QIM_SEEN_LATE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_order_and_gaps_are_new),
      cmocka_unit_test(test_first_message_need_not_be_zero),
      cmocka_unit_test(test_overtaken_message_is_late_once_then_duplicate),
      cmocka_unit_test(test_window_edge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
