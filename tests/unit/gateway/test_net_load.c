/*
 * test_net_load.c — the gateway under more than one client: slow consumers, many
 * connections over two loops, cross-thread sends and closes, the bounded inbox, idle
 * memory per connection and shutdown with connections open.
 */
#include "testsupport.h"
/* testsupport first: cmocka needs its prerequisites before anything else */
#include <stdatomic.h>

#include "testsrv.h"
#include "wsclient.h"

static tsrv S;

static int start_cfg(const qim_net_config *cfg) {
  return tsrv_start(&S, cfg) || tsrv_run(&S) ? -1 : 0;
}

static int setup(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.threads = 2;
  return start_cfg(&cfg);
}

static int teardown(void **state) {
  (void)state;
  tsrv_stop(&S);
  return 0;
}

static void restart(const qim_net_config *cfg) {
  tsrv_stop(&S);
  assert_int_equal(start_cfg(cfg), 0);
}

/* Opens a WebSocket and returns its server-side id (the n-th open overall). */
static uint64_t open_ws(wsc *c) {
  int before = tsrv_nopen(&S);
  assert_int_equal(wsc_upgrade(c, S.port, "/v0/channels?apikey=good", NULL), 101);
  WAIT_FOR(tsrv_nopen(&S) > before, 2000);
  assert_int_equal(tsrv_nopen(&S), before + 1);
  return tsrv_open_id(&S, before);
}

static void expect_text(wsc *c, const char *want) {
  int op;
  char *p = NULL;
  size_t n;
  assert_int_equal(wsc_recv_data(c, &op, &p, &n, 5000), 0);
  assert_int_equal(op, 0x1);
  assert_string_equal(p, want);
  free(p);
}

/* ---- slow consumer --------------------------------------------------------------------------- */

typedef struct reader {
  wsc *c;
  atomic_int got;
  atomic_int target; /* stop once this many frames arrived */
  size_t bad;        /* frames of the wrong size */
} reader;

static void *read_frames(void *arg) {
  reader *r = arg;
  int64_t quiet_since = wsc_now_ms();
  while (atomic_load(&r->got) < atomic_load(&r->target) && wsc_now_ms() - quiet_since < 10000) {
    int op;
    char *p;
    size_t n;
    if (wsc_recv_data(r->c, &op, &p, &n, 100) != 0) continue;
    if (n != 65536) r->bad++;
    free(p);
    atomic_fetch_add(&r->got, 1);
    quiet_since = wsc_now_ms();
  }
  return NULL;
}

static void test_slow_consumer_is_dropped_while_others_keep_receiving(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.max_out_bytes = 256 * 1024;
  restart(&cfg);
  wsc slow, fast;
  uint64_t slow_id = open_ws(&slow);
  uint64_t fast_id = open_ws(&fast);
  reader r = {.c = &fast};
  atomic_init(&r.got, 0);
  atomic_init(&r.target, 1 << 30);
  pthread_t th;
  pthread_create(&th, NULL, read_frames, &r);

  char *payload = malloc(65536);
  memset(payload, 'd', 65536);
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, payload, 65536);
  free(payload);
  int sent_fast = 0;
  /* `slow` never reads: after the kernel buffers fill, its queue passes 256 KB. */
  for (int i = 0; i < 4000 && tsrv_close_code(&S, slow_id) == -1; i++) {
    /* Pace to the healthy reader (at most 2 frames in flight for it), however slow
     * the build is; the non-reader gets the same frames and cannot keep up. */
    WAIT_FOR(sent_fast - atomic_load(&r.got) <= 2, 5000);
    while (qim_net_send(S.net, slow_id, f) == -EAGAIN) usleep(1000);
    while (qim_net_send(S.net, fast_id, f) == -EAGAIN) usleep(1000);
    sent_fast++;
  }
  qim_ws_frame_unref(f);
  atomic_store(&r.target, sent_fast);
  pthread_join(th, NULL);

  assert_int_equal(tsrv_close_code(&S, slow_id), 1008);
  assert_int_equal(tsrv_stats(&S).slow_consumers, 1);
  assert_int_equal(atomic_load(&r.got), sent_fast);
  assert_int_equal(r.bad, 0);
  assert_int_equal(tsrv_close_code(&S, fast_id), -1);
  assert_int_equal(wsc_send_text(&fast, "still open"), 0);
  expect_text(&fast, "still open");
  wsc_close(&slow);
  wsc_close(&fast);
}

static void test_handler_flood_hits_the_frame_limit(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.max_out_frames = 64;
  restart(&cfg);
  wsc c;
  uint64_t id = open_ws(&c);
  /* 5000 frames of 4 KB from inside on_message: far past 64 queued frames. */
  assert_int_equal(wsc_send_text(&c, "flood:5000:4096"), 0);
  WAIT_FOR(tsrv_close_code(&S, id) != -1, 5000);
  assert_int_equal(tsrv_close_code(&S, id), 1008);
  assert_int_equal(tsrv_stats(&S).slow_consumers, 1);
  wsc_close(&c);
}

