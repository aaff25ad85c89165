/*
 * test_net_handshake.c — the gateway's HTTP side over real sockets on 127.0.0.1:
 * the upgrade and every refusal status, API keys, per-IP limits, slowloris deadlines,
 * plain routes (also answered later, from the loop) and start-up errors.
 */
#include "testsupport.h"
/* testsupport first: cmocka needs its prerequisites before anything else */
#include <stdatomic.h>

#include "testsrv.h"
#include "wsclient.h"

static tsrv S;

static int setup(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  if (tsrv_start(&S, &cfg) || tsrv_run(&S)) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tsrv_stop(&S);
  return 0;
}

static char *roundtrip(wsc *c, const char *text) {
  int op;
  char *p;
  size_t n;
  if (wsc_send_text(c, text) || wsc_recv_data(c, &op, &p, &n, 3000)) return NULL;
  return p;
}

static void test_upgrade_succeeds_with_accept_key_and_tenant(void **state) {
  (void)state;
  wsc c;
  assert_int_equal(
      wsc_upgrade(&c, S.port, "/v0/channels?apikey=good",
                  "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"),
      101);
  assert_non_null(strstr(c.head, "Sec-WebSocket-Accept: " WSC_ACCEPT "\r\n"));
  assert_non_null(strstr(c.head, "Upgrade: websocket\r\n"));
  /* permessage-deflate is declined by not answering it. */
  assert_null(strstr(c.head, "Extensions"));
  WAIT_FOR(tsrv_nopen(&S) == 1, 2000);
  assert_int_equal(tsrv_nopen(&S), 1);
  char *r = roundtrip(&c, "tenant");
  assert_string_equal(r, "tenant:42");
  free(r);
  qim_net_stats st = tsrv_stats(&S);
  assert_int_equal(st.upgrades, 1);
  assert_int_equal(st.ws_conns, 1);
  wsc_close(&c);
}

static void test_apikey_header_selects_the_tenant(void **state) {
  (void)state;
  wsc c;
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels?apikey=bad", "X-Tinode-APIKey: other\r\n"),
                   101);
  char *r = roundtrip(&c, "tenant");
  assert_string_equal(r, "tenant:7");
  free(r);
  wsc_close(&c);
}

static void test_bad_or_missing_apikey_gets_403_json(void **state) {
  (void)state;
  const char *targets[] = {"/v0/channels?apikey=bad", "/v0/channels"};
  for (int i = 0; i < 2; i++) {
    wsc c;
    assert_int_equal(wsc_upgrade(&c, S.port, targets[i], NULL), 403);
    assert_non_null(strstr(c.head, "Content-Type: application/json\r\n"));
    char *body = wsc_read_body(&c, 2000);
    assert_string_equal(body, "{\"ctrl\":{\"code\":403,\"text\":\"valid API key required\"}}");
    free(body);
    wsc_close(&c);
  }
  assert_int_equal(tsrv_nopen(&S), 0);
  assert_int_equal(tsrv_stats(&S).http_rejected, 2);
}

static void test_unknown_path_is_404(void **state) {
  (void)state;
  wsc c;
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels/lp?apikey=good", NULL), 404);
  assert_true(wsc_wait_eof(&c, 2000));
  wsc_close(&c);
}

