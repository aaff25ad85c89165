/*
 * server.c — qimd's lifecycle: data directory, main loop, signals, the node, ready and
 * stop log lines. The main loop holds only the signal handles: the gateway runs its own
 * I/O loops and the pipeline its worker threads (node.c). A signal closes the handles,
 * uv_run returns, and the node is closed in reverse order of opening.
 */
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qim/err.h"
#include "qim/log.h"

const char *qim_server_log_quote(const char *v, char *out, size_t cap) {
  bool plain = *v != '\0' && strcspn(v, " \t\n\"=\\") == strlen(v);
  size_t o = 0;
  if (cap == 0) return out;
  if (plain) {
    snprintf(out, cap, "%s", v);
    return out;
  }
  out[o++] = '"';
  for (; *v && o + 3 < cap; v++) {
    if (*v == '"' || *v == '\\') out[o++] = '\\';
    out[o++] = *v == '\n' ? ' ' : *v;
  }
  if (o + 1 < cap) out[o++] = '"';
  out[o < cap ? o : cap - 1] = '\0';
  return out;
}

/* mkdir -p with mode 0700: the data directory holds every user's messages. */
static int make_dirs(const char *path) {
  char p[QIM_CONFIG_PATH_CAP];
  struct stat st;
  snprintf(p, sizeof p, "%s", path);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
    *q = '/';
  }
  if (mkdir(p, 0700) < 0 && errno != EEXIST) return -errno;
  if (stat(p, &st) < 0) return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static void on_signal(uv_signal_t *h, int signum) {
  qim_server *s = h->data;
  if (s->stop_signal) return;
  s->stop_signal = signum;
  QIM_LOGI(NULL, "server.stopping", "signal=%s", signum == SIGINT ? "SIGINT" : "SIGTERM");
  /* Closing the last handles lets uv_run return; the gateway will drain here first. */
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
}

static int fail_step(qim_server *s, const char *step, int rc) {
  char data[QIM_CONFIG_PATH_CAP + 8];
  QIM_LOGE(NULL, "server.start_failed", "step=%s error=%s data=%s", step, qim_err_name(rc),
           qim_server_log_quote(s->cfg->data_dir, data, sizeof data));
  qim_server_close(s);
  return rc;
}

static int start_signal(qim_server *s, uv_signal_t *h, int signum) {
  int rc = uv_signal_init(&s->loop, h);
  if (rc < 0) return rc;
  h->data = s;
  return uv_signal_start(h, on_signal, signum);
}

int qim_server_init(qim_server *s, const qim_config *cfg) {
  memset(s, 0, sizeof *s);
  s->cfg = cfg;
  int rc = make_dirs(cfg->data_dir);
  if (rc < 0) return fail_step(s, "data_dir", rc);
  rc = uv_loop_init(&s->loop);
  if (rc < 0) return fail_step(s, "loop", rc);
  s->loop_open = true;
  if ((rc = start_signal(s, &s->sigint, SIGINT)) < 0 ||
      (rc = start_signal(s, &s->sigterm, SIGTERM)) < 0)
    return fail_step(s, "signals", rc);
  if ((rc = qim_node_open(&s->node, cfg, NULL)) != 0) {
    qim_server_close(s); /* node_open logged its step */
    return rc;
  }
  s->node_open = true;
  return 0;
}

int qim_server_run(qim_server *s) {
  const qim_config *c = s->cfg;
  char data[QIM_CONFIG_PATH_CAP + 8], store[QIM_CONFIG_PATH_CAP + 8];
  QIM_LOGI(NULL, "server.ready",
           c->listen_host[0] && strchr(c->listen_host, ':')
               ? "listen=[%s]:%u data=%s store=%s node_id=%u io_threads=%u shards=%u lanes=%u pid=%ld"
               : "listen=%s:%u data=%s store=%s node_id=%u io_threads=%u shards=%u lanes=%u pid=%ld",
           c->listen_host, qim_node_port(&s->node), qim_server_log_quote(c->data_dir, data, sizeof data),
           qim_server_log_quote(c->store_url, store, sizeof store), c->node_id, c->io_threads,
           s->node.shards.shard_count, s->node.shards.lanes_per_shard, (long)getpid());
  int rc = uv_run(&s->loop, UV_RUN_DEFAULT);
  (void)rc; /* non-zero only if handles remain, which close() below reports */
  qim_node_close(&s->node); /* gateway first: no new requests; then the pipeline */
  s->node_open = false;
  QIM_LOGI(NULL, "server.stopped", "signal=%s", s->stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}

static void close_one(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

void qim_server_close(qim_server *s) {
  if (s->node_open) qim_node_close(&s->node);
  s->node_open = false;
  if (!s->loop_open) return;
  /* Close whatever is still open (after a failed init) and let the close callbacks run. */
  uv_walk(&s->loop, close_one, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&s->loop) != 0)
    QIM_LOGE(NULL, "server.close_failed", "error=%s", "EBUSY");
  s->loop_open = false;
}
