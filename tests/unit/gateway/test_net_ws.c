/*
 * test_net_ws.c — WebSocket framing through a real connection: masking, length forms,
 * fragmentation with control frames between, each protocol error and its close code,
 * both close handshakes, idle pings and the idle timeout.
 */
#include "testsupport.h"
/* testsupport first: cmocka needs its prerequisites before anything else */
#include "testsrv.h"
#include "wsclient.h"

#define LIMIT 100000

static tsrv S;

static int start_with(uint32_t ping, uint32_t idle) {
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.max_message = LIMIT;
  cfg.ping_interval = ping;
  cfg.idle_timeout = idle;
  return tsrv_start(&S, &cfg) || tsrv_run(&S) ? -1 : 0;
}

static int setup(void **state) {
  (void)state;
  return start_with(50000, 55000);
}

static int teardown(void **state) {
  (void)state;
  tsrv_stop(&S);
  return 0;
}

static void open_ws(wsc *c) {
  assert_int_equal(wsc_upgrade(c, S.port, "/v0/channels?apikey=good", NULL), 101);
}

/* Expects one data frame with opcode op and payload `want` (want_len bytes). */
static void expect_data(wsc *c, int op, const void *want, size_t want_len) {
  int got_op;
  char *p = NULL;
  size_t n;
  assert_int_equal(wsc_recv_data(c, &got_op, &p, &n, 5000), 0);
  assert_int_equal(got_op, op);
  assert_int_equal(n, want_len);
  assert_memory_equal(p, want, want_len);
  free(p);
}

/* The server answers a violation with `code`, then ends TCP; on_close reports it. */
static void expect_failure(wsc *c, int code) {
  assert_int_equal(wsc_expect_close(c, 3000), code);
  assert_true(wsc_wait_eof(c, 3000));
  /* Our FIN ends the server's lingering close at once (well before close_timeout). */
  int64_t t0 = wsc_now_ms();
  shutdown(c->fd, SHUT_WR);
  WAIT_FOR(tsrv_nclosed(&S) == 1, 3000);
  assert_true(wsc_now_ms() - t0 < 500);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 0)), code);
  wsc_close(c);
}

static void test_masked_text_is_echoed(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_text(&c, "hello"), 0);
  expect_data(&c, 0x1, "hello", 5);
  /* The echo can overtake the counter update: wait for it. */
  WAIT_FOR(tsrv_stats(&S).frames_out >= 1, 2000);
  qim_net_stats st = tsrv_stats(&S);
  assert_true(st.frames_in >= 1 && st.frames_out >= 1);
  assert_true(st.bytes_in > 0 && st.bytes_out > 0);
  wsc_close(&c);
}

static void test_probe_text_1_is_delivered_as_text(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_text(&c, "1"), 0);
  expect_data(&c, 0x1, "1", 1);
  pthread_mutex_lock(&S.mu);
  assert_string_equal(S.last_msg, "1");
  pthread_mutex_unlock(&S.mu);
  wsc_close(&c);
}

static void test_binary_is_delivered_as_binary(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send(&c, 0x2, "\x00\xff\x10", 3), 0);
  expect_data(&c, 0x2, "\x00\xff\x10", 3);
  wsc_close(&c);
}

static void test_16_and_64_bit_lengths_round_trip(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  size_t big = 70000;
  char *p = malloc(big);
  for (size_t i = 0; i < big; i++) p[i] = (char)('a' + i % 26);
  assert_int_equal(wsc_send_raw(&c, 0x81, true, p, 300, WSC_LEN_16), 0);
  expect_data(&c, 0x1, p, 300);
  assert_int_equal(wsc_send_raw(&c, 0x81, true, p, big, WSC_LEN_64), 0);
  expect_data(&c, 0x1, p, big);
  assert_int_equal(wsc_send_raw(&c, 0x81, true, p, 5, WSC_LEN_64), 0);
  expect_data(&c, 0x1, p, 5);
  free(p);
  wsc_close(&c);
}

static void test_fragments_with_a_ping_between_are_joined(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_raw(&c, 0x01, true, "Hel", 3, WSC_LEN_AUTO), 0);
  assert_int_equal(wsc_send_raw(&c, 0x89, true, "are you there", 13, WSC_LEN_AUTO), 0);
  assert_int_equal(wsc_send_raw(&c, 0x00, true, "lo, ", 4, WSC_LEN_AUTO), 0);
  assert_int_equal(wsc_send_raw(&c, 0x80, true, "world", 5, WSC_LEN_AUTO), 0);
  int op;
  char *p = NULL;
  size_t n;
  /* The pong comes first: the message is only complete with its last fragment. */
  assert_int_equal(wsc_recv(&c, &op, &p, &n, 3000), 0);
  assert_int_equal(op, 0xA);
  assert_string_equal(p, "are you there");
  free(p);
  expect_data(&c, 0x1, "Hello, world", 12);
  wsc_close(&c);
}

