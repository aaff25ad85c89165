/*
 * runner.c — qim-conformance: runs the storage contract vectors against a backend URL.
 *
 *   qim-conformance [-v] URL PATH...
 *
 * URL selects the backend and its isolated dependency (conf.h: "sqlite:", "sqlite:DIR",
 * "fault:MODE+URL"); each PATH is a vector file or a directory of *.json vectors (a
 * directory must also cover every store call). Every failure is printed with its
 * StorageConformanceError name; the exit status is 0 only when every vector passed.
 */
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "qim/err.h"

static int usage(void) {
  fprintf(stderr, "usage: qim-conformance [-v] URL PATH...\n"
                  "  URL: sqlite: | sqlite:DIR | fault:MODE+URL\n");
  return 2;
}

int main(int argc, char **argv) {
  conf_report rep = {0};
  int i = 1;
  if (i < argc && !strcmp(argv[i], "-v")) rep.verbose = true, i++;
  if (argc - i < 2) return usage();
  const char *url = argv[i++];
  int first = 0;
  for (; i < argc; i++) {
    int rc = conf_run_path(url, argv[i], &rep);
    if (rc && !first) first = rc;
  }
  printf("conformance %s: %d vectors, %d passed, %d %s, %d %s, %d %s\n", url, rep.vectors, rep.passed,
         rep.mismatched, qim_err_name(QIM_E_CONFORMANCE_SEMANTIC_MISMATCH), rep.malformed,
         qim_err_name(QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED), rep.unavailable,
         qim_err_name(QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE));
  return first ? 1 : 0;
}
