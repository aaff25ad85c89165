/*
 * client.c — a Tinode session of qim-bench (see bench.h): connect, {hi} (id "h"),
 * {login scheme:token} (id "l"), then hand every frame to the scenario. Every {ctrl}
 * code >= 300 is counted in the run, whoever asked, so the report has errors by code.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static qim_bench_client *of(qim_bench_conn *c) {
  return c->ud;
}

static void fail_setup(qim_bench_client *c) {
  c->state = QIM_BENCH_CLIENT_ENDED;
  qim_bench_conn_close(&c->conn);
}

static void on_open(qim_bench_conn *conn) {
  qim_bench_client *c = of(conn);
  char frame[256];
  int n = qim_tframe_hi(frame, sizeof frame, "h");
  c->state = QIM_BENCH_CLIENT_HI;
  if (n < 0 || qim_bench_conn_send_text(conn, frame, (size_t)n) < 0) fail_setup(c);
}

/* The session's own replies: hi → login → ready. */
static void on_setup_ctrl(qim_bench_client *c, const qim_tframe_msg *m) {
  if (c->state == QIM_BENCH_CLIENT_HI && strcmp(m->id, "h") == 0) {
    if (m->code != 201 && m->code != 200) {
      fail_setup(c);
      return;
    }
    if (!c->acct) { /* the accounts scenario logs in itself */
      c->state = QIM_BENCH_CLIENT_READY;
      c->ever_ready = true;
      c->cbs->on_ready(c);
      return;
    }
    char frame[1024];
    int n = qim_tframe_login_token(frame, sizeof frame, "l", c->acct->token);
    c->state = QIM_BENCH_CLIENT_LOGIN;
    if (n < 0 || qim_bench_conn_send_text(&c->conn, frame, (size_t)n) < 0) fail_setup(c);
  } else if (c->state == QIM_BENCH_CLIENT_LOGIN && strcmp(m->id, "l") == 0) {
    if (m->code != 200) {
      fail_setup(c);
      return;
    }
    c->state = QIM_BENCH_CLIENT_READY;
    c->ever_ready = true;
    c->cbs->on_ready(c);
  }
}

static void on_text(qim_bench_conn *conn, const char *data, size_t len) {
  qim_bench_client *c = of(conn);
  c->run->last_rx_us = qim_bench_now_us();
  qim_tframe_msg m;
  if (qim_tframe_parse(data, len, &m) != 0) {
    c->run->bad_frames++;
    return;
  }
  if (m.kind == QIM_TFRAME_CTRL) {
    if (m.code >= 300 && m.code < 1000) c->run->ctrl_codes[m.code]++;
    if (c->state != QIM_BENCH_CLIENT_READY) {
      on_setup_ctrl(c, &m);
      return;
    }
    if (c->cbs->on_ctrl) c->cbs->on_ctrl(c, &m);
  } else if (m.kind == QIM_TFRAME_DATA && c->state == QIM_BENCH_CLIENT_READY) {
    if (c->cbs->on_data) c->cbs->on_data(c, &m);
  }
}

static void on_close(qim_bench_conn *conn, qim_bench_end why, int err) {
  qim_bench_client *c = of(conn);
  (void)err;
  qim_bench_run_count_end(c->run, why);
  c->state = QIM_BENCH_CLIENT_ENDED;
  if (c->ever_ready) {
    if (c->cbs->on_closed) c->cbs->on_closed(c);
  } else {
    c->cbs->on_failed(c);
  }
}

static const qim_bench_conn_cbs conn_cbs = {on_open, on_text, on_close};

int qim_bench_client_start(qim_bench_client *c, qim_bench_run *r, uint32_t index,
                           const qim_bench_account *a, const qim_bench_client_cbs *cbs, void *ud) {
  c->run = r;
  c->cbs = cbs;
  c->acct = a;
  c->ud = ud;
  c->index = index;
  c->ever_ready = false;
  c->state = QIM_BENCH_CLIENT_CONNECTING;
  struct sockaddr_in src;
  qim_bench_source(index, &src);
  int rc = qim_bench_conn_start(&c->conn, r->loop, &r->target, &src, &conn_cbs, c);
  if (rc < 0) {
    c->state = QIM_BENCH_CLIENT_ENDED;
    r->start_failures++;
  }
  return rc;
}

int qim_bench_client_send(qim_bench_client *c, const char *frame, int len) {
  if (len < 0) return -ENOSPC;
  return qim_bench_conn_send_text(&c->conn, frame, (size_t)len);
}

void qim_bench_client_close(qim_bench_client *c) {
  if (c->state != QIM_BENCH_CLIENT_NEW) qim_bench_conn_close(&c->conn);
}
