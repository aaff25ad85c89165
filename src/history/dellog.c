/*
 * dellog.c — Tinode's `get del`: which seqs were deleted for the caller (its own soft
 * deletes and everyone's hard deletes, recalls and expiries) in a span of delete ids, so
 * a client that was away can drop them from its cache (meta.del {clear, delseq}).
 */
#include <errno.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/err.h"
#include "qim/mem.h"

int qim_history_get_del(qim_history *h, const qim_history_del_query *g, qim_history_del_page *out) {
  if (!h || !g || !out) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim__view v;
  int rc = qim__history_view(h, &g->actor, g->conversation_id, QIM__NEED_READ, &v);
  if (rc) return rc;
  uint32_t limit = h->cfg.del_max_ranges_out;
  if (g->limit && g->limit < limit) limit = g->limit;
  qim_store_dellog_query_req q = {
      .tenant_id = g->actor.tenant_id,
      .conversation_id = g->conversation_id,
      .viewer = g->actor.user_id,
      .since_delid = g->since,
      .before_delid = g->before,
      .limit = limit,
  };
  rc = QIM__HSYNC(h, history.dellog_query, &q);
  if (rc) {
    qim__view_free(&v);
    return rc;
  }
  /* Clipped to the window: a member never hears of seqs it could not see. */
  size_t k = 0;
  for (size_t i = 0; i < q.out_count; i++) {
    if (q.out_delids[i] > out->clear) out->clear = q.out_delids[i];
    qim_store_seq_range r = q.out_ranges[i];
    if (r.low <= v.low) r.low = v.low + 1;
    if (r.hi > v.high + 1) r.hi = v.high + 1;
    if (r.low < r.hi) q.out_ranges[k++] = r;
  }
  qim_free(q.out_delids);
  if (k == 0) {
    qim_free(q.out_ranges);
    out->clear = 0;
  } else {
    out->ranges = q.out_ranges;
    out->range_count = k;
  }
  qim__view_free(&v);
  return 0;
}

void qim_history_del_page_free(qim_history_del_page *p) {
  if (!p) return;
  qim_free(p->ranges);
  memset(p, 0, sizeof *p);
}
