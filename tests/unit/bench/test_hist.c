/*
 * test_hist.c — qim-bench's latency histogram (tools/bench/hist.h) and its /proc readers
 * (tools/bench/procstat.h): percentiles against exactly known distributions, the bucket
 * layout's error bound, merging, the slowest windows of a run, and parsing of the /proc
 * formats including awkward process names, the busiest thread between two samples, and the
 * whole machine's idle share.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hist.h"
#include "procstat.h"
#include "testsupport.h"

static void test_small_values_are_exact(void **state) {
  (void)state;
  qim_hist h;
  qim_hist_init(&h);
  for (uint64_t v = 1; v <= 100; v++) qim_hist_record(&h, v);
  assert_int_equal(qim_hist_quantile(&h, 0.50), 50);
  assert_int_equal(qim_hist_quantile(&h, 0.90), 90);
  assert_int_equal(qim_hist_quantile(&h, 0.99), 99);
  assert_int_equal(qim_hist_quantile(&h, 1.0), 100);
  assert_int_equal(qim_hist_quantile(&h, 0.001), 1);
  assert_int_equal(h.min, 1);
  assert_true(qim_hist_mean(&h) > 50.49 && qim_hist_mean(&h) < 50.51);
}

static void test_large_values_are_within_the_bucket_bound_and_never_understated(void **state) {
  (void)state;
  /* 1..100000 µs uniformly: the q-quantile is q * 100000. */
  qim_hist h;
  qim_hist_init(&h);
  for (uint64_t v = 1; v <= 100000; v++) qim_hist_record(&h, v);
  const double qs[] = {0.5, 0.9, 0.99, 0.999};
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
    double exact = qs[i] * 100000.0;
    double got = (double)qim_hist_quantile(&h, qs[i]);
    assert_true(got >= exact);
    assert_true(got <= exact * (1.0 + 1.0 / 64.0) + 1.0);
  }
  assert_int_equal(qim_hist_quantile(&h, 1.0), 100000);
}

static void test_every_value_lands_in_a_bucket_that_holds_it(void **state) {
  (void)state;
  unsigned prev = 0;
  for (uint64_t v = 0; v < (1ull << 22); v += 1 + v / 97) {
    unsigned i = qim_hist_index(v);
    assert_true(i < QIM_HIST_BUCKETS);
    assert_true(i >= prev); /* monotonic */
    assert_true(qim_hist_upper(i) >= v);
    if (i > 0) assert_true(qim_hist_upper(i - 1) < v);
    prev = i;
  }
  /* Values beyond the range share the top bucket. */
  assert_int_equal(qim_hist_index(UINT64_MAX), QIM_HIST_BUCKETS - 1);
  assert_int_equal(qim_hist_index(1ull << 45), QIM_HIST_BUCKETS - 1);
}

static void test_quantile_is_clipped_to_the_exact_max_and_empty_is_zero(void **state) {
  (void)state;
  qim_hist h;
  qim_hist_init(&h);
  assert_int_equal(qim_hist_quantile(&h, 0.99), 0);
  assert_true(qim_hist_mean(&h) == 0.0);
  qim_hist_record(&h, 1000001); /* bucket upper bound is above it */
  assert_int_equal(qim_hist_quantile(&h, 0.5), 1000001);
}

static void test_merge_adds_counts_and_extremes(void **state) {
  (void)state;
  qim_hist a, b;
  qim_hist_init(&a);
  qim_hist_init(&b);
  for (int i = 0; i < 90; i++) qim_hist_record(&a, 10);
  for (int i = 0; i < 10; i++) qim_hist_record(&b, 5000);
  qim_hist_record(&b, 3);
  qim_hist_merge(&a, &b);
  assert_int_equal(a.count, 101);
  assert_int_equal(a.min, 3);
  assert_int_equal(a.max, 5000);
  assert_int_equal(qim_hist_quantile(&a, 0.5), 10);
  assert_true(qim_hist_quantile(&a, 0.95) >= 5000);
}

