/*
 * run.c — the machinery every qim-bench scenario shares (see bench.h): the loop and
 * target, source addresses, the accounts file, the watchdog that bounds every run in
 * time, /proc sampling of the server, the key=value report, and the setup pacer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"
#include "qim/mem.h"

uint64_t qim_bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void qim_bench_source(uint32_t i, struct sockaddr_in *out) {
  memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_addr.s_addr = htonl((127u << 24) | (2u + i / QIM_BENCH_CONNS_PER_SOURCE));
}

/* ---- accounts file ----------------------------------------------------------------------------
 */

void qim_bench_accounts_free(qim_bench_account *a, size_t n) {
  if (!a) return;
  for (size_t i = 0; i < n; i++) {
    qim_free(a[i].login);
    qim_free(a[i].uid);
    qim_free(a[i].token);
  }
  qim_free(a);
}

/* Splits one line into its three fields; false if it is not exactly three. */
static bool split3(char *line, char *f[3]) {
  int k = 0;
  for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t;
       t = strtok_r(NULL, " \t\r\n", &save)) {
    if (k == 3) return false;
    f[k++] = t;
  }
  return k == 3;
}

int qim_bench_accounts_load(const char *path, qim_bench_account **out, size_t *n) {
  FILE *f = fopen(path, "re");
  if (!f) return -errno;
  qim_bench_account *a = NULL;
  size_t len = 0, cap = 0, lineno = 0;
  char line[2048];
  int rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0') continue;
    char *fld[3];
    if (!split3(line, fld)) {
      rc = -EINVAL;
      break;
    }
    if (len == cap) {
      cap = cap ? 2 * cap : 256;
      a = qim_realloc(a, cap * sizeof *a);
    }
    a[len++] = (qim_bench_account){qim_strdup(fld[0]), qim_strdup(fld[1]), qim_strdup(fld[2])};
  }
  fclose(f);
  if (rc) {
    qim_bench_accounts_free(a, len);
    *n = lineno;
    return rc;
  }
  *out = a;
  *n = len;
  return 0;
}

/* ---- the run ----------------------------------------------------------------------------------
 */

static double self_cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
         (double)u.ru_stime.tv_usec / 1e6;
}

int qim_bench_run_init(qim_bench_run *r, const qim_bench_opts *o) {
  memset(r, 0, sizeof *r);
  r->o = o;
  r->loop = qim_malloc(sizeof *r->loop);
  int rc = uv_loop_init(r->loop);
  if (rc < 0) {
    qim_free(r->loop);
    return rc;
  }
  qim_bench_target *t = &r->target;
  t->server.sin_family = AF_INET;
  t->server.sin_port = htons(o->port);
  inet_pton(AF_INET, o->host, &t->server.sin_addr);
  snprintf(t->host, sizeof t->host, "%s:%u", o->host, (unsigned)o->port);
  snprintf(t->path, sizeof t->path, "/v0/channels?apikey=%s", o->apikey);
  t->max_message = 16u << 20;
  uv_timer_init(r->loop, &r->watchdog);
  r->watchdog.data = r;
  r->t0_us = qim_bench_now_us();
  return 0;
}

static void on_walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int qim_bench_run_loop(qim_bench_run *r) {
  uv_run(r->loop, UV_RUN_DEFAULT);
  /* A failed run stopped the loop with handles open: close them all, let the callbacks run. */
  uv_walk(r->loop, on_walk_close, NULL);
  uv_run(r->loop, UV_RUN_DEFAULT);
  return r->failure ? 1 : 0;
}

void qim_bench_run_fail(qim_bench_run *r, const char *why) {
  if (r->failure) return;
  r->failure = why;
  fprintf(stderr, "qim-bench: %s\n", why);
  if (r->on_fail)
    r->on_fail(r->fail_ud);
  else
    uv_stop(r->loop);
}

static void watchdog_cb(uv_timer_t *t) {
  qim_bench_run *r = t->data;
  qim_bench_run_fail(r, r->watchdog_why ? r->watchdog_why : "watchdog expired");
}

void qim_bench_run_watchdog(qim_bench_run *r, double seconds, const char *why) {
  if (seconds > QIM_BENCH_MAX_SECONDS) seconds = QIM_BENCH_MAX_SECONDS;
  r->watchdog_why = why;
  uv_timer_start(&r->watchdog, watchdog_cb, (uint64_t)(seconds * 1000.0), 0);
}

void qim_bench_run_watchdog_stop(qim_bench_run *r) {
  uv_timer_stop(&r->watchdog);
}

