/*
 * log.c — structured log lines (log.h): "ts=… level=… event=… trace=… k=v …".
 *
 * A line is formatted completely before the lock is taken, then handed to the sink (or
 * written to stderr with one write(), newline included) under a mutex, so lines from
 * different threads never interleave and a sink sees them one at a time. Control bytes
 * are replaced by '?' so a value a peer controls cannot forge extra log lines.
 */
#include "qim/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/mem.h"

/* Lines above this are cut and end in "..."; a log line is not a data channel. */
#define LOG_LINE_MAX 16384
#define LOG_STACK_LINE 1024

static _Atomic int min_level = QIM_LOG_INFO;
static pthread_mutex_t sink_mu = PTHREAD_MUTEX_INITIALIZER;
static void (*sink_fn)(const char *line, void *ctx);
static void *sink_ctx;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void qim_log_set_level(qim_log_level min) { atomic_store(&min_level, (int)min); }

void qim_log_set_sink(void (*sink)(const char *line, void *ctx), void *ctx) {
  pthread_mutex_lock(&sink_mu);
  sink_fn = sink;
  sink_ctx = ctx;
  pthread_mutex_unlock(&sink_mu);
}

/* "ts=… level=… event=… trace=…" into buf (which has room for it); returns its length. */
static size_t format_head(char *buf, size_t cap, qim_log_level level, const qim_trace_id *trace,
                          const char *event) {
  char ts[QIM_TIMESTAMP_CAP], hex[33] = "-";
  qim_timestamp_format(qim_clock_wall_ms(qim_clock_system()), ts);
  if (trace) qim_hex_encode(trace->b, sizeof trace->b, hex, sizeof hex);
  unsigned li = (unsigned)level < 4 ? (unsigned)level : 3;
  int n = snprintf(buf, cap, "ts=%s level=%s event=%s trace=%s", ts, level_names[li], event ? event : "-", hex);
  if (n < 0) return 0;
  return (size_t)n < cap ? (size_t)n : cap - 1;
}

static void emit(char *line, size_t len) {
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) line[i] = '?';
  pthread_mutex_lock(&sink_mu);
  if (sink_fn) {
    line[len] = '\0';
    sink_fn(line, sink_ctx);
  } else {
    line[len] = '\n'; /* the buffer always has a spare byte after the text */
    ssize_t w = write(STDERR_FILENO, line, len + 1);
    (void)w;
  }
  pthread_mutex_unlock(&sink_mu);
}

/* Appends " " + the formatted pairs at buf[len]; returns the new length (cut to cap - 2). */
static size_t format_body(char *buf, size_t cap, size_t len, const char *fmt, va_list ap) {
  if (!fmt || !*fmt || len + 2 >= cap) return len;
  buf[len++] = ' ';
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  if (n <= 0) return len - 1; /* nothing (or an error): no dangling space */
  return len + (size_t)n < cap - 1 ? len + (size_t)n : cap - 2;
}

void qim_log(qim_log_level level, const qim_trace_id *trace, const char *event, const char *fmt, ...) {
  if ((int)level < atomic_load(&min_level)) return;
  char stack[LOG_STACK_LINE];
  size_t head = format_head(stack, sizeof stack, level, trace, event);
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  size_t len = format_body(stack, sizeof stack, head, fmt, ap);
  if (len < sizeof stack - 2) {
    emit(stack, len);
  } else { /* did not fit: format again into a heap line of the maximum size */
    char *big = qim_malloc(LOG_LINE_MAX);
    memcpy(big, stack, head);
    len = format_body(big, LOG_LINE_MAX, head, fmt, ap2);
    if (len == LOG_LINE_MAX - 2) memcpy(big + len - 3, "...", 3);
    emit(big, len);
    qim_free(big);
  }
  va_end(ap2);
  va_end(ap);
}

void qim_log_name_thread(const char *role) {
  char name[16]; /* the kernel keeps 15 bytes and the NUL */
  snprintf(name, sizeof name, "qim-%s", role);
  (void)pthread_setname_np(pthread_self(), name);
}
