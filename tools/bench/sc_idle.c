/*
 * sc_idle.c — the idle scenario of qim-bench: --users N authenticated connections ({hi} +
 * {login token}) held open for --duration seconds, to measure what an idle connection
 * costs the server. The server's RSS is sampled before the first connection, once all
 * are logged in (after a 1 s settle) and at the end; the figure is the growth divided by
 * the connections. /proc/net/sockstat and the kernel slab are sampled alongside; they
 * count both ends of every loopback connection and the whole machine, so they are context,
 * not the kernel's per-socket cost (bench/sock_cost.c measures that).
 *
 * Clients bind to 127.0.0.(2 + i/20000); accounts are reused round-robin when there are
 * fewer accounts than connections (Tinode allows several sessions per user).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "qim/mem.h"

typedef struct idle {
  qim_bench_run run;
  const qim_bench_opts *o;
  qim_bench_account *accts;
  size_t nacct;
  qim_bench_client *clients;
  uint32_t n, ready, closed_early;
  qim_bench_pacer pacer;
  qim_proc_sample base;
  bool have_base, done;
  qim_sock_sample sock_a, sock_b;
  bool have_sock;
  uint64_t t_connect_us, t_ready_us;
  uv_timer_t tick;
  int step; /* 0 settling, 1 holding */
} idle;

static void finish(idle *s);

static void on_ready(qim_bench_client *c) {
  idle *s = c->ud;
  s->ready++;
  qim_bench_pacer_done(&s->pacer, true);
}

static void on_failed(qim_bench_client *c) {
  qim_bench_pacer_done(&((idle *)c->ud)->pacer, false);
}

static void on_closed(qim_bench_client *c) {
  idle *s = c->ud;
  if (!s->done) s->closed_early++; /* e.g. an idle timeout on the server: reported */
}

static const qim_bench_client_cbs cbs = {on_ready, on_failed, NULL, NULL, on_closed};

static int issue(void *ud, size_t i) {
  idle *s = ud;
  return qim_bench_client_start(&s->clients[i], &s->run, (uint32_t)i, &s->accts[i % s->nacct], &cbs,
                                s);
}

static void tick_cb(uv_timer_t *t) {
  idle *s = t->data;
  if (s->step == 0) { /* settled: the measured hold begins */
    s->step = 1;
    qim_bench_run_mark_start(&s->run);
    s->have_sock = qim_sock_sample_read(&s->sock_a) == 0;
    uv_timer_start(&s->tick, tick_cb, (uint64_t)(s->o->duration_s * 1000), 0);
    return;
  }
  finish(s);
}

static void all_started(void *ud) {
  idle *s = ud;
  s->t_ready_us = qim_bench_now_us();
  if (s->pacer.failed) {
    qim_bench_run_fail(&s->run, "connections failed to log in");
    return;
  }
  qim_bench_run_watchdog(&s->run, s->o->duration_s + 15.0, "the hold overran its time");
  uv_timer_start(&s->tick, tick_cb, 1000, 0);
}

static void report(idle *s) {
  qim_bench_run *r = &s->run;
  qim_bench_run_mark_end(r);
  if (s->run.marked_start && s->have_sock) s->have_sock = qim_sock_sample_read(&s->sock_b) == 0;
  qim_bench_kv(r, "conns", "%u", s->n);
  qim_bench_kv(r, "ready", "%u", s->ready);
  qim_bench_kv(r, "users", "%zu", s->nacct < s->n ? s->nacct : (size_t)s->n);
  qim_bench_kv(r, "closed_early", "%u", s->closed_early);
  qim_bench_kv(r, "hold_s", "%.1f", s->o->duration_s);
  double setup_s = (double)(s->t_ready_us - s->t_connect_us) / 1e6;
  qim_bench_kv(r, "setup_s", "%.2f", setup_s);
  char human[1024];
  int len =
      snprintf(human, sizeof human,
               "idle: %u of %u connections logged in within %.2f s and held %.1f s; %u closed "
               "early\n",
               s->ready, s->n, setup_s, s->o->duration_s, s->closed_early);
  if (s->have_base && r->srv_ok && s->ready) {
    double per = ((double)r->srv_b.rss_kb - (double)s->base.rss_kb) * 1024.0 / s->ready;
    qim_bench_kv(r, "server_rss_base_kb", "%llu", (unsigned long long)s->base.rss_kb);
    qim_bench_kv(r, "rss_per_conn_bytes", "%.0f", per);
    len += snprintf(human + len, sizeof human - (size_t)len,
                    "  server RSS %llu kB before, %llu kB with the connections: %.0f bytes per "
                    "idle connection\n",
                    (unsigned long long)s->base.rss_kb, (unsigned long long)r->srv_b.rss_kb, per);
  }
  if (s->have_sock && r->marked_start) {
    qim_bench_kv(r, "tcp_inuse", "%llu", (unsigned long long)s->sock_b.tcp_inuse);
    qim_bench_kv(r, "tcp_mem_pages", "%llu", (unsigned long long)s->sock_b.tcp_mem_pages);
    qim_bench_kv(r, "slab_kb", "%llu", (unsigned long long)s->sock_b.slab_kb);
  }
  (void)len;
  qim_bench_report(r, human);
}

static void close_all(idle *s) {
  uv_close((uv_handle_t *)&s->tick, NULL);
  for (uint32_t i = 0; i < s->n; i++) qim_bench_client_close(&s->clients[i]);
  qim_bench_run_watchdog_stop(&s->run);
  uv_close((uv_handle_t *)&s->run.watchdog, NULL);
}

static void finish(idle *s) {
  if (s->done) return;
  s->done = true;
  report(s);
  close_all(s);
}

static void on_fail(void *ud) {
  finish(ud);
}

int qim_bench_idle(const qim_bench_opts *o) {
  if (o->users < 1 || o->users > QIM_BENCH_MAX_CONNS) {
    fprintf(stderr, "qim-bench: idle needs 1 <= --users <= %d\n", QIM_BENCH_MAX_CONNS);
    return 2;
  }
  idle *s = qim_calloc(1, sizeof *s);
  s->o = o;
  s->n = o->users;
  int rc = qim_bench_accounts_load(o->accounts_file, &s->accts, &s->nacct);
  if (rc || s->nacct == 0 || qim_bench_run_init(&s->run, o)) {
    fprintf(stderr, "qim-bench: no accounts in %s%s%s\n", o->accounts_file, rc ? ": " : "",
            rc == -EINVAL ? "malformed line"
            : rc          ? strerror(-rc)
                          : "");
    qim_bench_accounts_free(s->accts, s->nacct);
    qim_free(s);
    return 2;
  }
  s->clients = qim_calloc(s->n, sizeof *s->clients);
  uv_timer_init(s->run.loop, &s->tick);
  s->tick.data = s;
  s->run.on_fail = on_fail;
  s->run.fail_ud = s;
  s->have_base = o->server_pid > 0 && qim_proc_sample_read(o->server_pid, &s->base) == 0;
  s->t_connect_us = qim_bench_now_us();
  qim_bench_run_watchdog(&s->run, o->setup_timeout_s,
                         "setup did not finish within --setup-timeout");
  qim_bench_pacer_start(&s->pacer, s->n, o->concurrency, issue, all_started, s);
  int status = qim_bench_run_loop(&s->run);
  qim_bench_run_free(&s->run);
  qim_bench_accounts_free(s->accts, s->nacct);
  qim_free(s->clients);
  qim_free(s);
  return status;
}
