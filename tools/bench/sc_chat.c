/*
 * sc_chat.c — the p2p and group scenarios of qim-bench: conversations with members and
 * senders publishing at a target total rate, deliveries timed on the other members.
 *
 *  p2p:   --users N form N/2 pairs; both members of a pair send. A pair is a one-to-one
 *         topic (--via usr, the default): each side subs to `usr<peer>`, the first sub
 *         creating the conversation; --via group makes it a 2-member group instead.
 *  group: --groups K of --group-size G members, the first --senders S of each sending.
 *
 * Every sender is open-loop: message n of sender q is due at t_begin + (q/Q + n) * period
 * (Q senders, period = Q / rate), so senders are staggered by their phase and never wait
 * for each other or for acks: a slow server cannot hide behind a slower send rate. The
 * content and the pub id carry the time the frame was written, so latencies are send →
 * delivery and send → ack; how late the client was against the schedule (libuv timers have
 * 1 ms resolution, and a starved client falls behind) is reported apart as the send lag,
 * which must stay small for the run to be valid. A sender whose connection has more than
 * MAX_INFLIGHT unacked pubs or MAX_PENDING unsent bytes skips a message (counted) instead of
 * queueing without bound.
 *
 * Phases: connect + login (paced) → create the groups (paced) → join (paced) → quiet (until
 * the joins' membership notices stop arriving) → warm-up →
 * measured window → drain (up to --drain seconds for the last deliveries) → report.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "seen.h"

#define MAX_INFLIGHT 4096
#define MAX_PENDING (1u << 20)
#define MAX_BURST 64 /* messages one sender sends per timer callback when it is behind */

enum { PH_CONNECT, PH_CREATE, PH_JOIN, PH_QUIET, PH_RUN, PH_DRAIN, PH_DONE };

/* After the joins, the run waits until no connection has received anything for QUIET_MS
 * (at most QUIET_MAX_MS): every join is a membership change delivered to the members
 * already there, so a group of G members queues ~G²/2 mailbox entries and {pres} frames
 * that would otherwise be measured as the first messages' latency. */
#define QUIET_MS 500
#define QUIET_MAX_MS 60000

/* The per-window tail: windows of 100 ms of send time; the report names the worst five. */
#define WINDOW_US 100000u
#define WORST_WINDOWS 5

typedef struct chat chat;

typedef struct sender {
  uv_timer_t timer;
  chat *ch;
  uint32_t q;      /* index among all senders (its phase) */
  uint32_t client; /* who sends */
  uint32_t conv;
  const char *topic; /* as this sender names the conversation */
  uint64_t due_us, n;
  bool stopped;
} sender;

typedef struct conv {
  char topic[72]; /* the group's name once created */
} conv;

struct chat {
  qim_bench_run run;
  const qim_bench_opts *o;
  bool group_mode;
  qim_bench_account *accts;
  size_t nacct;
  qim_bench_client *clients;
  uint32_t *inflight; /* unacked pubs per client */
  /* What client i has had from the j-th sender of its conversation, at seen[i * spg + j]:
   * tells fresh deliveries from duplicates and from reordered ones. */
  qim_seen *seen;
  uint32_t nclients, nconv, gsize, spg; /* spg: senders per conversation */
  conv *convs;
  sender *senders;
  uint32_t nsenders, running_senders;
  qim_bench_pacer pacer;
  int phase;
  uint64_t period_us, t_begin_us, measure_from_us, send_until_us, drain_until_us;
  uint64_t measure_from_unix_ms; /* the same moment by the wall clock, to match server logs */
  uint8_t nonce[8];
  /* Counters (measured = due inside the measured window). */
  uint64_t sent_total, sent, acked, ack_errors, expected, delivered, delivered_all, foreign,
      skipped, dups, late, old, self, unknown;
  qim_hist lat, ack, lag;
  qim_hist_windows lat_windows; /* by send time: one stall, or a tail over the whole run */
  uv_timer_t tick; /* phase transitions and drain checks */
  uint64_t quiet_from_us, quiet_ms; /* PH_QUIET: when it began; how long it took */
};

/* Client index of member j of conversation k. */
static uint32_t member(const chat *ch, uint32_t k, uint32_t j) {
  return k * ch->gsize + j;
}

