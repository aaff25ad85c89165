/*
 * log.h — structured logging: one line per event, key=value, with a level and the
 * TraceId of the request it belongs to, e.g.
 *   ts=2026-12-02T12:00:00.000Z level=info event=commit.reserved trace=9f.. conv=.. seq=7
 * Lines go to stderr unless a sink is installed (tests capture lines that way).
 *
 * Exact form: "ts=<24-char RFC 3339 UTC> level=<debug|info|warn|error> event=<event>
 * trace=<32 lower-case hex | ->" then, when `fmt` is non-empty, one space and the
 * caller's text. The caller writes "key=value" pairs separated by single spaces; values
 * with spaces should be quoted by the caller. Control bytes (newline, tab, ...) are
 * replaced by '?', so a line is always one line; lines longer than 16 KiB are cut and
 * end in "...". Lines below the minimum level (default info) cost one atomic load.
 * All functions are thread-safe; lines are delivered whole, one at a time, in the
 * order the callers took the internal lock. The sink runs under that lock: it must
 * not log.
 */
#ifndef QIM_LOG_H
#define QIM_LOG_H

#include "qim/types.h"

typedef enum qim_log_level {
  QIM_LOG_DEBUG = 0,
  QIM_LOG_INFO = 1,
  QIM_LOG_WARN = 2,
  QIM_LOG_ERROR = 3,
} qim_log_level;

void qim_log_set_level(qim_log_level min);
/* sink == NULL restores stderr. The sink gets the whole line without a newline. */
void qim_log_set_sink(void (*sink)(const char *line, void *ctx), void *ctx);

/* `trace` may be NULL. `fmt` is printf-style text of further key=value pairs, or NULL
 * when there are none (an empty "" literal trips gcc's -Wformat-zero-length). */
void qim_log(qim_log_level level, const qim_trace_id *trace, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Names the calling thread for perf, top -H and gdb ("qim-" + `role`, cut to the kernel's
 * 15 bytes), so a profile tells the store writer from a gateway loop. */
void qim_log_name_thread(const char *role);

#define QIM_LOGI(trace, event, ...) qim_log(QIM_LOG_INFO, trace, event, __VA_ARGS__)
#define QIM_LOGW(trace, event, ...) qim_log(QIM_LOG_WARN, trace, event, __VA_ARGS__)
#define QIM_LOGE(trace, event, ...) qim_log(QIM_LOG_ERROR, trace, event, __VA_ARGS__)
#define QIM_LOGD(trace, event, ...) qim_log(QIM_LOG_DEBUG, trace, event, __VA_ARGS__)

#endif
