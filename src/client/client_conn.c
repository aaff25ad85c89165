/*
 * client_conn.c — the client runtime's transport on its libuv loop: the TCP connection
 * to qimd, the WebSocket opening handshake and frames (client/wsc.h), request deadlines
 * and the reconnect backoff. What the frames mean is client_session.c's business.
 *
 * Deadlines: every request that expects a reply is a `wait`; a tick checks them. While
 * the event queue is full the socket is not read, so replies cannot arrive: the tick
 * does not judge deadlines then, and they restart when reading resumes.
 * Backoff: reconnect_min_ms, doubled after each failed attempt up to reconnect_max_ms,
 * back to the minimum once a connection reaches Online.
 */
#include <string.h>
#include <time.h>

#include "client/client_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

/* A frame larger than this from the server is a protocol failure (sync pages are ≤ 1 MiB). */
#define MAX_MESSAGE (4u << 20)
#define READ_CHUNK 65536

struct qim__client_conn {
  qim_client *c;
  uv_tcp_t tcp;
  uv_connect_t creq;
  bool upgraded, closing;
  char key[QIM_WSC_KEY_LEN + 1];
  char *head; /* the handshake answer so far */
  size_t head_len;
  qim_wsc_parser parser;
};

typedef struct wreq {
  uv_write_t req;
  uv_buf_t buf;
} wreq;

uint64_t qim__client_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- waits and deadlines ----------------------------------------------------------------------
 */

void qim__client_wait_add(qim_client *c, const char *id) {
  if (c->wait_n == c->wait_cap) {
    c->wait_cap = c->wait_cap ? 2 * c->wait_cap : 16;
    c->waits = qim_realloc(c->waits, c->wait_cap * sizeof *c->waits);
  }
  qim__client_wait *w = &c->waits[c->wait_n++];
  snprintf(w->id, sizeof w->id, "%s", id);
  w->deadline_ms = qim__client_now_ms() + c->cfg.deadline_ms;
}

bool qim__client_wait_take(qim_client *c, const char *id) {
  for (size_t i = 0; i < c->wait_n; i++)
    if (strcmp(c->waits[i].id, id) == 0) {
      c->waits[i] = c->waits[--c->wait_n];
      return true;
    }
  return false;
}

static void tick_cb(uv_timer_t *t) {
  qim_client *c = t->data;
  if (c->paused || !c->conn) return;
  uint64_t now = qim__client_now_ms();
  for (size_t i = 0; i < c->wait_n; i++)
    if (c->waits[i].deadline_ms <= now) {
      qim_log(QIM_LOG_WARN, NULL, "client.deadline", "request=%s deadline_ms=%u", c->waits[i].id,
              c->cfg.deadline_ms);
      qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_DEADLINE_EXCEEDED));
      qim__client_conn_drop(c, true);
      return;
    }
}

/* ---- reconnect ----------------------------------------------------------------------------------
 */

static void reconnect_cb(uv_timer_t *t) {
  qim_client *c = t->data;
  if (c->paused || c->conn || !c->want_online || c->stopping) return; /* drain restarts it */
  qim__client_conn_start(c);
}

void qim__client_schedule_reconnect(qim_client *c) {
  if (c->stopping || !c->want_online) return;
  uv_timer_start(&c->reconnect_timer, reconnect_cb, c->backoff_ms, 0);
  c->backoff_ms =
      c->backoff_ms * 2 > c->cfg.reconnect_max_ms ? c->cfg.reconnect_max_ms : c->backoff_ms * 2;
}

/* ---- closing
 * -------------------------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h) {
  qim__client_conn *k = h->data;
  qim_wsc_parser_free(&k->parser);
  qim_free(k->head);
  qim_free(k);
}

void qim__client_conn_drop(qim_client *c, bool reconnect) {
  qim__client_conn *k = c->conn;
  if (k) {
    c->conn = NULL;
    k->closing = true;
    uv_timer_stop(&c->tick_timer);
    uv_close((uv_handle_t *)&k->tcp, on_closed);
    qim__client_session_lost(c);
  }
  c->wait_n = 0;
  c->want_online = reconnect;
  if (c->state != QIM_CONNECTION_STATE_KICKED)
    qim__client_emit_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  if (reconnect) qim__client_schedule_reconnect(c);
}

/* The connection failed with a domain error: report it, then drop it. */
static void fail(qim_client *c, int code, bool reconnect) {
  qim__client_emit_failed(c, code);
  qim__client_conn_drop(c, reconnect);
}