static void test_windows_name_the_slowest_windows_slowest_first(void **state) {
  (void)state;
  static qim_hist_windows w; /* 24 KB: not on the test's stack */
  qim_hist_windows_init(&w, 1000000, 100000);
  qim_hist_windows_record(&w, 999999, 900000); /* before the start: not kept */
  qim_hist_windows_record(&w, 1000000, 5000);  /* window 0 */
  qim_hist_windows_record(&w, 1099999, 7000);  /* window 0 again: its max */
  qim_hist_windows_record(&w, 1250000, 80000); /* window 2 */
  qim_hist_windows_record(&w, 1250000, 1000);  /* a smaller value leaves the max */
  qim_hist_windows_record(&w, 1550000, 7000);  /* window 5: ties with window 0 */
  qim_hist_windows_record(&w, 1000000 + 100000ull * QIM_HIST_WINDOWS_MAX, 1); /* past the end */
  uint32_t top[4];
  assert_int_equal(qim_hist_windows_worst(&w, 4, top), 3);
  assert_int_equal(top[0], 2);
  assert_int_equal(top[1], 0); /* of equal maxima, the earlier first */
  assert_int_equal(top[2], 5);
  assert_int_equal(w.max_us[0], 7000);
  assert_int_equal(w.max_us[2], 80000);
  /* Only k are named, and they are the largest. */
  assert_int_equal(qim_hist_windows_worst(&w, 1, top), 1);
  assert_int_equal(top[0], 2);
  assert_int_equal(qim_hist_windows_worst(&w, 0, top), 0);
  qim_hist_windows_init(&w, 0, 1000);
  assert_int_equal(qim_hist_windows_worst(&w, 4, top), 0);
}

static void test_windows_keep_the_k_largest_when_many_windows_are_filled(void **state) {
  (void)state;
  static qim_hist_windows w;
  qim_hist_windows_init(&w, 0, 10);
  /* Windows 0..999 hold the maxima 1..1000 in a scrambled order (7919 is prime to 1000). */
  for (uint32_t i = 0; i < 1000; i++) qim_hist_windows_record(&w, i * 10ull, 1 + (i * 7919u) % 1000u);
  uint32_t top[5];
  assert_int_equal(qim_hist_windows_worst(&w, 5, top), 5);
  for (unsigned j = 0; j < 5; j++) assert_int_equal(w.max_us[top[j]], 1000 - j);
}

/* ---- /proc ------------------------------------------------------------------------------------
 */

static void test_stat_with_spaces_and_parens_in_the_name(void **state) {
  (void)state;
  const char stat[] =
      "4242 (qim d) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 9 "
      "0 100 1000000 300 18446744073709551615";
  double cpu = 0;
  assert_int_equal(qim_proc_parse_stat(stat, 100.0, &cpu), 0);
  assert_true(cpu > 3.999 && cpu < 4.001); /* (250 + 150) / 100 */
  assert_int_equal(qim_proc_parse_stat("no parens here", 100.0, &cpu), -EINVAL);
  assert_int_equal(qim_proc_parse_stat("1 (x) S 1 2", 100.0, &cpu), -EINVAL);
}

static void test_thread_stat_gives_its_name_and_cpu(void **state) {
  (void)state;
  const char stat[] = "4243 (qim-writer) S 1 4242 4242 0 -1 4194560 10 0 0 0 300 100 0 0 20 0 9 0 100 1 2 3";
  qim_proc_thread t = {0};
  assert_int_equal(qim_proc_parse_thread(stat, 100.0, &t), 0);
  assert_int_equal(t.tid, 4243);
  assert_string_equal(t.name, "qim-writer");
  assert_true(t.cpu_s > 3.999 && t.cpu_s < 4.001);
  /* A name longer than comm's 15 characters is cut, never overrun. */
  const char longer[] = "7 (a-name-longer-than-fifteen) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 1 1";
  assert_int_equal(qim_proc_parse_thread(longer, 100.0, &t), 0);
  assert_string_equal(t.name, "a-name-longer-t");
  assert_int_equal(qim_proc_parse_thread("8 no parens", 100.0, &t), -EINVAL);
}

