/*
 * test_ws.c — the RFC 6455 frame parser and encoder without any socket: hand-made
 * client frames in memory, fed whole, in pieces and byte by byte.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/ws.h"
#include "qim/mem.h"
#include "testsupport.h"

/* ---- building client frames ------------------------------------------------------------------ */

enum { LEN_AUTO = 0, LEN_16 = 16, LEN_64 = 64 };

static const uint8_t mask_key[4] = {0x37, 0xfa, 0x21, 0x3d};

/* Writes one client frame: b0 is FIN|RSV|opcode as on the wire. Returns its size. */
static size_t mkframe(uint8_t *out, uint8_t b0, int masked, const void *payload, size_t len,
                      int form) {
  size_t o = 0;
  out[o++] = b0;
  uint8_t m = masked ? 0x80 : 0;
  if (form == LEN_64 || (form == LEN_AUTO && len > 0xFFFF)) {
    out[o++] = m | 127;
    for (int i = 0; i < 8; i++) out[o++] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  } else if (form == LEN_16 || len >= 126) {
    out[o++] = m | 126;
    out[o++] = (uint8_t)(len >> 8);
    out[o++] = (uint8_t)len;
  } else {
    out[o++] = m | (uint8_t)len;
  }
  if (masked) {
    memcpy(out + o, mask_key, 4);
    o += 4;
  }
  const uint8_t *p = payload;
  for (size_t i = 0; i < len; i++) out[o + i] = masked ? p[i] ^ mask_key[i & 3] : p[i];
  return o + len;
}

/* ---- recording events ------------------------------------------------------------------------ */

typedef struct event {
  int opcode;
  int control;
  size_t len;
  uint8_t *data;
} event;

typedef struct recorder {
  event ev[16];
  int n;
  int stop_with; /* returned from callbacks when non-zero */
} recorder;

static int record(recorder *r, int control, int opcode, const uint8_t *d, size_t len) {
  assert_true(r->n < 16);
  event *e = &r->ev[r->n++];
  e->opcode = opcode;
  e->control = control;
  e->len = len;
  e->data = malloc(len + 1);
  memcpy(e->data, d, len);
  e->data[len] = 0;
  return r->stop_with;
}

static int on_msg(void *ud, int op, uint8_t *d, size_t len) {
  return record(ud, 0, op, d, len);
}
static int on_ctl(void *ud, int op, uint8_t *d, size_t len) {
  return record(ud, 1, op, d, len);
}
static const qim_ws_events events = {on_msg, on_ctl};

static void recorder_free(recorder *r) {
  for (int i = 0; i < r->n; i++) free(r->ev[i].data);
  r->n = 0;
}

/* Feeds buf in pieces of `step` bytes (0 = all at once); returns the first non-zero result. */
static int feed(qim_ws_parser *p, recorder *r, const uint8_t *buf, size_t len, size_t step) {
  uint8_t *copy = malloc(len ? len : 1);
  memcpy(copy, buf, len);
  if (!step) step = len ? len : 1;
  int rc = 0;
  for (size_t o = 0; o < len && rc == 0; o += step)
    rc = qim_ws_parse(p, copy + o, len - o < step ? len - o : step, &events, r);
  free(copy);
  return rc;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_masked_text_frame_is_delivered_in_place(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x81, 1, "hello", 5, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 1024);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.ev[0].opcode, QIM_WS_OP_TEXT);
  assert_int_equal(r.ev[0].len, 5);
  assert_string_equal((char *)r.ev[0].data, "hello");
  assert_int_equal(qim_ws_parser_buffered(&p), 0);
  assert_true(qim_ws_parser_idle(&p));
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_unmasked_client_frame_is_protocol_error(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x81, 0, "hello", 5, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 1024);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
  assert_int_equal(r.n, 0);
  assert_int_equal(qim_ws_error_close_code(-EPROTO), 1002);
  qim_ws_parser_free(&p);
}