void qim_bench_run_mark_start(qim_bench_run *r) {
  r->marked_start = true;
  r->self_cpu_a = self_cpu_s();
  r->machine_ok = qim_machine_sample_read(&r->machine_a) == 0;
  r->srv_ok = r->o->server_pid > 0 && qim_proc_sample_read(r->o->server_pid, &r->srv_a) == 0;
  if (r->srv_ok) {
    if (!r->srv_ta) r->srv_ta = qim_calloc(1, sizeof *r->srv_ta);
    qim_proc_threads_read(r->o->server_pid, r->srv_ta);
  }
}

void qim_bench_run_mark_end(qim_bench_run *r) {
  if (!r->marked_start || r->marked_end) return;
  r->marked_end = true;
  if (r->machine_ok) r->machine_ok = qim_machine_sample_read(&r->machine_b) == 0;
  if (r->srv_ok) r->srv_ok = qim_proc_sample_read(r->o->server_pid, &r->srv_b) == 0;
  if (r->srv_ok) {
    if (!r->srv_tb) r->srv_tb = qim_calloc(1, sizeof *r->srv_tb);
    qim_proc_threads_read(r->o->server_pid, r->srv_tb);
  }
  double cpu = self_cpu_s() - r->self_cpu_a;
  double span = r->srv_ok ? r->srv_b.at_s - r->srv_a.at_s : 0;
  r->self_cpu_pct = span > 0 ? 100.0 * cpu / span : 0;
}

void qim_bench_run_count_end(qim_bench_run *r, qim_bench_end why) {
  if (why != QIM_BENCH_END_LOCAL && (unsigned)why < 8) r->ends[why]++;
}

void qim_bench_run_free(qim_bench_run *r) {
  qim_free(r->srv_ta);
  qim_free(r->srv_tb);
  r->srv_ta = r->srv_tb = NULL;
  if (!r->loop) return;
  uv_loop_close(r->loop);
  qim_free(r->loop);
  r->loop = NULL;
}

/* ---- report -----------------------------------------------------------------------------------
 */

void qim_bench_kv(qim_bench_run *r, const char *key, const char *fmt, ...) {
  size_t cap = sizeof r->kv;
  if (r->kv_len + 2 >= cap) return;
  int n = snprintf(r->kv + r->kv_len, cap - r->kv_len, "%s%s=", r->kv_len ? " " : "", key);
  if (n < 0 || (size_t)n >= cap - r->kv_len) return;
  r->kv_len += (size_t)n;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(r->kv + r->kv_len, cap - r->kv_len, fmt, ap);
  va_end(ap);
  if (n > 0) r->kv_len += (size_t)n < cap - r->kv_len ? (size_t)n : cap - r->kv_len - 1;
}

void qim_bench_kv_hist(qim_bench_run *r, const char *prefix, const qim_hist *h) {
  char k[64];
  static const struct {
    const char *name;
    double q;
  } qs[] = {{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"max", 1.0}};
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
    snprintf(k, sizeof k, "%s_%s_ms", prefix, qs[i].name);
    qim_bench_kv(r, k, "%.3f", (double)qim_hist_quantile(h, qs[i].q) / 1000.0);
  }
  snprintf(k, sizeof k, "%s_n", prefix);
  qim_bench_kv(r, k, "%llu", (unsigned long long)h->count);
}

uint64_t qim_bench_errors(const qim_bench_run *r) {
  uint64_t n = 0;
  for (int c = 400; c < 1000; c++) n += r->ctrl_codes[c];
  return n + r->wrong_replies;
}

static void kv_problems(qim_bench_run *r) {
  char k[32];
  qim_bench_kv(r, "errors", "%llu", (unsigned long long)qim_bench_errors(r));
  for (int c = 300; c < 1000; c++)
    if (r->ctrl_codes[c]) {
      snprintf(k, sizeof k, "ctrl_%d", c);
      qim_bench_kv(r, k, "%llu", (unsigned long long)r->ctrl_codes[c]);
    }
  for (int w = 1; w < 8; w++)
    if (r->ends[w]) {
      snprintf(k, sizeof k, "end_%s", qim_bench_end_name((qim_bench_end)w));
      qim_bench_kv(r, k, "%llu", (unsigned long long)r->ends[w]);
    }
  if (r->bad_frames) qim_bench_kv(r, "bad_frames", "%llu", (unsigned long long)r->bad_frames);
  if (r->wrong_replies)
    qim_bench_kv(r, "wrong_replies", "%llu", (unsigned long long)r->wrong_replies);
  if (r->start_failures)
    qim_bench_kv(r, "start_failures", "%llu", (unsigned long long)r->start_failures);
}

