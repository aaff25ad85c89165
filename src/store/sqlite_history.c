/*
 * sqlite_history.c — message history in the SQLite backend: records by (conversation,
 * seq), per-viewer range queries, state changes with body wiping, dellog ranges and
 * retention expiry.
 *
 * Rows are written by intents.advance(RECORDED); this file reads and changes them. A
 * body wipe is "deleted means gone": the history row, the stored commit intent, every
 * inline mailbox entry and the log records of the message (outbox envelope, mailbox
 * dispatches: sqlite_logs.c) lose their content in the same transaction, and
 * secure_delete makes SQLite overwrite the freed bytes; the writer's periodic TRUNCATE
 * checkpoint (sqlite.c) removes the old page images from the WAL.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/sqlite_int.h"

#define HISTORY_ERRORS \
  QIM_E_MESSAGE_STORE_UNAVAILABLE, QIM_E_MESSAGE_STORE_UNAVAILABLE, QIM_E_MESSAGE_STORE_UNAVAILABLE

void sq_content_wipe(qim_message_content *content) {
  /* The type, custom type and schema stay: clients render "message deleted" from them. */
  qim_bytes_free(&content->payload_or_ciphertext);
  qim_bytes_free(&content->media_metadata);
  content->has_media_metadata = false;
}

static int decode_record(sqlite3_stmt *st, int state_col, int body_col, qim_message_record *out) {
  const void *p = sqlite3_column_blob(st, body_col);
  if (qim_message_record_decode(p, (size_t)sqlite3_column_bytes(st, body_col), out) != 0)
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  out->state = (qim_message_state)sqlite3_column_int(st, state_col); /* the column rules */
  return 0;
}

/* ---- get ---------------------------------------------------------------------------------- */

static int record_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_record_get_req *r = (void *)base;
  r->out = (qim_message_record){0};
  return 0;
}

static void record_get_discard(qim_store_req *base) {
  qim_store_record_get_req *r = (void *)base;
  qim_message_record_free(&r->out);
}

static int record_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_record_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT state, body FROM records WHERE tenant=? AND conv=?"
                             " AND seq=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u64(st, 3, r->seq);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  return decode_record(st, 0, 1, &r->out);
}

const sq_op sq_op_record_get = {
    "history.get", false, record_get_prepare, record_get_exec, record_get_discard, HISTORY_ERRORS};

/* ---- query -------------------------------------------------------------------------------- */

static int record_query_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_record_query_req *r = (void *)base;
  r->out_records = NULL;
  r->out_count = 0;
  r->out_has_more = false;
  if (r->max_items == 0 || (r->range_count && !r->ranges)) return -EINVAL;
  return 0;
}

static void record_query_discard(qim_store_req *base) {
  qim_store_record_query_req *r = (void *)base;
  for (size_t i = 0; i < r->out_count; i++) qim_message_record_free(&r->out_records[i]);
  qim_free(r->out_records);
  r->out_records = NULL;
  r->out_count = 0;
  r->out_has_more = false;
}

static int cmp_range(const void *a, const void *b) {
  const qim_store_seq_range *x = a, *y = b;
  return (x->low > y->low) - (x->low < y->low);
}

/* The query's seq intervals [low, hi): the ranges (or everything) clipped to the window
 * (window_low, window_high], sorted and merged. Returns the count. */
