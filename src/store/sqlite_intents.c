/*
 * sqlite_intents.c — commit intents in the SQLite backend: reserve (seq allocation and
 * the frozen group snapshot), the forward-only state machine with each step's effect in
 * the same transaction, the one-transaction commit of a fresh key (reserve with `commit`:
 * the same steps inside the reserve), load, the in-flight listing and the dedupe window.
 *
 * An intent row keeps the canonical CommitIntent in `body` while it is in flight; the
 * columns beside it (state, seq, order, coordinates) are what queries and the
 * COMMITTED form need, so committing drops the body and keeps only the CommittedMessage.
 * `content_hash` (BLAKE3 of the canonical encoding of conversation + content) detects a
 * ClientMessageId reused with different content even after the body is gone; wiping a
 * message's body clears the hash too, since a hash of deleted content is a fingerprint
 * of it.
 */
#include <blake3.h>
#include <errno.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/sqlite_int.h"

#define INTENT_ERRORS \
  QIM_E_MESSAGE_STORE_UNAVAILABLE, QIM_E_MESSAGE_STORE_UNAVAILABLE, QIM_E_MESSAGE_STORE_UNAVAILABLE
/* ConversationSeq stays below this (the Tinode SDK uses larger values locally). */
#define SEQ_LIMIT 0x0FFFFFFFu

static void bind_key(sqlite3_stmt *st, int first, const qim_commit_key *k) {
  sq_bind_u128(st, first, k->tenant_id.v);
  sq_bind_u128(st, first + 1, k->sender_id.v);
  sq_bind_id16(st, first + 2, k->client_message_id.b);
}

static int content_hash(const qim_commit_intent *p, uint8_t out[32]) {
  qim_message_record probe = {0};
  probe.coordinates.conversation_id = p->coordinates.conversation_id;
  probe.content = p->record.content; /* borrowed: not freed below */
  qim_bytes enc;
  int rc = qim_message_record_encode(&probe, &enc);
  if (rc) return rc;
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, enc.p, enc.n);
  blake3_hasher_finalize(&h, out, 32);
  qim_bytes_free(&enc);
  return 0;
}

static int decode_intent(sqlite3_stmt *st, int col, qim_commit_state state,
                         qim_commit_intent *out) {
  const void *p = sqlite3_column_blob(st, col);
  int rc = qim_commit_intent_decode(p, (size_t)sqlite3_column_bytes(st, col), out);
  if (rc) return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  out->state = state; /* the column is authoritative; the body keeps its reserve-time state */
  return 0;
}

/* Columns shared by every intent lookup, in this order. */
#define INTENT_COLUMNS \
  "state, body, message_id, conv, seq, last_activity, ord, outbox_offset, content_hash"
enum {
  COL_STATE,
  COL_BODY,
  COL_MESSAGE_ID,
  COL_CONV,
  COL_SEQ,
  COL_LAST_ACTIVITY,
  COL_ORD,
  COL_OUTBOX,
  COL_HASH
};

static qim_committed_message committed_from_row(sqlite3_stmt *st, const qim_commit_key *k) {
  qim_committed_message m = {0};
  m.client_message_id = k->client_message_id;
  sq_col_id16(st, COL_MESSAGE_ID, m.coordinates.message_id.b);
  m.coordinates.conversation_id.v = sq_col_u128(st, COL_CONV);
  m.coordinates.conversation_seq = sq_col_u64(st, COL_SEQ);
  sq_col_id16(st, COL_LAST_ACTIVITY, m.coordinates.last_activity_id.b);
  return m;
}

/* Looks the key up: 1 = found with the statement on its row, 0 = absent, <0 = error. */
static int find_intent(sq_conn *c, const qim_commit_key *k, sqlite3_stmt **out) {
  sqlite3_stmt *st = sq_prep(c, "SELECT " INTENT_COLUMNS
                                " FROM intents"
                                " WHERE tenant=? AND sender=? AND cmid=?");
  if (!st) return sq_last_error(c);
  bind_key(st, 1, k);
  *out = st;
  return sq_step(c, st);
}

/* ---- reserve ------------------------------------------------------------------------------ */

