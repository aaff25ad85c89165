/*
 * net_conn.c — one gateway connection on its loop: accept, reads, the HTTP upgrade (or a
 * plain route), WebSocket framing, the bounded output queue and the close paths.
 *
 * States: HANDSHAKE (reading the request; bounded by handshake_timeout) -> OPEN
 * (WebSocket) -> CLOSING -> DEAD (uv_close issued; freed in the close callback).
 * CLOSING covers three endings that all finish the same way — a close frame or an
 * HTTP answer is queued, and once it is written we half-close (FIN) and read until the
 * peer's FIN or close_timeout. Closing TCP while unread input sits in the kernel would
 * send an RST, which can destroy our last bytes at the peer before it reads them.
 * After a close handshake completes (both close frames exchanged) we close at once,
 * as RFC 6455 §7.1.1 asks of a server.
 *
 * Writes are corked for the rest of the loop iteration: a frame for a connection with
 * nothing in flight is queued (a reference to the shared frame, no copy) and the
 * connection joins the loop's dirty list; after the poll phase's callbacks the loop's
 * check handle offers each dirty connection's frames to the kernel in one writev
 * (uv_try_write), up to WRITE_BATCH frames. A push batch of k messages for one member,
 * or an answer and the deliveries that follow it, so costs one system call instead of k
 * (and one wake-up of the peer). Whatever the kernel does not take is written by one
 * uv_write at a time, WRITE_BATCH frames per call. A connection whose cork reaches
 * WRITE_BATCH frames or CORK_BYTES is written at once. Only frames the kernel refused
 * count against max_out_bytes / max_out_frames, as before corking.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "gateway/net_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define READBUF_SIZE (64 * 1024)
#define WRITE_BATCH 16
#define CORK_BYTES (64 * 1024)

typedef struct conn_write {
  uv_write_t req;
  size_t bytes; /* what this write takes from the queue */
} conn_write;

static void uncork(qim_conn *c);
static int offer(qim_conn *c);

static const char apikey_body[] = "{\"ctrl\":{\"code\":403,\"text\":\"valid API key required\"}}";
static const char iplimit_body[] =
    "{\"ctrl\":{\"code\":429,\"text\":\"too many connections from this address\"}}";

static uint64_t now_ms(const net_loop *l) {
  return uv_now(&l->uv);
}
static const qim_net_config *cfg_of(const qim_conn *c) {
  return &c->loop->net->cfg;
}

/* ---- closing --------------------------------------------------------------------------------- */

static void free_queue(qim_conn *c) {
  for (out_node *n = c->out_head, *next; n; n = next) {
    next = n->next;
    qim_ws_frame_unref(n->frame);
    qim_free(n);
  }
  c->out_head = c->out_tail = NULL;
  c->out_bytes = c->out_off = c->out_frames = 0;
}

static void on_closed(uv_handle_t *h) {
  qim_conn *c = h->data;
  net_loop *l = c->loop;
  qim_net *net = l->net;
  if (c->opened) {
    STAT_ADD(l, ws_conns, (uint64_t)-1);
    if (net->h.on_close) net->h.on_close(c, c->close_code, net->h.ud);
  }
  free_queue(c);
  qim_free(c->wreq); /* libuv ran every write callback before this one: normally NULL */
  if (c->http) qim_http_parser_free(c->http);
  qim_free(c->http);
  qim_ws_parser_free(&c->ws);
  qim_iplimit_release(net->ips, c->addr);
  qim__net_slot_free(l, c->id);
  STAT_ADD(l, conns, (uint64_t)-1);
  qim_free(c);
  qim__net_loop_conn_gone(l);
}

