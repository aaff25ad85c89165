/*
 * sc_accounts.c — the accounts scenario of qim-bench: creates --count basic accounts
 * <prefix><index> with {acc login:true} and writes "login uid token" lines to the accounts
 * file, so the connection scenarios can log in with tokens instead of paying a basic
 * login's argon2id (~75 ms) each time. A login that already exists (409) is logged into
 * with {login basic} instead, so re-running against the same server refreshes the file.
 *
 * One connection per account (a session logs in once); --concurrency of them at a time
 * (default 4: the server's argon2id, not the network, is the limit). The server's
 * login_rate/login_burst limits apply per source address; expect 429s unless it runs with
 * generous ones (bench/run.sh passes them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "qim/mem.h"

#define MAX_ACCOUNTS 100000

typedef struct accounts accounts;

typedef struct slot {
  qim_bench_client client;
  accounts *a;
  uint32_t i;
  uint64_t t_us;
  char *uid, *token;
  bool finished, existed;
} slot;

struct accounts {
  qim_bench_run run;
  const qim_bench_opts *o;
  slot *slots;
  uint32_t n;
  qim_bench_pacer pacer;
  uint64_t created, existed, failed;
  qim_hist lat;
  bool done;
};

static void login_of(const accounts *a, uint32_t i, char *out, size_t cap) {
  snprintf(out, cap, "%s%06u", a->o->prefix, a->o->first + i);
}

static void step_done(slot *s, bool ok) {
  if (s->finished) return;
  s->finished = true;
  if (!ok) s->a->failed++;
  qim_bench_client_close(&s->client);
  qim_bench_pacer_done(&s->a->pacer, ok);
}

static void on_ready(qim_bench_client *c) {
  slot *s = c->ud;
  char login[128], frame[2048];
  login_of(s->a, s->i, login, sizeof login);
  s->t_us = qim_bench_now_us();
  int n = qim_tframe_acc(frame, sizeof frame, "a", login, s->a->o->password);
  if (qim_bench_client_send(c, frame, n) != 0) step_done(s, false);
}

static void on_ctrl(qim_bench_client *c, const qim_tframe_msg *m) {
  slot *s = c->ud;
  accounts *a = s->a;
  if (strcmp(m->id, "a") == 0 && m->code == 409) { /* exists: log in to get a token */
    char login[128], frame[2048];
    login_of(a, s->i, login, sizeof login);
    s->existed = true;
    a->run.ctrl_codes[409]--; /* an existing account is counted as existed, not as an error */
    int n = qim_tframe_login_basic(frame, sizeof frame, "b", login, a->o->password);
    if (qim_bench_client_send(c, frame, n) != 0) step_done(s, false);
    return;
  }
  if (strcmp(m->id, "a") != 0 && strcmp(m->id, "b") != 0) return;
  if (m->code != 200 || !m->user[0] || !m->token[0]) {
    step_done(s, false);
    return;
  }
  qim_hist_record(&a->lat, qim_bench_now_us() - s->t_us);
  s->uid = qim_strdup(m->user);
  s->token = qim_strdup(m->token);
  if (s->existed)
    a->existed++;
  else
    a->created++;
  step_done(s, true);
}

static void on_failed(qim_bench_client *c) {
  step_done(c->ud, false);
}
static void on_closed(qim_bench_client *c) {
  step_done(c->ud, false);
}

static const qim_bench_client_cbs cbs = {on_ready, on_failed, on_ctrl, NULL, on_closed};

static int issue(void *ud, size_t i) {
  accounts *a = ud;
  slot *s = &a->slots[i];
  s->a = a;
  s->i = (uint32_t)i;
  int rc = qim_bench_client_start(&s->client, &a->run, (uint32_t)i, NULL, &cbs, s);
  if (rc) s->finished = true;
  return rc;
}

