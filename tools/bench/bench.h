/*
 * bench.h — what the parts of qim-bench share: the options, the run (loop, target,
 * counters, report), the Tinode client session on top of a connection, the bounded
 * pacer used for setup steps, and the scenario entry points.
 *
 * Everything runs on one libuv loop in one thread; nothing here is thread-safe.
 */
#ifndef QIM_BENCH_BENCH_H
#define QIM_BENCH_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "conn.h"
#include "hist.h"
#include "procstat.h"
#include "tframe.h"

/* One process stays below this many client sockets (the machine allows ~20,000 fds). */
#define QIM_BENCH_MAX_CONNS 18000
/* Connections per source address: 127.0.0.(2 + i / QIM_BENCH_CONNS_PER_SOURCE). */
#define QIM_BENCH_CONNS_PER_SOURCE 20000
/* Hard caps on time, whatever the flags say. */
#define QIM_BENCH_MAX_SECONDS 3600.0

typedef struct qim_bench_opts {
  const char *scenario;
  char host[64]; /* "127.0.0.1" */
  uint16_t port;
  const char *apikey;
  pid_t server_pid; /* 0: not sampled */
  double duration_s, warmup_s, drain_s, setup_timeout_s;
  uint64_t max_messages;
  const char *accounts_file;
  uint32_t users; /* p2p: users (pairs = users/2); idle: connections */
  double rate;    /* p2p/group: total target pubs/s */
  uint32_t group_size, senders, groups;
  bool via_usr;         /* p2p over usr<peer> topics (default) instead of 2-member groups */
  size_t content_size;  /* bytes of each pub's content */
  uint32_t concurrency; /* setup steps in flight */
  uint32_t window;      /* echo: frames in flight per connection */
  bool probe;           /* echo: send the Tinode probe "1" and expect "0" */
  uint32_t count;       /* accounts: how many */
  const char *prefix, *password;
  uint32_t first; /* accounts: first index */
  const char *label;
  const char *topic; /* history: the group to page through */
  bool quiet;
} qim_bench_opts;

/* An account from the accounts file. Strings owned by the run. */
typedef struct qim_bench_account {
  char *login, *uid, *token;
} qim_bench_account;

typedef struct qim_bench_run {
  uv_loop_t *loop;
  const qim_bench_opts *o;
  qim_bench_target target;
  uint64_t t0_us; /* when the run started */
  /* What went wrong, by kind. */
  uint64_t ctrl_codes[1000]; /* every {ctrl} code >= 300 received */
  uint64_t ends[8];          /* connection ends by qim_bench_end, besides local closes */
  uint64_t bad_frames;       /* server frames qim-bench could not read */
  uint64_t start_failures;   /* connections that could not even start */
  uint64_t wrong_replies;    /* replies a scenario checked and found wrong (counted as errors) */
  uint64_t last_rx_us;       /* when any connection last received a frame */
  /* The server under test, sampled at the start and end of the measured window. */
  qim_proc_sample srv_a, srv_b;
  qim_proc_threads *srv_ta, *srv_tb; /* the server's threads at both marks (with srv_ok) */
  bool srv_ok, marked_start, marked_end;
  double self_cpu_a;
  double self_cpu_pct;
  qim_machine_sample machine_a, machine_b; /* the whole machine at both marks */
  bool machine_ok;
  /* The report line. */
  char kv[16384];
  size_t kv_len;
  uv_timer_t watchdog;
  const char *watchdog_why;
  const char *failure; /* why the run gave up, or NULL */
  /* Called once when the run fails, to close everything (and report); NULL: stop the loop. */
  void (*on_fail)(void *ud);
  void *fail_ud;
} qim_bench_run;

/* CLOCK_MONOTONIC in µs. */
uint64_t qim_bench_now_us(void);

/* The source address of connection `i`: 127.0.0.(2 + i / 20000), port 0. */
void qim_bench_source(uint32_t i, struct sockaddr_in *out);

/*
 * Reads the accounts file: one "login uid token" line per account, '#' comments.
 * 0 with *out (owned by the caller: qim_bench_accounts_free) and *n; -errno when the file
 * cannot be read; -EINVAL with the line number in *n for a malformed line.
 */
int qim_bench_accounts_load(const char *path, qim_bench_account **out, size_t *n);
void qim_bench_accounts_free(qim_bench_account *a, size_t n);

/* Sets up the run (loop, target); 0 or -errno. */
int qim_bench_run_init(qim_bench_run *r, const qim_bench_opts *o);
/* Runs the loop until every handle is closed; returns 0 if the run did not fail. */
int qim_bench_run_loop(qim_bench_run *r);
/* Gives up: records `why` (a static string, the first one wins) and calls on_fail once, or
 * stops the loop when there is none. */