void qim__net_conn_abort(qim_conn *c, uint16_t code, bool try_close_frame) {
  if (c->state == CS_DEAD) return;
  if (c->dirty) {
    uncork(c);
    if (try_close_frame && !c->wreq && c->out_head)
      (void)offer(c); /* best effort, as the close frame */
  }
  if (c->state != CS_CLOSING) c->close_code = code; /* a close handshake keeps its code */
  if (try_close_frame && c->state == CS_OPEN && !c->out_head) {
    /* Best effort only: the peer is idle or we are shutting down. */
    qim_ws_frame *f = qim_ws_frame_close(code, NULL);
    uv_buf_t b = uv_buf_init((char *)qim_ws_frame_bytes(f), (unsigned)qim_ws_frame_size(f));
    if (uv_try_write((uv_stream_t *)&c->tcp, &b, 1) > 0) STAT_ADD(c->loop, frames_out, 1);
    qim_ws_frame_unref(f);
  }
  c->state = CS_DEAD;
  qim__net_list_remove(c->loop, c);
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status; /* an error or cancellation leaves the closing deadline in charge */
  qim_free(req);
}

/* The queue drained while closing: finish, or half-close and wait for the peer's FIN. */
static void flushed(qim_conn *c) {
  c->after_flush = false;
  if (c->peer_closed) {
    qim__net_conn_abort(c, c->close_code, false);
    return;
  }
  uv_shutdown_t *req = qim_malloc(sizeof *req);
  if (uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    qim_free(req);
    qim__net_conn_abort(c, c->close_code, false);
    return;
  }
  c->shut = true;
}

/* Enters CLOSING with `f` (a close frame or an HTTP answer) as the last output. */
static void close_with(qim_conn *c, qim_ws_frame *f, uint16_t code, bool discard) {
  c->state = CS_CLOSING;
  c->close_code = code;
  c->discard = discard;
  qim__net_list_add(c->loop, c, LIST_CLOSING, now_ms(c->loop));
  qim__net_conn_queue(c, f, false);
  if (c->state != CS_CLOSING) return; /* the write failed and the connection is gone */
  c->after_flush = true;
  if (!c->out_head) flushed(c);
}

static void begin_close(qim_conn *c, uint16_t code, const char *reason, bool discard) {
  qim_ws_frame *f = qim_ws_frame_close(code, reason);
  STAT_ADD(c->loop, frames_out, 1);
  close_with(c, f, code, discard);
  qim_ws_frame_unref(f);
}

/* The peer's close frame (already validated by the parser). */
static void peer_close(qim_conn *c, const uint8_t *d, size_t n) {
  if (c->state == CS_CLOSING) {
    c->peer_closed = true;
    if (!c->after_flush) qim__net_conn_abort(c, c->close_code, false); /* handshake complete */
    return;
  }
  if (c->state != CS_OPEN) return;
  uint16_t code = n >= 2 ? (uint16_t)(d[0] << 8 | d[1]) : QIM_WS_CLOSE_NO_STATUS;
  c->peer_closed = true;
  /* Echo the code (RFC 6455 §5.5.1); an empty close is answered with an empty one. */
  qim_ws_frame *f =
      n >= 2 ? qim_ws_frame_close(code, NULL) : qim_ws_frame_new(QIM_WS_OP_CLOSE, NULL, 0);
  STAT_ADD(c->loop, frames_out, 1);
  close_with(c, f, code, false);
  qim_ws_frame_unref(f);
}

/* ---- output queue ---------------------------------------------------------------------------- */

static void start_write(qim_conn *c);

/* Drops `n` written bytes from the head of the queue. */
static void drop_written(qim_conn *c, size_t n) {
  c->out_bytes -= n;
  STAT_ADD(c->loop, bytes_out, n);
  while (n) {
    out_node *o = c->out_head;
    size_t left = qim_ws_frame_size(o->frame) - c->out_off;
    if (n < left) {
      c->out_off += n;
      return;
    }
    n -= left;
    c->out_off = 0;
    c->out_head = o->next;
    c->out_frames--;
    qim_ws_frame_unref(o->frame);
    qim_free(o);
  }
  if (!c->out_head) c->out_tail = NULL;
}

