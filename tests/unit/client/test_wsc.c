/*
 * test_wsc.c — the client runtime's WebSocket framing (src/client/wsc.h), checked
 * against qim's own server side: frames the client encodes must parse with the gateway's
 * parser (src/gateway/ws.h), frames the gateway encodes must parse with the client's, and
 * the handshake answer the gateway formats must be accepted. Then the rules the client
 * parser enforces on a server, fed whole and byte by byte.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/http.h"
#include "gateway/ws.h"
#include "qim/err.h"
#include "qim/mem.h"
#include "testsupport.h"
#include "client/wsc.h"

/* ---- what the client parser hands out ------------------------------------------------------- */

typedef struct got {
  int n_msg, n_ctl;
  int op[16];
  size_t len[16];
  uint8_t data[16][1024];
  int stop_after; /* return 1 after this many callbacks (0 = never) */
} got;

static int keep(got *g, int opcode, const uint8_t *data, size_t len) {
  int i = g->n_msg + g->n_ctl;
  if (i < 16) {
    g->op[i] = opcode;
    g->len[i] = len;
    memcpy(g->data[i], data, len < 1024 ? len : 1024);
  }
  return g->stop_after && i + 1 >= g->stop_after ? 1 : 0;
}

static int got_msg(void *ud, int opcode, const uint8_t *data, size_t len) {
  got *g = ud;
  int rc = keep(g, opcode, data, len);
  g->n_msg++;
  return rc;
}

static int got_ctl(void *ud, int opcode, const uint8_t *data, size_t len) {
  got *g = ud;
  int rc = keep(g, opcode, data, len);
  g->n_ctl++;
  return rc;
}

static const qim_wsc_events events = {got_msg, got_ctl};

/* Feeds `buf` to a fresh parser in steps of `step` bytes (0 = whole); returns the first non-zero.
 */
static int feed(const uint8_t *buf, size_t len, size_t step, size_t max, got *g) {
  qim_wsc_parser p;
  qim_wsc_parser_init(&p, max);
  int rc = 0;
  if (step == 0) step = len ? len : 1;
  for (size_t off = 0; off < len && rc == 0; off += step)
    rc = qim_wsc_parse(&p, buf + off, len - off < step ? len - off : step, &events, g);
  qim_wsc_parser_free(&p);
  return rc;
}

/* Appends the encoded bytes of a gateway frame to buf. */
static size_t put_server(uint8_t *buf, int opcode, const void *payload, size_t len) {
  qim_ws_frame *f = qim_ws_frame_new(opcode, payload, len);
  size_t n = qim_ws_frame_size(f);
  memcpy(buf, qim_ws_frame_bytes(f), n);
  qim_ws_frame_unref(f);
  return n;
}

/* ---- client frames parse with the gateway's parser ------------------------------------------ */

typedef struct srv_got {
  int n;
  int op;
  size_t len;
  uint8_t data[70000];
} srv_got;

static int srv_msg(void *ud, int opcode, uint8_t *data, size_t len) {
  srv_got *g = ud;
  g->n++;
  g->op = opcode;
  g->len = len;
  memcpy(g->data, data, len);
  return 0;
}

static int srv_ctl(void *ud, int opcode, uint8_t *data, size_t len) {
  return srv_msg(ud, opcode, data, len);
}

static void test_client_frames_of_every_length_form_parse_on_the_gateway(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 125, 126, 65535, 65536, 69999};
  static uint8_t payload[70000], out[70000 + QIM_WSC_MAX_HEADER];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)('a' + i % 26);
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t n = qim_wsc_encode(out, QIM_WS_OP_TEXT, payload, sizes[s], 0xA1B2C3D4u + (uint32_t)s);
    size_t hdr = sizes[s] < 126 ? 6 : sizes[s] <= 0xFFFF ? 8 : 14;
    assert_int_equal(n, hdr + sizes[s]);
    static srv_got g;
    memset(&g, 0, sizeof g);
    qim_ws_events ev = {srv_msg, srv_ctl};
    assert_int_equal(qim_ws_parse_buffer(out, n, 1 << 20, 0, &ev, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.op, QIM_WS_OP_TEXT);
    assert_int_equal(g.len, sizes[s]);
    assert_memory_equal(g.data, payload, sizes[s]);
  }
}

static void test_client_frames_are_masked(void **state) {
  (void)state;
  uint8_t out[64];
  size_t n = qim_wsc_encode(out, QIM_WS_OP_TEXT, "hello", 5, 0x01020304u);
  assert_int_equal(n, 11);
  assert_int_equal(out[0], 0x81);
  assert_int_equal(out[1], 0x80 | 5);
  assert_memory_equal(out + 2, "\x01\x02\x03\x04", 4);
  assert_int_equal(out[6], 'h' ^ 0x01);
  assert_int_equal(out[10], 'o' ^ 0x01);
}

/* ---- gateway frames parse with the client parser -------------------------------------------- */

