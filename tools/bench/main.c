/*
 * main.c — qim-bench, the load generator of qim's benchmarks (issue 10): command line,
 * the loopback-only rule, and dispatch to a scenario. The usage text below is the manual;
 * bench/README.md describes how the harness uses it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

static const char usage[] =
    "Usage: qim-bench SCENARIO [options]\n"
    "Scenarios:\n"
    "  accounts  create --count accounts (acc+login), write 'login uid token' lines to --accounts\n"
    "  p2p       --users N in N/2 pairs, both sides publishing; total --rate msgs/s\n"
    "  group     --groups K of --group-size G, --senders S per group; total --rate msgs/s\n"
    "  idle      --users N logged-in idle connections held for --duration s\n"
    "  echo      --users C raw WebSocket connections, --window frames in flight each\n"
    "            (against bench/ws_echo; with --probe against qimd's '1' -> '0' probe)\n"
    "  history   --users N clients page through group --topic with get data before=<random>\n"
    "            limit=50, one page in flight each; checks every page (qim-seed --messages)\n"
    "Common options:\n"
    "  --server HOST:PORT    target, loopback only (127.x.x.x); default 127.0.0.1:6060\n"
    "  --apikey KEY          default: Tinode's demo key\n"
    "  --server-pid PID      sample the server's CPU and RSS from /proc\n"
    "  --accounts FILE       accounts file (default bench-accounts.txt)\n"
    "  --duration S          measured seconds (default 10; idle: hold time)\n"
    "  --warmup S            unmeasured seconds before (default 1)\n"
    "  --drain S             most seconds to wait for last deliveries (default 3)\n"
    "  --setup-timeout S     most seconds for connecting/joining (default 120; accounts 600)\n"
    "  --max-messages N      stop sending after N messages (default 10000000)\n"
    "  --concurrency N       setup steps in flight (default 64; accounts 4)\n"
    "  --label TEXT          copied into the RESULT line\n"
    "  --quiet               only the RESULT line\n"
    "p2p / group:\n"
    "  --users N  --rate R  --size BYTES (content, default 140)\n"
    "  --via usr|group       p2p pairs as one-to-one usr<peer> topics (default) or as\n"
    "                        2-member groups (the earlier shape, for comparison)\n"
    "  --groups K  --group-size G  --senders S\n"
    "accounts:\n"
    "  --count N  --prefix P (default 'bench')  --password W (default 'bench-password')\n"
    "  --first I (first index, default 0)\n"
    "echo: --users C  --window W (default 16)  --size BYTES  --probe\n"
    "history: --users N  --topic grp…\n"
    "Output: a human summary, then one line 'RESULT scenario=… key=value …'.\n"
    "Exit status: 0 ok, 1 the run failed (see RESULT status), 2 bad usage.\n";

enum {
  O_SERVER = 256,
  O_APIKEY,
  O_PID,
  O_ACCOUNTS,
  O_DURATION,
  O_WARMUP,
  O_DRAIN,
  O_SETUP,
  O_MAXMSG,
  O_CONC,
  O_LABEL,
  O_QUIET,
  O_USERS,
  O_RATE,
  O_SIZE,
  O_VIA,
  O_GROUPS,
  O_GSIZE,
  O_SENDERS,
  O_COUNT,
  O_PREFIX,
  O_PASSWORD,
  O_FIRST,
  O_WINDOW,
  O_PROBE,
  O_TOPIC,
  O_HELP
};

static const struct option longopts[] = {{"server", 1, 0, O_SERVER},
                                         {"apikey", 1, 0, O_APIKEY},
                                         {"server-pid", 1, 0, O_PID},
                                         {"accounts", 1, 0, O_ACCOUNTS},
                                         {"duration", 1, 0, O_DURATION},
                                         {"warmup", 1, 0, O_WARMUP},
                                         {"drain", 1, 0, O_DRAIN},
                                         {"setup-timeout", 1, 0, O_SETUP},
                                         {"max-messages", 1, 0, O_MAXMSG},
                                         {"concurrency", 1, 0, O_CONC},
                                         {"label", 1, 0, O_LABEL},
                                         {"quiet", 0, 0, O_QUIET},
                                         {"users", 1, 0, O_USERS},
                                         {"rate", 1, 0, O_RATE},
                                         {"size", 1, 0, O_SIZE},
                                         {"via", 1, 0, O_VIA},
                                         {"groups", 1, 0, O_GROUPS},
                                         {"group-size", 1, 0, O_GSIZE},
                                         {"senders", 1, 0, O_SENDERS},
                                         {"count", 1, 0, O_COUNT},
                                         {"prefix", 1, 0, O_PREFIX},
                                         {"password", 1, 0, O_PASSWORD},
                                         {"first", 1, 0, O_FIRST},
                                         {"window", 1, 0, O_WINDOW},
                                         {"probe", 0, 0, O_PROBE},
                                         {"topic", 1, 0, O_TOPIC},
                                         {"help", 0, 0, O_HELP},
                                         {0, 0, 0, 0}};

static int bad(const char *what, const char *v) {
  fprintf(stderr, "qim-bench: bad %s '%s'\nTry 'qim-bench --help'.\n", what, v);
  return -EINVAL;
}

/* A number in [lo, hi]. */
static int num(const char *what, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end || !(d >= lo && d <= hi)) return bad(what, v);
  *out = d;
  return 0;
}