static int reserve_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_intent_reserve_req *r = (void *)base;
  r->out = (qim_reserve_result){0};
  r->out_order = 0;
  r->out_committed_here = false;
  r->out_position = (qim_log_position){{QIM_LOG_STREAM_OUTBOX, 0}, 0};
  /* Hashed here, on the submitting thread: the one writer thread has enough to do. */
  return r->proposal ? content_hash(r->proposal, r->content_hash_) : -EINVAL;
}

static void reserve_discard(qim_store_req *base) {
  qim_store_intent_reserve_req *r = (void *)base;
  qim_commit_intent_free(&r->out.intent);
  r->out = (qim_reserve_result){0};
  r->out_committed_here = false;
}

/* A key seen before: EXISTING / COMMITTED, or ClientMessageIdReused. */
static int reserve_existing(qim_store_intent_reserve_req *r, sqlite3_stmt *st,
                            const uint8_t hash[32]) {
  const qim_commit_key *k = &r->proposal->key;
  const void *stored = sqlite3_column_blob(st, COL_HASH);
  if (stored && sqlite3_column_bytes(st, COL_HASH) == 32 && memcmp(stored, hash, 32) != 0)
    return qim_err_raise(QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
  qim_commit_state state = (qim_commit_state)sqlite3_column_int(st, COL_STATE);
  r->out_order = sq_col_u64(st, COL_ORD);
  if (state == QIM_COMMIT_STATE_COMMITTED) {
    r->out.kind = QIM_RESERVE_RESULT_COMMITTED;
    r->out.committed = committed_from_row(st, k);
    return 0;
  }
  r->out.kind = QIM_RESERVE_RESULT_EXISTING;
  return decode_intent(st, COL_BODY, state, &r->out.intent);
}

typedef struct conv_position {
  qim_conversation_seq latest_seq;
  uint64_t next_order;
  qim_membership_version version;
  uint32_t member_count;
} conv_position;

static int conv_position_get(sq_conn *c, const qim_commit_intent *p, conv_position *out) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT latest_seq, next_order, membership_version, member_count"
                             " FROM conversations WHERE tenant=? AND conv=? AND NOT deleted");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, p->key.tenant_id, p->coordinates.conversation_id);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  *out = (conv_position){sq_col_u64(st, 0), sq_col_u64(st, 1), sq_col_u64(st, 2),
                         (uint32_t)sq_col_u64(st, 3)};
  return 0;
}

/* Moves the conversation's counters past the reserved position. Only a message is
 * activity: a Control (receipt, deletion, membership notice) leaves touched_at and
 * last_activity as they are, so reading a conversation does not reorder the session list. */
static int conv_position_take(sq_conn *c, const qim_commit_intent *in, qim_conversation_seq seq, bool control) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE conversations SET latest_seq=?3, next_order=next_order+1,"
                             " touched_at=CASE WHEN ?6 THEN touched_at ELSE max(touched_at, ?4) END,"
                             " last_activity=CASE WHEN NOT ?6 AND ?5 > last_activity THEN ?5"
                             " ELSE last_activity END WHERE tenant=?1 AND conv=?2");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, in->key.tenant_id, in->coordinates.conversation_id);
  sq_bind_u64(st, 3, seq);
  sq_bind_u64(st, 4, in->record.created_at);
  sq_bind_id16(st, 5, in->coordinates.last_activity_id.b);
  sq_bind_u64(st, 6, control);
  return sq_run(c, st);
}

/* Freezes the group snapshot into the intent: version, count and target shards now. */
static int freeze_snapshot(sq_conn *c, qim_commit_intent *in, const conv_position *pos) {
  qim_delivery_audience *a = &in->delivery.audience;
  if (a->kind != QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT) return 0;
  qim_free(a->group.target_shards);
  a->group.target_shards = NULL;
  a->group.target_shard_count = 0;
  a->group.group_id.v = in->coordinates.conversation_id.v;
  a->group.membership_version = pos->version;
  a->group.member_count = pos->member_count;
  return sq_conv_target_shards(c, in->key.tenant_id, in->coordinates.conversation_id,
                               &a->group.target_shards, &a->group.target_shard_count);
}

