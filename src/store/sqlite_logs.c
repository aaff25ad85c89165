/*
 * sqlite_logs.c — log streams in the SQLite backend: the outbox and one mailbox dispatch
 * stream per shard, with dense store-assigned offsets, idempotent appends, consumer
 * offsets, retention trimming and redaction.
 *
 * Offsets start at 1 (so 0 can mean "nothing yet" for consumers and "no protection" for
 * trims, and no mailbox seq is 0); log_streams.next_offset is the dense counter and
 * log_streams.trim the lowest offset still readable. A record's rowid is its position
 * (sq_log_pos), so a stream is one run of the table's rows. The idempotency key has a
 * unique index per stream, so a repeated key is found before anything is written.
 */
#include <errno.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"
#include "store/sqlite_int.h"

#define LOG_ERRORS                                                    \
  QIM_E_COMMIT_LOG_UNAVAILABLE, QIM_E_COMMIT_LOG_TRANSACTION_ABORTED, \
      QIM_E_COMMIT_LOG_PUBLICATION_NOT_DURABLE

/* (next_offset, trim) of a stream; (1, 0) when it was never written. */
static int stream_state(sq_conn *c, int64_t stream, uint64_t *next, uint64_t *trim) {
  sqlite3_stmt *st = sq_prep(c, "SELECT next_offset, trim FROM log_streams WHERE stream=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, stream);
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  *next = rc ? sq_col_u64(st, 0) : 1;
  *trim = rc ? sq_col_u64(st, 1) : 0;
  return 0;
}

/* The first position of `key` in the stream, if any: 1 found, 0 not, <0 error. */
static int find_key(sq_conn *c, int64_t stream, const uint8_t key[16], uint64_t *offset,
                    qim_shard_epoch *epoch) {
  sqlite3_stmt *st = sq_prep(c, "SELECT pos, epoch FROM log_records WHERE stream=? AND key=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, stream);
  sq_bind_id16(st, 2, key);
  int rc = sq_step(c, st);
  if (rc == 1) {
    *offset = sq_log_pos_offset(sqlite3_column_int64(st, 0));
    *epoch = (qim_shard_epoch)sq_col_u64(st, 1);
  }
  return rc;
}

/* Allocates the next dense offset of the stream. A read and an upsert, not one upsert
 * RETURNING the value: SQLite 3.40 buffers a RETURNING statement's rows in a temporary
 * B-tree, created and freed per call (~5 % of the writer thread's samples in one-to-one
 * load, most of it allocation). */
static int next_offset(sq_conn *c, int64_t stream, uint64_t *offset) {
  uint64_t trim;
  int rc = stream_state(c, stream, offset, &trim);
  if (rc) return rc;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO log_streams(stream, next_offset, trim) VALUES(?, ?, 0)"
                             " ON CONFLICT(stream) DO UPDATE SET next_offset = excluded.next_offset");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, stream);
  sq_bind_u64(st, 2, *offset + 1);
  return sq_run(c, st);
}

int sq_log_append_one(sq_conn *c, qim_log_stream stream, const uint8_t key[16],
                      const qim_bytes *payload, bool fence, uint64_t *offset,
                      qim_shard_epoch *epoch, bool *existed) {
  int64_t sid = sq_stream_id(stream);
  *existed = false;
  int rc = key ? find_key(c, sid, key, offset, epoch) : 0;
  if (rc) {
    *existed = rc == 1;
    return rc < 0 ? rc : 0;
  }
  *epoch = 0;
  if (stream.kind == QIM_LOG_STREAM_MAILBOX_DISPATCH) {
    rc = sq_shard_epoch(c, stream.shard, epoch);
    if (rc) return rc;
  }
  rc = next_offset(c, sid, offset);
  if (rc) return rc;
  /* A dispatch offset is the low 40 bits of every MailboxSeq made from it; every offset
   * is the low 40 bits of its row (sq_log_pos). */
  _Static_assert(QIM_MAILBOX_OFFSET_MAX == SQ_LOG_OFFSET_MAX, "a dispatch offset fits its row");
  if (*offset > SQ_LOG_OFFSET_MAX) return -EOVERFLOW;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO log_records(pos, stream, key, epoch, fence, payload)"
                             " VALUES(?, ?, ?, ?, ?, ?)");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sq_log_pos(sid, *offset));
  sqlite3_bind_int64(st, 2, sid);
  if (key) sq_bind_id16(st, 3, key);
  sqlite3_bind_int(st, 4, *epoch);
  sqlite3_bind_int(st, 5, fence);
  sq_bind_blob(st, 6, payload ? payload->p : NULL, payload ? payload->n : 0);
  return sq_run(c, st);
}

