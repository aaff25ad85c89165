/*
 * sc_history.c — the history scenario of qim-bench (issue 10, measurement 5 over the
 * WebSocket): --users N clients, logged in with tokens from the accounts file and
 * subscribed to the group --topic, page through its history with
 * {get what:"data" data:{before:<random>, limit:50}} in a closed loop, one page in flight
 * per client (so --users is the number in flight), for --warmup then --duration seconds.
 *
 * A page's latency runs from sending the {get} to its terminating {ctrl 208}; the page's
 * {data} frames come before it. Every page is checked: exactly 50 frames with seqs
 * before-1, before-2, … (newest first, PROTOCOL.md §9) whose content carries the same
 * number (qim-seed --messages writes {"qbn":seq,…}, history_rows.h), and ctrl count 50;
 * a page that is not is a wrong reply, counted in errors. The conversation's latest seq is
 * learned first by a {get data limit:1} per client; `before` is uniform in
 * [51, latest + 1], so every page is a full one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "qim/mem.h"

#define PAGE 50

typedef enum phase { PH_CONNECT, PH_JOIN, PH_WARM, PH_RUN, PH_DRAIN, PH_DONE } phase;

typedef struct history history;

typedef struct hclient {
  qim_bench_client client;
  history *h;
  uint64_t before, expect; /* the page in flight: its `before`, the next seq it should hold */
  uint64_t t_us;           /* when its {get} was sent */
  uint32_t got;            /* {data} frames of it so far */
  bool wrong, busy;
} hclient;

struct history {
  qim_bench_run run;
  const qim_bench_opts *o;
  qim_bench_account *accts;
  size_t nacct;
  hclient *clients;
  uint32_t n;
  qim_bench_pacer pacer;
  phase ph;
  uint64_t latest, rng;
  qim_hist lat;
  uint64_t pages, wrong_pages, busy;
  uint64_t t_start_us, t_end_us;
  uv_timer_t tick;
};

static history *of(qim_bench_client *c) {
  return ((hclient *)c->ud)->h;
}

/* xorshift64*: the random anchors (seeded per run; no need for a good generator). */
static uint64_t next_rand(history *h) {
  h->rng ^= h->rng >> 12;
  h->rng ^= h->rng << 25;
  h->rng ^= h->rng >> 27;
  return h->rng * 0x2545F4914F6CDD1DULL;
}

static void send_or_fail(hclient *hc, const char *frame, int len) {
  if (qim_bench_client_send(&hc->client, frame, len) != 0)
    qim_bench_run_fail(&hc->h->run, "a request could not be sent");
}

/* The next page of a client: before uniform in [PAGE + 1, latest + 1]. */
static void ask_page(hclient *hc) {
  history *h = hc->h;
  char frame[512];
  hc->before = PAGE + 1 + next_rand(h) % (h->latest - PAGE + 1);
  hc->expect = hc->before - 1;
  hc->got = 0;
  hc->wrong = false;
  hc->busy = true;
  h->busy++;
  hc->t_us = qim_bench_now_us();
  send_or_fail(hc, frame,
               qim_tframe_get_data(frame, sizeof frame, "g", h->o->topic, hc->before, PAGE));
}

static void finish(history *h);

/* A page ended with its {ctrl}: check it, time it, ask the next one. */
static void page_done(hclient *hc, const qim_tframe_msg *m) {
  history *h = hc->h;
  uint64_t now = qim_bench_now_us();
  hc->busy = false;
  h->busy--;
  bool ok = m->code == 208 && m->count == PAGE && hc->got == PAGE && !hc->wrong;
  if (!ok && m->code < 300) h->run.wrong_replies++; /* >= 300 is counted by its code */
  if (h->t_start_us && hc->t_us >= h->t_start_us) {
    if (ok) qim_hist_record(&h->lat, now - hc->t_us);
    h->pages++;
    if (!ok) h->wrong_pages++;
  }
  if (h->ph == PH_WARM || h->ph == PH_RUN)
    ask_page(hc);
  else if (h->ph == PH_DRAIN && h->busy == 0)
    finish(h);
}

