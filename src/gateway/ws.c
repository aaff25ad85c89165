/*
 * ws.c — RFC 6455 server framing: shared encoded frames and the client-frame parser
 * (see ws.h). The parser is a small state machine — header, payload, closed, failed —
 * that copies only what a read boundary forces it to keep.
 */
#include "gateway/ws.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/mem.h"

/* ---- shared encoded frames ------------------------------------------------------------------- */

struct qim_ws_frame {
  atomic_uint refs;
  size_t size;
  uint8_t bytes[];
};

static bool is_control(int opcode) {
  return (opcode & 0x8) != 0;
}

size_t qim_ws_header_encode(uint8_t out[QIM_WS_MAX_HEADER], int opcode, uint64_t len) {
  out[0] = (uint8_t)(0x80 | (opcode & 0x0F));
  if (len < 126) {
    out[1] = (uint8_t)len;
    return 2;
  }
  if (len <= 0xFFFF) {
    out[1] = 126;
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    return 4;
  }
  out[1] = 127;
  for (int i = 0; i < 8; i++) out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
  return 10;
}

static qim_ws_frame *frame_block(size_t size) {
  qim_ws_frame *f = qim_malloc(sizeof *f + size);
  atomic_init(&f->refs, 1);
  f->size = size;
  return f;
}

qim_ws_frame *qim_ws_frame_alloc(int opcode, size_t len, uint8_t **payload) {
  if (is_control(opcode) && len > QIM_WS_MAX_CONTROL) abort(); /* caller bug */
  uint8_t hdr[QIM_WS_MAX_HEADER];
  size_t hlen = qim_ws_header_encode(hdr, opcode, len);
  qim_ws_frame *f = frame_block(hlen + len);
  memcpy(f->bytes, hdr, hlen);
  *payload = f->bytes + hlen;
  return f;
}

qim_ws_frame *qim_ws_frame_new(int opcode, const void *payload, size_t len) {
  uint8_t *dst;
  qim_ws_frame *f = qim_ws_frame_alloc(opcode, len, &dst);
  if (len) memcpy(dst, payload, len);
  return f;
}

qim_ws_frame *qim_ws_frame_close(uint16_t code, const char *reason) {
  size_t rlen = reason ? strlen(reason) : 0;
  if (rlen > QIM_WS_MAX_CONTROL - 2) rlen = QIM_WS_MAX_CONTROL - 2;
  uint8_t *dst;
  qim_ws_frame *f = qim_ws_frame_alloc(QIM_WS_OP_CLOSE, 2 + rlen, &dst);
  dst[0] = (uint8_t)(code >> 8);
  dst[1] = (uint8_t)code;
  if (rlen) memcpy(dst + 2, reason, rlen);
  return f;
}

qim_ws_frame *qim_ws_frame_raw(const void *bytes, size_t len) {
  qim_ws_frame *f = frame_block(len);
  if (len) memcpy(f->bytes, bytes, len);
  return f;
}

qim_ws_frame *qim_ws_frame_ref(qim_ws_frame *f) {
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
  return f;
}

void qim_ws_frame_unref(qim_ws_frame *f) {
  if (!f) return;
  /* acq_rel: the freeing thread must see every write made through other references. */
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1) qim_free(f);
}

const uint8_t *qim_ws_frame_bytes(const qim_ws_frame *f) {
  return f->bytes;
}
size_t qim_ws_frame_size(const qim_ws_frame *f) {
  return f->size;
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

/*
 * Incremental validator state: bits 0-1 hold how many continuation bytes are still
 * due, bits 8-15 and 16-23 the lowest and highest value the next one may take (which
 * is how overlongs, surrogates and values above U+10FFFF are excluded). 0 means
 * "between characters".
 */
#define UTF8_BAD 0xFFFFFFFFu
#define UTF8_ST(need, lo, hi) ((uint32_t)(need) | (uint32_t)(lo) << 8 | (uint32_t)(hi) << 16)

static uint32_t utf8_lead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return UTF8_ST(1, 0x80, 0xBF);
  if (b == 0xE0) return UTF8_ST(2, 0xA0, 0xBF);
  if (b == 0xED) return UTF8_ST(2, 0x80, 0x9F);
  if (b >= 0xE1 && b <= 0xEF) return UTF8_ST(2, 0x80, 0xBF);
  if (b == 0xF0) return UTF8_ST(3, 0x90, 0xBF);
  if (b >= 0xF1 && b <= 0xF3) return UTF8_ST(3, 0x80, 0xBF);
  if (b == 0xF4) return UTF8_ST(3, 0x80, 0x8F);
  return UTF8_BAD;
}

