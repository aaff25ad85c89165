/*
 * testsupport.h — shared helpers for qim's C tests (cmocka).
 * Tests include <cmocka.h> through this header, so the cmocka prerequisites
 * (stdarg, stddef, setjmp) come in the right order.
 */
#ifndef QIM_TESTSUPPORT_H
#define QIM_TESTSUPPORT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "qim/log.h"

/* A fresh empty directory under $TMPDIR (or /tmp) for one test; caller frees the path. */
char *qim_test_tmpdir(const char *tag);

/* Removes a directory tree made by qim_test_tmpdir (best effort) and frees `path`. */
void qim_test_rmtree(char *path);

/* Whether the file at `path` holds the bytes of `needle` anywhere (false if it is absent):
 * for tests that check what reached the disk. */
bool qim_test_file_holds(const char *path, const char *needle);

/* The integer in the first column of the first row `sql` gives from the SQLite database at
 * `path` (opened read-only): for tests that check what a store holds. -1 when the file
 * cannot be opened, the query fails or it returns no row. */
int64_t qim_test_sqlite_int(const char *path, const char *sql);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t qim_test_now_ms(void);

/* Sleeps ms milliseconds: a poll's pause, never a way to wait for a result. */
void qim_test_sleep_ms(int ms);

/* Log capture: from qim_test_log_start until qim_test_log_stop, every line qimd's logger
 * writes at `min` or above is kept (from any thread) instead of going to stderr. */
void qim_test_log_start(qim_log_level min);
void qim_test_log_stop(void); /* back to stderr at info; the kept lines are dropped */
/* How many kept lines carry " event=<event> " and every one of `a`, `b` that is not NULL. */
size_t qim_test_log_count(const char *event, const char *a, const char *b);
/* Copies the last kept line carrying " event=<event> " into out (cap bytes, cut to fit);
 * false when there is none. */
bool qim_test_log_last(const char *event, char *out, size_t cap);
/* The number right after `key` (e.g. " ms=") in `line`; the test fails when it is absent. */
double qim_test_log_field(const char *line, const char *key);
/* The largest value of `key` over the kept lines carrying `event`; -1 when there is none. */
double qim_test_log_max(const char *event, const char *key);

/* Polls `cond` (an expression, evaluated again each time) every 2 ms until it holds or ms
 * milliseconds pass; the test then asserts the condition itself, so a timeout fails there
 * with the value it saw. */
#define WAIT_FOR(cond, ms)                                            \
  do {                                                                \
    int64_t end_ = qim_test_now_ms() + (ms);                          \
    while (!(cond) && qim_test_now_ms() < end_) qim_test_sleep_ms(2); \
  } while (0)

#endif
