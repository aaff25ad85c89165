/*
 * wsclient.h — a small blocking WebSocket client for the gateway tests. It writes
 * hand-made frames (masked or not, any length form, any header bits) so tests can
 * send exactly the bytes a rule is about, and reads server frames with timeouts.
 * Header-only (static inline) because each tests/unit/<room>/test_*.c is its own
 * binary; functions never assert, they return codes the test checks.
 */
#ifndef QIM_TEST_WSCLIENT_H
#define QIM_TEST_WSCLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WSC_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define WSC_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

enum { WSC_LEN_AUTO = 0, WSC_LEN_16 = 16, WSC_LEN_64 = 64 };

typedef struct wsc {
  int fd;
  uint8_t *buf; /* received, not yet consumed */
  size_t len, cap;
  int status;      /* HTTP status of the handshake answer */
  char head[2048]; /* its header block */
} wsc;

static inline int64_t wsc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int wsc_connect(wsc *c, uint16_t port) {
  memset(c, 0, sizeof *c);
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return -errno;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -errno;
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return 0;
}

/* Like wsc_connect, to [::1]. */
static inline int wsc_connect6(wsc *c, uint16_t port) {
  memset(c, 0, sizeof *c);
  c->fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) return -errno;
  struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
  sa.sin6_addr = in6addr_loopback;
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -errno;
  return 0;
}

static inline void wsc_close(wsc *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  free(c->buf);
  c->buf = NULL;
  c->len = c->cap = 0;
}

static inline int wsc_write(wsc *c, const void *p, size_t n) {
  const uint8_t *s = p;
  while (n) {
    ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    s += w, n -= (size_t)w;
  }
  return 0;
}

/* Reads what is available within timeout_ms: >0 bytes, 0 at EOF, -ETIMEDOUT, -errno. */
static inline ssize_t wsc_fill(wsc *c, int timeout_ms) {
  struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
  int pr = poll(&pfd, 1, timeout_ms);
  if (pr == 0) return -ETIMEDOUT;
  if (pr < 0) return -errno;
  if (c->cap - c->len < 65536) {
    c->cap = c->cap ? c->cap * 2 : 131072;
    c->buf = realloc(c->buf, c->cap);
  }
  ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
  if (n < 0) return -errno;
  c->len += (size_t)n;
  return n;
}

static inline void wsc_consume(wsc *c, size_t n) {
  memmove(c->buf, c->buf + n, c->len - n);
  c->len -= n;
}

/* Reads an HTTP response header block; returns the status or a negative error. */
static inline int wsc_read_response(wsc *c, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    uint8_t *e = c->len >= 4 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
    if (e) {
      size_t hl = (size_t)(e - c->buf) + 4;
      size_t cp = hl < sizeof c->head - 1 ? hl : sizeof c->head - 1;
      memcpy(c->head, c->buf, cp);
      c->head[cp] = '\0';
      wsc_consume(c, hl);
      if (sscanf(c->head, "HTTP/1.1 %d", &c->status) != 1) return -EPROTO;
      return c->status;
    }
    int64_t left = end - wsc_now_ms();
    if (left <= 0) return -ETIMEDOUT;
    ssize_t n = wsc_fill(c, (int)left);
    if (n == 0) return -EPIPE;
    if (n < 0) return (int)n;
  }
}

/* Sends raw bytes as a request on a new connection and reads the answer's status. */
static inline int wsc_request(wsc *c, uint16_t port, const char *raw) {
  int rc = wsc_connect(c, port);
  if (rc == 0) rc = wsc_write(c, raw, strlen(raw));
  return rc ? rc : wsc_read_response(c, 5000);
}

/* Opens a WebSocket at `target` with the standard headers plus `extra` (CRLF lines). */
static inline int wsc_upgrade(wsc *c, uint16_t port, const char *target, const char *extra) {
  char req[4096];
  snprintf(req, sizeof req,
           "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " WSC_KEY "\r\n%s\r\n",
           target, extra ? extra : "");
  return wsc_request(c, port, req);
}

/* Reads until EOF (or reset) and returns everything after the headers as a string. */
static inline char *wsc_read_body(wsc *c, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - wsc_now_ms();
    if (left <= 0) break;
    ssize_t n = wsc_fill(c, (int)left);
    if (n <= 0) break;
  }
  char *s = malloc(c->len + 1);
  memcpy(s, c->buf, c->len);
  s[c->len] = '\0';
  return s;
}

