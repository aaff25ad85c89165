/*
 * test_release.c — release.h: ctest's JUnit file and label listing turned into verification
 * evidence, and the gate's judgement of a release on that evidence and on the worktree.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/release.h"
#include "testsupport.h"

/* One ctest test as the two inputs describe it. */
typedef struct fake_test {
  const char *name;
  const char *label;
  const char *status; /* "run", "fail", "notrun" */
  const char *time;
  const char *inside; /* extra elements inside <testcase>, or NULL */
} fake_test;

/* Every suite main requires, one test each. */
static const fake_test main_tests[] = {
    {"unit_core_test_ids", "unit", "run", "0.0114986", NULL},
    {"contract_selftest", "unit", "run", "4.7444", NULL},
    {"conformance_sqlite", "conformance", "run", "12.5", NULL},
    {"e2e_p2p", "e2e", "run", "3.25", NULL},
    {"crash_sqlite", "crash", "run", "9", NULL},
    {"fuzz_ws", "fuzz", "run", "0.0182113", NULL},
    {"contract_table", "contract", "run", "1.5", NULL},
};
#define MAIN_TESTS (sizeof main_tests / sizeof main_tests[0])

static char junit[16384], labels[16384];

/* Writes the JUnit file and the json-v1 listing for `tests` into junit / labels. */
static void render(const fake_test *tests, size_t n) {
  size_t j = (size_t)snprintf(junit, sizeof junit,
                              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"(empty)\""
                              "\n\ttests=\"%zu\"\n\t>\n",
                              n);
  size_t l = (size_t)snprintf(labels, sizeof labels, "{\"kind\":\"ctestInfo\",\"tests\":[");
  for (size_t i = 0; i < n; i++) {
    const fake_test *t = &tests[i];
    j += (size_t)snprintf(junit + j, sizeof junit - j,
                          "\t<testcase name=\"%s\" classname=\"%s\" time=\"%s\" status=\"%s\">\n"
                          "\t\t<system-out>[ RUN ] &lt;skipped&gt; is only text here\n"
                          "</system-out>%s\n\t</testcase>\n",
                          t->name, t->name, t->time, t->status, t->inside ? t->inside : "");
    l += (size_t)snprintf(labels + l, sizeof labels - l,
                          "%s{\"name\":\"%s\",\"properties\":[{\"name\":\"LABELS\",\"value\":[\"%s\"]},"
                          "{\"name\":\"TIMEOUT\",\"value\":120}]}",
                          i ? "," : "", t->name, t->label);
  }
  snprintf(junit + j, sizeof junit - j, "</testsuite>\n");
  snprintf(labels + l, sizeof labels - l, "]}");
}

/* Adds `tests` as the evidence of `build` to d. */
static void add_build(qim_release_decision *d, const char *build, const fake_test *tests,
                      size_t n) {
  render(tests, n);
  assert_int_equal(qim_release_evidence_add(d, build, junit, strlen(junit), labels, strlen(labels)),
                   0);
}

static const qim_verification_evidence *evidence(const qim_release_decision *d,
                                                 const char *suite) {
  for (size_t i = 0; i < d->evidence_count; i++)
    if (!strcmp(d->evidence[i].suite, suite)) return &d->evidence[i];
  return NULL;
}

static const qim_release_worktree clean = {.descends_from_main = true};

/* ---- evidence -------------------------------------------------------------------------------- */

