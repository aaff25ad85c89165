/*
 * test_mem.c — mem.h: byte accounting of every allocation function, fault injection of
 * try-allocations, and the abort-on-OOM policy (checked in a forked child).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qim/mem.h"
#include "testsupport.h"

static void test_malloc_and_free_are_counted(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  char *p = qim_malloc(1000);
  assert_true(qim_mem_used() >= base + 1000);
  size_t with_p = qim_mem_used();
  char *q = qim_calloc(10, 100);
  for (int i = 0; i < 1000; i++) assert_int_equal(q[i], 0);
  assert_true(qim_mem_used() >= with_p + 1000);
  qim_free(p);
  qim_free(q);
  assert_int_equal(qim_mem_used(), base);
  qim_free(NULL);
  assert_int_equal(qim_mem_used(), base);
}

static void test_realloc_moves_the_count(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  char *p = qim_realloc(NULL, 16);
  memcpy(p, "0123456789abcdef", 16);
  p = qim_realloc(p, 100000);
  assert_true(qim_mem_used() >= base + 100000);
  assert_memory_equal(p, "0123456789abcdef", 16);
  p = qim_realloc(p, 8);
  assert_true(qim_mem_used() < base + 100000);
  assert_memory_equal(p, "01234567", 8);
  qim_free(p);
  assert_int_equal(qim_mem_used(), base);
}

static void test_dup_helpers_copy_and_count(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  char *s = qim_strdup("hello");
  char *t = qim_strndup("hello world", 5);
  char *u = qim_strndup("hi", 10);
  uint8_t *m = qim_memdup("\x01\x00\x02", 3);
  assert_string_equal(s, "hello");
  assert_string_equal(t, "hello");
  assert_string_equal(u, "hi");
  assert_memory_equal(m, "\x01\x00\x02", 3);
  assert_null(qim_strdup(NULL));
  assert_true(qim_mem_used() > base);
  qim_free(s);
  qim_free(t);
  qim_free(u);
  qim_free(m);
  assert_int_equal(qim_mem_used(), base);
}

static void test_fault_injection_fails_the_nth_try_alloc_once(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  qim_mem_fail_after(3);
  void *a = qim_trymalloc(10), *b = qim_trymalloc(10), *c = qim_trymalloc(10), *d = qim_trymalloc(10);
  assert_non_null(a);
  assert_non_null(b);
  assert_null(c);
  assert_non_null(d); /* one-shot */
  qim_free(a);
  qim_free(b);
  qim_free(d);
  assert_int_equal(qim_mem_used(), base);
  /* qim_malloc is never subject to injection. */
  qim_mem_fail_after(1);
  void *m = qim_malloc(10);
  assert_non_null(m);
  assert_null(qim_trymalloc(10));
  qim_free(m);
  /* Disarming. */
  qim_mem_fail_after(1);
  qim_mem_fail_after(0);
  void *e = qim_trymalloc(10);
  assert_non_null(e);
  qim_free(e);
}

static void test_tryrealloc_failure_keeps_the_block(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  char *p = qim_trymalloc(4);
  memcpy(p, "abcd", 4);
  size_t with_p = qim_mem_used();
  qim_mem_fail_after(1);
  assert_null(qim_tryrealloc(p, 1 << 20));
  assert_int_equal(qim_mem_used(), with_p);
  assert_memory_equal(p, "abcd", 4);
  char *q = qim_tryrealloc(p, 1 << 20);
  assert_non_null(q);
  assert_memory_equal(q, "abcd", 4);
  assert_true(qim_mem_used() >= base + (1 << 20));
  qim_free(q);
  assert_int_equal(qim_mem_used(), base);
}

static void test_trymalloc_returns_null_for_impossible_sizes(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  assert_null(qim_trymalloc(SIZE_MAX));
  assert_null(qim_trymalloc((size_t)PTRDIFF_MAX + 1));
  void *p = qim_trymalloc(0); /* a valid, freeable block */
  assert_non_null(p);
  qim_free(p);
  assert_int_equal(qim_mem_used(), base);
}

/* Runs fn in a child; returns its wait status. */
static int in_child(void (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY); /* keep the child's OOM message out of the log */
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    fn();
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}

static void alloc_impossible(void) {
  volatile size_t n = SIZE_MAX;
  void *p = qim_malloc(n);
  qim_free(p);
}

static void calloc_overflowing(void) {
  volatile size_t n = SIZE_MAX / 2;
  void *p = qim_calloc(n, 4);
  qim_free(p);
}

static void test_malloc_aborts_when_memory_cannot_be_had(void **state) {
  (void)state;
  int status = in_child(alloc_impossible);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGABRT);
  status = in_child(calloc_overflowing);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_malloc_and_free_are_counted),
      cmocka_unit_test(test_realloc_moves_the_count),
      cmocka_unit_test(test_dup_helpers_copy_and_count),
      cmocka_unit_test(test_fault_injection_fails_the_nth_try_alloc_once),
      cmocka_unit_test(test_tryrealloc_failure_keeps_the_block),
      cmocka_unit_test(test_trymalloc_returns_null_for_impossible_sizes),
      cmocka_unit_test(test_malloc_aborts_when_memory_cannot_be_had),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
