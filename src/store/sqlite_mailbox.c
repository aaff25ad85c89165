/*
 * sqlite_mailbox.c — mailboxes in the SQLite backend: shard epochs and takeover, the
 * atomic AppendMailboxBatch with its dispatch progress, range reads and lane watermarks.
 *
 * Fencing: a materializer writes with the epoch it got from its takeover; append and
 * watermark advance compare it with the shard's current epoch inside the same
 * transaction as their writes (the writer thread serializes everything, so no stale
 * owner can slip a write in between the check and the write).
 *
 * Idempotence: a batch is keyed by (dispatch_id, lane, chunk): the progress row of
 * (dispatch_id, lane) lists the chunks applied (`applied`), and a replay finds its chunk
 * there and returns the original receipt without writing. Entries are
 * also unique by their lane position (shard, lane, mailbox_seq, tenant, user, ordinal)
 * and inserted with OR IGNORE.
 *
 * Settling: an entry is written at its lane position only; it enters the per-user index
 * (`mailbox_index`) when its lane settles, in one sorted pass over every entry up to the
 * lane's watermark, once the lane has written enough since the last one (settle_due). The lane
 * row records how far it settled; a range reads the index up to there and the lane's own
 * rows above it. Why: an index insert per entry dirtied its user's page, ~1,000 pages of
 * WAL per message to a group of 1,000 (schema version 6 in sqlite_schema.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"
#include "store/sqlite_int.h"

#define MATERIALIZE_ERRORS \
  QIM_E_MATERIALIZE_UNAVAILABLE, QIM_E_MATERIALIZE_UNAVAILABLE, QIM_E_MATERIALIZE_UNAVAILABLE
#define MAILBOX_ERRORS \
  QIM_E_MAILBOX_UNAVAILABLE, QIM_E_MAILBOX_UNAVAILABLE, QIM_E_MAILBOX_UNAVAILABLE

static bool shard_valid(const sq_store *st, qim_mailbox_shard_id shard) {
  return shard < st->opt.shards.shard_count;
}

static bool lane_valid(const sq_store *st, qim_mailbox_shard_id shard, qim_lane_id lane) {
  return shard_valid(st, shard) && lane < st->opt.shards.lanes_per_shard;
}

/* A statement whose parameters 1 and 2 are a lane (shard, lane), bound; NULL on failure
 * (sq_last_error). */
static sqlite3_stmt *prep_lane(sq_conn *c, const char *sql, qim_mailbox_shard_id shard,
                               qim_lane_id lane) {
  sqlite3_stmt *st = sq_prep(c, sql);
  if (st) {
    sqlite3_bind_int64(st, 1, shard);
    sqlite3_bind_int(st, 2, lane);
  }
  return st;
}

/* The lane's slot in sq_store.unsettled. */
static struct sq_unsettled *unsettled_of(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane) {
  return &c->st->unsettled[(size_t)shard * c->st->opt.shards.lanes_per_shard + lane];
}

/* ---- shards --------------------------------------------------------------------------------- */

static int shard_row(sq_conn *c, qim_mailbox_shard_id shard, qim_shard_epoch *epoch,
                     uint64_t *owner) {
  sqlite3_stmt *st = sq_prep(c, "SELECT epoch, owner FROM shards WHERE shard=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, shard);
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  *epoch = rc ? (qim_shard_epoch)sq_col_u64(st, 0) : 0;
  if (owner) *owner = rc ? sq_col_u64(st, 1) : 0;
  return 0;
}

int sq_shard_epoch(sq_conn *c, qim_mailbox_shard_id shard, qim_shard_epoch *epoch) {
  return shard_row(c, shard, epoch, NULL);
}

static int takeover_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_shard_takeover_req *r = (void *)base;
  return shard_valid(st, r->shard) ? 0 : -EINVAL;
}