/* Advances *st over `s`; false at the first byte that cannot belong to UTF-8. */
static bool utf8_feed(uint32_t *st, const uint8_t *s, size_t n) {
  uint32_t state = *st;
  size_t i = 0;
  while (i < n) {
    if (state == 0) {
      /* Chat text is mostly ASCII: skip it eight bytes at a time. */
      while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
      }
      if (i == n) break;
      uint8_t b = s[i++];
      if (b < 0x80) continue;
      state = utf8_lead(b);
      if (state == UTF8_BAD) return false;
      continue;
    }
    uint8_t b = s[i++];
    if (b < ((state >> 8) & 0xFF) || b > ((state >> 16) & 0xFF)) return false;
    uint32_t need = (state & 3) - 1;
    state = need ? UTF8_ST(need, 0x80, 0xBF) : 0;
  }
  *st = state;
  return true;
}

bool qim_ws_utf8_valid(const uint8_t *s, size_t n) {
  uint32_t st = 0;
  return utf8_feed(&st, s, n) && st == 0;
}

bool qim_ws_close_code_valid(uint16_t code) {
  if (code >= 1000 && code <= 1003) return true;
  if (code >= 1007 && code <= 1014) return true; /* 1012-1014 are IANA-registered */
  return code >= 3000 && code <= 4999;
}

uint16_t qim_ws_error_close_code(int err) {
  switch (err) {
    case -EPROTO:
      return QIM_WS_CLOSE_PROTOCOL;
    case -EILSEQ:
      return QIM_WS_CLOSE_INVALID_DATA;
    case -EMSGSIZE:
      return QIM_WS_CLOSE_TOO_BIG;
    default:
      return QIM_WS_CLOSE_INTERNAL;
  }
}

/* ---- parser ---------------------------------------------------------------------------------- */

enum { ST_HEADER = 0, ST_PAYLOAD, ST_CLOSED, ST_FAILED };

/* Handed to on_message for an empty message, so `data` is never NULL. */
static uint8_t empty_payload[1];

void qim_ws_parser_init(qim_ws_parser *p, size_t max_message) {
  memset(p, 0, sizeof *p);
  p->max_message_ = max_message ? max_message : 1;
}

static void drop_buffers(qim_ws_parser *p) {
  qim_free(p->msg_);
  qim_free(p->ctl_);
  p->msg_ = p->ctl_ = NULL;
  p->msg_len_ = p->msg_cap_ = 0;
  p->ctl_len_ = 0;
}

void qim_ws_parser_free(qim_ws_parser *p) {
  if (p) drop_buffers(p);
}

size_t qim_ws_parser_buffered(const qim_ws_parser *p) {
  return p->msg_cap_ + (p->ctl_ ? QIM_WS_MAX_CONTROL : 0);
}

bool qim_ws_parser_idle(const qim_ws_parser *p) {
  return p->state_ == ST_HEADER && p->hdr_len_ == 0 && p->msg_opcode_ == 0;
}

static int fail(qim_ws_parser *p, int err) {
  drop_buffers(p);
  p->state_ = ST_FAILED;
  p->err_ = err;
  return err;
}

/* XORs the mask over n bytes (src may equal dst), continuing at the frame offset. */
static void unmask(qim_ws_parser *p, uint8_t *dst, const uint8_t *src, size_t n) {
  uint8_t m8[8];
  for (int k = 0; k < 8; k++) m8[k] = p->mask_[(p->mask_pos_ + k) & 3];
  uint64_t m;
  memcpy(&m, m8, 8);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, src + i, 8);
    w ^= m;
    memcpy(dst + i, &w, 8);
  }
  for (; i < n; i++) dst[i] = src[i] ^ m8[i & 7];
  p->mask_pos_ = (uint8_t)((p->mask_pos_ + n) & 3);
}

static size_t header_size(uint8_t b1) {
  uint8_t l = b1 & 0x7F;
  return 2 + (l == 126 ? 2 : l == 127 ? 8 : 0) + 4;
}

static uint64_t read_be(const uint8_t *s, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | s[i];
  return v;
}

/*
 * Checks what the first two header bytes alone decide, so a violation is answered at
 * once instead of after waiting for header bytes that may never come.
 */
static int check_start(uint8_t b0, uint8_t b1) {
  if (b0 & 0x70) return -EPROTO;    /* no extension was negotiated */
  if (!(b1 & 0x80)) return -EPROTO; /* clients must mask (§5.1) */
  int op = b0 & 0x0F;
  if (op > QIM_WS_OP_BINARY && op < QIM_WS_OP_CLOSE) return -EPROTO;
  if (op > QIM_WS_OP_PONG) return -EPROTO;
  return 0;
}