static chat *chat_of(qim_bench_client *c) {
  return c->ud;
}

/* ---- sending ----------------------------------------------------------------------------------
 */

static void send_one(chat *ch, sender *s, uint64_t now) {
  qim_bench_client *c = &ch->clients[s->client];
  /* A message belongs to the measured window by the time it is sent, as acks and
   * deliveries classify it by the time they carry. */
  uint64_t sent_at = qim_bench_now_us();
  bool measured = sent_at >= ch->measure_from_us && sent_at < ch->send_until_us;
  if (measured) qim_hist_record(&ch->lag, now - s->due_us);
  if (c->state != QIM_BENCH_CLIENT_READY || ch->inflight[s->client] >= MAX_INFLIGHT ||
      qim_bench_conn_pending(&c->conn) > MAX_PENDING) {
    if (measured) ch->skipped++;
    return;
  }
  uint8_t b[16];
  memcpy(b, ch->nonce, 8);
  for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(s->q >> (24 - 8 * i));
  for (int i = 0; i < 4; i++) b[12 + i] = (uint8_t)(s->n >> (24 - 8 * i));
  char cmid[QIM_TFRAME_CMID_LEN + 1], id[32], frame[65536];
  qim_tframe_cmid(b, cmid);
  snprintf(id, sizeof id, "p%llu", (unsigned long long)sent_at);
  qim_tframe_pub_args a = {id, s->topic, cmid, true, sent_at, s->q, s->n, ch->o->content_size};
  int n = qim_tframe_pub(frame, sizeof frame, &a);
  if (qim_bench_client_send(c, frame, n) != 0) {
    if (measured) ch->skipped++;
    return;
  }
  ch->inflight[s->client]++;
  ch->sent_total++;
  if (measured) ch->sent++;
}

static void sender_stop(sender *s) {
  if (s->stopped) return;
  s->stopped = true;
  uv_timer_stop(&s->timer);
  s->ch->running_senders--;
}

static void sender_cb(uv_timer_t *t) {
  sender *s = t->data;
  chat *ch = s->ch;
  uint64_t now = qim_bench_now_us();
  for (int burst = 0; s->due_us <= now && burst < MAX_BURST; burst++) {
    if (s->due_us >= ch->send_until_us || ch->sent_total >= ch->o->max_messages) {
      sender_stop(s);
      return;
    }
    send_one(ch, s, now);
    s->n++;
    s->due_us += ch->period_us;
  }
  /* At a low rate the next turn can lie far past the end (the period is senders / rate):
   * stop now rather than arm a timer the run would wait for. */
  if (s->due_us >= ch->send_until_us) {
    sender_stop(s);
    return;
  }
  uint64_t wait_ms = s->due_us > now ? (s->due_us - now + 999) / 1000 : 0;
  uv_timer_start(&s->timer, sender_cb, wait_ms, 0);
}

/* ---- receiving --------------------------------------------------------------------------------
 */

static void on_ctrl(qim_bench_client *c, const qim_tframe_msg *m);

static void on_data(qim_bench_client *c, const qim_tframe_msg *m) {
  chat *ch = chat_of(c);
  if (m->qbt < 0) {
    ch->foreign++;
    return;
  }
  if (m->qbs < 0 || (uint64_t)m->qbs >= ch->nsenders || m->qbn < 0) {
    ch->unknown++;
    return;
  }
  const sender *s = &ch->senders[m->qbs];
  if (s->client == c->index) { /* noecho was sent: the sending session must not get it */
    ch->self++;
    return;
  }
  if (s->conv != c->index / ch->gsize) { /* a conversation this client is not in */
    ch->unknown++;
    return;
  }
  switch (qim_seen_mark(&ch->seen[(size_t)c->index * ch->spg + s->q % ch->spg], m->qbn)) {
    case QIM_SEEN_NEW:
      break;
    case QIM_SEEN_LATE:
      ch->late++;
      break; /* delivered, but after a later message */
    case QIM_SEEN_DUP:
      ch->dups++;
      return;
    case QIM_SEEN_OLD:
      ch->old++;
      return;
  }
  ch->delivered_all++;
  if ((uint64_t)m->qbt < ch->measure_from_us || (uint64_t)m->qbt >= ch->send_until_us) return;
  ch->delivered++;
  uint64_t now = qim_bench_now_us();
  uint64_t lat = now > (uint64_t)m->qbt ? now - (uint64_t)m->qbt : 0;
  qim_hist_record(&ch->lat, lat);
  qim_hist_windows_record(&ch->lat_windows, (uint64_t)m->qbt, lat);
}

