/*
 * test_http.c — the upgrade request parser and handshake checks on plain buffers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/http.h"
#include "qim/err.h"
#include "qim/mem.h"
#include "qim/websocket.h"
#include "testsupport.h"

#define KEY "dGhlIHNhbXBsZSBub25jZQ=="

static const char upgrade_req[] =
    "GET /v0/channels?apikey=AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K HTTP/1.1\r\n"
    "Host: localhost:6060\r\n"
    "Connection: Upgrade\r\n"
    "Upgrade: websocket\r\n"
    "Sec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Key: " KEY
    "\r\n"
    "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    "\r\n";

/* Parses `req` in pieces of `step` bytes (0 = whole); returns feed's final result. */
static int parse(qim_http_parser *p, const char *req, size_t len, size_t step,
                 size_t *consumed_total) {
  qim_http_parser_init(p, 8192, 1024);
  if (!step) step = len;
  int rc = QIM_AGAIN;
  size_t total = 0;
  for (size_t o = 0; o < len && rc == QIM_AGAIN; o += step) {
    size_t used;
    rc = qim_http_parser_feed(p, req + o, len - o < step ? len - o : step, &used);
    total += used;
  }
  if (consumed_total) *consumed_total = total;
  return rc;
}

static void test_accept_key_matches_rfc_example(void **state) {
  (void)state;
  char out[QIM_WS_ACCEPT_LEN + 1];
  qim_websocket_accept(KEY, out);
  assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void test_upgrade_request_is_parsed_whole_and_byte_by_byte(void **state) {
  (void)state;
  for (size_t step = 0; step <= 1; step++) {
    qim_http_parser p;
    size_t consumed;
    assert_int_equal(parse(&p, upgrade_req, strlen(upgrade_req), step, &consumed), 0);
    assert_int_equal(consumed, strlen(upgrade_req));
    const qim_http_request *r = qim_http_parser_request(&p);
    assert_non_null(r);
    assert_string_equal(r->method, "GET");
    assert_string_equal(r->path, "/v0/channels");
    assert_string_equal(r->query, "apikey=AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K");
    assert_string_equal(r->apikey, "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K");
    assert_string_equal(r->header[QIM_HTTP_H_HOST], "localhost:6060");
    assert_string_equal(r->header[QIM_HTTP_H_WS_KEY], KEY);
    assert_string_equal(r->header[QIM_HTTP_H_WS_EXTENSIONS],
                        "permessage-deflate; client_max_window_bits");
    assert_null(r->header[QIM_HTTP_H_AUTHORIZATION]);
    assert_null(r->body);
    assert_int_equal(qim_http_upgrade_status(r), 101);
    qim_http_parser_free(&p);
  }
}

static void test_apikey_header_wins_over_query(void **state) {
  (void)state;
  const char req[] =
      "GET /v0/channels?apikey=fromquery HTTP/1.1\r\nX-Tinode-APIKey: fromheader \r\n\r\n";
  qim_http_parser p;
  assert_int_equal(parse(&p, req, strlen(req), 0, NULL), 0);
  assert_string_equal(qim_http_parser_request(&p)->apikey, "fromheader");
  qim_http_parser_free(&p);
  const char req2[] = "GET /v0/channels?x=1&apikey=a%2Bb+c&y HTTP/1.1\r\n\r\n";
  assert_int_equal(parse(&p, req2, strlen(req2), 0, NULL), 0);
  assert_string_equal(qim_http_parser_request(&p)->apikey, "a+b c");
  qim_http_parser_free(&p);
  const char req3[] = "GET /v0/channels HTTP/1.1\r\n\r\n";
  assert_int_equal(parse(&p, req3, strlen(req3), 0, NULL), 0);
  assert_null(qim_http_parser_request(&p)->apikey);
  qim_http_parser_free(&p);
}

/* Parses a request built from `method` and `headers` and returns its upgrade status. */
static int status_of(const char *method, const char *version, const char *headers) {
  char req[1024];
  snprintf(req, sizeof req, "%s /v0/channels %s\r\n%s\r\n", method, version, headers);
  qim_http_parser p;
  int rc = parse(&p, req, strlen(req), 0, NULL);
  assert_int_equal(rc, 0);
  int st = qim_http_upgrade_status(qim_http_parser_request(&p));
  qim_http_parser_free(&p);
  return st;
}

#define GOOD_UP "Upgrade: websocket\r\nConnection: Upgrade\r\n"
#define GOOD_VER "Sec-WebSocket-Version: 13\r\n"
#define GOOD_KEY "Sec-WebSocket-Key: " KEY "\r\n"

/* Found by fuzzing: an upgrade request with a body got 400 when the body came in a later
 * read, but its real answer (101 here) when everything came at once. */
static void test_upgrade_with_body_split_from_headers_gets_the_same_answer(void **state) {
  (void)state;
  static const char req[] = "GET /v0/channels HTTP/1.1\r\n" GOOD_UP GOOD_VER GOOD_KEY
                            "Content-Length: 4\r\n\r\nabcd";
  size_t head = strlen(req) - 4;
  for (size_t step = 0; step <= head; step += head) {
    qim_http_parser p;
    size_t consumed;
    assert_int_equal(parse(&p, req, strlen(req), step, &consumed), 0);
    assert_int_equal(consumed, strlen(req));
    const qim_http_request *r = qim_http_parser_request(&p);
    assert_non_null(r);
    assert_int_equal(r->body_len, 4);
    assert_int_equal(qim_http_upgrade_status(r), 101);
    qim_http_parser_free(&p);
  }
}

static void test_upgrade_status_for_each_failure(void **state) {
  (void)state;
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP GOOD_VER GOOD_KEY), 101);
  assert_int_equal(
      status_of("GET", "HTTP/1.1",
                "Upgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n" GOOD_VER GOOD_KEY),
      101);
  assert_int_equal(status_of("POST", "HTTP/1.1", GOOD_UP GOOD_VER GOOD_KEY), 405);
  assert_int_equal(status_of("PUT", "HTTP/1.1", ""), 405);
  assert_int_equal(status_of("GET", "HTTP/1.0", GOOD_UP GOOD_VER GOOD_KEY), 400);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_VER GOOD_KEY), 400);
  assert_int_equal(
      status_of("GET", "HTTP/1.1", "Upgrade: h2c\r\nConnection: Upgrade\r\n" GOOD_VER GOOD_KEY),
      400);
  assert_int_equal(status_of("GET", "HTTP/1.1",
                             "Upgrade: websocket\r\nConnection: keep-alive\r\n" GOOD_VER GOOD_KEY),
                   400);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP GOOD_KEY), 426);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP "Sec-WebSocket-Version: 8\r\n" GOOD_KEY),
                   426);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP GOOD_VER), 400);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP GOOD_VER "Sec-WebSocket-Key: short\r\n"),
                   400);
  assert_int_equal(status_of("GET", "HTTP/1.1", GOOD_UP GOOD_VER GOOD_KEY GOOD_KEY), 400);
}