static void on_data(qim_bench_client *c, const qim_tframe_msg *m) {
  hclient *hc = c->ud;
  history *h = hc->h;
  if (h->ph == PH_JOIN) { /* the probe: the newest message */
    if (m->seq > 0 && (uint64_t)m->seq > h->latest) h->latest = (uint64_t)m->seq;
    return;
  }
  if (!hc->busy) return;
  if (m->seq < 0 || (uint64_t)m->seq != hc->expect || m->qbn != m->seq) hc->wrong = true;
  hc->expect--;
  hc->got++;
}

static void on_ctrl(qim_bench_client *c, const qim_tframe_msg *m) {
  hclient *hc = c->ud;
  history *h = hc->h;
  char frame[512];
  if (strcmp(m->id, "s") == 0 && h->ph == PH_JOIN) {
    if (m->code != 200 && m->code != 304) {
      qim_bench_pacer_done(&h->pacer, false);
      return;
    }
    send_or_fail(hc, frame, qim_tframe_get_data(frame, sizeof frame, "q", h->o->topic, 0, 1));
  } else if (strcmp(m->id, "q") == 0 && h->ph == PH_JOIN) {
    qim_bench_pacer_done(&h->pacer, m->code == 208);
  } else if (strcmp(m->id, "g") == 0 && hc->busy) {
    page_done(hc, m);
  }
}

static void on_ready(qim_bench_client *c) {
  qim_bench_pacer_done(&of(c)->pacer, true);
}

static void on_failed(qim_bench_client *c) {
  qim_bench_pacer_done(&of(c)->pacer, false);
}

static void on_closed(qim_bench_client *c) {
  history *h = of(c);
  if (h->ph != PH_DONE) qim_bench_run_fail(&h->run, "a connection closed during the run");
}

static const qim_bench_client_cbs cbs = {on_ready, on_failed, on_ctrl, on_data, on_closed};

static int issue_connect(void *ud, size_t i) {
  history *h = ud;
  hclient *hc = &h->clients[i];
  hc->h = h;
  return qim_bench_client_start(&hc->client, &h->run, (uint32_t)i, &h->accts[i % h->nacct], &cbs,
                                hc);
}

static int issue_join(void *ud, size_t i) {
  history *h = ud;
  char frame[512];
  return qim_bench_client_send(&h->clients[i].client, frame,
                               qim_tframe_sub(frame, sizeof frame, "s", h->o->topic));
}

/* Warm-up → measured run → drain, on one timer. */
static void tick_cb(uv_timer_t *t) {
  history *h = t->data;
  if (h->ph == PH_WARM) {
    h->ph = PH_RUN;
    qim_bench_run_mark_start(&h->run);
    h->t_start_us = qim_bench_now_us();
    uv_timer_start(&h->tick, tick_cb, (uint64_t)(h->o->duration_s * 1000), 0);
  } else if (h->ph == PH_RUN) {
    h->ph = PH_DRAIN;
    h->t_end_us = qim_bench_now_us();
    qim_bench_run_mark_end(&h->run);
    if (h->busy == 0)
      finish(h);
    else
      uv_timer_start(&h->tick, tick_cb, (uint64_t)(h->o->drain_s * 1000), 0);
  } else if (h->ph == PH_DRAIN) {
    qim_bench_run_fail(&h->run, "pages still unanswered after --drain");
  }
}

static void setup_done(void *ud) {
  history *h = ud;
  if (h->pacer.failed) {
    qim_bench_run_fail(&h->run, h->ph == PH_CONNECT ? "connections failed to log in"
                                                    : "clients could not subscribe to --topic");
    return;
  }
  if (h->ph == PH_CONNECT) {
    h->ph = PH_JOIN;
    qim_bench_pacer_start(&h->pacer, h->n, h->o->concurrency, issue_join, setup_done, h);
    return;
  }
  if (h->latest < PAGE) {
    qim_bench_run_fail(&h->run, "the topic holds fewer than 50 messages");
    return;
  }
  h->ph = PH_WARM;
  const qim_bench_opts *o = h->o;
  qim_bench_run_watchdog(&h->run, o->warmup_s + o->duration_s + o->drain_s + 15.0,
                         "the run overran its time");
  for (uint32_t i = 0; i < h->n; i++) ask_page(&h->clients[i]);
  uv_timer_start(&h->tick, tick_cb, (uint64_t)(o->warmup_s * 1000), 0);
}

