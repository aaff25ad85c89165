/*
 * net.h — the gateway's transport: libuv I/O loops that accept TCP connections,
 * perform the HTTP upgrade (or answer a registered plain-HTTP route) and then speak
 * RFC 6455 WebSocket. This layer knows nothing about Tinode messages: it hands
 * complete messages to a handler and sends frames; the protocol layer builds on it.
 *
 * Threads. qim_net runs `threads` event loops, one per thread, each with its own
 * listening socket on the same port (SO_REUSEPORT, so the kernel spreads accepts).
 * A connection lives on one loop for its whole life. Rules:
 *  - Handler callbacks run on the connection's loop thread. The qim_conn_* functions
 *    may be called only there (inside callbacks, or in code the loop runs, e.g. a
 *    completion queue created with qim_net_loop()). Different loops call the handler
 *    concurrently, so shared handler state needs its own locking.
 *  - A qim_conn pointer is valid from on_open until on_close returns. Other threads
 *    refer to connections by id (qim_conn_id) through qim_net_send / qim_net_send_many
 *    / qim_net_close_conn, which post to the loop's bounded inbox; a request for a
 *    connection that has closed meanwhile is dropped safely (ids are not recycled:
 *    see qim_conn_id).
 *  - on_close is never called from inside a qim_conn_* call: closing is deferred to
 *    the loop, so a handler may send or close while iterating its own structures.
 *
 * Backpressure. Every connection has a bounded output queue (bytes and frames). A
 * send that would exceed it closes the connection (a slow consumer; close code 1008
 * reported to on_close) instead of buffering without limit (DESIGN.md §5).
 *
 * Memory. An idle WebSocket connection holds only its struct (well under 1 KB): reads
 * go through one buffer per loop, and reassembly/queue memory exists only while a
 * message is split across reads or output is pending (DESIGN.md §6).
 *
 * Stalls. A loop iteration whose work (its callbacks, or the thread waiting for a core
 * while it had work) lasts QIM_NET_STALL_MS or longer held every connection of the loop
 * that long: it is logged (`gateway.loop_stall loop=… ms=…`) and counted (loop_stalls).
 * 50 ms is one-to-one's p99 target (bench/README.md), so such an iteration alone puts
 * the messages behind it past that target.
 */
#ifndef QIM_GATEWAY_NET_H
#define QIM_GATEWAY_NET_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/http.h"
#include "gateway/ws.h"
#include "qim/types.h"

#define QIM_NET_STALL_MS 50

typedef struct qim_net qim_net;
typedef struct qim_conn qim_conn;

/* Configuration; start from qim_net_config_default(). Times are milliseconds. */
typedef struct qim_net_config {
  const char *host;           /* listen address: IPv4/IPv6 literal or name ("0.0.0.0") */
  uint16_t port;              /* 0 = an ephemeral port, read back with qim_net_port() */
  unsigned threads;           /* I/O loops (1..256); 0 = number of cores */
  int backlog;                /* listen() backlog (511) */
  const char *ws_path;        /* WebSocket endpoint ("/v0/channels") */
  uint32_t handshake_timeout; /* accept -> upgrade complete, else closed (10000) */
  uint32_t idle_timeout;      /* close an open connection silent this long; 0 = never (55000) */
  uint32_t ping_interval;     /* ping a connection silent this long; 0 = never (50000) */
  uint32_t close_timeout;     /* wait this long for the close handshake / lingering close (3000) */
  size_t max_header;          /* request line + headers (8192) -> 431 */
  size_t max_body;            /* plain-HTTP request body (65536) -> 413 */
  size_t max_message;         /* WebSocket message, all fragments (262144) -> close 1009 */
  size_t max_out_bytes;       /* output queue bytes per connection (4 MB) */
  unsigned max_out_frames;    /* output queue frames per connection (4096) */
  unsigned max_conns_per_ip;  /* live connections per peer IP; 0 = unlimited -> 429 */
  unsigned inbox_capacity;    /* cross-thread requests pending per loop (16384) */
} qim_net_config;

void qim_net_config_default(qim_net_config *cfg);

/*
 * The upper layer. Every callback is optional and runs on a loop thread.
 *  check_apikey: decides the upgrade's API key (X-Tinode-APIKey header, else the
 *     `apikey` query parameter; NULL when the request had neither). Return 0 and set
 *     *tenant to accept; anything else answers HTTP 403
 *     {"ctrl":{"code":403,"text":"valid API key required"}}. Without it every key is
 *     accepted with a zero tenant.
 *  on_open: the upgrade succeeded; the 101 is queued. The connection may send now.
 *  on_message: one complete message; opcode QIM_WS_OP_TEXT (valid UTF-8) or
 *     QIM_WS_OP_BINARY. `data` is valid during the call only.
 *  on_close: the connection is gone (called once per on_open). `code` is the close
 *     code sent or received: the peer's code (1005 if its close had none) when the
 *     peer closed; the code given to qim_conn_close; 1002/1007/1009/1011 for a
 *     protocol error; 1008 slow consumer; 1001 idle timeout or server stop; 1006
 *     when TCP ended without a close frame.
 *  on_loop_start / on_loop_stop: once per loop, on its thread, before it accepts and
 *     after its last connection closed. on_loop_stop must close every handle the
 *     upper layer opened on `uv`, or the loop cannot finish.
 */