static int takeover_exec(sq_conn *c, qim_store_req *base) {
  qim_store_shard_takeover_req *r = (void *)base;
  qim_shard_epoch epoch;
  int rc = sq_shard_epoch(c, r->shard, &epoch);
  if (rc) return rc;
  /* The epoch never wraps: past 2^16 takeovers the shard is re-created (DESIGN.md §1b). */
  if (epoch == UINT16_MAX) return -EOVERFLOW;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO shards(shard, epoch, owner) VALUES(?, ?, ?)"
                             " ON CONFLICT(shard) DO UPDATE SET epoch = excluded.epoch,"
                             " owner = excluded.owner");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, r->shard);
  sqlite3_bind_int(st, 2, epoch + 1);
  sq_bind_u64(st, 3, r->owner);
  if ((rc = sq_run(c, st))) return rc;
  /* The fence is appended after the bump, so it carries the new epoch. */
  qim_log_stream stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, r->shard};
  bool existed;
  r->out_fence.stream = stream;
  return sq_log_append_one(c, stream, NULL, NULL, true, &r->out_fence.offset, &r->out_epoch,
                           &existed);
}

const sq_op sq_op_shard_takeover = {
    "mailboxes.shard_takeover", true, takeover_prepare, takeover_exec, NULL, MATERIALIZE_ERRORS};

static int shard_get_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_shard_get_req *r = (void *)base;
  return shard_valid(st, r->shard) ? 0 : -EINVAL;
}

static int shard_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_shard_get_req *r = (void *)base;
  return shard_row(c, r->shard, &r->out_epoch, &r->out_owner);
}

const sq_op sq_op_shard_get = {"mailboxes.shard_get", false, shard_get_prepare,
                               shard_get_exec,        NULL,  MATERIALIZE_ERRORS};

/* ---- chunk sets: ascending u32 big-endian ----------------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Sorted, de-duplicated copy of `chunks` as a blob. */
static qim_bytes chunks_encode(const uint32_t *chunks, size_t n) {
  uint32_t *sorted = qim_malloc((n ? n : 1) * sizeof *sorted);
  if (n) memcpy(sorted, chunks, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_u32);
  qim_bytes b = {qim_malloc(n * 4 + 1), 0};
  for (size_t i = 0; i < n; i++) {
    if (i && sorted[i] == sorted[i - 1]) continue;
    sq_chunk_put(b.p + b.n, sorted[i]);
    b.n += 4;
  }
  qim_free(sorted);
  return b;
}

static uint32_t chunk_at(const uint8_t *p, size_t i) {
  p += 4 * i;
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Is every chunk of set a (a blob) also in set b (a blob)? Both ascending. */
static bool chunks_subset(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
  size_t j = 0;
  for (size_t i = 0; i < an / 4; i++) {
    uint32_t v = chunk_at(a, i);
    while (j < bn / 4 && chunk_at(b, j) < v) j++;
    if (j == bn / 4 || chunk_at(b, j) != v) return false;
  }
  return true;
}

/* ---- append --------------------------------------------------------------------------------- */

static size_t batch_count(const qim_store_mailbox_append_req *r) {
  return r->batch_count ? r->batch_count : 1;
}

/* The message a batch's entries are of (batch_valid holds them to one), or NULL for none. */
static const uint8_t *batch_message(const qim_append_mailbox_batch *b) {
  return b->entry_count ? b->entries[0].coordinates.message_id.b : NULL;
}

static int batch_valid(const sq_store *st, const qim_append_mailbox_batch *b) {
  if (!lane_valid(st, b->shard, b->lane) || (b->entry_count && !b->entries)) return -EINVAL;
  const qim_dispatch_progress *p = &b->progress;
  if (memcmp(&p->dispatch_id, &b->dispatch_id, 16) || p->shard != b->shard || p->lane != b->lane ||
      (p->completed_chunk_count && !p->completed_chunks))
    return -EINVAL;
  bool has_chunk = false;
  for (size_t i = 0; i < p->completed_chunk_count; i++)
    has_chunk |= p->completed_chunks[i] == b->chunk_id;
  if (!has_chunk) return -EINVAL; /* the progress written must include this chunk */
  for (size_t i = 0; i < b->entry_count; i++)
    if (b->entries[i].mailbox_seq != b->mailbox_seq ||
        memcmp(b->entries[i].coordinates.message_id.b, batch_message(b), 16))
      return -EINVAL;
  return 0;
}

static int append_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_mailbox_append_req *r = (void *)base;
  if (!r->batch) return -EINVAL;
  for (size_t i = 0; i < batch_count(r); i++) {
    const qim_append_mailbox_batch *b = &r->batch[i];
    if (batch_valid(st, b) || b->shard != r->batch[0].shard || b->lane != r->batch[0].lane)
      return -EINVAL;
  }
  return 0;
}

