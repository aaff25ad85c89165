/*
 * test_broken_backend.c — the conformance suite must catch a broken backend.
 *
 * Runs every contract vector through the fault wrapper (conf_fault.c) around a real
 * SQLite store: in its transparent mode everything must pass (so the wrapper itself is
 * faithful), and in each fault mode the suite must report at least one
 * StorageConformanceError::SemanticMismatch — and nothing else (a malformed vector or a
 * missing dependency would be a different failure, not proof that the fault was seen).
 * A fault counts as caught only by a vector that passes through the transparent wrapper,
 * so a vector failing for another reason can never stand in for it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "testsupport.h"

static char vectors[4096];
static char *baseline_log; /* failures through the transparent wrapper */

static conf_report run_suite(conf_fault_mode mode, char **log_text);

static int setup(void **state) {
  (void)state;
  const char *src = getenv("QIM_SRC");
  snprintf(vectors, sizeof vectors, "%s/tests/conformance/vectors", src ? src : ".");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(baseline_log);
  return 0;
}

/* Runs the suite against `mode`; the failure descriptions go to a buffer printed on demand. */
static conf_report run_suite(conf_fault_mode mode, char **log_text) {
  char url[128];
  size_t log_len;
  conf_report rep = {0};
  snprintf(url, sizeof url, "fault:%s+sqlite:", conf_fault_name(mode));
  rep.log = open_memstream(log_text, &log_len);
  assert_non_null(rep.log);
  conf_run_path(url, vectors, &rep);
  fclose(rep.log);
  rep.log = NULL;
  printf("%-28s %d vectors, %d passed, %d SemanticMismatch, %d ContractVectorFailed, %d IsolatedDependencyUnavailable\n",
         conf_fault_name(mode), rep.vectors, rep.passed, rep.mismatched, rep.malformed, rep.unavailable);
  return rep;
}

static void test_transparent_wrapper_passes_every_vector(void **state) {
  (void)state;
  char *log = NULL;
  conf_report rep = run_suite(CONF_FAULT_NONE, &log);
  if (rep.passed != rep.vectors || rep.mismatched || rep.malformed || rep.unavailable) fputs(log, stdout);
  baseline_log = log;
  assert_true(rep.vectors >= 10);
  assert_int_equal(rep.passed, rep.vectors);
  assert_int_equal(rep.mismatched + rep.malformed + rep.unavailable, 0);
}

/* The vector path of a "FAIL <path> step ..." line starting at `line` (n bytes). */
static size_t vector_of(const char *line, size_t n, const char **path) {
  *path = line + 5;
  const char *sp = memchr(*path, ' ', n - 5);
  return sp ? (size_t)(sp - *path) : n - 5;
}

static bool failed_in_baseline(const char *path, size_t n) {
  for (const char *p = baseline_log; p && (p = strstr(p, "FAIL ")); p += 5)
    if (!strncmp(p + 5, path, n) && p[5 + n] == ' ') return true;
  return false;
}

/* Prints each failure and counts those of vectors that pass without the fault. */
static int count_catches(const char *log) {
  int caught = 0;
  for (const char *p = log; p && *p;) {
    const char *nl = strchr(p, '\n'), *path;
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (n > 5 && !strncmp(p, "FAIL ", 5)) {
      size_t plen = vector_of(p, n, &path);
      bool own = !failed_in_baseline(path, plen);
      caught += own;
      printf("    %s %.*s\n", own ? "caught by" : "(fails anyway)", (int)(n - 5), p + 5);
    }
    p = nl ? nl + 1 : NULL;
  }
  return caught;
}

static void expect_caught(conf_fault_mode mode) {
  char *log = NULL;
  if (!baseline_log) {
    conf_report base = run_suite(CONF_FAULT_NONE, &baseline_log);
    (void)base;
  }
  conf_report rep = run_suite(mode, &log);
  int caught = count_catches(log);
  if (rep.malformed || rep.unavailable) fputs(log, stdout);
  assert_true(rep.mismatched > 0);
  assert_true(caught > 0);
  assert_int_equal(rep.malformed, 0);
  assert_int_equal(rep.unavailable, 0);
  free(log);
}

#define CAUGHT(fn, mode) \
  static void fn(void **state) { (void)state; expect_caught(mode); }

CAUGHT(test_log_append_without_idempotence_is_caught, CONF_FAULT_LOG_APPEND_NOT_IDEMPOTENT)
CAUGHT(test_backward_intent_transition_is_caught, CONF_FAULT_INTENT_BACKWARD)
CAUGHT(test_ignored_epoch_fence_is_caught, CONF_FAULT_IGNORE_EPOCH_FENCE)
CAUGHT(test_records_from_soft_deleted_set_are_caught, CONF_FAULT_OTHER_USERS_DELLOG)
CAUGHT(test_replay_reported_as_fresh_is_caught, CONF_FAULT_REPLAY_REPORTED_FRESH)
CAUGHT(test_accepted_cmid_reuse_is_caught, CONF_FAULT_CMID_REUSE_ACCEPTED)
CAUGHT(test_read_below_trim_point_is_caught, CONF_FAULT_READ_BELOW_TRIM)
CAUGHT(test_current_membership_for_past_version_is_caught, CONF_FAULT_MEMBERS_AT_CURRENT)
CAUGHT(test_backward_receipt_is_caught, CONF_FAULT_RECEIPT_BACKWARD)
CAUGHT(test_duplicated_mailbox_entry_is_caught, CONF_FAULT_MAILBOX_DUPLICATE)

_Static_assert(CONF_FAULT_COUNT_ == 11, "every fault mode has its test above");

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transparent_wrapper_passes_every_vector),
      cmocka_unit_test(test_log_append_without_idempotence_is_caught),
      cmocka_unit_test(test_backward_intent_transition_is_caught),
      cmocka_unit_test(test_ignored_epoch_fence_is_caught),
      cmocka_unit_test(test_records_from_soft_deleted_set_are_caught),
      cmocka_unit_test(test_replay_reported_as_fresh_is_caught),
      cmocka_unit_test(test_accepted_cmid_reuse_is_caught),
      cmocka_unit_test(test_read_below_trim_point_is_caught),
      cmocka_unit_test(test_current_membership_for_past_version_is_caught),
      cmocka_unit_test(test_backward_receipt_is_caught),
      cmocka_unit_test(test_duplicated_mailbox_entry_is_caught),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
