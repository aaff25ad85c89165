/*
 * wsc.c — client-side WebSocket framing of the client runtime and qim-bench (see wsc.h): the
 * handshake text, masked client frames and the parser of the server's unmasked frames.
 */
#include "client/wsc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/websocket.h"

#define HEAD_MAX 8192

/* ---- handshake --------------------------------------------------------------------------------
 */

void qim_wsc_key(const uint8_t nonce[16], char out[QIM_WSC_KEY_LEN + 1]) {
  /* 16 bytes give exactly 24 characters with padding, so this cannot fail. */
  if (qim_b64std_encode(nonce, 16, out, QIM_WSC_KEY_LEN + 1) < 0) out[0] = '\0';
}

int qim_wsc_request(char *out, size_t cap, const char *host, const char *path, const char *key) {
  int n = snprintf(out, cap,
                   "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                   "User-Agent: qim-client\r\n\r\n",
                   path, host, key);
  if (n < 0 || (size_t)n >= cap) return -ENOSPC;
  return n;
}

/* The value of header `name` within the header block [p, end), trimmed; NULL if absent. */
static const char *header_value(const char *p, const char *end, const char *name, size_t *vlen) {
  size_t nlen = strlen(name);
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    if ((size_t)(eol - p) > nlen && strncasecmp(p, name, nlen) == 0 && p[nlen] == ':') {
      const char *v = p + nlen + 1, *e = eol;
      while (v < e && (*v == ' ' || *v == '\t')) v++;
      while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
      *vlen = (size_t)(e - v);
      return v;
    }
    p = eol + 1;
  }
  return NULL;
}

static bool header_is(const char *p, const char *end, const char *name, const char *want) {
  size_t vlen = 0;
  const char *v = header_value(p, end, name, &vlen);
  return v && vlen == strlen(want) && strncasecmp(v, want, vlen) == 0;
}

int qim_wsc_response(const char *buf, size_t len, const char *key, size_t *head_len, int *status) {
  const char *end = NULL;
  for (size_t i = 0; i + 3 < len && i + 4 <= HEAD_MAX; i++)
    if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
      end = buf + i + 4;
      break;
    }
  if (!end) return len >= HEAD_MAX ? -EMSGSIZE : QIM_AGAIN;
  int code = 0;
  if (sscanf(buf, "HTTP/1.%*1[01] %3d", &code) != 1) return -EPROTO;
  *status = code;
  if (code != 101) return -ECONNREFUSED;
  char want[QIM_WS_ACCEPT_LEN + 1];
  qim_websocket_accept(key, want);
  if (!header_is(buf, end, "Upgrade", "websocket") ||
      !header_is(buf, end, "Connection", "Upgrade") ||
      !header_is(buf, end, "Sec-WebSocket-Accept", want))
    return -EPROTO;
  *head_len = (size_t)(end - buf);
  return 0;
}

/* ---- client frames ----------------------------------------------------------------------------
 */

size_t qim_wsc_encode(uint8_t *out, int opcode, const void *payload, size_t len, uint32_t mask) {
  size_t h = 0;
  out[h++] = (uint8_t)(0x80 | (opcode & 0x0F));
  if (len < 126) {
    out[h++] = (uint8_t)(0x80 | len);
  } else if (len <= 0xFFFF) {
    out[h++] = 0x80 | 126;
    out[h++] = (uint8_t)(len >> 8);
    out[h++] = (uint8_t)len;
  } else {
    out[h++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--) out[h++] = (uint8_t)((uint64_t)len >> (8 * i));
  }
  uint8_t m[4] = {(uint8_t)(mask >> 24), (uint8_t)(mask >> 16), (uint8_t)(mask >> 8),
                  (uint8_t)mask};
  memcpy(out + h, m, 4);
  h += 4;
  const uint8_t *src = payload;
  for (size_t i = 0; i < len; i++) out[h + i] = src[i] ^ m[i & 3];
  return h + len;
}

/* ---- parsing server frames --------------------------------------------------------------------
 */

void qim_wsc_parser_init(qim_wsc_parser *p, size_t max_message) {
  memset(p, 0, sizeof *p);
  p->max_message_ = max_message ? max_message : 1;
}

/* A parsed frame header. */
typedef struct fhdr {
  int fin, op;
  uint64_t len;
  size_t hlen;
} fhdr;

/* Reads the header at d[0..n): 0 ok, QIM_AGAIN if incomplete, -EPROTO on a violation. */
static int read_header(const uint8_t *d, size_t n, fhdr *h) {
  if (n < 2) return QIM_AGAIN;
  if ((d[0] & 0x70) || (d[1] & 0x80)) return -EPROTO; /* reserved bits; servers never mask */
  h->fin = d[0] >> 7;
  h->op = d[0] & 0x0F;
  uint64_t len = d[1] & 0x7F;
  h->hlen = 2;
  if (len == 126) {
    if (n < 4) return QIM_AGAIN;
    len = ((uint64_t)d[2] << 8) | d[3];
    h->hlen = 4;
  } else if (len == 127) {
    if (n < 10) return QIM_AGAIN;
    len = 0;
    for (int i = 0; i < 8; i++) len = (len << 8) | d[2 + i];
    if (len >> 63) return -EPROTO;
    h->hlen = 10;
  }
  h->len = len;
  bool control = h->op >= 0x8;
  if (control ? (h->op > QIM_WS_OP_PONG || !h->fin || len > 125) : h->op > QIM_WS_OP_BINARY)
    return -EPROTO;
  return 0;
}