int sq_log_payload_at(sq_conn *c, qim_log_stream stream, uint64_t offset, qim_bytes *out) {
  if (offset > SQ_LOG_OFFSET_MAX) return -ENOENT;
  sqlite3_stmt *st = sq_prep(c, "SELECT payload FROM log_records WHERE pos=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sq_log_pos(sq_stream_id(stream), offset));
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  sq_col_bytes(st, 0, out);
  return 0;
}

static int set_consumer(sq_conn *c, const char *consumer, int64_t stream, uint64_t offset) {
  sqlite3_stmt *st =
      sq_prep(c,
              "INSERT INTO log_consumers(consumer, stream, offset) VALUES(?, ?, ?)"
              " ON CONFLICT(consumer, stream) DO UPDATE SET offset = excluded.offset");
  if (!st) return sq_last_error(c);
  sq_bind_text(st, 1, consumer);
  sqlite3_bind_int64(st, 2, stream);
  sq_bind_u64(st, 3, offset);
  return sq_run(c, st);
}

/* ---- append -------------------------------------------------------------------------------- */

static int append_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_append_req *r = (void *)base;
  if (r->append_count && !r->appends) return -EINVAL;
  if (!r->append_count && !r->has_consumer) return -EINVAL;
  if (r->has_consumer && (!r->consumer || !sq_stream_valid(st, r->consumer_stream))) return -EINVAL;
  for (size_t i = 0; i < r->append_count; i++) {
    const qim_store_log_append *a = &r->appends[i];
    if (!sq_stream_valid(st, a->stream) || (a->payload.n && !a->payload.p)) return -EINVAL;
  }
  return 0;
}

static int append_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_append_req *r = (void *)base;
  for (size_t i = 0; i < r->append_count; i++) {
    qim_store_log_append *a = &r->appends[i];
    a->out_position.stream = a->stream;
    int rc = sq_log_append_one(c, a->stream, a->key, &a->payload, false, &a->out_position.offset,
                               &a->out_epoch, &a->out_existed);
    if (rc) return rc;
  }
  if (!r->has_consumer) return 0;
  return set_consumer(c, r->consumer, sq_stream_id(r->consumer_stream), r->consumer_offset);
}

const sq_op sq_op_log_append = {"log.append", true, append_prepare, append_exec, NULL, LOG_ERRORS};

/* ---- read ------------------------------------------------------------------------------------ */

static int read_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_read_req *r = (void *)base;
  r->out_records = NULL;
  r->out_count = 0;
  return sq_stream_valid(st, r->stream) && r->max > 0 ? 0 : -EINVAL;
}

static void read_discard(qim_store_req *base) {
  qim_store_log_read_free((qim_store_log_read_req *)base);
}

static void read_row(sqlite3_stmt *st, qim_store_log_record *rec) {
  rec->offset = sq_log_pos_offset(sqlite3_column_int64(st, 0));
  sq_col_id16(st, 1, rec->key); /* zeros for a fence */
  rec->epoch = (qim_shard_epoch)sq_col_u64(st, 2);
  rec->fence = sqlite3_column_int(st, 3) != 0;
  sq_col_bytes(st, 4, &rec->payload);
}

static int read_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_read_req *r = (void *)base;
  int64_t sid = sq_stream_id(r->stream);
  r->out_records = NULL;
  r->out_count = 0;
  int rc = stream_state(c, sid, &r->out_end, &r->out_trim);
  if (rc) return rc;
  if (r->from < r->out_trim) return qim_err_raise(QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  if (r->from > SQ_LOG_OFFSET_MAX) return 0; /* past every offset a record can have */
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT pos, key, epoch, fence, payload FROM log_records"
                             " WHERE pos >= ? AND pos < ? ORDER BY pos LIMIT ?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sq_log_pos(sid, r->from));
  sqlite3_bind_int64(st, 2, sq_log_pos_end(sid));
  sqlite3_bind_int64(st, 3, r->max);
  size_t cap = 0;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->out_count == cap) {
      cap = cap ? cap * 2 : 16;
      r->out_records = qim_realloc(r->out_records, cap * sizeof *r->out_records);
    }
    qim_store_log_record *rec = &r->out_records[r->out_count++];
    *rec = (qim_store_log_record){0};
    read_row(st, rec);
  }
  return rc;
}