/* Writes the intent row: Reserved with its body, or (the one-transaction commit) already in
 * its COMMITTED form, as the advance steps would have left it. */
static int insert_intent(sq_conn *c, const qim_commit_intent *in, uint64_t order,
                         const uint8_t hash[32], uint64_t committed_at, uint64_t outbox_offset) {
  bool committed = in->state == QIM_COMMIT_STATE_COMMITTED;
  qim_bytes body = {0};
  int rc = committed ? 0 : qim_commit_intent_encode(in, &body);
  if (rc) return rc;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO intents(tenant, sender, cmid, conv, seq, ord, state,"
                             " message_id, last_activity, content_hash, created_at, body,"
                             " committed_at, outbox_offset)"
                             " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (st) {
    bind_key(st, 1, &in->key);
    sq_bind_u128(st, 4, in->coordinates.conversation_id.v);
    sq_bind_u64(st, 5, in->coordinates.conversation_seq);
    sq_bind_u64(st, 6, order);
    sqlite3_bind_int(st, 7, (int)in->state);
    sq_bind_id16(st, 8, in->coordinates.message_id.b);
    sq_bind_id16(st, 9, in->coordinates.last_activity_id.b);
    sq_bind_blob(st, 10, hash, 32);
    sq_bind_u64(st, 11, in->record.created_at);
    if (!committed) sq_bind_blob(st, 12, body.p, body.n);
    if (committed) sq_bind_u64(st, 13, committed_at);
    if (committed) sq_bind_u64(st, 14, outbox_offset);
    rc = sq_run(c, st);
  } else {
    rc = sq_last_error(c);
  }
  qim_bytes_free(&body);
  return rc;
}

static int commit_in_reserve(sq_conn *c, qim_store_intent_reserve_req *r, const uint8_t hash[32]);

/* A key never seen: allocate the position, freeze the snapshot, store as Reserved. */
static int reserve_fresh(sq_conn *c, qim_store_intent_reserve_req *r, const uint8_t hash[32]) {
  const qim_commit_intent *p = r->proposal;
  conv_position pos = {0};
  int rc = conv_position_get(c, p, &pos);
  if (rc) return rc;
  bool control = p->record.content.message_type == QIM_MESSAGE_TYPE_CONTROL;
  /* A Control message is the system speaking, e.g. about a leaver: no sender checks. */
  if (!control) {
    bool may;
    rc = sq_member_may_send(c, p->key.tenant_id, p->coordinates.conversation_id, p->key.sender_id,
                            r->authorize, &may);
    if (rc) return rc;
    if (!may) return qim_err_raise(QIM_E_COMMIT_PERMISSION_DENIED);
  }
  qim_conversation_seq seq = control ? pos.latest_seq : pos.latest_seq + 1;
  if (seq >= SEQ_LIMIT) return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  if ((rc = conv_position_take(c, p, seq, control))) return rc;
  if (!control && r->sender_read &&
      (rc = sq_member_read_up_to(c, p->key.tenant_id, p->coordinates.conversation_id,
                                 p->key.sender_id, seq)))
    return rc;
  qim_commit_intent *in = &r->out.intent;
  qim_commit_intent_copy(in, p);
  in->state = QIM_COMMIT_STATE_RESERVED;
  in->coordinates.conversation_seq = seq;
  in->record.coordinates = in->coordinates;
  if ((rc = freeze_snapshot(c, in, &pos))) return rc;
  r->out.kind = QIM_RESERVE_RESULT_FRESH;
  r->out_order = pos.next_order;
  if (r->commit && (rc = commit_in_reserve(c, r, hash)) <= 0) return rc;
  return insert_intent(c, in, pos.next_order, hash, 0, 0);
}

static int reserve_exec(sq_conn *c, qim_store_req *base) {
  qim_store_intent_reserve_req *r = (void *)base;
  const qim_commit_intent *p = r->proposal;
  if (!qim_client_message_id_is_valid(&p->key.client_message_id))
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_CLIENT_MESSAGE_ID);
  sqlite3_stmt *st;
  int rc = find_intent(c, &p->key, &st);
  if (rc < 0) return rc;
  return rc ? reserve_existing(r, st, r->content_hash_) : reserve_fresh(c, r, r->content_hash_);
}

