/*
 * release.h — the release gate: whether a commit of a branch may be released, judged on the
 * verification evidence its test runs left (seed 004 §4 ReleaseBranch, VerificationEvidence,
 * ReleaseDecision; §5 BranchReleaseError). docs/release.md says what it demands and why.
 *
 * Evidence comes from ctest: the JUnit file a build's run wrote and the labels of its tests.
 * Each build gives one VerificationEvidence per label ("gcc/unit") and per backend
 * conformance runner ("gcc/conformance_sqlite"). A branch requires its own suites and those
 * of every branch it is built on (a store branch is built on main), in every build.
 *
 * The gate refuses, in this order, with the first finding as its status:
 *   DirtyWorktreeRisk     the worktree has uncommitted changes, so no evidence can be
 *                         tied to the commit;
 *   DirectionViolation    the commit does not contain main's tip: releasing it would move
 *                         main backwards or sideways;
 *   SkippedVerification   a required suite ran, but some of its tests did not;
 *   MissingVerification   a required suite has no evidence for this commit, or failed.
 */
#ifndef QIM_RELEASE_H
#define QIM_RELEASE_H

#include <stdbool.h>
#include <stddef.h>

#include "qim/err.h"
#include "qim/types.h"

/* What the gate knows of the git worktree the evidence was recorded in. */
typedef struct qim_release_worktree {
  bool dirty;              /* tracked changes, or untracked files that are not ignored */
  char dirty_path[256];    /* the first such path, for the report */
  bool descends_from_main; /* main's tip is the commit or one of its ancestors */
} qim_release_worktree;

/* "main", "store-redis", "store-scylla" (the git branch names). */
const char *qim_release_branch_name(qim_release_branch branch);

/* Parses a git branch name as above; -EINVAL for any other. */
int qim_release_branch_parse(const char *name, qim_release_branch *out);

/* The builds every release is verified in: "gcc" and "san" (clang ASan+UBSan). */
extern const char *const qim_release_builds[];
extern const size_t qim_release_build_count;

/*
 * Appends one build's evidence to `d`. `junit` is the XML ctest wrote with --output-junit;
 * `tests_json` is `ctest --show-only=json-v1` of the same build (the labels). A test the
 * JUnit file names but the label list does not counts in no label suite. -EINVAL when
 * either input is malformed (nothing is appended then), -ENOMEM.
 */
int qim_release_evidence_add(qim_release_decision *d, const char *build, const char *junit,
                             size_t junit_len, const char *tests_json, size_t tests_json_len);

/*
 * Judges `d` with worktree facts `wt`. Every finding goes into `findings` (up to `cap`,
 * `*count` set to how many there were in all); returns 0 when there are none, else the
 * first finding's code (QIM_E_RELEASE_*), produced through qim_err_raise.
 */
int qim_release_check(const qim_release_decision *d, const qim_release_worktree *wt,
                      qim_error *findings, size_t cap, size_t *count);

/* Frees the evidence `d` holds (its suites too) and empties it. */
void qim_release_decision_free(qim_release_decision *d);

#endif /* QIM_RELEASE_H */