/* A dispatch's stored progress for one lane (found = false: none yet). */
typedef struct stored_progress {
  bool found;
  qim_mailbox_seq mseq;
  qim_bytes applied; /* chunk ids applied, ascending u32 big-endian */
} stored_progress;

/* Reads the (dispatch, lane) row; a stored row must be a prefix of the new progress
 * (same shard, seq and message, its chunks within the new ones) unless it already
 * applied this chunk (a replay, answered from the row). */
static int read_progress(sq_conn *c, const qim_append_mailbox_batch *b, const qim_bytes *chunks,
                         stored_progress *out) {
  *out = (stored_progress){0};
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT shard, mseq, chunks, applied, message_id FROM dispatch_progress"
                             " WHERE dispatch_id=? AND lane=?");
  if (!st) return sq_last_error(c);
  sq_bind_id16(st, 1, b->dispatch_id.b);
  sqlite3_bind_int(st, 2, b->lane);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc;
  out->found = true;
  out->mseq = sq_col_u64(st, 1);
  const uint8_t *applied = sqlite3_column_blob(st, 3);
  size_t an = (size_t)sqlite3_column_bytes(st, 3);
  out->applied = (qim_bytes){qim_malloc(an + 4), an};
  if (an) memcpy(out->applied.p, applied, an);
  uint8_t me[4];
  sq_chunk_put(me, b->chunk_id);
  if (chunks_subset(me, 4, out->applied.p, an)) return 1; /* a replay */
  const uint8_t *stored = sqlite3_column_blob(st, 2);
  size_t n = (size_t)sqlite3_column_bytes(st, 2);
  const void *message = sqlite3_column_blob(st, 4);
  bool other_message = message && batch_message(b) && sqlite3_column_bytes(st, 4) == 16 &&
                       memcmp(message, batch_message(b), 16) != 0;
  if (sq_col_u64(st, 0) != b->shard || out->mseq != b->mailbox_seq || other_message ||
      !chunks_subset(stored, n, chunks->p, chunks->n))
    return qim_err_raise(QIM_E_MATERIALIZE_PROGRESS_CONFLICT);
  return 0;
}

static size_t entry_size(const qim_mailbox_entry *e) {
  if (!e->has_content) return 0;
  return e->content.payload_or_ciphertext.n +
         (e->content.has_media_metadata ? e->content.media_metadata.n : 0);
}

static int insert_entry(sq_conn *c, const qim_append_mailbox_batch *b, const qim_mailbox_entry *e) {
  qim_bytes body;
  int rc = qim_mailbox_entry_encode(e, &body);
  if (rc) return rc;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT OR IGNORE INTO mailbox(tenant, user, mseq, ordinal, shard,"
                             " lane, message_id, event_type, size, body)"
                             " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st) {
    qim_bytes_free(&body);
    return sq_last_error(c);
  }
  sq_bind_u128(st, 1, e->tenant_id.v);
  sq_bind_u128(st, 2, e->user_id.v);
  sq_bind_u64(st, 3, e->mailbox_seq);
  sqlite3_bind_int(st, 4, e->event_ordinal);
  sqlite3_bind_int64(st, 5, b->shard);
  sqlite3_bind_int(st, 6, b->lane);
  sq_bind_id16(st, 7, e->coordinates.message_id.b);
  sqlite3_bind_int(st, 8, (int)e->event_type);
  sqlite3_bind_int64(st, 9, (sqlite3_int64)entry_size(e));
  sq_bind_blob(st, 10, body.p, body.n);
  rc = sq_run(c, st);
  qim_bytes_free(&body);
  return rc;
}

