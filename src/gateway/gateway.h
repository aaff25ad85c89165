/*
 * gateway.h — the Tinode session layer on top of the WebSocket transport (net.h): one
 * qim_gateway per process turns client frames into calls of the pipeline rooms (commit,
 * groups, history, mailbox) and pipeline output (mailbox PushBatches) into {data},
 * {pres} and {info} frames (PROTOCOL.md, docs/gateway.md).
 *
 * What it owns: the I/O loops (through qim_net), one session per WebSocket connection
 * (hi → login → attached topics, on the connection's loop thread only), per-loop
 * indexes of sessions by user and by attached conversation, the token key, the push
 * sinks it registers with the mailbox (one ConnectionShardId per loop) and the admin
 * HTTP routes (/healthz, /v0/admin/pipeline).
 *
 * What it borrows: everything in qim_gateway_deps, which must outlive the gateway and be
 * running before qim_gateway_start (the server wires them, src/server/node.c).
 *
 * Threads. Session logic runs on the loop that owns the connection and never blocks it:
 * store and commit calls complete on the loop's completion queue, and the blocking
 * modules (groups, history, password hashing) run in libuv's thread pool
 * (uv_queue_work). Loops talk to each other only by posting events to each other's
 * queues (ephemeral {info}/{pres} of notes).
 *
 * Delivery rule: live {data} comes ONLY from the mailbox push (after the message is
 * durable, fanned out and materialized), never directly from a {pub}.
 */
#ifndef QIM_GATEWAY_H
#define QIM_GATEWAY_H

#include <stdbool.h>
#include <stdint.h>

#include "commit/commit.h"
#include "fanout/fanout.h"
#include "group/group.h"
#include "history/history.h"
#include "mailbox/mailbox.h"
#include "qim/clock.h"
#include "qim/config.h"
#include "store/store.h"

typedef struct qim_gateway qim_gateway;

/* The rooms the gateway calls. All borrowed; `fanout` may be NULL (then no wake-ups are
 * sent after commits and the fanout's own polling delivers). */
typedef struct qim_gateway_deps {
  const qim_config *cfg; /* listen address, API keys, service tokens, limits, policy */
  qim_store *store;
  qim_commit *commit;
  qim_groups *groups;
  qim_history *history;
  qim_mailbox *mailbox;
  qim_fanout *fanout;
  const qim_clock *clock;
  qim_shard_config shards;                   /* the store's shard configuration */
  uint8_t token_key[32];                     /* HMAC-SHA256 key of login tokens */
} qim_gateway_deps;

/* Tunables with defaults (qim_gateway_options_default); tests shorten timeouts. */
typedef struct qim_gateway_options {
  uint16_t port_override; /* non-zero: listen here instead of cfg->listen_port (0 in cfg = ephemeral) */
  bool ephemeral_port;    /* listen on an ephemeral port (tests); read it with qim_gateway_port */
  uint32_t idle_timeout_ms;   /* WebSocket idle close (55000) */
  uint32_t ping_interval_ms;  /* WebSocket ping (49500) */
  uint32_t queue_max;         /* requests queued per session before 503 (32) */
  uint32_t attach_max;        /* topics one session may attach (1024) */
  uint32_t me_list_max;       /* subscriptions listed by `get sub` on me (1024) */
  uint32_t member_list_max;   /* members listed by `get sub` on a group (256) */
  uint32_t pwhash_opslimit;   /* argon2id cost; 0 = crypto_pwhash_OPSLIMIT_INTERACTIVE */
  uint32_t pwhash_memlimit;   /* argon2id memory in bytes; 0 = 32 MiB */
} qim_gateway_options;

void qim_gateway_options_default(qim_gateway_options *o);

/*
 * Creates a stopped gateway. `deps` is copied (its pointers stay borrowed); `opt` NULL =
 * defaults. Returns 0 or -EINVAL (missing dependency, bad configuration).
 */
int qim_gateway_new(const qim_gateway_deps *deps, const qim_gateway_options *opt, qim_gateway **out);

/*
 * Binds the listening sockets (cfg->listen_host:port, cfg->io_threads loops, SO_REUSEPORT)
 * and starts the loops; registers one push sink per loop with the mailbox. Returns 0 or
 * -errno (-EADDRINUSE ...); on failure nothing is left running.
 */
int qim_gateway_start(qim_gateway *g);

/* The bound port (after start). */
uint16_t qim_gateway_port(const qim_gateway *g);

/*
 * Graceful stop: unregisters the push sinks, closes every connection (close 1001),
 * waits for requests in flight (their replies are dropped) and joins the loops.
 * Idempotent; not from a loop thread.
 */
void qim_gateway_stop(qim_gateway *g);

/* Stops if needed, then frees. NULL ok. */
void qim_gateway_free(qim_gateway *g);

/* Counters for tests and the admin API. */
typedef struct qim_gateway_stats {
  uint64_t sessions;       /* gauge: open sessions */
  uint64_t authenticated;  /* gauge: sessions logged in */
  uint64_t requests;       /* client messages handled */
  uint64_t errors;         /* {ctrl} replies with code >= 400 */
  uint64_t pushed_data;    /* {data} frames sent from push batches */
  uint64_t pushed_pres;    /* {pres} frames sent from push batches */
  uint64_t push_batches;   /* PushBatches received */
  uint64_t events_dropped; /* cross-loop events dropped (a loop queue was full) */
  uint64_t presence_sent;     /* {pres on/off} frames sent */
  uint64_t presence_deferred; /* member on/off changes held for a later interval (fan-out bound) */
  uint64_t fanout_capped;     /* {pres}/{info} deliveries skipped over presence_fanout_max */
  uint64_t rate_limited;      /* requests refused over request_rate ({ctrl 429}; notes dropped) */
  uint64_t typing_limited;    /* typing notices dropped (closer than typing_interval) */
} qim_gateway_stats;

void qim_gateway_stats_get(qim_gateway *g, qim_gateway_stats *out);

#endif /* QIM_GATEWAY_H */