static void test_short_unmasked_frame_fails_without_waiting(void **state) {
  (void)state;
  /* Two header bytes are enough to know: no mask key is coming. */
  uint8_t buf[] = {0x81, 0x02, 'h', 'i'};
  qim_ws_parser p;
  qim_ws_parser_init(&p, 1024);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, 2, 0), -EPROTO);
  qim_ws_parser_free(&p);
  uint8_t op[] = {0x8B, 0x80};
  qim_ws_parser_init(&p, 1024);
  assert_int_equal(feed(&p, &r, op, 2, 0), -EPROTO);
  qim_ws_parser_free(&p);
}

static void test_16_and_64_bit_lengths_are_decoded(void **state) {
  (void)state;
  size_t big = 70000;
  uint8_t *payload = malloc(big), *buf = malloc(big + 64);
  for (size_t i = 0; i < big; i++) payload[i] = (uint8_t)('a' + i % 26);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 100000);
  recorder r = {0};
  size_t n = mkframe(buf, 0x82, 1, payload, 300, LEN_16);
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  n = mkframe(buf, 0x82, 1, payload, big, LEN_64);
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  n = mkframe(buf, 0x82, 1, payload, 10, LEN_64); /* non-minimal forms are accepted */
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.ev[0].len, 300);
  assert_int_equal(r.ev[1].len, big);
  assert_int_equal(r.ev[2].len, 10);
  assert_memory_equal(r.ev[1].data, payload, big);
  assert_int_equal(r.ev[1].opcode, QIM_WS_OP_BINARY);
  recorder_free(&r);
  qim_ws_parser_free(&p);
  free(payload);
  free(buf);
}

static void test_byte_by_byte_input_gives_the_same_messages(void **state) {
  (void)state;
  uint8_t buf[2048], payload[600];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)('A' + i % 26);
  size_t n = mkframe(buf, 0x81, 1, payload, sizeof payload, LEN_AUTO);
  n += mkframe(buf + n, 0x89, 1, "pi", 2, LEN_AUTO);
  n += mkframe(buf + n, 0x81, 1, "x", 1, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 4096);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 1), 0);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.ev[0].len, sizeof payload);
  assert_memory_equal(r.ev[0].data, payload, sizeof payload);
  assert_true(r.ev[1].control);
  assert_int_equal(r.ev[1].opcode, QIM_WS_OP_PING);
  assert_string_equal((char *)r.ev[1].data, "pi");
  assert_string_equal((char *)r.ev[2].data, "x");
  /* Nothing is kept once the messages are out. */
  assert_int_equal(qim_ws_parser_buffered(&p), 0);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_fragments_with_ping_between_are_reassembled(void **state) {
  (void)state;
  uint8_t buf[256];
  size_t n = mkframe(buf, 0x01, 1, "Hel", 3, LEN_AUTO);      /* TEXT, FIN=0 */
  n += mkframe(buf + n, 0x89, 1, "p", 1, LEN_AUTO);          /* PING between fragments */
  n += mkframe(buf + n, 0x00, 1, "lo ", 3, LEN_AUTO);        /* CONT, FIN=0 */
  n += mkframe(buf + n, 0x8A, 1, "", 0, LEN_AUTO);           /* PONG too */
  n += mkframe(buf + n, 0x80, 1, "wo\xc3\xa9", 4, LEN_AUTO); /* CONT, FIN=1 */
  for (size_t step = 0; step <= 3; step++) {
    qim_ws_parser p;
    qim_ws_parser_init(&p, 64);
    recorder r = {0};
    assert_int_equal(feed(&p, &r, buf, n, step), 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.ev[0].opcode, QIM_WS_OP_PING);
    assert_int_equal(r.ev[1].opcode, QIM_WS_OP_PONG);
    assert_false(r.ev[2].control);
    assert_int_equal(r.ev[2].opcode, QIM_WS_OP_TEXT);
    assert_string_equal((char *)r.ev[2].data, "Hello wo\xc3\xa9");
    assert_int_equal(qim_ws_parser_buffered(&p), 0);
    recorder_free(&r);
    qim_ws_parser_free(&p);
  }
}

static void test_unknown_opcodes_are_protocol_errors(void **state) {
  (void)state;
  static const uint8_t ops[] = {0x3, 0x4, 0x7, 0xB, 0xF};
  for (size_t i = 0; i < sizeof ops; i++) {
    uint8_t buf[32];
    size_t n = mkframe(buf, (uint8_t)(0x80 | ops[i]), 1, "x", 1, LEN_AUTO);
    qim_ws_parser p;
    qim_ws_parser_init(&p, 64);
    recorder r = {0};
    assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
    qim_ws_parser_free(&p);
  }
}

