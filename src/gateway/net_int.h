/*
 * net_int.h — private structures shared by net.c (server, loops, threads, inbox,
 * timers) and net_conn.c (one connection's reads, handshake, framing, output queue and
 * close). Nothing outside src/gateway/net.c and net_conn.c includes this.
 */
#ifndef QIM_GATEWAY_NET_INT_H
#define QIM_GATEWAY_NET_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "gateway/iplimit.h"
#include "gateway/net.h"

/* Counters written by one loop thread, read by any: single-writer relaxed atomics. */
typedef struct loop_stats {
  _Atomic uint64_t accepted, conns, ws_conns, upgrades, http_rejected, http_routed;
  _Atomic uint64_t frames_in, frames_out, bytes_in, bytes_out, pings_sent;
  _Atomic uint64_t slow_consumers, idle_timeouts, handshake_timeouts, protocol_errors;
  _Atomic uint64_t sends_dropped, inbox_full, writes;
  _Atomic uint64_t loop_stalls;
} loop_stats;

#define STAT_ADD(loop, field, n)                                                                \
  atomic_store_explicit(&(loop)->stats.field,                                                   \
                        atomic_load_explicit(&(loop)->stats.field, memory_order_relaxed) + (n), \
                        memory_order_relaxed)

/* A connection list ordered by since_ms (appends are always "now"). */
typedef struct conn_list {
  qim_conn *head, *tail;
} conn_list;

enum { LIST_NONE = 0, LIST_HANDSHAKE, LIST_OPEN, LIST_CLOSING };

/* A request posted to a loop from another thread. */
typedef struct inbox_item {
  uint64_t id;
  qim_ws_frame *frame; /* a send when non-NULL, else a close */
  uint16_t code;
} inbox_item;

/* A connection table slot; ids carry the generation so a stale id never matches. */
typedef struct conn_slot {
  qim_conn *conn;
  uint32_t gen;
  uint32_t next_free;
} conn_slot;

typedef struct net_loop {
  qim_net *net;
  unsigned index;
  uv_loop_t uv;
  uv_thread_t thread;
  uv_tcp_t listener;
  uv_timer_t sweep;
  uv_async_t wakeup;
  bool started; /* thread running */
  bool stopping;
  bool stop_hook_done;
  /* inbox: producers append under mu; the loop swaps the arrays and drains */
  uv_mutex_t mu;
  inbox_item *items, *spare;
  unsigned count;
  bool stop_requested, closed;
  /* connections */
  conn_slot *slots;
  uint32_t nslots, free_slot; /* free_slot: head of the free chain, UINT32_MAX if none */
  size_t nconns;
  conn_list handshake, open, closing;
  char *readbuf; /* one read buffer per loop: parsers consume it before the next read */
  /* output corking: connections with frames queued during this iteration, written once
   * per connection by the check handle; the idle handle keeps poll from blocking first */
  uv_check_t flush_check;
  uv_idle_t flush_idle;
  qim_conn *dirty;
  /* the stall watch (net.c): the loop's time when its last poll returned (0: none yet) */
  uv_check_t stall_mark;
  uv_prepare_t stall_watch;
  uint64_t polled_ms;
  loop_stats stats;
} net_loop;

typedef struct net_route {
  char *path;
  qim_net_route_fn fn;
  void *ud;
} net_route;

struct qim_net {
  qim_net_config cfg;
  char *host, *ws_path;         /* owned copies of the strings in cfg */
  struct sockaddr_storage addr; /* cfg.host resolved once, port still 0 */
  socklen_t addr_len;
  qim_net_handler h;
  net_route *routes;
  size_t nroutes;
  qim_iplimit *ips;
  net_loop *loops;
  unsigned nloops;
  uint16_t port;
  _Atomic bool running;
};

/* Pending output: shared frames, the first one possibly partly written. */
typedef struct out_node {
  struct out_node *next;
  qim_ws_frame *frame;
} out_node;

enum { CS_HANDSHAKE = 0, CS_OPEN, CS_CLOSING, CS_DEAD };

struct qim_conn {
  uv_tcp_t tcp;
  net_loop *loop;
  uint64_t id;
  void *data;
  qim_conn *prev, *next; /* in the loop list named by `list` */
  uint64_t since_ms;     /* accept / last receive / start of closing, per list */
  qim_http_parser *http; /* during the handshake only */
  qim_ws_parser ws;
  out_node *out_head, *out_tail;
  size_t out_off;   /* bytes of out_head already written */
  size_t out_bytes; /* bytes not yet written */
  uint32_t out_frames;
  struct conn_write *wreq; /* the uv_write in flight, or NULL */
  qim_conn *dirty_next;    /* in the loop's list of corked connections */
  qim_tenant_id tenant;
  uint8_t addr[16];
  uint16_t port;
  uint16_t close_code; /* reported to on_close */
  uint8_t state, list;
  bool opened;      /* on_open ran, so on_close is owed */
  bool pinged;      /* a ping went out since the last receive */
  bool discard;     /* closing: ignore input (parser failed, or HTTP answered) */
  bool peer_closed; /* the peer's close frame arrived */
  bool after_flush; /* closing: act when the queue drains */
  bool shut;        /* uv_shutdown issued */
  bool deferred;    /* handshake: a route answers later (qim_net_http_answer) */
  bool dirty;       /* corked output waits for the loop's flush */
};

/* net_conn.c */
void qim__net_conn_accept(net_loop *l);
void qim__net_conn_abort(qim_conn *c, uint16_t code, bool try_close_frame);
void qim__net_conn_ping(qim_conn *c);
int qim__net_conn_queue(qim_conn *c, qim_ws_frame *f, bool limited);
void qim__net_conn_cork_init(net_loop *l);

/* net.c */
void qim__net_list_add(net_loop *l, qim_conn *c, int list, uint64_t now);
void qim__net_list_remove(net_loop *l, qim_conn *c);
uint64_t qim__net_slot_alloc(net_loop *l, qim_conn *c);
void qim__net_slot_free(net_loop *l, uint64_t id);
qim_conn *qim__net_slot_get(net_loop *l, uint64_t id);
void qim__net_loop_conn_gone(net_loop *l);

#endif /* QIM_GATEWAY_NET_INT_H */
