/*
 * sc_echo.c — the echo scenario of qim-bench: the machine's WebSocket frames/s baseline.
 * --users C connections each keep --window W text frames of --size bytes in flight against
 * a server that echoes them (bench/ws_echo.c); every echo triggers the next frame, so this
 * measures how many frames per second a minimal server and this client move through the
 * loopback on this machine. With --probe it sends Tinode's network probe "1" and expects
 * "0", which qimd's transport answers without touching the protocol layers.
 *
 * Round trips are timed from a per-connection ring of send times (echoes come back in
 * order on one connection). Frames/s counts echoes arriving inside the measured window.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "qim/mem.h"

#define MAX_WINDOW 1024

typedef struct echo echo;

typedef struct econn {
  qim_bench_conn conn;
  echo *e;
  uint64_t ring[MAX_WINDOW];
  uint32_t head, count; /* oldest in-flight frame and how many */
  bool open;
} econn;

struct echo {
  qim_bench_run run;
  const qim_bench_opts *o;
  econn *conns;
  uint32_t n, window;
  qim_bench_pacer pacer;
  char *payload;
  size_t payload_len;
  uint64_t begin_us, measure_from_us, until_us;
  uint64_t sent, echoed, measured, mismatched;
  qim_hist rtt;
  uv_timer_t tick;
  int step; /* 0 connecting, 1 running, 2 draining, 3 done */
};

static void send_next(econn *c, uint64_t now) {
  echo *e = c->e;
  if (now >= e->until_us || e->sent >= e->o->max_messages || c->count >= e->window) return;
  if (qim_bench_conn_send_text(&c->conn, e->payload, e->payload_len) != 0) return;
  c->ring[(c->head + c->count) % MAX_WINDOW] = now;
  c->count++;
  e->sent++;
}

static void on_open(qim_bench_conn *conn) {
  econn *c = conn->ud;
  c->open = true;
  qim_bench_pacer_done(&c->e->pacer, true);
}

static void on_text(qim_bench_conn *conn, const char *data, size_t len) {
  econn *c = conn->ud;
  echo *e = c->e;
  uint64_t now = qim_bench_now_us();
  bool ok = e->o->probe ? len == 1 && data[0] == '0' : len == e->payload_len;
  if (!ok || c->count == 0) {
    e->mismatched++;
    return;
  }
  uint64_t sent_at = c->ring[c->head];
  c->head = (c->head + 1) % MAX_WINDOW;
  c->count--;
  e->echoed++;
  if (now >= e->measure_from_us && now < e->until_us) {
    e->measured++;
    qim_hist_record(&e->rtt, now - sent_at);
  }
  send_next(c, now);
}

static void on_close(qim_bench_conn *conn, qim_bench_end why, int err) {
  econn *c = conn->ud;
  (void)err;
  qim_bench_run_count_end(&c->e->run, why);
  bool was_open = c->open;
  c->open = false;
  if (!was_open)
    qim_bench_pacer_done(&c->e->pacer, false);
  else if (c->e->step < 3)
    qim_bench_run_fail(&c->e->run, "a connection closed during the run");
}

static const qim_bench_conn_cbs cbs = {on_open, on_text, on_close};

static int issue(void *ud, size_t i) {
  echo *e = ud;
  econn *c = &e->conns[i];
  c->e = e;
  struct sockaddr_in src;
  qim_bench_source((uint32_t)i, &src);
  int rc = qim_bench_conn_start(&c->conn, e->run.loop, &e->run.target, &src, &cbs, c);
  if (rc < 0) e->run.start_failures++;
  return rc;
}

static void finish(echo *e);

static void tick_cb(uv_timer_t *t) {
  echo *e = t->data;
  uint64_t now = qim_bench_now_us();
  if (e->step == 1 && !e->run.marked_start && now >= e->measure_from_us)
    qim_bench_run_mark_start(&e->run);
  if (e->step == 1 && now >= e->until_us) {
    qim_bench_run_mark_end(&e->run);
    e->step = 2;
  }
  bool in_flight = false;
  for (uint32_t i = 0; i < e->n && !in_flight; i++) in_flight = e->conns[i].count > 0;
  if (e->step == 2 && (!in_flight || now >= e->until_us + 2000000)) {
    finish(e);
    return;
  }
  uv_timer_start(&e->tick, tick_cb, 20, 0);
}