/* Appends a fragment to the message in progress, bounded by max_message. */
static int msg_append(qim_wsc_parser *p, const uint8_t *d, size_t n) {
  if (p->msg_len_ + n > p->msg_cap_) {
    size_t cap = p->msg_cap_ ? p->msg_cap_ : 256;
    while (cap < p->msg_len_ + n) cap *= 2;
    uint8_t *m = qim_tryrealloc(p->msg_, cap);
    if (!m) return -ENOMEM;
    p->msg_ = m;
    p->msg_cap_ = cap;
  }
  memcpy(p->msg_ + p->msg_len_, d, n);
  p->msg_len_ += n;
  return 0;
}

/* Handles one complete frame: its header `h` and payload `pl`. */
static int on_frame(qim_wsc_parser *p, const fhdr *h, const uint8_t *pl, const qim_wsc_events *ev,
                    void *ud) {
  if (h->op >= 0x8) return ev->on_control ? ev->on_control(ud, h->op, pl, (size_t)h->len) : 0;
  if (h->op == QIM_WS_OP_CONT) {
    if (!p->msg_op_) return -EPROTO;
  } else if (p->msg_op_) {
    return -EPROTO; /* a new message inside a fragmented one */
  }
  if (h->op != QIM_WS_OP_CONT && h->fin)
    return ev->on_message ? ev->on_message(ud, h->op, pl, (size_t)h->len) : 0;
  if (h->op != QIM_WS_OP_CONT) p->msg_op_ = h->op;
  int rc = msg_append(p, pl, (size_t)h->len);
  if (rc || !h->fin) return rc;
  int op = p->msg_op_;
  p->msg_op_ = 0;
  rc = ev->on_message ? ev->on_message(ud, op, p->msg_, p->msg_len_) : 0;
  qim_free(p->msg_);
  p->msg_ = NULL;
  p->msg_len_ = p->msg_cap_ = 0;
  return rc;
}

/* Parses complete frames from d[0..n); *used is what was consumed. */
static int parse_frames(qim_wsc_parser *p, const uint8_t *d, size_t n, size_t *used,
                        const qim_wsc_events *ev, void *ud) {
  size_t off = 0;
  int rc = 0;
  while (off < n) {
    fhdr h;
    rc = read_header(d + off, n - off, &h);
    if (rc == QIM_AGAIN) {
      rc = 0;
      break;
    }
    if (rc) break;
    if (h.op < 0x8 && h.len + p->msg_len_ > p->max_message_) {
      rc = -EMSGSIZE;
      break;
    }
    if (n - off - h.hlen < h.len) break;
    rc = on_frame(p, &h, d + off + h.hlen, ev, ud);
    off += h.hlen + (size_t)h.len;
    if (rc) break;
  }
  *used = off;
  return rc;
}

/* Keeps d[0..n) for the next call (it starts an incomplete frame). */
static int carry(qim_wsc_parser *p, const uint8_t *d, size_t n) {
  if (n > p->cap_) {
    uint8_t *b = qim_tryrealloc(p->buf_, n);
    if (!b) return -ENOMEM;
    p->buf_ = b;
    p->cap_ = n;
  }
  memmove(p->buf_, d, n);
  p->len_ = n;
  return 0;
}

int qim_wsc_parse(qim_wsc_parser *p, const uint8_t *data, size_t len, const qim_wsc_events *ev,
                  void *ud) {
  if (p->err_) return p->err_;
  size_t used = 0;
  int rc;
  if (p->len_ == 0) {
    rc = parse_frames(p, data, len, &used, ev, ud);
    if (rc == 0 && used < len) rc = carry(p, data + used, len - used);
  } else {
    /* Complete the carried frame first: append everything, then parse the whole. */
    size_t old = p->len_;
    if (old + len > p->cap_) {
      size_t cap = old + len;
      uint8_t *b = qim_tryrealloc(p->buf_, cap);
      if (!b) return p->err_ = -ENOMEM;
      p->buf_ = b;
      p->cap_ = cap;
    }
    memcpy(p->buf_ + old, data, len);
    p->len_ = old + len;
    rc = parse_frames(p, p->buf_, p->len_, &used, ev, ud);
    if (rc == 0) rc = carry(p, p->buf_ + used, p->len_ - used);
  }
  if (rc < 0) p->err_ = rc;
  if (rc) p->len_ = 0;                   /* stopped: the rest of the input is not looked at */
  if (p->len_ == 0 && p->cap_ > 65536) { /* do not keep a large buffer while idle */
    qim_free(p->buf_);
    p->buf_ = NULL;
    p->cap_ = 0;
  }
  return rc;
}

size_t qim_wsc_parser_buffered(const qim_wsc_parser *p) {
  return p->len_ + p->msg_len_;
}

void qim_wsc_parser_free(qim_wsc_parser *p) {
  if (!p) return;
  qim_free(p->buf_);
  qim_free(p->msg_);
  p->buf_ = p->msg_ = NULL;
  p->len_ = p->cap_ = p->msg_len_ = p->msg_cap_ = 0;
  p->msg_op_ = 0;
}