static void test_reserved_bits_are_protocol_errors(void **state) {
  (void)state;
  static const uint8_t rsv[] = {0x40, 0x20, 0x10};
  for (size_t i = 0; i < sizeof rsv; i++) {
    uint8_t buf[32];
    size_t n = mkframe(buf, (uint8_t)(0x81 | rsv[i]), 1, "x", 1, LEN_AUTO);
    qim_ws_parser p;
    qim_ws_parser_init(&p, 64);
    recorder r = {0};
    assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
    assert_int_equal(r.n, 0);
    qim_ws_parser_free(&p);
  }
}

static void test_oversized_frame_fails_from_its_header(void **state) {
  (void)state;
  /* Only the header: the limit is enforced before any payload is read or buffered. */
  uint8_t hdr[] = {0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0x10, 0, 0, 1, 2, 3, 4};
  qim_ws_parser p;
  qim_ws_parser_init(&p, 4096);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, hdr, sizeof hdr, 0), -EMSGSIZE);
  assert_int_equal(qim_ws_error_close_code(-EMSGSIZE), 1009);
  assert_int_equal(qim_ws_parser_buffered(&p), 0);
  qim_ws_parser_free(&p);
}

static void test_fragments_summing_over_the_limit_fail(void **state) {
  (void)state;
  uint8_t chunk[40], buf[256];
  memset(chunk, 'z', sizeof chunk);
  size_t n = mkframe(buf, 0x01, 1, chunk, 40, LEN_AUTO);
  n += mkframe(buf + n, 0x00, 1, chunk, 40, LEN_AUTO);
  n += mkframe(buf + n, 0x80, 1, chunk, 40, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 100);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), -EMSGSIZE);
  assert_int_equal(r.n, 0);
  qim_ws_parser_free(&p);
}

static void test_exact_limit_is_accepted(void **state) {
  (void)state;
  uint8_t chunk[50], buf[256];
  memset(chunk, 'z', sizeof chunk);
  size_t n = mkframe(buf, 0x01, 1, chunk, 50, LEN_AUTO);
  n += mkframe(buf + n, 0x80, 1, chunk, 50, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 100);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.ev[0].len, 100);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_invalid_utf8_text_is_rejected(void **state) {
  (void)state;
  static const char *bad[] = {"\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                              "ab\xff",   "\xc3",         "\x80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint8_t buf[32];
    size_t n = mkframe(buf, 0x81, 1, bad[i], strlen(bad[i]), LEN_AUTO);
    for (size_t step = 0; step <= 1; step++) {
      qim_ws_parser p;
      qim_ws_parser_init(&p, 64);
      recorder r = {0};
      assert_int_equal(feed(&p, &r, buf, n, step), -EILSEQ);
      assert_int_equal(r.n, 0);
      qim_ws_parser_free(&p);
    }
  }
  assert_int_equal(qim_ws_error_close_code(-EILSEQ), 1007);
}

static void test_invalid_utf8_fails_at_the_first_bad_fragment(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x01, 1, "ok\xff", 3, LEN_AUTO); /* FIN=0: no final fragment yet */
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), -EILSEQ);
  qim_ws_parser_free(&p);
}