static void on_pub_reply(chat *ch, qim_bench_client *c, const qim_tframe_msg *m) {
  if (ch->inflight[c->index]) ch->inflight[c->index]--;
  uint64_t due = strtoull(m->id + 1, NULL, 10); /* when it was sent */
  bool measured = due >= ch->measure_from_us && due < ch->send_until_us;
  if (m->code != 202) {
    if (measured) ch->ack_errors++;
    return;
  }
  if (!measured) return;
  ch->acked++;
  ch->expected += ch->gsize - 1; /* noecho: every other member */
  uint64_t now = qim_bench_now_us();
  qim_hist_record(&ch->ack, now > due ? now - due : 0);
}

/* ---- setup phases -----------------------------------------------------------------------------
 */

static void start_phase(chat *ch, int phase);

static void on_ready(qim_bench_client *c) {
  qim_bench_pacer_done(&chat_of(c)->pacer, true);
}

static void on_failed(qim_bench_client *c) {
  chat *ch = chat_of(c);
  if (ch->phase == PH_CONNECT) qim_bench_pacer_done(&ch->pacer, false);
}

static void on_closed(qim_bench_client *c) {
  chat *ch = chat_of(c);
  if (ch->phase < PH_DONE && !ch->run.failure)
    qim_bench_run_fail(&ch->run, "a connection closed during the run");
}

static const qim_bench_client_cbs client_cbs = {on_ready, on_failed, on_ctrl, on_data, on_closed};

static int issue_connect(void *ud, size_t i) {
  chat *ch = ud;
  return qim_bench_client_start(&ch->clients[i], &ch->run, (uint32_t)i, &ch->accts[i], &client_cbs,
                                ch);
}

static int issue_create(void *ud, size_t k) {
  chat *ch = ud;
  char frame[256], id[32], tmp[32];
  snprintf(id, sizeof id, "c%zu", k);
  snprintf(tmp, sizeof tmp, "newbench%zu", k);
  return qim_bench_client_send(&ch->clients[member(ch, (uint32_t)k, 0)], frame,
                               qim_tframe_sub(frame, sizeof frame, id, tmp));
}

/* Join step i: member j >= 1 of group k (group mode), or member j of pair k (usr mode). */
static int issue_join(void *ud, size_t i) {
  chat *ch = ud;
  uint32_t per = ch->group_mode || !ch->o->via_usr ? ch->gsize - 1 : ch->gsize;
  uint32_t k = (uint32_t)(i / per), j = (uint32_t)(i % per) + (per == ch->gsize ? 0 : 1);
  char frame[256], id[32];
  snprintf(id, sizeof id, "j%u.%u", k, j);
  const char *topic = ch->convs[k].topic;
  if (per == ch->gsize) topic = ch->accts[member(ch, k, 1 - j)].uid; /* usr<peer> */
  return qim_bench_client_send(&ch->clients[member(ch, k, j)], frame,
                               qim_tframe_sub(frame, sizeof frame, id, topic));
}

static void on_ctrl(qim_bench_client *c, const qim_tframe_msg *m) {
  chat *ch = chat_of(c);
  if (m->id[0] == 'p') {
    on_pub_reply(ch, c, m);
  } else if (m->id[0] == 'c' && ch->phase == PH_CREATE) {
    uint32_t k = (uint32_t)strtoul(m->id + 1, NULL, 10);
    bool ok = m->code == 200 && k < ch->nconv && m->topic[0];
    if (ok) snprintf(ch->convs[k].topic, sizeof ch->convs[k].topic, "%s", m->topic);
    qim_bench_pacer_done(&ch->pacer, ok);
  } else if (m->id[0] == 'j' && ch->phase == PH_JOIN) {
    qim_bench_pacer_done(&ch->pacer, m->code == 200 || m->code == 304);
  }
}