/* Adds chunk to an ascending chunk-id blob (which has room for it). */
static void applied_add(qim_bytes *applied, uint32_t chunk) {
  size_t i = 0;
  while (i < applied->n / 4 && chunk_at(applied->p, i) < chunk) i++;
  memmove(applied->p + 4 * i + 4, applied->p + 4 * i, applied->n - 4 * i);
  sq_chunk_put(applied->p + 4 * i, chunk);
  applied->n += 4;
}

static int write_progress(sq_conn *c, const qim_append_mailbox_batch *b, const qim_bytes *chunks,
                          const qim_bytes *applied) {
  sqlite3_stmt *st = sq_prep(
      c,
      "INSERT INTO dispatch_progress(dispatch_id, lane, shard, mseq, chunks, completed_at, applied,"
      " message_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(dispatch_id, lane) DO UPDATE SET"
      " chunks = excluded.chunks, completed_at = excluded.completed_at,"
      " applied = excluded.applied, message_id = coalesce(message_id, excluded.message_id)");
  if (!st) return sq_last_error(c);
  sq_bind_id16(st, 1, b->dispatch_id.b);
  sqlite3_bind_int(st, 2, b->lane);
  sqlite3_bind_int64(st, 3, b->shard);
  sq_bind_u64(st, 4, b->mailbox_seq);
  sq_bind_blob(st, 5, chunks->p, chunks->n);
  if (b->progress.has_completed_at) sq_bind_u64(st, 6, b->progress.completed_at);
  sq_bind_blob(st, 7, applied->p, applied->n);
  if (batch_message(b)) sq_bind_id16(st, 8, batch_message(b));
  return sq_run(c, st);
}

/* One batch, the shard's epoch already checked: its receipt in *out. */
static int append_one(sq_conn *c, const qim_append_mailbox_batch *b, qim_durability_receipt *out) {
  *out = (qim_durability_receipt){b->dispatch_id, b->lane, b->mailbox_seq};
  qim_bytes chunks = chunks_encode(b->progress.completed_chunks, b->progress.completed_chunk_count);
  stored_progress prev;
  int rc = read_progress(c, b, &chunks, &prev);
  if (rc == 1) {
    out->mailbox_seq = prev.mseq; /* a replay: the original receipt */
    rc = 0;
  } else if (rc == 0) {
    sqlite3_int64 before = sqlite3_total_changes64(c->db);
    for (size_t i = 0; rc == 0 && i < b->entry_count; i++) rc = insert_entry(c, b, &b->entries[i]);
    struct sq_unsettled *u = unsettled_of(c, b->shard, b->lane); /* what a replay ignored is not */
    u->entries += (uint32_t)(sqlite3_total_changes64(c->db) - before);
    u->batches++;
    if (!prev.found) prev.applied = (qim_bytes){qim_malloc(4), 0};
    applied_add(&prev.applied, b->chunk_id);
    if (rc == 0) rc = write_progress(c, b, &chunks, &prev.applied);
  }
  qim_bytes_free(&prev.applied);
  qim_bytes_free(&chunks);
  return rc;
}

static int advance_lane(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane,
                        uint64_t materialized, uint64_t floor);

static int append_exec(sq_conn *c, qim_store_req *base) {
  qim_store_mailbox_append_req *r = (void *)base;
  const qim_append_mailbox_batch *first = r->batch;
  qim_shard_epoch epoch;
  int rc = sq_shard_epoch(c, first->shard, &epoch);
  if (rc) return rc;
  if (epoch != r->owner_epoch) return qim_err_raise(QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  for (size_t i = 0; i < batch_count(r); i++) {
    qim_durability_receipt out;
    if ((rc = append_one(c, &r->batch[i], &out))) return rc; /* the savepoint undoes the others */
    /* The watermark must not pass a dispatch whose chunk is stored at another seq. */
    if (r->advance_to && out.mailbox_seq != r->batch[i].mailbox_seq)
      return qim_err_raise(QIM_E_MATERIALIZE_PROGRESS_CONFLICT);
    if (i == 0) r->out = out;
    if (r->out_receipts) r->out_receipts[i] = out;
  }
  return r->advance_to ? advance_lane(c, first->shard, first->lane, r->advance_to, 0) : 0;
}

const sq_op sq_op_mailbox_append = {"mailboxes.append", true, append_prepare,
                                    append_exec,        NULL, MATERIALIZE_ERRORS};

/* ---- progress ------------------------------------------------------------------------------- */

static int progress_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_progress_get_req *r = (void *)base;
  r->out = (qim_dispatch_progress){0};
  r->out_found = false;
  return 0;
}