static void all_open(void *ud) {
  echo *e = ud;
  if (e->pacer.failed) {
    qim_bench_run_fail(&e->run, "connections failed to open");
    return;
  }
  e->step = 1;
  uint64_t now = qim_bench_now_us();
  e->begin_us = now;
  e->measure_from_us = now + (uint64_t)(e->o->warmup_s * 1e6);
  e->until_us = e->measure_from_us + (uint64_t)(e->o->duration_s * 1e6);
  qim_bench_run_watchdog(&e->run, e->o->warmup_s + e->o->duration_s + 10.0,
                         "the measured run overran its time");
  for (uint32_t i = 0; i < e->n; i++)
    for (uint32_t w = 0; w < e->window; w++) send_next(&e->conns[i], now);
  uv_timer_start(&e->tick, tick_cb, 20, 0);
}

static void report(echo *e) {
  qim_bench_run *r = &e->run;
  double d = e->o->duration_s;
  qim_bench_kv(r, "conns", "%u", e->n);
  qim_bench_kv(r, "window", "%u", e->window);
  qim_bench_kv(r, "frame_bytes", "%zu", e->payload_len);
  qim_bench_kv(r, "probe", "%d", e->o->probe ? 1 : 0);
  qim_bench_kv(r, "duration_s", "%.1f", d);
  qim_bench_kv(r, "sent", "%llu", (unsigned long long)e->sent);
  qim_bench_kv(r, "echoed", "%llu", (unsigned long long)e->echoed);
  qim_bench_kv(r, "mismatched", "%llu", (unsigned long long)e->mismatched);
  qim_bench_kv(r, "frames_per_s", "%.0f", (double)e->measured / d);
  qim_bench_kv_hist(r, "rtt", &e->rtt);
  char human[512];
  snprintf(human, sizeof human,
           "echo: %u connections x %u frames in flight, %zu-byte %s frames, %.1f s: %.0f echoed "
           "frames/s\n  round trip ms: p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
           e->n, e->window, e->payload_len, e->o->probe ? "probe" : "text", d,
           (double)e->measured / d, qim_hist_quantile(&e->rtt, .5) / 1e3,
           qim_hist_quantile(&e->rtt, .9) / 1e3, qim_hist_quantile(&e->rtt, .99) / 1e3,
           qim_hist_quantile(&e->rtt, 1) / 1e3);
  qim_bench_report(r, human);
}

static void finish(echo *e) {
  if (e->step == 3) return;
  e->step = 3;
  report(e);
  uv_close((uv_handle_t *)&e->tick, NULL);
  for (uint32_t i = 0; i < e->n; i++)
    if (e->conns[i].e) qim_bench_conn_close(&e->conns[i].conn);
  qim_bench_run_watchdog_stop(&e->run);
  uv_close((uv_handle_t *)&e->run.watchdog, NULL);
}

static void on_fail(void *ud) {
  finish(ud);
}

int qim_bench_echo(const qim_bench_opts *o) {
  if (o->users < 1 || o->users > QIM_BENCH_MAX_CONNS || o->window < 1 || o->window > MAX_WINDOW) {
    fprintf(stderr, "qim-bench: echo needs 1 <= --users <= %d and 1 <= --window <= %d\n",
            QIM_BENCH_MAX_CONNS, MAX_WINDOW);
    return 2;
  }
  echo *e = qim_calloc(1, sizeof *e);
  e->o = o;
  e->n = o->users;
  e->window = o->window;
  if (qim_bench_run_init(&e->run, o)) {
    qim_free(e);
    return 2;
  }
  e->payload_len = o->probe ? 1 : (o->content_size ? o->content_size : 1);
  e->payload = qim_malloc(e->payload_len);
  memset(e->payload, o->probe ? '1' : 'x', e->payload_len);
  e->conns = qim_calloc(e->n, sizeof *e->conns);
  qim_hist_init(&e->rtt);
  uv_timer_init(e->run.loop, &e->tick);
  e->tick.data = e;
  e->run.on_fail = on_fail;
  e->run.fail_ud = e;
  qim_bench_run_watchdog(&e->run, o->setup_timeout_s,
                         "setup did not finish within --setup-timeout");
  qim_bench_pacer_start(&e->pacer, e->n, o->concurrency, issue, all_open, e);
  int status = qim_bench_run_loop(&e->run);
  qim_bench_run_free(&e->run);
  qim_free(e->payload);
  qim_free(e->conns);
  qim_free(e);
  return status;
}