const sq_op sq_op_log_read = {"log.read", false, read_prepare, read_exec, read_discard, LOG_ERRORS};

/* ---- consumers ------------------------------------------------------------------------------ */

static int consumer_get_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_consumer_get_req *r = (void *)base;
  return r->consumer && sq_stream_valid(st, r->stream) ? 0 : -EINVAL;
}

static int consumer_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_consumer_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "SELECT offset FROM log_consumers WHERE consumer=? AND stream=?");
  if (!st) return sq_last_error(c);
  sq_bind_text(st, 1, r->consumer);
  sqlite3_bind_int64(st, 2, sq_stream_id(r->stream));
  int rc = sq_step(c, st);
  r->out_offset = rc == 1 ? sq_col_u64(st, 0) : 0;
  return rc < 0 ? rc : 0;
}

const sq_op sq_op_consumer_get = {"log.consumer_get", false, consumer_get_prepare,
                                  consumer_get_exec,  NULL,  LOG_ERRORS};

static int consumer_set_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_consumer_set_req *r = (void *)base;
  return r->consumer && sq_stream_valid(st, r->stream) ? 0 : -EINVAL;
}

static int consumer_set_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_consumer_set_req *r = (void *)base;
  return set_consumer(c, r->consumer, sq_stream_id(r->stream), r->offset);
}

const sq_op sq_op_consumer_set = {"log.consumer_set", true, consumer_set_prepare,
                                  consumer_set_exec,  NULL, LOG_ERRORS};

/* ---- trim and redact ---------------------------------------------------------------------------
 */

static int trim_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_trim_req *r = (void *)base;
  return sq_stream_valid(st, r->stream) ? 0 : -EINVAL;
}

/* The lowest committed consumer offset of the stream, or UINT64_MAX when none. */
static int lowest_consumer(sq_conn *c, int64_t stream, uint64_t *out) {
  sqlite3_stmt *st = sq_prep(c, "SELECT min(offset) FROM log_consumers WHERE stream=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, stream);
  return sq_step_u64_or_max(c, st, out);
}

static int trim_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_trim_req *r = (void *)base;
  int64_t sid = sq_stream_id(r->stream);
  bool outbox = r->stream.kind == QIM_LOG_STREAM_OUTBOX;
  uint64_t next = 1, trim = 0, consumer = UINT64_MAX, outboxed = UINT64_MAX;
  int rc = stream_state(c, sid, &next, &trim);
  if (rc == 0) rc = lowest_consumer(c, sid, &consumer);
  if (rc == 0 && outbox) rc = sq_intents_lowest_outboxed(c, &outboxed);
  if (rc) return rc;
  uint64_t limit = r->below;
  if (r->protect && r->protect < limit) limit = r->protect;
  if (consumer < limit) limit = consumer;
  if (outboxed < limit) limit = outboxed;
  if (next < limit) limit = next;
  r->out_trim = trim;
  if (limit <= trim) return 0; /* the trim point never moves back */
  sqlite3_stmt *st = sq_prep(c, "DELETE FROM log_records WHERE pos >= ? AND pos < ?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sq_log_pos(sid, 0));
  sqlite3_bind_int64(st, 2, sq_log_pos(sid, limit)); /* limit <= next_offset <= 2^40 */
  if ((rc = sq_run(c, st))) return rc;
  /* A trim erases nothing (no sq_note_erase): a trimmed record's body, outbox or dispatch,
   * is a copy of one that lives on in history. Deleting that message wipes every copy still
   * held and notes its own erase, and the wipe that erase owes the files takes every older
   * frame or journal record with it, the trimmed copy's among them. */
  st = sq_prep(c,
               "INSERT INTO log_streams(stream, next_offset, trim) VALUES(?, ?, ?)"
               " ON CONFLICT(stream) DO UPDATE SET trim = excluded.trim");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sid);
  sq_bind_u64(st, 2, next);
  sq_bind_u64(st, 3, limit);
  if ((rc = sq_run(c, st))) return rc;
  r->out_trim = limit;
  return 0;
}

const sq_op sq_op_log_trim = {"log.trim", true, trim_prepare, trim_exec, NULL, LOG_ERRORS};