static void on_written(uv_write_t *req, int status) {
  conn_write *w = (conn_write *)req;
  qim_conn *c = req->data;
  if (status < 0 || c->state == CS_DEAD) {
    c->wreq = NULL;
    qim_free(w);
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
    return;
  }
  drop_written(c, w->bytes);
  if (c->out_head) {
    start_write(c);
    return;
  }
  c->wreq = NULL; /* idle connections hold no write request */
  qim_free(w);
  if (c->after_flush) flushed(c);
}

/* The first WRITE_BATCH queued frames (the head's unwritten part) as buffers; their count,
 * and their bytes in *bytes. */
static unsigned queued_bufs(const qim_conn *c, uv_buf_t bufs[WRITE_BATCH], size_t *bytes) {
  unsigned n = 0;
  size_t off = c->out_off;
  *bytes = 0;
  for (out_node *o = c->out_head; o && n < WRITE_BATCH; o = o->next, n++) {
    bufs[n] = uv_buf_init((char *)qim_ws_frame_bytes(o->frame) + off,
                          (unsigned)(qim_ws_frame_size(o->frame) - off));
    *bytes += bufs[n].len;
    off = 0;
  }
  return n;
}

static void start_write(qim_conn *c) {
  if (!c->wreq) c->wreq = qim_malloc(sizeof *c->wreq);
  conn_write *w = c->wreq;
  uv_buf_t bufs[WRITE_BATCH];
  unsigned n = queued_bufs(c, bufs, &w->bytes);
  w->req.data = c;
  STAT_ADD(c->loop, writes, 1);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, n, on_written) != 0) {
    c->wreq = NULL;
    qim_free(w);
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
  }
}

/* Offers up to WRITE_BATCH queued frames to the kernel in one writev (nothing in flight);
 * drops what it took. 0, or the write's error. */
static int offer(qim_conn *c) {
  uv_buf_t bufs[WRITE_BATCH];
  size_t bytes;
  unsigned n = queued_bufs(c, bufs, &bytes);
  STAT_ADD(c->loop, writes, 1); /* before the call: its reader may look at once */
  int w = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
  if (w == UV_EAGAIN) return 0;
  if (w < 0) return w;
  drop_written(c, (size_t)w);
  return 0;
}

/* A corked connection's frames, offered; what the kernel refuses goes out by uv_write.
 * May abort the connection (a failed write) or finish its close. */
static void send_corked(qim_conn *c) {
  if (c->state == CS_DEAD || c->wreq || !c->out_head) return;
  if (offer(c) < 0) {
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
    return;
  }
  if (c->out_head)
    start_write(c);
  else if (c->after_flush)
    flushed(c);
}

/* The loop's check handle: every connection corked during this iteration, written. */
static void flush_dirty(net_loop *l) {
  while (l->dirty) {
    qim_conn *c = l->dirty;
    l->dirty = c->dirty_next;
    c->dirty_next = NULL;
    c->dirty = false;
    send_corked(c);
  }
  uv_idle_stop(&l->flush_idle);
  uv_check_stop(&l->flush_check);
}

static void on_flush_idle(uv_idle_t *h) { (void)h; }

static void on_flush_check(uv_check_t *h) { flush_dirty(h->data); }

void qim__net_conn_cork_init(net_loop *l) {
  uv_check_init(&l->uv, &l->flush_check);
  uv_idle_init(&l->uv, &l->flush_idle);
  l->flush_check.data = l;
}

static void cork(qim_conn *c) {
  if (c->dirty) return;
  net_loop *l = c->loop;
  if (!l->dirty) {
    uv_check_start(&l->flush_check, on_flush_check);
    uv_idle_start(&l->flush_idle, on_flush_idle); /* poll must not block before the check */
  }
  c->dirty = true;
  c->dirty_next = l->dirty;
  l->dirty = c;
}