/* A client frame: b0 = FIN|RSV|opcode as on the wire. Returns its size. */
static inline size_t wsc_frame(uint8_t *out, uint8_t b0, bool masked, const void *payload,
                               size_t len, int form) {
  static const uint8_t key[4] = {0x12, 0x9a, 0xc3, 0x7e};
  size_t o = 0;
  out[o++] = b0;
  uint8_t m = masked ? 0x80 : 0;
  if (form == WSC_LEN_64 || (form == WSC_LEN_AUTO && len > 0xFFFF)) {
    out[o++] = m | 127;
    for (int i = 0; i < 8; i++) out[o++] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  } else if (form == WSC_LEN_16 || len >= 126) {
    out[o++] = m | 126;
    out[o++] = (uint8_t)(len >> 8);
    out[o++] = (uint8_t)len;
  } else {
    out[o++] = m | (uint8_t)len;
  }
  if (masked) memcpy(out + o, key, 4), o += 4;
  const uint8_t *p = payload;
  for (size_t i = 0; i < len; i++) out[o + i] = masked ? p[i] ^ key[i & 3] : p[i];
  return o + len;
}

/* Sends one frame built by wsc_frame. */
static inline int wsc_send_raw(wsc *c, uint8_t b0, bool masked, const void *p, size_t len,
                               int form) {
  uint8_t *buf = malloc(len + 14);
  size_t n = wsc_frame(buf, b0, masked, p, len, form);
  int rc = wsc_write(c, buf, n);
  free(buf);
  return rc;
}

/* A normal masked, final frame. */
static inline int wsc_send(wsc *c, int opcode, const void *p, size_t len) {
  return wsc_send_raw(c, (uint8_t)(0x80 | opcode), true, p, len, WSC_LEN_AUTO);
}

static inline int wsc_send_text(wsc *c, const char *s) {
  return wsc_send(c, 0x1, s, strlen(s));
}

static inline int wsc_send_close(wsc *c, int code) {
  uint8_t p[2] = {(uint8_t)(code >> 8), (uint8_t)code};
  return wsc_send(c, 0x8, p, code ? 2 : 0);
}

/*
 * Reads one server frame. Returns 0 with *op and *payload (malloc'ed, NUL-terminated,
 * caller frees), -ETIMEDOUT, -EPIPE at EOF, -EPROTO if the server broke a rule it must
 * keep (masking, RSV bits, fragmentation).
 */
static inline int wsc_recv(wsc *c, int *op, char **payload, size_t *plen, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    if (c->len >= 2) {
      uint8_t b0 = c->buf[0], b1 = c->buf[1];
      if ((b1 & 0x80) || (b0 & 0x70) || !(b0 & 0x80)) return -EPROTO;
      size_t hl = 2;
      uint64_t len = b1 & 0x7F;
      if (len == 126) hl = 4;
      if (len == 127) hl = 10;
      if (c->len >= hl) {
        if (hl == 4) len = (uint64_t)c->buf[2] << 8 | c->buf[3];
        if (hl == 10) {
          len = 0;
          for (int i = 0; i < 8; i++) len = len << 8 | c->buf[2 + i];
        }
        if (c->len >= hl + len) {
          *op = b0 & 0x0F;
          *plen = (size_t)len;
          *payload = malloc((size_t)len + 1);
          memcpy(*payload, c->buf + hl, (size_t)len);
          (*payload)[len] = '\0';
          wsc_consume(c, hl + (size_t)len);
          return 0;
        }
      }
    }
    int64_t left = end - wsc_now_ms();
    if (left <= 0) return -ETIMEDOUT;
    ssize_t n = wsc_fill(c, (int)left);
    if (n == 0 || n == -ECONNRESET) return -EPIPE;
    if (n < 0) return (int)n;
  }
}

/* Reads the next data frame, answering pings on the way. Same returns as wsc_recv. */
static inline int wsc_recv_data(wsc *c, int *op, char **payload, size_t *plen, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - wsc_now_ms();
    int rc = wsc_recv(c, op, payload, plen, left > 0 ? (int)left : 0);
    if (rc) return rc;
    if (*op == 0x9) {
      wsc_send(c, 0xA, *payload, *plen);
      free(*payload);
      continue;
    }
    if (*op == 0xA) {
      free(*payload);
      continue;
    }
    return 0;
  }
}

/* Reads frames until a close frame; returns its code (1005 when empty) or a negative error. */
static inline int wsc_expect_close(wsc *c, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int op;
    char *p;
    size_t n;
    int64_t left = end - wsc_now_ms();
    int rc = wsc_recv(c, &op, &p, &n, left > 0 ? (int)left : 0);
    if (rc) return rc;
    int code = n >= 2 ? ((uint8_t)p[0] << 8 | (uint8_t)p[1]) : 1005;
    free(p);
    if (op == 0x8) return code;
  }
}

/* True when the server closes TCP within timeout_ms (input is discarded). */
static inline bool wsc_wait_eof(wsc *c, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - wsc_now_ms();
    if (left <= 0) return false;
    ssize_t n = wsc_fill(c, (int)left);
    if (n == 0 || n == -ECONNRESET) return true;
    if (n < 0) return false;
    c->len = 0;
  }
}

#endif /* QIM_TEST_WSCLIENT_H */
