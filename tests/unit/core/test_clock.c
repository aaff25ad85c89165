/*
 * test_clock.c — clock.h: the system and manual clocks, WriterIds, the MessageId
 * generator driven by a manual clock (monotonic within a millisecond, small steps back
 * tolerated, large ones refused with ClockUnsafe until the clock catches up, counter
 * overflow, uniqueness across threads) and RFC 3339 timestamps.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qim/clock.h"
#include "qim/err.h"
#include "testsupport.h"

#define T0 UINT64_C(1700000000000) /* 2023-11-14T22:13:20.000Z */

static uint32_t id_counter(const qim_message_id *id) {
  return (uint32_t)id->b[12] << 24 | (uint32_t)id->b[13] << 16 | (uint32_t)id->b[14] << 8 | id->b[15];
}

static uint32_t id_writer(const qim_message_id *id) {
  return (uint32_t)id->b[8] << 24 | (uint32_t)id->b[9] << 16 | (uint32_t)id->b[10] << 8 | id->b[11];
}

static int id_cmp(const void *a, const void *b) { return memcmp(a, b, sizeof(qim_message_id)); }

/* ---- clocks and writer ids ---------------------------------------------------------- */

static void test_system_clock_tracks_real_time(void **state) {
  (void)state;
  const qim_clock *c = qim_clock_system();
  uint64_t now = (uint64_t)time(NULL) * 1000;
  uint64_t wall = qim_clock_wall_ms(c);
  assert_true(wall + 2000 >= now && wall <= now + 2000);
  uint64_t m1 = qim_clock_mono_ns(c), m2 = qim_clock_mono_ns(c);
  assert_true(m2 >= m1);
}

static void test_manual_clock_moves_only_when_told(void **state) {
  (void)state;
  qim_manual_clock mc;
  qim_manual_clock_init(&mc, T0);
  assert_true(qim_clock_wall_ms(&mc.clock) == T0);
  uint64_t mono = qim_clock_mono_ns(&mc.clock);
  qim_manual_clock_advance(&mc, 5);
  assert_true(qim_clock_wall_ms(&mc.clock) == T0 + 5);
  assert_true(qim_clock_mono_ns(&mc.clock) == mono + 5000000);
  qim_manual_clock_set_wall(&mc, T0 - 100); /* wall may step back, mono never does */
  assert_true(qim_clock_wall_ms(&mc.clock) == T0 - 100);
  assert_true(qim_clock_mono_ns(&mc.clock) == mono + 5000000);
}

static void test_writer_id_packs_node_and_slot_and_checks_range(void **state) {
  (void)state;
  qim_writer_id w = 0;
  assert_int_equal(qim_writer_id_make(0xABCDEF, 0x12, &w), 0);
  assert_true(w == 0xABCDEF12u);
  assert_int_equal(qim_writer_id_node(w), 0xABCDEF);
  assert_int_equal(qim_writer_id_slot(w), 0x12);
  assert_int_equal(qim_writer_id_make(1u << 24, 0, &w), -EINVAL);
  assert_int_equal(qim_writer_id_make(1, 256, &w), -EINVAL);
  assert_true(w == 0xABCDEF12u);
}

/* ---- the generator --------------------------------------------------------------------- */

typedef struct gen_fixture {
  qim_manual_clock clock;
  qim_id_gen gen;
} gen_fixture;

static int gen_setup(void **state) {
  gen_fixture *f = calloc(1, sizeof *f);
  qim_manual_clock_init(&f->clock, T0);
  qim_writer_id w;
  qim_writer_id_make(0x000102, 3, &w);
  if (qim_id_gen_init(&f->gen, &f->clock.clock, w, 5) != 0) return -1;
  *state = f;
  return 0;
}

static int gen_teardown(void **state) {
  gen_fixture *f = *state;
  qim_id_gen_destroy(&f->gen);
  free(f);
  return 0;
}

