/*
 * test_selftest.c — the vector interpreter reports every way a run can go wrong, each as
 * its StorageConformanceError, and never passes silently:
 *   malformed vectors (selftest/malformed)      → ContractVectorFailed,
 *   wrong expectations (selftest/mismatch)      → SemanticMismatch,
 *   a backend that cannot be created            → IsolatedDependencyUnavailable,
 *   an empty directory or one missing store calls → ContractVectorFailed;
 * while selftest/pass exercises the interpreter's features and must pass.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "testsupport.h"

static char dir[4096];

static int setup(void **state) {
  (void)state;
  const char *src = getenv("QIM_SRC");
  snprintf(dir, sizeof dir, "%s/tests/conformance/selftest", src ? src : ".");
  return 0;
}

/* Runs each vector of selftest/<sub> alone and requires `code` from every one. */
static int each_vector_gives(const char *sub, int code) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, sub);
  DIR *d = opendir(path);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strstr(e->d_name, ".json")) continue;
    char file[4500];
    conf_report rep = {0};
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    int rc = conf_run_vector_file("sqlite:", file, &rep);
    printf("  %-28s -> %s\n", e->d_name, qim_err_name(rc));
    assert_int_equal(rc, code);
    assert_int_equal(rep.vectors, 1);
    assert_int_equal(rep.passed, code == 0);
    assert_int_equal(rep.mismatched, code == QIM_E_CONFORMANCE_SEMANTIC_MISMATCH);
    assert_int_equal(rep.malformed, code == QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED);
    assert_int_equal(rep.unavailable, 0);
    n++;
  }
  closedir(d);
  return n;
}

static void test_malformed_vectors_are_contract_vector_failed(void **state) {
  (void)state;
  assert_true(each_vector_gives("malformed", QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED) >= 10);
}

static void test_wrong_expectations_are_semantic_mismatch(void **state) {
  (void)state;
  assert_true(each_vector_gives("mismatch", QIM_E_CONFORMANCE_SEMANTIC_MISMATCH) >= 5);
}

static void test_interpreter_features_pass_against_sqlite(void **state) {
  (void)state;
  assert_true(each_vector_gives("pass", 0) >= 2);
}

static void test_directory_missing_store_calls_fails_coverage(void **state) {
  (void)state;
  char path[4200];
  conf_report rep = {0};
  snprintf(path, sizeof path, "%s/pass", dir);
  int rc = conf_run_path("sqlite:", path, &rep);
  assert_int_equal(rc, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED);
  assert_int_equal(rep.passed, rep.vectors); /* every vector passed, yet the set is incomplete */
  assert_true(rep.malformed > 0);
}

static void test_empty_directory_is_contract_vector_failed(void **state) {
  (void)state;
  char *empty = qim_test_tmpdir("conf-empty");
  conf_report rep = {0};
  assert_int_equal(conf_run_path("sqlite:", empty, &rep), QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED);
  assert_int_equal(rep.vectors, 0);
  assert_int_equal(rep.malformed, 1);
  qim_test_rmtree(empty);
}

/* The backend URL cannot give a store: reported as such, and the vector does not run. */
static void expect_unavailable(const char *url) {
  char file[4200];
  conf_report rep = {0};
  snprintf(file, sizeof file, "%s/pass/second.json", dir);
  int rc = conf_run_vector_file(url, file, &rep);
  printf("  %-28s -> %s\n", url, qim_err_name(rc));
  assert_int_equal(rc, QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE);
  assert_int_equal(rep.unavailable, 1);
  assert_int_equal(rep.passed + rep.mismatched + rep.malformed, 0);
}

static void test_unusable_directory_is_isolated_dependency_unavailable(void **state) {
  (void)state;
  expect_unavailable("sqlite:/nonexistent/qim-conformance");
}

static void test_database_path_that_is_not_a_directory_is_unavailable(void **state) {
  (void)state;
  char *tmp = qim_test_tmpdir("conf-file"), url[4300], file[4200];
  snprintf(file, sizeof file, "%s/plain-file", tmp);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(url, sizeof url, "sqlite:%s", file);
  expect_unavailable(url);
  qim_test_rmtree(tmp);
}

static void test_unknown_backend_is_isolated_dependency_unavailable(void **state) {
  (void)state;
  expect_unavailable("redis://127.0.0.1:1/0"); /* a shared server is not an isolated one */
  expect_unavailable("scylla:");
}

/* "redis:" starts a private redis-server per vector; with no Redis backend in qim_store_open
 * yet, the dependency is there but the store cannot be created on it: reported, not skipped. */
static void test_private_redis_without_backend_is_unavailable(void **state) {
  (void)state;
  char file[4200], *log = NULL;
  size_t len;
  conf_report rep = {0};
  rep.log = open_memstream(&log, &len);
  snprintf(file, sizeof file, "%s/pass/second.json", dir);
  int rc = conf_run_vector_file("redis:", file, &rep);
  fclose(rep.log);
  printf("%s", log);
  assert_int_equal(rc, QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE);
  assert_int_equal(rep.unavailable, 1);
  /* Either the private server answered and the store refused it, or redis-server is absent. */
  assert_true(strstr(log, "qim_store_open(\"redis://127.0.0.1:") || strstr(log, "redis-server"));
  free(log);
}

static void test_unknown_fault_mode_is_isolated_dependency_unavailable(void **state) {
  (void)state;
  expect_unavailable("fault:no-such-fault+sqlite:");
  expect_unavailable("fault:none");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_malformed_vectors_are_contract_vector_failed),
      cmocka_unit_test(test_wrong_expectations_are_semantic_mismatch),
      cmocka_unit_test(test_interpreter_features_pass_against_sqlite),
      cmocka_unit_test(test_directory_missing_store_calls_fails_coverage),
      cmocka_unit_test(test_empty_directory_is_contract_vector_failed),
      cmocka_unit_test(test_unusable_directory_is_isolated_dependency_unavailable),
      cmocka_unit_test(test_database_path_that_is_not_a_directory_is_unavailable),
      cmocka_unit_test(test_unknown_backend_is_isolated_dependency_unavailable),
      cmocka_unit_test(test_private_redis_without_backend_is_unavailable),
      cmocka_unit_test(test_unknown_fault_mode_is_isolated_dependency_unavailable),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