/* Checks a complete header in p->hdr_ against the rules and enters ST_PAYLOAD. */
static int begin_frame(qim_ws_parser *p) {
  uint8_t b0 = p->hdr_[0], b1 = p->hdr_[1];
  int op = b0 & 0x0F;
  bool fin = (b0 & 0x80) != 0;
  uint64_t len = b1 & 0x7F;
  size_t off = 2;
  if (len == 126)
    len = read_be(p->hdr_ + 2, 2), off = 4;
  else if (len == 127)
    len = read_be(p->hdr_ + 2, 8), off = 10;
  if (len >> 63) return -EPROTO;
  memcpy(p->mask_, p->hdr_ + off, 4);
  switch (op) {
    case QIM_WS_OP_CLOSE:
    case QIM_WS_OP_PING:
    case QIM_WS_OP_PONG:
      if (!fin || len > QIM_WS_MAX_CONTROL) return -EPROTO;
      break;
    case QIM_WS_OP_TEXT:
    case QIM_WS_OP_BINARY:
      if (p->msg_opcode_) return -EPROTO;
      if (len > p->max_message_) return -EMSGSIZE;
      p->msg_opcode_ = (uint8_t)op;
      p->utf8_ = 0;
      break;
    case QIM_WS_OP_CONT:
      if (!p->msg_opcode_) return -EPROTO;
      if (len > p->max_message_ - p->msg_len_) return -EMSGSIZE;
      break;
    default:
      return -EPROTO;
  }
  p->opcode_ = (uint8_t)op;
  p->fin_ = fin;
  p->remaining_ = len;
  p->mask_pos_ = 0;
  p->state_ = ST_PAYLOAD;
  return 0;
}

/* Collects header bytes; QIM_AGAIN when the input ran out first. */
static int take_header(qim_ws_parser *p, const uint8_t *data, size_t len, size_t *used) {
  size_t i = 0;
  for (;;) {
    size_t need = p->hdr_len_ >= 2 ? header_size(p->hdr_[1]) : 2;
    if (p->hdr_len_ >= need) break;
    if (p->hdr_len_ == 2) {
      int rc = check_start(p->hdr_[0], p->hdr_[1]);
      if (rc) return rc;
    }
    if (i == len) {
      *used = i;
      return QIM_AGAIN;
    }
    size_t n = need - p->hdr_len_;
    if (n > len - i) n = len - i;
    memcpy(p->hdr_ + p->hdr_len_, data + i, n);
    p->hdr_len_ = (uint8_t)(p->hdr_len_ + n);
    i += n;
  }
  *used = i;
  p->hdr_len_ = 0;
  return begin_frame(p);
}

/*
 * Makes room for n more message bytes. Capacity follows the bytes actually received
 * (doubling from 4 KB, never past what the frame header announced), so a peer that
 * announces a large frame and then stalls does not pin a large buffer.
 */
static int msg_reserve(qim_ws_parser *p, size_t n) {
  size_t need = p->msg_len_ + n;
  if (need <= p->msg_cap_) return 0;
  size_t cap = p->msg_cap_ ? p->msg_cap_ * 2 : 4096;
  size_t announced = p->msg_len_ + (size_t)p->remaining_;
  if (cap > announced) cap = announced;
  if (cap < need) cap = need;
  uint8_t *nb = qim_trymalloc(cap);
  if (!nb) return -ENOMEM;
  if (p->msg_len_) memcpy(nb, p->msg_, p->msg_len_);
  qim_free(p->msg_);
  p->msg_ = nb;
  p->msg_cap_ = cap;
  return 0;
}

/* Validates a close payload: empty, or a wire-legal code plus a UTF-8 reason. */
static int check_close(const uint8_t *d, size_t n) {
  if (n == 0) return 0;
  if (n == 1) return -EPROTO;
  if (!qim_ws_close_code_valid((uint16_t)(d[0] << 8 | d[1]))) return -EPROTO;
  return qim_ws_utf8_valid(d + 2, n - 2) ? 0 : -EILSEQ;
}

static int deliver_control(qim_ws_parser *p, uint8_t *d, size_t n, const qim_ws_events *ev,
                           void *ud, int *cbret) {
  p->state_ = ST_HEADER;
  if (p->opcode_ == QIM_WS_OP_CLOSE) {
    int rc = check_close(d, n);
    if (rc) return rc;
    p->state_ = ST_CLOSED;
  }
  *cbret = ev->on_control ? ev->on_control(ud, p->opcode_, n ? d : empty_payload, n) : 0;
  return 0;
}

