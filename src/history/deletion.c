/*
 * deletion.c — Tinode's {del what:"msg"}: soft deletes (hidden for the requester),
 * hard deletes and recalls (gone for everyone), judged message by message as DESIGN.md §3
 * says, then applied: bodies wiped everywhere the store holds them, dellog rows (each part
 * one new delid), and the Control messages that tell the devices.
 *
 * Order of effects for a hard request: the states and wipes first (the body is gone as
 * soon as possible), then the dellog row for everyone, then the requester's soft part,
 * then the Controls. A crash in between leaves a partial delete that the same request
 * completes when retried: already deleted messages are wiped and logged again (both
 * idempotent), never skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history/history_int.h"
#include "qim/cq.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

/* Records read per store query while judging a hard request. */
#define JUDGE_PAGE 512
/* State changes in flight at once (well below the store's queue capacity). */
#define WIPE_WINDOW 256

/* ---- ranges ------------------------------------------------------------------------------ */

static int range_cmp(const void *a, const void *b) {
  const qim_store_seq_range *x = a, *y = b;
  return (x->low > y->low) - (x->low < y->low);
}

size_t qim__ranges_merge(qim_store_seq_range *r, size_t n) {
  qsort(r, n, sizeof *r, range_cmp);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (r[i].low >= r[i].hi) continue;
    if (m && r[i].low <= r[m - 1].hi) {
      if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
    } else {
      r[m++] = r[i];
    }
  }
  return m;
}

/*
 * Tinode's validation (PROTOCOL.md §9): each range 0 < low <= latest and low <= hi (hi 0 or
 * equal to low = one message), hi clipped to latest + 1; merged; more than
 * del_max_messages over several ranges is refused. Then clipped to the window.
 */
static int validate(const qim_history *h, const qim_history_delete_req *d, const qim__view *v,
                    qim_store_seq_range **out, size_t *count) {
  if (d->range_count == 0 || d->range_count > h->cfg.max_ranges || !d->ranges)
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
  qim_conversation_seq latest = v->conv.latest_seq;
  qim_store_seq_range *r = qim_malloc(d->range_count * sizeof *r);
  for (size_t i = 0; i < d->range_count; i++) {
    qim_conversation_seq low = d->ranges[i].low, hi = d->ranges[i].hi;
    if (low == 0 || low > latest || (hi && hi < low)) {
      qim_free(r);
      return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
    }
    if (hi <= low) hi = low + 1;
    r[i] = (qim_store_seq_range){low, hi > latest + 1 ? latest + 1 : hi};
  }
  size_t n = qim__ranges_merge(r, d->range_count);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += r[i].hi - r[i].low;
  if (n > 1 && total > h->cfg.del_max_messages) {
    qim_free(r);
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    qim_store_seq_range c = {r[i].low > v->low ? r[i].low : v->low + 1,
                             r[i].hi < v->high + 1 ? r[i].hi : v->high + 1};
    if (c.low < c.hi) r[k++] = c;
  }
  *out = r;
  *count = k;
  return 0;
}

/* ---- judging a hard request ------------------------------------------------------------------ */

/* A message that goes for everyone, and the state it ends in. */
typedef struct gone {
  qim_conversation_seq seq;
  qim_message_state state;
} gone;

typedef struct judgement {
  gone *v;
  size_t n, cap;
  bool held; /* a ComplianceHold message would have gone */
} judgement;

/* DESIGN.md §3, for one message: NORMAL means "hidden for the requester only". */
static qim_message_state judge_one(const qim_history *h, const qim__view *v,
                                   const qim_authenticated_actor *actor,
                                   const qim_message_record *r, uint64_t now) {
  bool young = now <= r->created_at || now - r->created_at <= h->cfg.msg_delete_age_ms;
  bool own = qim_u128_eq(r->sender.user_id.v, actor->user_id.v);
  qim_message_state want = QIM_MESSAGE_STATE_NORMAL;
  if (own && young)
    want = QIM_MESSAGE_STATE_RECALLED;
  else if ((v->mode & QIM_MODE_O) || ((v->mode & QIM_MODE_D) && young))
    want = QIM_MESSAGE_STATE_DELETED;
  bool already = r->state == QIM_MESSAGE_STATE_DELETED || r->state == QIM_MESSAGE_STATE_RECALLED;
  return want != QIM_MESSAGE_STATE_NORMAL && already ? r->state : want;
}

