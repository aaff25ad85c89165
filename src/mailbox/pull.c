/*
 * pull.c — MailboxPullRequest → MailboxPage, asynchronously on the caller's completion queue.
 *
 *   1. the cursor is checked (signature, the actor's own identity and lane) and the lane must
 *      be servable here (not replaying after a takeover on this node);
 *   2. watermark_get: the lane's watermark W (complete, durable dispatches only) and floor F;
 *      the cursor L is expired if entries after it were trimmed (L + 1 < F) or it is ahead of
 *      what the shard holds (L > W; or, for a cursor of an older epoch, the log's record at
 *      its offset now carries another epoch: the log lost its tail in a failover and reused
 *      the offset — checked only while that record is still in the log);
 *   3. range: the user's entries in (L, min(up_to, W)] as whole event groups within
 *      max_items / max_bytes; the page is checked (order, bounds, ownership, whole groups);
 *   4. covered_through_seq = the last returned group's seq when more remain, else the bound
 *      itself: mailboxes are sparse per shard, so a quiet user still moves forward.
 */
#include <errno.h>
#include <string.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

typedef struct qim__mb_pull {
  qim_mailbox *m;
  qim_mailbox_pull_op *op;
  qim_mailbox_shard_id shard;
  qim_lane_id lane;
  qim_lane_watermark wm;
  qim_mailbox_seq after, bound;
  uint32_t max_items, max_bytes;
  qim_store_watermark_get_req wm_req;
  qim_store_log_read_req read_req;
  qim_store_mailbox_range_req range_req;
} mb_pull;

static void finish(mb_pull *x, int rc) {
  qim_mailbox_pull_op *op = x->op;
  op->status = rc;
  if (rc && op->error.code != rc) op->error = (qim_error){.code = rc};
  op->priv_ = NULL;
  qim_free(x);
  op->done(op);
}

static void expired(mb_pull *x) {
  x->op->error = (qim_error){.code = QIM_E_MAILBOX_CURSOR_EXPIRED, .trim_watermark = x->wm.floor};
  finish(x, qim_err_raise(QIM_E_MAILBOX_CURSOR_EXPIRED));
}

/* Submits a store request whose completion continues the pull on the caller's queue. */
#define PULL_SUBMIT(x, call, r, next)                                                        \
  do {                                                                                       \
    (r)->req = (qim_store_req){.cq = (x)->op->cq, .done = (next), .data = (x)};              \
    if ((x)->m->store->vt->call((x)->m->store, (r)) != 0)                                    \
      finish((x), qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE));                                 \
  } while (0)

/* ---- 4. the page ---------------------------------------------------------------------------------- */

/* Is the store's answer a well-formed page of this user's whole groups in (after, bound]? */
static int check_page(const mb_pull *x, const qim_mailbox_entry *e, size_t n) {
  const qim_mailbox_range_query *q = &x->op->request.range;
  for (size_t i = 0; i < n; i++) {
    if (!qim_u128_eq(e[i].tenant_id.v, q->tenant_id.v) || !qim_u128_eq(e[i].user_id.v, q->user_id.v) ||
        e[i].event_id != qim_event_id_make(e[i].mailbox_seq, e[i].event_ordinal))
      return qim_err_raise(QIM_E_MAILBOX_CORRUPT_ENTRY);
    bool first_of_group = i == 0 || e[i].mailbox_seq != e[i - 1].mailbox_seq;
    if (e[i].mailbox_seq <= x->after || e[i].mailbox_seq > x->bound ||
        (i > 0 && e[i].mailbox_seq < e[i - 1].mailbox_seq) ||
        (first_of_group ? e[i].event_ordinal != 0 : e[i].event_ordinal != e[i - 1].event_ordinal + 1))
      return qim_err_raise(QIM_E_MAILBOX_INVARIANT_VIOLATION);
  }
  return 0;
}

/* The first group alone must fit max_bytes (the store returns it whole regardless). */
static int check_first_group(const mb_pull *x, const qim_mailbox_entry *e, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n && e[i].mailbox_seq == e[0].mailbox_seq; i++) bytes += qim__mb_entry_size(&e[i]);
  return bytes > x->max_bytes ? qim_err_raise(QIM_E_MAILBOX_GROUP_TOO_LARGE) : 0;
}

static void page_done(mb_pull *x, qim_mailbox_entry *entries, size_t n, bool has_more) {
  qim_mailbox_pull_op *op = x->op;
  op->page = (qim_mailbox_page){.entries = entries, .entry_count = n, .lane_watermark = x->wm.materialized,
                                .has_more = has_more};
  op->page.covered_through_seq = has_more && n ? entries[n - 1].mailbox_seq : x->bound;
  qim_cursor_identity id = op->request.cursor.identity;
  id.shard_epoch = qim__mb_identity_epoch(x->m, &x->wm);
  qim_mailbox_cursor_sign(x->m->opt.cursor_key, &id, op->page.covered_through_seq, &op->next_cursor);
  finish(x, 0);
}

static void free_entries(qim_mailbox_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) qim_mailbox_entry_free(&e[i]);
  qim_free(e);
}

static void on_range(qim_store_req *r) {
  mb_pull *x = r->data;
  qim_store_mailbox_range_req *q = &x->range_req;
  if (r->status) {
    int rc = r->status;
    bool passthrough = rc == QIM_E_MAILBOX_GROUP_TOO_LARGE || rc == QIM_E_MAILBOX_CORRUPT_ENTRY;
    finish(x, passthrough ? rc : qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE));
    return;
  }
  int rc = check_page(x, q->out_entries, q->out_count);
  if (rc == 0 && q->out_count) rc = check_first_group(x, q->out_entries, q->out_count);
  if (rc == 0 && q->out_has_more && q->out_count == 0) rc = qim_err_raise(QIM_E_MAILBOX_INVARIANT_VIOLATION);
  if (rc) {
    free_entries(q->out_entries, q->out_count);
    finish(x, rc);
    return;
  }
  page_done(x, q->out_entries, q->out_count, q->out_has_more);
}

