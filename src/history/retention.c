/*
 * retention.c — the retention classes and the sweeper that enforces them.
 *
 *   Default          kept until deleted
 *   Ephemeral24h     gone everywhere ephemeral_age_ms (24 h) after it was sent
 *   ComplianceHold   kept; hard delete and recall refused (deletion.c)
 *   TenantCustom     gone everywhere after its tenant's configured age
 *
 * "Gone" is the store's expiry: body wiped from history, intents, mailboxes and logs,
 * state Deleted, the conversation's retention floor raised. For every conversation whose
 * floor rose, the sweeper writes a dellog row for everyone over the newly expired seqs
 * (so `get del` tells Tinode clients to drop them) and commits a Control (so qim devices
 * drop their copies). Time is the injected clock's, so tests move it by hand; the task's
 * period is real time.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "history/history_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

/* A later pass rescans this far below the previous cut-off: a record committed a little
 * after its MessageId's time is still found. */
#define SWEEP_SLACK_MS (3600u * 1000u)

static bool class_age(const qim_history *h, qim_tenant_id t, qim_retention_class cls,
                      uint64_t *age) {
  if (cls == QIM_RETENTION_CLASS_EPHEMERAL_24H) {
    *age = h->cfg.ephemeral_age_ms;
    return true;
  }
  if (cls != QIM_RETENTION_CLASS_TENANT_CUSTOM) return false;
  for (size_t i = 0; i < h->cfg.tenant_age_count; i++)
    if (qim_u128_eq(h->cfg.tenant_ages[i].tenant.v, t.v)) {
      *age = h->cfg.tenant_ages[i].age_ms;
      return true;
    }
  return false;
}

/* sweep_mu held. The mark of (tenant, class), made on first use. */
static qim__sweep_mark *mark_of(qim_history *h, qim_tenant_id t, qim_retention_class cls) {
  for (size_t i = 0; i < h->mark_count; i++)
    if (h->marks[i].cls == cls && qim_u128_eq(h->marks[i].tenant.v, t.v)) return &h->marks[i];
  h->marks = qim_realloc(h->marks, (h->mark_count + 1) * sizeof *h->marks);
  h->marks[h->mark_count] = (qim__sweep_mark){t, cls, 0};
  return &h->marks[h->mark_count++];
}

/* The Control of one expiry is attributed to the conversation's owner (a group) or its
 * first user (direct), as the system speaking for it. */
static int announce_expiry(qim_history *h, qim_tenant_id t, const qim_store_retention_floor *f,
                           uint64_t delid, qim_retention_class cls) {
  qim_store_conv_get_req cg = {.tenant_id = t, .conversation_id = f->conversation_id};
  int rc = QIM__HSYNC(h, conversations.get, &cg);
  if (rc) return rc;
  qim_user_id who =
      cg.out.kind == QIM_CONVERSATION_GROUP ? cg.out.owner_id : cg.out.direct_users[0];
  qim_store_conversation_free(&cg.out);
  qim_authenticated_actor actor = {t, who, {{0, 0}}};
  json_t *p = json_pack("{sssIsIss}", "op", "expire", "through", (json_int_t)f->floor, "delid",
                        (json_int_t)delid, "class",
                        cls == QIM_RETENTION_CLASS_EPHEMERAL_24H ? "ephemeral24h" : "tenant");
  return qim__history_control(h, QIM__CONTROL_EXPIRE, &actor, f->conversation_id, NULL, f->floor,
                              (qim_u128){0, 0}, p, NULL);
}

/* A dellog row for everyone over the seqs that just expired, then the Control. */
static void floor_rose(qim_history *h, qim_tenant_id t, const qim_store_retention_floor *f,
                       qim_retention_class cls, qim_history_sweep_result *res) {
  res->conversations++;
  qim_store_seq_range r = {f->previous + 1, f->floor + 1};
  qim_store_dellog_add_req q = {
      .tenant_id = t, .conversation_id = f->conversation_id, .ranges = &r, .range_count = 1};
  int rc = QIM__HSYNC(h, history.dellog_add, &q);
  if (rc == 0) rc = announce_expiry(h, t, f, q.out_delid, cls);
  if (rc) {
    res->controls_failed++;
    QIM_LOGW(NULL, "history.expiry_announce_failed", "floor=%llu err=%s",
             (unsigned long long)f->floor, qim_err_name(rc));
  }
}

/* sweep_mu held. Expires one (tenant, class) up to now − age, a batch per store call. */
static int sweep_class(qim_history *h, qim_tenant_id t, qim_retention_class cls, uint64_t now,
                       qim_history_sweep_result *res) {
  uint64_t age;
  if (!class_age(h, t, cls, &age) || now <= age) return 0;
  qim__sweep_mark *mark = mark_of(h, t, cls);
  qim_timestamp_millis before = now - age;
  qim_timestamp_millis after = mark->before > SWEEP_SLACK_MS ? mark->before - SWEEP_SLACK_MS : 0;
  for (;;) {
    qim_store_record_expire_req q = {.retention_class = cls,
                                     .tenant_id = t,
                                     .after = after,
                                     .before = before,
                                     .now = now,
                                     .limit = h->cfg.sweep_batch};
    int rc = QIM__HSYNC(h, history.expire, &q);
    if (rc) return rc;
    res->expired += q.out_count;
    for (size_t i = 0; i < q.out_floor_count; i++) floor_rose(h, t, &q.out_floors[i], cls, res);
    qim_free(q.out_floors);
    if (!q.out_more) break;
  }
  mark->before = before;
  return 0;
}

int qim_history_sweep(qim_history *h, qim_history_sweep_result *out) {
  if (!h) return -EINVAL;
  qim_history_sweep_result res = {0};
  uint64_t now = qim__history_now(h);
  int rc = 0;
  pthread_mutex_lock(&h->sweep_mu);
  for (size_t i = 0; rc == 0 && i < h->cfg.tenant_count; i++) {
    rc = sweep_class(h, h->cfg.tenants[i], QIM_RETENTION_CLASS_EPHEMERAL_24H, now, &res);
    if (rc == 0)
      rc = sweep_class(h, h->cfg.tenants[i], QIM_RETENTION_CLASS_TENANT_CUSTOM, now, &res);
  }
  pthread_mutex_unlock(&h->sweep_mu);
  if (res.expired)
    QIM_LOGI(NULL, "history.swept", "expired=%llu conversations=%u",
             (unsigned long long)res.expired, res.conversations);
  if (out) *out = res;
  return rc;
}

/* ---- the periodic task -------------------------------------------------------------------- */

static void sweep_task(void *arg) {
  int rc = qim_history_sweep(arg, NULL);
  if (rc) QIM_LOGW(NULL, "history.sweep_failed", "err=%s", qim_err_name(rc));
}

int qim_history_sweeper_start(qim_history *h) {
  if (!h || h->cfg.sweep_interval_ms == 0) return -EINVAL;
  return qim_periodic_start(&h->task, sweep_task, h, h->cfg.sweep_interval_ms);
}

void qim_history_sweeper_stop(qim_history *h) {
  if (h) qim_periodic_stop(&h->task);
}