static void test_non_get_is_405(void **state) {
  (void)state;
  wsc c;
  assert_int_equal(
      wsc_request(
          &c, S.port,
          "POST /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
      405);
  assert_non_null(strstr(c.head, "Allow: GET\r\n"));
  wsc_close(&c);
}

static void test_wrong_or_missing_version_is_426_naming_13(void **state) {
  (void)state;
  const char *reqs[] = {
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: " WSC_KEY "\r\n\r\n",
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Key: " WSC_KEY "\r\n\r\n",
  };
  for (int i = 0; i < 2; i++) {
    wsc c;
    assert_int_equal(wsc_request(&c, S.port, reqs[i]), 426);
    assert_non_null(strstr(c.head, "Sec-WebSocket-Version: 13\r\n"));
    wsc_close(&c);
  }
}

static void test_missing_upgrade_parts_are_400(void **state) {
  (void)state;
  const char *reqs[] = {
      /* no key */
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n",
      /* a key that is not 16 bytes of base64 */
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
      "Upgrade\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: abc\r\n\r\n",
      /* a plain GET of the WebSocket endpoint */
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\n\r\n",
      /* not HTTP at all */
      "\x16\x03\x01\x02\xa5\x01\x03\x03\r\n\r\n",
  };
  for (int i = 0; i < 4; i++) {
    wsc c;
    assert_int_equal(wsc_request(&c, S.port, reqs[i]), 400);
    wsc_close(&c);
  }
  assert_int_equal(tsrv_nopen(&S), 0);
}

static void test_oversized_header_is_431(void **state) {
  (void)state;
  char *req = malloc(12000);
  int o = sprintf(req, "GET /v0/channels HTTP/1.1\r\nX-Pad: ");
  memset(req + o, 'p', 10000);
  strcpy(req + o + 10000, "\r\n\r\n");
  wsc c;
  assert_int_equal(wsc_request(&c, S.port, req), 431);
  wsc_close(&c);
  free(req);
}

static void test_frame_sent_behind_the_request_is_delivered(void **state) {
  (void)state;
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " WSC_KEY
                   "\r\n\r\n");
  n += (int)wsc_frame((uint8_t *)req + n, 0x81, true, "early", 5, WSC_LEN_AUTO);
  wsc c;
  assert_int_equal(wsc_connect(&c, S.port), 0);
  assert_int_equal(wsc_write(&c, req, (size_t)n), 0);
  assert_int_equal(wsc_read_response(&c, 3000), 101);
  int op;
  char *p;
  size_t len;
  assert_int_equal(wsc_recv_data(&c, &op, &p, &len, 3000), 0);
  assert_string_equal(p, "early");
  free(p);
  wsc_close(&c);
}

static void test_peer_address_is_reported(void **state) {
  (void)state;
  wsc c;
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels?apikey=good", NULL), 101);
  char *r = roundtrip(&c, "peer");
  assert_non_null(r);
  assert_memory_equal(r, "127.0.0.1:", 10);
  free(r);
  wsc_close(&c);
}

static void test_named_and_ipv6_hosts_are_served(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.host = "localhost"; /* resolved once by qim_net_new */
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(tsrv_run(&S), 0);
  wsc c;
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels?apikey=good", NULL), 101);
  wsc_close(&c);
  tsrv_stop(&S);

  cfg.host = "::1";
  cfg.threads = 2;
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(tsrv_run(&S), 0);
  assert_int_equal(wsc_connect6(&c, S.port), 0);
  const char req[] =
      "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " WSC_KEY "\r\n\r\n";
  assert_int_equal(wsc_write(&c, req, strlen(req)), 0);
  assert_int_equal(wsc_read_response(&c, 3000), 101);
  char *r = roundtrip(&c, "peer");
  assert_non_null(r);
  assert_memory_equal(r, "[::1]:", 6);
  free(r);
  static const uint8_t v6lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  assert_int_equal(qim_net_ip_count(S.net, v6lo), 1);
  wsc_close(&c);

  qim_net *net;
  cfg.host = "no-such-host.invalid";
  assert_int_equal(qim_net_new(&cfg, NULL, &net), -EINVAL);
}

static void test_slowloris_upgrade_is_cut_at_the_deadline(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.handshake_timeout = 200;
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(tsrv_run(&S), 0);
  wsc silent, dribble;
  assert_int_equal(wsc_connect(&silent, S.port), 0);
  assert_int_equal(wsc_connect(&dribble, S.port), 0);
  int64_t t0 = wsc_now_ms();
  const char *req = "GET /v0/channels?apikey=good HTTP/1.1\r\nHost: x\r\n";
  bool cut = false;
  /* One byte every 20 ms: steady progress must not extend the deadline. */
  for (size_t i = 0; req[i] && !cut; i++) {
    if (wsc_write(&dribble, req + i, 1) != 0) break;
    cut = wsc_wait_eof(&dribble, 20);
  }
  if (!cut) cut = wsc_wait_eof(&dribble, 2000);
  int64_t elapsed = wsc_now_ms() - t0;
  assert_true(cut);
  assert_true(elapsed >= 150 && elapsed < 1500);
  assert_true(wsc_wait_eof(&silent, 2000));
  WAIT_FOR(tsrv_stats(&S).handshake_timeouts == 2, 2000);
  assert_int_equal(tsrv_stats(&S).handshake_timeouts, 2);
  assert_int_equal(tsrv_nopen(&S), 0);
  wsc_close(&silent);
  wsc_close(&dribble);
}