static void test_unmasked_frame_closes_1002(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_raw(&c, 0x81, false, "hi", 2, WSC_LEN_AUTO), 0);
  expect_failure(&c, 1002);
  assert_int_equal(tsrv_stats(&S).protocol_errors, 1);
}

static void test_unknown_opcode_closes_1002(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_raw(&c, 0x83, true, "hi", 2, WSC_LEN_AUTO), 0);
  expect_failure(&c, 1002);
}

static void test_reserved_bit_closes_1002(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  /* RSV1 is what permessage-deflate would set; it was never negotiated. */
  assert_int_equal(wsc_send_raw(&c, 0xC1, true, "hi", 2, WSC_LEN_AUTO), 0);
  expect_failure(&c, 1002);
}

static void test_oversized_message_closes_1009(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  /* Just the header: the server must not wait for 100 001 payload bytes. */
  uint8_t hdr[14] = {0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0x01, 0x86, 0xA1, 1, 2, 3, 4};
  assert_int_equal(wsc_write(&c, hdr, sizeof hdr), 0);
  expect_failure(&c, 1009);
}

static void test_fragments_over_the_limit_close_1009(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  char *p = calloc(1, 60000);
  memset(p, 'x', 60000);
  assert_int_equal(wsc_send_raw(&c, 0x01, true, p, 60000, WSC_LEN_AUTO), 0);
  assert_int_equal(wsc_send_raw(&c, 0x80, true, p, 60000, WSC_LEN_AUTO), 0);
  free(p);
  expect_failure(&c, 1009);
}

static void test_invalid_utf8_closes_1007(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send(&c, 0x1, "ok\xc0\xaf", 4), 0);
  expect_failure(&c, 1007);
}

static void test_client_close_is_echoed_and_tcp_ends(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_close(&c, 1000), 0);
  assert_int_equal(wsc_expect_close(&c, 3000), 1000);
  assert_true(wsc_wait_eof(&c, 500)); /* the server closes first, without waiting */
  WAIT_FOR(tsrv_nclosed(&S) == 1, 2000);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 0)), 1000);
  wsc_close(&c);

  /* An empty close is answered with an empty close; on_close reports 1005. */
  open_ws(&c);
  assert_int_equal(wsc_send_close(&c, 0), 0);
  assert_int_equal(wsc_expect_close(&c, 3000), 1005);
  assert_true(wsc_wait_eof(&c, 500));
  WAIT_FOR(tsrv_nclosed(&S) == 2, 2000);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 1)), 1005);
  wsc_close(&c);
}

static void test_server_close_handshake_completes(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  assert_int_equal(wsc_send_text(&c, "close:4001"), 0);
  int op;
  char *p = NULL;
  size_t n;
  assert_int_equal(wsc_recv(&c, &op, &p, &n, 3000), 0);
  assert_int_equal(op, 0x8);
  assert_int_equal(n, 5);
  assert_memory_equal(p,
                      "\x0f\xa1"
                      "bye",
                      5);
  free(p);
  /* Messages sent after the server's close are not delivered. */
  assert_int_equal(wsc_send_text(&c, "after"), 0);
  assert_int_equal(wsc_send_close(&c, 4001), 0);
  int64_t t0 = wsc_now_ms();
  assert_true(wsc_wait_eof(&c, 3000));
  assert_true(wsc_now_ms() - t0 < 800); /* well inside close_timeout (1 s) */
  WAIT_FOR(tsrv_nclosed(&S) == 1, 2000);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 0)), 4001);
  assert_int_equal(tsrv_nmessages(&S), 1);
  wsc_close(&c);
}

static void test_unanswered_server_close_ends_at_close_timeout(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  int64_t t0 = wsc_now_ms();
  assert_int_equal(wsc_send_text(&c, "close:4002"), 0);
  assert_int_equal(wsc_expect_close(&c, 3000), 4002);
  /* We never answer and never close: the server gives up after close_timeout. */
  WAIT_FOR(tsrv_nclosed(&S) == 1, 3000);
  int64_t elapsed = wsc_now_ms() - t0;
  assert_int_equal(tsrv_nclosed(&S), 1);
  assert_true(elapsed >= 900 && elapsed < 2500);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 0)), 4002);
  wsc_close(&c);
}