static void test_each_label_and_backend_runner_becomes_one_suite_per_build(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  add_build(&d, "gcc", main_tests, MAIN_TESTS);
  const qim_verification_evidence *unit = evidence(&d, "gcc/unit");
  assert_non_null(unit);
  assert_int_equal(unit->tests, 2); /* a test counts in its label, not its name's prefix */
  assert_int_equal(unit->elapsed_ms, 11 + 4744);
  assert_true(unit->passed);
  assert_int_equal(unit->skipped, 0);
  const qim_verification_evidence *runner = evidence(&d, "gcc/conformance_sqlite");
  assert_non_null(runner);
  assert_int_equal(runner->tests, 1);
  assert_int_equal(runner->elapsed_ms, 12500);
  assert_int_equal(runner->branch, QIM_RELEASE_BRANCH_MAIN);
  assert_non_null(evidence(&d, "gcc/conformance"));
  assert_null(evidence(&d, "san/unit"));
  assert_null(evidence(&d, "gcc/unit_core_test_ids")); /* tests are not suites of their own */
  assert_int_equal(d.evidence_count, 7);
  qim_release_decision_free(&d);
  assert_int_equal(d.evidence_count, 0);
}

static void test_failed_and_skipped_tests_mark_their_suite(void **state) {
  (void)state;
  const fake_test tests[] = {
      {"unit_a", "unit", "run", "1", NULL},
      {"unit_b", "unit", "fail", "1", "<failure message=\"Failed\"/>"},
      {"e2e_a", "e2e", "notrun", "0", "<skipped message=\"Skipped\"/>"},
      {"crash_a", "crash", "run", "1", "<failure message=\"x\"/>"},
      {"fuzz_a", "fuzz", "disabled", "0", NULL},
      {"conformance_redis", "conformance", "run", "2", NULL},
  };
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_STORE_REDIS};
  add_build(&d, "san", tests, sizeof tests / sizeof tests[0]);
  assert_false(evidence(&d, "san/unit")->passed);
  assert_int_equal(evidence(&d, "san/unit")->skipped, 0);
  assert_false(evidence(&d, "san/e2e")->passed);
  assert_int_equal(evidence(&d, "san/e2e")->skipped, 1);
  assert_false(evidence(&d, "san/crash")->passed); /* status "run" with a <failure> inside */
  assert_int_equal(evidence(&d, "san/fuzz")->skipped, 1);
  assert_true(evidence(&d, "san/conformance_redis")->passed);
  assert_int_equal(evidence(&d, "san/conformance_redis")->branch, QIM_RELEASE_BRANCH_STORE_REDIS);
  qim_release_decision_free(&d);
}

static void test_malformed_inputs_are_einval_and_add_nothing(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  render(main_tests, MAIN_TESTS);
  const char *bad_junit[] = {
      "",
      "<testsuite><testcase name=\"x\" time=\"1\" status=\"run\">", /* never closed */
      "<testsuite><testcase name=\"x\" status=\"run\"/></testsuite>",  /* no time */
      "<testsuite><testcase name=\"x\" time=\"-1\" status=\"run\"/></testsuite>",
      "<testsuite><testcase name=\"x\" time=\"1s\" status=\"run\"/></testsuite>",
      "<testsuite><testcase time=\"1\" status=\"run\"/></testsuite>", /* no name */
      "<testcase name=\"x\" time=\"1\" status=\"run\"/><testsuite>",   /* a case first */
  };
  for (size_t i = 0; i < sizeof bad_junit / sizeof bad_junit[0]; i++)
    assert_int_equal(qim_release_evidence_add(&d, "gcc", bad_junit[i], strlen(bad_junit[i]), labels,
                                              strlen(labels)),
                     -EINVAL);
  const char *bad_labels[] = {"", "{\"tests\":{}}", "[1,2]", "{\"tests\":[1"};
  for (size_t i = 0; i < sizeof bad_labels / sizeof bad_labels[0]; i++)
    assert_int_equal(qim_release_evidence_add(&d, "gcc", junit, strlen(junit), bad_labels[i],
                                              strlen(bad_labels[i])),
                     -EINVAL);
  assert_int_equal(qim_release_evidence_add(&d, "", junit, strlen(junit), labels, strlen(labels)),
                   -EINVAL);
  assert_int_equal(d.evidence_count, 0);
  /* A self-closed test case is a test that ran. */
  const char *selfclosed = "<testsuite><testcase name=\"unit_x\" time=\"0.5\" status=\"run\"/></testsuite>";
  const char *listing = "{\"tests\":[{\"name\":\"unit_x\",\"properties\":[{\"name\":\"LABELS\","
                        "\"value\":[\"unit\"]}]}]}";
  assert_int_equal(qim_release_evidence_add(&d, "gcc", selfclosed, strlen(selfclosed), listing,
                                            strlen(listing)),
                   0);
  assert_int_equal(evidence(&d, "gcc/unit")->tests, 1);
  assert_int_equal(evidence(&d, "gcc/unit")->elapsed_ms, 500);
  qim_release_decision_free(&d);
}