static void test_per_ip_limit_answers_429(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.max_conns_per_ip = 2;
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(tsrv_run(&S), 0);
  wsc a, b, c;
  assert_int_equal(wsc_upgrade(&a, S.port, "/v0/channels?apikey=good", NULL), 101);
  assert_int_equal(wsc_upgrade(&b, S.port, "/v0/channels?apikey=good", NULL), 101);
  char *r = roundtrip(&b, "ip");
  assert_string_equal(r, "ip:2");
  free(r);
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels?apikey=good", NULL), 429);
  wsc_close(&c);
  static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, 0, 0, 1};
  WAIT_FOR(qim_net_ip_count(S.net, lo) == 2, 2000);
  assert_int_equal(qim_net_ip_count(S.net, lo), 2);
  /* Once a connection goes, the address may connect again. */
  wsc_close(&a);
  WAIT_FOR(tsrv_nclosed(&S) == 1 && qim_net_ip_count(S.net, lo) == 1, 2000);
  assert_int_equal(wsc_upgrade(&c, S.port, "/v0/channels?apikey=good", NULL), 101);
  wsc_close(&b);
  wsc_close(&c);
  WAIT_FOR(qim_net_ip_count(S.net, lo) == 0, 2000);
  assert_int_equal(qim_net_ip_count(S.net, lo), 0);
}

/* Routes for the plain-HTTP tests. */
static void route_health(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  (void)req, (void)ud;
  qim_http_reply_set(rep, 200, "text/plain", "ok\n", 3);
}

static void route_echo(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  char out[256];
  int n = snprintf(
      out, sizeof out, "%s %s %s auth=%s ud=%s body=%.*s", req->method, req->path, req->query,
      req->header[QIM_HTTP_H_AUTHORIZATION] ? req->header[QIM_HTTP_H_AUTHORIZATION] : "-",
      (const char *)ud, (int)req->body_len, req->body ? (const char *)req->body : "");
  qim_http_reply_set(rep, 201, "text/plain", out, (size_t)n);
}

