/*
 * procstat.c — /proc readers for qim-bench (see procstat.h).
 */
#include "procstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC in seconds: when a sample was taken. */
static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

int qim_proc_parse_thread(const char *text, double ticks_per_s, qim_proc_thread *out) {
  const char *open = strchr(text, '('), *close = strrchr(text, ')');
  if (!open || !close || close < open) return -EINVAL;
  int rc = qim_proc_parse_stat(text, ticks_per_s, &out->cpu_s);
  if (rc) return rc;
  size_t n = (size_t)(close - open - 1);
  if (n >= sizeof out->name) n = sizeof out->name - 1;
  memcpy(out->name, open + 1, n);
  out->name[n] = '\0';
  out->tid = (pid_t)strtol(text, NULL, 10);
  return 0;
}

int qim_proc_threads_read(pid_t pid, qim_proc_threads *out) {
  char path[64], buf[1024];
  out->at_s = mono_s();
  out->count = 0;
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -errno;
  double ticks = (double)sysconf(_SC_CLK_TCK);
  struct dirent *e;
  while (out->count < QIM_PROC_MAX_THREADS && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%d/task/%.16s/stat", (int)pid, e->d_name);
    /* A thread that exited since readdir is simply not in the sample. */
    if (slurp(path, buf, sizeof buf) == 0 && qim_proc_parse_thread(buf, ticks, &out->t[out->count]) == 0)
      out->count++;
  }
  closedir(d);
  return 0;
}

int qim_proc_threads_busiest(const qim_proc_threads *a, const qim_proc_threads *b, const char **name,
                             double *pct) {
  double wall = b->at_s - a->at_s, best = -1;
  if (wall <= 0 || !b->count) return -ENOENT;
  for (uint32_t i = 0; i < b->count; i++) {
    double before = 0;
    for (uint32_t k = 0; k < a->count; k++)
      if (a->t[k].tid == b->t[i].tid) before = a->t[k].cpu_s;
    double used = b->t[i].cpu_s - before;
    if (used > best) best = used, *name = b->t[i].name;
  }
  *pct = 100.0 * best / wall;
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
  out->at_s = mono_s();
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

int qim_machine_parse_stat(const char *text, qim_machine_sample *out) {
  if (strncmp(text, "cpu ", 4) != 0) return -EINVAL;
  /* user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
   * in user and nice, so those two are not added again. */
  unsigned long long v[8] = {0};
  int n = sscanf(text + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  if (n < 4) return -EINVAL;
  *out = (qim_machine_sample){0};
  for (int i = 0; i < n; i++) out->total += v[i];
  out->idle = v[3] + v[4];
  return 0;
}

int qim_machine_sample_read(qim_machine_sample *out) {
  char buf[512]; /* the first line is all that is parsed */
  int rc = slurp("/proc/stat", buf, sizeof buf);
  return rc ? rc : qim_machine_parse_stat(buf, out);
}

double qim_machine_idle_pct(const qim_machine_sample *a, const qim_machine_sample *b) {
  if (b->total <= a->total || b->idle < a->idle) return -1;
  return 100.0 * (double)(b->idle - a->idle) / (double)(b->total - a->total);
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
