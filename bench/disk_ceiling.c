/*
 * disk_ceiling.c — the disk's ceiling for durable message commits (issue 10, measurement
 * 1): 300-byte appends to one file with one fdatasync per 1,000 of them, the cheapest
 * durable log a message store could write (no index, no checksum, no transaction). The
 * commit benchmarks report their figure against this; it is a ceiling, not a like-for-like
 * comparison. Also reports the fdatasync latency the batch pays, and, for context, the
 * same appends with one fdatasync each (--batch 1 alone gives that as the main figure),
 * and the disk's write bandwidth: 1 MiB writes with one fdatasync per 64 MiB, the figure
 * a store writing megabytes per message (a large group's mailbox entries) runs into.
 *
 * And the disk's own sync stalls under a WAL's pattern (`wal_*`): 4 KiB pages at
 * --wal-mbps (150 MB/s: qimd's WAL at ~2,500 one-to-one msgs/s) into a 64 MiB file that
 * starts over at its end, as a WAL does, with an fdatasync after each millisecond of
 * pages (a group commit), for --wal-seconds. A durable ack waits for at least one such
 * sync, so the slowest of them bounds what any store's p99 can be on this disk
 * (bench/README.md, section 2).
 *
 * Usage: qim-bench-disk_ceiling [DIR] [--seconds S] [--batch N] [--record BYTES]
 *                               [--wal-seconds S] [--wal-mbps M]
 *   DIR must be on the disk under test (default $TMPDIR or /tmp; never tmpfs if you want a
 *   disk figure). The file is created there and removed at the end. Every loop is bounded
 *   by --seconds (default 3, at most 600) and by 100 million records.
 * Output: a human summary and one "RESULT scenario=disk_ceiling key=value ..." line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define MAX_RECORDS 100000000ull
#define BANDWIDTH_RECORD (1u << 20)
#define BANDWIDTH_BATCH 64u
#define BANDWIDTH_SECONDS 2.0
#define TMPFS_MAGIC 0x01021994
#define WAL_PAGE 4096u
#define WAL_FILE_BYTES (64ull << 20)
#define WAL_SYNC_EVERY_S 0.001
#define WAL_STALL_MS 50.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct result {
  uint64_t records, syncs, stalls;
  double secs, sync_p50_ms, sync_p99_ms, sync_max_ms;
} result;

/* Sorts the sync latencies and fills the percentiles and the count over WAL_STALL_MS. */
static void summarize(double *lat, result *r) {
  qsort(lat, r->syncs, sizeof *lat, cmp_double);
  if (!r->syncs) return;
  r->sync_p50_ms = lat[(r->syncs - 1) / 2];
  r->sync_p99_ms = lat[(size_t)((double)(r->syncs - 1) * 0.99)];
  r->sync_max_ms = lat[r->syncs - 1];
  for (uint64_t i = 0; i < r->syncs; i++) r->stalls += lat[i] > WAL_STALL_MS;
}

/* One fdatasync, its latency recorded in lat[r->syncs++]; *end_s = when it returned. */
static int timed_sync(int fd, double *lat, result *r, double *end_s) {
  double s0 = now_s();
  if (fdatasync(fd) != 0) return -errno;
  *end_s = now_s();
  lat[r->syncs++] = (*end_s - s0) * 1000.0;
  return 0;
}