static void report(history *h) {
  qim_bench_run *r = &h->run;
  if (!h->t_end_us) h->t_end_us = qim_bench_now_us();
  double secs = h->t_start_us ? (double)(h->t_end_us - h->t_start_us) / 1e6 : 0;
  double rate = secs > 0 ? (double)h->pages / secs : 0;
  qim_bench_kv(r, "topic", "%s", h->o->topic);
  qim_bench_kv(r, "clients", "%u", h->n);
  qim_bench_kv(r, "newest_seq", "%llu", (unsigned long long)h->latest);
  qim_bench_kv(r, "page_size", "%d", PAGE);
  qim_bench_kv(r, "pages", "%llu", (unsigned long long)h->pages);
  qim_bench_kv(r, "wrong_pages", "%llu", (unsigned long long)h->wrong_pages);
  qim_bench_kv(r, "pages_per_s", "%.1f", rate);
  qim_bench_kv(r, "duration_s", "%.2f", secs);
  qim_bench_kv_hist(r, "page", &h->lat);
  char human[512];
  snprintf(human, sizeof human,
           "history: %u clients paging %s (latest seq %llu), %d messages a page: %llu pages in "
           "%.1f s = %.0f pages/s, %llu wrong; page latency p50 %.3f ms, p99 %.3f ms, max %.3f "
           "ms\n",
           h->n, h->o->topic, (unsigned long long)h->latest, PAGE, (unsigned long long)h->pages,
           secs, rate, (unsigned long long)h->wrong_pages,
           (double)qim_hist_quantile(&h->lat, 0.5) / 1000.0,
           (double)qim_hist_quantile(&h->lat, 0.99) / 1000.0,
           (double)qim_hist_quantile(&h->lat, 1.0) / 1000.0);
  qim_bench_report(r, human);
}

static void finish(history *h) {
  if (h->ph == PH_DONE) return;
  h->ph = PH_DONE;
  report(h);
  uv_close((uv_handle_t *)&h->tick, NULL);
  for (uint32_t i = 0; i < h->n; i++) qim_bench_client_close(&h->clients[i].client);
  qim_bench_run_watchdog_stop(&h->run);
  uv_close((uv_handle_t *)&h->run.watchdog, NULL);
}

static void on_fail(void *ud) {
  finish(ud);
}

int qim_bench_history(const qim_bench_opts *o) {
  if (!o->topic || strncmp(o->topic, "grp", 3) != 0) {
    fprintf(stderr, "qim-bench: history needs --topic grp… (qim-seed --group 1 --messages M)\n");
    return 2;
  }
  history *h = qim_calloc(1, sizeof *h);
  h->o = o;
  h->n = o->users;
  int rc = qim_bench_accounts_load(o->accounts_file, &h->accts, &h->nacct);
  if (rc || h->nacct == 0 || qim_bench_run_init(&h->run, o)) {
    fprintf(stderr, "qim-bench: no accounts in %s%s%s\n", o->accounts_file, rc ? ": " : "",
            rc == -EINVAL ? "malformed line"
            : rc          ? strerror(-rc)
                          : "");
    qim_bench_accounts_free(h->accts, h->nacct);
    qim_free(h);
    return 2;
  }
  h->clients = qim_calloc(h->n, sizeof *h->clients);
  h->rng = qim_bench_now_us() | 1;
  qim_hist_init(&h->lat);
  uv_timer_init(h->run.loop, &h->tick);
  h->tick.data = h;
  h->run.on_fail = on_fail;
  h->run.fail_ud = h;
  qim_bench_run_watchdog(&h->run, o->setup_timeout_s,
                         "setup did not finish within --setup-timeout");
  qim_bench_pacer_start(&h->pacer, h->n, o->concurrency, issue_connect, setup_done, h);
  int status = qim_bench_run_loop(&h->run);
  qim_bench_run_free(&h->run);
  qim_bench_accounts_free(h->accts, h->nacct);
  qim_free(h->clients);
  qim_free(h);
  return status;
}
