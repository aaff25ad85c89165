/*
 * testsupport.c — temporary directories and other helpers shared by C tests.
 */
#include "testsupport.h"

#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

bool qim_test_file_holds(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t cap = 1 << 20, n = 0, got;
  char *buf = malloc(cap);
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  bool found = memmem(buf, n, needle, strlen(needle)) != NULL;
  free(buf);
  return found;
}

int64_t qim_test_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void qim_test_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int64_t qim_test_sqlite_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/* ---- log capture ------------------------------------------------------------------------ */

static struct {
  pthread_mutex_t mu;
  char **lines;
  size_t n, cap;
} captured = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void capture_sink(const char *line, void *ctx) {
  (void)ctx;
  pthread_mutex_lock(&captured.mu);
  if (captured.n == captured.cap) {
    captured.cap = captured.cap ? captured.cap * 2 : 256;
    captured.lines = realloc(captured.lines, captured.cap * sizeof *captured.lines);
    if (!captured.lines) abort();
  }
  captured.lines[captured.n] = strdup(line);
  if (!captured.lines[captured.n++]) abort();
  pthread_mutex_unlock(&captured.mu);
}

void qim_test_log_start(qim_log_level min) {
  qim_log_set_level(min);
  qim_log_set_sink(capture_sink, NULL);
}

void qim_test_log_stop(void) {
  qim_log_set_sink(NULL, NULL);
  qim_log_set_level(QIM_LOG_INFO);
  pthread_mutex_lock(&captured.mu);
  for (size_t i = 0; i < captured.n; i++) free(captured.lines[i]);
  free(captured.lines);
  captured.lines = NULL;
  captured.n = captured.cap = 0;
  pthread_mutex_unlock(&captured.mu);
}

static bool line_is(const char *line, const char *event) {
  char ev[128];
  snprintf(ev, sizeof ev, " event=%s ", event);
  return strstr(line, ev) != NULL;
}

size_t qim_test_log_count(const char *event, const char *a, const char *b) {
  size_t n = 0;
  pthread_mutex_lock(&captured.mu);
  for (size_t i = 0; i < captured.n; i++) {
    const char *l = captured.lines[i];
    if (line_is(l, event) && (!a || strstr(l, a)) && (!b || strstr(l, b))) n++;
  }
  pthread_mutex_unlock(&captured.mu);
  return n;
}

static bool number_after(const char *line, const char *key, double *out) {
  const char *p = strstr(line, key);
  if (p) *out = strtod(p + strlen(key), NULL);
  return p != NULL;
}

double qim_test_log_field(const char *line, const char *key) {
  double v = 0;
  assert_true(number_after(line, key, &v));
  return v;
}

double qim_test_log_max(const char *event, const char *key) {
  double max = -1, v;
  pthread_mutex_lock(&captured.mu); /* no assert while held: a failed one would keep it */
  for (size_t i = 0; i < captured.n; i++)
    if (line_is(captured.lines[i], event) && number_after(captured.lines[i], key, &v) && v > max)
      max = v;
  pthread_mutex_unlock(&captured.mu);
  return max;
}

bool qim_test_log_last(const char *event, char *out, size_t cap) {
  bool found = false;
  pthread_mutex_lock(&captured.mu);
  for (size_t i = captured.n; i-- > 0 && !found;)
    if (line_is(captured.lines[i], event)) {
      snprintf(out, cap, "%s", captured.lines[i]);
      found = true;
    }
  pthread_mutex_unlock(&captured.mu);
  return found;
}
