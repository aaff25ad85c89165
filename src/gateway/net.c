/*
 * net.c — the gateway server: configuration, one libuv loop per I/O thread, the
 * SO_REUSEPORT listeners, the per-loop connection table and lists, the sweep timer
 * (handshake deadlines, idle pings and timeouts, lingering closes), the cross-thread
 * inbox and shutdown. Per-connection behaviour is in net_conn.c.
 *
 * Timers: one sweep timer per loop instead of one per connection (a uv_timer_t would
 * add ~150 bytes to every idle connection). Each loop keeps its connections in three
 * lists ordered by the time they entered (handshake: accept; closing: close start;
 * open: last input, moved to the back on every read), so a sweep only walks the
 * connections that are actually due.
 */
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gateway/net_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define READBUF_SIZE (64 * 1024)
#define MAX_LOOPS 256
#define SLOT_BITS 24
#define MAX_SLOTS (1u << SLOT_BITS)
#define NO_SLOT UINT32_MAX

/* The loop the current thread runs, so a send from it skips the inbox. */
static _Thread_local net_loop *tls_loop;

void qim_net_config_default(qim_net_config *cfg) {
  *cfg = (qim_net_config){
      .host = "0.0.0.0",
      .port = 6060,
      .threads = 0,
      .backlog = 511,
      .ws_path = "/v0/channels",
      .handshake_timeout = 10000,
      .idle_timeout = 55000,
      .ping_interval = 50000,
      .close_timeout = 3000,
      .max_header = 8192,
      .max_body = 65536,
      .max_message = 262144,
      .max_out_bytes = 4u << 20,
      .max_out_frames = 4096,
      .max_conns_per_ip = 0,
      .inbox_capacity = 16384,
  };
}

void qim_http_reply_set(qim_http_reply *r, int status, const char *content_type, const void *body,
                        size_t len) {
  qim_free(r->body);
  r->status = status;
  r->content_type = content_type;
  r->body = len ? qim_memdup(body, len) : NULL;
  r->body_len = len;
}

/* ---- lists and slots (loop thread) ----------------------------------------------------------- */

static conn_list *list_of(net_loop *l, int which) {
  return which == LIST_HANDSHAKE ? &l->handshake : which == LIST_OPEN ? &l->open : &l->closing;
}

void qim__net_list_remove(net_loop *l, qim_conn *c) {
  if (c->list == LIST_NONE) return;
  conn_list *ls = list_of(l, c->list);
  if (c->prev)
    c->prev->next = c->next;
  else
    ls->head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    ls->tail = c->prev;
  c->prev = c->next = NULL;
  c->list = LIST_NONE;
}

void qim__net_list_add(net_loop *l, qim_conn *c, int which, uint64_t now) {
  qim__net_list_remove(l, c);
  conn_list *ls = list_of(l, which);
  c->prev = ls->tail;
  c->next = NULL;
  if (ls->tail)
    ls->tail->next = c;
  else
    ls->head = c;
  ls->tail = c;
  c->list = (uint8_t)which;
  c->since_ms = now;
}

uint64_t qim__net_slot_alloc(net_loop *l, qim_conn *c) {
  if (l->free_slot == NO_SLOT) {
    uint32_t n = l->nslots ? l->nslots * 2 : 64;
    if (n > MAX_SLOTS || n <= l->nslots) abort(); /* 16M connections on one loop */
    l->slots = qim_realloc(l->slots, n * sizeof *l->slots);
    for (uint32_t i = l->nslots; i < n; i++)
      l->slots[i] = (conn_slot){.conn = NULL, .gen = 1, .next_free = i + 1 < n ? i + 1 : NO_SLOT};
    l->free_slot = l->nslots;
    l->nslots = n;
  }
  uint32_t i = l->free_slot;
  conn_slot *s = &l->slots[i];
  l->free_slot = s->next_free;
  s->conn = c;
  return (uint64_t)l->index << 56 | (uint64_t)s->gen << SLOT_BITS | i;
}

void qim__net_slot_free(net_loop *l, uint64_t id) {
  uint32_t i = (uint32_t)(id & (MAX_SLOTS - 1));
  conn_slot *s = &l->slots[i];
  s->conn = NULL;
  if (++s->gen == 0) s->gen = 1; /* 0 would make id 0 possible on loop 0 */
  s->next_free = l->free_slot;
  l->free_slot = i;
}