static void test_idle_connection_is_pinged_then_dropped(void **state) {
  (void)state;
  tsrv_stop(&S);
  assert_int_equal(start_with(100, 400), 0);
  wsc live, silent;
  open_ws(&live);
  open_ws(&silent);
  /* `live` answers pings for 1.2 s (three idle timeouts); `silent` never sends. */
  int64_t end = wsc_now_ms() + 1200;
  int pings = 0;
  while (wsc_now_ms() < end) {
    int op;
    char *p;
    size_t n;
    int rc = wsc_recv(&live, &op, &p, &n, 50);
    if (rc == 0) {
      if (op == 0x9) pings++, wsc_send(&live, 0xA, p, n);
      free(p);
    } else {
      assert_int_equal(rc, -ETIMEDOUT);
    }
  }
  assert_true(pings >= 2);
  int op;
  char *p = NULL;
  size_t n;
  assert_int_equal(wsc_recv(&silent, &op, &p, &n, 1000), 0);
  assert_int_equal(op, 0x9); /* it was pinged first */
  free(p);
  assert_int_equal(wsc_expect_close(&silent, 1000), 1001);
  assert_true(wsc_wait_eof(&silent, 1000));
  qim_net_stats st = tsrv_stats(&S);
  assert_int_equal(st.idle_timeouts, 1);
  assert_true(st.pings_sent >= 3);
  assert_int_equal(tsrv_close_code(&S, tsrv_open_id(&S, 1)), 1001);
  /* The live one is still fine. */
  assert_int_equal(wsc_send_text(&live, "still here"), 0);
  expect_data(&live, 0x1, "still here", 10);
  wsc_close(&live);
  wsc_close(&silent);
}

static void test_idle_buffers_are_released_after_a_split_message(void **state) {
  (void)state;
  wsc c;
  open_ws(&c);
  WAIT_FOR(tsrv_nopen(&S) == 1, 2000);
  size_t base = qim_mem_used();
  /* A 50 000-byte message in two writes, so the server has to reassemble it. */
  char *p = malloc(50000);
  memset(p, 'm', 50000);
  uint8_t *frame = malloc(50014);
  size_t n = wsc_frame(frame, 0x81, true, p, 50000, WSC_LEN_AUTO);
  assert_int_equal(wsc_write(&c, frame, 1000), 0);
  usleep(50000);
  assert_true(qim_mem_used() > base); /* the partial message is held */
  assert_int_equal(wsc_write(&c, frame + 1000, n - 1000), 0);
  expect_data(&c, 0x1, p, 50000);
  /* Delivered and echoed: nothing stays allocated for this connection. */
  WAIT_FOR(qim_mem_used() == base, 2000);
  assert_int_equal(qim_mem_used(), base);
  free(frame);
  free(p);
  wsc_close(&c);
}

/* `count` frames sent by the handler in one callback reach the client, and the server
 * offered them to the kernel in `writes` system calls. */
static void flood_in_writes(unsigned count, uint64_t writes) {
  wsc c;
  open_ws(&c);
  WAIT_FOR(tsrv_nopen(&S) == 1, 2000);
  uint64_t before = tsrv_stats(&S).writes;
  char cmd[32];
  snprintf(cmd, sizeof cmd, "flood:%u:100", count);
  assert_int_equal(wsc_send_text(&c, cmd), 0);
  char want[100];
  memset(want, 'f', sizeof want);
  for (unsigned i = 0; i < count; i++) expect_data(&c, 0x1, want, sizeof want);
  assert_int_equal(tsrv_stats(&S).writes - before, writes);
  wsc_close(&c);
}

static void test_frames_sent_in_one_callback_leave_in_one_write(void **state) {
  (void)state;
  flood_in_writes(10, 1);
}

static void test_a_cork_is_written_every_sixteen_frames(void **state) {
  (void)state;
  flood_in_writes(40, 3); /* 16 + 16 at once, the last 8 at the loop's check */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_masked_text_is_echoed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_probe_text_1_is_delivered_as_text, setup, teardown),
      cmocka_unit_test_setup_teardown(test_binary_is_delivered_as_binary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_16_and_64_bit_lengths_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fragments_with_a_ping_between_are_joined, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_unmasked_frame_closes_1002, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_opcode_closes_1002, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reserved_bit_closes_1002, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized_message_closes_1009, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fragments_over_the_limit_close_1009, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid_utf8_closes_1007, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_close_is_echoed_and_tcp_ends, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_close_handshake_completes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unanswered_server_close_ends_at_close_timeout, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_idle_connection_is_pinged_then_dropped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_frames_sent_in_one_callback_leave_in_one_write, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_cork_is_written_every_sixteen_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_buffers_are_released_after_a_split_message, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
