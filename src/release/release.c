/*
 * release.c — the release gate (qim/release.h): turning ctest's results into verification
 * evidence, and judging a release decision on that evidence and on the worktree.
 *
 * The JUnit file is read by a small scanner, not an XML library: ctest writes it in one
 * fixed shape, and the gate needs three attributes of each <testcase> element and whether
 * a <failure> or <skipped> element sits inside it. Test output inside <system-out> is
 * escaped, so a literal '<' there never starts an element.
 */
#include "qim/release.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/mem.h"

const char *const qim_release_builds[] = {"gcc", "san"};
const size_t qim_release_build_count = sizeof qim_release_builds / sizeof qim_release_builds[0];

/* A suite the gate requires, and the branch whose requirement it is. A suite is a ctest
 * label, or the name of one backend's conformance runner. */
typedef struct requirement {
  qim_release_branch branch;
  const char *suite;
} requirement;

static const requirement requirements[] = {
    {QIM_RELEASE_BRANCH_MAIN, "unit"},
    {QIM_RELEASE_BRANCH_MAIN, "conformance"},
    {QIM_RELEASE_BRANCH_MAIN, "e2e"},
    {QIM_RELEASE_BRANCH_MAIN, "crash"},
    {QIM_RELEASE_BRANCH_MAIN, "fuzz"},
    {QIM_RELEASE_BRANCH_MAIN, "contract"},
    {QIM_RELEASE_BRANCH_MAIN, "conformance_sqlite"},
    {QIM_RELEASE_BRANCH_STORE_REDIS, "conformance_redis"},
    {QIM_RELEASE_BRANCH_STORE_SCYLLA, "conformance_scylla"},
};
#define REQUIREMENT_COUNT (sizeof requirements / sizeof requirements[0])

static const char *const branch_names[] = {"main", "store-redis", "store-scylla"};

const char *qim_release_branch_name(qim_release_branch branch) {
  return (unsigned)branch < 3 ? branch_names[branch] : "unknown";
}

int qim_release_branch_parse(const char *name, qim_release_branch *out) {
  for (unsigned i = 0; name && i < 3; i++)
    if (!strcmp(name, branch_names[i])) {
      *out = (qim_release_branch)i;
      return 0;
    }
  return -EINVAL;
}

/* Every store branch is built on main; main on nothing else. */
static bool built_on(qim_release_branch released, qim_release_branch b) {
  return b == QIM_RELEASE_BRANCH_MAIN || b == released;
}

/* ---- JUnit --------------------------------------------------------------------------------- */

typedef enum outcome { OUTCOME_PASSED, OUTCOME_FAILED, OUTCOME_SKIPPED } outcome;

typedef struct test_result {
  char name[128];
  uint64_t elapsed_ms;
  outcome outcome;
} test_result;

/* The value of attribute `attr` inside the tag [tag, end) into out (NUL-terminated);
 * false when the tag has no such attribute or the value does not fit. */