static void test_character_split_across_fragments_is_valid(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x01, 1, "\xe2\x82", 2, LEN_AUTO); /* first bytes of U+20AC */
  n += mkframe(buf + n, 0x80, 1, "\xac", 1, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 1);
  assert_string_equal((char *)r.ev[0].data, "\xe2\x82\xac");
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_binary_is_not_checked_as_utf8(void **state) {
  (void)state;
  uint8_t buf[32];
  size_t n = mkframe(buf, 0x82, 1, "\xff\xfe", 2, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.ev[0].opcode, QIM_WS_OP_BINARY);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_control_frame_rules(void **state) {
  (void)state;
  uint8_t big[126], buf[256];
  memset(big, 'p', sizeof big);
  struct {
    uint8_t b0;
    size_t len;
  } cases[] = {{0x09, 1}, {0x89, 126}, {0x88, 1}};
  /* A fragmented ping, a ping over 125 bytes and a 1-byte close payload. */
  for (size_t i = 0; i < 3; i++) {
    size_t n = mkframe(buf, cases[i].b0, 1, big, cases[i].len, LEN_AUTO);
    qim_ws_parser p;
    qim_ws_parser_init(&p, 1024);
    recorder r = {0};
    assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
    qim_ws_parser_free(&p);
  }
}

static void test_fragmentation_order_is_enforced(void **state) {
  (void)state;
  uint8_t buf[64];
  qim_ws_parser p;
  recorder r = {0};
  size_t n = mkframe(buf, 0x80, 1, "x", 1, LEN_AUTO); /* continuation with no start */
  qim_ws_parser_init(&p, 64);
  assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
  qim_ws_parser_free(&p);
  n = mkframe(buf, 0x01, 1, "a", 1, LEN_AUTO);
  n += mkframe(buf + n, 0x81, 1, "b", 1, LEN_AUTO); /* a new message inside a fragmented one */
  qim_ws_parser_init(&p, 64);
  assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
  qim_ws_parser_free(&p);
}

static void test_close_payload_is_validated(void **state) {
  (void)state;
  struct {
    const char *payload;
    size_t len;
    int rc;
  } cases[] = {
      {"\x03\xed", 2, -EPROTO}, /* 1005 must not be sent */
      {"\x03\xee", 2, -EPROTO}, /* 1006 neither */
      {"\x03\xe7", 2, -EPROTO}, /* 999 */
      {"\x0b\xb8", 2, 0},       /* 3000 */
      {"\x03\xe8"
       "bye",
       5, 0},                       /* 1000 + reason */
      {"\x03\xe8\xff", 3, -EILSEQ}, /* reason not UTF-8 */
      {"", 0, 0},                   /* no code at all */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t buf[64];
    size_t n = mkframe(buf, 0x88, 1, cases[i].payload, cases[i].len, LEN_AUTO);
    qim_ws_parser p;
    qim_ws_parser_init(&p, 64);
    recorder r = {0};
    assert_int_equal(feed(&p, &r, buf, n, 0), cases[i].rc);
    assert_int_equal(r.n, cases[i].rc == 0 ? 1 : 0);
    recorder_free(&r);
    qim_ws_parser_free(&p);
  }
}

static void test_input_after_close_frame_is_ignored(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x88, 1, "\x03\xe8", 2, LEN_AUTO);
  n += mkframe(buf + n, 0x81, 1, "late", 4, LEN_AUTO);
  buf[n++] = 0xFF; /* even garbage */
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.ev[0].opcode, QIM_WS_OP_CLOSE);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_errors_are_sticky(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0xC1, 1, "x", 1, LEN_AUTO);
  size_t m = mkframe(buf + n, 0x81, 1, "fine", 4, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), -EPROTO);
  assert_int_equal(feed(&p, &r, buf + n, m, 0), -EPROTO);
  assert_int_equal(r.n, 0);
  qim_ws_parser_free(&p);
}

static void test_length_with_top_bit_is_protocol_error(void **state) {
  (void)state;
  uint8_t hdr[] = {0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
  qim_ws_parser p;
  qim_ws_parser_init(&p, SIZE_MAX);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, hdr, sizeof hdr, 0), -EPROTO);
  qim_ws_parser_free(&p);
}

static void test_callback_return_stops_parsing(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x81, 1, "one", 3, LEN_AUTO);
  n += mkframe(buf + n, 0x81, 1, "two", 3, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {.stop_with = 7};
  assert_int_equal(feed(&p, &r, buf, n, 0), 7);
  assert_int_equal(r.n, 1);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_empty_text_message_is_delivered(void **state) {
  (void)state;
  uint8_t buf[32];
  size_t n = mkframe(buf, 0x81, 1, "", 0, LEN_AUTO);
  n += mkframe(buf + n, 0x01, 1, "", 0, LEN_AUTO);
  n += mkframe(buf + n, 0x80, 1, "", 0, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, n, 0), 0);
  assert_int_equal(r.n, 2);
  assert_int_equal(r.ev[0].len, 0);
  assert_int_equal(r.ev[1].len, 0);
  recorder_free(&r);
  qim_ws_parser_free(&p);
}