static size_t query_intervals(const qim_store_record_query_req *r, qim_store_seq_range **out) {
  uint64_t lo = r->window_low >= (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : r->window_low + 1;
  uint64_t hi = r->window_high >= (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : r->window_high + 1;
  size_t n = r->range_count ? r->range_count : 1;
  qim_store_seq_range *v = qim_malloc(n * sizeof *v);
  if (r->range_count)
    memcpy(v, r->ranges, n * sizeof *v);
  else
    v[0] = (qim_store_seq_range){lo, hi};
  qsort(v, n, sizeof *v, cmp_range);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t a = v[i].low > lo ? v[i].low : lo, b = v[i].hi < hi ? v[i].hi : hi;
    if (a >= b) continue;
    if (m && a <= v[m - 1].hi) {
      if (b > v[m - 1].hi) v[m - 1].hi = b;
    } else {
      v[m++] = (qim_store_seq_range){a, b};
    }
  }
  *out = v;
  return m;
}

typedef struct query_acc {
  size_t cap;
  uint64_t bytes;
  bool full;
} query_acc;

/* Adds the current row unless a bound is reached (then marks has_more). */
static int query_take(qim_store_record_query_req *r, sqlite3_stmt *st, query_acc *acc) {
  uint64_t size = sq_col_u64(st, 1);
  bool over = r->out_count >= r->max_items ||
              (r->max_bytes && r->out_count > 0 && acc->bytes + size > r->max_bytes);
  if (over) {
    r->out_has_more = true;
    acc->full = true;
    return 0;
  }
  if (r->out_count == acc->cap) {
    acc->cap = acc->cap ? acc->cap * 2 : 16;
    r->out_records = qim_realloc(r->out_records, acc->cap * sizeof *r->out_records);
  }
  int rc = decode_record(st, 0, 2, &r->out_records[r->out_count]);
  if (rc) return rc;
  r->out_count++;
  acc->bytes += size;
  return 0;
}

static int query_interval(sq_conn *c, qim_store_record_query_req *r, qim_store_seq_range iv,
                          query_acc *acc) {
  bool older = r->direction == QIM_HISTORY_DIRECTION_OLDER;
#define QUERY_SQL(order)                                                            \
  "SELECT state, size, body FROM records WHERE tenant=?1 AND conv=?2 AND seq >= ?3" \
  " AND seq < ?4 AND (?5 = 0 OR state NOT IN (1, 3)) ORDER BY seq " order
  sqlite3_stmt *st = sq_prep(c, older ? QUERY_SQL("DESC") : QUERY_SQL("ASC"));
#undef QUERY_SQL
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u64(st, 3, iv.low);
  sq_bind_u64(st, 4, iv.hi);
  sqlite3_bind_int(st, 5, r->skip_deleted);
  int rc;
  while (!acc->full && (rc = sq_step(c, st)) == 1)
    if ((rc = query_take(r, st, acc))) return rc;
  return acc->full ? 0 : rc;
}

/* The viewer's own soft deletes overlapping [lo, hi), sorted and merged. Read once per
 * query (one index range scan) rather than as a correlated subquery per row, which costs
 * a scan of the viewer's ranges for every row returned. */
static int hidden_ranges(sq_conn *c, const qim_store_record_query_req *r, uint64_t lo, uint64_t hi,
                         qim_store_seq_range **out, size_t *count) {
  *out = NULL;
  *count = 0;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT low, hi FROM dellog WHERE tenant=? AND conv=? AND for_user=?"
                             " AND low < ? AND hi > ?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->viewer.v);
  sq_bind_u64(st, 4, hi);
  sq_bind_u64(st, 5, lo);
  qim_store_seq_range *v = NULL;
  size_t n = 0, cap = 0;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    if (n == cap) v = qim_realloc(v, (cap = cap ? cap * 2 : 16) * sizeof *v);
    v[n++] = (qim_store_seq_range){sq_col_u64(st, 0), sq_col_u64(st, 1)};
  }
  if (rc < 0) {
    qim_free(v);
    return rc;
  }
  if (n) qsort(v, n, sizeof *v, cmp_range);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && v[i].low <= v[m - 1].hi) {
      if (v[i].hi > v[m - 1].hi) v[m - 1].hi = v[i].hi;
    } else {
      v[m++] = v[i];
    }
  }
  *out = v;
  *count = m;
  return 0;
}

/* iv minus h (both ascending, disjoint): the seqs the viewer has not hidden. */
static size_t intervals_minus(const qim_store_seq_range *iv, size_t n, const qim_store_seq_range *h,
                              size_t m, qim_store_seq_range **out) {
  qim_store_seq_range *v = qim_malloc((n + m + 1) * sizeof *v);
  size_t k = 0, j = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t at = iv[i].low;
    while (j < m && h[j].hi <= at) j++;
    for (size_t t = j; t < m && h[t].low < iv[i].hi; t++) {
      if (h[t].low > at) v[k++] = (qim_store_seq_range){at, h[t].low};
      if (h[t].hi > at) at = h[t].hi;
    }
    if (at < iv[i].hi) v[k++] = (qim_store_seq_range){at, iv[i].hi};
  }
  *out = v;
  return k;
}