/* Takes c off its loop's dirty list (a connection aborted before the check ran: rare, so a
 * walk of the list). */
static void uncork(qim_conn *c) {
  if (!c->dirty) return;
  qim_conn **pp = &c->loop->dirty;
  while (*pp != c) pp = &(*pp)->dirty_next;
  *pp = c->dirty_next;
  c->dirty = false;
}

/* With no write in flight, everything queued is corked (never offered to the kernel): a
 * queue the kernel refused has its uv_write in flight until it drains. */
static bool corked(const qim_conn *c) { return !c->wreq; }

/*
 * Queues `f` (taking a reference). `limited` applies max_out_bytes/max_out_frames to what
 * the kernel has refused so far: close frames and HTTP answers are exempt so a connection
 * can always end cleanly.
 */
int qim__net_conn_queue(qim_conn *c, qim_ws_frame *f, bool limited) {
  if (c->state == CS_DEAD) return -EPIPE;
  size_t size = qim_ws_frame_size(f);
  if (corked(c) && c->out_head &&
      (c->out_frames >= WRITE_BATCH || c->out_bytes + size > CORK_BYTES)) {
    send_corked(c); /* now, not at the check; it stays dirty for the frames queued next */
    if (c->state == CS_DEAD) return -EPIPE;
  }
  const qim_net_config *cfg = cfg_of(c);
  if (limited && !corked(c) && (c->out_bytes + size > cfg->max_out_bytes ||
                                c->out_frames >= cfg->max_out_frames)) {
    STAT_ADD(c->loop, slow_consumers, 1);
    char peer[64];
    QIM_LOGW(NULL, "gateway.slow_consumer",
             "conn=%016llx peer=%s queued_bytes=%zu queued_frames=%u", (unsigned long long)c->id,
             qim_conn_peer_str(c, peer, sizeof peer), c->out_bytes, c->out_frames);
    qim__net_conn_abort(c, QIM_WS_CLOSE_POLICY, false);
    return -ENOBUFS;
  }
  out_node *node = qim_malloc(sizeof *node);
  node->next = NULL;
  node->frame = qim_ws_frame_ref(f);
  if (c->out_tail) {
    c->out_tail->next = node;
  } else {
    c->out_head = node;
    c->out_off = 0;
  }
  c->out_tail = node;
  c->out_bytes += size;
  c->out_frames++;
  if (corked(c)) cork(c); /* behind a write in flight, on_written sends it */
  return 0;
}

/* A WebSocket frame from the upper layer or a pong/ping: limited and counted. */
static int send_ws(qim_conn *c, qim_ws_frame *f) {
  if (c->state != CS_OPEN) return -EPIPE;
  int rc = qim__net_conn_queue(c, f, true);
  if (rc == 0) STAT_ADD(c->loop, frames_out, 1);
  return rc;
}

void qim__net_conn_ping(qim_conn *c) {
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_PING, NULL, 0);
  c->pinged = true;
  if (send_ws(c, f) == 0) STAT_ADD(c->loop, pings_sent, 1);
  qim_ws_frame_unref(f);
}

/* ---- WebSocket input ------------------------------------------------------------------------- */

static int ws_on_message(void *ud, int opcode, uint8_t *data, size_t len) {
  qim_conn *c = ud;
  if (c->state != CS_OPEN) return 0; /* closing: keep parsing for the peer's close only */
  qim_net *net = c->loop->net;
  STAT_ADD(c->loop, frames_in, 1);
  if (net->h.on_message) net->h.on_message(c, opcode, data, len, net->h.ud);
  return c->state == CS_DEAD; /* stop if sending from the handler killed the connection */
}