static void test_stalled_large_frame_pins_little_memory(void **state) {
  (void)state;
  /* Header announces 200 000 bytes; only 10 arrive. */
  uint8_t buf[64] = {0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0x03, 0x0d, 0x40, 1, 2, 3, 4};
  memset(buf + 14, 'q', 10);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 300000);
  recorder r = {0};
  assert_int_equal(feed(&p, &r, buf, 24, 0), 0);
  assert_int_equal(r.n, 0);
  assert_true(qim_ws_parser_buffered(&p) <= 4096);
  assert_false(qim_ws_parser_idle(&p));
  qim_ws_parser_free(&p);
}

static void test_reassembly_out_of_memory_is_reported(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = mkframe(buf, 0x01, 1, "abc", 3, LEN_AUTO);
  qim_ws_parser p;
  qim_ws_parser_init(&p, 64);
  recorder r = {0};
  qim_mem_fail_after(1);
  assert_int_equal(feed(&p, &r, buf, n, 0), -ENOMEM);
  qim_mem_fail_after(0);
  assert_int_equal(qim_ws_error_close_code(-ENOMEM), 1011);
  qim_ws_parser_free(&p);
}

static void test_utf8_validator_vectors(void **state) {
  (void)state;
  assert_true(qim_ws_utf8_valid((const uint8_t *)"plain ascii, long enough for words", 34));
  assert_true(qim_ws_utf8_valid((const uint8_t *)"\xf0\x9f\x98\x80", 4));  /* U+1F600 */
  assert_true(qim_ws_utf8_valid((const uint8_t *)"\xf4\x8f\xbf\xbf", 4));  /* U+10FFFF */
  assert_true(qim_ws_utf8_valid((const uint8_t *)"\xed\x9f\xbf", 3));      /* U+D7FF */
  assert_true(qim_ws_utf8_valid((const uint8_t *)"\xee\x80\x80", 3));      /* U+E000 */
  assert_false(qim_ws_utf8_valid((const uint8_t *)"\xf0\x8f\xbf\xbf", 4)); /* overlong */
  assert_false(qim_ws_utf8_valid((const uint8_t *)"\xf5\x80\x80\x80", 4));
  assert_false(qim_ws_utf8_valid((const uint8_t *)"\xf0\x9f\x98", 3)); /* truncated */
  assert_false(qim_ws_utf8_valid((const uint8_t *)"\xc1\xbf", 2));
}

static void test_frame_encoding_and_sharing(void **state) {
  (void)state;
  uint8_t h[QIM_WS_MAX_HEADER];
  assert_int_equal(qim_ws_header_encode(h, QIM_WS_OP_TEXT, 125), 2);
  assert_int_equal(h[0], 0x81);
  assert_int_equal(h[1], 125);
  assert_int_equal(qim_ws_header_encode(h, QIM_WS_OP_TEXT, 126), 4);
  assert_int_equal(h[1], 126);
  assert_int_equal(h[2] << 8 | h[3], 126);
  assert_int_equal(qim_ws_header_encode(h, QIM_WS_OP_BINARY, 65535), 4);
  assert_int_equal(qim_ws_header_encode(h, QIM_WS_OP_BINARY, 65536), 10);
  assert_int_equal(h[0], 0x82);
  assert_int_equal(h[1], 127);
  assert_int_equal(h[7], 1);
  assert_int_equal(h[8], 0);

  size_t before = qim_mem_used();
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "0", 1);
  assert_int_equal(qim_ws_frame_size(f), 3);
  assert_memory_equal(qim_ws_frame_bytes(f),
                      "\x81\x01"
                      "0",
                      3);
  assert_ptr_equal(qim_ws_frame_ref(f), f);
  qim_ws_frame_unref(f);
  assert_int_equal(qim_ws_frame_bytes(f)[2], '0'); /* still alive: one reference left */
  qim_ws_frame_unref(f);
  assert_int_equal(qim_mem_used(), before);
  qim_ws_frame_unref(NULL);

  f = qim_ws_frame_close(1009, "too big");
  assert_int_equal(qim_ws_frame_size(f), 2 + 2 + 7);
  assert_memory_equal(qim_ws_frame_bytes(f), "\x88\x09\x03\xf1too big", 11);
  qim_ws_frame_unref(f);

  uint8_t *payload;
  f = qim_ws_frame_alloc(QIM_WS_OP_TEXT, 4, &payload);
  memcpy(payload, "{}{}", 4);
  assert_memory_equal(qim_ws_frame_bytes(f), "\x81\x04{}{}", 6);
  qim_ws_frame_unref(f);
}

