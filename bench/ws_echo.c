/*
 * ws_echo.c — the frames/s baseline of issue 10 (measurement 2): a minimal epoll
 * WebSocket echo server, so qim's one-to-one figures can be read against what this
 * machine moves through WebSocket frames at all. It does the least a WebSocket server
 * must: the opening handshake, unmasking client frames and writing each data frame back
 * unmasked (ping → pong, close → close). No JSON, no UTF-8 check, no allocation per frame:
 * every frame read in one recv() is answered by one send(). Driven by
 * `qim-bench echo --server 127.0.0.1:PORT` (bench/README.md).
 *
 * Usage: qim-bench-ws_echo [--listen 127.0.0.1:PORT] [--threads N] [--duration S]
 *   PORT 0 picks a free port; the first line on stdout is "listening 127.0.0.1:PORT".
 *   --threads: N event loops sharing the port with SO_REUSEPORT (default 1; the harness
 *   passes qimd's io_threads so both use the same cores). The server exits after
 *   --duration seconds (default 600) or on SIGINT/SIGTERM, printing what it echoed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gateway/http.h"
#include "qim/websocket.h"

#define RBUF (64 * 1024)
#define WMAX (4 * 1024 * 1024) /* stop reading a connection whose replies pile up beyond this */
#define MAX_THREADS 16
#define MAX_CONNS 20000

typedef struct conn {
  int fd;
  bool open; /* handshake done */
  uint8_t *in;
  size_t in_len;
  uint8_t *out;
  size_t out_len, out_cap, out_off;
} conn;

typedef struct loop {
  pthread_t tid;
  int ep, lfd;
  uint64_t frames, conns;
} loop;

static atomic_bool stop_flag;
static struct sockaddr_in listen_addr;
static double deadline_s;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_signal(int sig) {
  (void)sig;
  atomic_store(&stop_flag, true);
}

/* ---- output -----------------------------------------------------------------------------------
 */

static void out_put(conn *c, const void *p, size_t n) {
  if (c->out_len + n > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : 16384;
    while (cap < c->out_len + n) cap *= 2;
    c->out = realloc(c->out, cap);
    if (!c->out) abort();
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, p, n);
  c->out_len += n;
}

/* A server frame header (FIN set, unmasked) for `op` and `len`. */
static void out_header(conn *c, int op, uint64_t len) {
  uint8_t h[10];
  size_t n = 0;
  h[n++] = (uint8_t)(0x80 | op);
  if (len < 126) {
    h[n++] = (uint8_t)len;
  } else if (len <= 0xFFFF) {
    h[n++] = 126;
    h[n++] = (uint8_t)(len >> 8);
    h[n++] = (uint8_t)len;
  } else {
    h[n++] = 127;
    for (int i = 7; i >= 0; i--) h[n++] = (uint8_t)(len >> (8 * i));
  }
  out_put(c, h, n);
}

/* Writes what it can; false when the connection broke. */
static bool flush(conn *c) {
  while (c->out_off < c->out_len) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) return false;
    c->out_off += (size_t)n;
  }
  if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
  return true;
}

/* ---- handshake and frames ---------------------------------------------------------------------
 */

/* Answers the upgrade once the header block is in. Returns bytes consumed, 0 if incomplete, -1 bad.
 */
static long handshake(conn *c) {
  uint8_t *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
  if (!end) return c->in_len > 8192 ? -1 : 0;
  *end = '\0';
  char *key = NULL;
  for (char *line = (char *)c->in; line && *line;
       line = strstr(line, "\r\n"), line = line ? line + 2 : NULL)
    if (strncasecmp(line, "Sec-WebSocket-Key:", 18) == 0) {
      key = line + 18;
      while (*key == ' ') key++;
      char *e = strstr(key, "\r\n");
      if (e) *e = '\0';
      break;
    }
  if (!key || !qim_http_ws_key_valid(key)) return -1;
  char accept[QIM_WS_ACCEPT_LEN + 1], resp[256];
  qim_websocket_accept(key, accept);
  int n =
      snprintf(resp, sizeof resp,
               "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: %s\r\n\r\n",
               accept);
  out_put(c, resp, (size_t)n);
  c->open = true;
  return (long)(end + 4 - c->in);
}

/* Echoes every complete frame in c->in; returns bytes consumed or -1 to close. */
static long frames(conn *c, loop *l) {
  size_t off = 0;
  while (c->in_len - off >= 2) {
    const uint8_t *p = c->in + off;
    int op = p[0] & 0x0F;
    if (!(p[1] & 0x80)) return -1; /* clients must mask */
    uint64_t len = p[1] & 0x7F;
    size_t h = 2;
    if (len == 126) {
      if (c->in_len - off < 4) break;
      len = ((uint64_t)p[2] << 8) | p[3];
      h = 4;
    } else if (len == 127) {
      if (c->in_len - off < 10) break;
      len = 0;
      for (int i = 0; i < 8; i++) len = (len << 8) | p[2 + i];
      h = 10;
    }
    if (len > RBUF - 14) return -1; /* a baseline needs no big frames */
    if (c->in_len - off < h + 4 + len) break;
    uint8_t *mask = c->in + off + h, *data = mask + 4;
    for (uint64_t i = 0; i < len; i++) data[i] ^= mask[i & 3];
    if (op == 0x8) { /* close: answer and finish */
      out_header(c, 0x8, len > 125 ? 0 : len);
      out_put(c, data, len > 125 ? 0 : len);
      return -1;
    }
    out_header(c, op == 0x9 ? 0xA : op, len);
    out_put(c, data, len);
    if (op < 0x8) l->frames++;
    off += h + 4 + len;
  }
  return (long)off;
}