static void test_gateway_frames_parse_whole_and_byte_by_byte(void **state) {
  (void)state;
  static uint8_t big[3000];
  memset(big, 'z', sizeof big);
  static uint8_t buf[8192];
  size_t n = 0;
  n += put_server(buf + n, QIM_WS_OP_TEXT, "{\"ctrl\":{}}", 11);
  n += put_server(buf + n, QIM_WS_OP_PING, "pp", 2);
  n += put_server(buf + n, QIM_WS_OP_TEXT, big, sizeof big);
  n += put_server(buf + n, QIM_WS_OP_TEXT, "", 0);
  static const size_t steps[] = {0, 1, 2, 3, 7, 1000};
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    static got g;
    memset(&g, 0, sizeof g);
    assert_int_equal(feed(buf, n, steps[s], 1 << 20, &g), 0);
    assert_int_equal(g.n_msg, 3);
    assert_int_equal(g.n_ctl, 1);
    assert_int_equal(g.len[0], 11);
    assert_memory_equal(g.data[0], "{\"ctrl\":{}}", 11);
    assert_int_equal(g.op[1], QIM_WS_OP_PING);
    assert_int_equal(g.len[2], sizeof big);
    assert_memory_equal(g.data[2], big, 1024);
    assert_int_equal(g.len[3], 0);
  }
}

static void test_fragments_are_reassembled_around_a_control_frame(void **state) {
  (void)state;
  /* "Hel" (TEXT, no FIN) + ping + "lo" (CONT, FIN), written by hand: the gateway never fragments.
   */
  const uint8_t buf[] = {0x01, 3, 'H', 'e', 'l', 0x89, 1, '!', 0x80, 2, 'l', 'o'};
  for (size_t step = 0; step <= 3; step++) {
    got g = {0};
    assert_int_equal(feed(buf, sizeof buf, step, 100, &g), 0);
    assert_int_equal(g.n_ctl, 1);
    assert_int_equal(g.n_msg, 1);
    assert_int_equal(g.op[1], QIM_WS_OP_TEXT);
    assert_int_equal(g.len[1], 5);
    assert_memory_equal(g.data[1], "Hello", 5);
  }
}

static void test_server_frame_violations_are_protocol_errors(void **state) {
  (void)state;
  const uint8_t masked[] = {0x81, 0x81, 1, 2, 3, 4, 'x'};
  const uint8_t rsv[] = {0xC1, 1, 'x'};
  const uint8_t opcode[] = {0x83, 1, 'x'};
  const uint8_t long_ping[] = {0x89, 126, 0, 126};
  const uint8_t frag_ping[] = {0x09, 0};
  const uint8_t lone_cont[] = {0x80, 1, 'x'};
  const uint8_t nested[] = {0x01, 1, 'a', 0x81, 1, 'b'};
  const uint8_t top_bit[] = {0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 1};
  const struct {
    const uint8_t *b;
    size_t n;
  } cases[] = {{masked, sizeof masked},       {rsv, sizeof rsv},
               {opcode, sizeof opcode},       {long_ping, sizeof long_ping},
               {frag_ping, sizeof frag_ping}, {lone_cont, sizeof lone_cont},
               {nested, sizeof nested},       {top_bit, sizeof top_bit}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    got g = {0};
    assert_int_equal(feed(cases[i].b, cases[i].n, 0, 1 << 20, &g), -EPROTO);
    assert_int_equal(g.n_msg, 0);
  }
}

static void test_message_above_the_limit_is_refused_from_its_header(void **state) {
  (void)state;
  uint8_t buf[4] = {0x81, 126, 0x01, 0x00}; /* 256 bytes announced, none sent */
  got g = {0};
  assert_int_equal(feed(buf, sizeof buf, 0, 255, &g), -EMSGSIZE);
  /* Fragments count together: 100 + 100 against a limit of 150. */
  static uint8_t frags[300];
  size_t n = 0;
  frags[n++] = 0x01;
  frags[n++] = 100;
  n += 100;
  frags[n++] = 0x80;
  frags[n++] = 100;
  n += 100;
  got g2 = {0};
  assert_int_equal(feed(frags, n, 0, 150, &g2), -EMSGSIZE);
  assert_int_equal(g2.n_msg, 0);
}

static void test_errors_are_sticky_and_callbacks_can_stop(void **state) {
  (void)state;
  const uint8_t bad[] = {0xC1, 0};
  const uint8_t good[] = {0x81, 1, 'x'};
  qim_wsc_parser p;
  qim_wsc_parser_init(&p, 100);
  got g = {0};
  assert_int_equal(qim_wsc_parse(&p, bad, sizeof bad, &events, &g), -EPROTO);
  assert_int_equal(qim_wsc_parse(&p, good, sizeof good, &events, &g), -EPROTO);
  assert_int_equal(g.n_msg, 0);
  qim_wsc_parser_free(&p);

  const uint8_t two[] = {0x81, 1, 'a', 0x81, 1, 'b'};
  got s = {.stop_after = 1};
  qim_wsc_parser_init(&p, 100);
  assert_int_equal(qim_wsc_parse(&p, two, sizeof two, &events, &s), 1);
  assert_int_equal(s.n_msg, 1);
  assert_int_equal(qim_wsc_parser_buffered(&p), 0);
  qim_wsc_parser_free(&p);
}