static void progress_discard(qim_store_req *base) {
  qim_store_progress_get_req *r = (void *)base;
  qim_free(r->out.completed_chunks);
  r->out = (qim_dispatch_progress){0};
  r->out_found = false;
}

static int progress_exec(sq_conn *c, qim_store_req *base) {
  qim_store_progress_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT shard, chunks, completed_at FROM dispatch_progress"
                             " WHERE dispatch_id=? AND lane=?");
  if (!st) return sq_last_error(c);
  sq_bind_id16(st, 1, r->dispatch_id.b);
  sqlite3_bind_int(st, 2, r->lane);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc;
  qim_dispatch_progress *p = &r->out;
  p->dispatch_id = r->dispatch_id;
  p->lane = r->lane;
  p->shard = (qim_mailbox_shard_id)sq_col_u64(st, 0);
  const uint8_t *chunks = sqlite3_column_blob(st, 1);
  size_t n = (size_t)sqlite3_column_bytes(st, 1) / 4;
  p->completed_chunks = qim_malloc((n ? n : 1) * sizeof *p->completed_chunks);
  for (size_t i = 0; i < n; i++) p->completed_chunks[i] = chunk_at(chunks, i);
  p->completed_chunk_count = n;
  p->has_completed_at = sqlite3_column_type(st, 2) != SQLITE_NULL;
  p->completed_at = p->has_completed_at ? sq_col_u64(st, 2) : 0;
  r->out_found = true;
  return 0;
}

const sq_op sq_op_progress_get = {"mailboxes.progress_get", false,
                                  progress_prepare,         progress_exec,
                                  progress_discard,         MATERIALIZE_ERRORS};

/* ---- range ------------------------------------------------------------------------------------
 */

static int range_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_mailbox_range_req *r = (void *)base;
  r->out_entries = NULL;
  r->out_count = 0;
  r->out_has_more = false;
  return r->query.max_items > 0 ? 0 : -EINVAL;
}

static void range_discard(qim_store_req *base) {
  qim_store_mailbox_range_req *r = (void *)base;
  for (size_t i = 0; i < r->out_count; i++) qim_mailbox_entry_free(&r->out_entries[i]);
  qim_free(r->out_entries);
  r->out_entries = NULL;
  r->out_count = 0;
  r->out_has_more = false;
}

/* Decodes the current row onto the end of the output array. */
static int range_take_row(qim_store_mailbox_range_req *r, sqlite3_stmt *st, size_t *cap) {
  if (r->out_count == *cap) {
    *cap = *cap ? *cap * 2 : 16;
    r->out_entries = qim_realloc(r->out_entries, *cap * sizeof *r->out_entries);
  }
  const void *p = sqlite3_column_blob(st, 2);
  int rc = qim_mailbox_entry_decode(p, (size_t)sqlite3_column_bytes(st, 2),
                                    &r->out_entries[r->out_count]);
  if (rc) return qim_err_raise(QIM_E_MAILBOX_CORRUPT_ENTRY);
  r->out_count++;
  return 0;
}

static int watermark_row(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane,
                         qim_lane_watermark *out, uint64_t *settled);

/* A page being filled: whole event groups, bounded by max_items and max_bytes. */
typedef struct range_fill {
  size_t cap, group_start;
  uint64_t bytes, group_bytes, group_seq;
} range_fill;

/* Takes the rows of st (mseq, size, body in mailbox order) until the page is full:
 * 1 = full (out_has_more set), 0 = st ran out, or an error. An event group never spans
 * two statements: all ordinals of a seq are on the same side of the settled position. */