qim_conn *qim__net_slot_get(net_loop *l, uint64_t id) {
  uint32_t i = (uint32_t)(id & (MAX_SLOTS - 1));
  if (i >= l->nslots || l->slots[i].gen != (uint32_t)(id >> SLOT_BITS)) return NULL;
  return l->slots[i].conn;
}

/* ---- sweep timer (loop thread) --------------------------------------------------------------- */

static void sweep_open(net_loop *l, uint64_t now) {
  const qim_net_config *cfg = &l->net->cfg;
  uint64_t due = cfg->ping_interval;
  if (cfg->idle_timeout && (!due || cfg->idle_timeout < due)) due = cfg->idle_timeout;
  if (!due) return;
  for (qim_conn *c = l->open.head, *next; c && now - c->since_ms >= due; c = next) {
    next = c->next;
    if (cfg->idle_timeout && now - c->since_ms >= cfg->idle_timeout) {
      STAT_ADD(l, idle_timeouts, 1);
      qim__net_conn_abort(c, QIM_WS_CLOSE_GOING_AWAY, true);
    } else if (cfg->ping_interval && !c->pinged) {
      qim__net_conn_ping(c);
    }
  }
}

static void on_sweep(uv_timer_t *t) {
  net_loop *l = t->data;
  const qim_net_config *cfg = &l->net->cfg;
  uint64_t now = uv_now(&l->uv);
  qim_conn *c;
  while ((c = l->handshake.head) && now - c->since_ms >= cfg->handshake_timeout) {
    STAT_ADD(l, handshake_timeouts, 1); /* slowloris: the whole request must come in time */
    qim__net_conn_abort(c, QIM_WS_CLOSE_ABNORMAL, false);
  }
  while ((c = l->closing.head) && now - c->since_ms >= cfg->close_timeout)
    qim__net_conn_abort(c, c->close_code, false);
  sweep_open(l, now);
}

/* A quarter of the shortest deadline, between 5 ms and 1 s. */
static uint64_t sweep_period(const qim_net_config *cfg) {
  uint64_t m =
      cfg->handshake_timeout < cfg->close_timeout ? cfg->handshake_timeout : cfg->close_timeout;
  if (cfg->idle_timeout && cfg->idle_timeout < m) m = cfg->idle_timeout;
  if (cfg->ping_interval && cfg->ping_interval < m) m = cfg->ping_interval;
  m /= 4;
  return m < 5 ? 5 : m > 1000 ? 1000 : m;
}

/* ---- loop lifecycle -------------------------------------------------------------------------- */

/* Runs the upper layer's stop hook once the stopping loop has no connection left. */
static void maybe_stop_hook(net_loop *l) {
  if (!l->stopping || l->nconns || l->stop_hook_done) return;
  l->stop_hook_done = true;
  qim_net *net = l->net;
  if (l->started && net->h.on_loop_stop) net->h.on_loop_stop(net, l->index, &l->uv, net->h.ud);
}

void qim__net_loop_conn_gone(net_loop *l) {
  l->nconns--;
  maybe_stop_hook(l);
}

static void abort_list(conn_list *ls, uint16_t code, bool try_close_frame) {
  while (ls->head) qim__net_conn_abort(ls->head, code, try_close_frame);
}

/* On the loop thread: close everything so uv_run returns. */
static void loop_shutdown(net_loop *l) {
  l->stopping = true;
  uv_close((uv_handle_t *)&l->listener, NULL);
  uv_close((uv_handle_t *)&l->sweep, NULL);
  abort_list(&l->handshake, QIM_WS_CLOSE_ABNORMAL, false);
  abort_list(&l->open, QIM_WS_CLOSE_GOING_AWAY, true);
  abort_list(&l->closing, 0, false);
  uv_close((uv_handle_t *)&l->flush_check, NULL); /* every connection is uncorked by now */
  uv_close((uv_handle_t *)&l->flush_idle, NULL);
  uv_close((uv_handle_t *)&l->stall_mark, NULL);
  uv_close((uv_handle_t *)&l->stall_watch, NULL);
  uv_mutex_lock(&l->mu);
  l->closed = true; /* no thread may touch the async handle from now on */
  for (unsigned i = 0; i < l->count; i++) qim_ws_frame_unref(l->items[i].frame);
  l->count = 0;
  uv_mutex_unlock(&l->mu);
  uv_close((uv_handle_t *)&l->wakeup, NULL);
  maybe_stop_hook(l);
}