static int ws_on_control(void *ud, int opcode, uint8_t *data, size_t len) {
  qim_conn *c = ud;
  STAT_ADD(c->loop, frames_in, 1);
  if (opcode == QIM_WS_OP_CLOSE) {
    peer_close(c, data, len);
    return 1;
  }
  if (opcode == QIM_WS_OP_PING && c->state == CS_OPEN) {
    qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_PONG, data, len);
    send_ws(c, f);
    qim_ws_frame_unref(f);
  }
  return c->state == CS_DEAD;
}

static const qim_ws_events ws_events = {ws_on_message, ws_on_control};

static void ws_input(qim_conn *c, char *data, size_t n) {
  int rc = qim_ws_parse(&c->ws, (uint8_t *)data, n, &ws_events, c);
  if (rc >= 0 || c->state == CS_DEAD) return;
  if (c->state == CS_CLOSING) {
    c->discard = true; /* our close is already on its way */
    return;
  }
  STAT_ADD(c->loop, protocol_errors, 1);
  char peer[64];
  /* Debug only: a misbehaving client is not the operator's problem, and could flood logs. */
  qim_log(QIM_LOG_DEBUG, NULL, "gateway.protocol_error", "conn=%016llx peer=%s close=%u error=%s",
          (unsigned long long)c->id, qim_conn_peer_str(c, peer, sizeof peer),
          qim_ws_error_close_code(rc), qim_err_name(rc));
  begin_close(c, qim_ws_error_close_code(rc), NULL, true);
}

/* ---- handshake ------------------------------------------------------------------------------- */

static void drop_http(qim_conn *c) {
  qim_http_parser_free(c->http);
  qim_free(c->http);
  c->http = NULL;
}

/* Answers the request and closes; the parser (and the request) is freed here. */
static void http_answer(qim_conn *c, int status, const char *ctype, const char *extra,
                        const void *body, size_t len) {
  size_t rlen;
  char *resp = qim_http_format_response(status, ctype, extra, body, len, &rlen);
  drop_http(c);
  qim_ws_frame *f = qim_ws_frame_raw(resp, rlen);
  qim_free(resp);
  close_with(c, f, 0, true);
  qim_ws_frame_unref(f);
}

/* A refused handshake: the status with a short body and the headers it calls for. */
static void reject(qim_conn *c, int status) {
  STAT_ADD(c->loop, http_rejected, 1);
  if (status == 403) {
    http_answer(c, 403, "application/json", NULL, apikey_body, sizeof apikey_body - 1);
    return;
  }
  if (status == 429) { /* only the per-IP limit refuses an upgrade with 429: say so */
    http_answer(c, 429, "application/json", NULL, iplimit_body, sizeof iplimit_body - 1);
    return;
  }
  const char *extra = status == 426   ? "Sec-WebSocket-Version: 13\r\n"
                      : status == 405 ? "Allow: GET\r\n"
                                      : NULL;
  char body[64];
  int n = snprintf(body, sizeof body, "%d %s\n", status, qim_http_reason(status));
  http_answer(c, status, "text/plain", extra, body, (size_t)n);
}

static void upgrade(qim_conn *c, const qim_http_request *r, char *rest, size_t rest_len) {
  qim_net *net = c->loop->net;
  int status = qim_http_upgrade_status(r);
  if (status != 101) return reject(c, status);
  if (net->cfg.max_conns_per_ip && qim_iplimit_count(net->ips, c->addr) > net->cfg.max_conns_per_ip)
    return reject(c, 429);
  qim_tenant_id tenant = {0};
  if (net->h.check_apikey && net->h.check_apikey(net->h.ud, r->apikey, &tenant) != 0)
    return reject(c, 403);
  size_t len;
  char *resp = qim_http_format_switching(r->header[QIM_HTTP_H_WS_KEY], &len);
  drop_http(c);
  c->tenant = tenant;
  c->state = CS_OPEN;
  qim__net_list_add(c->loop, c, LIST_OPEN, now_ms(c->loop));
  qim_ws_parser_init(&c->ws, net->cfg.max_message);
  qim_ws_frame *f = qim_ws_frame_raw(resp, len);
  qim_free(resp);
  qim__net_conn_queue(c, f, false);
  qim_ws_frame_unref(f);
  send_corked(c); /* the 101 precedes whatever on_open sends, and nothing waits behind it */
  if (c->state != CS_OPEN) return;
  c->opened = true;
  STAT_ADD(c->loop, upgrades, 1);
  STAT_ADD(c->loop, ws_conns, 1);
  if (net->h.on_open) net->h.on_open(c, net->h.ud);
  /* Frames the client sent right behind its request. */
  if (rest_len && c->state == CS_OPEN) ws_input(c, rest, rest_len);
}