/* ---- writing
 * -------------------------------------------------------------------------------------- */

static void on_written(uv_write_t *req, int status) {
  wreq *w = (wreq *)req;
  (void)status; /* a failed write shows up as a read error, which drops the connection */
  qim_free(w->buf.base);
  qim_free(w);
}

static int write_bytes(qim__client_conn *k, char *bytes, size_t n) {
  wreq *w = qim_malloc(sizeof *w);
  w->buf = uv_buf_init(bytes, (unsigned)n);
  int rc = uv_write(&w->req, (uv_stream_t *)&k->tcp, &w->buf, 1, on_written);
  if (rc) {
    qim_free(bytes);
    qim_free(w);
  }
  return rc;
}

static int write_frame(qim__client_conn *k, int op, const void *p, size_t n) {
  uint8_t *out = qim_malloc(n + QIM_WSC_MAX_HEADER);
  size_t len = qim_wsc_encode(out, op, p, n, (uint32_t)qim_u128_random().lo);
  return write_bytes(k, (char *)out, len);
}

int qim__client_conn_send(qim_client *c, json_t *frame) {
  qim__client_conn *k = c->conn;
  char *text = json_dumps(frame, JSON_COMPACT);
  json_decref(frame);
  int rc = !text ? -ENOMEM : !k || !k->upgraded ? -ENOTCONN : 0;
  if (rc == 0) rc = write_frame(k, QIM_WS_OP_TEXT, text, strlen(text));
  free(text);
  return rc;
}

/* ---- reading
 * -------------------------------------------------------------------------------------- */

static int on_message(void *ud, int op, const uint8_t *data, size_t len) {
  qim__client_conn *k = ud;
  if (op != QIM_WS_OP_TEXT) {
    fail(k->c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true); /* qim sends text only */
    return 1;
  }
  qim__client_session_frame(k->c, (const char *)data, len);
  return k->closing ? 1 : 0;
}

static int on_control(void *ud, int op, const uint8_t *data, size_t len) {
  qim__client_conn *k = ud;
  if (op == QIM_WS_OP_PING) return write_frame(k, QIM_WS_OP_PONG, data, len) ? 1 : 0;
  if (op == QIM_WS_OP_CLOSE) {
    qim__client_conn_drop(k->c, true);
    return 1;
  }
  return 0;
}

/* The 101 answer, or why not; bytes after the header block are already frames. */
static void on_handshake(qim__client_conn *k, const char *p, size_t n) {
  qim_client *c = k->c;
  k->head = qim_realloc(k->head, k->head_len + n);
  memcpy(k->head + k->head_len, p, n);
  k->head_len += n;
  size_t used = 0;
  int status = 0;
  int rc = qim_wsc_response(k->head, k->head_len, k->key, &used, &status);
  if (rc == QIM_AGAIN) return;
  if (rc == -ECONNREFUSED) {
    qim_log(QIM_LOG_WARN, NULL, "client.upgrade_refused", "status=%d", status);
    bool denied = status == 401 || status == 403;
    int code = denied          ? QIM_E_CLIENT_PERMISSION_DENIED
               : status == 503 ? QIM_E_CLIENT_UNAVAILABLE
                               : QIM_E_CLIENT_PROTOCOL_FAILURE;
    fail(c, qim_err_raise(code), !denied);
    return;
  }
  if (rc) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  k->upgraded = true;
  qim__client_wait_take(c, "connect");
  qim__client_session_open(c);
  if (!k->closing && used < k->head_len) {
    static const qim_wsc_events ev = {on_message, on_control};
    rc = qim_wsc_parse(&k->parser, (uint8_t *)k->head + used, k->head_len - used, &ev, k);
    if (rc < 0 && !k->closing) fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
  }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)h;
  (void)hint;
  buf->base = qim_malloc(READ_CHUNK);
  buf->len = READ_CHUNK;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  qim__client_conn *k = s->data;
  qim_client *c = k->c;
  if (nread < 0 && !k->closing) {
    qim_log(QIM_LOG_INFO, NULL, "client.connection_lost", "error=%s", uv_err_name((int)nread));
    qim__client_conn_drop(c, true);
  } else if (nread > 0 && !k->closing && !k->upgraded) {
    on_handshake(k, buf->base, (size_t)nread);
  } else if (nread > 0 && !k->closing) {
    static const qim_wsc_events ev = {on_message, on_control};
    int rc = qim_wsc_parse(&k->parser, (uint8_t *)buf->base, (size_t)nread, &ev, k);
    if (rc < 0 && !k->closing) fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
  }
  qim_free(buf->base);
}