static int u32(const char *what, const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
  double d;
  if (num(what, v, lo, hi, &d) || d != (double)(uint32_t)d) return bad(what, v);
  *out = (uint32_t)d;
  return 0;
}

/*
 * HOST:PORT where HOST is 127.x.x.x or "localhost": the benchmark never generates load
 * against another machine.
 */
static int parse_server(const char *v, qim_bench_opts *o) {
  const char *colon = strrchr(v, ':');
  if (!colon || (size_t)(colon - v) >= sizeof o->host) return bad("--server (HOST:PORT)", v);
  char host[64];
  memcpy(host, v, (size_t)(colon - v));
  host[colon - v] = '\0';
  if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  struct in_addr a;
  if (inet_pton(AF_INET, host, &a) != 1 || (ntohl(a.s_addr) >> 24) != 127) {
    fprintf(stderr, "qim-bench: refusing %s: only loopback targets (127.x.x.x) are allowed\n", v);
    return -EINVAL;
  }
  uint32_t port;
  if (u32("port", colon + 1, 1, 65535, &port)) return -EINVAL;
  snprintf(o->host, sizeof o->host, "%s", host);
  o->port = (uint16_t)port;
  return 0;
}

static void defaults(qim_bench_opts *o) {
  memset(o, 0, sizeof *o);
  strcpy(o->host, "127.0.0.1");
  o->port = 6060;
  o->apikey = "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K";
  o->duration_s = 10;
  o->warmup_s = 1;
  o->drain_s = 3;
  o->via_usr = true;
  o->max_messages = 10000000;
  o->accounts_file = "bench-accounts.txt";
  o->users = 100;
  o->rate = 1000;
  o->group_size = 100;
  o->senders = 1;
  o->groups = 1;
  o->content_size = 140;
  o->window = 16;
  o->count = 100;
  o->prefix = "bench";
  o->password = "bench-password";
}