static void route(qim_conn *c, const qim_http_request *r) {
  qim_net *net = c->loop->net;
  for (size_t i = 0; i < net->nroutes; i++) {
    if (strcmp(net->routes[i].path, r->path) != 0) continue;
    qim_http_reply rep = {.status = 200, .conn_id = c->id, .loop = qim_conn_loop_index(c)};
    net->routes[i].fn(r, &rep, net->routes[i].ud);
    if (rep.defer) {
      c->deferred = true;
      qim_free(rep.body);
      return;
    }
    STAT_ADD(c->loop, http_routed, 1);
    http_answer(c, rep.status, rep.content_type, NULL, rep.body, rep.body_len);
    qim_free(rep.body);
    return;
  }
  reject(c, 404);
}

int qim_net_http_answer(qim_net *net, uint64_t conn_id, int status, const char *content_type, const void *body,
                        size_t len) {
  unsigned li = (unsigned)(conn_id >> 56);
  qim_conn *c = li < net->nloops ? qim__net_slot_get(&net->loops[li], conn_id) : NULL;
  if (!c || !c->deferred || c->state != CS_HANDSHAKE) return -ENOENT;
  c->deferred = false;
  STAT_ADD(c->loop, http_routed, 1);
  http_answer(c, status, content_type, NULL, body, len);
  return 0;
}

static void handshake_input(qim_conn *c, char *data, size_t n) {
  const qim_net_config *cfg = cfg_of(c);
  if (c->deferred) return; /* waiting for a route's answer: nothing more is read */
  if (!c->http) {
    c->http = qim_malloc(sizeof *c->http);
    qim_http_parser_init(c->http, cfg->max_header, cfg->max_body);
  }
  size_t used;
  int rc = qim_http_parser_feed(c->http, data, n, &used);
  if (rc == QIM_AGAIN) return;
  if (rc < 0) return reject(c, qim_http_error_status(rc));
  const qim_http_request *r = qim_http_parser_request(c->http);
  if (strcmp(r->path, c->loop->net->ws_path) == 0) return upgrade(c, r, data + used, n - used);
  route(c, r);
}

/* ---- reads and accept ------------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  qim_conn *c = h->data;
  *buf = uv_buf_init(c->loop->readbuf, READBUF_SIZE);
}

/* Any input proves the peer alive: clear the ping and move to the back of the line. */
static void touch(qim_conn *c) {
  c->pinged = false;
  uint64_t now = now_ms(c->loop);
  if (c->since_ms != now || c->loop->open.tail != c) qim__net_list_add(c->loop, c, LIST_OPEN, now);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  qim_conn *c = s->data;
  if (n == 0) return;
  if (n < 0) { /* EOF or error: in CLOSING this is the expected end */
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
    return;
  }
  STAT_ADD(c->loop, bytes_in, (uint64_t)n);
  switch (c->state) {
    case CS_HANDSHAKE:
      handshake_input(c, buf->base, (size_t)n);
      break;
    case CS_OPEN:
      touch(c);
      ws_input(c, buf->base, (size_t)n);
      break;
    case CS_CLOSING:
      if (!c->discard) ws_input(c, buf->base, (size_t)n);
      break;
    default:
      break;
  }
}

