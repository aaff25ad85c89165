/*
 * server.h — one running qimd: its configuration, its main event loop with the signal
 * handles that stop it, and the node (node.h: store, pipeline, gateway). main.c only
 * parses the command line and reports the exit status.
 */
#ifndef QIM_SERVER_H
#define QIM_SERVER_H

#include <stdbool.h>
#include <uv.h>

#include "qim/config.h"
#include "server/node.h"

typedef struct qim_server {
  const qim_config *cfg; /* borrowed; outlives the server */
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  int stop_signal; /* the signal that stopped the server; 0 while running */
  bool loop_open;
  qim_node node;
  bool node_open;
} qim_server;

/*
 * Prepares a server: creates the data directory (and its parents, mode 0700), the main
 * loop with SIGINT/SIGTERM handlers, and opens the node (store, recovery, pipeline,
 * gateway listening). Returns 0, or an error after logging the failing step. On failure
 * the server is already cleaned up.
 */
int qim_server_init(qim_server *s, const qim_config *cfg);

/* Logs `event=server.ready` and runs until SIGINT or SIGTERM, then stops the node
 * gracefully; 0 after a clean stop. */
int qim_server_run(qim_server *s);

/* Releases the loop; safe after a failed init and after run. */
void qim_server_close(qim_server *s);

/* Writes `v` into `out` as a log value: bare when safe, else in double quotes with
 * '"' and '\' escaped. Truncates to `cap`. Returns `out`. */
const char *qim_server_log_quote(const char *v, char *out, size_t cap);

#endif /* QIM_SERVER_H */