static void on_connect(uv_connect_t *req, int status) {
  qim__client_conn *k = req->data;
  qim_client *c = k->c;
  if (k->closing) return;
  if (status < 0) {
    qim_log(QIM_LOG_INFO, NULL, "client.connect_failed", "error=%s", uv_err_name(status));
    fail(c, qim_err_raise(QIM_E_CLIENT_UNAVAILABLE), true);
    return;
  }
  uint8_t nonce[16];
  qim_u128_to_be(qim_u128_random(), nonce);
  qim_wsc_key(nonce, k->key);
  char *req_text = qim_malloc(1024);
  int n = qim_wsc_request(req_text, 1024, c->hostport, c->path, k->key);
  if (n < 0 || write_bytes(k, req_text, (size_t)n) != 0 ||
      uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read) != 0) {
    if (n < 0) qim_free(req_text);
    qim__client_conn_drop(c, true);
    return;
  }
  if (c->paused) uv_read_stop((uv_stream_t *)&k->tcp);
}

void qim__client_conn_start(qim_client *c) {
  if (c->conn || c->stopping) return;
  c->want_online = true;
  qim__client_emit_state(c, QIM_CONNECTION_STATE_CONNECTING);
  qim__client_conn *k = qim_calloc(1, sizeof *k);
  k->c = c;
  qim_wsc_parser_init(&k->parser, MAX_MESSAGE);
  uv_tcp_init(&c->loop, &k->tcp);
  k->tcp.data = k;
  k->creq.data = k;
  c->conn = k;
  c->wait_n = 0;
  qim__client_wait_add(c, "connect"); /* TCP and upgrade share one deadline */
  uint64_t every = c->cfg.deadline_ms / 4 ? c->cfg.deadline_ms / 4 : 1;
  uv_timer_start(&c->tick_timer, tick_cb, every, every);
  struct sockaddr_storage sa;
  int rc = c->ipv6 ? uv_ip6_addr(c->host, c->port, (struct sockaddr_in6 *)&sa)
                   : uv_ip4_addr(c->host, c->port, (struct sockaddr_in *)&sa);
  if (rc == 0) rc = uv_tcp_connect(&k->creq, &k->tcp, (struct sockaddr *)&sa, on_connect);
  if (rc) {
    qim_log(QIM_LOG_INFO, NULL, "client.connect_failed", "error=%s", uv_err_name(rc));
    fail(c, qim_err_raise(QIM_E_CLIENT_UNAVAILABLE), true);
  }
}

void qim__client_conn_pause(qim_client *c, bool pause) {
  qim__client_conn *k = c->conn;
  if (pause) {
    if (k) uv_read_stop((uv_stream_t *)&k->tcp);
    return;
  }
  if (k && !k->closing) {
    uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read);
    uint64_t d = qim__client_now_ms() + c->cfg.deadline_ms; /* replies could not arrive */
    for (size_t i = 0; i < c->wait_n; i++) c->waits[i].deadline_ms = d;
  } else if (!k && c->want_online && !uv_is_active((uv_handle_t *)&c->reconnect_timer)) {
    qim__client_schedule_reconnect(c);
  }
}
