/*
 * fanout_audience.c — the recipients of one envelope: a Direct audience as frozen, a
 * group's member set read at EXACTLY its frozen membership_version (paged through the
 * store), plus, for a membership Control message, the users its JSON names (so a
 * member removed by the change still gets the event that tells it so). Every input is
 * frozen at reserve, so the result is the same on every replay — unless the stored
 * snapshot was changed, which is checked against the frozen member_count and
 * target_shards and reported as DeterminismViolation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fanout/fanout_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

/* ---- a growable user list ------------------------------------------------------------------ */

static void users_push(qim__fanout_users *u, const qim_user_id *ids, size_t n) {
  if (u->count + n > u->cap) {
    size_t cap = u->cap ? u->cap : 64;
    while (cap < u->count + n) cap *= 2;
    u->ids = qim_realloc(u->ids, cap * sizeof *u->ids);
    u->cap = cap;
  }
  if (n) memcpy(u->ids + u->count, ids, n * sizeof *ids);
  u->count += n;
}

void qim__fanout_users_free(qim__fanout_users *u) {
  qim_free(u->ids);
  *u = (qim__fanout_users){0};
}

/* ---- group snapshot ---------------------------------------------------------------------------- */

/* Maps a store failure to the fanout's vocabulary. */
int qim__fanout_store_error(int rc) {
  if (rc == -EAGAIN) return QIM_AGAIN;
  if (rc == QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE) return rc; /* raised by the store */
  return qim_err_raise(QIM_E_FANOUT_UNAVAILABLE);
}

/* Appends the members at exactly the frozen version, page by page. */
static int snapshot_read(qim__fanout *f, const qim_commit_intent *in, qim__fanout_users *u) {
  const qim_delivery_audience *a = &in->delivery.audience;
  qim_store_members_at_req r = {
      .tenant_id = in->key.tenant_id,
      .conversation_id = (qim_conversation_id){a->group.group_id.v},
      .version = a->group.membership_version,
      .limit = f->opt.snapshot_page,
  };
  for (;;) {
    int rc = QIM_STORE_SYNC(f->store, conversations.members_at, &r);
    if (rc) return qim__fanout_store_error(rc);
    for (size_t i = 0; i < r.out_count; i++) users_push(u, &r.out_members[i].user_id, 1);
    bool more = r.out_has_more && r.out_count > 0;
    if (r.out_count) r.after_user = r.out_members[r.out_count - 1].user_id;
    r.has_after = true;
    qim_free(r.out_members);
    r.out_members = NULL;
    if (!more) return 0;
  }
}

static int shard_cmp(const void *a, const void *b) {
  qim_mailbox_shard_id x = *(const qim_mailbox_shard_id *)a, y = *(const qim_mailbox_shard_id *)b;
  return x < y ? -1 : x > y;
}

/* Sorted distinct shards of ids[0..n); returns the count. */
static size_t distinct_shards(qim__fanout *f, qim_tenant_id t, const qim_user_id *ids, size_t n,
                              qim_mailbox_shard_id **out) {
  qim_mailbox_shard_id *s = n ? qim_malloc(n * sizeof *s) : NULL;
  for (size_t i = 0; i < n; i++) s[i] = qim_shard_of_user(&f->opt.shards, t, ids[i]);
  if (n) qsort(s, n, sizeof *s, shard_cmp);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (k == 0 || s[k - 1] != s[i]) s[k++] = s[i];
  *out = s;
  return k;
}

/* The snapshot must be what reserve froze: same member count, same set of shards. */
static int snapshot_verify(qim__fanout *f, const qim_commit_intent *in, const qim__fanout_users *u) {
  const qim_delivery_audience *a = &in->delivery.audience;
  int ok = u->count == a->group.member_count;
  if (ok) {
    qim_mailbox_shard_id *got, *want = NULL;
    size_t ng = distinct_shards(f, in->key.tenant_id, u->ids, u->count, &got);
    size_t nw = a->group.target_shard_count;
    if (nw) {
      want = qim_memdup(a->group.target_shards, nw * sizeof *want);
      qsort(want, nw, sizeof *want, shard_cmp);
    }
    ok = ng == nw && (nw == 0 || memcmp(got, want, nw * sizeof *want) == 0);
    qim_free(got);
    qim_free(want);
  }
  if (ok) return 0;
  QIM_LOGE(&in->trace_id, "fanout.snapshot_mismatch", "group_version=%llu frozen_count=%u read_count=%zu",
           (unsigned long long)a->group.membership_version, a->group.member_count, u->count);
  return qim_err_raise(QIM_E_FANOUT_DETERMINISM_VIOLATION);
}

int qim__fanout_recipients(qim__fanout *f, const qim_committed_envelope *env, qim__fanout_users *u) {
  const qim_commit_intent *in = &env->intent;
  const qim_delivery_audience *a = &in->delivery.audience;
  *u = (qim__fanout_users){0};
  if (a->kind == QIM_DELIVERY_AUDIENCE_DIRECT) {
    users_push(u, a->direct.recipients, a->direct.recipient_count);
  } else {
    int rc = snapshot_read(f, in, u);
    if (!rc) rc = snapshot_verify(f, in, u);
    if (rc) {
      qim__fanout_users_free(u);
      return rc;
    }
  }
  qim_user_id *named;
  size_t n;
  qim_fanout_membership_users(&env->record.content, &named, &n);
  users_push(u, named, n);
  qim_free(named);
  return 0;
}
