/*
 * node.c — wiring of one qimd: see node.h. Each step logs what it did; the first failure
 * logs `event=server.start_failed step=<step>` and unwinds.
 */
#include "server/node.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"

/* Derives a 32-byte key for `label` from the node secret (HMAC-SHA256). */
static void derive(const uint8_t secret[32], const char *label, uint8_t out[32]) {
  crypto_auth_hmacsha256(out, (const uint8_t *)label, strlen(label) + 1, secret);
}

/* Reads <data>/secret.key, or makes it (O_EXCL, 0600) on first start. */
static int load_secret(const char *dir, uint8_t out[32]) {
  char path[QIM_CONFIG_PATH_CAP + 16];
  snprintf(path, sizeof path, "%s/secret.key", dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t r = read(fd, out, 32);
    close(fd);
    return r == 32 ? 0 : -EINVAL;
  }
  if (errno != ENOENT) return -errno;
  randombytes_buf(out, 32);
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  ssize_t w = write(fd, out, 32);
  int rc = w == 32 && fsync(fd) == 0 ? 0 : -EIO;
  close(fd);
  return rc;
}

/* As configured; a 0 leaves the choice to the store (its own layout, or the default). */
static qim_shard_config shards_of(const qim_config *c) {
  return (qim_shard_config){.shard_count = c->shard_count, .lanes_per_shard = c->lanes_per_shard};
}

/* ---- wake-ups between the stages -------------------------------------------------------
 * Stages meet only through logs and the store (DESIGN.md §1 rule 1); these hints tell a
 * consumer that its log has grown so it need not poll for it. They carry no data and are
 * wired here, so no stage knows another. Each consumer keeps a long fallback poll. */

static void wake_fanout(void *fanout) {
  qim_fanout_notify(fanout);
}

static void wake_lane(void *mailbox, qim_mailbox_shard_id shard, qim_lane_id lane) {
  qim_mailbox_notify_lane(mailbox, shard, lane);
}

static int open_commit(qim_node *n) {
  const qim_config *c = n->cfg;
  qim_commit_config cc;
  qim_commit_config_default(&cc);
  cc.on_outboxed = wake_fanout;
  cc.hook_ctx = n->fanout;
  cc.max_message_size = c->max_message_size;
  cc.inline_body_max = c->inline_body_threshold;
  cc.dedupe_window_ms = c->dedupe_window_ms;
  cc.rate_per_sec = c->send_rate;
  cc.rate_burst = c->send_burst;
  cc.clock_tolerance_ms = c->clock_tolerance_ms;
  cc.node_id = c->node_id;
  cc.maintenance_interval_ms = 60000; /* recovery and dedupe-window passes */
  int rc = qim_commit_create(n->store, qim_clock_system(), NULL, &cc, &n->commit);
  if (rc) return rc;
  qim_commit_task t;
  rc = qim_commit_recover_sync(n->commit, &t);
  QIM_LOGI(NULL, "server.recovered", "listed=%llu adopted=%llu committed=%llu failed=%llu status=%s",
           (unsigned long long)t.listed, (unsigned long long)t.adopted, (unsigned long long)t.committed,
           (unsigned long long)t.failed, qim_err_name(rc));
  return 0; /* a failed recovery is retried by the maintenance passes; serving goes on */
}

static int open_mailbox(qim_node *n, uint32_t ready_ms) {
  const qim_config *c = n->cfg;
  /* Eight workers, though they mostly wait: a lane step other than a ready lane's single
   * last wave waits for its writes to be durable, so more steps in flight let the store's
   * group commit put many lanes' writes under one fsync (with two, a 100-member group's
   * delivery took ~6x longer, qim-bench group). */
  qim_mailbox_options mo = {.shards = n->shards, .node_id = c->node_id, .workers = 8,
                            .retain_count = c->mailbox_retain_count,
                            .retention_interval_ms = (uint32_t)c->mailbox_retention_interval_ms};
  derive(n->secret, "qim.mailbox-cursor.v1", mo.cursor_key);
  int rc = qim_mailbox_new(n->store, &mo, &n->mailbox);
  for (uint32_t s = 0; rc == 0 && s < n->shards.shard_count; s++) {
    qim_shard_takeover t;
    rc = qim_mailbox_shard_acquire_sync(n->mailbox, s, &t);
  }
  for (uint32_t s = 0; rc == 0 && s < n->shards.shard_count; s++) {
    qim_shard_readiness r;
    qim_error e;
    rc = qim_mailbox_shard_wait_ready(n->mailbox, s, (int)ready_ms, &r, &e);
  }
  return rc;
}

