/*
 * err.c — names, wire codes and recording of qim status values (see err.h).
 */
#include "qim/err.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct err_info {
  int code;
  const char *name;
  int ctrl;
  const char *text;
} err_info;

static const err_info table[] = {
#define ROW_(sym, num, name, ctrl, text) {-(num), name, ctrl, text},
    QIM_ERROR_TABLE(ROW_)
#undef ROW_
};

static const err_info *lookup(int code) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].code == code) return &table[i];
  return NULL;
}

const char *qim_err_name(int code) {
  if (code == QIM_OK) return "OK";
  if (code == QIM_AGAIN) return "AGAIN";
  if (code < 0 && code > QIM_E_DOMAIN_FIRST) {
    const char *n = strerrorname_np(-code);
    return n ? n : "Unknown";
  }
  const err_info *e = lookup(code);
  return e ? e->name : "Unknown";
}

int qim_err_ctrl_code(int code) {
  if (code >= 0) return 200;
  const err_info *e = lookup(code);
  return e ? e->ctrl : 500;
}

const char *qim_err_ctrl_text(int code) {
  if (code >= 0) return "ok";
  const err_info *e = lookup(code);
  return e ? e->text : "internal error";
}

/* The error log is opened once; -1 means "not recording". */
static int errlog_fd = -1;
static pthread_once_t errlog_once = PTHREAD_ONCE_INIT;

static void errlog_open(void) {
  const char *path = getenv("QIM_ERRLOG");
  if (path && *path) errlog_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

int qim_err_raise(int code) {
  pthread_once(&errlog_once, errlog_open);
  if (errlog_fd >= 0 && qim_err_is_domain(code)) {
    const err_info *e = lookup(code);
    if (e) {
      char line[128];
      size_t n = strlen(e->name);
      if (n > sizeof line - 2) n = sizeof line - 2;
      memcpy(line, e->name, n);
      line[n++] = '\n';
      /* One write() per line with O_APPEND keeps lines whole across threads and processes. */
      ssize_t w = write(errlog_fd, line, n);
      (void)w;
    }
  }
  return code;
}