const sq_op sq_op_intent_reserve = {"intents.reserve", true,         reserve_prepare, reserve_exec,
                                    reserve_discard,   INTENT_ERRORS};

/* ---- advance ------------------------------------------------------------------------------ */

static int advance_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_intent_advance_req *r = (void *)base;
  r->out_position = (qim_log_position){{QIM_LOG_STREAM_OUTBOX, 0}, 0};
  return r->to <= QIM_COMMIT_STATE_COMMITTED ? 0 : -EINVAL;
}

/* RECORDED: the intent's record becomes the history row (Control messages have none). */
static int step_recorded(sq_conn *c, const qim_commit_intent *in) {
  const qim_message_record *rec = &in->record;
  if (rec->content.message_type == QIM_MESSAGE_TYPE_CONTROL) return 0;
  qim_bytes body;
  int rc = qim_message_record_encode(rec, &body);
  if (rc) return rc;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO records(tenant, conv, seq, message_id, sender, cmid,"
                             " message_type, state, retention, created_at, updated_at, size, body)"
                             " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (st) {
    sq_bind_conv(st, 1, in->key.tenant_id, in->coordinates.conversation_id);
    sq_bind_u64(st, 3, in->coordinates.conversation_seq);
    sq_bind_id16(st, 4, in->coordinates.message_id.b);
    sq_bind_u128(st, 5, in->key.sender_id.v);
    sq_bind_id16(st, 6, in->key.client_message_id.b);
    sqlite3_bind_int(st, 7, (int)rec->content.message_type);
    sqlite3_bind_int(st, 8, (int)rec->state);
    sqlite3_bind_int(st, 9, (int)rec->retention_class);
    sq_bind_u64(st, 10, rec->created_at);
    sq_bind_u64(st, 11, rec->created_at);
    sq_bind_u64(st, 12,
                rec->content.payload_or_ciphertext.n +
                    (rec->content.has_media_metadata ? rec->content.media_metadata.n : 0));
    sq_bind_blob(st, 13, body.p, body.n);
    rc = sq_run(c, st);
  } else {
    rc = sq_last_error(c);
  }
  qim_bytes_free(&body);
  /* Two intents at one seq would be a broken allocator, not a caller error. */
  return rc == -EEXIST ? qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION) : rc;
}

int sq_intents_lowest_outboxed(sq_conn *c, uint64_t *out) {
  sqlite3_stmt *st = sq_prep(c, "SELECT min(outbox_offset) FROM intents WHERE state < 3 AND state = 2");
  return st ? sq_step_u64_or_max(c, st, out) : sq_last_error(c);
}

/* 1 when an intent of the conversation with a lower (seq, ord) is not yet published.
 * ("state < 3" repeats the partial index's condition so SQLite can use that index.) */
static int unpublished_predecessor(sq_conn *c, const qim_commit_intent *in, uint64_t order) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT 1 FROM intents WHERE tenant=?1 AND conv=?2 AND state < 3"
                             " AND state < 2 AND (seq, ord) < (?3, ?4) LIMIT 1");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, in->key.tenant_id, in->coordinates.conversation_id);
  sq_bind_u64(st, 3, in->coordinates.conversation_seq);
  sq_bind_u64(st, 4, order);
  return sq_step(c, st);
}

/* The CommittedEnvelope goes to the outbox keyed by the message id; the caller checked
 * the order. The envelope's intent carries state OUTBOXED. */
static int outbox_append(sq_conn *c, qim_commit_intent *in, uint64_t *offset) {
  in->state = QIM_COMMIT_STATE_OUTBOXED;
  qim_committed_envelope env = {.intent = *in, .record = in->record}; /* borrowed */
  qim_bytes payload;
  int rc = qim_committed_envelope_encode(&env, &payload);
  if (rc) return rc;
  qim_log_stream outbox = {QIM_LOG_STREAM_OUTBOX, 0};
  qim_shard_epoch epoch;
  bool existed;
  rc = sq_log_append_one(c, outbox, in->coordinates.message_id.b, &payload, false, offset, &epoch,
                         &existed);
  qim_bytes_free(&payload);
  return rc;
}