static void deliver(net_loop *l, const inbox_item *it) {
  qim_conn *c = qim__net_slot_get(l, it->id);
  if (it->frame) {
    if (!c || qim_conn_send_frame(c, it->frame) == -EPIPE) STAT_ADD(l, sends_dropped, 1);
    qim_ws_frame_unref(it->frame);
  } else if (c && c->state == CS_HANDSHAKE) {
    qim__net_conn_abort(c, it->code, false);
  } else if (c) {
    qim_conn_close(c, it->code, NULL);
  }
}

static void on_wakeup(uv_async_t *a) {
  net_loop *l = a->data;
  uv_mutex_lock(&l->mu);
  inbox_item *items = l->items;
  unsigned n = l->count;
  l->items = l->spare; /* producers continue into the other array meanwhile */
  l->spare = items;
  l->count = 0;
  bool stop = l->stop_requested;
  uv_mutex_unlock(&l->mu);
  for (unsigned i = 0; i < n; i++) deliver(l, &items[i]);
  if (stop && !l->stopping) loop_shutdown(l);
}

/* The stall watch (docs/gateway-transport.md, "Loop stalls"). libuv stamps the loop's
 * time when a poll returns and runs the I/O callbacks under that stamp; the check phase,
 * after them, still sees it. Before the next poll, the clock less that stamp is what the
 * loop worked on in between. libuv's millisecond clock is fine for a 50-ms bound and costs
 * one clock read an iteration (libuv's idle-time metric, tried first, adds a system call
 * before every poll that sleeps and a lock per ready event). */
static void on_stall_mark(uv_check_t *h) {
  net_loop *l = h->data;
  l->polled_ms = uv_now(&l->uv);
}

static void on_stall_watch(uv_prepare_t *p) {
  net_loop *l = p->data;
  if (!l->polled_ms) return; /* the first iteration: no poll yet */
  uv_update_time(&l->uv);
  uint64_t busy = uv_now(&l->uv) - l->polled_ms;
  if (busy >= QIM_NET_STALL_MS) {
    STAT_ADD(l, loop_stalls, 1);
    QIM_LOGW(NULL, "gateway.loop_stall", "loop=%u ms=%.1f", l->index, (double)busy);
  }
}

static void on_connection(uv_stream_t *server, int status) {
  net_loop *l = server->data;
  if (status < 0 || l->stopping) return;
  qim__net_conn_accept(l);
}

static void thread_main(void *arg) {
  net_loop *l = arg;
  qim_net *net = l->net;
  tls_loop = l;
  qim_log_name_thread("net");
  if (net->h.on_loop_start) net->h.on_loop_start(net, l->index, &l->uv, net->h.ud);
  uv_run(&l->uv, UV_RUN_DEFAULT);
  tls_loop = NULL;
}

/* A listening socket with SO_REUSEPORT (libuv 1.44 cannot set it): every loop binds one. */
static int listen_socket(const struct sockaddr *sa, socklen_t len, int backlog, int *out) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 || bind(fd, sa, len) != 0 ||
      listen(fd, backlog) != 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  *out = fd;
  return 0;
}

/*
 * Resolves `host` into ss (port 0): an IPv4 or IPv6 literal, else a name through
 * getaddrinfo (first answer). Done once, in qim_net_new, so start never blocks on DNS.
 */
