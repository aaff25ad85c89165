/*
 * group_prune.c — membership snapshot retention (docs/groups.md "Snapshot retention").
 *
 * A pass walks every conversation of the store through conversations.members_prune, a
 * batch per call, keeping the newest snapshot_keep_versions versions of each group. The
 * store, not this module, decides which older versions are still needed: it never prunes
 * a version a message not yet fanned out names, because the fanout reads the member set
 * at exactly that version. The pass is idempotent, so a failed or deferred one is simply
 * repeated by the next period.
 */
#include <errno.h>

#include "group/group_int.h"
#include "qim/err.h"
#include "qim/log.h"

int qim_group_prune_snapshots(qim_groups *g, qim_group_prune_result *out) {
  if (!g) return -EINVAL;
  qim_group_prune_result res = {0};
  qim_store_members_prune_req r = {.keep_versions = g->cfg.snapshot_keep_versions,
                                   .limit = g->cfg.snapshot_prune_batch};
  int rc = 0;
  for (bool more = g->cfg.snapshot_keep_versions > 0; more;) {
    rc = QIM_STORE_SYNC(g->store, conversations.members_prune, &r);
    if (rc) {
      rc = qim__group_store_error(rc);
      break;
    }
    res.conversations += r.out_raised;
    res.held += r.out_held;
    res.rows += r.out_rows;
    res.deferred |= r.out_deferred;
    more = r.out_more && !r.out_deferred;
    r.has_after = true;
    r.after_tenant = r.out_next_tenant;
    r.after_conversation = r.out_next_conversation;
  }
  if (res.conversations || res.deferred)
    QIM_LOGI(NULL, "group.snapshots_pruned", "conversations=%llu held=%llu rows=%llu deferred=%d",
             (unsigned long long)res.conversations, (unsigned long long)res.held,
             (unsigned long long)res.rows, res.deferred);
  if (out) *out = res;
  return rc;
}

static void prune_task(void *arg) {
  int rc = qim_group_prune_snapshots(arg, NULL);
  if (rc) QIM_LOGW(NULL, "group.snapshot_prune_failed", "err=%s", qim_err_name(rc));
}

int qim_group_pruner_start(qim_groups *g) {
  if (!g) return -EINVAL;
  return qim_periodic_start(&g->pruner, prune_task, g, g->cfg.snapshot_prune_interval_ms);
}

void qim_group_pruner_stop(qim_groups *g) {
  if (g) qim_periodic_stop(&g->pruner);
}