static int record_query_exec(sq_conn *c, qim_store_req *base) {
  qim_store_record_query_req *r = (void *)base;
  qim_store_seq_range *iv, *hidden = NULL, *visible = NULL;
  size_t n = query_intervals(r, &iv), m = 0, k = 0;
  int rc = n ? hidden_ranges(c, r, iv[0].low, iv[n - 1].hi, &hidden, &m) : 0;
  if (rc == 0) k = intervals_minus(iv, n, hidden, m, &visible);
  query_acc acc = {0};
  bool older = r->direction == QIM_HISTORY_DIRECTION_OLDER;
  for (size_t i = 0; rc == 0 && !acc.full && i < k; i++)
    rc = query_interval(c, r, visible[older ? k - 1 - i : i], &acc);
  qim_free(iv);
  qim_free(hidden);
  qim_free(visible);
  return rc;
}

const sq_op sq_op_record_query = {"history.query",      false,
                                  record_query_prepare, record_query_exec,
                                  record_query_discard, HISTORY_ERRORS};

/* ---- state changes and wiping --------------------------------------------------------------- */

/* Sets one record's state; with `wipe` its content goes everywhere the store holds it. */
static int change_record(sq_conn *c, qim_tenant_id t, qim_conversation_id conv,
                         qim_conversation_seq seq, qim_message_state state, bool wipe,
                         uint64_t now) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT state, body, sender, cmid FROM records"
                             " WHERE tenant=? AND conv=? AND seq=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, t, conv);
  sq_bind_u64(st, 3, seq);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  qim_commit_key key = {t, {sq_col_u128(st, 2)}, {{0}}};
  sq_col_id16(st, 3, key.client_message_id.b);
  qim_message_record rec;
  if ((rc = decode_record(st, 0, 1, &rec))) return rc;
  rec.state = state; /* keep the stored encoding in step with the column */
  if (wipe) {
    sq_content_wipe(&rec.content);
    sq_note_erase(c);
  }
  qim_bytes body;
  rc = qim_message_record_encode(&rec, &body);
  if (rc == 0 && wipe) rc = sq_intent_wipe_body(c, &key);
  if (rc == 0 && wipe) rc = sq_mailbox_wipe_message(c, &rec.coordinates.message_id);
  if (rc == 0 && wipe) rc = sq_logs_wipe_message(c, &rec.coordinates.message_id);
  qim_message_record_free(&rec);
  if (rc) return rc;
  st = sq_prep(c,
               "UPDATE records SET state=?4, updated_at=?5, body=?6,"
               " size=CASE WHEN ?7 THEN 0 ELSE size END WHERE tenant=?1 AND conv=?2 AND seq=?3");
  if (st) {
    sq_bind_conv(st, 1, t, conv);
    sq_bind_u64(st, 3, seq);
    sqlite3_bind_int(st, 4, (int)state);
    sq_bind_u64(st, 5, now);
    sq_bind_blob(st, 6, body.p, body.n);
    sqlite3_bind_int(st, 7, wipe);
    rc = sq_run(c, st);
  } else {
    rc = sq_last_error(c);
  }
  qim_bytes_free(&body);
  return rc;
}

static int set_state_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_record_set_state_req *r = (void *)base;
  return r->state <= QIM_MESSAGE_STATE_DELETED ? 0 : -EINVAL;
}

static int set_state_exec(sq_conn *c, qim_store_req *base) {
  qim_store_record_set_state_req *r = (void *)base;
  return change_record(c, r->tenant_id, r->conversation_id, r->seq, r->state, r->wipe_body, r->now);
}

const sq_op sq_op_record_set_state = {"history.set_state", true, set_state_prepare,
                                      set_state_exec,      NULL, HISTORY_ERRORS};

static int expire_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_record_expire_req *r = (void *)base;
  r->out_count = 0;
  r->out_more = false;
  r->out_floors = NULL;
  r->out_floor_count = 0;
  return r->retention_class <= QIM_RETENTION_CLASS_TENANT_CUSTOM ? 0 : -EINVAL;
}