/* ---- many connections ------------------------------------------------------------------------ */

#define MANY 200

static void test_many_connections_spread_over_two_loops(void **state) {
  (void)state;
  static wsc cs[MANY];
  for (int i = 0; i < MANY; i++)
    assert_int_equal(wsc_upgrade(&cs[i], S.port, "/v0/channels?apikey=good", NULL), 101);
  WAIT_FOR(tsrv_nopen(&S) == MANY, 5000);
  assert_int_equal(tsrv_nopen(&S), MANY);
  qim_net_stats l0, l1;
  qim_net_loop_stats(S.net, 0, &l0);
  qim_net_loop_stats(S.net, 1, &l1);
  assert_int_equal(l0.ws_conns + l1.ws_conns, MANY);
  assert_true(l0.ws_conns > 0 && l1.ws_conns > 0); /* SO_REUSEPORT spread them */
  for (int i = 0; i < MANY; i++) {
    char msg[32];
    snprintf(msg, sizeof msg, "client %d", i);
    assert_int_equal(wsc_send_text(&cs[i], msg), 0);
  }
  for (int i = 0; i < MANY; i++) {
    char msg[32];
    snprintf(msg, sizeof msg, "client %d", i);
    expect_text(&cs[i], msg);
  }
  for (int i = 0; i < MANY; i++) wsc_close(&cs[i]);
  WAIT_FOR(tsrv_nclosed(&S) == MANY && tsrv_stats(&S).conns == 0, 5000);
  assert_int_equal(tsrv_nclosed(&S), MANY);
  qim_net_stats st = tsrv_stats(&S);
  assert_int_equal(st.conns, 0);
  assert_int_equal(st.ws_conns, 0);
  assert_int_equal(st.accepted, MANY);
}

/* ---- cross-thread requests ------------------------------------------------------------------- */

static void test_cross_thread_sends_and_closes_reach_connections(void **state) {
  (void)state;
  wsc cs[3];
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) ids[i] = open_ws(&cs[i]);
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "push", 4);
  assert_int_equal(qim_net_send(S.net, ids[0], f), 0);
  expect_text(&cs[0], "push");
  qim_ws_frame_unref(f);

  /* One frame, three connections, no copy: every one receives the same bytes. */
  f = qim_ws_frame_new(QIM_WS_OP_TEXT, "fanout", 6);
  assert_int_equal(qim_net_send_many(S.net, ids, 3, f), 3);
  qim_ws_frame_unref(f);
  for (int i = 0; i < 3; i++) expect_text(&cs[i], "fanout");

  /* From the owning loop's own thread the send is direct. */
  assert_int_equal(wsc_send_text(&cs[2], "selfsend"), 0);
  expect_text(&cs[2], "self");

  assert_int_equal(qim_net_close_conn(S.net, ids[1], 4003), 0);
  assert_int_equal(wsc_expect_close(&cs[1], 3000), 4003);
  assert_int_equal(wsc_send_close(&cs[1], 4003), 0);
  WAIT_FOR(tsrv_close_code(&S, ids[1]) == 4003, 2000);
  assert_int_equal(tsrv_close_code(&S, ids[1]), 4003);
  for (int i = 0; i < 3; i++) wsc_close(&cs[i]);
}

static void test_send_to_a_closed_connection_is_dropped(void **state) {
  (void)state;
  wsc c;
  uint64_t id = open_ws(&c);
  wsc_close(&c);
  WAIT_FOR(tsrv_nclosed(&S) == 1, 2000);
  assert_int_equal(tsrv_close_code(&S, id), 1006); /* TCP ended without a close frame */
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "late", 4);
  assert_int_equal(qim_net_send(S.net, id, f), 0);
  WAIT_FOR(tsrv_stats(&S).sends_dropped == 1, 2000);
  assert_int_equal(tsrv_stats(&S).sends_dropped, 1);
  /* Ids that name no loop are refused at once. */
  assert_int_equal(qim_net_send(S.net, 0, f), -ENOENT);
  assert_int_equal(qim_net_send(S.net, (uint64_t)7 << 56 | 1, f), -ENOENT);
  assert_int_equal(qim_net_close_conn(S.net, id, 1000), 0);
  /* A new connection in the same slot gets a different id. */
  uint64_t id2 = open_ws(&c);
  assert_true(id2 != id);
  assert_int_equal(qim_net_send(S.net, id, f), 0);
  assert_int_equal(qim_net_send(S.net, id2, f), 0);
  expect_text(&c, "late");
  qim_ws_frame_unref(f);
  wsc_close(&c);
}