void qim_bench_run_fail(qim_bench_run *r, const char *why);
/* Arms the watchdog: the run fails with `why` after `seconds` unless re-armed or stopped. */
void qim_bench_run_watchdog(qim_bench_run *r, double seconds, const char *why);
void qim_bench_run_watchdog_stop(qim_bench_run *r);
/* Samples the server and this process at the start / end of the measured window (the
 * report takes the end sample itself if the run ended before mark_end). */
void qim_bench_run_mark_start(qim_bench_run *r);
void qim_bench_run_mark_end(qim_bench_run *r);
/* Counts a connection end that was not a local close. */
void qim_bench_run_count_end(qim_bench_run *r, qim_bench_end why);
void qim_bench_run_free(qim_bench_run *r);

/* Appends key=value to the report line (the value printf-formatted, no spaces please). */
void qim_bench_kv(qim_bench_run *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends the latency percentiles of `h` as <prefix>_p50_ms … _max_ms and _n. */
void qim_bench_kv_hist(qim_bench_run *r, const char *prefix, const qim_hist *h);
/* Appends the error counts, server and client CPU/RSS; then prints `human` and the line. */
void qim_bench_report(qim_bench_run *r, const char *human);
/* Sum of ctrl codes >= 400 and of wrong replies. */
uint64_t qim_bench_errors(const qim_bench_run *r);

/* ---- Tinode session: connect, {hi}, {login token}, then the scenario's frames ---------------- */

typedef struct qim_bench_client qim_bench_client;

typedef struct qim_bench_client_cbs {
  void (*on_ready)(qim_bench_client *c);  /* logged in */
  void (*on_failed)(qim_bench_client *c); /* ended before ready (counted by the run) */
  /* A {ctrl} whose id is not one of the session's own (h…, l…): the scenario's. */
  void (*on_ctrl)(qim_bench_client *c, const qim_tframe_msg *m);
  void (*on_data)(qim_bench_client *c, const qim_tframe_msg *m);
  void (*on_closed)(qim_bench_client *c); /* ended after ready */
} qim_bench_client_cbs;

enum {
  QIM_BENCH_CLIENT_NEW = 0,
  QIM_BENCH_CLIENT_CONNECTING,
  QIM_BENCH_CLIENT_HI,
  QIM_BENCH_CLIENT_LOGIN,
  QIM_BENCH_CLIENT_READY,
  QIM_BENCH_CLIENT_ENDED,
};

struct qim_bench_client {
  qim_bench_conn conn;
  qim_bench_run *run;
  const qim_bench_client_cbs *cbs;
  const qim_bench_account *acct; /* NULL: stop after {hi} (the accounts scenario) */
  void *ud;
  uint32_t index;
  uint8_t state;
  bool ever_ready;
};

/*
 * Connects client `index` (from its source address), says {hi} and logs in with the
 * account's token. Returns 0 and later calls on_ready or on_failed; or -errno (counted).
 */
int qim_bench_client_start(qim_bench_client *c, qim_bench_run *r, uint32_t index,
                           const qim_bench_account *a, const qim_bench_client_cbs *cbs, void *ud);
/* Sends a frame built by tframe.h. 0 or a negative uv error. */
int qim_bench_client_send(qim_bench_client *c, const char *frame, int len);
/* Closes; on_closed or on_failed follows unless it already ended. */
void qim_bench_client_close(qim_bench_client *c);

/* ---- bounded setup steps --------------------------------------------------------------------- */

/*
 * Runs `total` steps with at most `limit` in flight: issue(ud, i) starts step i and returns
 * 0, or non-zero when it failed at once; each started step reports back with
 * qim_bench_pacer_done. on_all runs once every step has finished.
 */
typedef struct qim_bench_pacer {
  size_t total, next, inflight, done, failed;
  uint32_t limit;
  int (*issue)(void *ud, size_t i);
  void (*on_all)(void *ud);
  void *ud;
  bool finished;
} qim_bench_pacer;

void qim_bench_pacer_start(qim_bench_pacer *p, size_t total, uint32_t limit,
                           int (*issue)(void *, size_t), void (*on_all)(void *), void *ud);
void qim_bench_pacer_done(qim_bench_pacer *p, bool ok);

/* ---- scenarios (each returns the process exit status) ---------------------------------------- */

int qim_bench_accounts(const qim_bench_opts *o);
int qim_bench_chat(const qim_bench_opts *o); /* p2p and group */
int qim_bench_idle(const qim_bench_opts *o);
int qim_bench_echo(const qim_bench_opts *o);
int qim_bench_history(const qim_bench_opts *o);

#endif /* QIM_BENCH_BENCH_H */