static int resolve_host(const char *host, struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  if (uv_ip4_addr(host, 0, (struct sockaddr_in *)ss) == 0) {
    *len = sizeof(struct sockaddr_in);
    return 0;
  }
  if (uv_ip6_addr(host, 0, (struct sockaddr_in6 *)ss) == 0) {
    *len = sizeof(struct sockaddr_in6);
    return 0;
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  struct addrinfo *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -EINVAL;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port) {
  if (ss->ss_family == AF_INET)
    ((struct sockaddr_in *)ss)->sin_port = htons(port);
  else
    ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static uint16_t bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* Binds loop l's listener on *port (0 = pick one, then written back). */
static int loop_listen(net_loop *l, uint16_t *port) {
  const qim_net_config *cfg = &l->net->cfg;
  struct sockaddr_storage ss = l->net->addr;
  set_port(&ss, *port);
  int fd = -1, rc = listen_socket((struct sockaddr *)&ss, l->net->addr_len, cfg->backlog, &fd);
  if (rc) return rc;
  if (*port == 0) *port = bound_port(fd);
  if ((rc = uv_tcp_open(&l->listener, fd)) != 0) {
    close(fd);
    return rc;
  }
  return uv_listen((uv_stream_t *)&l->listener, cfg->backlog, on_connection);
}

/* Initialises loop l's handles; after a 0 return, loop_teardown undoes it. */
static int loop_init(qim_net *net, net_loop *l, unsigned index) {
  l->net = net;
  l->index = index;
  l->free_slot = NO_SLOT;
  int rc = uv_loop_init(&l->uv);
  if (rc) return rc;
  if (uv_async_init(&l->uv, &l->wakeup, on_wakeup) != 0) {
    uv_loop_close(&l->uv);
    return -EMFILE;
  }
  if (uv_mutex_init(&l->mu)) abort();
  l->items = qim_malloc(net->cfg.inbox_capacity * sizeof *l->items);
  l->spare = qim_malloc(net->cfg.inbox_capacity * sizeof *l->spare);
  l->readbuf = qim_malloc(READBUF_SIZE);
  l->wakeup.data = l;
  qim__net_conn_cork_init(l);
  uv_timer_init(&l->uv, &l->sweep);
  l->sweep.data = l;
  uint64_t period = sweep_period(&net->cfg);
  uv_timer_start(&l->sweep, on_sweep, period, period);
  uv_tcp_init(&l->uv, &l->listener);
  l->listener.data = l;
  uv_check_init(&l->uv, &l->stall_mark);
  uv_prepare_init(&l->uv, &l->stall_watch);
  l->stall_mark.data = l->stall_watch.data = l;
  uv_check_start(&l->stall_mark, on_stall_mark);
  uv_prepare_start(&l->stall_watch, on_stall_watch);
  uv_unref((uv_handle_t *)&l->stall_mark); /* they alone do not keep the loop running */
  uv_unref((uv_handle_t *)&l->stall_watch);
  return 0;
}

/* Stops loop l (running or not), waits for it and frees its resources. */
static void loop_teardown(net_loop *l) {
  uv_mutex_lock(&l->mu);
  l->stop_requested = true;
  uv_async_send(&l->wakeup);
  uv_mutex_unlock(&l->mu);
  if (l->started)
    uv_thread_join(&l->thread);
  else
    uv_run(&l->uv, UV_RUN_DEFAULT);        /* never started: finish the closes here */
  if (uv_loop_close(&l->uv) != 0) abort(); /* a handle outlived its owner: a bug */
  qim_free(l->items);
  qim_free(l->spare);
  qim_free(l->readbuf);
  qim_free(l->slots);
  l->items = l->spare = NULL;
  l->readbuf = NULL;
  l->slots = NULL;
}

/* ---- server ---------------------------------------------------------------------------------- */

static int check_config(const qim_net_config *cfg) {
  if (!cfg->host) return -EINVAL;
  if (cfg->threads > MAX_LOOPS || !cfg->ws_path || cfg->ws_path[0] != '/') return -EINVAL;
  if (!cfg->handshake_timeout || !cfg->close_timeout || !cfg->max_header || !cfg->max_message)
    return -EINVAL;
  if (!cfg->max_out_bytes || !cfg->max_out_frames || !cfg->inbox_capacity || cfg->backlog <= 0)
    return -EINVAL;
  return 0;
}

int qim_net_new(const qim_net_config *cfg, const qim_net_handler *handler, qim_net **out) {
  *out = NULL;
  int rc = check_config(cfg);
  if (rc) return rc;
  struct sockaddr_storage addr;
  socklen_t addr_len;
  if (resolve_host(cfg->host, &addr, &addr_len) != 0) return -EINVAL;
  qim_net *net = qim_calloc(1, sizeof *net);
  net->addr = addr;
  net->addr_len = addr_len;
  net->cfg = *cfg;
  net->host = qim_strdup(cfg->host);
  net->ws_path = qim_strdup(cfg->ws_path);
  net->cfg.host = net->host;
  net->cfg.ws_path = net->ws_path;
  if (handler) net->h = *handler;
  net->ips = qim_iplimit_new();
  atomic_init(&net->running, false);
  *out = net;
  return 0;
}

int qim_net_add_route(qim_net *net, const char *path, qim_net_route_fn fn, void *ud) {
  if (net->loops) return -EBUSY;
  if (!path || path[0] != '/' || !fn) return -EINVAL;
  if (strcmp(path, net->ws_path) == 0) return -EEXIST;
  for (size_t i = 0; i < net->nroutes; i++)
    if (strcmp(net->routes[i].path, path) == 0) return -EEXIST;
  net->routes = qim_realloc(net->routes, (net->nroutes + 1) * sizeof *net->routes);
  net->routes[net->nroutes++] = (net_route){qim_strdup(path), fn, ud};
  return 0;
}

/*
 * libuv writes with write(2): a peer that reset the connection would raise SIGPIPE and
 * kill the process. Ignore it unless the application installed its own handler.
 */
static void ignore_sigpipe(void) {
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

int qim_net_start(qim_net *net) {
  if (net->loops) return -EBUSY;
  ignore_sigpipe();
  unsigned n = net->cfg.threads ? net->cfg.threads : uv_available_parallelism();
  if (n > MAX_LOOPS) n = MAX_LOOPS;
  net->loops = qim_calloc(n, sizeof *net->loops);
  uint16_t port = net->cfg.port;
  int rc = 0;
  unsigned made = 0;
  for (; made < n && rc == 0; made++) {
    rc = loop_init(net, &net->loops[made], made);
    if (rc) break;
    rc = loop_listen(&net->loops[made], &port);
  }
  for (unsigned i = 0; i < made && rc == 0; i++) {
    if (uv_thread_create(&net->loops[i].thread, thread_main, &net->loops[i]) != 0)
      rc = -EAGAIN;
    else
      net->loops[i].started = true;
  }
  if (rc) { /* undo: every initialised loop is stopped and freed */
    for (unsigned i = 0; i < made; i++) loop_teardown(&net->loops[i]);
    for (unsigned i = 0; i < made; i++) uv_mutex_destroy(&net->loops[i].mu);
    qim_free(net->loops);
    net->loops = NULL;
    return rc;
  }
  net->nloops = n;
  net->port = port;
  atomic_store(&net->running, true);
  QIM_LOGI(NULL, "gateway.listening", "host=%s port=%u loops=%u ws_path=%s", net->host, port, n,
           net->ws_path);
  return 0;
}

void qim_net_stop(qim_net *net) {
  if (!net || !atomic_exchange(&net->running, false)) return;
  for (unsigned i = 0; i < net->nloops; i++) loop_teardown(&net->loops[i]);
}

void qim_net_free(qim_net *net) {
  if (!net) return;
  qim_net_stop(net);
  for (unsigned i = 0; i < net->nloops; i++) uv_mutex_destroy(&net->loops[i].mu);
  qim_free(net->loops);
  for (size_t i = 0; i < net->nroutes; i++) qim_free(net->routes[i].path);
  qim_free(net->routes);
  qim_iplimit_free(net->ips);
  qim_free(net->host);
  qim_free(net->ws_path);
  qim_free(net);
}

uint16_t qim_net_port(const qim_net *net) {
  return net->port;
}
unsigned qim_net_loops(const qim_net *net) {
  return net->nloops;
}
uv_loop_t *qim_net_loop(qim_net *net, unsigned i) {
  return i < net->nloops ? &net->loops[i].uv : NULL;
}

unsigned qim_net_ip_count(qim_net *net, const uint8_t addr[16]) {
  return qim_iplimit_count(net->ips, addr);
}

/* ---- cross-thread requests ------------------------------------------------------------------- */

static net_loop *loop_for(qim_net *net, uint64_t id) {
  unsigned i = (unsigned)(id >> 56);
  return id && i < net->nloops ? &net->loops[i] : NULL;
}

/* Appends one request under l->mu; false when the inbox is full or closed. */
static int push_locked(net_loop *l, uint64_t id, qim_ws_frame *f, uint16_t code) {
  if (l->closed) return -ESHUTDOWN;
  if (l->count == l->net->cfg.inbox_capacity) {
    STAT_ADD(l, inbox_full, 1); /* written under l->mu only */
    return -EAGAIN;
  }
  l->items[l->count++] = (inbox_item){id, f ? qim_ws_frame_ref(f) : NULL, code};
  return 0;
}

static int post(qim_net *net, uint64_t id, qim_ws_frame *f, uint16_t code) {
  if (!atomic_load(&net->running)) return -ESHUTDOWN;
  net_loop *l = loop_for(net, id);
  if (!l) return -ENOENT;
  if (tls_loop == l) { /* already on the owner thread: act directly */
    inbox_item it = {id, f ? qim_ws_frame_ref(f) : NULL, code};
    deliver(l, &it);
    return 0;
  }
  uv_mutex_lock(&l->mu);
  int rc = push_locked(l, id, f, code);
  if (rc == 0) uv_async_send(&l->wakeup); /* under mu: the handle cannot be closing */
  uv_mutex_unlock(&l->mu);
  return rc;
}

int qim_net_send(qim_net *net, uint64_t id, qim_ws_frame *f) {
  return post(net, id, f, 0);
}

int qim_net_close_conn(qim_net *net, uint64_t id, uint16_t code) {
  return post(net, id, NULL, code);
}

int qim_net_send_many(qim_net *net, const uint64_t *ids, size_t n, qim_ws_frame *f) {
  if (!atomic_load(&net->running)) return -ESHUTDOWN;
  int accepted = 0;
  for (unsigned li = 0; li < net->nloops; li++) {
    net_loop *l = &net->loops[li];
    bool own = tls_loop == l, any = false;
    if (!own) uv_mutex_lock(&l->mu);
    for (size_t i = 0; i < n; i++) {
      if (loop_for(net, ids[i]) != l) continue;
      if (own) {
        inbox_item it = {ids[i], qim_ws_frame_ref(f), 0};
        deliver(l, &it);
        accepted++;
      } else if (push_locked(l, ids[i], f, 0) == 0) {
        accepted++;
        any = true;
      }
    }
    if (!own) {
      if (any) uv_async_send(&l->wakeup);
      uv_mutex_unlock(&l->mu);
    }
  }
  return accepted;
}

/* ---- counters -------------------------------------------------------------------------------- */

#define LOAD(field) atomic_load_explicit(&s->field, memory_order_relaxed)

static void add_stats(const loop_stats *s, qim_net_stats *o) {
  o->accepted += LOAD(accepted);
  o->conns += LOAD(conns);
  o->ws_conns += LOAD(ws_conns);
  o->upgrades += LOAD(upgrades);
  o->http_rejected += LOAD(http_rejected);
  o->http_routed += LOAD(http_routed);
  o->frames_in += LOAD(frames_in);
  o->frames_out += LOAD(frames_out);
  o->bytes_in += LOAD(bytes_in);
  o->bytes_out += LOAD(bytes_out);
  o->pings_sent += LOAD(pings_sent);
  o->slow_consumers += LOAD(slow_consumers);
  o->idle_timeouts += LOAD(idle_timeouts);
  o->handshake_timeouts += LOAD(handshake_timeouts);
  o->protocol_errors += LOAD(protocol_errors);
  o->sends_dropped += LOAD(sends_dropped);
  o->inbox_full += LOAD(inbox_full);
  o->writes += LOAD(writes);
  o->loop_stalls += LOAD(loop_stalls);
}

void qim_net_stats_get(const qim_net *net, qim_net_stats *out) {
  memset(out, 0, sizeof *out);
  for (unsigned i = 0; i < net->nloops; i++) add_stats(&net->loops[i].stats, out);
}

void qim_net_loop_stats(const qim_net *net, unsigned i, qim_net_stats *out) {
  memset(out, 0, sizeof *out);
  if (i < net->nloops) add_stats(&net->loops[i].stats, out);
}