static void judge_page(const qim_history *h, const qim__view *v,
                       const qim_authenticated_actor *actor, const qim_message_record *recs,
                       size_t n, uint64_t now, judgement *j) {
  for (size_t i = 0; i < n; i++) {
    qim_message_state s = judge_one(h, v, actor, &recs[i], now);
    if (s == QIM_MESSAGE_STATE_NORMAL) continue;
    bool already =
        recs[i].state == QIM_MESSAGE_STATE_DELETED || recs[i].state == QIM_MESSAGE_STATE_RECALLED;
    if (recs[i].retention_class == QIM_RETENTION_CLASS_COMPLIANCE_HOLD && !already) j->held = true;
    if (j->n == j->cap)
      j->v = qim_realloc(j->v, (j->cap = j->cap ? j->cap * 2 : 64) * sizeof *j->v);
    j->v[j->n++] = (gone){recs[i].coordinates.conversation_seq, s};
  }
}

/* Reads every record of the ranges, oldest first, a page at a time — including ones the
 * requester soft-deleted (viewer: nobody) and ones already gone — and judges each. */
static int judge_all(qim_history *h, const qim_history_delete_req *d, const qim__view *v,
                     const qim_store_seq_range *ranges, size_t n, judgement *j) {
  uint64_t now = qim__history_now(h);
  qim_store_seq_range *rest = qim_memdup(ranges, n * sizeof *rest);
  size_t first = 0;
  int rc = 0;
  while (first < n) {
    qim_store_record_query_req q = {.tenant_id = d->actor.tenant_id,
                                    .conversation_id = d->conversation_id,
                                    .viewer = {{0, 0}},
                                    .window_low = v->low,
                                    .window_high = v->high,
                                    .ranges = rest + first,
                                    .range_count = n - first,
                                    .direction = QIM_HISTORY_DIRECTION_NEWER,
                                    .max_items = JUDGE_PAGE,
                                    .max_bytes = 0};
    if ((rc = QIM__HSYNC(h, history.query, &q))) break;
    judge_page(h, v, &d->actor, q.out_records, q.out_count, now, j);
    bool more = q.out_has_more && q.out_count > 0;
    qim_conversation_seq last =
        q.out_count ? q.out_records[q.out_count - 1].coordinates.conversation_seq : 0;
    qim__records_free(q.out_records, q.out_count);
    if (!more) break;
    while (first < n && rest[first].hi <= last + 1) first++;
    if (first < n && rest[first].low <= last) rest[first].low = last + 1;
  }
  qim_free(rest);
  return rc;
}

/* ---- applying ------------------------------------------------------------------------------- */

typedef struct wipe_batch {
  int done;
  int status;
} wipe_batch;

static void wipe_done(qim_store_req *r) {
  wipe_batch *b = r->data;
  if (r->status && !b->status) b->status = r->status;
  b->done++;
}

/* Sets the states and wipes the bodies, WIPE_WINDOW requests in flight at once so the
 * store commits them in a few transactions instead of one fsync each. */
