/*
 * sock_cost.c — the kernel's cost of an idle TCP socket on this machine (issue 10,
 * measurement 4's baseline): qim's user-space bytes per idle connection are read against
 * what the kernel itself spends per socket.
 *
 * It opens N loopback connections inside this process (a listener, N client sockets, N
 * accepted sockets), registers the accepted ones with an epoll set as a server would, and
 * reads the kernel's slab usage before and after: the sum of active objects × object size
 * over /proc/slabinfo (needs root; falls back to Slab: in /proc/meminfo), plus the TCP
 * socket-buffer pages of /proc/net/sockstat. The delta divided by 2N is the cost of one
 * idle socket with its file, inode, dentry and epoll entry; the five caches that grew most
 * are listed. Other processes allocate too, so the figure is the median of --rounds
 * rounds (each opens and closes the N connections).
 *
 * Usage: qim-bench-sock_cost [--conns N] [--rounds R]   (N <= 9000: two fds per
 *   connection stay below the ~20,000 fds a process has here; default 5000, R default 3)
 * Output: a human summary and one "RESULT scenario=sock_cost key=value ..." line.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 9000
#define MAX_CACHES 1024

typedef struct cache {
  char name[64];
  uint64_t bytes;
} cache;

typedef struct snap {
  cache c[MAX_CACHES];
  int n;
  uint64_t total; /* slab bytes */
  uint64_t tcp_mem_pages;
  int from_slabinfo;
} snap;

static int read_slabinfo(snap *s) {
  FILE *f = fopen("/proc/slabinfo", "re");
  if (!f) return -errno;
  char line[512];
  s->n = 0;
  s->total = 0;
  while (fgets(line, sizeof line, f)) {
    char name[64];
    unsigned long long active, num, size;
    if (sscanf(line, "%63s %llu %llu %llu", name, &active, &num, &size) != 4) continue;
    uint64_t b = active * size;
    s->total += b;
    if (s->n < MAX_CACHES) {
      snprintf(s->c[s->n].name, sizeof s->c[s->n].name, "%s", name);
      s->c[s->n++].bytes = b;
    }
  }
  fclose(f);
  return s->n ? 0 : -EINVAL;
}

static uint64_t meminfo_kb(const char *key) {
  FILE *f = fopen("/proc/meminfo", "re");
  char line[256];
  uint64_t v = 0;
  size_t k = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0 && line[k] == ':') v = strtoull(line + k + 1, NULL, 10);
  if (f) fclose(f);
  return v;
}

static uint64_t tcp_mem_pages(void) {
  FILE *f = fopen("/proc/net/sockstat", "re");
  char line[256];
  unsigned long long mem = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "TCP: inuse %*u orphan %*u tw %*u alloc %*u mem %llu", &mem) == 1) break;
  if (f) fclose(f);
  return mem;
}

static void take(snap *s) {
  s->from_slabinfo = read_slabinfo(s) == 0;
  if (!s->from_slabinfo) {
    s->n = 0;
    s->total = meminfo_kb("Slab") * 1024;
  }
  s->tcp_mem_pages = tcp_mem_pages();
}

/* Opens n connections to the listener; fills cli/srv and adds srv to ep. 0 or -errno. */
static int open_conns(int lfd, const struct sockaddr_in *addr, int ep, int *cli, int *srv, int n) {
  for (int i = 0; i < n; i++) {
    cli[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cli[i] < 0 || connect(cli[i], (const struct sockaddr *)addr, sizeof *addr) != 0)
      return -errno;
    srv[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (srv[i] < 0) return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = srv[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, srv[i], &ev) != 0) return -errno;
  }
  return 0;
}