static void test_ws_key_validation(void **state) {
  (void)state;
  assert_true(qim_http_ws_key_valid(KEY));
  assert_true(qim_http_ws_key_valid("AAAAAAAAAAAAAAAAAAAAAA=="));
  assert_false(qim_http_ws_key_valid("AAAAAAAAAAAAAAAAAAAAAB==")); /* stray low bits */
  assert_false(qim_http_ws_key_valid("AAAAAAAAAAAAAAAAAAAAA=="));  /* 15 bytes */
  assert_false(qim_http_ws_key_valid("AAAAAAAAAAAAAAAAAAAA*A=="));
  assert_false(qim_http_ws_key_valid(""));
}

static void test_oversized_header_block_is_431(void **state) {
  (void)state;
  size_t n = 9000;
  char *req = malloc(n + 64);
  int o = sprintf(req, "GET / HTTP/1.1\r\nX-Pad: ");
  memset(req + o, 'a', n - (size_t)o);
  qim_http_parser p;
  assert_int_equal(parse(&p, req, n, 100, NULL), -EMSGSIZE);
  assert_int_equal(qim_http_error_status(-EMSGSIZE), 431);
  /* Further input keeps the verdict. */
  size_t used;
  assert_int_equal(qim_http_parser_feed(&p, "\r\n\r\n", 4, &used), -EMSGSIZE);
  qim_http_parser_free(&p);
  free(req);
}

