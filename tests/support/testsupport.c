/*
 * testsupport.c — temporary directories and other helpers shared by C tests.
 */
#include "testsupport.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *qim_test_tmpdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *path = NULL;
  if (asprintf(&path, "%s/qim-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0) abort();
  if (!mkdtemp(path)) abort();
  return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

void qim_test_rmtree(char *path) {
  if (!path) return;
  nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(path);
}