static void expire_discard(qim_store_req *base) {
  qim_store_record_expire_req *r = (void *)base;
  qim_free(r->out_floors);
  r->out_floors = NULL;
  r->out_floor_count = 0;
}

typedef struct expire_victim {
  qim_conversation_id conv;
  qim_conversation_seq seq;
} expire_victim;

static int victim_cmp(const void *a, const void *b) {
  const expire_victim *x = a, *y = b;
  int c = qim_u128_cmp(x->conv.v, y->conv.v);
  return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* The records to expire, oldest first; collected before any is changed, since
 * change_record rewrites rows of the table being scanned. */
static int expire_collect(sq_conn *c, qim_store_record_expire_req *r, expire_victim **out,
                          size_t *count) {
  sqlite3_stmt *st =
      sq_prep(c,
              "SELECT conv, seq FROM records WHERE tenant=? AND retention=?"
              " AND created_at >= ? AND created_at < ? AND NOT (state = 3 AND size = 0)"
              " ORDER BY created_at LIMIT ?");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, r->tenant_id.v);
  sqlite3_bind_int(st, 2, (int)r->retention_class);
  sq_bind_u64(st, 3, r->after);
  sq_bind_u64(st, 4, r->before);
  sqlite3_bind_int64(st, 5, r->limit ? (sqlite3_int64)r->limit + 1 : -1);
  expire_victim *v = NULL;
  size_t n = 0, cap = 0;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->limit && n == r->limit) {
      r->out_more = true;
      break;
    }
    if (n == cap) v = qim_realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
    v[n++] = (expire_victim){{sq_col_u128(st, 0)}, sq_col_u64(st, 1)};
  }
  if (rc < 0) {
    qim_free(v);
    return rc;
  }
  *out = v;
  *count = n;
  return 0;
}

/* Raises one conversation's retention floor to `seq`; reports it when it rose. */
static int expire_floor(sq_conn *c, qim_store_record_expire_req *r, qim_conversation_id conv,
                        qim_conversation_seq seq, size_t *cap) {
  sqlite3_stmt *st =
      sq_prep(c, "SELECT retention_floor FROM conversations WHERE tenant=? AND conv=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, conv);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc; /* the conversation is gone: nothing to raise */
  qim_conversation_seq previous = sq_col_u64(st, 0);
  if (previous >= seq) return 0;
  st = sq_prep(c, "UPDATE conversations SET retention_floor=? WHERE tenant=? AND conv=?");
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 1, seq);
  sq_bind_conv(st, 2, r->tenant_id, conv);
  if ((rc = sq_run(c, st))) return rc;
  if (r->out_floor_count == *cap)
    r->out_floors =
        qim_realloc(r->out_floors, (*cap = *cap ? *cap * 2 : 8) * sizeof *r->out_floors);
  r->out_floors[r->out_floor_count++] = (qim_store_retention_floor){conv, previous, seq};
  return 0;
}

static int expire_exec(sq_conn *c, qim_store_req *base) {
  qim_store_record_expire_req *r = (void *)base;
  expire_victim *v = NULL;
  size_t n = 0, cap = 0;
  int rc = expire_collect(c, r, &v, &n);
  if (rc) return rc;
  if (n) qsort(v, n, sizeof *v, victim_cmp);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    rc = change_record(c, r->tenant_id, v[i].conv, v[i].seq, QIM_MESSAGE_STATE_DELETED, true,
                       r->now);
    bool last_of_conv = i + 1 == n || !qim_u128_eq(v[i + 1].conv.v, v[i].conv.v);
    if (rc == 0 && last_of_conv) rc = expire_floor(c, r, v[i].conv, v[i].seq, &cap);
  }
  qim_free(v);
  r->out_count = rc ? 0 : n;
  return rc;
}

const sq_op sq_op_record_expire = {"history.expire", true,           expire_prepare,
                                   expire_exec,      expire_discard, HISTORY_ERRORS};

/* ---- dellog ---------------------------------------------------------------------------------- */