static int wipe_all(qim_history *h, const qim_history_delete_req *d, const judgement *j) {
  qim_cq *cq;
  int rc = qim_cq_new_blocking(&cq);
  if (rc) return rc;
  qim_store_record_set_state_req *reqs = qim_calloc(WIPE_WINDOW, sizeof *reqs);
  uint64_t now = qim__history_now(h);
  for (size_t at = 0; rc == 0 && at < j->n; at += WIPE_WINDOW) {
    size_t k = j->n - at < WIPE_WINDOW ? j->n - at : WIPE_WINDOW;
    wipe_batch b = {0};
    int submitted = 0;
    for (size_t i = 0; i < k; i++) {
      reqs[i] = (qim_store_record_set_state_req){.req = {.cq = cq, .done = wipe_done, .data = &b},
                                                 .tenant_id = d->actor.tenant_id,
                                                 .conversation_id = d->conversation_id,
                                                 .seq = j->v[at + i].seq,
                                                 .state = j->v[at + i].state,
                                                 .wipe_body = true,
                                                 .now = now};
      int s = h->store->vt->history.set_state(h->store, &reqs[i]);
      if (s) {
        b.status = s;
        break;
      }
      submitted++;
    }
    while (b.done < submitted) qim_cq_wait(cq, 1000);
    rc = b.status == -ENOENT ? 0 : qim__history_store_error(b.status); /* a row not recorded yet */
  }
  qim_free(reqs);
  qim_cq_free(cq);
  return rc;
}

static int dellog(qim_history *h, const qim_history_delete_req *d, bool for_user,
                  const qim_store_seq_range *r, size_t n, uint64_t *delid) {
  qim_store_dellog_add_req q = {.tenant_id = d->actor.tenant_id,
                                .conversation_id = d->conversation_id,
                                .has_for_user = for_user,
                                .for_user = d->actor.user_id,
                                .ranges = r,
                                .range_count = n};
  int rc = QIM__HSYNC(h, history.dellog_add, &q);
  if (rc == 0) *delid = q.out_delid;
  return rc;
}

/* Consecutive seqs of `j` (optionally only those ending in `state`) as ranges. */
static size_t gone_ranges(const judgement *j, int state, qim_store_seq_range **out) {
  qim_store_seq_range *r = qim_malloc((j->n ? j->n : 1) * sizeof *r);
  size_t m = 0;
  for (size_t i = 0; i < j->n; i++) {
    if (state >= 0 && j->v[i].state != (qim_message_state)state) continue;
    if (m && r[m - 1].hi == j->v[i].seq)
      r[m - 1].hi++;
    else
      r[m++] = (qim_store_seq_range){j->v[i].seq, j->v[i].seq + 1};
  }
  *out = r;
  return m;
}

/* The requested ranges minus the seqs that go for everyone (both ascending). */
static size_t soft_ranges(const qim_store_seq_range *req, size_t n, const judgement *j,
                          qim_store_seq_range **out, uint32_t *hidden) {
  qim_store_seq_range *r = qim_malloc((n + j->n) * sizeof *r);
  size_t m = 0, g = 0;
  uint64_t count = 0;
  for (size_t i = 0; i < n; i++) {
    qim_conversation_seq at = req[i].low;
    for (; g < j->n && j->v[g].seq < req[i].hi; g++) {
      if (j->v[g].seq > at) r[m++] = (qim_store_seq_range){at, j->v[g].seq};
      if (j->v[g].seq >= at) at = j->v[g].seq + 1;
    }
    if (at < req[i].hi) r[m++] = (qim_store_seq_range){at, req[i].hi};
  }
  for (size_t i = 0; i < m; i++) count += r[i].hi - r[i].low;
  *hidden = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
  *out = r;
  return m;
}

/* ---- Controls
 * ------------------------------------------------------------------------------------ */

static int announce_hard(qim_history *h, const qim_history_delete_req *d, const judgement *j,
                         uint64_t delid) {
  qim_store_seq_range *del, *rec;
  size_t nd = gone_ranges(j, QIM_MESSAGE_STATE_DELETED, &del);
  size_t nr = gone_ranges(j, QIM_MESSAGE_STATE_RECALLED, &rec);
  json_t *p = json_pack("{sssbsIsososo}", "op", "del", "hard", 1, "delid", (json_int_t)delid,
                        "actor", qim__user_json(d->actor.user_id), "deleted",
                        qim__ranges_json(del, nd), "recalled", qim__ranges_json(rec, nr));
  qim_free(del);
  qim_free(rec);
  return qim__history_control(h, QIM__CONTROL_DEL_HARD, &d->actor, d->conversation_id, NULL, delid,
                              (qim_u128){0, 0}, p, &d->trace_id);
}

