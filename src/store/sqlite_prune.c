/*
 * sqlite_prune.c — membership snapshot retention in the SQLite backend
 * (conversations.members_prune, store.h).
 *
 * Each conversation has a membership_floor: versions below it are pruned. A prune raises
 * the floor to what the count rule allows (keep the newest keep_versions versions) but
 * never above a version a message not yet fanned out still names — the fanout reads the
 * member set at exactly that version. Those pins come from two places: intents not yet
 * COMMITTED (their frozen snapshot is in the stored intent) and outbox records at or after
 * the lowest outbox consumer offset (the envelope carries the intent). A member row whose
 * stretch [from_version, to_version) ends at or below the floor is visible at no readable
 * version and is deleted; every version at or above the floor keeps all its rows.
 */
#include <errno.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/sqlite_int.h"

/* One conversation examined by a prune. */
typedef struct prune_conv {
  qim_tenant_id tenant;
  qim_conversation_id conv;
  uint64_t floor;  /* stored floor */
  uint64_t target; /* what the count rule allows */
  uint64_t pin;    /* lowest version still named by an unfanned message (UINT64_MAX: none) */
} prune_conv;

typedef struct prune_set {
  prune_conv *v;
  size_t n, cap;
} prune_set;

static int prune_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_members_prune_req *r = (void *)base;
  r->out_next_tenant = r->after_tenant;
  r->out_next_conversation = r->after_conversation;
  r->out_more = r->out_deferred = false;
  r->out_raised = r->out_held = 0;
  r->out_rows = 0;
  return r->keep_versions > 0 && r->limit > 0 ? 0 : -EINVAL;
}

/* The conversations after the cursor; those whose floor the count rule would raise go to
 * `set`. */
static int collect(sq_conn *c, qim_store_members_prune_req *r, prune_set *set) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT tenant, conv, membership_version, membership_floor"
                             " FROM conversations WHERE (tenant, conv) > (?1, ?2)"
                             " ORDER BY tenant, conv LIMIT ?3");
  if (!st) return sq_last_error(c);
  if (r->has_after) {
    sq_bind_conv(st, 1, r->after_tenant, r->after_conversation);
  } else { /* the empty blob sorts before every id */
    sq_bind_blob(st, 1, NULL, 0);
    sq_bind_blob(st, 2, NULL, 0);
  }
  sqlite3_bind_int64(st, 3, (sqlite3_int64)r->limit + 1);
  uint32_t seen = 0;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    if (seen == r->limit) {
      r->out_more = true;
      break;
    }
    seen++;
    prune_conv p = {
        .tenant.v = sq_col_u128(st, 0), .conv.v = sq_col_u128(st, 1), .pin = UINT64_MAX};
    uint64_t version = sq_col_u64(st, 2);
    p.floor = sq_col_u64(st, 3);
    p.target = version >= r->keep_versions ? version - r->keep_versions + 1 : 1;
    r->out_next_tenant = p.tenant;
    r->out_next_conversation = p.conv;
    if (p.target <= p.floor || p.target <= 1) continue;
    if (set->n == set->cap) {
      set->cap = set->cap ? set->cap * 2 : 16;
      set->v = qim_realloc(set->v, set->cap * sizeof *set->v);
    }
    set->v[set->n++] = p;
  }
  return rc < 0 ? rc : 0;
}

/* Lowers the pin of the conversation the snapshot of `in` names, if it is in `set`. */
static void pin_intent(prune_set *set, const qim_commit_intent *in) {
  const qim_delivery_audience *a = &in->delivery.audience;
  if (a->kind != QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT) return;
  for (size_t i = 0; i < set->n; i++) {
    prune_conv *p = &set->v[i];
    if (!qim_u128_eq(p->tenant.v, in->key.tenant_id.v) ||
        !qim_u128_eq(p->conv.v, a->group.group_id.v))
      continue;
    if (a->group.membership_version < p->pin) p->pin = a->group.membership_version;
    return;
  }
}