static void test_body_is_bounded(void **state) {
  (void)state;
  qim_http_parser p;
  const char ok[] =
      "POST /admin HTTP/1.1\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
  assert_int_equal(parse(&p, ok, strlen(ok), 3, NULL), 0);
  const qim_http_request *r = qim_http_parser_request(&p);
  assert_int_equal(r->body_len, 5);
  assert_memory_equal(r->body, "hello", 5);
  assert_string_equal(r->header[QIM_HTTP_H_CONTENT_TYPE], "text/plain");
  qim_http_parser_free(&p);

  const char declared[] = "POST /admin HTTP/1.1\r\nContent-Length: 5000\r\n\r\n";
  assert_int_equal(parse(&p, declared, strlen(declared), 0, NULL), -E2BIG);
  assert_int_equal(qim_http_error_status(-E2BIG), 413);
  qim_http_parser_free(&p);

  /* Chunked: no declared length, the running total trips the bound. */
  char chunked[4096];
  int o = sprintf(chunked, "POST /admin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; i++) {
    o += sprintf(chunked + o, "200\r\n");
    memset(chunked + o, 'b', 0x200);
    o += 0x200;
    o += sprintf(chunked + o, "\r\n");
  }
  o += sprintf(chunked + o, "0\r\n\r\n");
  assert_int_equal(parse(&p, chunked, (size_t)o, 0, NULL), -E2BIG);
  qim_http_parser_free(&p);
}

static void test_chunked_body_within_bound_is_joined(void **state) {
  (void)state;
  const char req[] =
      "POST /admin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  qim_http_parser p;
  assert_int_equal(parse(&p, req, strlen(req), 1, NULL), 0);
  const qim_http_request *r = qim_http_parser_request(&p);
  assert_int_equal(r->body_len, 5);
  assert_memory_equal(r->body, "abcde", 5);
  qim_http_parser_free(&p);
}

static void test_chunked_trailers_are_ignored(void **state) {
  (void)state;
  /* Trailer headers arrive after the header block (found by fuzzing: they used to be
   * recorded as offsets into a buffer they are not in). */
  const char req[] =
      "POST /admin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\nab\r\n0\r\nHost: trailer\r\nX-Tinode-APIKey: sneaky\r\n\r\n";
  for (size_t step = 0; step <= 5; step++) {
    qim_http_parser p;
    assert_int_equal(parse(&p, req, strlen(req), step, NULL), 0);
    const qim_http_request *r = qim_http_parser_request(&p);
    assert_null(r->header[QIM_HTTP_H_HOST]);
    assert_null(r->apikey);
    assert_int_equal(r->body_len, 2);
    qim_http_parser_free(&p);
  }
}

static void test_garbage_is_400(void **state) {
  (void)state;
  const char *bad[] = {"HELLO\r\n\r\n", "GET /x HTTP/9.9.9\r\n\r\n",
                       "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                       "GET /x HTTP/1.1\r\nBad Header\r\n\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    qim_http_parser p;
    assert_int_equal(parse(&p, bad[i], strlen(bad[i]), 0, NULL), -EBADMSG);
    assert_null(qim_http_parser_request(&p));
    qim_http_parser_free(&p);
  }
  assert_int_equal(qim_http_error_status(-EBADMSG), 400);
}

static void test_bytes_after_the_request_are_left_unconsumed(void **state) {
  (void)state;
  char buf[1024];
  size_t n = strlen(upgrade_req);
  memcpy(buf, upgrade_req, n);
  memcpy(buf + n, "\x81\x85XXXXabcde", 11); /* a first WebSocket frame right behind */
  qim_http_parser p;
  size_t used;
  assert_int_equal(parse(&p, buf, n + 11, 0, &used), 0);
  assert_int_equal(used, n);
  qim_http_parser_free(&p);
  /* The same for a plain GET that a client pipelines another request behind. */
  const char two[] = "GET /healthz HTTP/1.1\r\n\r\nGET /again HTTP/1.1\r\n\r\n";
  assert_int_equal(parse(&p, two, strlen(two), 0, &used), 0);
  assert_int_equal(used, strlen("GET /healthz HTTP/1.1\r\n\r\n"));
  assert_string_equal(qim_http_parser_request(&p)->path, "/healthz");
  qim_http_parser_free(&p);
}

static void test_repeated_headers_are_flagged(void **state) {
  (void)state;
  const char req[] = "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\nOrigin:\r\nUser-Agent: x\r\n\r\n";
  qim_http_parser p;
  assert_int_equal(parse(&p, req, strlen(req), 2, NULL), 0);
  const qim_http_request *r = qim_http_parser_request(&p);
  assert_string_equal(r->header[QIM_HTTP_H_HOST], "a");
  assert_true(r->repeated & (1u << QIM_HTTP_H_HOST));
  assert_string_equal(r->header[QIM_HTTP_H_ORIGIN], "");
  assert_string_equal(r->header[QIM_HTTP_H_USER_AGENT], "x");
  qim_http_parser_free(&p);
}

