/*
 * procstat.c — /proc readers for qim-bench (see procstat.h).
 */
#include "procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Reads a small /proc file into buf (NUL-terminated). Returns 0 or -errno. */
static int slurp(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = '\0';
  return 0;
}

int qim_proc_parse_stat(const char *text, double ticks_per_s, double *cpu_s) {
  /* Fields after "pid (comm)": state is field 3; utime and stime are fields 14 and 15. */
  const char *p = strrchr(text, ')');
  if (!p || ticks_per_s <= 0) return -EINVAL;
  p++;
  unsigned long long ut = 0, st = 0;
  if (sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -EINVAL;
  *cpu_s = (double)(ut + st) / ticks_per_s;
  return 0;
}

int qim_proc_parse_kb(const char *text, const char *key, uint64_t *kb) {
  size_t klen = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, klen) == 0 && p[klen] == ':') {
      *kb = strtoull(p + klen + 1, NULL, 10);
      return 0;
    }
  }
  return -ENOENT;
}

int qim_proc_sample_read(pid_t pid, qim_proc_sample *out) {
  char path[64], buf[4096];
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  out->at_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int rc = slurp(path, buf, sizeof buf);
  if (rc) return rc;
  if (qim_proc_parse_stat(buf, (double)sysconf(_SC_CLK_TCK), &out->cpu_s)) return -EINVAL;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  if ((rc = slurp(path, buf, sizeof buf))) return rc;
  uint64_t threads = 0;
  if (qim_proc_parse_kb(buf, "VmRSS", &out->rss_kb) ||
      qim_proc_parse_kb(buf, "VmHWM", &out->hwm_kb))
    return -EINVAL;
  qim_proc_parse_kb(buf, "Threads", &threads); /* a count, same "Key: n" shape */
  out->threads = (uint32_t)threads;
  /* Bytes, same shape; another user's process hides it (then 0: the figure is left out). */
  snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
  out->write_bytes = 0;
  if (slurp(path, buf, sizeof buf) == 0) qim_proc_parse_kb(buf, "write_bytes", &out->write_bytes);
  return 0;
}

double qim_proc_cpu_pct(const qim_proc_sample *a, const qim_proc_sample *b) {
  double wall = b->at_s - a->at_s;
  return wall > 0 ? 100.0 * (b->cpu_s - a->cpu_s) / wall : 0.0;
}

double qim_proc_write_mb_s(const qim_proc_sample *a, const qim_proc_sample *b) {
  double wall = b->at_s - a->at_s;
  return wall > 0 && b->write_bytes >= a->write_bytes ? (double)(b->write_bytes - a->write_bytes) / wall / 1e6 : 0.0;
}

int qim_sock_parse_sockstat(const char *text, qim_sock_sample *out) {
  const char *p = strstr(text, "\nTCP: ");
  if (!p && strncmp(text, "TCP: ", 5) == 0) p = text - 1;
  if (!p) return -EINVAL;
  unsigned long long inuse, orphan, tw, alloc, mem;
  if (sscanf(p + 1, "TCP: inuse %llu orphan %llu tw %llu alloc %llu mem %llu", &inuse, &orphan, &tw,
             &alloc, &mem) != 5)
    return -EINVAL;
  out->tcp_inuse = inuse;
  out->tcp_alloc = alloc;
  out->tcp_mem_pages = mem;
  return 0;
}

int qim_sock_sample_read(qim_sock_sample *out) {
  char buf[8192];
  memset(out, 0, sizeof *out);
  int rc = slurp("/proc/net/sockstat", buf, sizeof buf);
  if (rc) return rc;
  if (qim_sock_parse_sockstat(buf, out)) return -EINVAL;
  if ((rc = slurp("/proc/meminfo", buf, sizeof buf))) return rc;
  if (qim_proc_parse_kb(buf, "Slab", &out->slab_kb) ||
      qim_proc_parse_kb(buf, "SUnreclaim", &out->sunreclaim_kb))
    return -EINVAL;
  return 0;
}