static void phase_done(void *ud) {
  chat *ch = ud;
  static const char *what[] = {"connections failed to log in", "groups could not be created",
                               "members could not join"};
  if (ch->pacer.failed) {
    qim_bench_run_fail(&ch->run, what[ch->phase]);
    return;
  }
  if (ch->phase == PH_CONNECT && ch->o->via_usr && !ch->group_mode)
    start_phase(ch, PH_JOIN);
  else
    start_phase(ch, ch->phase + 1);
}

static void quiet_cb(uv_timer_t *t) {
  chat *ch = t->data;
  uint64_t now = qim_bench_now_us();
  if (now - ch->run.last_rx_us >= QUIET_MS * 1000u || now - ch->quiet_from_us >= QUIET_MAX_MS * 1000u) {
    ch->quiet_ms = (now - ch->quiet_from_us) / 1000;
    start_phase(ch, PH_RUN);
    return;
  }
  uv_timer_start(&ch->tick, quiet_cb, 50, 0);
}

/* ---- run and drain ----------------------------------------------------------------------------
 */

static void finish(chat *ch);

static void tick_cb(uv_timer_t *t) {
  chat *ch = t->data;
  uint64_t now = qim_bench_now_us();
  if (ch->phase == PH_RUN && !ch->run.marked_start) qim_bench_run_mark_start(&ch->run);
  if (ch->phase == PH_RUN && ch->running_senders == 0) {
    qim_bench_run_mark_end(&ch->run);
    ch->phase = PH_DRAIN;
    ch->drain_until_us = now + (uint64_t)(ch->o->drain_s * 1e6);
  }
  if (ch->phase == PH_DRAIN) {
    bool all_in = ch->delivered >= ch->expected && ch->acked + ch->ack_errors >= ch->sent;
    if (all_in || now >= ch->drain_until_us) {
      finish(ch);
      return;
    }
  }
  uv_timer_start(&ch->tick, tick_cb, 20, 0);
}

static void start_senders(chat *ch) {
  ch->phase = PH_RUN;
  uint64_t now = qim_bench_now_us();
  ch->t_begin_us = now + 100000; /* a moment for every timer to be armed */
  ch->measure_from_us = ch->t_begin_us + (uint64_t)(ch->o->warmup_s * 1e6);
  ch->send_until_us = ch->measure_from_us + (uint64_t)(ch->o->duration_s * 1e6);
  ch->measure_from_unix_ms =
      qim_clock_wall_ms(qim_clock_system()) + (ch->measure_from_us - now) / 1000u;
  qim_hist_windows_init(&ch->lat_windows, ch->measure_from_us, WINDOW_US);
  ch->period_us = (uint64_t)((double)ch->nsenders * 1e6 / ch->o->rate);
  if (ch->period_us == 0) ch->period_us = 1;
  ch->running_senders = 0;
  for (uint32_t q = 0; q < ch->nsenders; q++) {
    sender *s = &ch->senders[q];
    s->due_us = ch->t_begin_us + ch->period_us * q / ch->nsenders;
    if (s->due_us >= ch->send_until_us) continue; /* a slow rate: its first turn is after the end */
    s->stopped = false;
    ch->running_senders++;
    uv_timer_start(&s->timer, sender_cb, (s->due_us - now) / 1000, 0);
  }
  qim_bench_run_watchdog(&ch->run, ch->o->warmup_s + ch->o->duration_s + ch->o->drain_s + 10.0,
                         "the measured run overran its time");
  /* Server figures cover the measured window: sample when it begins. */
  uv_timer_start(&ch->tick, tick_cb, (ch->measure_from_us - now) / 1000, 0);
}