/* ---- the gate -------------------------------------------------------------------------------- */

/* Main's suites, passed in both builds. */
static void complete_main(qim_release_decision *d) {
  add_build(d, "gcc", main_tests, MAIN_TESTS);
  add_build(d, "san", main_tests, MAIN_TESTS);
}

static void test_complete_evidence_on_a_clean_descendant_of_main_releases(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  complete_main(&d);
  qim_error f[4];
  size_t n = 99;
  assert_int_equal(qim_release_check(&d, &clean, f, 4, &n), 0);
  assert_int_equal(n, 0);
  qim_release_decision_free(&d);
}

static void test_dirty_worktree_is_refused_before_anything_else(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  complete_main(&d);
  qim_release_worktree wt = {.dirty = true, .descends_from_main = false};
  qim_error f[4];
  size_t n;
  assert_int_equal(qim_release_check(&d, &wt, f, 4, &n), QIM_E_RELEASE_DIRTY_WORKTREE_RISK);
  assert_int_equal(n, 2);
  assert_int_equal(f[0].code, QIM_E_RELEASE_DIRTY_WORKTREE_RISK);
  assert_int_equal(f[1].code, QIM_E_RELEASE_DIRECTION_VIOLATION);
  qim_release_decision_free(&d);
}

static void test_commit_without_mains_tip_is_a_direction_violation(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  complete_main(&d);
  qim_release_worktree wt = {.descends_from_main = false};
  qim_error f[4];
  size_t n;
  assert_int_equal(qim_release_check(&d, &wt, f, 4, &n), QIM_E_RELEASE_DIRECTION_VIOLATION);
  assert_int_equal(n, 1);
  qim_release_decision_free(&d);
}

static void test_a_suite_absent_from_one_build_is_missing_verification(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  add_build(&d, "gcc", main_tests, MAIN_TESTS);
  add_build(&d, "san", main_tests, MAIN_TESTS - 1); /* no contract suite in the san build */
  qim_error f[4];
  size_t n;
  assert_int_equal(qim_release_check(&d, &clean, f, 4, &n), QIM_E_RELEASE_MISSING_VERIFICATION);
  assert_int_equal(n, 1);
  assert_int_equal(f[0].branch, QIM_RELEASE_BRANCH_MAIN);
  assert_string_equal(f[0].suite, "san/contract");
  qim_release_decision_free(&d);
}

static void test_a_failed_suite_is_missing_and_a_skipped_one_skipped(void **state) {
  (void)state;
  fake_test tests[MAIN_TESTS];
  memcpy(tests, main_tests, sizeof tests);
  tests[3].status = "notrun"; /* e2e_p2p */
  tests[3].inside = "<skipped message=\"SKIP_RETURN_CODE\"/>";
  tests[4].status = "fail"; /* crash_sqlite */
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN};
  add_build(&d, "gcc", main_tests, MAIN_TESTS);
  add_build(&d, "san", tests, MAIN_TESTS);
  qim_error f[4];
  size_t n;
  assert_int_equal(qim_release_check(&d, &clean, f, 4, &n), QIM_E_RELEASE_SKIPPED_VERIFICATION);
  assert_int_equal(n, 2);
  assert_int_equal(f[0].code, QIM_E_RELEASE_SKIPPED_VERIFICATION);
  assert_string_equal(f[0].suite, "san/e2e");
  assert_int_equal(f[1].code, QIM_E_RELEASE_MISSING_VERIFICATION);
  assert_string_equal(f[1].suite, "san/crash");
  qim_release_decision_free(&d);
}