/* Writes the file atomically (temp + rename). 0 or -errno. */
static int write_file(accounts *a) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp%d", a->o->accounts_file, (int)getpid());
  FILE *f = fopen(tmp, "we");
  if (!f) return -errno;
  fprintf(f, "# qim-bench accounts for %s: login uid token (password '%s')\n", a->run.target.host,
          a->o->password);
  for (uint32_t i = 0; i < a->n; i++) {
    if (!a->slots[i].token) continue;
    char login[128];
    login_of(a, i, login, sizeof login);
    fprintf(f, "%s %s %s\n", login, a->slots[i].uid, a->slots[i].token);
  }
  if (fclose(f) != 0 || rename(tmp, a->o->accounts_file) != 0) {
    int err = -errno;
    unlink(tmp);
    return err;
  }
  return 0;
}

static void finish(accounts *a) {
  if (a->done) return;
  a->done = true;
  qim_bench_run *r = &a->run;
  int wrc = write_file(a);
  if (wrc) fprintf(stderr, "qim-bench: cannot write %s: %s\n", a->o->accounts_file, strerror(-wrc));
  double secs = (double)(qim_bench_now_us() - r->t0_us) / 1e6;
  qim_bench_kv(r, "count", "%u", a->n);
  qim_bench_kv(r, "created", "%llu", (unsigned long long)a->created);
  qim_bench_kv(r, "existed", "%llu", (unsigned long long)a->existed);
  qim_bench_kv(r, "failed", "%llu", (unsigned long long)a->failed);
  qim_bench_kv(r, "elapsed_s", "%.2f", secs);
  qim_bench_kv(r, "accounts_per_s", "%.1f", (double)(a->created + a->existed) / secs);
  qim_bench_kv_hist(r, "acc", &a->lat);
  qim_bench_kv(r, "file", "%s", a->o->accounts_file);
  char human[512];
  snprintf(human, sizeof human,
           "accounts: %llu created, %llu already existed (logged in), %llu failed in %.1f s "
           "(%.1f/s); written to %s\n  acc/login ms: p50 %.1f  p99 %.1f  max %.1f\n",
           (unsigned long long)a->created, (unsigned long long)a->existed,
           (unsigned long long)a->failed, secs, (double)(a->created + a->existed) / secs,
           wrc ? "(nothing: write failed)" : a->o->accounts_file,
           qim_hist_quantile(&a->lat, .5) / 1e3, qim_hist_quantile(&a->lat, .99) / 1e3,
           qim_hist_quantile(&a->lat, 1) / 1e3);
  if (a->failed && !r->failure) r->failure = "some accounts failed";
  if (wrc && !r->failure) r->failure = "the accounts file could not be written";
  qim_bench_report(r, human);
  for (uint32_t i = 0; i < a->n; i++)
    if (a->slots[i].a) qim_bench_client_close(&a->slots[i].client);
  qim_bench_run_watchdog_stop(r);
  uv_close((uv_handle_t *)&r->watchdog, NULL);
}

static void all_done(void *ud) {
  finish(ud);
}
static void on_fail(void *ud) {
  finish(ud);
}

int qim_bench_accounts(const qim_bench_opts *o) {
  if (o->count < 1 || o->count > MAX_ACCOUNTS) {
    fprintf(stderr, "qim-bench: accounts needs 1 <= --count <= %d\n", MAX_ACCOUNTS);
    return 2;
  }
  accounts *a = qim_calloc(1, sizeof *a);
  a->o = o;
  a->n = o->count;
  if (qim_bench_run_init(&a->run, o)) {
    qim_free(a);
    return 2;
  }
  a->slots = qim_calloc(a->n, sizeof *a->slots);
  qim_hist_init(&a->lat);
  a->run.on_fail = on_fail;
  a->run.fail_ud = a;
  qim_bench_run_mark_start(&a->run); /* server CPU over the whole run: argon2id dominates */
  qim_bench_run_watchdog(&a->run, o->setup_timeout_s,
                         "accounts were not all made within --setup-timeout");
  qim_bench_pacer_start(&a->pacer, a->n, o->concurrency, issue, all_done, a);
  int status = qim_bench_run_loop(&a->run);
  qim_bench_run_free(&a->run);
  for (uint32_t i = 0; i < a->n; i++) {
    qim_free(a->slots[i].uid);
    qim_free(a->slots[i].token);
  }
  qim_free(a->slots);
  qim_free(a);
  return status;
}