static void start_phase(chat *ch, int phase) {
  static const char *names[] = {"connect", "create", "join", "quiet", "run", "drain", "done"};
  ch->phase = phase;
  /* Progress on stderr (stdout holds the report): lets a profiler start with the run phase. */
  if (!ch->o->quiet)
    fprintf(stderr, "qim-bench: phase %s at %.1f s\n", names[phase],
            (double)(qim_bench_now_us() - ch->run.t0_us) / 1e6);
  uint32_t limit = ch->o->concurrency;
  switch (phase) {
    case PH_CONNECT:
      qim_bench_pacer_start(&ch->pacer, ch->nclients, limit, issue_connect, phase_done, ch);
      break;
    case PH_CREATE:
      qim_bench_pacer_start(&ch->pacer, ch->nconv, limit, issue_create, phase_done, ch);
      break;
    case PH_JOIN: {
      uint32_t per = ch->group_mode || !ch->o->via_usr ? ch->gsize - 1 : ch->gsize;
      qim_bench_pacer_start(&ch->pacer, (size_t)ch->nconv * per, limit, issue_join, phase_done, ch);
      break;
    }
    case PH_QUIET:
      ch->quiet_from_us = qim_bench_now_us();
      uv_timer_start(&ch->tick, quiet_cb, 50, 0);
      break;
    case PH_RUN:
      start_senders(ch);
      break;
  }
}

/* ---- report -----------------------------------------------------------------------------------
 */

/* "t:ms,…": the WORST_WINDOWS windows with the slowest deliveries, slowest first, each as
 * its start (seconds into the measured run) and that delivery's latency. */
static void worst_windows(const chat *ch, char *out, size_t cap) {
  uint32_t top[WORST_WINDOWS];
  unsigned n = qim_hist_windows_worst(&ch->lat_windows, WORST_WINDOWS, top);
  size_t len = 0;
  out[0] = 0;
  for (unsigned i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%.1f:%.1f", i ? "," : "",
                            top[i] * (WINDOW_US / 1e6), ch->lat_windows.max_us[top[i]] / 1e3);
}