static int range_take(sq_conn *c, qim_store_mailbox_range_req *r, sqlite3_stmt *st, range_fill *f) {
  const qim_mailbox_range_query *q = &r->query;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    uint64_t seq = sq_col_u64(st, 0), size = sq_col_u64(st, 1);
    if (r->out_count == 0 || seq != f->group_seq) { /* a new group: the previous one is whole */
      f->bytes += f->group_bytes;
      f->group_start = r->out_count, f->group_seq = seq, f->group_bytes = 0;
    }
    size_t in_group = r->out_count - f->group_start + 1;
    bool over =
        r->out_count + 1 > q->max_items ||
        (q->max_bytes && f->group_start > 0 && f->bytes + f->group_bytes + size > q->max_bytes);
    if (over) {
      if (f->group_start == 0 && in_group > q->max_items)
        return qim_err_raise(QIM_E_MAILBOX_GROUP_TOO_LARGE);
      /* Drop the partial group; it starts the next page. */
      while (r->out_count > f->group_start) qim_mailbox_entry_free(&r->out_entries[--r->out_count]);
      r->out_has_more = true;
      return 1;
    }
    if ((rc = range_take_row(r, st, &f->cap))) return rc;
    f->group_bytes += size;
  }
  return rc;
}

/*
 * Whole event groups (all ordinals of one mailbox seq) in order, stopping before the
 * group that would pass max_items or max_bytes (0 = no byte bound). The first group is
 * always returned whole unless it alone has more than max_items entries, which is
 * GroupTooLarge: returning part of it would split the group. Settled entries come from
 * the per-user index, the rest from the user's lane (both in one read snapshot).
 */
static int range_exec(sq_conn *c, qim_store_req *base) {
  qim_store_mailbox_range_req *r = (void *)base;
  const qim_mailbox_range_query *q = &r->query;
  const qim_shard_config *cfg = &c->st->opt.shards;
  qim_mailbox_shard_id shard = qim_shard_of_user(cfg, q->tenant_id, q->user_id);
  qim_lane_id lane = qim_lane_of_user(cfg, q->tenant_id, q->user_id);
  qim_lane_watermark wm;
  uint64_t settled;
  int rc = watermark_row(c, shard, lane, &wm, &settled);
  if (rc) return rc;
  range_fill f = {0};
  if (q->after_seq < settled) {
    sqlite3_stmt *st = sq_prep(c,
                               "SELECT m.mseq, m.size, m.body FROM mailbox_index x"
                               " JOIN mailbox m ON m.rowid = x.entry WHERE x.tenant=? AND x.user=?"
                               " AND x.mseq > ? AND x.mseq <= ? ORDER BY x.mseq, x.ordinal");
    if (!st) return sq_last_error(c);
    sq_bind_u128(st, 1, q->tenant_id.v);
    sq_bind_u128(st, 2, q->user_id.v);
    sq_bind_u64(st, 3, q->after_seq);
    sq_bind_u64(st, 4, q->up_to_seq < settled ? q->up_to_seq : settled);
    if ((rc = range_take(c, r, st, &f))) return rc < 0 ? rc : 0;
  }
  if (q->up_to_seq <= settled) return 0;
  sqlite3_stmt *st = prep_lane(c,
                               "SELECT mseq, size, body FROM mailbox WHERE shard=? AND lane=?"
                               " AND mseq > ? AND mseq <= ? AND tenant=? AND user=?"
                               " ORDER BY mseq, ordinal",
                               shard, lane);
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 3, q->after_seq > settled ? q->after_seq : settled);
  sq_bind_u64(st, 4, q->up_to_seq);
  sq_bind_u128(st, 5, q->tenant_id.v);
  sq_bind_u128(st, 6, q->user_id.v);
  rc = range_take(c, r, st, &f);
  return rc < 0 ? rc : 0;
}

const sq_op sq_op_mailbox_range = {"mailboxes.range", false,         range_prepare,
                                   range_exec,        range_discard, MAILBOX_ERRORS};

/* ---- watermarks ------------------------------------------------------------------------------ */

/* The lane's watermark and, when settled is not NULL, how far it settled. */
static int watermark_row(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane,
                         qim_lane_watermark *out, uint64_t *settled) {
  sqlite3_stmt *st = prep_lane(
      c, "SELECT materialized, floor, settled FROM lane_watermarks WHERE shard=? AND lane=?", shard,
      lane);
  if (!st) return sq_last_error(c);
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  *out = (qim_lane_watermark){shard, lane, rc ? sq_col_u64(st, 0) : 0, rc ? sq_col_u64(st, 1) : 0};
  if (settled) *settled = rc ? sq_col_u64(st, 2) : 0;
  return 0;
}

