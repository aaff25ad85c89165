/*
 * fuzz_ws.c — libFuzzer harness for the WebSocket framing parser (src/gateway/ws.c).
 *
 * The input is what a client sends after the handshake (masked frames). What must hold:
 *   - every delivered message is TEXT or BINARY within max_message, a TEXT one is UTF-8;
 *     every control frame is a ping, pong or close of at most 125 bytes, a close payload
 *     is empty or a valid code plus a UTF-8 reason, and nothing is delivered after it;
 *   - the result is 0 or one of the documented errors, each mapped to its close code;
 *   - parsing in one piece, byte by byte and in pieces of a size derived from the input
 *     delivers the same events and the same result (qim_ws_parse_buffer's `step`);
 *   - a callback's non-zero return stops parsing at once and is returned;
 *   - the parser holds no buffer once idle, and never more than one message plus one
 *     control payload while data is split;
 *   - re-encoding the delivered events as client frames (alternately whole and in two
 *     fragments) and parsing them again gives the same events: decode, encode, decode;
 *   - qim_ws_utf8_valid agrees with a plain reference decoder on the raw bytes.
 * Two message limits run: the gateway's default and a tiny one (so 1009 is reachable).
 * Seeds: tests/fuzz/corpus/ws/.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/ws.h"

static const size_t kMaxMessage[] = {262144, 48};

enum { EV_MESSAGE = 'M', EV_CONTROL = 'C', STOPPED = 77 };

typedef struct events {
  fuzz_log log; /* per event: tag, opcode, u64 length, payload */
  size_t max_message, count, stop_at;
  bool closed;
} events;

static void record(events *e, uint8_t tag, int opcode, const uint8_t *data, size_t len) {
  uint8_t h[2] = {tag, (uint8_t)opcode};
  fuzz_log_put(&e->log, h, 2);
  fuzz_log_u64(&e->log, len);
  fuzz_log_put(&e->log, data, len);
  e->count++;
}

static int on_message(void *ud, int opcode, uint8_t *data, size_t len) {
  events *e = ud;
  FUZZ_CHECK(!e->closed);
  FUZZ_CHECK(opcode == QIM_WS_OP_TEXT || opcode == QIM_WS_OP_BINARY);
  FUZZ_CHECK(len <= e->max_message);
  if (opcode == QIM_WS_OP_TEXT) FUZZ_CHECK(qim_ws_utf8_valid(data, len));
  record(e, EV_MESSAGE, opcode, data, len);
  return e->stop_at && e->count == e->stop_at ? STOPPED : 0;
}

static int on_control(void *ud, int opcode, uint8_t *data, size_t len) {
  events *e = ud;
  FUZZ_CHECK(!e->closed);
  FUZZ_CHECK(opcode == QIM_WS_OP_PING || opcode == QIM_WS_OP_PONG || opcode == QIM_WS_OP_CLOSE);
  FUZZ_CHECK(len <= QIM_WS_MAX_CONTROL);
  if (opcode == QIM_WS_OP_CLOSE) {
    FUZZ_CHECK(len != 1);
    if (len >= 2) {
      FUZZ_CHECK(qim_ws_close_code_valid((uint16_t)(data[0] << 8 | data[1])));
      FUZZ_CHECK(qim_ws_utf8_valid(data + 2, len - 2));
    }
    e->closed = true;
  }
  record(e, EV_CONTROL, opcode, data, len);
  return e->stop_at && e->count == e->stop_at ? STOPPED : 0;
}

static const qim_ws_events kEvents = {on_message, on_control};

static int parse(const uint8_t *d, size_t n, size_t max, size_t step, size_t stop_at, events *e) {
  *e = (events){.max_message = max, .stop_at = stop_at};
  int rc = qim_ws_parse_buffer(d, n, max, step, &kEvents, e);
  if (rc == STOPPED) return rc;
  FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -EILSEQ || rc == -EMSGSIZE || rc == -ENOMEM);
  if (rc) {
    uint16_t code = qim_ws_error_close_code(rc);
    FUZZ_CHECK(code == QIM_WS_CLOSE_PROTOCOL || code == QIM_WS_CLOSE_INVALID_DATA ||
               code == QIM_WS_CLOSE_TOO_BIG || code == QIM_WS_CLOSE_INTERNAL);
  }
  return rc;
}