static bool tag_attr(const char *tag, const char *end, const char *attr, char *out, size_t cap) {
  size_t an = strlen(attr);
  for (const char *p = tag + 1; p + an + 2 < end; p++) { /* tag[0] is its '<' */
    if (p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n') continue;
    if (memcmp(p, attr, an) || p[an] != '=' || p[an + 1] != '"') continue;
    const char *v = p + an + 2, *q = memchr(v, '"', (size_t)(end - v));
    if (!q || (size_t)(q - v) >= cap) return false;
    memcpy(out, v, (size_t)(q - v));
    out[q - v] = '\0';
    return true;
  }
  return false;
}

static const char *find(const char *p, const char *end, const char *needle) {
  size_t n = strlen(needle);
  for (; p + n <= end; p++)
    if (*p == *needle && !memcmp(p, needle, n)) return p;
  return NULL;
}

/* Reads the <testcase> element at `p`; *next is where the scan goes on. */
static int read_testcase(const char *p, const char *end, test_result *t, const char **next) {
  const char *tag_end = memchr(p, '>', (size_t)(end - p));
  char time[32], status[16];
  if (!tag_end || !tag_attr(p, tag_end, "name", t->name, sizeof t->name) ||
      !tag_attr(p, tag_end, "time", time, sizeof time) ||
      !tag_attr(p, tag_end, "status", status, sizeof status))
    return -EINVAL;
  char *te;
  double seconds = strtod(time, &te);
  if (te == time || *te || !(seconds >= 0) || seconds > 1e9) return -EINVAL;
  t->elapsed_ms = (uint64_t)llround(seconds * 1000.0);
  const char *body = tag_end + 1, *close = body;
  if (tag_end[-1] != '/' && !(close = find(body, end, "</testcase>"))) return -EINVAL;
  *next = close;
  if (!strcmp(status, "run") || !strcmp(status, "fail"))
    t->outcome = !strcmp(status, "fail") || find(body, close, "<failure") ? OUTCOME_FAILED
                                                                          : OUTCOME_PASSED;
  else
    t->outcome = OUTCOME_SKIPPED; /* "notrun", "disabled" */
  if (find(body, close, "<skipped")) t->outcome = OUTCOME_SKIPPED;
  return 0;
}

/* Every <testcase> of `xml` into a new array (*out, *n). */
static int junit_parse(const char *xml, size_t len, test_result **out, size_t *n) {
  const char *p = xml, *end = xml + len;
  *out = NULL;
  *n = 0;
  const char *suite = find(p, end, "<testsuite");
  if (!suite || find(p, suite, "<testcase")) return -EINVAL; /* cases belong inside it */
  size_t cap = 0;
  while ((p = find(p, end, "<testcase"))) {
    if (p + 9 < end && p[9] != ' ' && p[9] != '\t' && p[9] != '\n') {
      p += 9; /* <testcases>, not a test */
      continue;
    }
    if (*n == cap) *out = qim_realloc(*out, (cap = cap ? 2 * cap : 64) * sizeof **out);
    int rc = read_testcase(p, end, &(*out)[*n], &p);
    if (rc) {
      qim_free(*out);
      *out = NULL;
      *n = 0;
      return rc;
    }
    (*n)++;
  }
  return 0;
}

/* ---- evidence -------------------------------------------------------------------------------- */

/* The evidence for `suite` in `d`, added (failing nothing yet, no tests) when absent. */
static qim_verification_evidence *evidence_for(qim_release_decision *d, const char *suite,
                                               qim_release_branch branch) {
  for (size_t i = 0; i < d->evidence_count; i++)
    if (!strcmp(d->evidence[i].suite, suite)) return &d->evidence[i];
  d->evidence = qim_realloc(d->evidence, (d->evidence_count + 1) * sizeof *d->evidence);
  qim_verification_evidence *e = &d->evidence[d->evidence_count++];
  *e = (qim_verification_evidence){.branch = branch, .suite = qim_strdup(suite), .passed = true};
  return e;
}

static void evidence_count_test(qim_verification_evidence *e, const test_result *t) {
  e->tests++;
  e->elapsed_ms += t->elapsed_ms;
  if (t->outcome == OUTCOME_SKIPPED) e->skipped++;
  if (t->outcome != OUTCOME_PASSED) e->passed = false;
}

/* The branch whose requirement `suite` is (main for a label no requirement names). */
static qim_release_branch suite_branch(const char *suite) {
  for (size_t i = 0; i < REQUIREMENT_COUNT; i++)
    if (!strcmp(requirements[i].suite, suite)) return requirements[i].branch;
  return QIM_RELEASE_BRANCH_MAIN;
}

static bool is_runner(const char *test) {
  for (size_t i = 0; i < REQUIREMENT_COUNT; i++)
    if (!strcmp(requirements[i].suite, test)) return true;
  return false;
}

/* Adds `t` to the suite "build/name". */
static void count_in(qim_release_decision *d, const char *build, const char *name,
                     const test_result *t) {
  char suite[sizeof ((qim_error *)0)->suite];
  snprintf(suite, sizeof suite, "%s/%s", build, name);
  evidence_count_test(evidence_for(d, suite, suite_branch(name)), t);
}

/* The labels of test `name` in ctest's json-v1 listing (NULL: not listed). */
static json_t *labels_of(json_t *tests, const char *name) {
  size_t i, j;
  json_t *t, *prop;
  json_array_foreach(tests, i, t) {
    if (!json_is_string(json_object_get(t, "name")) ||
        strcmp(json_string_value(json_object_get(t, "name")), name))
      continue;
    json_array_foreach(json_object_get(t, "properties"), j, prop)
      if (json_is_string(json_object_get(prop, "name")) &&
          !strcmp(json_string_value(json_object_get(prop, "name")), "LABELS"))
        return json_object_get(prop, "value");
    return NULL;
  }
  return NULL;
}

int qim_release_evidence_add(qim_release_decision *d, const char *build, const char *junit,
                             size_t junit_len, const char *tests_json, size_t tests_json_len) {
  if (!d || !build || !*build || strlen(build) > 16 || !junit || !tests_json) return -EINVAL;
  json_t *root = json_loadb(tests_json, tests_json_len, 0, NULL);
  json_t *tests = json_object_get(root, "tests");
  test_result *results;
  size_t n;
  int rc = json_is_array(tests) ? junit_parse(junit, junit_len, &results, &n) : -EINVAL;
  if (rc) {
    json_decref(root);
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    const test_result *t = &results[i];
    size_t k;
    json_t *label;
    json_array_foreach(labels_of(tests, t->name), k, label)
      if (json_is_string(label) && json_string_length(label) < 40)
        count_in(d, build, json_string_value(label), t);
    if (is_runner(t->name)) count_in(d, build, t->name, t);
  }
  qim_free(results);
  json_decref(root);
  return 0;
}

void qim_release_decision_free(qim_release_decision *d) {
  for (size_t i = 0; i < d->evidence_count; i++) qim_free(d->evidence[i].suite);
  qim_free(d->evidence);
  d->evidence = NULL;
  d->evidence_count = 0;
}

/* ---- the gate -------------------------------------------------------------------------------- */

/* Where the findings go: the caller's array, how many there were, the first one's code. */
typedef struct report {
  qim_error *findings;
  size_t cap;
  size_t count;
  int first;
} report;

/* Records a finding and produces its error, so every refusal names each of its reasons. */
static void finding(report *r, int code, qim_release_branch branch, const char *suite) {
  if (r->count < r->cap) {
    qim_error *f = &r->findings[r->count];
    *f = (qim_error){.code = code, .branch = branch};
    snprintf(f->suite, sizeof f->suite, "%s", suite ? suite : "");
  }
  r->count++;
  code = qim_err_raise(code);
  if (!r->first) r->first = code;
}

static const qim_verification_evidence *evidence_of(const qim_release_decision *d,
                                                    const char *suite) {
  for (size_t i = 0; i < d->evidence_count; i++)
    if (!strcmp(d->evidence[i].suite, suite)) return &d->evidence[i];
  return NULL;
}

/* The findings for every suite `d`'s branch requires, in every build. */
static void check_suites(const qim_release_decision *d, report *r) {
  for (size_t q = 0; q < REQUIREMENT_COUNT; q++) {
    if (!built_on(d->branch, requirements[q].branch)) continue;
    for (size_t b = 0; b < qim_release_build_count; b++) {
      char suite[sizeof r->findings->suite];
      snprintf(suite, sizeof suite, "%s/%s", qim_release_builds[b], requirements[q].suite);
      const qim_verification_evidence *e = evidence_of(d, suite);
      if (e && e->skipped)
        finding(r, QIM_E_RELEASE_SKIPPED_VERIFICATION, requirements[q].branch, suite);
      else if (!e || !e->tests || !e->passed)
        finding(r, QIM_E_RELEASE_MISSING_VERIFICATION, requirements[q].branch, suite);
    }
  }
}

int qim_release_check(const qim_release_decision *d, const qim_release_worktree *wt,
                      qim_error *findings, size_t cap, size_t *count) {
  if (!d || !wt || (cap && !findings) || !count || (unsigned)d->branch > 2) return -EINVAL;
  report r = {findings, cap, 0, 0};
  if (wt->dirty) finding(&r, QIM_E_RELEASE_DIRTY_WORKTREE_RISK, d->branch, NULL);
  if (!wt->descends_from_main) finding(&r, QIM_E_RELEASE_DIRECTION_VIOLATION, d->branch, NULL);
  check_suites(d, &r);
  *count = r.count;
  return r.first;
}