static int announce_soft(qim_history *h, const qim_history_delete_req *d,
                         const qim_store_seq_range *r, size_t n, uint64_t delid) {
  json_t *p = json_pack("{sssbsIsoso}", "op", "del", "hard", 0, "delid", (json_int_t)delid, "actor",
                        qim__user_json(d->actor.user_id), "ranges", qim__ranges_json(r, n));
  return qim__history_control(h, QIM__CONTROL_DEL_SOFT, &d->actor, d->conversation_id,
                              &d->actor.user_id, delid, d->actor.user_id.v, p, &d->trace_id);
}

/* ---- the request
 * ---------------------------------------------------------------------------------- */

static int apply_hard(qim_history *h, const qim_history_delete_req *d, judgement *j,
                      qim_history_delete_result *out) {
  if (j->n == 0) return 0;
  int rc = wipe_all(h, d, j);
  if (rc) return rc;
  out->hard_count = gone_ranges(j, -1, &out->hard_ranges);
  if ((rc = dellog(h, d, false, out->hard_ranges, out->hard_count, &out->hard_delid))) return rc;
  for (size_t i = 0; i < j->n; i++) {
    if (j->v[i].state == QIM_MESSAGE_STATE_RECALLED)
      out->recalled++;
    else
      out->deleted++;
  }
  QIM_LOGI(&d->trace_id, "history.deleted", "delid=%llu deleted=%u recalled=%u",
           (unsigned long long)out->hard_delid, out->deleted, out->recalled);
  int cs = announce_hard(h, d, j, out->hard_delid);
  if (cs && !out->control_status) out->control_status = cs;
  return 0;
}

static int apply_soft(qim_history *h, const qim_history_delete_req *d,
                      const qim_store_seq_range *req, size_t n, const judgement *j,
                      qim_history_delete_result *out) {
  out->soft_count = soft_ranges(req, n, j, &out->soft_ranges, &out->hidden);
  if (out->soft_count == 0) return 0;
  int rc = dellog(h, d, true, out->soft_ranges, out->soft_count, &out->soft_delid);
  if (rc) return rc;
  int cs = announce_soft(h, d, out->soft_ranges, out->soft_count, out->soft_delid);
  if (cs && !out->control_status) out->control_status = cs;
  return 0;
}

static int delete_in(qim_history *h, const qim_history_delete_req *d, const qim__view *v,
                     const qim_store_seq_range *r, size_t n, qim_history_delete_result *out) {
  judgement j = {0};
  int rc = d->hard ? judge_all(h, d, v, r, n, &j) : 0;
  if (rc == 0 && j.held) rc = qim_err_raise(QIM_E_MESSAGE_STORE_COMPLIANCE_HOLD);
  if (rc == 0) rc = apply_hard(h, d, &j, out);
  if (rc == 0) rc = apply_soft(h, d, r, n, &j, out);
  qim_free(j.v);
  return rc;
}

int qim_history_delete(qim_history *h, const qim_history_delete_req *d,
                       qim_history_delete_result *out) {
  if (!h || !d || !out) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim__view v;
  int rc = qim__history_view(h, &d->actor, d->conversation_id, QIM__NEED_CURRENT, &v);
  if (rc) return rc;
  qim_store_seq_range *r = NULL;
  size_t n = 0;
  rc = validate(h, d, &v, &r, &n);
  if (rc == 0 && n) rc = delete_in(h, d, &v, r, n, out);
  out->delid = out->hard_delid > out->soft_delid ? out->hard_delid : out->soft_delid;
  if (rc == 0 && out->delid == 0) out->delid = v.conv.delid; /* nothing visible: nothing changed */
  qim_free(r);
  qim__view_free(&v);
  if (rc) qim_history_delete_result_free(out);
  return rc;
}

void qim_history_delete_result_free(qim_history_delete_result *r) {
  if (!r) return;
  qim_free(r->hard_ranges);
  qim_free(r->soft_ranges);
  memset(r, 0, sizeof *r);
}