static void on_closed_unaccepted(uv_handle_t *h) {
  qim_free(h->data);
}

/* Fills addr/port from the socket's peer; false if the peer is already gone. */
static bool read_peer(qim_conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return false;
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
    memset(c->addr, 0, 10);
    c->addr[10] = c->addr[11] = 0xFF;
    memcpy(c->addr + 12, &in->sin_addr, 4);
    c->port = ntohs(in->sin_port);
    return true;
  }
  const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
  memcpy(c->addr, &in6->sin6_addr, 16);
  c->port = ntohs(in6->sin6_port);
  return true;
}

void qim__net_conn_accept(net_loop *l) {
  qim_conn *c = qim_calloc(1, sizeof *c);
  c->loop = l;
  uv_tcp_init(&l->uv, &c->tcp);
  c->tcp.data = c;
  if (uv_accept((uv_stream_t *)&l->listener, (uv_stream_t *)&c->tcp) != 0 || !read_peer(c)) {
    uv_close((uv_handle_t *)&c->tcp, on_closed_unaccepted);
    return;
  }
  c->id = qim__net_slot_alloc(l, c);
  qim_iplimit_acquire(l->net->ips, c->addr);
  l->nconns++;
  STAT_ADD(l, accepted, 1);
  STAT_ADD(l, conns, 1);
  uv_tcp_nodelay(&c->tcp, 1); /* frames are whole messages: never wait to coalesce */
  qim__net_list_add(l, c, LIST_HANDSHAKE, now_ms(l));
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
}

/* ---- public connection API (owner loop thread) ----------------------------------------------- */

uint64_t qim_conn_id(const qim_conn *c) {
  return c->id;
}
unsigned qim_conn_loop_index(const qim_conn *c) {
  return c->loop->index;
}
uv_loop_t *qim_conn_loop(const qim_conn *c) {
  return &c->loop->uv;
}
qim_net *qim_conn_net(const qim_conn *c) {
  return c->loop->net;
}
void *qim_conn_data(const qim_conn *c) {
  return c->data;
}
void qim_conn_set_data(qim_conn *c, void *data) {
  c->data = data;
}
const qim_tenant_id *qim_conn_tenant(const qim_conn *c) {
  return &c->tenant;
}
const uint8_t *qim_conn_peer_addr(const qim_conn *c) {
  return c->addr;
}
uint16_t qim_conn_peer_port(const qim_conn *c) {
  return c->port;
}
size_t qim_conn_out_bytes(const qim_conn *c) {
  return c->out_bytes;
}

unsigned qim_conn_ip_count(const qim_conn *c) {
  return qim_iplimit_count(c->loop->net->ips, c->addr);
}

const char *qim_conn_peer_str(const qim_conn *c, char *buf, size_t cap) {
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  char ip[INET6_ADDRSTRLEN];
  if (memcmp(c->addr, v4mapped, 12) == 0) {
    inet_ntop(AF_INET, c->addr + 12, ip, sizeof ip);
    snprintf(buf, cap, "%s:%u", ip, c->port);
  } else {
    inet_ntop(AF_INET6, c->addr, ip, sizeof ip);
    snprintf(buf, cap, "[%s]:%u", ip, c->port);
  }
  return buf;
}

int qim_conn_send_text(qim_conn *c, const void *data, size_t len) {
  if (c->state != CS_OPEN) return -EPIPE;
  qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, data, len);
  int rc = send_ws(c, f);
  qim_ws_frame_unref(f);
  return rc;
}

int qim_conn_send_frame(qim_conn *c, qim_ws_frame *f) {
  return send_ws(c, f);
}

void qim_conn_close(qim_conn *c, uint16_t code, const char *reason) {
  if (c->state != CS_OPEN) return;
  if (!qim_ws_close_code_valid(code)) code = QIM_WS_CLOSE_NORMAL;
  begin_close(c, code, reason, false);
}