void qim_bench_report(qim_bench_run *r, const char *human) {
  qim_bench_run_mark_end(r);
  kv_problems(r);
  const char *top = NULL;
  double top_pct = 0;
  bool has_top = r->srv_ok && qim_proc_threads_busiest(r->srv_ta, r->srv_tb, &top, &top_pct) == 0;
  if (r->srv_ok) {
    qim_bench_kv(r, "server_cpu_pct", "%.1f", qim_proc_cpu_pct(&r->srv_a, &r->srv_b));
    qim_bench_kv(r, "server_rss_kb", "%llu", (unsigned long long)r->srv_b.rss_kb);
    qim_bench_kv(r, "server_rss_start_kb", "%llu", (unsigned long long)r->srv_a.rss_kb);
    qim_bench_kv(r, "server_hwm_kb", "%llu", (unsigned long long)r->srv_b.hwm_kb);
    qim_bench_kv(r, "server_threads", "%u", r->srv_b.threads);
    if (r->srv_b.write_bytes)
      qim_bench_kv(r, "server_write_mb_s", "%.1f", qim_proc_write_mb_s(&r->srv_a, &r->srv_b));
    if (has_top) {
      qim_bench_kv(r, "server_top_thread", "%s", top);
      qim_bench_kv(r, "server_top_thread_pct", "%.1f", top_pct);
    }
    qim_bench_kv(r, "bench_cpu_pct", "%.1f", r->self_cpu_pct);
  }
  double idle = r->machine_ok ? qim_machine_idle_pct(&r->machine_a, &r->machine_b) : -1;
  if (idle >= 0) qim_bench_kv(r, "machine_idle_pct", "%.1f", idle);
  if (r->o->label) qim_bench_kv(r, "label", "%s", r->o->label);
  qim_bench_kv(r, "status", "%s", r->failure ? "failed" : "ok");
  if (!r->o->quiet) {
    fputs(human, stdout);
    if (r->srv_ok)
      printf(
          "server pid %d: %.0f%% CPU, RSS %llu kB (was %llu kB, peak %llu kB); qim-bench %.0f%% "
          "CPU\n",
          (int)r->o->server_pid, qim_proc_cpu_pct(&r->srv_a, &r->srv_b),
          (unsigned long long)r->srv_b.rss_kb, (unsigned long long)r->srv_a.rss_kb,
          (unsigned long long)r->srv_b.hwm_kb, r->self_cpu_pct);
    if (has_top)
      printf("server's busiest thread: %s, %.0f%% of a core\n", top, top_pct);
    if (idle >= 0) printf("the machine's cores were %.0f%% idle\n", idle);
    uint64_t errs = qim_bench_errors(r);
    if (errs || r->bad_frames || r->start_failures)
      printf(
          "problems: %llu error replies, %llu unreadable frames, %llu connections not started "
          "(details in the RESULT line)\n",
          (unsigned long long)errs, (unsigned long long)r->bad_frames,
          (unsigned long long)r->start_failures);
    if (r->failure) printf("the run FAILED: %s\n", r->failure);
  }
  printf("RESULT scenario=%s %s\n", r->o->scenario, r->kv);
  fflush(stdout);
}

/* ---- pacer ------------------------------------------------------------------------------------
 */

static void pacer_fill(qim_bench_pacer *p) {
  while (!p->finished && p->inflight < p->limit && p->next < p->total) {
    size_t i = p->next++;
    p->inflight++;
    if (p->issue(p->ud, i) != 0) {
      p->inflight--;
      p->done++;
      p->failed++;
    }
  }
  if (!p->finished && p->done == p->total) {
    p->finished = true;
    p->on_all(p->ud);
  }
}

void qim_bench_pacer_start(qim_bench_pacer *p, size_t total, uint32_t limit,
                           int (*issue)(void *, size_t), void (*on_all)(void *), void *ud) {
  *p = (qim_bench_pacer){
      .total = total, .limit = limit ? limit : 1, .issue = issue, .on_all = on_all, .ud = ud};
  pacer_fill(p);
}

void qim_bench_pacer_done(qim_bench_pacer *p, bool ok) {
  if (p->finished || p->inflight == 0) return;
  p->inflight--;
  p->done++;
  if (!ok) p->failed++;
  pacer_fill(p);
}