/* ---- 3. the range ------------------------------------------------------------------------------------ */

static void start_range(mb_pull *x) {
  if (x->bound <= x->after) { /* nothing new, or the client asked for no more than it has */
    x->bound = x->after;
    page_done(x, NULL, 0, false);
    return;
  }
  const qim_mailbox_range_query *q = &x->op->request.range;
  x->range_req.query = (qim_mailbox_range_query){q->tenant_id, q->user_id, x->after, x->bound, x->max_items,
                                                 x->max_bytes};
  PULL_SUBMIT(x, mailboxes.range, &x->range_req, on_range);
}

/* ---- 2. expiry ---------------------------------------------------------------------------------------- */

/* The record at the cursor's offset, when the log still has it, must carry the cursor's epoch. */
static void on_epoch_record(qim_store_req *r) {
  mb_pull *x = r->data;
  qim_store_log_read_req *q = &x->read_req;
  bool lost = false;
  if (r->status == 0 && q->out_count && q->out_records[0].offset == qim_mailbox_seq_offset(x->after))
    lost = q->out_records[0].epoch != qim_mailbox_seq_epoch(x->after);
  qim_store_log_read_free(q);
  if (r->status && r->status != QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE) {
    finish(x, qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE));
    return;
  }
  if (lost) {
    expired(x);
    return;
  }
  start_range(x);
}

static void on_watermark(qim_store_req *r) {
  mb_pull *x = r->data;
  if (r->status) {
    finish(x, qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE));
    return;
  }
  x->wm = x->wm_req.out;
  qim_mailbox_seq up_to = x->op->request.range.up_to_seq;
  x->bound = up_to && up_to < x->wm.materialized ? up_to : x->wm.materialized;
  if ((x->wm.floor && x->after + 1 < x->wm.floor) || x->after > x->wm.materialized) {
    expired(x);
    return;
  }
  if (x->after && qim_mailbox_seq_epoch(x->after) < qim_mailbox_seq_epoch(x->wm.materialized)) {
    x->read_req.stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, x->shard};
    x->read_req.from = qim_mailbox_seq_offset(x->after);
    x->read_req.max = 1;
    PULL_SUBMIT(x, logs.read, &x->read_req, on_epoch_record);
    return;
  }
  start_range(x);
}

/* ---- 1. the request ---------------------------------------------------------------------------------- */

static uint32_t clamp(uint32_t v, uint32_t def, uint32_t max) { return v == 0 ? def : v > max ? max : v; }

/* Synchronous checks; fills op->status / op->error when refusing. */
static int check_request(qim_mailbox *m, qim_mailbox_pull_op *op) {
  const qim_mailbox_pull_request *rq = &op->request;
  if (!qim_u128_eq(rq->range.tenant_id.v, rq->actor.tenant_id.v) || !qim_u128_eq(rq->range.user_id.v, rq->actor.user_id.v))
    return -EINVAL;
  int rc = qim_mailbox_cursor_verify(m->opt.cursor_key, &m->opt.shards, &rq->cursor, &rq->actor);
  if (rc) {
    op->error.code = rc;
    return rc;
  }
  return qim__mb_lane_serving(m, rq->cursor.identity.mailbox_shard, rq->cursor.identity.lane, &op->error);
}

int qim_mailbox_pull(qim_mailbox *m, qim_mailbox_pull_op *op) {
  if (!op->cq || !op->done) return -EINVAL;
  op->status = 0;
  op->error = (qim_error){0};
  op->page = (qim_mailbox_page){0};
  op->next_cursor = (qim_mailbox_cursor){0};
  int rc = check_request(m, op);
  if (rc) return op->status = rc;
  mb_pull *x = qim_calloc(1, sizeof *x);
  x->m = m;
  x->op = op;
  op->priv_ = x;
  x->shard = op->request.cursor.identity.mailbox_shard;
  x->lane = op->request.cursor.identity.lane;
  x->after = op->request.cursor.last_applied_seq;
  x->max_items = clamp(op->request.range.max_items, m->opt.pull_default_items, m->opt.pull_max_items);
  x->max_bytes = clamp(op->request.range.max_bytes, m->opt.pull_default_bytes, m->opt.pull_max_bytes);
  x->wm_req = (qim_store_watermark_get_req){.req = {.cq = op->cq, .done = on_watermark, .data = x},
                                            .shard = x->shard, .lane = x->lane};
  rc = m->store->vt->mailboxes.watermark_get(m->store, &x->wm_req);
  if (rc) {
    op->priv_ = NULL;
    qim_free(x);
    return op->status = op->error.code = qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE);
  }
  return 0;
}

static void pull_sync_done(qim_mailbox_pull_op *op) { op->data = NULL; }

int qim_mailbox_pull_sync(qim_mailbox *m, const qim_mailbox_pull_request *req, qim_mailbox_page *page,
                          qim_mailbox_cursor *next, qim_error *err) {
  qim_cq *cq;
  int rc = qim_cq_new_blocking(&cq);
  if (rc) return rc;
  qim_mailbox_pull_op op = {.cq = cq, .done = pull_sync_done, .request = *req};
  op.data = &op;
  rc = qim_mailbox_pull(m, &op);
  while (rc == 0 && op.data) qim_cq_wait(cq, -1);
  qim_cq_free(cq);
  if (err) *err = op.error;
  if (rc) return rc;
  *page = op.page;
  *next = op.next_cursor;
  return op.status;
}
