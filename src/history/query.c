/*
 * query.c — reading history: seed 004's HistoryQuery → HistoryPage, Tinode's `get data`
 * forms (latest N, before, since, both, ranges), and the {data} frame of a record.
 *
 * Every form becomes one store query over seq intervals, clipped by the store to the
 * caller's window (joined_at, left_at] and filtered by its own soft deletes; the store
 * walks the intervals newest first and stops at the item or byte budget, so a page costs
 * the rows it returns, not the size of the conversation.
 */
#include <errno.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

/* Seqs stay below this (DESIGN.md §1b); an open upper bound. */
#define SEQ_OPEN 0x0FFFFFFFull

static uint32_t clamp(uint32_t v, uint32_t dflt, uint32_t max) {
  if (v == 0) v = dflt;
  return v > max ? max : v;
}

/* Runs the store query for `v`'s window and moves its output into `out`. */
static int run_query(qim_history *h, const qim_authenticated_actor *actor, const qim__view *v,
                     const qim_store_seq_range *ranges, size_t n, qim_history_direction dir,
                     bool skip_deleted, uint32_t items, uint32_t bytes, qim_history_page *out) {
  qim_store_record_query_req q = {
      .tenant_id = actor->tenant_id,
      .conversation_id = v->conv.conversation_id,
      .viewer = actor->user_id,
      .window_low = v->low,
      .window_high = v->high,
      .ranges = ranges,
      .range_count = n,
      .direction = dir,
      .skip_deleted = skip_deleted,
      .max_items = items,
      .max_bytes = bytes,
  };
  int rc = QIM__HSYNC(h, history.query, &q);
  if (rc) return rc;
  out->records = q.out_records;
  out->record_count = q.out_count;
  out->has_more = q.out_has_more;
  return 0;
}

static void page_frame(const qim__view *v, qim_history_page *out) {
  qim_conversation_seq floor = v->conv.retention_floor;
  qim_conversation_seq earliest = (v->low > floor ? v->low : floor) + 1;
  out->latest_conversation_seq = v->conv.latest_seq;
  out->earliest_available_conversation_seq = earliest > v->high + 1 ? v->high + 1 : earliest;
  /* The query may have seen messages committed after the conversation row was read. */
  for (size_t i = 0; i < out->record_count; i++)
    if (out->records[i].coordinates.conversation_seq > out->latest_conversation_seq)
      out->latest_conversation_seq = out->records[i].coordinates.conversation_seq;
}

/* Keeps the records of `q` inside the caller's window. Returns false when rows at the
 * start of the page were outside it while more rows exist (the page must be read again
 * with the real window); rows outside at the end mean nothing visible lies beyond. */
static bool clip_to_window(const qim__view *v, qim_store_record_query_req *q,
                           qim_history_page *out) {
  qim_conversation_seq high = v->member.has_left_at ? v->member.left_at : UINT64_MAX;
  bool older = q->direction == QIM_HISTORY_DIRECTION_OLDER;
  size_t k = 0;
  bool head_cut = false, tail_cut = false;
  for (size_t i = 0; i < q->out_count; i++) {
    qim_conversation_seq s = q->out_records[i].coordinates.conversation_seq;
    bool above = s > high, below = s <= v->low;
    if (!above && !below) {
      q->out_records[k++] = q->out_records[i];
      continue;
    }
    qim_message_record_free(&q->out_records[i]);
    if (k == 0 && (older ? above : below))
      head_cut = true;
    else
      tail_cut = true;
  }
  out->records = q->out_records;
  out->record_count = k;
  out->has_more = q->out_has_more && !tail_cut;
  return !(head_cut && q->out_has_more);
}

/*
 * One page: the view and the store query run at the same moment (one round trip), the
 * query speculatively over the widest window, then clipped to the caller's real window
 * (joined_at, left_at]. Nothing is returned when the view refuses the caller. In the rare
 * case the clip removed the start of a page that had more, it is read again exactly.
 */