/* OUTBOXED: per-conversation order into the outbox — nothing before us may still be
 * unpublished — then the append. */
static int step_outboxed(sq_conn *c, qim_commit_intent *in, uint64_t order, uint64_t *offset) {
  int rc = unpublished_predecessor(c, in, order);
  if (rc < 0) return rc;
  if (rc) return qim_err_raise(QIM_E_COMMIT_LOG_INVARIANT_VIOLATION);
  return outbox_append(c, in, offset);
}

static int store_state(sq_conn *c, const qim_commit_key *k, qim_commit_state to, uint64_t now,
                       uint64_t outbox_offset) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE intents SET state=?4,"
                             " outbox_offset=CASE WHEN ?4 = 2 THEN ?5 ELSE outbox_offset END,"
                             " committed_at=CASE WHEN ?4 = 3 THEN ?6 ELSE committed_at END,"
                             " body=CASE WHEN ?4 = 3 THEN NULL ELSE body END"
                             " WHERE tenant=?1 AND sender=?2 AND cmid=?3");
  if (!st) return sq_last_error(c);
  bind_key(st, 1, k);
  sqlite3_bind_int(st, 4, (int)to);
  sq_bind_u64(st, 5, outbox_offset);
  sq_bind_u64(st, 6, now);
  return sq_run(c, st);
}

static int advance_step(sq_conn *c, qim_store_intent_advance_req *r, sqlite3_stmt *row) {
  uint64_t order = sq_col_u64(row, COL_ORD), offset = 0;
  qim_commit_intent in;
  int rc = 0;
  if (r->to != QIM_COMMIT_STATE_COMMITTED) {
    if ((rc = decode_intent(row, COL_BODY, (qim_commit_state)(r->to - 1), &in))) return rc;
    rc = r->to == QIM_COMMIT_STATE_RECORDED ? step_recorded(c, &in)
                                            : step_outboxed(c, &in, order, &offset);
    qim_commit_intent_free(&in);
    if (rc) return rc;
    r->out_position.offset = offset;
  } else {
    r->out_position.offset = sq_col_u64(row, COL_OUTBOX);
  }
  return store_state(c, &r->key, r->to, r->now, offset);
}

static int advance_exec(sq_conn *c, qim_store_req *base) {
  qim_store_intent_advance_req *r = (void *)base;
  sqlite3_stmt *row;
  int rc = find_intent(c, &r->key, &row);
  if (rc < 0) return rc;
  if (rc == 0) return qim_err_raise(QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  qim_commit_state cur = (qim_commit_state)sqlite3_column_int(row, COL_STATE);
  if (r->to == cur) { /* a repeated step: done already */
    r->out_position.offset = sq_col_u64(row, COL_OUTBOX);
    return 0;
  }
  if (r->to != cur + 1) return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_STATE_TRANSITION);
  return advance_step(c, r, row);
}

const sq_op sq_op_intent_advance = {"intents.advance", true, advance_prepare,
                                    advance_exec,      NULL, INTENT_ERRORS};

/* ---- the one-transaction commit (reserve with `commit`) ---------------------------------- */

/* The read-back of rule 3: the envelope stored at `offset` holds the intent's record.
 * 0, 1 = it differs, or <0. */
static int outbox_differs(sq_conn *c, const qim_commit_intent *in, uint64_t offset) {
  qim_bytes payload = {0};
  int rc = sq_log_payload_at(c, (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0}, offset, &payload);
  if (rc) return rc;
  qim_committed_envelope env;
  memset(&env, 0, sizeof env);
  bool same = qim_committed_envelope_decode(payload.p, payload.n, &env) == 0 &&
              qim_committed_envelope_matches(&env, in);
  qim_committed_envelope_free(&env);
  qim_bytes_free(&payload);
  return same ? 0 : 1;
}

/* RECORDED, OUTBOXED, the read-back and COMMITTED of the fresh intent r->out.intent, in
 * that order, under a savepoint of their own. 0 = committed; 1 = undone, the caller
 * stores it Reserved; <0 = the transaction is lost. */