/* One masked client frame. */
static void put_frame(fuzz_log *out, bool fin, int opcode, const uint8_t *p, size_t len) {
  static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
  uint8_t h[14];
  size_t n = 0;
  h[n++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
  if (len < 126) {
    h[n++] = (uint8_t)(0x80 | len);
  } else if (len < 65536) {
    h[n++] = 0x80 | 126;
    h[n++] = (uint8_t)(len >> 8), h[n++] = (uint8_t)len;
  } else {
    h[n++] = 0x80 | 127;
    for (int s = 56; s >= 0; s -= 8) h[n++] = (uint8_t)((uint64_t)len >> s);
  }
  memcpy(h + n, mask, 4);
  fuzz_log_put(out, h, n + 4);
  for (size_t i = 0; i < len; i++) {
    uint8_t b = p[i] ^ mask[i % 4];
    fuzz_log_put(out, &b, 1);
  }
}

/* The events of `log` as client frames: data messages alternately whole and split in two. */
static void reencode(const fuzz_log *log, fuzz_log *out) {
  size_t at = 0, index = 0;
  while (at < log->n) {
    uint8_t tag = log->p[at], op = log->p[at + 1];
    uint64_t len;
    memcpy(&len, log->p + at + 2, sizeof len);
    const uint8_t *p = log->p + at + 10;
    if (tag == EV_MESSAGE && len >= 2 && index++ % 2) {
      put_frame(out, false, op, p, len / 2);
      put_frame(out, true, QIM_WS_OP_CONT, p + len / 2, len - len / 2);
    } else {
      put_frame(out, true, op, p, len);
    }
    at += 10 + len;
  }
}

/* Feeds by hand to look at the parser's buffers between reads. */
static void check_buffers(const uint8_t *d, size_t n, size_t max, size_t step) {
  uint8_t *copy = qim_memdup(d, n);
  qim_ws_parser p;
  qim_ws_parser_init(&p, max);
  events e = {.max_message = max};
  int rc = 0;
  for (size_t o = 0; o < n && rc == 0; o += step) {
    rc = qim_ws_parse(&p, copy + o, n - o < step ? n - o : step, &kEvents, &e);
    FUZZ_CHECK(qim_ws_parser_buffered(&p) <= max + QIM_WS_MAX_CONTROL + 14);
  }
  if (rc == 0 && qim_ws_parser_idle(&p)) FUZZ_CHECK(qim_ws_parser_buffered(&p) == 0);
  if (rc) FUZZ_CHECK(qim_ws_parse(&p, copy, 0, &kEvents, &e) == rc); /* sticky */
  qim_ws_parser_free(&p);
  fuzz_log_free(&e.log);
  qim_free(copy);
}

static void fuzz_limit(const uint8_t *d, size_t n, size_t max) {
  uint32_t h = fuzz_hash(d, n);
  size_t steps[3] = {0, 1, 2 + h % 29};
  events first;
  int rc = parse(d, n, max, 0, 0, &first);
  for (size_t i = 1; i < 3; i++) {
    events again;
    FUZZ_CHECK(parse(d, n, max, steps[i], 0, &again) == rc);
    FUZZ_CHECK(fuzz_log_equal(&first.log, &again.log));
    fuzz_log_free(&again.log);
  }
  if (first.count) { /* stopping from a callback */
    events stop;
    size_t at = 1 + h % first.count;
    FUZZ_CHECK(parse(d, n, max, steps[2], at, &stop) == STOPPED && stop.count == at);
    FUZZ_CHECK(stop.log.n <= first.log.n && memcmp(stop.log.p, first.log.p, stop.log.n) == 0);
    fuzz_log_free(&stop.log);
  }
  fuzz_log frames = {0};
  reencode(&first.log, &frames);
  events back;
  FUZZ_CHECK(parse(frames.p, frames.n, max, 0, 0, &back) == 0);
  FUZZ_CHECK(fuzz_log_equal(&first.log, &back.log));
  fuzz_log_free(&back.log);
  fuzz_log_free(&frames);
  fuzz_log_free(&first.log);
  check_buffers(d, n, max, steps[2]);
}

/* A plain UTF-8 decoder (RFC 3629), written independently of ws.c. */
static bool ref_utf8(const uint8_t *s, size_t n) {
  static const uint32_t min[4] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80)
      k = 0, cp = c;
    else if ((c & 0xE0) == 0xC0)
      k = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      k = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      k = 3, cp = c & 0x07;
    else
      return false;
    if (n - i <= k) return false;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + j] & 0x3F);
    }
    if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += k + 1;
  }
  return true;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (size_t i = 0; i < sizeof kMaxMessage / sizeof kMaxMessage[0]; i++)
    fuzz_limit(data, size, kMaxMessage[i]);
  FUZZ_CHECK(qim_ws_utf8_valid(data, size) == ref_utf8(data, size));
  return 0;
}