static void test_buffer_entry_point_is_split_independent(void **state) {
  (void)state;
  uint8_t buf[512];
  size_t n = mkframe(buf, 0x01, 1, "frag", 4, LEN_AUTO);
  n += mkframe(buf + n, 0x89, 1, "ping", 4, LEN_AUTO);
  n += mkframe(buf + n, 0x80, 1, "ment", 4, LEN_AUTO);
  n += mkframe(buf + n, 0x82, 1, "\x01\x02", 2, LEN_16);
  n += mkframe(buf + n, 0x88, 1, "\x03\xe8", 2, LEN_AUTO);
  const uint8_t *ro = buf; /* the input stays untouched: the helper unmasks a copy */
  for (size_t step = 0; step <= n; step++) {
    recorder r = {0};
    assert_int_equal(qim_ws_parse_buffer(ro, n, 64, step, &events, &r), 0);
    assert_int_equal(r.n, 4);
    assert_int_equal(r.ev[0].opcode, QIM_WS_OP_PING);
    assert_string_equal((char *)r.ev[1].data, "fragment");
    assert_int_equal(r.ev[2].opcode, QIM_WS_OP_BINARY);
    assert_int_equal(r.ev[3].opcode, QIM_WS_OP_CLOSE);
    recorder_free(&r);
  }
  assert_int_equal(buf[0], 0x01);
  recorder r = {0};
  assert_int_equal(qim_ws_parse_buffer(buf, n, 6, 3, &events, &r), -EMSGSIZE);
  recorder_free(&r);
  assert_int_equal(qim_ws_parse_buffer(NULL, 0, 6, 0, &events, &r), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_masked_text_frame_is_delivered_in_place),
      cmocka_unit_test(test_unmasked_client_frame_is_protocol_error),
      cmocka_unit_test(test_short_unmasked_frame_fails_without_waiting),
      cmocka_unit_test(test_16_and_64_bit_lengths_are_decoded),
      cmocka_unit_test(test_byte_by_byte_input_gives_the_same_messages),
      cmocka_unit_test(test_fragments_with_ping_between_are_reassembled),
      cmocka_unit_test(test_unknown_opcodes_are_protocol_errors),
      cmocka_unit_test(test_reserved_bits_are_protocol_errors),
      cmocka_unit_test(test_oversized_frame_fails_from_its_header),
      cmocka_unit_test(test_fragments_summing_over_the_limit_fail),
      cmocka_unit_test(test_exact_limit_is_accepted),
      cmocka_unit_test(test_invalid_utf8_text_is_rejected),
      cmocka_unit_test(test_invalid_utf8_fails_at_the_first_bad_fragment),
      cmocka_unit_test(test_character_split_across_fragments_is_valid),
      cmocka_unit_test(test_binary_is_not_checked_as_utf8),
      cmocka_unit_test(test_control_frame_rules),
      cmocka_unit_test(test_fragmentation_order_is_enforced),
      cmocka_unit_test(test_close_payload_is_validated),
      cmocka_unit_test(test_input_after_close_frame_is_ignored),
      cmocka_unit_test(test_errors_are_sticky),
      cmocka_unit_test(test_length_with_top_bit_is_protocol_error),
      cmocka_unit_test(test_callback_return_stops_parsing),
      cmocka_unit_test(test_empty_text_message_is_delivered),
      cmocka_unit_test(test_stalled_large_frame_pins_little_memory),
      cmocka_unit_test(test_reassembly_out_of_memory_is_reported),
      cmocka_unit_test(test_utf8_validator_vectors),
      cmocka_unit_test(test_frame_encoding_and_sharing),
      cmocka_unit_test(test_buffer_entry_point_is_split_independent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
