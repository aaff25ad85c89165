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

/* Polls `cond` (an expression, evaluated again each time) every 2 ms until it holds or ms
 * milliseconds pass; the test then asserts the condition itself, so a timeout fails there
 * with the value it saw. */
#define WAIT_FOR(cond, ms)                                            \
  do {                                                                \
    int64_t end_ = qim_test_now_ms() + (ms);                          \
    while (!(cond) && qim_test_now_ms() < end_) qim_test_sleep_ms(2); \
  } while (0)

#endif