static int dellog_add_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_dellog_add_req *r = (void *)base;
  if (!r->range_count || !r->ranges) return -EINVAL;
  for (size_t i = 0; i < r->range_count; i++)
    if (r->ranges[i].low >= r->ranges[i].hi) return -EINVAL;
  return 0;
}

static int dellog_bump(sq_conn *c, const qim_store_dellog_add_req *r, uint64_t *delid) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE conversations SET delid=delid+1 WHERE tenant=? AND conv=?"
                             " RETURNING delid");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  *delid = sq_col_u64(st, 0);
  return sq_run(c, st);
}

static int dellog_clear(sq_conn *c, const qim_store_dellog_add_req *r, uint64_t delid) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE members SET clear_delid=? WHERE tenant=? AND conv=?"
                             " AND user=?");
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 1, delid);
  sq_bind_conv(st, 2, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 4, r->for_user.v);
  return sq_run_matched(c, st);
}

static int dellog_add_exec(sq_conn *c, qim_store_req *base) {
  qim_store_dellog_add_req *r = (void *)base;
  uint64_t delid = 0;
  int rc = dellog_bump(c, r, &delid);
  if (rc == 0 && r->has_for_user) rc = dellog_clear(c, r, delid);
  if (rc) return rc;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO dellog(tenant, conv, delid, for_user, low, hi)"
                             " VALUES(?, ?, ?, ?, ?, ?)");
  if (!st) return sq_last_error(c);
  for (size_t i = 0; i < r->range_count; i++) {
    sqlite3_reset(st);
    sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
    sq_bind_u64(st, 3, delid);
    if (r->has_for_user)
      sq_bind_u128(st, 4, r->for_user.v);
    else
      sqlite3_bind_null(st, 4);
    sq_bind_u64(st, 5, r->ranges[i].low);
    sq_bind_u64(st, 6, r->ranges[i].hi);
    if ((rc = sq_run(c, st))) return rc;
  }
  r->out_delid = delid;
  return 0;
}

const sq_op sq_op_dellog_add = {"history.dellog_add", true, dellog_add_prepare,
                                dellog_add_exec,      NULL, HISTORY_ERRORS};

static int dellog_query_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_dellog_query_req *r = (void *)base;
  r->out_ranges = NULL;
  r->out_delids = NULL;
  r->out_count = 0;
  r->out_max_delid = 0;
  return r->limit > 0 ? 0 : -EINVAL;
}

static void dellog_query_discard(qim_store_req *base) {
  qim_store_dellog_query_req *r = (void *)base;
  qim_free(r->out_ranges);
  qim_free(r->out_delids);
  r->out_ranges = NULL;
  r->out_delids = NULL;
  r->out_count = 0;
}

static int dellog_query_exec(sq_conn *c, qim_store_req *base) {
  qim_store_dellog_query_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "SELECT delid FROM conversations WHERE tenant=? AND conv=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  r->out_max_delid = sq_col_u64(st, 0);
  st = sq_prep(c,
               "SELECT low, hi, delid FROM dellog WHERE tenant=?1 AND conv=?2"
               " AND (for_user IS NULL OR for_user=?3) AND delid >= ?4 AND (?5 = 0 OR delid < ?5)"
               " ORDER BY delid, low LIMIT ?6");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->viewer.v);
  sq_bind_u64(st, 4, r->since_delid);
  sq_bind_u64(st, 5, r->before_delid);
  sqlite3_bind_int64(st, 6, r->limit);
  size_t cap = 0;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->out_count == cap) {
      cap = cap ? cap * 2 : 16;
      r->out_ranges = qim_realloc(r->out_ranges, cap * sizeof *r->out_ranges);
      r->out_delids = qim_realloc(r->out_delids, cap * sizeof *r->out_delids);
    }
    r->out_delids[r->out_count] = sq_col_u64(st, 2);
    r->out_ranges[r->out_count++] = (qim_store_seq_range){sq_col_u64(st, 0), sq_col_u64(st, 1)};
  }
  return rc;
}

const sq_op sq_op_dellog_query = {"history.dellog_query", false,
                                  dellog_query_prepare,   dellog_query_exec,
                                  dellog_query_discard,   HISTORY_ERRORS};