/* Appends `rec` bytes records for `seconds`, fdatasync every `batch`; -errno on failure. */
static int run(const char *dir, double seconds, unsigned batch, size_t rec, result *r) {
  char path[4096];
  snprintf(path, sizeof path, "%s/qim-disk-ceiling.XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) return -errno;
  unlink(path); /* gone when closed, whatever happens */
  char *buf = malloc(rec);
  size_t max_syncs = (size_t)(seconds * 200000) + 16;
  double *lat = malloc(max_syncs * sizeof *lat);
  if (!buf || !lat) abort();
  memset(buf, 'm', rec);
  memset(r, 0, sizeof *r);
  int rc = 0;
  double t0 = now_s(), end = t0 + seconds;
  while (r->records < MAX_RECORDS && r->syncs < max_syncs) {
    for (unsigned i = 0; i < batch; i++, r->records++) {
      buf[0] = (char)r->records; /* not all-identical pages */
      if (write(fd, buf, rec) != (ssize_t)rec) {
        rc = -errno;
        goto out;
      }
    }
    double s1;
    if ((rc = timed_sync(fd, lat, r, &s1))) goto out;
    if (s1 >= end) break;
  }
  r->secs = now_s() - t0;
  summarize(lat, r);
out:
  close(fd);
  free(buf);
  free(lat);
  return rc;
}

/* The WAL pattern: pages paced at `mbps`, a sync after each WAL_SYNC_EVERY_S of them, the
 * file started over at WAL_FILE_BYTES; r->records counts pages. -errno on failure. */
static int run_wal(const char *dir, double seconds, double mbps, result *r) {
  char path[4096];
  snprintf(path, sizeof path, "%s/qim-disk-wal.XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) return -errno;
  unlink(path);
  char *page = malloc(WAL_PAGE);
  size_t max_syncs = (size_t)(seconds / WAL_SYNC_EVERY_S) + 16;
  double *lat = malloc(max_syncs * sizeof *lat);
  if (!page || !lat) abort();
  memset(page, 'w', WAL_PAGE);
  memset(r, 0, sizeof *r);
  int rc = 0;
  uint64_t off = 0;
  double t0 = now_s(), end = t0 + seconds;
  while (r->syncs < max_syncs) {
    double due = (now_s() - t0) * mbps * 1e6; /* bytes owed by now */
    for (; (double)(r->records * WAL_PAGE) < due && r->records < MAX_RECORDS; r->records++) {
      page[0] = (char)r->records;
      if (pwrite(fd, page, WAL_PAGE, (off_t)off) != (ssize_t)WAL_PAGE) {
        rc = -errno;
        goto out;
      }
      off = off + WAL_PAGE < WAL_FILE_BYTES ? off + WAL_PAGE : 0;
    }
    double s1;
    if ((rc = timed_sync(fd, lat, r, &s1))) goto out;
    if (s1 >= end) break;
    double wait = WAL_SYNC_EVERY_S - lat[r->syncs - 1] / 1000.0;
    if (wait > 0) usleep((useconds_t)(wait * 1e6));
  }
  r->secs = now_s() - t0;
  summarize(lat, r);
out:
  close(fd);
  free(page);
  free(lat);
  return rc;
}

int main(int argc, char **argv) {
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  double seconds = 3, wal_seconds = 10, wal_mbps = 150;
  unsigned batch = 1000;
  size_t rec = 300;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--seconds") == 0 && v) {
      seconds = atof(v);
      i++;
    } else if (strcmp(argv[i], "--batch") == 0 && v) {
      batch = (unsigned)atoi(v);
      i++;
    } else if (strcmp(argv[i], "--record") == 0 && v) {
      rec = (size_t)atoi(v);
      i++;
    } else if (strcmp(argv[i], "--wal-seconds") == 0 && v) {
      wal_seconds = atof(v);
      i++;
    } else if (strcmp(argv[i], "--wal-mbps") == 0 && v) {
      wal_mbps = atof(v);
      i++;
    } else if (argv[i][0] != '-') {
      dir = argv[i];
    } else {
      fprintf(stderr,
              "Usage: qim-bench-disk_ceiling [DIR] [--seconds S] [--batch N] [--record B]"
              " [--wal-seconds S] [--wal-mbps M]\n");
      return 2;
    }
  }
  if (!(seconds > 0 && seconds <= 600) || batch < 1 || batch > 1000000 || rec < 1 ||
      rec > 1 << 20 || !(wal_seconds >= 0 && wal_seconds <= 600) ||
      !(wal_mbps > 0 && wal_mbps <= 10000)) {
    fprintf(stderr,
            "qim-bench-disk_ceiling: need 0 < --seconds <= 600, 1 <= --batch <= 1e6, "
            "1 <= --record <= 1 MiB, 0 <= --wal-seconds <= 600, 0 < --wal-mbps <= 10000\n");
    return 2;
  }
  struct statfs fs;
  int tmpfs = statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  result main_r, one_r = {0}, bw_r = {0}, wal_r = {0};
  int rc = run(dir, seconds, batch, rec, &main_r);
  /* Context: the same appends made durable one at a time (a short run suffices). */
  if (rc == 0 && batch != 1) rc = run(dir, seconds < 1 ? seconds : 1, 1, rec, &one_r);
  if (rc == 0) rc = run(dir, BANDWIDTH_SECONDS, BANDWIDTH_BATCH, BANDWIDTH_RECORD, &bw_r);
  if (rc == 0 && wal_seconds > 0) rc = run_wal(dir, wal_seconds, wal_mbps, &wal_r);
  if (rc) {
    fprintf(stderr, "qim-bench-disk_ceiling: %s: %s\n", dir, strerror(-rc));
    return 1;
  }
  double per_s = (double)main_r.records / main_r.secs;
  printf(
      "disk ceiling in %s%s: %.0f durable %zu-byte appends/s (fdatasync every %u: "
      "p50 %.2f ms, p99 %.2f ms, max %.2f ms over %llu syncs; %.1f MB/s)\n",
      dir, tmpfs ? " (tmpfs! not a disk)" : "", per_s, rec, batch, main_r.sync_p50_ms,
      main_r.sync_p99_ms, main_r.sync_max_ms, (unsigned long long)main_r.syncs,
      per_s * (double)rec / 1e6);
  if (batch != 1)
    printf("  one fdatasync per append: %.0f appends/s (fdatasync p50 %.2f ms, p99 %.2f ms)\n",
           (double)one_r.records / one_r.secs, one_r.sync_p50_ms, one_r.sync_p99_ms);
  double bw_mb_s = (double)bw_r.records * BANDWIDTH_RECORD / bw_r.secs / 1e6;
  printf("  write bandwidth: %.0f MB/s (1 MiB writes, fdatasync every %u MiB)\n", bw_mb_s, BANDWIDTH_BATCH);
  double wal_mb_s = wal_r.secs > 0 ? (double)wal_r.records * WAL_PAGE / wal_r.secs / 1e6 : 0;
  if (wal_r.syncs)
    printf("  WAL pattern: %.0f MB/s of 4 KiB pages, a sync per ms, %.0f s: sync p50 %.2f ms, "
           "p99 %.2f ms, max %.2f ms, %llu of %llu syncs over %.0f ms\n",
           wal_mb_s, wal_r.secs, wal_r.sync_p50_ms, wal_r.sync_p99_ms, wal_r.sync_max_ms,
           (unsigned long long)wal_r.stalls, (unsigned long long)wal_r.syncs, WAL_STALL_MS);
  printf(
      "RESULT scenario=disk_ceiling dir=%s tmpfs=%d record_bytes=%zu batch=%u seconds=%.2f "
      "records=%llu appends_per_s=%.0f mb_per_s=%.2f sync_p50_ms=%.3f sync_p99_ms=%.3f "
      "sync_max_ms=%.3f single_appends_per_s=%.0f single_sync_p50_ms=%.3f write_mb_per_s=%.0f "
      "wal_seconds=%.2f wal_mb_per_s=%.1f wal_syncs=%llu wal_sync_p50_ms=%.3f wal_sync_p99_ms=%.3f "
      "wal_sync_max_ms=%.3f wal_syncs_over_50ms=%llu status=ok\n",
      dir, tmpfs, rec, batch, main_r.secs, (unsigned long long)main_r.records, per_s,
      per_s * (double)rec / 1e6, main_r.sync_p50_ms, main_r.sync_p99_ms, main_r.sync_max_ms,
      batch != 1 ? (double)one_r.records / one_r.secs : per_s,
      batch != 1 ? one_r.sync_p50_ms : main_r.sync_p50_ms, bw_mb_s, wal_r.secs, wal_mb_s,
      (unsigned long long)wal_r.syncs, wal_r.sync_p50_ms, wal_r.sync_p99_ms, wal_r.sync_max_ms,
      (unsigned long long)wal_r.stalls);
  return 0;
}