typedef struct qim_net_handler {
  void *ud;
  int (*check_apikey)(void *ud, const char *key, qim_tenant_id *tenant);
  void (*on_open)(qim_conn *c, void *ud);
  void (*on_message)(qim_conn *c, int opcode, const uint8_t *data, size_t len, void *ud);
  void (*on_close)(qim_conn *c, int code, void *ud);
  void (*on_loop_start)(qim_net *net, unsigned loop, uv_loop_t *uv, void *ud);
  void (*on_loop_stop)(qim_net *net, unsigned loop, uv_loop_t *uv, void *ud);
} qim_net_handler;

/* A plain-HTTP answer filled by a route. `body` is owned by the gateway once set. */
typedef struct qim_http_reply {
  int status;               /* 200 unless set */
  const char *content_type; /* static string, e.g. "application/json"; NULL for none */
  char *body;               /* qim_malloc'ed; freed by the gateway */
  size_t body_len;
  /* A route whose answer needs blocking work sets `defer` and answers later, on this
   * loop's thread, with qim_net_http_answer(conn_id). The request (and its body) is valid
   * only during the route call; the connection ignores further input meanwhile and is
   * still closed by handshake_timeout if the answer takes longer. */
  bool defer;
  uint64_t conn_id; /* in: the asking connection */
  unsigned loop;    /* in: the loop the route runs on */
} qim_http_reply;

/* Owner loop thread of `conn_id`: the answer of a deferred route (see qim_http_reply);
 * the connection closes after it. -ENOENT when the connection is gone or waits for no
 * answer. */
int qim_net_http_answer(qim_net *net, uint64_t conn_id, int status, const char *content_type, const void *body,
                        size_t len);

/* Sets a reply with a copy of `body` (any earlier body is freed). */
void qim_http_reply_set(qim_http_reply *r, int status, const char *content_type, const void *body,
                        size_t len);

/*
 * A plain-HTTP route. Runs on a loop thread (concurrently on several loops) for any
 * method; it sees the method, path, query, headers of interest and a body of at most
 * max_body bytes. The response always closes the connection.
 */
typedef void (*qim_net_route_fn)(const qim_http_request *req, qim_http_reply *reply, void *ud);

/* Counters; every field is summed over loops. Gauges are marked. */
typedef struct qim_net_stats {
  uint64_t accepted;      /* TCP connections accepted */
  uint64_t conns;         /* gauge: connections alive, any state */
  uint64_t ws_conns;      /* gauge: connections past the upgrade, not yet closed */
  uint64_t upgrades;      /* successful handshakes */
  uint64_t http_rejected; /* handshakes answered with a 4xx */
  uint64_t http_routed;   /* plain-HTTP route requests answered */
  uint64_t frames_in;     /* messages and control frames received */
  uint64_t frames_out;    /* frames queued for sending (HTTP responses excluded) */
  uint64_t bytes_in;      /* TCP bytes read */
  uint64_t bytes_out;     /* TCP bytes written */
  uint64_t pings_sent;
  uint64_t slow_consumers; /* closed because the output queue was full */
  uint64_t idle_timeouts;
  uint64_t handshake_timeouts;
  uint64_t protocol_errors; /* closed with 1002/1007/1009/1011 */
  uint64_t sends_dropped;   /* cross-thread sends to connections already gone */
  uint64_t inbox_full;      /* cross-thread requests refused with -EAGAIN */
  uint64_t writes;          /* write system calls offering output (frames corked together) */
  uint64_t loop_stalls;     /* loop iterations that worked QIM_NET_STALL_MS or longer */
} qim_net_stats;

/*
 * Creates a stopped server. `handler` is copied; cfg's strings are copied. A host name
 * is resolved here (first getaddrinfo answer). Returns 0, or -EINVAL for a bad
 * configuration (threads > 256, zero limits, unresolvable host, a relative ws_path).
 */
int qim_net_new(const qim_net_config *cfg, const qim_net_handler *handler, qim_net **out);

/* Registers a plain-HTTP route for an exact path (before qim_net_start only). -EBUSY when
 * started, -EEXIST for a duplicate or the WebSocket path. */
int qim_net_add_route(qim_net *net, const char *path, qim_net_route_fn fn, void *ud);

