/*
 * main.c — qimd entry point: reads the configuration (flags > QIM_* environment >
 * file > defaults), then runs the server until SIGINT or SIGTERM.
 * Exit status: 0 after a clean stop, --help or --print-config; 1 if the server fails;
 * 2 for bad configuration.
 */
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qim/config.h"
#include "qim/log.h"
#include "server.h"

extern char **environ;

static void usage(FILE *out) {
  fprintf(
      out,
      "Usage: qimd [--listen HOST:PORT] [--data DIR] [--config FILE] [--store URL] [--node-id N]\n"
      "            [--SETTING VALUE ...] [--print-config] [--help]\n"
      "\n"
      "qimd is the qim instant-messaging server (Tinode's JSON-over-WebSocket protocol).\n"
      "It creates its data directory, logs `event=server.ready` on stderr (one key=value\n"
      "line per event) and runs until SIGINT or SIGTERM, then exits with status 0.\n"
      "\n"
      "Main settings:\n"
      "  --listen HOST:PORT  where clients connect (default 127.0.0.1:6060)\n"
      "  --data DIR          data directory, created if missing (default ./var)\n"
      "  --config FILE       read settings from FILE (`key = value` lines, # comments)\n"
      "  --store URL         sqlite:PATH (default sqlite:<data>/qim.db); sqlite:PATH?memory=DIR\n"
      "                      keeps the live database in DIR (tmpfs), durable by a journal\n"
      "                      beside PATH; sqlite:PATH?from_memory=1 makes such a store a\n"
      "                      default one again; redis://HOST:PORT[/DB] is accepted by the\n"
      "                      configuration but not built yet\n"
      "  --node-id N         this node's id (1-16777215, default 1), unique among nodes\n"
      "                      sharing a store\n"
      "  --print-config      print the effective configuration in file format and exit\n"
      "  -h, --help          print this help and exit\n"
      "\n"
      "Every setting, with its environment variable and default:\n");
  qim_config_write_help(out);
  fprintf(
      out,
      "\nExit status: 0 after SIGINT/SIGTERM; 1 if the server fails; 2 on bad configuration.\n");
}

/* Removes qimd's own flags from argv (they are not settings); returns the new count. */
static int take_own_flags(int argc, char **argv, int *help, int *print) {
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      *help = 1;
    else if (strcmp(argv[i], "--print-config") == 0)
      *print = 1;
    else
      argv[n++] = argv[i];
  }
  return n;
}

int main(int argc, char **argv) {
  int help = 0, print = 0;
  int n = take_own_flags(argc - 1, argv + 1, &help, &print);
  if (help) {
    usage(stdout);
    return 0;
  }
  qim_config cfg;
  qim_config_error err;
  if (qim_config_load(&cfg, n, argv + 1, environ, &err) < 0) {
    fprintf(stderr, "qimd: %s\nTry 'qimd --help'.\n", err.message);
    return 2;
  }
  if (print) {
    qim_config_write(&cfg, stdout);
    return 0;
  }
  if (cfg.store_backend != QIM_STORAGE_BACKEND_SQLITE) {
    fprintf(stderr,
            "qimd: config: store: the redis backend is not built yet; use sqlite:PATH (got '%s')\n",
            cfg.store_url);
    return 2;
  }
  qim_log_set_level(cfg.log_level);
  /* libuv's thread pool runs password hashing and the blocking group/history calls of
   * every gateway loop; its default of 4 threads would queue them behind each other.
   * Read once, at the pool's first use; an operator's own setting wins. */
  char pool[16];
  snprintf(pool, sizeof pool, "%u", cfg.io_threads * 4 < 16 ? 16 : cfg.io_threads * 4);
  setenv("UV_THREADPOOL_SIZE", pool, 0);
  /* A peer that closes its socket must cost an EPIPE, never the process. */
  signal(SIGPIPE, SIG_IGN);
  qim_server srv;
  if (qim_server_init(&srv, &cfg) < 0) return 1;
  int rc = qim_server_run(&srv);
  qim_server_close(&srv);
  return rc == 0 ? 0 : 1;
}