static int open_history(qim_node *n) {
  qim_history_config hc;
  qim_history_config_default(&hc);
  qim_history_config_from(&hc, n->cfg, n->tenants, QIM_CONFIG_MAX_API_KEYS);
  int rc = qim_history_open(n->store, n->commit, qim_clock_system(), &hc, &n->history);
  if (rc == 0) rc = qim_history_sweeper_start(n->history);
  return rc;
}

static int open_gateway(qim_node *n, const qim_node_options *o) {
  qim_gateway_deps d = {.cfg = n->cfg, .store = n->store, .commit = n->commit, .groups = n->groups,
                        .history = n->history, .mailbox = n->mailbox, .fanout = n->fanout,
                        .clock = qim_clock_system(), .shards = n->shards};
  derive(n->secret, "qim.token.v1", d.token_key);
  qim_gateway_options go;
  qim_gateway_options_default(&go);
  go.ephemeral_port = o->ephemeral_port;
  go.pwhash_opslimit = o->pwhash_opslimit;
  go.pwhash_memlimit = o->pwhash_memlimit;
  int rc = qim_gateway_new(&d, &go, &n->gateway);
  if (rc == 0) rc = qim_gateway_start(n->gateway);
  sodium_memzero(&d.token_key, sizeof d.token_key);
  return rc;
}

static int fail(qim_node *n, const char *step, int rc) {
  QIM_LOGE(NULL, "server.start_failed", "step=%s error=%s", step, qim_err_name(rc));
  qim_node_close(n);
  return rc;
}

int qim_node_open(qim_node *n, const qim_config *cfg, const qim_node_options *opt) {
  qim_node_options def = {0};
  if (!opt) opt = &def;
  memset(n, 0, sizeof *n);
  n->cfg = cfg;
  if (sodium_init() < 0) return fail(n, "sodium", -ENOSYS);
  int rc = load_secret(cfg->data_dir, n->secret);
  if (rc) return fail(n, "secret", rc);
  qim_store_options so = {.shards = shards_of(cfg), .layout_out = &n->shards,
                          .commit_linger_us = cfg->commit_linger_us};
  if ((rc = qim_store_open(cfg->store_url, &so, &n->store))) return fail(n, "store", rc);
  /* Consumers first, so each producer's hint has its target from the start: the mailbox
   * (lanes replayed until ready), the fanout (started once the commit has recovered). */
  if ((rc = open_mailbox(n, opt->ready_timeout_ms ? opt->ready_timeout_ms : 30000)))
    return fail(n, "mailbox", rc);
  qim_fanout_options fo = {
      .shards = n->shards, .on_dispatched = wake_lane, .hook_ctx = n->mailbox};
  if ((rc = qim_fanout_new(n->store, &fo, &n->fanout))) return fail(n, "fanout", rc);
  if ((rc = open_commit(n))) return fail(n, "commit", rc);
  if ((rc = qim_fanout_start(n->fanout))) return fail(n, "fanout", rc);
  qim_group_config gc;
  qim_group_config_default(&gc);
  gc.member_limit = cfg->member_limit;
  gc.snapshot_keep_versions = cfg->membership_versions_kept;
  if ((rc = qim_group_open(n->store, n->commit, qim_clock_system(), &gc, &n->groups)) ||
      (rc = qim_group_pruner_start(n->groups)))
    return fail(n, "groups", rc);
  if ((rc = open_history(n))) return fail(n, "history", rc);
  if ((rc = open_gateway(n, opt))) return fail(n, "gateway", rc);
  return 0;
}

uint16_t qim_node_port(const qim_node *n) { return n->gateway ? qim_gateway_port(n->gateway) : 0; }

void qim_node_close(qim_node *n) {
  qim_gateway_free(n->gateway); /* no new requests; replies in flight are dropped */
  n->gateway = NULL;
  if (n->history) qim_history_sweeper_stop(n->history);
  qim_group_pruner_stop(n->groups);
  if (n->fanout) qim_fanout_stop(n->fanout);
  qim_history_close(n->history);
  n->history = NULL;
  qim_group_close(n->groups);
  n->groups = NULL;
  qim_commit_destroy(n->commit); /* before the fanout and mailbox its hints reach */
  n->commit = NULL;
  qim_fanout_free(n->fanout);
  n->fanout = NULL;
  qim_mailbox_free(n->mailbox);
  n->mailbox = NULL;
  qim_store_close(n->store);
  n->store = NULL;
  sodium_memzero(n->secret, sizeof n->secret);
}