static int read_page(qim_history *h, const qim_authenticated_actor *a, qim_conversation_id conv,
                     const qim_store_seq_range *r, size_t n, qim_history_direction dir,
                     bool skip_deleted, uint32_t items, uint32_t bytes, qim__view *v,
                     qim_history_page *out) {
  if (n == 0) return qim__history_view(h, a, conv, QIM__NEED_READ, v);
  qim_store_record_query_req q = {.tenant_id = a->tenant_id,
                                  .conversation_id = conv,
                                  .viewer = a->user_id,
                                  .window_high = SEQ_OPEN,
                                  .ranges = r,
                                  .range_count = n,
                                  .direction = dir,
                                  .skip_deleted = skip_deleted,
                                  .max_items = items,
                                  .max_bytes = bytes};
  int rc = qim__history_view_and(h, a, conv, QIM__NEED_READ, &q, v);
  if (rc == 0 && q.req.status) {
    qim__view_free(v);
    return qim__history_store_error(q.req.status);
  }
  if (rc) {
    if (q.req.status == 0) qim__records_free(q.out_records, q.out_count);
    return rc;
  }
  if (clip_to_window(v, &q, out)) return 0;
  qim__records_free(out->records, out->record_count);
  memset(out, 0, sizeof *out);
  rc = run_query(h, a, v, r, n, dir, skip_deleted, items, bytes, out);
  if (rc) qim__view_free(v);
  return rc;
}

/* ---- HistoryQuery ----------------------------------------------------------------------- */

int qim_history_read(qim_history *h, const qim_history_query *q, qim_history_page *out) {
  if (!h || !q || !out) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim_store_seq_range r;
  if (q->direction == QIM_HISTORY_DIRECTION_OLDER)
    r = (qim_store_seq_range){1, q->anchor && q->anchor < SEQ_OPEN ? q->anchor : SEQ_OPEN};
  else
    r = (qim_store_seq_range){q->anchor + 1, SEQ_OPEN};
  uint32_t items = clamp(q->max_items, h->cfg.page_default_items, h->cfg.page_max_items);
  uint32_t bytes = clamp(q->max_bytes, h->cfg.page_max_bytes, h->cfg.page_max_bytes);
  qim__view v;
  int rc = read_page(h, &q->actor, q->conversation_id, &r, r.low < r.hi, q->direction, false, items,
                     bytes, &v, out);
  if (rc) return rc;
  if (q->anchor != 0 && q->anchor <= v.conv.retention_floor) {
    qim_history_page_free(out);
    rc = qim_err_raise(QIM_E_MESSAGE_STORE_HISTORY_UNAVAILABLE);
  } else {
    page_frame(&v, out);
  }
  qim__view_free(&v);
  return rc;
}

/* ---- get data ------------------------------------------------------------------------------ */

/* The requested seqs as [low, hi) intervals: the ranges (hi 0 = one message), or
 * [since, before). Empty intervals are dropped; the store clips the rest to the window. */
static int get_intervals(const qim_history *h, const qim_history_get *g, qim_store_seq_range **out,
                         size_t *n) {
  *out = NULL;
  *n = 0;
  if (g->range_count > h->cfg.max_ranges || (g->range_count && !g->ranges))
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
  size_t cap = g->range_count ? g->range_count : 1;
  qim_store_seq_range *r = qim_malloc(cap * sizeof *r);
  size_t k = 0;
  for (size_t i = 0; i < g->range_count; i++) {
    qim_conversation_seq low = g->ranges[i].low ? g->ranges[i].low : 1;
    qim_conversation_seq hi = g->ranges[i].hi ? g->ranges[i].hi : low + 1;
    if (g->ranges[i].hi && g->ranges[i].hi < g->ranges[i].low) {
      qim_free(r);
      return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
    }
    if (low < hi) r[k++] = (qim_store_seq_range){low, hi > SEQ_OPEN ? SEQ_OPEN : hi};
  }
  if (g->range_count == 0) {
    qim_store_seq_range one = {g->since ? g->since : 1, g->before ? g->before : SEQ_OPEN};
    if (one.hi > SEQ_OPEN) one.hi = SEQ_OPEN;
    if (one.low < one.hi) r[k++] = one;
  }
  *out = r;
  *n = k;
  return 0;
}

int qim_history_get_data(qim_history *h, const qim_history_get *g, qim_history_page *out) {
  if (!h || !g || !out) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim_store_seq_range *r;
  size_t n;
  int rc = get_intervals(h, g, &r, &n);
  if (rc) return rc;
  uint32_t limit = clamp(g->limit, h->cfg.get_default_limit, h->cfg.get_max_limit);
  qim__view v;
  rc = read_page(h, &g->actor, g->conversation_id, r, n, QIM_HISTORY_DIRECTION_OLDER, true, limit,
                 h->cfg.page_max_bytes, &v, out);
  qim_free(r);
  if (rc) return rc;
  page_frame(&v, out);
  qim__view_free(&v);
  return 0;
}