static int commit_steps(sq_conn *c, qim_store_intent_reserve_req *r, const uint8_t hash[32]) {
  qim_commit_intent *in = &r->out.intent;
  uint64_t offset = 0;
  int rc = step_recorded(c, in);
  if (rc == 0) rc = outbox_append(c, in, &offset);
  if (rc == 0) rc = outbox_differs(c, in, offset);
  if (rc == 0) {
    in->state = QIM_COMMIT_STATE_COMMITTED;
    rc = insert_intent(c, in, r->out_order, hash, r->now, offset);
  }
  if (rc == 0) {
    r->out_position = (qim_log_position){{QIM_LOG_STREAM_OUTBOX, 0}, offset};
    return 0;
  }
  in->state = QIM_COMMIT_STATE_RESERVED;
  return 1;
}

/* The result of an intent committed by its own reserve. */
static int committed_here(qim_store_intent_reserve_req *r) {
  qim_commit_intent *in = &r->out.intent;
  r->out.kind = QIM_RESERVE_RESULT_COMMITTED;
  r->out.committed = (qim_committed_message){.client_message_id = in->key.client_message_id,
                                             .coordinates = in->coordinates};
  r->out_committed_here = true;
  qim_commit_intent_free(in);
  memset(in, 0, sizeof *in);
  return 0;
}

/* The intent was reserved fresh in this transaction: commit it here too when nothing
 * earlier in its conversation is unpublished (intents.advance's OUTBOXED rule). The
 * steps run in their order, but the intent row is written once, in its final form:
 * nothing outside the transaction can see the rows in between. A failed step undoes
 * them all, leaving the staged path to the caller, which repeats and reports it. */
static int commit_in_reserve(sq_conn *c, qim_store_intent_reserve_req *r, const uint8_t hash[32]) {
  qim_commit_intent *in = &r->out.intent;
  int rc = unpublished_predecessor(c, in, r->out_order);
  if (rc) return rc < 0 ? rc : 1;
  if (!c->op_savepoints) { /* bare (sqlite.c, "Savepoints"): a failed step redoes the batch */
    if (commit_steps(c, r, hash)) return sq_redo(c);
    return committed_here(r);
  }
  sqlite3_stmt *sp = sq_prep(c, "SAVEPOINT reserve_commit");
  if (!sp) return sq_last_error(c);
  if ((rc = sq_run(c, sp))) return rc;
  sq_capture_savepoint(c->st->mem.cap);
  int steps = commit_steps(c, r, hash);
  if (steps) sq_capture_rollback_to(c->st->mem.cap);
  sq_capture_release(c->st->mem.cap);
  sq_reset_used(c);
  sqlite3_stmt *end = sq_prep(c, steps ? "ROLLBACK TO reserve_commit" : "RELEASE reserve_commit");
  if (!end || (rc = sq_run(c, end))) return end ? rc : sq_last_error(c);
  if (steps) {
    sq_reset_used(c);
    sqlite3_stmt *rel = sq_prep(c, "RELEASE reserve_commit");
    if (!rel) return sq_last_error(c);
    if ((rc = sq_run(c, rel))) return rc;
    return 1;
  }
  return committed_here(r);
}

/* ---- load, list, forget ------------------------------------------------------------------ */

static int load_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_intent_load_req *r = (void *)base;
  r->out = (qim_loaded_commit){0};
  return 0;
}

static void load_discard(qim_store_req *base) {
  qim_store_intent_load_req *r = (void *)base;
  qim_commit_intent_free(&r->out.intent);
  r->out = (qim_loaded_commit){0};
}