static int redact_prepare(const sq_store *st, qim_store_req *base) {
  qim_store_log_redact_req *r = (void *)base;
  if (!sq_stream_valid(st, r->position.stream) || (r->payload.n && !r->payload.p)) return -EINVAL;
  return 0;
}

static int redact_exec(sq_conn *c, qim_store_req *base) {
  qim_store_log_redact_req *r = (void *)base;
  if (r->position.offset > SQ_LOG_OFFSET_MAX)
    return qim_err_raise(QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  sqlite3_stmt *st = sq_prep(c, "UPDATE log_records SET payload=? WHERE pos=?");
  if (!st) return sq_last_error(c);
  sq_bind_blob(st, 1, r->payload.p, r->payload.n);
  sqlite3_bind_int64(st, 2, sq_log_pos(sq_stream_id(r->position.stream), r->position.offset));
  int rc = sq_run(c, st);
  if (rc) return rc;
  sq_note_erase(c);
  /* Absent means trimmed (or never written): either way the position is gone. */
  return sq_changes(c) ? 0 : qim_err_raise(QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
}

const sq_op sq_op_log_redact = {"log.redact", true, redact_prepare, redact_exec, NULL, LOG_ERRORS};

/* ---- wiping one message's body (history.set_state / expire) -------------------------------- */

/* Rewrites one record's payload through `drop` (decode, drop the body, encode). Absent
 * records (trimmed, never written) and records whose body is already gone are left alone. */
static int wipe_record(sq_conn *c, int64_t sid, const uint8_t key[16],
                       int (*drop)(const void *p, size_t n, qim_bytes *out)) {
  sqlite3_stmt *st = sq_prep(c, "SELECT pos, payload FROM log_records WHERE stream=? AND key=?");
  if (!st) return sq_last_error(c);
  sqlite3_bind_int64(st, 1, sid);
  sq_bind_id16(st, 2, key);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc;
  sqlite3_int64 pos = sqlite3_column_int64(st, 0);
  qim_bytes out = {0};
  rc = drop(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), &out);
  if (rc) return rc == QIM_AGAIN ? 0 : rc; /* QIM_AGAIN: nothing to drop */
  st = sq_prep(c, "UPDATE log_records SET payload=? WHERE pos=?");
  if (st) {
    sq_bind_blob(st, 1, out.p, out.n);
    sqlite3_bind_int64(st, 2, pos);
    rc = sq_run(c, st);
  } else {
    rc = sq_last_error(c);
  }
  qim_bytes_free(&out);
  return rc;
}

static bool content_has_body(const qim_message_content *m) {
  return m->payload_or_ciphertext.n > 0 || m->has_media_metadata;
}

/* A CommittedEnvelope carries the body twice (intent.record and record). */
static int drop_envelope(const void *p, size_t n, qim_bytes *out) {
  qim_committed_envelope e;
  if (qim_committed_envelope_decode(p, n, &e))
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  int rc = QIM_AGAIN;
  if (content_has_body(&e.intent.record.content) || content_has_body(&e.record.content)) {
    sq_content_wipe(&e.intent.record.content);
    sq_content_wipe(&e.record.content);
    rc = qim_committed_envelope_encode(&e, out);
  }
  qim_committed_envelope_free(&e);
  return rc;
}

static int drop_dispatch(const void *p, size_t n, qim_bytes *out) {
  qim_group_dispatch d;
  if (qim_group_dispatch_decode(p, n, &d))
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  int rc = QIM_AGAIN;
  if (content_has_body(&d.content)) {
    sq_content_wipe(&d.content);
    rc = qim_group_dispatch_encode(&d, out);
  }
  qim_group_dispatch_free(&d);
  return rc;
}

int sq_logs_wipe_message(sq_conn *c, const qim_message_id *message_id) {
  int rc = wipe_record(c, sq_stream_id((qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0}), message_id->b,
                       drop_envelope);
  /* A dispatch exists only for shards that had recipients, keyed by its message's id;
   * one appended before that key (by its DispatchId) is found by that. */
  for (uint32_t shard = 0; rc == 0 && shard < c->st->opt.shards.shard_count; shard++) {
    int64_t sid = sq_stream_id((qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, shard});
    qim_dispatch_id id = qim_dispatch_id_make(message_id, shard);
    rc = wipe_record(c, sid, message_id->b, drop_dispatch);
    if (rc == 0) rc = wipe_record(c, sid, id.b, drop_dispatch);
  }
  return rc;
}
