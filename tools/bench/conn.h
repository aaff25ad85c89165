/*
 * conn.h — one WebSocket client connection of qim-bench on a libuv loop: TCP connect
 * (optionally from a chosen loopback source address), the opening handshake, masked
 * text frames out, server frames in, pings answered. It knows nothing of Tinode; the
 * session layer (client.h) and the raw echo scenario sit on top.
 *
 * Ownership: the caller allocates the qim_bench_conn (usually inside its own struct) and
 * must keep it alive until on_close has run; on_close is the last callback and runs exactly
 * once per successful qim_bench_conn_start, however the connection ends.
 * All functions run on the loop's thread.
 */
#ifndef QIM_BENCH_CONN_H
#define QIM_BENCH_CONN_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "client/wsc.h"

/* Why a connection ended (on_close's `why`). */
typedef enum qim_bench_end {
  QIM_BENCH_END_LOCAL = 0, /* qim_bench_conn_close was called */
  QIM_BENCH_END_CONNECT,   /* TCP connect failed (err holds the uv error) */
  QIM_BENCH_END_HANDSHAKE, /* the server did not answer 101 properly (err: HTTP status or -errno) */
  QIM_BENCH_END_PROTOCOL,  /* a framing violation by the server (err: -errno from wsc) */
  QIM_BENCH_END_PEER_CLOSE, /* the server sent a close frame (err: its close code) */
  QIM_BENCH_END_EOF,        /* TCP ended without a close frame */
  QIM_BENCH_END_IO,         /* a read or write error (err: the uv error) */
} qim_bench_end;

typedef struct qim_bench_conn qim_bench_conn;

typedef struct qim_bench_conn_cbs {
  void (*on_open)(qim_bench_conn *c);                               /* handshake done */
  void (*on_text)(qim_bench_conn *c, const char *data, size_t len); /* one text message */
  void (*on_close)(qim_bench_conn *c, qim_bench_end why, int err);  /* the end */
} qim_bench_conn_cbs;

/* Where and how to connect; shared by all connections of a run. */
typedef struct qim_bench_target {
  struct sockaddr_in server;
  char host[80];      /* Host header, "127.0.0.1:6060" */
  char path[256];     /* "/v0/channels?apikey=…" */
  size_t max_message; /* largest server message accepted */
} qim_bench_target;

struct qim_bench_conn {
  uv_tcp_t tcp; /* first member: the handle's data points back here */
  uv_connect_t connect_req;
  const qim_bench_conn_cbs *cbs;
  const qim_bench_target *target;
  void *ud; /* the owner's */
  qim_wsc_parser parser;
  char key[QIM_WSC_KEY_LEN + 1];
  char *hs; /* handshake answer received so far (freed once open) */
  size_t hs_len;
  uint32_t mask_state; /* xorshift state for masking keys */
  uint8_t state;
  uint8_t end_why;
  int end_err;
};

/*
 * Starts connecting to `t` from `source` (NULL: the kernel picks; otherwise bound before
 * connect with the port left to the kernel, so many sources can share ports). Returns 0
 * and later calls on_open or on_close; or a negative uv/errno error and no callback (the
 * handle is then still closing: keep `c` until the loop has run once more).
 */
int qim_bench_conn_start(qim_bench_conn *c, uv_loop_t *loop, const qim_bench_target *t,
                         const struct sockaddr_in *source, const qim_bench_conn_cbs *cbs, void *ud);

/*
 * Sends one text message (masked, copied). 0, or a negative uv error (the connection is
 * then closing). Only valid after on_open.
 */
int qim_bench_conn_send_text(qim_bench_conn *c, const char *data, size_t len);

/* Bytes written but not yet accepted by the kernel (for back-pressure). */
size_t qim_bench_conn_pending(const qim_bench_conn *c);

/* True between on_open and the start of closing. */
bool qim_bench_conn_is_open(const qim_bench_conn *c);

/* Closes the connection (no close handshake: the benchmark is over or gave up on it). on_close
 * follows with QIM_BENCH_END_LOCAL unless it already ended. Idempotent. */
void qim_bench_conn_close(qim_bench_conn *c);

/* A readable name for `why`. */
const char *qim_bench_end_name(qim_bench_end why);

#endif /* QIM_BENCH_CONN_H */