static void test_store_branch_needs_mains_suites_and_its_backends_conformance(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_STORE_REDIS};
  complete_main(&d);
  qim_error f[8];
  size_t n;
  assert_int_equal(qim_release_check(&d, &clean, f, 8, &n), QIM_E_RELEASE_MISSING_VERIFICATION);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < 2; i++) assert_int_equal(f[i].branch, QIM_RELEASE_BRANCH_STORE_REDIS);
  assert_string_equal(f[0].suite, "gcc/conformance_redis");
  assert_string_equal(f[1].suite, "san/conformance_redis");
  const fake_test redis[] = {{"conformance_redis", "conformance", "run", "30", NULL}};
  add_build(&d, "gcc", redis, 1);
  add_build(&d, "san", redis, 1);
  assert_int_equal(qim_release_check(&d, &clean, f, 8, &n), 0);
  /* The redis branch's evidence says nothing of scylla's backend. */
  d.branch = QIM_RELEASE_BRANCH_STORE_SCYLLA;
  assert_int_equal(qim_release_check(&d, &clean, f, 8, &n), QIM_E_RELEASE_MISSING_VERIFICATION);
  assert_string_equal(f[0].suite, "gcc/conformance_scylla");
  qim_release_decision_free(&d);
}

static void test_findings_past_the_array_are_counted_not_written(void **state) {
  (void)state;
  qim_release_decision d = {.branch = QIM_RELEASE_BRANCH_MAIN}; /* no evidence at all */
  qim_release_worktree wt = {.dirty = true};
  qim_error f[2];
  size_t n;
  assert_int_equal(qim_release_check(&d, &wt, f, 2, &n), QIM_E_RELEASE_DIRTY_WORKTREE_RISK);
  assert_int_equal(n, 2 + 7 * 2); /* dirty, direction, 7 suites in 2 builds */
  assert_int_equal(qim_release_check(&d, &wt, NULL, 0, &n), QIM_E_RELEASE_DIRTY_WORKTREE_RISK);
  d.branch = (qim_release_branch)7;
  assert_int_equal(qim_release_check(&d, &wt, f, 2, &n), -EINVAL);
}

static void test_branch_names_round_trip(void **state) {
  (void)state;
  const char *names[] = {"main", "store-redis", "store-scylla"};
  for (int i = 0; i < 3; i++) {
    qim_release_branch b;
    assert_int_equal(qim_release_branch_parse(names[i], &b), 0);
    assert_int_equal(b, i);
    assert_string_equal(qim_release_branch_name(b), names[i]);
  }
  qim_release_branch b;
  assert_int_equal(qim_release_branch_parse("Main", &b), -EINVAL);
  assert_int_equal(qim_release_branch_parse(NULL, &b), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_label_and_backend_runner_becomes_one_suite_per_build),
      cmocka_unit_test(test_failed_and_skipped_tests_mark_their_suite),
      cmocka_unit_test(test_malformed_inputs_are_einval_and_add_nothing),
      cmocka_unit_test(test_complete_evidence_on_a_clean_descendant_of_main_releases),
      cmocka_unit_test(test_dirty_worktree_is_refused_before_anything_else),
      cmocka_unit_test(test_commit_without_mains_tip_is_a_direction_violation),
      cmocka_unit_test(test_a_suite_absent_from_one_build_is_missing_verification),
      cmocka_unit_test(test_a_failed_suite_is_missing_and_a_skipped_one_skipped),
      cmocka_unit_test(test_store_branch_needs_mains_suites_and_its_backends_conformance),
      cmocka_unit_test(test_findings_past_the_array_are_counted_not_written),
      cmocka_unit_test(test_branch_names_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
