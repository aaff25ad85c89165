/*
 * qim-release — the release gate as a command (qim/release.h, docs/release.md): may the
 * commit checked out in REPO be released as BRANCH, on the evidence its test runs left?
 *
 *   qim-release --branch main|store-redis|store-scylla [--repo DIR] [--main REF]
 *               BUILD=DIR [BUILD=DIR ...]          (e.g. gcc=build san=build-san)
 *
 * Each build directory holds what `make test` leaves there: junit.xml (ctest
 * --output-junit), tests.json (ctest --show-only=json-v1: the labels) and junit.commit
 * (the commit tested, with "-dirty" when the tree had changes). A build whose run was for
 * another commit, or on a dirty tree, gives no evidence. The worktree facts come from
 * git: `status --porcelain` (dirty) and `merge-base --is-ancestor REF HEAD` (direction;
 * REF defaults to main).
 *
 * Prints each required suite's evidence and the decision. Exit status: 0 released,
 * 1 refused, 2 usage or a file that cannot be read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "qim/release.h"

#define OUTPUT_MAX (64u << 20) /* a JUnit file of a full run is ~1 MB */

/* Runs argv (no shell), its stdout into *out (NUL-terminated, caller frees); returns the
 * exit status, or -1 when it could not run. */
static int run(char *const argv[], char **out, size_t *len) {
  int fd[2];
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid < 0) return close(fd[0]), close(fd[1]), -1;
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    close(fd[0]);
    close(fd[1]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 4096, n = 0;
  char *buf = qim_malloc(cap), spill[4096];
  ssize_t r;
  for (;;) {
    if (n + 1 == cap && cap < OUTPUT_MAX) buf = qim_realloc(buf, cap *= 2);
    bool full = n + 1 == cap; /* past OUTPUT_MAX: read on and drop, so the child never blocks */
    r = full ? read(fd[0], spill, sizeof spill) : read(fd[0], buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (!full) n += (size_t)r;
  }
  close(fd[0]);
  buf[n] = '\0';
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *out = buf;
  if (len) *len = n;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A whole file into *out (NUL-terminated); false when it cannot be read. */
static bool slurp(const char *dir, const char *name, char **out, size_t *len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t cap = 65536, n = 0, r;
  char *buf = qim_malloc(cap);
  while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0)
    if ((n += r) + 1 == cap && cap < OUTPUT_MAX) buf = qim_realloc(buf, cap *= 2);
  bool ok = !ferror(f);
  fclose(f);
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return ok;
}

/* The worktree facts, and HEAD's commit into head (empty when git cannot say). */
static void read_worktree(const char *repo, const char *main_ref, qim_release_worktree *wt,
                          char head[64]) {
  *wt = (qim_release_worktree){0};
  char *out;
  char *rev[] = {"git", "-C", (char *)repo, "rev-parse", "HEAD", NULL};
  head[0] = '\0';
  if (run(rev, &out, NULL) == 0) sscanf(out, "%63s", head);
  qim_free(out);
  char *status[] = {"git", "-C", (char *)repo, "status", "--porcelain", NULL};
  int rc = run(status, &out, NULL);
  wt->dirty = rc != 0 || out[0] != '\0'; /* a status git cannot give is no proof of clean */
  if (rc == 0 && strlen(out) > 3)
    snprintf(wt->dirty_path, sizeof wt->dirty_path, "%.*s", (int)strcspn(out + 3, "\n"), out + 3);
  qim_free(out);
  char *anc[] = {"git", "-C", (char *)repo, "merge-base", "--is-ancestor", (char *)main_ref, "HEAD", NULL};
  rc = run(anc, &out, NULL);
  wt->descends_from_main = rc == 0;
  if (rc != 0 && rc != 1) fprintf(stderr, "qim-release: git cannot compare %s with HEAD\n", main_ref);
  qim_free(out);
}

/* Adds the evidence of build NAME=DIR when it was recorded for `head` on a clean tree. */
static int add_build(qim_release_decision *d, const char *spec, const char *head) {
  const char *eq = strchr(spec, '=');
  if (!eq || eq == spec || !eq[1]) return -EINVAL;
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)(eq - spec), spec);
  const char *dir = eq + 1;
  char *commit = NULL, *junit = NULL, *tests = NULL;
  size_t cn = 0, jn = 0, tn = 0;
  int rc = 0;
  if (!slurp(dir, "junit.commit", &commit, &cn) || !slurp(dir, "junit.xml", &junit, &jn) ||
      !slurp(dir, "tests.json", &tests, &tn)) {
    printf("  %s: no test run recorded in %s\n", name, dir);
  } else if (strcspn(commit, "\n") != strlen(head) || strncmp(commit, head, strlen(head))) {
    printf("  %s: the run in %s was for %.*s, not %s\n", name, dir, (int)strcspn(commit, "\n"),
           commit, head);
  } else if ((rc = qim_release_evidence_add(d, name, junit, jn, tests, tn))) {
    fprintf(stderr, "qim-release: %s/junit.xml or tests.json is malformed\n", dir);
  }
  qim_free(commit);
  qim_free(junit);
  qim_free(tests);
  return rc;
}

static void print_evidence(const qim_release_decision *d) {
  printf("  %-28s %-12s %6s %7s %10s  %s\n", "suite", "branch", "tests", "skipped", "ms", "result");
  for (size_t i = 0; i < d->evidence_count; i++) {
    const qim_verification_evidence *e = &d->evidence[i];
    printf("  %-28s %-12s %6u %7u %10llu  %s\n", e->suite, qim_release_branch_name(e->branch),
           e->tests, e->skipped, (unsigned long long)e->elapsed_ms,
           e->skipped ? "skipped" : e->passed ? "passed" : "failed");
  }
}

static int usage(void) {
  fprintf(stderr, "usage: qim-release --branch main|store-redis|store-scylla [--repo DIR]"
                  " [--main REF] BUILD=DIR...\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *repo = ".", *main_ref = "main", *branch = NULL;
  int first_build = argc;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--branch")) branch = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--repo")) repo = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--main")) main_ref = argv[++i];
    else if (argv[i][0] != '-') { first_build = i; break; }
    else return usage();
  }
  qim_release_decision d = {0};
  if (qim_release_branch_parse(branch, &d.branch) || first_build == argc) return usage();
  qim_release_worktree wt;
  char head[64];
  read_worktree(repo, main_ref, &wt, head);
  printf("release %s at %s\n", qim_release_branch_name(d.branch), head[0] ? head : "(no commit)");
  for (int i = first_build; i < argc; i++)
    if (add_build(&d, argv[i], head)) {
      qim_release_decision_free(&d);
      return usage();
    }
  print_evidence(&d);
  qim_error findings[64];
  size_t count;
  int rc = qim_release_check(&d, &wt, findings, 64, &count);
  for (size_t i = 0; i < count && i < 64; i++) {
    const qim_error *f = &findings[i];
    printf("  refused: %s", qim_err_name(f->code));
    if (f->code == QIM_E_RELEASE_DIRTY_WORKTREE_RISK && wt.dirty_path[0]) printf(" (%s)", wt.dirty_path);
    if (f->code == QIM_E_RELEASE_DIRECTION_VIOLATION) printf(" (%s is not in HEAD)", main_ref);
    if (f->suite[0]) printf(" {branch: %s, suite: %s}", qim_release_branch_name(f->branch), f->suite);
    printf("\n");
  }
  printf("%s\n", rc ? "decision: refused" : "decision: released");
  qim_release_decision_free(&d);
  return rc ? 1 : 0;
}