static void report(chat *ch) {
  qim_bench_run *r = &ch->run;
  const qim_bench_opts *o = ch->o;
  double d = o->duration_s;
  const char *via = ch->group_mode ? "group" : o->via_usr ? "usr" : "group2";
  qim_bench_kv(r, "via", "%s", via);
  qim_bench_kv(r, "conns", "%u", ch->nclients);
  qim_bench_kv(r, "convs", "%u", ch->nconv);
  qim_bench_kv(r, "group_size", "%u", ch->gsize);
  qim_bench_kv(r, "senders", "%u", ch->nsenders);
  qim_bench_kv(r, "rate_target", "%.0f", o->rate);
  qim_bench_kv(r, "duration_s", "%.1f", d);
  qim_bench_kv(r, "warmup_s", "%.1f", o->warmup_s);
  qim_bench_kv(r, "setup_quiet_ms", "%llu", (unsigned long long)ch->quiet_ms);
  qim_bench_kv(r, "content_bytes", "%zu", o->content_size);
  qim_bench_kv(r, "sent", "%llu", (unsigned long long)ch->sent);
  qim_bench_kv(r, "acked", "%llu", (unsigned long long)ch->acked);
  qim_bench_kv(r, "ack_errors", "%llu", (unsigned long long)ch->ack_errors);
  qim_bench_kv(r, "skipped", "%llu", (unsigned long long)ch->skipped);
  qim_bench_kv(r, "delivered", "%llu", (unsigned long long)ch->delivered);
  qim_bench_kv(r, "expected", "%llu", (unsigned long long)ch->expected);
  uint64_t lost = ch->expected > ch->delivered ? ch->expected - ch->delivered : 0;
  qim_bench_kv(r, "lost", "%llu", (unsigned long long)lost);
  qim_bench_kv(r, "dups", "%llu", (unsigned long long)ch->dups);
  qim_bench_kv(r, "late", "%llu", (unsigned long long)ch->late);
  if (ch->old) qim_bench_kv(r, "too_late", "%llu", (unsigned long long)ch->old);
  qim_bench_kv(r, "self", "%llu", (unsigned long long)ch->self);
  if (ch->foreign) qim_bench_kv(r, "foreign", "%llu", (unsigned long long)ch->foreign);
  if (ch->unknown) qim_bench_kv(r, "unknown", "%llu", (unsigned long long)ch->unknown);
  qim_bench_kv(r, "send_rate", "%.1f", (double)ch->sent / d);
  qim_bench_kv(r, "ack_rate", "%.1f", (double)ch->acked / d);
  qim_bench_kv(r, "deliv_rate", "%.1f", (double)ch->delivered / d);
  qim_bench_kv_hist(r, "lat", &ch->lat);
  qim_bench_kv_hist(r, "ack", &ch->ack);
  qim_bench_kv_hist(r, "lag", &ch->lag);
  char worst[128];
  worst_windows(ch, worst, sizeof worst);
  if (worst[0]) qim_bench_kv(r, "lat_worst_windows", "%s", worst);
  qim_bench_kv(r, "measure_from_unix_ms", "%llu", (unsigned long long)ch->measure_from_unix_ms);

  char human[2048];
  const char *shape = ch->group_mode ? "groups"
                      : o->via_usr   ? "pairs (usr topics)"
                                     : "pairs (2-member groups: --via group)";
  snprintf(human, sizeof human,
           "%s: %u connections in %u %s, %u each, %u senders, target %.0f msg/s for %.1f s "
           "(after %.1f s warm-up), content %zu B\n"
           "  sent %llu (%.0f/s), acked %llu, errors %llu, skipped %llu\n"
           "  delivered %llu of %llu expected (%llu lost; %llu duplicates, %llu out of order, "
           "%llu echoed to the sender): %.0f deliveries/s\n"
           "  send->delivery ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n"
           "  slowest %.1f-s windows (s into the run: slowest delivery ms): %s\n"
           "  send->ack ms:      p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n"
           "  client send lag ms: p99 %.2f  max %.2f\n",
           o->scenario, ch->nclients, ch->nconv, shape, ch->gsize, ch->nsenders, o->rate, d,
           o->warmup_s, o->content_size, (unsigned long long)ch->sent, (double)ch->sent / d,
           (unsigned long long)ch->acked, (unsigned long long)ch->ack_errors,
           (unsigned long long)ch->skipped, (unsigned long long)ch->delivered,
           (unsigned long long)ch->expected, (unsigned long long)lost, (unsigned long long)ch->dups,
           (unsigned long long)ch->late, (unsigned long long)ch->self, (double)ch->delivered / d,
           qim_hist_quantile(&ch->lat, .5) / 1e3, qim_hist_quantile(&ch->lat, .9) / 1e3,
           qim_hist_quantile(&ch->lat, .99) / 1e3, qim_hist_quantile(&ch->lat, 1) / 1e3,
           WINDOW_US / 1e6, worst[0] ? worst : "none",
           qim_hist_quantile(&ch->ack, .5) / 1e3, qim_hist_quantile(&ch->ack, .9) / 1e3,
           qim_hist_quantile(&ch->ack, .99) / 1e3, qim_hist_quantile(&ch->ack, 1) / 1e3,
           qim_hist_quantile(&ch->lag, .99) / 1e3, qim_hist_quantile(&ch->lag, 1) / 1e3);
  qim_bench_report(r, human);
}

static void close_all(chat *ch) {
  for (uint32_t q = 0; q < ch->nsenders; q++)
    if (!uv_is_closing((uv_handle_t *)&ch->senders[q].timer))
      uv_close((uv_handle_t *)&ch->senders[q].timer, NULL);
  uv_close((uv_handle_t *)&ch->tick, NULL);
  for (uint32_t i = 0; i < ch->nclients; i++) qim_bench_client_close(&ch->clients[i]);
  qim_bench_run_watchdog_stop(&ch->run);
  uv_close((uv_handle_t *)&ch->run.watchdog, NULL);
}

static void finish(chat *ch) {
  if (ch->phase == PH_DONE) return;
  ch->phase = PH_DONE;
  report(ch);
  close_all(ch);
}

static void on_fail(void *ud) {
  finish(ud);
}

/* ---- entry ------------------------------------------------------------------------------------
 */