/* Pins from the intents of each conversation that are not COMMITTED yet. */
static int pin_in_flight(sq_conn *c, prune_set *set) {
  for (size_t i = 0; i < set->n; i++) {
    sqlite3_stmt *st = sq_prep(c,
                               "SELECT body FROM intents WHERE tenant=?1 AND conv=?2 AND state < 3"
                               " ORDER BY seq, ord");
    if (!st) return sq_last_error(c);
    sq_bind_conv(st, 1, set->v[i].tenant, set->v[i].conv);
    int rc;
    while ((rc = sq_step(c, st)) == 1) {
      qim_commit_intent in;
      const void *p = sqlite3_column_blob(st, 0);
      int n = sqlite3_column_bytes(st, 0);
      if (!p || qim_commit_intent_decode(p, (size_t)n, &in) != 0) return -EIO;
      pin_intent(set, &in);
      qim_commit_intent_free(&in);
    }
    if (rc < 0) return rc;
  }
  return 0;
}

/* Pins from the outbox records the slowest consumer has not passed. 1 = too many to scan. */
static int pin_unfanned(sq_conn *c, prune_set *set) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT COUNT(*), MIN(pos) FROM log_records"
                             " WHERE pos >= COALESCE("
                             "(SELECT MIN(offset) FROM log_consumers WHERE stream=0), 0) AND pos < ?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sq_log_pos_end(0)); /* the outbox's rows are its offsets */
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  uint64_t count = sq_col_u64(st, 0), from = sq_col_u64(st, 1);
  if (count == 0) return 0;
  if (count > QIM_STORE_PRUNE_SCAN_MAX) return 1;
  st = sq_prep(c, "SELECT payload FROM log_records WHERE pos >= ? AND pos < ? ORDER BY pos");
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 1, from);
  sqlite3_bind_int64(st, 2, sq_log_pos_end(0));
  while ((rc = sq_step(c, st)) == 1) {
    qim_committed_envelope e;
    const void *p = sqlite3_column_blob(st, 0);
    int n = sqlite3_column_bytes(st, 0);
    if (!p || qim_committed_envelope_decode(p, (size_t)n, &e) != 0) return -EIO;
    pin_intent(set, &e.intent);
    qim_committed_envelope_free(&e);
  }
  return rc < 0 ? rc : 0;
}

/* Raises one conversation's floor and deletes the rows visible only below it. */
static int raise_floor(sq_conn *c, const prune_conv *p, uint64_t floor, uint64_t *rows) {
  sqlite3_stmt *st = sq_prep(c,
                             "DELETE FROM member_versions WHERE tenant=?1 AND conv=?2"
                             " AND to_version <= ?3");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, p->tenant, p->conv);
  sq_bind_u64(st, 3, floor);
  int rc = sq_run(c, st);
  if (rc) return rc;
  *rows += (uint64_t)sq_changes(c);
  st = sq_prep(c, "UPDATE conversations SET membership_floor=?3 WHERE tenant=?1 AND conv=?2");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, p->tenant, p->conv);
  sq_bind_u64(st, 3, floor);
  return sq_run(c, st);
}

static int prune_apply(sq_conn *c, qim_store_members_prune_req *r, prune_set *set) {
  int rc = pin_unfanned(c, set);
  if (rc == 1) {
    r->out_deferred = true;
    return 0;
  }
  if (rc == 0) rc = pin_in_flight(c, set);
  for (size_t i = 0; rc == 0 && i < set->n; i++) {
    const prune_conv *p = &set->v[i];
    uint64_t floor = p->target;
    if (p->pin < floor) {
      r->out_held++;
      floor = p->pin;
    }
    if (floor <= p->floor) continue;
    rc = raise_floor(c, p, floor, &r->out_rows);
    r->out_raised++;
  }
  return rc;
}

static int prune_exec(sq_conn *c, qim_store_req *base) {
  qim_store_members_prune_req *r = (void *)base;
  prune_set set = {0};
  int rc = collect(c, r, &set);
  if (rc == 0 && set.n) rc = prune_apply(c, r, &set);
  qim_free(set.v);
  return rc;
}

const sq_op sq_op_members_prune = {"conversations.members_prune",
                                   true,
                                   prune_prepare,
                                   prune_exec,
                                   NULL,
                                   QIM_E_GROUP_UNAVAILABLE,
                                   QIM_E_GROUP_UNAVAILABLE,
                                   QIM_E_GROUP_UNAVAILABLE};