static void test_machine_idle_counts_idle_and_iowait_of_all_cores(void **state) {
  (void)state;
  /* user nice system idle iowait irq softirq steal guest guest_nice */
  const char t0[] = "cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 50 0 25 400 25 0 0 0 15 0\n";
  const char t1[] = "cpu  400 0 150 1000 100 0 50 0 90 0\ncpu0 200 0 75 500 50 0 25 0 45 0\n";
  qim_machine_sample a, b;
  assert_int_equal(qim_machine_parse_stat(t0, &a), 0);
  assert_int_equal(qim_machine_parse_stat(t1, &b), 0);
  assert_int_equal(a.total, 1000); /* guest time is inside user already: not added again */
  assert_int_equal(a.idle, 850);
  assert_int_equal(b.total, 1700);
  /* 700 ticks passed, 250 of them idle or waiting for I/O */
  double idle = qim_machine_idle_pct(&a, &b);
  assert_true(idle > 35.71 && idle < 35.72);
  assert_true(qim_machine_idle_pct(&b, &a) < 0); /* no time passed */
  assert_true(qim_machine_idle_pct(&a, &a) < 0);
  /* An old kernel's four fields are enough; a per-core line or anything else is not. */
  assert_int_equal(qim_machine_parse_stat("cpu  1 2 3 4\n", &a), 0);
  assert_int_equal(a.total, 10);
  assert_int_equal(a.idle, 4);
  assert_int_equal(qim_machine_parse_stat("cpu0 1 2 3 4\n", &a), -EINVAL);
  assert_int_equal(qim_machine_parse_stat("cpu  1 2\n", &a), -EINVAL);
  assert_int_equal(qim_machine_parse_stat("intr 5\n", &a), -EINVAL);
  /* This machine's own file reads and makes sense. */
  assert_int_equal(qim_machine_sample_read(&a), 0);
  assert_true(a.total > 0 && a.idle <= a.total);
}

static void test_busiest_thread_is_the_one_that_used_most_cpu_between_samples(void **state) {
  (void)state;
  static qim_proc_threads a, b;
  a = (qim_proc_threads){.count = 3, .at_s = 10.0};
  a.t[0] = (qim_proc_thread){1, "main", 50.0};   /* most CPU in total, little in between */
  a.t[1] = (qim_proc_thread){2, "writer", 5.0};
  a.t[2] = (qim_proc_thread){3, "gone", 1.0};    /* exited before b */
  b = (qim_proc_threads){.count = 3, .at_s = 12.0};
  b.t[0] = (qim_proc_thread){1, "main", 50.5};
  b.t[1] = (qim_proc_thread){2, "writer", 6.5};
  b.t[2] = (qim_proc_thread){4, "new", 0.2};     /* started after a: counts from zero */
  const char *name = NULL;
  double pct = 0;
  assert_int_equal(qim_proc_threads_busiest(&a, &b, &name, &pct), 0);
  assert_string_equal(name, "writer");
  assert_true(pct > 74.99 && pct < 75.01); /* 1.5 s of CPU in 2 s */
  b.t[2].cpu_s = 1.8; /* a newcomer busier than anyone */
  assert_int_equal(qim_proc_threads_busiest(&a, &b, &name, &pct), 0);
  assert_string_equal(name, "new");
  assert_int_equal(qim_proc_threads_busiest(&b, &a, &name, &pct), -ENOENT); /* no time passed */
  b.count = 0;
  assert_int_equal(qim_proc_threads_busiest(&a, &b, &name, &pct), -ENOENT);
}

/* This process's main thread in a sample; fails the test when it is not there. */
static const qim_proc_thread *main_thread(const qim_proc_threads *t) {
  for (uint32_t i = 0; i < t->count; i++)
    if (t->t[i].tid == getpid()) return &t->t[i];
  fail_msg("thread %d not sampled", (int)getpid());
  return NULL;
}

static void test_threads_of_this_process_are_sampled(void **state) {
  (void)state;
  static qim_proc_threads a, b;
  assert_int_equal(qim_proc_threads_read(getpid(), &a), 0);
  double start = main_thread(&a)->cpu_s;
  /* Spin until /proc charges this thread some CPU: it counts in clock ticks, so a fixed
   * spin could be charged none on a loaded machine (seen once in a full parallel run).
   * Bounded: at most 200 rounds of ~10 ms of work. */
  const qim_proc_thread *self = NULL;
  volatile uint64_t x = 0;
  for (int round = 0; round < 200 && (!self || self->cpu_s <= start); round++) {
    for (uint64_t i = 0; i < 20000000; i++) x += i;
    assert_int_equal(qim_proc_threads_read(getpid(), &b), 0);
    self = main_thread(&b);
  }
  assert_true(x > 0);
  assert_true(self->cpu_s > start);
  const char *name = NULL;
  double pct = 0;
  assert_int_equal(qim_proc_threads_busiest(&a, &b, &name, &pct), 0);
  assert_string_equal(name, self->name); /* the thread that spun */
  assert_true(pct > 0);
  assert_int_equal(qim_proc_threads_read(-1, &a), -ENOENT);
}