static int parse_opt(int c, const char *v, qim_bench_opts *o) {
  double d;
  uint32_t u;
  switch (c) {
    case O_SERVER:
      return parse_server(v, o);
    case O_APIKEY:
      o->apikey = v;
      return strpbrk(v, " &#\r\n") ? bad("--apikey", v) : 0;
    case O_PID:
      if (u32("--server-pid", v, 1, 1u << 30, &u)) return -EINVAL;
      o->server_pid = (pid_t)u;
      return 0;
    case O_ACCOUNTS:
      o->accounts_file = v;
      return 0;
    case O_DURATION:
      return num("--duration", v, 0.1, QIM_BENCH_MAX_SECONDS, &o->duration_s);
    case O_WARMUP:
      return num("--warmup", v, 0, 600, &o->warmup_s);
    case O_DRAIN:
      return num("--drain", v, 0, 600, &o->drain_s);
    case O_SETUP:
      return num("--setup-timeout", v, 1, QIM_BENCH_MAX_SECONDS, &o->setup_timeout_s);
    case O_MAXMSG:
      if (num("--max-messages", v, 1, 1e12, &d)) return -EINVAL;
      o->max_messages = (uint64_t)d;
      return 0;
    case O_CONC:
      return u32("--concurrency", v, 1, 10000, &o->concurrency);
    case O_LABEL:
      o->label = v;
      return strpbrk(v, " \t\r\n") ? bad("--label (no spaces)", v) : 0;
    case O_QUIET:
      o->quiet = true;
      return 0;
    case O_USERS:
      return u32("--users", v, 1, QIM_BENCH_MAX_CONNS, &o->users);
    case O_RATE:
      return num("--rate", v, 0.1, 1e7, &o->rate);
    case O_SIZE:
      if (u32("--size", v, 1, 60000, &u)) return -EINVAL;
      o->content_size = u;
      return 0;
    case O_VIA:
      if (strcmp(v, "usr") && strcmp(v, "group")) return bad("--via (group|usr)", v);
      o->via_usr = strcmp(v, "usr") == 0;
      return 0;
    case O_GROUPS:
      return u32("--groups", v, 1, QIM_BENCH_MAX_CONNS, &o->groups);
    case O_GSIZE:
      return u32("--group-size", v, 2, QIM_BENCH_MAX_CONNS, &o->group_size);
    case O_SENDERS:
      return u32("--senders", v, 1, QIM_BENCH_MAX_CONNS, &o->senders);
    case O_COUNT:
      return u32("--count", v, 1, 100000, &o->count);
    case O_PREFIX:
      o->prefix = v;
      return strlen(v) > 40 || strpbrk(v, " :\t") ? bad("--prefix", v) : 0;
    case O_PASSWORD:
      o->password = v;
      return strlen(v) > 100 ? bad("--password", v) : 0;
    case O_FIRST:
      return u32("--first", v, 0, 100000000, &o->first);
    case O_WINDOW:
      return u32("--window", v, 1, 1024, &o->window);
    case O_PROBE:
      o->probe = true;
      return 0;
    case O_TOPIC:
      o->topic = v;
      return strlen(v) > 64 || strpbrk(v, " \"\\") ? bad("--topic", v) : 0;
    default:
      return -EINVAL;
  }
}

/* Lifts the soft fd limit to the hard one: connection scenarios need thousands. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  qim_bench_opts o;
  defaults(&o);
  o.scenario = argv[1];
  int c;
  optind = 2;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    if (c == O_HELP) {
      fputs(usage, stdout);
      return 0;
    }
    if (c == '?' || parse_opt(c, optarg, &o)) return 2;
  }
  if (optind < argc) return bad("argument", argv[optind]) ? 2 : 2;
  bool accounts = strcmp(o.scenario, "accounts") == 0;
  if (!o.concurrency) o.concurrency = accounts ? 4 : 64;
  if (!o.setup_timeout_s) o.setup_timeout_s = accounts ? 600 : 120;
  signal(SIGPIPE, SIG_IGN);
  raise_nofile();
  if (accounts) return qim_bench_accounts(&o);
  if (strcmp(o.scenario, "p2p") == 0 || strcmp(o.scenario, "group") == 0) return qim_bench_chat(&o);
  if (strcmp(o.scenario, "idle") == 0) return qim_bench_idle(&o);
  if (strcmp(o.scenario, "echo") == 0) return qim_bench_echo(&o);
  if (strcmp(o.scenario, "history") == 0) return qim_bench_history(&o);
  if (strcmp(o.scenario, "sync") == 0) {
    fprintf(stderr,
            "qim-bench: the sync catch-up (issue 10 item 6) is measured by "
            "bench/sync_catchup.js, not by qim-bench\n");
    return 2;
  }
  return bad("scenario", o.scenario) ? 2 : 2;
}