static int watermark_get_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_watermark_get_req *r = (void *)base;
  return lane_valid(st, r->shard, r->lane) ? 0 : -EINVAL;
}

static int watermark_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_watermark_get_req *r = (void *)base;
  return watermark_row(c, r->shard, r->lane, &r->out, NULL);
}

const sq_op sq_op_watermark_get = {"mailboxes.watermark_get", false, watermark_get_prepare,
                                   watermark_get_exec,        NULL,  MATERIALIZE_ERRORS};

static int watermark_advance_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_watermark_advance_req *r = (void *)base;
  const qim_watermark_advance *a = &r->advance;
  return lane_valid(st, a->shard, a->lane) && a->floor <= a->materialized ? 0 : -EINVAL;
}

/* Removes the lane's entries (settled ones from the index too) and dispatch bookkeeping
 * below the floor. It erases nothing (no sq_note_erase), though entries carry inline
 * bodies: each is a copy of a body that lives on in history, and the delete that removes
 * that body notes the erase whose wipe takes the older copies too (sqlite_logs.c, trim). */
static int trim_lane(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane, uint64_t floor) {
  static const char *const sql[] = {
      "DELETE FROM mailbox_index WHERE (tenant, user, mseq, ordinal) IN"
      " (SELECT tenant, user, mseq, ordinal FROM mailbox WHERE shard=?1 AND lane=?2 AND mseq < ?3"
      " AND mseq <= (SELECT settled FROM lane_watermarks WHERE shard=?1 AND lane=?2))",
      "DELETE FROM mailbox WHERE shard=? AND lane=? AND mseq < ?",
      "DELETE FROM dispatch_progress WHERE shard=? AND lane=? AND mseq < ?",
  };
  for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
    sqlite3_stmt *st = prep_lane(c, sql[i], shard, lane);
    if (!st) return sq_last_error(c);
    sq_bind_u64(st, 3, floor);
    int rc = sq_run(c, st);
    if (rc) return rc;
  }
  return 0;
}

/* Puts the lane's entries in (from, to] into the per-user index, in index order so each
 * user's page is written once for all of them. */
static int settle_lane(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane, uint64_t from,
                       uint64_t to) {
  sqlite3_stmt *st =
      prep_lane(c,
                "INSERT OR IGNORE INTO mailbox_index(tenant, user, mseq, ordinal, entry)"
                " SELECT tenant, user, mseq, ordinal, rowid FROM mailbox"
                " WHERE shard=? AND lane=? AND mseq > ? AND mseq <= ?"
                " ORDER BY tenant, user, mseq, ordinal",
                shard, lane);
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 3, from);
  sq_bind_u64(st, 4, to);
  return sq_run(c, st);
}

/* Settling pays when a pass puts several entries on each user's page, as a group's
 * messages do; its stall grows with its entries. So a lane settles after settle_entries
 * entries, or after settle_entries / 64 batches of few entries: one-to-one messages (two
 * entries each, rarely two on one user's page) gain little from waiting, and in two runs
 * on a grown store with passes of 16,384 of them p99 was 87-88 ms against 34-36 (noisy,
 * but not worth the risk for no gain). */
static bool settle_due(const sq_store *st, const struct sq_unsettled *u) {
  uint32_t batches = st->opt.settle_entries / 64;
  return u->entries >= st->opt.settle_entries || u->batches >= (batches ? batches : 1);
}

/* Forward-only: a lower value (a late or replayed advance) changes nothing. Settles the
 * lane up to the new watermark when settle_due (entries above the watermark may still be
 * joined by their dispatch's other chunks). */