static void test_ids_within_one_ms_count_up(void **state) {
  gen_fixture *f = *state;
  qim_message_id a, b, c;
  assert_int_equal(qim_id_gen_message_id(&f->gen, &a), 0);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), 0);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &c), 0);
  assert_true(qim_message_id_millis(&a) == T0);
  assert_true(qim_message_id_millis(&c) == T0);
  assert_int_equal(id_counter(&a), 0);
  assert_int_equal(id_counter(&b), 1);
  assert_int_equal(id_counter(&c), 2);
  assert_int_equal(id_writer(&a), 0x00010203);
  assert_true(id_cmp(&a, &b) < 0 && id_cmp(&b, &c) < 0);
  /* Layout: 8 bytes of milliseconds, big-endian. */
  uint8_t ms_be[8];
  for (int i = 0; i < 8; i++) ms_be[i] = (uint8_t)(T0 >> (56 - 8 * i));
  assert_memory_equal(a.b, ms_be, 8);
}

static void test_next_ms_resets_counter(void **state) {
  gen_fixture *f = *state;
  qim_message_id a, b;
  qim_id_gen_message_id(&f->gen, &a);
  qim_id_gen_message_id(&f->gen, &a);
  qim_manual_clock_advance(&f->clock, 1);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), 0);
  assert_true(qim_message_id_millis(&b) == T0 + 1);
  assert_int_equal(id_counter(&b), 0);
  assert_true(id_cmp(&a, &b) < 0);
}

static void test_small_step_back_keeps_issuing_monotonic_ids(void **state) {
  gen_fixture *f = *state;
  qim_message_id a, b, c;
  qim_id_gen_message_id(&f->gen, &a);
  qim_manual_clock_set_wall(&f->clock, T0 - 5); /* exactly the tolerance */
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), 0);
  assert_true(qim_message_id_millis(&b) == T0);
  assert_int_equal(id_counter(&b), 1);
  qim_manual_clock_set_wall(&f->clock, T0 - 1);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &c), 0);
  assert_true(id_cmp(&a, &b) < 0 && id_cmp(&b, &c) < 0);
}

static void test_big_step_back_is_clock_unsafe_until_clock_catches_up(void **state) {
  gen_fixture *f = *state;
  qim_message_id a, b, c;
  qim_id_gen_message_id(&f->gen, &a);
  qim_manual_clock_set_wall(&f->clock, T0 - 6);
  memset(&b, 0x5A, sizeof b);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), QIM_E_COMMIT_CLOCK_UNSAFE);
  assert_int_equal(b.b[0], 0x5A); /* untouched */
  qim_last_activity_id la;
  assert_int_equal(qim_id_gen_last_activity_id(&f->gen, &la), QIM_E_COMMIT_CLOCK_UNSAFE);
  qim_manual_clock_set_wall(&f->clock, T0 - 1000);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), QIM_E_COMMIT_CLOCK_UNSAFE);
  /* Back within the tolerance: issuing resumes under the last millisecond. */
  qim_manual_clock_set_wall(&f->clock, T0 - 2);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), 0);
  assert_true(qim_message_id_millis(&b) == T0);
  assert_true(id_cmp(&a, &b) < 0);
  /* Caught up and past: a fresh millisecond. */
  qim_manual_clock_set_wall(&f->clock, T0 + 10);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &c), 0);
  assert_true(qim_message_id_millis(&c) == T0 + 10);
  assert_int_equal(id_counter(&c), 0);
  assert_true(id_cmp(&b, &c) < 0);
}

static void test_counter_overflow_moves_to_next_ms(void **state) {
  gen_fixture *f = *state;
  qim_message_id a, b, c;
  qim_id_gen_message_id(&f->gen, &a);
  f->gen.counter = UINT32_MAX - 1; /* as if 2^32 - 1 ids had been made in this ms */
  assert_int_equal(qim_id_gen_message_id(&f->gen, &b), 0);
  assert_int_equal(id_counter(&b), UINT32_MAX);
  assert_true(qim_message_id_millis(&b) == T0);
  assert_int_equal(qim_id_gen_message_id(&f->gen, &c), 0);
  assert_true(qim_message_id_millis(&c) == T0 + 1);
  assert_int_equal(id_counter(&c), 0);
  assert_true(id_cmp(&a, &b) < 0 && id_cmp(&b, &c) < 0);
  /* The wall clock is still at T0: the next id stays in T0 + 1. */
  assert_int_equal(qim_id_gen_message_id(&f->gen, &c), 0);
  assert_true(qim_message_id_millis(&c) == T0 + 1);
  assert_int_equal(id_counter(&c), 1);
}