/* Shapes the run from the options; 0, or -EINVAL with a message printed. */
static int shape(chat *ch, const qim_bench_opts *o) {
  ch->group_mode = strcmp(o->scenario, "group") == 0;
  if (ch->group_mode) {
    ch->gsize = o->group_size;
    ch->nconv = o->groups;
    ch->spg = o->senders;
    if (ch->gsize < 2 || ch->nconv < 1 || ch->spg < 1 || ch->spg > ch->gsize) {
      fprintf(stderr,
              "qim-bench: group needs --group-size >= 2, --groups >= 1 and "
              "1 <= --senders <= --group-size\n");
      return -EINVAL;
    }
  } else {
    ch->gsize = 2;
    ch->spg = 2;
    ch->nconv = o->users / 2;
    if (ch->nconv < 1) {
      fprintf(stderr, "qim-bench: p2p needs --users >= 2\n");
      return -EINVAL;
    }
  }
  uint64_t conns = (uint64_t)ch->nconv * ch->gsize;
  if (conns > QIM_BENCH_MAX_CONNS) {
    fprintf(stderr, "qim-bench: %llu connections is above the %d one process may hold\n",
            (unsigned long long)conns, QIM_BENCH_MAX_CONNS);
    return -EINVAL;
  }
  ch->nclients = (uint32_t)conns;
  ch->nsenders = ch->nconv * ch->spg;
  if (ch->nacct < ch->nclients) {
    fprintf(stderr,
            "qim-bench: %u accounts needed, %s has %zu (run `qim-bench accounts --count %u`)\n",
            ch->nclients, o->accounts_file, ch->nacct, ch->nclients);
    return -EINVAL;
  }
  return 0;
}

static void setup_senders(chat *ch) {
  for (uint32_t k = 0, q = 0; k < ch->nconv; k++)
    for (uint32_t j = 0; j < ch->spg; j++, q++) {
      sender *s = &ch->senders[q];
      s->ch = ch;
      s->q = q;
      s->conv = k;
      s->client = member(ch, k, j);
      /* In usr mode each side names the pair by the other's user id. */
      s->topic = ch->group_mode || !ch->o->via_usr ? ch->convs[k].topic
                                                   : ch->accts[member(ch, k, 1 - j)].uid;
      s->stopped = true;
      uv_timer_init(ch->run.loop, &s->timer);
      s->timer.data = s;
    }
}

int qim_bench_chat(const qim_bench_opts *o) {
  chat *ch = qim_calloc(1, sizeof *ch);
  ch->o = o;
  int rc = qim_bench_accounts_load(o->accounts_file, &ch->accts, &ch->nacct);
  if (rc) {
    fprintf(stderr, "qim-bench: cannot read accounts file %s: %s\n", o->accounts_file,
            rc == -EINVAL ? "malformed line" : strerror(-rc));
    qim_free(ch);
    return 2;
  }
  if (shape(ch, o) || qim_bench_run_init(&ch->run, o)) {
    qim_bench_accounts_free(ch->accts, ch->nacct);
    qim_free(ch);
    return 2;
  }
  ch->clients = qim_calloc(ch->nclients, sizeof *ch->clients);
  ch->inflight = qim_calloc(ch->nclients, sizeof *ch->inflight);
  ch->seen = qim_malloc((size_t)ch->nclients * ch->spg * sizeof *ch->seen);
  for (size_t i = 0; i < (size_t)ch->nclients * ch->spg; i++) qim_seen_init(&ch->seen[i]);
  ch->convs = qim_calloc(ch->nconv, sizeof *ch->convs);
  ch->senders = qim_calloc(ch->nsenders, sizeof *ch->senders);
  qim_u128 nonce = qim_u128_random();
  memcpy(ch->nonce, &nonce.hi, 8);
  ch->nonce[0] |= 1; /* never an all-zero cmid */
  qim_hist_init(&ch->lat);
  qim_hist_init(&ch->ack);
  qim_hist_init(&ch->lag);
  uv_timer_init(ch->run.loop, &ch->tick);
  ch->tick.data = ch;
  ch->run.on_fail = on_fail;
  ch->run.fail_ud = ch;
  setup_senders(ch);
  qim_bench_run_watchdog(&ch->run, o->setup_timeout_s,
                         "setup did not finish within --setup-timeout");
  start_phase(ch, PH_CONNECT);
  int status = qim_bench_run_loop(&ch->run);
  qim_bench_run_free(&ch->run);
  qim_bench_accounts_free(ch->accts, ch->nacct);
  qim_free(ch->clients);
  qim_free(ch->inflight);
  qim_free(ch->seen);
  qim_free(ch->convs);
  qim_free(ch->senders);
  qim_free(ch);
  return status;
}