static void test_split_frame_is_buffered_until_complete(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = put_server(buf, QIM_WS_OP_TEXT, "abcdefgh", 8);
  qim_wsc_parser p;
  qim_wsc_parser_init(&p, 100);
  got g = {0};
  assert_int_equal(qim_wsc_parse(&p, buf, 5, &events, &g), 0);
  assert_int_equal(g.n_msg, 0);
  assert_int_equal(qim_wsc_parser_buffered(&p), 5);
  assert_int_equal(qim_wsc_parse(&p, buf + 5, n - 5, &events, &g), 0);
  assert_int_equal(g.n_msg, 1);
  assert_memory_equal(g.data[0], "abcdefgh", 8);
  assert_int_equal(qim_wsc_parser_buffered(&p), 0);
  qim_wsc_parser_free(&p);
}

/* ---- handshake --------------------------------------------------------------------------------
 */

static void test_gateway_101_is_accepted_and_frames_after_it_are_left(void **state) {
  (void)state;
  uint8_t nonce[16];
  for (int i = 0; i < 16; i++) nonce[i] = (uint8_t)(i * 7);
  char key[QIM_WSC_KEY_LEN + 1];
  qim_wsc_key(nonce, key);
  assert_int_equal(strlen(key), 24);
  assert_true(qim_http_ws_key_valid(key));

  char req[512];
  int rn = qim_wsc_request(req, sizeof req, "127.0.0.1:6060", "/v0/channels?apikey=K", key);
  assert_true(rn > 0);
  assert_non_null(strstr(req, "GET /v0/channels?apikey=K HTTP/1.1\r\n"));
  assert_non_null(strstr(req, "Sec-WebSocket-Version: 13\r\n"));
  assert_int_equal(qim_wsc_request(req, 40, "h", "/", key), -ENOSPC);

  size_t len = 0;
  char *answer = qim_http_format_switching(key, &len);
  char buf[1024];
  memcpy(buf, answer, len);
  memcpy(buf + len, "\x81\x01x", 3); /* a frame right behind the header block */
  size_t head = 0;
  int status = 0;
  for (size_t cut = 0; cut < len; cut++)
    assert_int_equal(qim_wsc_response(buf, cut, key, &head, &status), QIM_AGAIN);
  assert_int_equal(qim_wsc_response(buf, len + 3, key, &head, &status), 0);
  assert_int_equal(head, len);
  assert_int_equal(status, 101);

  /* Another key's accept value is a protocol error. */
  char other[QIM_WSC_KEY_LEN + 1];
  nonce[0] ^= 1;
  qim_wsc_key(nonce, other);
  assert_int_equal(qim_wsc_response(buf, len, other, &head, &status), -EPROTO);
  qim_free(answer);
}

static void test_refusals_and_garbage_are_reported(void **state) {
  (void)state;
  const char *k = "dGhlIHNhbXBsZSBub25jZQ==";
  const char forbidden[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
  size_t head = 0;
  int status = 0;
  assert_int_equal(qim_wsc_response(forbidden, strlen(forbidden), k, &head, &status),
                   -ECONNREFUSED);
  assert_int_equal(status, 403);
  const char garbage[] = "SSH-2.0-OpenSSH\r\n\r\n";
  assert_int_equal(qim_wsc_response(garbage, strlen(garbage), k, &head, &status), -EPROTO);
  const char no_upgrade[] =
      "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: "
      "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
  assert_int_equal(qim_wsc_response(no_upgrade, strlen(no_upgrade), k, &head, &status), -EPROTO);
  static char endless[9000];
  memset(endless, 'a', sizeof endless);
  assert_int_equal(qim_wsc_response(endless, sizeof endless, k, &head, &status), -EMSGSIZE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_client_frames_of_every_length_form_parse_on_the_gateway),
      cmocka_unit_test(test_client_frames_are_masked),
      cmocka_unit_test(test_gateway_frames_parse_whole_and_byte_by_byte),
      cmocka_unit_test(test_fragments_are_reassembled_around_a_control_frame),
      cmocka_unit_test(test_server_frame_violations_are_protocol_errors),
      cmocka_unit_test(test_message_above_the_limit_is_refused_from_its_header),
      cmocka_unit_test(test_errors_are_sticky_and_callbacks_can_stop),
      cmocka_unit_test(test_split_frame_is_buffered_until_complete),
      cmocka_unit_test(test_gateway_101_is_accepted_and_frames_after_it_are_left),
      cmocka_unit_test(test_refusals_and_garbage_are_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