/*
 * Binds every loop's socket (SO_REUSEPORT, same port) and starts the loop threads.
 * Returns 0 or -errno (e.g. -EADDRINUSE); on failure nothing is left running.
 * Sets SIGPIPE to ignored if it still has its default action (a peer reset during a
 * write must not kill the process).
 */
int qim_net_start(qim_net *net);

/*
 * Stops accepting, closes every connection (best-effort close 1001; on_close runs for
 * each), runs on_loop_stop, joins the threads and frees the loops. Idempotent. Must
 * not be called from a loop thread. After it, sends return -ESHUTDOWN.
 */
void qim_net_stop(qim_net *net);

/* Stops if needed and frees everything. Accepts NULL. */
void qim_net_free(qim_net *net);

/* The bound port (valid after a successful start). */
uint16_t qim_net_port(const qim_net *net);
/* Number of loops (after start). */
unsigned qim_net_loops(const qim_net *net);
/* Loop i's libuv loop, for upper-layer handles (e.g. qim_cq_new_loop) in on_loop_start. */
uv_loop_t *qim_net_loop(qim_net *net, unsigned i);

/*
 * Any thread. Queues frame `f` on connection `id` (the gateway takes its own
 * reference; the caller keeps its own). Returns 0 when accepted — delivery still
 * depends on the connection being open when its loop handles it (otherwise the
 * request is dropped and counted in sends_dropped) — -EAGAIN when that loop's inbox
 * is full, -ENOENT for an id that names no loop, -ESHUTDOWN when not running.
 * Called on the connection's own loop thread, it queues directly.
 */
int qim_net_send(qim_net *net, uint64_t id, qim_ws_frame *f);

/* Like qim_net_send for n connections sharing one frame, one lock per loop. Returns
 * how many were accepted (those refused hit a full inbox or a bad id), or -ESHUTDOWN. */
int qim_net_send_many(qim_net *net, const uint64_t *ids, size_t n, qim_ws_frame *f);

/* Any thread. Starts closing connection `id` with `code` (as qim_conn_close). Same
 * returns as qim_net_send. */
int qim_net_close_conn(qim_net *net, uint64_t id, uint16_t code);

/* Any thread. Counters summed over loops, or for loop i alone. */
void qim_net_stats_get(const qim_net *net, qim_net_stats *out);
void qim_net_loop_stats(const qim_net *net, unsigned i, qim_net_stats *out);

/* Any thread. Live connections from `addr` (16 bytes, IPv4-mapped for IPv4). */
unsigned qim_net_ip_count(qim_net *net, const uint8_t addr[16]);

/* ---- connections (owner loop thread only) ---------------------------------------------------- */

/* 64-bit id: loop index (bits 56-63), slot generation (24-55), slot (0-23). Never 0. A
 * slot is reused only with a new generation, so an id repeats only after 2^32 reuses of
 * one slot. */
uint64_t qim_conn_id(const qim_conn *c);
unsigned qim_conn_loop_index(const qim_conn *c);
uv_loop_t *qim_conn_loop(const qim_conn *c);
qim_net *qim_conn_net(const qim_conn *c);

/* The upper layer's per-connection pointer (NULL at on_open). */
void *qim_conn_data(const qim_conn *c);
void qim_conn_set_data(qim_conn *c, void *data);

/* The tenant check_apikey chose at the upgrade. */
const qim_tenant_id *qim_conn_tenant(const qim_conn *c);

/* Peer address as 16 bytes (IPv4-mapped for IPv4) and port. */
const uint8_t *qim_conn_peer_addr(const qim_conn *c);
uint16_t qim_conn_peer_port(const qim_conn *c);
/* "1.2.3.4:5678" or "[::1]:5678" into buf; returns buf. */
const char *qim_conn_peer_str(const qim_conn *c, char *buf, size_t cap);

/* Live connections from this connection's peer IP, this one included. */
unsigned qim_conn_ip_count(const qim_conn *c);

/*
 * Queue a text frame (copied) / a shared frame (a reference is taken; the caller keeps
 * its own). Returns 0 when queued or written, -EPIPE when the connection is closing or
 * gone (dropped), -ENOBUFS when the output queue was full (the connection is being
 * closed as a slow consumer; on_close follows with 1008).
 */
int qim_conn_send_text(qim_conn *c, const void *data, size_t len);
int qim_conn_send_frame(qim_conn *c, qim_ws_frame *f);

/*
 * Starts the close handshake: queues a close frame with `code` (a wire-legal code;
 * others become 1000) and `reason` (may be NULL), stops delivering messages, and closes
 * TCP once the peer answers or close_timeout passes. Idempotent.
 */
void qim_conn_close(qim_conn *c, uint16_t code, const char *reason);

/* Bytes waiting in the output queue (what a sender may use to shed load early). */
size_t qim_conn_out_bytes(const qim_conn *c);

#endif /* QIM_GATEWAY_NET_H */
