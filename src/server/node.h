/*
 * node.h — everything one running qimd holds, wired in dependency order: the store, the
 * mailbox (every shard acquired, lanes replayed until ready), the fanout, the commit (with
 * recovery of intents left in flight), the fanout task started, groups, history (with its
 * retention sweeper) and the gateway on top. The commit's on_outboxed hint wakes the
 * fanout and the fanout's on_dispatched hint wakes mailbox lanes (node.c), so an idle
 * pipeline sleeps instead of polling. qim_node_close takes it down in reverse order, so a
 * stop never loses anything acknowledged: the gateway stops taking requests first, and
 * intents still in flight stay durable for the next start's recovery.
 *
 * Used by qimd (server.c) and by the in-process tests of the gateway, which include
 * node.c directly (it depends on libqim only).
 */
#ifndef QIM_SERVER_NODE_H
#define QIM_SERVER_NODE_H

#include "gateway/gateway.h"
#include "qim/config.h"

typedef struct qim_node_options {
  bool ephemeral_port;         /* listen on a port the kernel picks (tests) */
  uint32_t pwhash_opslimit;    /* 0 = the gateway's default (tests lower it) */
  uint32_t pwhash_memlimit;
  uint32_t ready_timeout_ms;   /* mailbox shards replayed within this (30000) */
} qim_node_options;

typedef struct qim_node {
  const qim_config *cfg;
  qim_store *store;
  qim_commit *commit;
  qim_fanout *fanout;
  qim_mailbox *mailbox;
  qim_groups *groups;
  qim_history *history;
  qim_gateway *gateway;
  qim_shard_config shards; /* the store's mailbox layout (configured, or adopted from it) */
  qim_tenant_id tenants[QIM_CONFIG_MAX_API_KEYS];
  uint8_t secret[32];
} qim_node;

/*
 * Opens and starts everything for `cfg` (borrowed; must outlive the node). The data
 * directory must exist; its `secret.key` (32 random bytes, mode 0600, made on first
 * start) keys login tokens and mailbox cursors, so tokens survive restarts. Returns 0,
 * or the failing step's error after logging `event=server.start_failed step=...`; on
 * failure everything opened is closed again.
 */
int qim_node_open(qim_node *n, const qim_config *cfg, const qim_node_options *opt);

/* The port clients connect to. */
uint16_t qim_node_port(const qim_node *n);

/* Stops and frees in reverse order. Safe on a zeroed or failed node. */
void qim_node_close(qim_node *n);

#endif /* QIM_SERVER_NODE_H */