static void test_full_inbox_refuses_with_eagain(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.inbox_capacity = 4;
  restart(&cfg);
  wsc c;
  uint64_t id = open_ws(&c);
  assert_int_equal(wsc_send_text(&c, "sleep:400"), 0);
  WAIT_FOR(tsrv_nmessages(&S) == 1, 2000); /* the loop is now asleep inside on_message */
  usleep(20000);
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "q", 1);
  for (int i = 0; i < 4; i++) assert_int_equal(qim_net_send(S.net, id, f), 0);
  assert_int_equal(qim_net_send(S.net, id, f), -EAGAIN);
  assert_int_equal(qim_net_send_many(S.net, &id, 1, f), 0);
  qim_ws_frame_unref(f);
  expect_text(&c, "slept");
  for (int i = 0; i < 4; i++) expect_text(&c, "q");
  assert_int_equal(tsrv_stats(&S).inbox_full, 2);
  wsc_close(&c);
}

/* ---- stalls ---------------------------------------------------------------------------------- */

/* A handler that blocks its loop 80 ms: that iteration is one stall, logged with about
 * its length (libuv's loop clock has millisecond steps, so at least 75) and counted; every
 * stall counted meanwhile has its line. */
static void test_a_loop_iteration_of_50_ms_is_logged_and_counted(void **state) {
  (void)state;
  qim_test_log_start(QIM_LOG_WARN);
  uint64_t base = tsrv_stats(&S).loop_stalls;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_text(&c, "hello"), 0);
  expect_text(&c, "hello");
  uint64_t before = tsrv_stats(&S).loop_stalls;
  assert_int_equal(wsc_send_text(&c, "sleep:80"), 0);
  expect_text(&c, "slept");
  WAIT_FOR(tsrv_stats(&S).loop_stalls > before, 2000);
  uint64_t stalls = tsrv_stats(&S).loop_stalls;
  assert_true(stalls > before);
  assert_true(qim_test_log_count("gateway.loop_stall", NULL, NULL) >= stalls - base);
  /* the sleep's is the longest (a busy machine may add shorter ones of its own) */
  assert_true(qim_test_log_max("gateway.loop_stall", " ms=") >= 75.0);
  wsc_close(&c);
  qim_test_log_stop();
}

/* ---- memory and shutdown --------------------------------------------------------------------- */

#define IDLE_CONNS 100

static void test_idle_connection_costs_under_1kb(void **state) {
  (void)state;
  static wsc cs[IDLE_CONNS];
  /* Warm up the per-loop tables once so their growth is not charged to the sample. */
  for (int i = 0; i < IDLE_CONNS; i++) open_ws(&cs[i]);
  for (int i = 0; i < IDLE_CONNS; i++) wsc_close(&cs[i]);
  WAIT_FOR(tsrv_stats(&S).conns == 0, 3000);
  size_t base = qim_mem_used();
  for (int i = 0; i < IDLE_CONNS; i++) open_ws(&cs[i]);
  WAIT_FOR(tsrv_stats(&S).ws_conns == IDLE_CONNS, 3000);
  usleep(20000);
  size_t per = (qim_mem_used() - base) / IDLE_CONNS;
  print_message("idle WebSocket connection: %zu bytes through the qim allocator\n", per);
  assert_true(per < 1024);
  for (int i = 0; i < IDLE_CONNS; i++) wsc_close(&cs[i]);
}

static void test_stop_closes_open_connections_going_away(void **state) {
  (void)state;
  wsc cs[3];
  for (int i = 0; i < 3; i++) open_ws(&cs[i]);
  wsc half;
  assert_int_equal(wsc_connect(&half, S.port), 0);
  assert_int_equal(wsc_write(&half, "GET /v0/ch", 10), 0);
  WAIT_FOR(tsrv_stats(&S).conns == 4, 2000);
  qim_net_stop(S.net);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(wsc_expect_close(&cs[i], 2000), 1001);
    assert_true(wsc_wait_eof(&cs[i], 2000));
    assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, i)), 1001);
    wsc_close(&cs[i]);
  }
  assert_true(wsc_wait_eof(&half, 2000));
  wsc_close(&half);
  assert_int_equal(tsrv_nclosed(&S), 3); /* on_close only for upgraded connections */
  qim_net_stats st = tsrv_stats(&S);
  assert_int_equal(st.conns, 0);
  assert_int_equal(S.loop_stops, 2);
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "x", 1);
  assert_int_equal(qim_net_send(S.net, tsrv_open_id(&S, 0), f), -ESHUTDOWN);
  assert_int_equal(qim_net_send_many(S.net, &S.open_ids[0], 1, f), -ESHUTDOWN);
  qim_ws_frame_unref(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_slow_consumer_is_dropped_while_others_keep_receiving,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_handler_flood_hits_the_frame_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_connections_spread_over_two_loops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cross_thread_sends_and_closes_reach_connections, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_send_to_a_closed_connection_is_dropped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_inbox_refuses_with_eagain, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_loop_iteration_of_50_ms_is_logged_and_counted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_idle_connection_costs_under_1kb, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop_closes_open_connections_going_away, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
