/*
 * replay_main.c — runs a fuzz harness without libFuzzer: every file named on the command
 * line, or found (sorted, recursively) in a directory named there, goes once through
 * LLVMFuzzerTestOneInput. The gcc build links each harness with this, so the checked-in
 * corpora (seeds and regression inputs) are replayed by ctest there too.
 *
 * Exit status: 0 when every input ran (a broken invariant aborts inside the harness),
 * 1 when an argument cannot be read or no input was found at all — a replay of nothing
 * proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

/* Reads a whole file into a fresh buffer (exactly `*n` bytes, so ASan sees overreads). */
static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      buf = qim_realloc(buf, cap);
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    qim_free(buf);
    return NULL;
  }
  uint8_t *exact = qim_malloc(len ? len : 1);
  memcpy(exact, buf, len);
  qim_free(buf);
  *n = len;
  return exact;
}

/* The input being replayed, named when it crashes (a broken invariant aborts). */
static const char *current;

static void on_crash(int sig) {
  static const char msg[] = "replay: crashed on input ";
  if (current) {
    ssize_t w = write(2, msg, sizeof msg - 1);
    w = write(2, current, strlen(current));
    w = write(2, "\n", 1);
    (void)w;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays `path` (a file or a directory tree); adds to *count; -1 when unreadable. */
static int replay(const char *path, size_t *count) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    if (!data) return -1;
    current = path;
    LLVMFuzzerTestOneInput(data, n);
    current = NULL;
    qim_free(data);
    (*count)++;
    return 0;
  }
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    names = qim_realloc(names, (n + 1) * sizeof *names);
    if (asprintf(&names[n], "%s/%s", path, e->d_name) < 0) abort();
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (replay(names[i], count) != 0) rc = -1;
    free(names[i]);
  }
  qim_free(names);
  return rc;
}

int main(int argc, char **argv) {
  int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
  LLVMFuzzerInitialize(&argc, &argv);
  size_t count = 0;
  int status = 0;
  for (int i = 1; i < argc; i++) {
    if (replay(argv[i], &count) != 0) {
      fprintf(stderr, "replay: cannot read %s: %s\n", argv[i], strerror(errno));
      status = 1;
    }
  }
  if (count == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    status = 1;
  }
  printf("replay: %zu inputs ran through %s\n", count, argc > 0 ? argv[0] : "harness");
  return status;
}
