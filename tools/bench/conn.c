/*
 * conn.c — qim-bench's WebSocket client connection on libuv (see conn.h).
 *
 * Reads go into one buffer shared by every connection of the process: libuv calls the
 * read callback right after the allocation, and the parser copies only an incomplete
 * frame tail, so 15,000 idle connections cost no read buffers at all.
 */
#include "conn.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "qim/err.h"
#include "qim/mem.h"

enum { ST_CONNECTING = 0, ST_HANDSHAKE, ST_OPEN, ST_CLOSING };

#define READ_BUF (256 * 1024)
#define HS_MAX 8192

static char read_buf[READ_BUF];

typedef struct wreq {
  uv_write_t req;
  size_t len;
  uint8_t data[];
} wreq;

static uint32_t next_mask(qim_bench_conn *c) {
  uint32_t x = c->mask_state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return c->mask_state = x;
}

static void closed_cb(uv_handle_t *h) {
  qim_bench_conn *c = h->data;
  qim_wsc_parser_free(&c->parser);
  qim_free(c->hs);
  c->hs = NULL;
  c->cbs->on_close(c, (qim_bench_end)c->end_why, c->end_err);
}

/* Ends the connection for `why` (the first reason wins). */
static void end(qim_bench_conn *c, qim_bench_end why, int err) {
  if (c->state == ST_CLOSING) return;
  c->state = ST_CLOSING;
  c->end_why = (uint8_t)why;
  c->end_err = err;
  uv_close((uv_handle_t *)&c->tcp, closed_cb);
}

void qim_bench_conn_close(qim_bench_conn *c) {
  end(c, QIM_BENCH_END_LOCAL, 0);
}

bool qim_bench_conn_is_open(const qim_bench_conn *c) {
  return c->state == ST_OPEN;
}

size_t qim_bench_conn_pending(const qim_bench_conn *c) {
  return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

static void write_cb(uv_write_t *req, int status) {
  wreq *w = (wreq *)req;
  qim_bench_conn *c = req->handle->data;
  qim_free(w);
  if (status < 0 && status != UV_ECANCELED) end(c, QIM_BENCH_END_IO, status);
}

/* Queues raw bytes (handshake) or an encoded frame already in a wreq. */
static int write_req(qim_bench_conn *c, wreq *w) {
  uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)w->len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
  if (rc < 0) {
    qim_free(w);
    end(c, QIM_BENCH_END_IO, rc);
  }
  return rc;
}

static int send_frame(qim_bench_conn *c, int opcode, const void *data, size_t len) {
  if (c->state != ST_OPEN) return UV_ENOTCONN;
  wreq *w = qim_malloc(sizeof *w + len + QIM_WSC_MAX_HEADER);
  w->len = qim_wsc_encode(w->data, opcode, data, len, next_mask(c));
  return write_req(c, w);
}

int qim_bench_conn_send_text(qim_bench_conn *c, const char *data, size_t len) {
  return send_frame(c, QIM_WS_OP_TEXT, data, len);
}

/* ---- frames in --------------------------------------------------------------------------------
 */

static int on_message(void *ud, int opcode, const uint8_t *data, size_t len) {
  qim_bench_conn *c = ud;
  if (opcode == QIM_WS_OP_TEXT && c->state == ST_OPEN) c->cbs->on_text(c, (const char *)data, len);
  return c->state == ST_OPEN ? 0 : 1; /* stop once the owner closed us */
}

static int on_control(void *ud, int opcode, const uint8_t *data, size_t len) {
  qim_bench_conn *c = ud;
  if (opcode == QIM_WS_OP_PING) {
    send_frame(c, QIM_WS_OP_PONG, data, len);
  } else if (opcode == QIM_WS_OP_CLOSE) {
    int code = len >= 2 ? (data[0] << 8) | data[1] : QIM_WS_CLOSE_NO_STATUS;
    end(c, QIM_BENCH_END_PEER_CLOSE, code);
    return 1;
  }
  return 0;
}

static const qim_wsc_events frame_events = {on_message, on_control};

static void feed_frames(qim_bench_conn *c, const uint8_t *data, size_t len) {
  int rc = qim_wsc_parse(&c->parser, data, len, &frame_events, c);
  if (rc < 0) end(c, QIM_BENCH_END_PROTOCOL, rc);
}