/* Payload of a ping/pong/close; 0 when the frame finished, QIM_AGAIN for more input. */
static int control_payload(qim_ws_parser *p, uint8_t **data, size_t *len, const qim_ws_events *ev,
                           void *ud, int *cbret) {
  size_t want = (size_t)p->remaining_;
  if (p->ctl_len_ == 0 && want <= *len) { /* whole frame at hand: no copy */
    uint8_t *d = *data;
    unmask(p, d, d, want);
    *data += want, *len -= want;
    p->remaining_ = 0;
    return deliver_control(p, d, want, ev, ud, cbret);
  }
  if (*len == 0) return QIM_AGAIN; /* the header ended the read: nothing to keep yet */
  if (!p->ctl_) p->ctl_ = qim_malloc(QIM_WS_MAX_CONTROL);
  size_t n = want < *len ? want : *len;
  unmask(p, p->ctl_ + p->ctl_len_, *data, n);
  p->ctl_len_ = (uint8_t)(p->ctl_len_ + n);
  *data += n, *len -= n;
  p->remaining_ -= n;
  if (p->remaining_) return QIM_AGAIN;
  /* Deliver, then free: the buffer is only for frames split across reads. */
  uint8_t tmp[QIM_WS_MAX_CONTROL];
  size_t clen = p->ctl_len_;
  memcpy(tmp, p->ctl_, clen);
  qim_free(p->ctl_);
  p->ctl_ = NULL;
  p->ctl_len_ = 0;
  return deliver_control(p, tmp, clen, ev, ud, cbret);
}

/* Hands over a complete data message and returns the parser to idle. */
static int finish_message(qim_ws_parser *p, uint8_t *d, size_t n, const qim_ws_events *ev, void *ud,
                          int *cbret) {
  int op = p->msg_opcode_;
  p->msg_opcode_ = 0;
  p->state_ = ST_HEADER;
  *cbret = ev->on_message ? ev->on_message(ud, op, n ? d : empty_payload, n) : 0;
  qim_free(p->msg_);
  p->msg_ = NULL;
  p->msg_len_ = p->msg_cap_ = 0;
  return 0;
}

/* Payload of a data frame; 0 when the frame finished, QIM_AGAIN for more input. */
static int data_payload(qim_ws_parser *p, uint8_t **data, size_t *len, const qim_ws_events *ev,
                        void *ud, int *cbret) {
  bool text = p->msg_opcode_ == QIM_WS_OP_TEXT;
  size_t want = (size_t)p->remaining_;
  if (p->fin_ && !p->msg_ && p->opcode_ != QIM_WS_OP_CONT && want <= *len) {
    /* Fast path: an unfragmented message entirely in this read, delivered in place. */
    uint8_t *d = *data;
    unmask(p, d, d, want);
    *data += want, *len -= want;
    p->remaining_ = 0;
    if (text && !qim_ws_utf8_valid(d, want)) return -EILSEQ;
    return finish_message(p, d, want, ev, ud, cbret);
  }
  size_t n = want < *len ? want : *len;
  if (n) {
    int rc = msg_reserve(p, n);
    if (rc) return rc;
    uint8_t *dst = p->msg_ + p->msg_len_;
    unmask(p, dst, *data, n);
    if (text && !utf8_feed(&p->utf8_, dst, n)) return -EILSEQ; /* fail fast */
    p->msg_len_ += n;
    p->remaining_ -= n;
    *data += n, *len -= n;
  }
  if (p->remaining_) return QIM_AGAIN;
  p->state_ = ST_HEADER;
  if (!p->fin_) return 0;
  if (text && p->utf8_ != 0) return -EILSEQ; /* ends inside a character */
  return finish_message(p, p->msg_, p->msg_len_, ev, ud, cbret);
}

int qim_ws_parse(qim_ws_parser *p, uint8_t *data, size_t len, const qim_ws_events *ev, void *ud) {
  for (;;) {
    if (p->state_ == ST_FAILED) return p->err_;
    if (p->state_ == ST_CLOSED) return 0; /* nothing may follow a close frame */
    if (p->state_ == ST_HEADER) {
      if (len == 0) return 0;
      size_t used;
      int rc = take_header(p, data, len, &used);
      data += used, len -= used;
      if (rc == QIM_AGAIN) return 0;
      if (rc < 0) return fail(p, rc);
    }
    int cbret = 0;
    int rc = is_control(p->opcode_) ? control_payload(p, &data, &len, ev, ud, &cbret)
                                    : data_payload(p, &data, &len, ev, ud, &cbret);
    if (rc == QIM_AGAIN) return 0;
    if (rc < 0) return fail(p, rc);
    if (cbret) return cbret;
  }
}

int qim_ws_parse_buffer(const uint8_t *data, size_t len, size_t max_message, size_t step,
                        const qim_ws_events *ev, void *ud) {
  uint8_t *copy = qim_memdup(data, len);
  qim_ws_parser p;
  qim_ws_parser_init(&p, max_message);
  if (!step || step > len) step = len ? len : 1;
  int rc = 0;
  for (size_t o = 0; o < len && rc == 0; o += step)
    rc = qim_ws_parse(&p, copy + o, len - o < step ? len - o : step, ev, ud);
  qim_ws_parser_free(&p);
  qim_free(copy);
  return rc;
}