static int load_exec(sq_conn *c, qim_store_req *base) {
  qim_store_intent_load_req *r = (void *)base;
  sqlite3_stmt *row;
  int rc = find_intent(c, &r->key, &row);
  if (rc < 0) return rc;
  if (rc == 0) return qim_err_raise(QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  qim_commit_state state = (qim_commit_state)sqlite3_column_int(row, COL_STATE);
  if (state == QIM_COMMIT_STATE_COMMITTED) {
    r->out.kind = QIM_LOADED_COMMIT_COMMITTED;
    r->out.committed = committed_from_row(row, &r->key);
    return 0;
  }
  r->out.kind = QIM_LOADED_COMMIT_IN_FLIGHT;
  return decode_intent(row, COL_BODY, state, &r->out.intent);
}

const sq_op sq_op_intent_load = {"intents.load", false,        load_prepare,
                                 load_exec,      load_discard, INTENT_ERRORS};

static int list_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_intent_list_req *r = (void *)base;
  r->out_intents = NULL;
  r->out_count = 0;
  return r->limit > 0 ? 0 : -EINVAL;
}

static void list_discard(qim_store_req *base) {
  qim_store_intent_list_req *r = (void *)base;
  for (size_t i = 0; i < r->out_count; i++) qim_commit_intent_free(&r->out_intents[i]);
  qim_free(r->out_intents);
  r->out_intents = NULL;
  r->out_count = 0;
}

static int list_exec(sq_conn *c, qim_store_req *base) {
  qim_store_intent_list_req *r = (void *)base;
  sqlite3_stmt *st =
      r->has_conversation
          ? sq_prep(c,
                    "SELECT state, body FROM intents WHERE tenant=? AND conv=? AND state < 3"
                    " ORDER BY tenant, conv, seq, ord LIMIT ?")
          : sq_prep(c,
                    "SELECT state, body FROM intents WHERE state < 3"
                    " ORDER BY tenant, conv, seq, ord LIMIT ?");
  if (!st) return sq_last_error(c);
  int arg = 1;
  if (r->has_conversation) {
    sq_bind_u128(st, arg++, r->tenant_id.v);
    sq_bind_u128(st, arg++, r->conversation_id.v);
  }
  sqlite3_bind_int64(st, arg, r->limit);
  size_t cap = 0;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->out_count == cap) {
      cap = cap ? cap * 2 : 16;
      r->out_intents = qim_realloc(r->out_intents, cap * sizeof *r->out_intents);
    }
    qim_commit_state state = (qim_commit_state)sqlite3_column_int(st, 0);
    if ((rc = decode_intent(st, 1, state, &r->out_intents[r->out_count]))) return rc;
    r->out_count++;
  }
  return rc;
}

const sq_op sq_op_intent_list = {
    "intents.list_in_flight", false, list_prepare, list_exec, list_discard, INTENT_ERRORS};

static int forget_exec(sq_conn *c, qim_store_req *base) {
  qim_store_intent_forget_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "DELETE FROM intents WHERE state = 3 AND committed_at < ?");
  if (!st) return sq_last_error(c);
  sq_bind_u64(st, 1, r->before);
  int rc = sq_run(c, st);
  r->out_forgotten = rc ? 0 : (uint64_t)sq_changes(c);
  return rc;
}

const sq_op sq_op_intent_forget = {"intents.forget", true, NULL, forget_exec, NULL, INTENT_ERRORS};

/* ---- wiping -------------------------------------------------------------------------------- */

int sq_intent_wipe_body(sq_conn *c, const qim_commit_key *k) {
  sqlite3_stmt *row;
  int rc = find_intent(c, k, &row);
  if (rc <= 0) return rc;
  qim_bytes body = {0};
  if (sqlite3_column_type(row, COL_BODY) != SQLITE_NULL) {
    qim_commit_intent in;
    qim_commit_state state = (qim_commit_state)sqlite3_column_int(row, COL_STATE);
    if ((rc = decode_intent(row, COL_BODY, state, &in))) return rc;
    sq_content_wipe(&in.record.content);
    rc = qim_commit_intent_encode(&in, &body);
    qim_commit_intent_free(&in);
    if (rc) return rc;
  }
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE intents SET content_hash=NULL, body=?4"
                             " WHERE tenant=?1 AND sender=?2 AND cmid=?3");
  if (st) {
    bind_key(st, 1, k);
    if (body.p) sq_bind_blob(st, 4, body.p, body.n);
    rc = sq_run(c, st);
  } else {
    rc = sq_last_error(c);
  }
  qim_bytes_free(&body);
  return rc;
}