static void close_all(int *cli, int *srv, int n) {
  for (int i = 0; i < n; i++) {
    if (cli[i] >= 0) close(cli[i]);
    if (srv[i] >= 0) close(srv[i]);
    cli[i] = srv[i] = -1;
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Prints the five caches that grew most between a and b. */
static void top_growth(const snap *a, const snap *b, int conns, char *kv, size_t cap) {
  int64_t best[5] = {0};
  int idx[5] = {-1, -1, -1, -1, -1};
  for (int i = 0; i < b->n; i++) {
    int64_t before = 0;
    for (int j = 0; j < a->n; j++)
      if (strcmp(a->c[j].name, b->c[i].name) == 0) before = (int64_t)a->c[j].bytes;
    int64_t d = (int64_t)b->c[i].bytes - before;
    for (int k = 0; k < 5; k++)
      if (d > best[k]) {
        memmove(best + k + 1, best + k, (size_t)(4 - k) * sizeof *best);
        memmove(idx + k + 1, idx + k, (size_t)(4 - k) * sizeof *idx);
        best[k] = d;
        idx[k] = i;
        break;
      }
  }
  size_t len = 0;
  printf("  caches that grew most (bytes per socket):");
  for (int k = 0; k < 5 && idx[k] >= 0; k++) {
    double per = (double)best[k] / (2.0 * conns);
    printf(" %s %.0f", b->c[idx[k]].name, per);
    int n = snprintf(kv + len, cap - len, "%s%s:%.0f", k ? "," : "", b->c[idx[k]].name, per);
    if (n > 0 && (size_t)n < cap - len) len += (size_t)n;
  }
  printf("\n");
}

int main(int argc, char **argv) {
  int conns = 5000, rounds = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
      conns = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "Usage: qim-bench-sock_cost [--conns N<=%d] [--rounds R<=20]\n", MAX_CONNS);
      return 2;
    }
  }
  if (conns < 1 || conns > MAX_CONNS || rounds < 1 || rounds > 20) {
    fprintf(stderr, "qim-bench-sock_cost: need 1 <= --conns <= %d, 1 <= --rounds <= 20\n",
            MAX_CONNS);
    return 2;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof addr;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(lfd, 4096) != 0 ||
      getsockname(lfd, (struct sockaddr *)&addr, &sl) != 0) {
    perror("qim-bench-sock_cost: listener");
    return 1;
  }
  int *cli = malloc((size_t)conns * sizeof *cli), *srv = malloc((size_t)conns * sizeof *srv);
  static snap before, after;
  int64_t *per = malloc((size_t)rounds * sizeof *per);
  if (!cli || !srv || !per) abort();
  for (int i = 0; i < conns; i++) cli[i] = srv[i] = -1;
  int64_t tcp_pages = 0;
  char top[512] = "";
  for (int r = 0; r < rounds; r++) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    take(&before);
    int rc = open_conns(lfd, &addr, ep, cli, srv, conns);
    if (rc) {
      fprintf(stderr, "qim-bench-sock_cost: after %d rounds: %s\n", r, strerror(-rc));
      return 1;
    }
    struct timespec pause = {0, 200 * 1000 * 1000}; /* let deferred frees settle */
    nanosleep(&pause, NULL);
    take(&after);
    per[r] = ((int64_t)after.total - (int64_t)before.total) / (2 * (int64_t)conns);
    tcp_pages = (int64_t)after.tcp_mem_pages - (int64_t)before.tcp_mem_pages;
    if (r == rounds - 1 && after.from_slabinfo) top_growth(&before, &after, conns, top, sizeof top);
    close_all(cli, srv, conns);
    close(ep);
    nanosleep(&pause, NULL);
  }
  qsort(per, (size_t)rounds, sizeof *per, cmp_i64);
  int64_t median = per[rounds / 2];
  printf(
      "kernel cost of an idle loopback TCP socket (file, inode, dentry, epoll entry): "
      "%lld bytes (median of %d rounds of %d connections = %d sockets; source %s; "
      "socket buffer pages held %+lld)\n",
      (long long)median, rounds, conns, 2 * conns,
      after.from_slabinfo ? "/proc/slabinfo" : "Slab: in /proc/meminfo", (long long)tcp_pages);
  printf(
      "RESULT scenario=sock_cost conns=%d sockets=%d rounds=%d bytes_per_socket=%lld "
      "bytes_per_socket_min=%lld bytes_per_socket_max=%lld tcp_mem_pages_delta=%lld source=%s "
      "top=%s status=ok\n",
      conns, 2 * conns, rounds, (long long)median, (long long)per[0], (long long)per[rounds - 1],
      (long long)tcp_pages, after.from_slabinfo ? "slabinfo" : "meminfo", top[0] ? top : "-");
  free(cli);
  free(srv);
  free(per);
  close(lfd);
  return 0;
}