static int advance_lane(sq_conn *c, qim_mailbox_shard_id shard, qim_lane_id lane,
                        uint64_t materialized, uint64_t floor) {
  qim_lane_watermark cur;
  uint64_t settled;
  int rc = watermark_row(c, shard, lane, &cur, &settled);
  if (rc) return rc;
  if (materialized < cur.materialized) materialized = cur.materialized;
  if (floor < cur.floor) floor = cur.floor;
  struct sq_unsettled *unsettled = unsettled_of(c, shard, lane);
  uint64_t settle_to = settle_due(c->st, unsettled) && materialized > settled ? materialized : settled;
  if (materialized == cur.materialized && floor == cur.floor && settle_to == settled) return 0;
  if (settle_to > settled && (rc = settle_lane(c, shard, lane, settled, settle_to))) return rc;
  sqlite3_stmt *st = prep_lane(c,
                               "INSERT INTO lane_watermarks(shard, lane, materialized, floor, settled)"
                               " VALUES(?, ?, ?, ?, ?) ON CONFLICT(shard, lane) DO UPDATE SET"
                               " materialized = excluded.materialized, floor = excluded.floor,"
                               " settled = excluded.settled",
                               shard, lane);
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 3, materialized);
  sq_bind_u64(st, 4, floor);
  sq_bind_u64(st, 5, settle_to);
  if ((rc = sq_run(c, st))) return rc;
  if (settle_to > settled) *unsettled = (struct sq_unsettled){0};
  return floor > cur.floor ? trim_lane(c, shard, lane, floor) : 0;
}

static int watermark_advance_exec(sq_conn *c, qim_store_req *base) {
  qim_store_watermark_advance_req *r = (void *)base;
  const qim_watermark_advance *a = &r->advance;
  qim_shard_epoch epoch;
  int rc = sq_shard_epoch(c, a->shard, &epoch);
  if (rc) return rc;
  if (epoch != r->owner_epoch) return qim_err_raise(QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  return advance_lane(c, a->shard, a->lane, a->materialized, a->floor);
}

const sq_op sq_op_watermark_advance = {
    "mailboxes.watermark_advance", true, watermark_advance_prepare,
    watermark_advance_exec,        NULL, MATERIALIZE_ERRORS};

/* ---- wiping a message's content ------------------------------------------------------------ */

/* Re-encodes one entry without its content; 1 when it changed, 0 when it had none. */
static int wipe_entry(const void *p, size_t n, qim_bytes *out) {
  qim_mailbox_entry e;
  int rc = qim_mailbox_entry_decode(p, n, &e);
  if (rc) return qim_err_raise(QIM_E_MAILBOX_CORRUPT_ENTRY);
  bool had = e.has_content || e.body_included;
  qim_message_content_free(&e.content);
  e.has_content = false;
  e.body_included = false;
  rc = had ? qim_mailbox_entry_encode(&e, out) : 0;
  qim_mailbox_entry_free(&e);
  return rc < 0 ? rc : had;
}

/* The message's entries are where its dispatches' progress rows say (schema version 5). */
int sq_mailbox_wipe_message(sq_conn *c, const qim_message_id *message_id) {
  sqlite3_stmt *sel = sq_prep(c,
                              "SELECT m.rowid, m.body FROM dispatch_progress p JOIN mailbox m"
                              " ON m.shard = p.shard AND m.lane = p.lane AND m.mseq = p.mseq"
                              " WHERE p.message_id = ?1 AND m.message_id = ?1");
  sqlite3_stmt *upd = sq_prep(c, "UPDATE mailbox SET body=?, size=0 WHERE rowid=?");
  if (!sel || !upd) return sq_last_error(c);
  sq_bind_id16(sel, 1, message_id->b);
  int rc;
  /* Updating rows of the scanned table is safe here: no column of the index being
   * scanned changes. */
  while ((rc = sq_step(c, sel)) == 1) {
    qim_bytes body = {0};
    rc = wipe_entry(sqlite3_column_blob(sel, 1), (size_t)sqlite3_column_bytes(sel, 1), &body);
    if (rc <= 0) {
      if (rc < 0) return rc;
      continue;
    }
    sqlite3_reset(upd);
    sq_bind_blob(upd, 1, body.p, body.n);
    sqlite3_bind_int64(upd, 2, sqlite3_column_int64(sel, 0));
    rc = sq_run(c, upd);
    qim_bytes_free(&body);
    if (rc) return rc;
  }
  return rc;
}