static void test_routes_answer_plain_requests(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.max_body = 64;
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(qim_net_add_route(S.net, "/healthz", route_health, NULL), 0);
  assert_int_equal(qim_net_add_route(S.net, "/admin/echo", route_echo, "U"), 0);
  assert_int_equal(qim_net_add_route(S.net, "/healthz", route_health, NULL), -EEXIST);
  assert_int_equal(qim_net_add_route(S.net, "/v0/channels", route_health, NULL), -EEXIST);
  assert_int_equal(tsrv_run(&S), 0);
  assert_int_equal(qim_net_add_route(S.net, "/late", route_health, NULL), -EBUSY);

  wsc c;
  assert_int_equal(wsc_request(&c, S.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
  assert_non_null(strstr(c.head, "Content-Length: 3\r\n"));
  char *body = wsc_read_body(&c, 2000);
  assert_string_equal(body, "ok\n");
  free(body);
  wsc_close(&c);

  assert_int_equal(
      wsc_request(&c, S.port,
                  "POST /admin/echo?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
                  "Content-Length: 4\r\n\r\nping"),
      201);
  body = wsc_read_body(&c, 2000);
  assert_string_equal(body, "POST /admin/echo x=1 auth=Bearer t ud=U body=ping");
  free(body);
  wsc_close(&c);

  /* A body above max_body is refused before the route runs. */
  assert_int_equal(
      wsc_request(&c, S.port, "POST /admin/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65\r\n\r\n"),
      413);
  wsc_close(&c);
  assert_int_equal(tsrv_stats(&S).http_routed, 2);
}

/* A deferred route: the answer comes from a timer on the connection's loop; a second answer
 * to the same connection finds nothing waiting. */
typedef struct deferred {
  uv_timer_t t;
  uint64_t id;
} deferred;
static _Atomic int deferred_rc[2] = {1, 1};

static void deferred_closed(uv_handle_t *h) {
  free(h->data);
}

static void deferred_fire(uv_timer_t *t) {
  deferred *d = t->data;
  atomic_store(&deferred_rc[0], qim_net_http_answer(S.net, d->id, 202, "text/plain", "later\n", 6));
  atomic_store(&deferred_rc[1], qim_net_http_answer(S.net, d->id, 500, "text/plain", "again\n", 6));
  uv_close((uv_handle_t *)&d->t, deferred_closed);
}

static void route_deferred(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  (void)req, (void)ud;
  deferred *d = calloc(1, sizeof *d);
  d->id = rep->conn_id;
  d->t.data = d;
  uv_timer_init(qim_net_loop(S.net, rep->loop), &d->t);
  uv_timer_start(&d->t, deferred_fire, 20, 0);
  rep->defer = true;
}

static void test_deferred_route_answers_later_once(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(qim_net_add_route(S.net, "/later", route_deferred, NULL), 0);
  assert_int_equal(tsrv_run(&S), 0);
  wsc c;
  assert_int_equal(wsc_request(&c, S.port, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"), 202);
  char *body = wsc_read_body(&c, 2000);
  assert_string_equal(body, "later\n");
  free(body);
  wsc_close(&c);
  WAIT_FOR(atomic_load(&deferred_rc[1]) != 1, 2000);
  assert_int_equal(atomic_load(&deferred_rc[0]), 0);
  assert_int_equal(atomic_load(&deferred_rc[1]), -ENOENT);
  assert_int_equal(tsrv_stats(&S).http_routed, 1);
}

static void test_configuration_and_lifecycle_errors(void **state) {
  (void)state;
  qim_net_config cfg;
  tsrv_config(&cfg);
  qim_net *net;
  cfg.threads = 300;
  assert_int_equal(qim_net_new(&cfg, NULL, &net), -EINVAL);
  tsrv_config(&cfg);
  cfg.host = "not-an-address";
  assert_int_equal(qim_net_new(&cfg, NULL, &net), -EINVAL);
  tsrv_config(&cfg);
  cfg.ws_path = "v0/channels";
  assert_int_equal(qim_net_new(&cfg, NULL, &net), -EINVAL);
  tsrv_config(&cfg);
  cfg.max_out_bytes = 0;
  assert_int_equal(qim_net_new(&cfg, NULL, &net), -EINVAL);

  /* Not running yet: cross-thread requests are refused. */
  tsrv_config(&cfg);
  assert_int_equal(qim_net_new(&cfg, NULL, &net), 0);
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "x", 1);
  assert_int_equal(qim_net_send(net, 1, f), -ESHUTDOWN);
  assert_int_equal(qim_net_start(S.net), -EBUSY); /* the fixture's server runs already */

  /* A port held by a socket without SO_REUSEPORT cannot be shared. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 8), 0);
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  qim_net_free(net);
  tsrv_config(&cfg);
  cfg.port = ntohs(sa.sin_port);
  cfg.threads = 2;
  assert_int_equal(qim_net_new(&cfg, NULL, &net), 0);
  assert_int_equal(qim_net_start(net), -EADDRINUSE);
  assert_int_equal(qim_net_send(net, 1, f), -ESHUTDOWN);
  qim_net_free(net);
  close(fd);
  qim_ws_frame_unref(f);
  qim_net_free(NULL);
}

static void test_loop_hooks_run_once_per_loop(void **state) {
  (void)state;
  tsrv_stop(&S);
  qim_net_config cfg;
  tsrv_config(&cfg);
  cfg.threads = 2;
  assert_int_equal(tsrv_start(&S, &cfg), 0);
  assert_int_equal(tsrv_run(&S), 0);
  assert_int_equal(qim_net_loops(S.net), 2);
  assert_non_null(qim_net_loop(S.net, 1));
  assert_null(qim_net_loop(S.net, 2));
  qim_net_stop(S.net); /* joins the loop threads: their counts are final */
  qim_net_stop(S.net); /* idempotent */
  assert_int_equal(S.loop_starts, 2);
  assert_int_equal(S.loop_stops, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_upgrade_succeeds_with_accept_key_and_tenant, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_apikey_header_selects_the_tenant, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_or_missing_apikey_gets_403_json, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_path_is_404, setup, teardown),
      cmocka_unit_test_setup_teardown(test_non_get_is_405, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_or_missing_version_is_426_naming_13, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_missing_upgrade_parts_are_400, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized_header_is_431, setup, teardown),
      cmocka_unit_test_setup_teardown(test_frame_sent_behind_the_request_is_delivered, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_peer_address_is_reported, setup, teardown),
      cmocka_unit_test_setup_teardown(test_named_and_ipv6_hosts_are_served, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slowloris_upgrade_is_cut_at_the_deadline, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_per_ip_limit_answers_429, setup, teardown),
      cmocka_unit_test_setup_teardown(test_routes_answer_plain_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deferred_route_answers_later_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_configuration_and_lifecycle_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_loop_hooks_run_once_per_loop, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