static void conn_close(loop *l, conn *c) {
  if (c->out_len) flush(c); /* best effort: a close frame may be waiting */
  epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
}

static void set_events(loop *l, conn *c) {
  bool want_read = c->out_len < WMAX;
  struct epoll_event ev = {.events = (want_read ? EPOLLIN : 0) | (c->out_len ? EPOLLOUT : 0),
                           .data.ptr = c};
  epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Drops the first `used` input bytes. */
static void consume(conn *c, size_t used) {
  memmove(c->in, c->in + used, c->in_len - used);
  c->in_len -= used;
}

/*
 * Reads what is there, answers it, writes once. A partial frame stays in c->in; frames()
 * refuses any frame that could not fit, so the buffer always has room for the next recv.
 */
static void on_readable(loop *l, conn *c) {
  for (;;) {
    size_t room = RBUF - c->in_len;
    ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      conn_close(l, c);
      return;
    }
    c->in_len += (size_t)n;
    long used = c->open ? 0 : handshake(c);
    if (used > 0) consume(c, (size_t)used);
    if (used >= 0 && c->open) used = frames(c, l);
    if (used < 0) {
      conn_close(l, c);
      return;
    }
    if (c->open) consume(c, (size_t)used);
    if ((size_t)n < room || c->out_len >= WMAX) break;
  }
  if (!flush(c)) {
    conn_close(l, c);
    return;
  }
  set_events(l, c);
}

/* ---- loops ------------------------------------------------------------------------------------
 */

static void on_accept(loop *l) {
  for (;;) {
    int fd = accept4(l->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = calloc(1, sizeof *c);
    if (!c || !(c->in = malloc(RBUF))) abort();
    c->fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev);
    l->conns++;
  }
}

static void *run_loop(void *arg) {
  loop *l = arg;
  struct epoll_event evs[256];
  while (!atomic_load(&stop_flag) && now_s() < deadline_s) {
    int n = epoll_wait(l->ep, evs, 256, 200);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL) {
        on_accept(l);
        continue;
      }
      conn *c = evs[i].data.ptr;
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        on_readable(l, c);
      } else if (evs[i].events & EPOLLOUT) {
        if (!flush(c))
          conn_close(l, c);
        else
          set_events(l, c);
      }
    }
  }
  return NULL;
}

static int open_listener(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&listen_addr, sizeof listen_addr) != 0 ||
      listen(fd, 4096) != 0) {
    perror("qim-bench-ws_echo: listen");
    exit(1);
  }
  if (listen_addr.sin_port == 0) { /* the first listener fixes the port for the others */
    socklen_t sl = sizeof listen_addr;
    getsockname(fd, (struct sockaddr *)&listen_addr, &sl);
  }
  return fd;
}

static int parse_args(int argc, char **argv, int *threads, double *duration) {
  listen_addr.sin_family = AF_INET;
  listen_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 1; i < argc; i += 2) { /* every option takes a value */
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--listen") == 0 && v) {
      char host[64];
      unsigned port;
      if (sscanf(v, "%63[^:]:%u", host, &port) != 2 || port > 65535 ||
          inet_pton(AF_INET, host, &listen_addr.sin_addr) != 1 ||
          (ntohl(listen_addr.sin_addr.s_addr) >> 24) != 127)
        return -1; /* loopback only */
      listen_addr.sin_port = htons((uint16_t)port);
    } else if (strcmp(argv[i], "--threads") == 0 && v) {
      *threads = atoi(v);
      if (*threads < 1 || *threads > MAX_THREADS) return -1;
    } else if (strcmp(argv[i], "--duration") == 0 && v) {
      *duration = atof(v);
      if (!(*duration > 0 && *duration <= 3600)) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  int threads = 1;
  double duration = 600;
  if (parse_args(argc, argv, &threads, &duration)) {
    fprintf(stderr,
            "Usage: qim-bench-ws_echo [--listen 127.x.x.x:PORT] [--threads 1-%d] "
            "[--duration S<=3600]\n",
            MAX_THREADS);
    return 2;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  deadline_s = now_s() + duration;
  static loop loops[MAX_THREADS];
  for (int t = 0; t < threads; t++) {
    loops[t].lfd = open_listener();
    loops[t].ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(loops[t].ep, EPOLL_CTL_ADD, loops[t].lfd, &ev);
  }
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &listen_addr.sin_addr, host, sizeof host);
  printf("listening %s:%u\n", host, (unsigned)ntohs(listen_addr.sin_port));
  fflush(stdout);
  for (int t = 0; t < threads; t++) pthread_create(&loops[t].tid, NULL, run_loop, &loops[t]);
  uint64_t frames = 0, conns = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(loops[t].tid, NULL);
    frames += loops[t].frames;
    conns += loops[t].conns;
  }
  printf("echoed %llu frames on %llu connections\n", (unsigned long long)frames,
         (unsigned long long)conns);
  return 0;
}