static void test_query_params_and_tokens(void **state) {
  (void)state;
  char out[16];
  assert_int_equal(qim_http_query_param("a=1&apikey=k%41y", "apikey", out, sizeof out), 3);
  assert_string_equal(out, "kAy");
  assert_int_equal(qim_http_query_param("a=1", "apikey", out, sizeof out), -ENOENT);
  assert_int_equal(qim_http_query_param("apikey", "apikey", out, sizeof out), 0);
  assert_int_equal(qim_http_query_param("apikey=%4", "apikey", out, sizeof out), -EINVAL);
  assert_int_equal(qim_http_query_param("apikey=%00", "apikey", out, sizeof out), -EINVAL);
  assert_int_equal(qim_http_query_param("apikey=0123456789abcdefg", "apikey", out, sizeof out),
                   -ENOSPC);
  assert_true(qim_http_has_token("keep-alive, Upgrade", "upgrade"));
  assert_true(qim_http_has_token(" upgrade ", "upgrade"));
  assert_false(qim_http_has_token("upgraded", "upgrade"));
  assert_false(qim_http_has_token("", "upgrade"));
}

static void test_responses_are_complete_and_close(void **state) {
  (void)state;
  size_t len;
  char *r =
      qim_http_format_response(426, "text/plain", "Sec-WebSocket-Version: 13\r\n", "x", 1, &len);
  assert_string_equal(
      r,
      "HTTP/1.1 426 Upgrade Required\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n"
      "Connection: close\r\nSec-WebSocket-Version: 13\r\n\r\nx");
  assert_int_equal(len, strlen(r));
  qim_free(r);
  r = qim_http_format_switching(KEY, &len);
  assert_string_equal(
      r,
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n");
  assert_int_equal(len, strlen(r));
  qim_free(r);
  assert_string_equal(qim_http_reason(429), "Too Many Requests");
}

static void test_parser_memory_is_released(void **state) {
  (void)state;
  size_t before = qim_mem_used();
  qim_http_parser p;
  assert_int_equal(parse(&p, upgrade_req, strlen(upgrade_req), 7, NULL), 0);
  qim_http_parser_free(&p);
  assert_int_equal(qim_mem_used(), before);
}

static void test_buffer_entry_point_gives_the_answer_status(void **state) {
  (void)state;
  size_t n = strlen(upgrade_req), used;
  for (size_t step = 0; step < 40; step++) {
    assert_int_equal(qim_http_parse_buffer(upgrade_req, n, 8192, 0, step, &used), 101);
    assert_int_equal(used, n);
  }
  assert_int_equal(qim_http_parse_buffer(upgrade_req, n - 2, 8192, 0, 0, NULL), 0);
  assert_int_equal(qim_http_parse_buffer(upgrade_req, n, 64, 0, 0, NULL), 431);
  const char brew[] = "BREW /pot HTCPCP/1.0\r\n\r\n";
  assert_int_equal(qim_http_parse_buffer(brew, strlen(brew), 8192, 0, 0, NULL), 400);
  const char post[] = "POST /v0/channels HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
  assert_int_equal(qim_http_parse_buffer(post, strlen(post), 8192, 0, 1, NULL), 405);
  assert_int_equal(qim_http_parse_buffer("", 0, 8192, 0, 0, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accept_key_matches_rfc_example),
      cmocka_unit_test(test_upgrade_request_is_parsed_whole_and_byte_by_byte),
      cmocka_unit_test(test_apikey_header_wins_over_query),
      cmocka_unit_test(test_upgrade_status_for_each_failure),
      cmocka_unit_test(test_upgrade_with_body_split_from_headers_gets_the_same_answer),
      cmocka_unit_test(test_ws_key_validation),
      cmocka_unit_test(test_oversized_header_block_is_431),
      cmocka_unit_test(test_body_is_bounded),
      cmocka_unit_test(test_chunked_body_within_bound_is_joined),
      cmocka_unit_test(test_chunked_trailers_are_ignored),
      cmocka_unit_test(test_garbage_is_400),
      cmocka_unit_test(test_bytes_after_the_request_are_left_unconsumed),
      cmocka_unit_test(test_repeated_headers_are_flagged),
      cmocka_unit_test(test_query_params_and_tokens),
      cmocka_unit_test(test_responses_are_complete_and_close),
      cmocka_unit_test(test_parser_memory_is_released),
      cmocka_unit_test(test_buffer_entry_point_gives_the_answer_status),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
