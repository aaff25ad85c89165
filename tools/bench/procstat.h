/*
 * procstat.h — what qim-bench reads from /proc: another process's CPU time and memory
 * (the server under test, --server-pid) and the kernel's socket accounting. Readers only;
 * nothing here writes or signals anything.
 */
#ifndef QIM_BENCH_PROCSTAT_H
#define QIM_BENCH_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

/* One sample of a process. */
typedef struct qim_proc_sample {
  double cpu_s;    /* user + system CPU seconds since the process started */
  uint64_t rss_kb; /* VmRSS */
  uint64_t hwm_kb; /* VmHWM: peak RSS */
  uint32_t threads;
  uint64_t write_bytes; /* /proc/<pid>/io write_bytes: what it sent to the disk (0 if unreadable) */
  double at_s; /* CLOCK_MONOTONIC when sampled */
} qim_proc_sample;

/* Samples /proc/<pid>/stat, status and io. 0, or -errno (-ENOENT: no such process). */
int qim_proc_sample_read(pid_t pid, qim_proc_sample *out);

/*
 * Parses the text of /proc/<pid>/stat (the comm field may contain spaces and ')') into
 * CPU seconds given `ticks_per_s`. 0, or -EINVAL when the text is not that format.
 */
int qim_proc_parse_stat(const char *text, double ticks_per_s, double *cpu_s);

/* Parses "Key:   123 kB" from a /proc status-style text; -ENOENT when absent. */
int qim_proc_parse_kb(const char *text, const char *key, uint64_t *kb);

/* CPU percent of one core used between two samples of the same process (0 if no time). */
double qim_proc_cpu_pct(const qim_proc_sample *a, const qim_proc_sample *b);

/* The CPU time of each thread of a process, so a run can name the thread that bounds it: a
 * single-threaded stage near 100 % of a core is the limit whatever the process total says. */
enum { QIM_PROC_MAX_THREADS = 256 };
typedef struct qim_proc_thread {
  pid_t tid;
  char name[16]; /* comm, as the kernel truncates it */
  double cpu_s;
} qim_proc_thread;
typedef struct qim_proc_threads {
  qim_proc_thread t[QIM_PROC_MAX_THREADS];
  uint32_t count; /* at most QIM_PROC_MAX_THREADS; the rest are left out */
  double at_s;    /* CLOCK_MONOTONIC when sampled */
} qim_proc_threads;

/* Samples /proc/<pid>/task/<tid>/stat of every thread. 0, or -errno. */
int qim_proc_threads_read(pid_t pid, qim_proc_threads *out);

/* Parses a thread's /proc stat text into its name and CPU seconds. 0, or -EINVAL. */
int qim_proc_parse_thread(const char *text, double ticks_per_s, qim_proc_thread *out);

/* The thread that used the most CPU between two samples (matched by tid; a thread only in
 * b counts from zero): its name in *name and percent of one core in *pct. -ENOENT when b
 * has no thread or no time passed. */
int qim_proc_threads_busiest(const qim_proc_threads *a, const qim_proc_threads *b, const char **name,
                             double *pct);

/* MB/s the process wrote to the disk between two samples (0 if no time). */
double qim_proc_write_mb_s(const qim_proc_sample *a, const qim_proc_sample *b);

/* The whole machine's CPU time (the "cpu" line of /proc/stat, in clock ticks): how much of
 * every core a run left unused, for qimd and the load generator share the machine. */
typedef struct qim_machine_sample {
  uint64_t total; /* every field of the line */
  uint64_t idle;  /* idle + iowait: time no task wanted a CPU */
} qim_machine_sample;

/* Reads /proc/stat. 0, or -errno. */
int qim_machine_sample_read(qim_machine_sample *out);

/* Parses the first line of /proc/stat text ("cpu  user nice system idle iowait irq softirq
 * steal ..."). 0, or -EINVAL when it is not that line. */
int qim_machine_parse_stat(const char *text, qim_machine_sample *out);

/* Percent of all cores idle between two samples (-1 if no time was counted). */
double qim_machine_idle_pct(const qim_machine_sample *a, const qim_machine_sample *b);

/* The kernel's TCP socket accounting (/proc/net/sockstat) and slab total (/proc/meminfo). */
typedef struct qim_sock_sample {
  uint64_t tcp_inuse, tcp_alloc;
  uint64_t tcp_mem_pages; /* socket buffer pages charged to TCP */
  uint64_t slab_kb;       /* Slab: from /proc/meminfo (system-wide, so noisy) */
  uint64_t sunreclaim_kb; /* SUnreclaim: */
} qim_sock_sample;

/* Reads both files. 0, or -errno. */
int qim_sock_sample_read(qim_sock_sample *out);

/* Parses the "TCP:" line of /proc/net/sockstat text. 0, or -EINVAL. */
int qim_sock_parse_sockstat(const char *text, qim_sock_sample *out);

#endif /* QIM_BENCH_PROCSTAT_H */