/* Collects the 101 answer; frames that follow it in the same read go to the parser. */
static void feed_handshake(qim_bench_conn *c, const char *data, size_t len) {
  size_t take = len;
  if (c->hs_len + take > HS_MAX) take = HS_MAX - c->hs_len;
  if (!c->hs) c->hs = qim_malloc(HS_MAX);
  memcpy(c->hs + c->hs_len, data, take);
  c->hs_len += take;
  size_t head = 0;
  int status = 0;
  int rc = qim_wsc_response(c->hs, c->hs_len, c->key, &head, &status);
  if (rc == QIM_AGAIN) return;
  if (rc < 0) {
    end(c, QIM_BENCH_END_HANDSHAKE, status ? status : rc);
    return;
  }
  size_t extra_at = head - (c->hs_len - take); /* offset of the first frame byte in `data` */
  qim_free(c->hs);
  c->hs = NULL;
  c->state = ST_OPEN;
  qim_wsc_parser_init(&c->parser, c->target->max_message);
  c->cbs->on_open(c);
  if (c->state == ST_OPEN && extra_at < len)
    feed_frames(c, (const uint8_t *)data + extra_at, len - extra_at);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(read_buf, sizeof read_buf);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  qim_bench_conn *c = s->data;
  if (n == UV_EOF) {
    end(c, QIM_BENCH_END_EOF, 0);
  } else if (n < 0) {
    end(c, QIM_BENCH_END_IO, (int)n);
  } else if (n > 0 && c->state == ST_HANDSHAKE) {
    feed_handshake(c, buf->base, (size_t)n);
  } else if (n > 0 && c->state == ST_OPEN) {
    feed_frames(c, (const uint8_t *)buf->base, (size_t)n);
  }
}

/* ---- connecting -------------------------------------------------------------------------------
 */

static void connect_cb(uv_connect_t *req, int status) {
  qim_bench_conn *c = req->handle->data;
  if (c->state == ST_CLOSING) return;
  if (status < 0) {
    end(c, QIM_BENCH_END_CONNECT, status);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  uint8_t nonce[16];
  for (int i = 0; i < 4; i++) {
    uint32_t r = next_mask(c);
    memcpy(nonce + 4 * i, &r, 4);
  }
  qim_wsc_key(nonce, c->key);
  wreq *w = qim_malloc(sizeof *w + 1024);
  int n = qim_wsc_request((char *)w->data, 1024, c->target->host, c->target->path, c->key);
  if (n < 0) {
    qim_free(w);
    end(c, QIM_BENCH_END_HANDSHAKE, n);
    return;
  }
  w->len = (size_t)n;
  c->state = ST_HANDSHAKE;
  if (write_req(c, w) == 0) uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* A socket bound to `source` (port chosen at connect time), for uv_tcp_open. */
static int bound_socket(const struct sockaddr_in *source) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
#ifdef IP_BIND_ADDRESS_NO_PORT
  int one = 1;
  setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
#endif
  if (bind(fd, (const struct sockaddr *)source, sizeof *source) != 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

int qim_bench_conn_start(qim_bench_conn *c, uv_loop_t *loop, const qim_bench_target *t,
                         const struct sockaddr_in *source, const qim_bench_conn_cbs *cbs,
                         void *ud) {
  memset(c, 0, sizeof *c);
  c->cbs = cbs;
  c->target = t;
  c->ud = ud;
  c->mask_state = (uint32_t)(uintptr_t)c * 2654435761u | 1u;
  int rc = uv_tcp_init(loop, &c->tcp);
  if (rc < 0) return rc;
  c->tcp.data = c;
  if (source) {
    int fd = bound_socket(source);
    if (fd < 0 || (rc = uv_tcp_open(&c->tcp, fd)) < 0) {
      if (fd >= 0) close(fd);
      rc = fd < 0 ? fd : rc;
      c->state = ST_CLOSING;
      c->end_why = QIM_BENCH_END_CONNECT;
      c->end_err = rc;
      uv_close((uv_handle_t *)&c->tcp, NULL); /* no callback promised: the caller sees rc */
      return rc;
    }
  }
  rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&t->server, connect_cb);
  if (rc < 0) {
    c->state = ST_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, NULL);
    return rc;
  }
  return 0;
}

const char *qim_bench_end_name(qim_bench_end why) {
  switch (why) {
    case QIM_BENCH_END_LOCAL:
      return "local";
    case QIM_BENCH_END_CONNECT:
      return "connect";
    case QIM_BENCH_END_HANDSHAKE:
      return "handshake";
    case QIM_BENCH_END_PROTOCOL:
      return "protocol";
    case QIM_BENCH_END_PEER_CLOSE:
      return "peer_close";
    case QIM_BENCH_END_EOF:
      return "eof";
    case QIM_BENCH_END_IO:
      return "io";
  }
  return "unknown";
}