static void test_status_keys(void **state) {
  (void)state;
  const char status[] = "Name:\tqimd\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n";
  uint64_t kb = 0;
  assert_int_equal(qim_proc_parse_kb(status, "VmRSS", &kb), 0);
  assert_int_equal(kb, 10240);
  assert_int_equal(qim_proc_parse_kb(status, "VmHWM", &kb), 0);
  assert_int_equal(kb, 20480);
  assert_int_equal(qim_proc_parse_kb(status, "Threads", &kb), 0);
  assert_int_equal(kb, 7);
  assert_int_equal(qim_proc_parse_kb(status, "VmSwap", &kb), -ENOENT);
  assert_int_equal(qim_proc_parse_kb(status, "VmRS", &kb), -ENOENT); /* whole keys only */
}

static void test_sockstat_line(void **state) {
  (void)state;
  const char text[] =
      "sockets: used 16\nTCP: inuse 5 orphan 0 tw 1 alloc 7 mem 36\nUDP: inuse 0 mem 0\n";
  qim_sock_sample s = {0};
  assert_int_equal(qim_sock_parse_sockstat(text, &s), 0);
  assert_int_equal(s.tcp_inuse, 5);
  assert_int_equal(s.tcp_alloc, 7);
  assert_int_equal(s.tcp_mem_pages, 36);
  assert_int_equal(qim_sock_parse_sockstat("UDP: inuse 0\n", &s), -EINVAL);
}

/* Written and synced bytes show in write_bytes (the build directory, where ctest runs, is
 * on a disk: tmpfs pages never reach one). */
static void test_disk_writes_of_this_process_are_counted(void **state) {
  (void)state;
  enum { MIB = 1 << 20, N = 4 };
  char path[] = "qim-procio-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  qim_proc_sample a, b;
  assert_int_equal(qim_proc_sample_read(getpid(), &a), 0);
  char *buf = calloc(1, MIB);
  assert_non_null(buf);
  for (int i = 0; i < N; i++) assert_int_equal(write(fd, buf, MIB), MIB);
  assert_int_equal(fdatasync(fd), 0);
  free(buf);
  close(fd);
  assert_int_equal(qim_proc_sample_read(getpid(), &b), 0);
  assert_true(b.write_bytes - a.write_bytes >= (uint64_t)N * MIB);
  assert_true(qim_proc_write_mb_s(&a, &b) > 0.0);
  assert_true(qim_proc_write_mb_s(&b, &a) == 0.0); /* a reversed pair is no rate */
}

static void test_sampling_this_process(void **state) {
  (void)state;
  qim_proc_sample a, b;
  assert_int_equal(qim_proc_sample_read(getpid(), &a), 0);
  assert_true(a.rss_kb > 0);
  assert_true(a.hwm_kb >= a.rss_kb);
  assert_true(a.threads >= 1);
  volatile uint64_t x = 0;
  for (uint64_t i = 0; i < 20000000; i++) x += i;
  assert_true(x > 0);
  assert_int_equal(qim_proc_sample_read(getpid(), &b), 0);
  assert_true(b.cpu_s >= a.cpu_s);
  assert_true(qim_proc_cpu_pct(&a, &b) >= 0.0);
  assert_int_equal(qim_proc_sample_read(0x3FFFFFFF, &b), -ENOENT);
  qim_sock_sample s;
  assert_int_equal(qim_sock_sample_read(&s), 0);
  assert_true(s.slab_kb > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_values_are_exact),
      cmocka_unit_test(test_large_values_are_within_the_bucket_bound_and_never_understated),
      cmocka_unit_test(test_every_value_lands_in_a_bucket_that_holds_it),
      cmocka_unit_test(test_quantile_is_clipped_to_the_exact_max_and_empty_is_zero),
      cmocka_unit_test(test_merge_adds_counts_and_extremes),
      cmocka_unit_test(test_windows_name_the_slowest_windows_slowest_first),
      cmocka_unit_test(test_windows_keep_the_k_largest_when_many_windows_are_filled),
      cmocka_unit_test(test_stat_with_spaces_and_parens_in_the_name),
      cmocka_unit_test(test_thread_stat_gives_its_name_and_cpu),
      cmocka_unit_test(test_machine_idle_counts_idle_and_iowait_of_all_cores),
      cmocka_unit_test(test_busiest_thread_is_the_one_that_used_most_cpu_between_samples),
      cmocka_unit_test(test_threads_of_this_process_are_sampled),
      cmocka_unit_test(test_status_keys),
      cmocka_unit_test(test_sockstat_line),
      cmocka_unit_test(test_sampling_this_process),
      cmocka_unit_test(test_disk_writes_of_this_process_are_counted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
