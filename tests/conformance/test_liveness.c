/*
 * test_liveness.c — no event loop ever waits for an fsync.
 *
 * The SQLite store is opened with a before_commit hook that sleeps 200 ms (a slow disk).
 * A libuv loop keeps 16 log appends in flight through a loop completion queue, and a
 * 10 ms repeating timer measures how late each tick fires. While commits are pending
 * (almost all the time), the largest gap between ticks must stay far below one fsync:
 * lateness < 100 ms — the loop never blocks on the store. A control run makes one tick
 * call the store synchronously (what a loop must never do) and requires the measurement
 * to see that stall, so the timing check is known to be able to fail.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "conf.h"
#include "qim/cq.h"
#include "testsupport.h"

#define SLOW_FSYNC_MS 200
#define TICK_MS 10
#define RUN_TICKS 150
#define IN_FLIGHT 16
#define MAX_LATENESS_MS 100

typedef struct live live;

typedef struct slot {
  qim_store_log_append_req req; /* first: the completion gets this pointer back */
  qim_store_log_append append;
  live *L;
  uint64_t submitted_ns;
} slot;

struct live {
  uv_loop_t loop;
  uv_timer_t tick;
  qim_cq *cq;
  qim_store *store;
  slot slots[IN_FLIGHT];
  uint64_t next_key;
  int in_flight, completed, failed;
  bool stopping;
  bool block_once; /* control: one tick waits for a commit, as a loop must never do */
  /* timer measurements */
  uint64_t last_tick_ns, max_gap_ns;
  int ticks, ticks_while_pending;
  uint64_t first_latency_ns;
};

static atomic_int commits;

/* The slow disk: every durable COMMIT waits this long on the writer thread. */
static void slow_fsync(void *ctx) {
  (void)ctx;
  struct timespec ts = {0, SLOW_FSYNC_MS * 1000000L};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&commits, 1);
}

static void submit(slot *s);

static void on_appended(qim_store_req *r) {
  slot *s = (slot *)r;
  live *L = s->L;
  L->in_flight--;
  L->completed++;
  if (r->status != 0) L->failed++;
  if (!L->first_latency_ns) L->first_latency_ns = uv_hrtime() - s->submitted_ns;
  if (!L->stopping) submit(s);
}

static void submit(slot *s) {
  live *L = s->L;
  memset(&s->req, 0, sizeof s->req);
  memset(&s->append, 0, sizeof s->append);
  uint64_t k = ++L->next_key;
  for (int i = 0; i < 8; i++) s->append.key[15 - i] = (uint8_t)(k >> (8 * i));
  s->append.stream = (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0};
  s->append.payload = (qim_bytes){(uint8_t *)"liveness", 8};
  s->req.req.cq = L->cq;
  s->req.req.done = on_appended;
  s->req.appends = &s->append;
  s->req.append_count = 1;
  s->submitted_ns = uv_hrtime();
  int rc = L->store->vt->logs.append(L->store, &s->req);
  assert_int_equal(rc, 0); /* the queue holds far more than IN_FLIGHT */
  L->in_flight++;
}

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_tick(uv_timer_t *t) {
  live *L = t->data;
  uint64_t now = uv_hrtime();
  uint64_t gap = now - L->last_tick_ns;
  if (gap > L->max_gap_ns) L->max_gap_ns = gap;
  L->last_tick_ns = now;
  L->ticks++;
  if (L->in_flight > 0) L->ticks_while_pending++;
  if (L->block_once && L->ticks == RUN_TICKS / 2) {
    qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .key = {0xff}};
    qim_store_log_append_req r = {.appends = &a, .append_count = 1};
    assert_int_equal(QIM_STORE_SYNC(L->store, logs.append, &r), 0);
  }
  if (L->ticks < RUN_TICKS) return;
  /* Enough: stop submitting; the loop keeps running until the last completion arrives. */
  L->stopping = true;
  uv_timer_stop(t);
  uv_close((uv_handle_t *)t, on_closed);
}

/* Runs the loop for RUN_TICKS ticks with IN_FLIGHT appends always pending. */
static void run_loop(live *L, bool block_once) {
  memset(L, 0, sizeof *L);
  L->block_once = block_once;
  atomic_store(&commits, 0);
  char *dir = qim_test_tmpdir("liveness"), url[4200];
  snprintf(url, sizeof url, "sqlite:%s/store.db", dir);
  qim_store_options opt = {.shards = {4, 2}, .before_commit = slow_fsync};
  assert_int_equal(qim_store_open(url, &opt, &L->store), 0);
  assert_int_equal(uv_loop_init(&L->loop), 0);
  assert_int_equal(qim_cq_new_loop(&L->loop, &L->cq), 0);
  uv_timer_init(&L->loop, &L->tick);
  L->tick.data = L;
  L->last_tick_ns = uv_hrtime();
  uv_timer_start(&L->tick, on_tick, TICK_MS, TICK_MS);
  for (int i = 0; i < IN_FLIGHT; i++) {
    L->slots[i].L = L;
    submit(&L->slots[i]);
  }
  /* Runs until the timer is closed and every completion has come back. */
  while (uv_run(&L->loop, UV_RUN_ONCE) && (L->in_flight > 0 || !L->stopping)) {
  }
  assert_int_equal(L->in_flight, 0);
  qim_store_close(L->store);
  qim_cq_free(L->cq);
  uv_run(&L->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&L->loop), 0);
  qim_test_rmtree(dir);
  printf("%s: ticks %d (%d with commits pending), max lateness %.1f ms, %d appends in %d commits, "
         "first completion after %.0f ms\n",
         block_once ? "control" : "async", L->ticks, L->ticks_while_pending,
         (L->max_gap_ns - TICK_MS * 1000000ULL) / 1e6, L->completed, atomic_load(&commits),
         L->first_latency_ns / 1e6);
  assert_int_equal(L->failed, 0);
  assert_true(L->first_latency_ns >= (SLOW_FSYNC_MS - 10) * 1000000ULL); /* the slow fsync was real */
  assert_true(atomic_load(&commits) >= 5);
  assert_true(L->completed > atomic_load(&commits)); /* group commit: several appends per fsync */
  assert_true(L->ticks_while_pending >= RUN_TICKS * 9 / 10);
}

static live runs[2];

static void test_loop_timer_stays_on_time_while_fsync_is_slow(void **state) {
  (void)state;
  run_loop(&runs[0], false);
  assert_true(runs[0].max_gap_ns < (TICK_MS + MAX_LATENESS_MS) * 1000000ULL);
}

static void test_synchronous_call_on_the_loop_is_seen_as_a_stall(void **state) {
  (void)state;
  run_loop(&runs[1], true);
  assert_true(runs[1].max_gap_ns >= (TICK_MS + SLOW_FSYNC_MS - 10) * 1000000ULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loop_timer_stays_on_time_while_fsync_is_slow),
      cmocka_unit_test(test_synchronous_call_on_the_loop_is_seen_as_a_stall),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