static void test_last_activity_ids_share_the_sequence(void **state) {
  gen_fixture *f = *state;
  qim_message_id m;
  qim_last_activity_id la;
  qim_id_gen_message_id(&f->gen, &m);
  assert_int_equal(qim_id_gen_last_activity_id(&f->gen, &la), 0);
  assert_true(memcmp(m.b, la.b, 16) < 0);
  assert_memory_equal(m.b, la.b, 12);
  assert_int_equal(la.b[15], 1);
}

/* ---- threads --------------------------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 20000

typedef struct worker {
  qim_id_gen *gen;
  qim_message_id *out;
  int failures;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  for (int i = 0; i < PER_THREAD; i++)
    if (qim_id_gen_message_id(w->gen, &w->out[i]) != 0) w->failures++;
  return NULL;
}

/* Runs THREADS writers on one generator; checks per-thread order and global uniqueness. */
static void run_threads(const qim_clock *clock) {
  qim_id_gen gen;
  assert_int_equal(qim_id_gen_init(&gen, clock, 0x100, 0), 0);
  qim_message_id *all = calloc(THREADS * PER_THREAD, sizeof *all);
  worker ws[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    ws[t] = (worker){&gen, all + t * PER_THREAD, 0};
    assert_int_equal(pthread_create(&th[t], NULL, work, &ws[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(ws[t].failures, 0);
    for (int i = 1; i < PER_THREAD; i++) assert_true(id_cmp(&ws[t].out[i - 1], &ws[t].out[i]) < 0);
  }
  qsort(all, THREADS * PER_THREAD, sizeof *all, id_cmp);
  for (int i = 1; i < THREADS * PER_THREAD; i++) assert_true(id_cmp(&all[i - 1], &all[i]) < 0);
  free(all);
  qim_id_gen_destroy(&gen);
}

static void test_threads_get_unique_ids_from_system_clock(void **state) {
  (void)state;
  /* Tolerance 0: reading the clock under the lock means threads never see it go back. */
  run_threads(qim_clock_system());
}

static void test_threads_get_unique_ids_within_one_frozen_ms(void **state) {
  (void)state;
  qim_manual_clock mc;
  qim_manual_clock_init(&mc, T0);
  run_threads(&mc.clock);
}

/* ---- timestamps ------------------------------------------------------------------------ */

static void test_timestamp_format_known_instants(void **state) {
  (void)state;
  char ts[QIM_TIMESTAMP_CAP];
  struct { uint64_t ms; const char *text; } cases[] = {
      {0, "1970-01-01T00:00:00.000Z"},
      {1444154849841, "2015-10-06T18:07:29.841Z"},
      {951782400000, "2000-02-29T00:00:00.000Z"},
      {951868799999, "2000-02-29T23:59:59.999Z"},
      {1709164800000, "2024-02-29T00:00:00.000Z"},
      {4107542400000, "2100-03-01T00:00:00.000Z"}, /* 2100 is not a leap year */
      {UINT64_C(253402300799999), "9999-12-31T23:59:59.999Z"},
      {UINT64_MAX, "9999-12-31T23:59:59.999Z"}, /* clamped */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    qim_timestamp_format(cases[i].ms, ts);
    assert_string_equal(ts, cases[i].text);
    assert_int_equal(strlen(ts), 24);
  }
}

static void test_timestamp_parse_round_trips(void **state) {
  (void)state;
  char ts[QIM_TIMESTAMP_CAP];
  uint64_t back;
  /* Every day of 1970–2110 at a time of day that varies with the day; libc's gmtime_r
   * is the independent oracle for the calendar part. */
  for (uint64_t day = 0; day < 51500; day++) {
    uint64_t ms = day * 86400000 + (day * 7919 % 86400) * 1000 + day % 1000;
    qim_timestamp_format(ms, ts);
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char want[32];
    gmtime_r(&secs, &tm);
    strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
    assert_memory_equal(ts, want, 19);
    assert_int_equal(qim_timestamp_parse(ts, 24, &back), 0);
    assert_true(back == ms);
  }
  assert_int_equal(qim_timestamp_parse("9999-12-31T23:59:59.999Z", 24, &back), 0);
  assert_true(back == UINT64_C(253402300799999));
}

static void test_timestamp_parse_accepts_go_trimmed_forms(void **state) {
  (void)state;
  uint64_t ms;
  assert_int_equal(qim_timestamp_parse("2015-10-06T18:07:29Z", 20, &ms), 0);
  assert_true(ms == 1444154849000);
  assert_int_equal(qim_timestamp_parse("2015-10-06T18:07:29.8Z", 22, &ms), 0);
  assert_true(ms == 1444154849800);
  assert_int_equal(qim_timestamp_parse("2015-10-06T18:07:29.84Z", 23, &ms), 0);
  assert_true(ms == 1444154849840);
  assert_int_equal(qim_timestamp_parse("2015-10-06T18:07:29.840Z", 24, &ms), 0);
  assert_true(ms == 1444154849840);
}

static void test_timestamp_parse_rejects_malformed(void **state) {
  (void)state;
  uint64_t ms = 99;
  static const char *const bad[] = {
      "2015-10-06T18:07:29.Z",     /* dot without digits (21 chars) */
      "2015-10-06T18:07:29.8410Z", /* 4 fraction digits */
      "2015-10-06t18:07:29.841Z",
      "2015-10-06T18:07:29.841z",
      "2015-10-06 18:07:29.841Z",
      "2015-10-06T18:07:29.841",
      "2015-10-06T18:07:29+00:00",
      "2015-13-06T18:07:29.841Z",
      "2015-00-06T18:07:29.841Z",
      "2015-10-00T18:07:29.841Z",
      "2015-10-32T18:07:29.841Z",
      "2015-04-31T18:07:29.841Z",
      "2023-02-29T00:00:00.000Z", /* not a leap year */
      "2024-02-30T00:00:00.000Z",
      "1900-02-29T00:00:00.000Z",
      "2015-10-06T24:00:00.000Z",
      "2015-10-06T18:60:29.841Z",
      "2015-10-06T18:07:60.000Z", /* no leap seconds */
      "1969-12-31T23:59:59.999Z",
      "2015-1O-06T18:07:29.841Z",
      "+015-10-06T18:07:29.841Z",
      "2015/10/06T18:07:29.841Z",
      "2015-10-06T18:07:29,841Z",
      "2015-10-06T18:07:29.8 1Z",
      "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(qim_timestamp_parse(bad[i], strlen(bad[i]), &ms), -EINVAL);
  assert_true(ms == 99);
  assert_int_equal(qim_timestamp_parse("2000-02-29T00:00:00.000Z", 24, &ms), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_system_clock_tracks_real_time),
      cmocka_unit_test(test_manual_clock_moves_only_when_told),
      cmocka_unit_test(test_writer_id_packs_node_and_slot_and_checks_range),
      cmocka_unit_test_setup_teardown(test_ids_within_one_ms_count_up, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_next_ms_resets_counter, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_small_step_back_keeps_issuing_monotonic_ids, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_big_step_back_is_clock_unsafe_until_clock_catches_up, gen_setup,
                                      gen_teardown),
      cmocka_unit_test_setup_teardown(test_counter_overflow_moves_to_next_ms, gen_setup, gen_teardown),
      cmocka_unit_test_setup_teardown(test_last_activity_ids_share_the_sequence, gen_setup, gen_teardown),
      cmocka_unit_test(test_threads_get_unique_ids_from_system_clock),
      cmocka_unit_test(test_threads_get_unique_ids_within_one_frozen_ms),
      cmocka_unit_test(test_timestamp_format_known_instants),
      cmocka_unit_test(test_timestamp_parse_round_trips),
      cmocka_unit_test(test_timestamp_parse_accepts_go_trimmed_forms),
      cmocka_unit_test(test_timestamp_parse_rejects_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
