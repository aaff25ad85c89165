/*
 * sqlite_schema.c — the SQLite backend's tables and their migrations.
 *
 * The schema version lives in PRAGMA user_version; each migration moves it up by one
 * inside one transaction, so a crash mid-migration leaves the previous version intact.
 * The shard configuration is written to `meta` when the database is created and checked
 * on every open: shard and lane assignment is a pure function of it, so opening with a
 * different one would silently misroute mailboxes (-EINVAL instead).
 *
 * Conventions: ids are 16-byte big-endian BLOBs (they sort like the numbers); u64 values
 * are INTEGER (every stored u64 fits in 63 bits: seqs, offsets, mailbox seqs, millis);
 * values that are only ever read whole use the canonical encodings of record.h (`body`
 * columns), and everything a query filters or orders by is a real column next to them.
 */
#include <errno.h>

#include "qim/log.h"
#include "store/sqlite_int.h"

/* Version 1: the whole store. */
static const char schema_v1[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"

    /* accounts */
    "CREATE TABLE users(tenant BLOB NOT NULL, user BLOB NOT NULL, public_json TEXT,"
    " private_json TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
    " token_epoch INTEGER NOT NULL, PRIMARY KEY(tenant, user)) WITHOUT ROWID;"
    "CREATE TABLE credentials(tenant BLOB NOT NULL, login TEXT NOT NULL, user BLOB NOT NULL,"
    " secret_hash TEXT NOT NULL, PRIMARY KEY(tenant, login)) WITHOUT ROWID;"
    "CREATE INDEX credentials_user ON credentials(tenant, user);"
    "CREATE TABLE apikeys(api_key TEXT PRIMARY KEY, tenant BLOB NOT NULL) WITHOUT ROWID;"

    /* conversations; next_order orders intents that share a seq position */
    "CREATE TABLE conversations(tenant BLOB NOT NULL, conv BLOB NOT NULL, kind INTEGER NOT NULL,"
    " owner BLOB NOT NULL, direct0 BLOB NOT NULL, direct1 BLOB NOT NULL,"
    " latest_seq INTEGER NOT NULL, next_order INTEGER NOT NULL, delid INTEGER NOT NULL,"
    " last_activity BLOB NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
    " touched_at INTEGER NOT NULL, public_json TEXT, mode_auth INTEGER NOT NULL,"
    " mode_anon INTEGER NOT NULL, membership_version INTEGER NOT NULL,"
    " member_count INTEGER NOT NULL, deleted INTEGER NOT NULL,"
    " PRIMARY KEY(tenant, conv)) WITHOUT ROWID;"
    /* the latest state of each (conversation, user); left_at NULL = current member */
    "CREATE TABLE members(tenant BLOB NOT NULL, conv BLOB NOT NULL, user BLOB NOT NULL,"
    " role INTEGER NOT NULL, mode_want INTEGER NOT NULL, mode_given INTEGER NOT NULL,"
    " joined_at INTEGER NOT NULL, left_at INTEGER, banned INTEGER NOT NULL,"
    " read_seq INTEGER NOT NULL, recv_seq INTEGER NOT NULL, clear_delid INTEGER NOT NULL,"
    " private_json TEXT, updated_at INTEGER NOT NULL,"
    " PRIMARY KEY(tenant, conv, user)) WITHOUT ROWID;"
    "CREATE INDEX members_user ON members(tenant, user);"
    /* membership history: the member set at version v = rows with from <= v < to */
    "CREATE TABLE member_versions(tenant BLOB NOT NULL, conv BLOB NOT NULL, user BLOB NOT NULL,"
    " from_version INTEGER NOT NULL, to_version INTEGER NOT NULL, role INTEGER NOT NULL,"
    " joined_at INTEGER NOT NULL, PRIMARY KEY(tenant, conv, user, from_version)) WITHOUT ROWID;"
    /* current members per mailbox shard: the target shards of a group snapshot */
    "CREATE TABLE conv_shards(tenant BLOB NOT NULL, conv BLOB NOT NULL, shard INTEGER NOT NULL,"
    " members INTEGER NOT NULL, PRIMARY KEY(tenant, conv, shard)) WITHOUT ROWID;"

    /* commit intents; body = canonical CommitIntent, NULL once committed */
    "CREATE TABLE intents(tenant BLOB NOT NULL, sender BLOB NOT NULL, cmid BLOB NOT NULL,"
    " conv BLOB NOT NULL, seq INTEGER NOT NULL, ord INTEGER NOT NULL, state INTEGER NOT NULL,"
    " message_id BLOB NOT NULL, last_activity BLOB NOT NULL, content_hash BLOB,"
    " created_at INTEGER NOT NULL, committed_at INTEGER, outbox_offset INTEGER, body BLOB,"
    " PRIMARY KEY(tenant, sender, cmid));"
    "CREATE INDEX intents_in_flight ON intents(tenant, conv, seq, ord) WHERE state < 3;"
    "CREATE INDEX intents_committed ON intents(committed_at) WHERE state = 3;"

    /* history; body = canonical MessageRecord */
    "CREATE TABLE records(tenant BLOB NOT NULL, conv BLOB NOT NULL, seq INTEGER NOT NULL,"
    " message_id BLOB NOT NULL, sender BLOB NOT NULL, cmid BLOB NOT NULL,"
    " message_type INTEGER NOT NULL, state INTEGER NOT NULL, retention INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, size INTEGER NOT NULL,"
    " body BLOB NOT NULL, PRIMARY KEY(tenant, conv, seq));"
    "CREATE INDEX records_retention ON records(tenant, retention, created_at);"
    /* for_user NULL = a deletion for everyone */
    "CREATE TABLE dellog(tenant BLOB NOT NULL, conv BLOB NOT NULL, delid INTEGER NOT NULL,"
    " for_user BLOB, low INTEGER NOT NULL, hi INTEGER NOT NULL);"
    "CREATE INDEX dellog_conv ON dellog(tenant, conv, delid);"
    "CREATE INDEX dellog_user ON dellog(tenant, conv, for_user, low);"

    /* logs; stream = sq_stream_id(); next_offset starts at 1, trim at 0 (version 7 gives
     * log_records a position rowid and drops both (stream, offset) indexes) */
    "CREATE TABLE log_streams(stream INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL,"
    " trim INTEGER NOT NULL);"
    "CREATE TABLE log_records(stream INTEGER NOT NULL, offset INTEGER NOT NULL, key BLOB,"
    " epoch INTEGER NOT NULL, fence INTEGER NOT NULL, payload BLOB NOT NULL);"
    "CREATE UNIQUE INDEX log_records_pos ON log_records(stream, offset);"
    "CREATE UNIQUE INDEX log_records_key ON log_records(stream, key) WHERE key IS NOT NULL;"
    "CREATE TABLE log_consumers(consumer TEXT NOT NULL, stream INTEGER NOT NULL,"
    " offset INTEGER NOT NULL, PRIMARY KEY(consumer, stream)) WITHOUT ROWID;"
    "CREATE INDEX log_consumers_stream ON log_consumers(stream, offset);"

    /* mailboxes; body = canonical MailboxEntry */
    "CREATE TABLE shards(shard INTEGER PRIMARY KEY, epoch INTEGER NOT NULL,"
    " owner INTEGER NOT NULL);"
    "CREATE TABLE mailbox(tenant BLOB NOT NULL, user BLOB NOT NULL, mseq INTEGER NOT NULL,"
    " ordinal INTEGER NOT NULL, shard INTEGER NOT NULL, lane INTEGER NOT NULL,"
    " message_id BLOB NOT NULL, event_type INTEGER NOT NULL, size INTEGER NOT NULL,"
    " body BLOB NOT NULL);"
    "CREATE UNIQUE INDEX mailbox_entry ON mailbox(tenant, user, mseq, ordinal);"
    "CREATE INDEX mailbox_lane ON mailbox(shard, lane, mseq);"
    "CREATE INDEX mailbox_message ON mailbox(message_id);"
    "CREATE TABLE dispatch_chunks(dispatch_id BLOB NOT NULL, lane INTEGER NOT NULL,"
    " chunk INTEGER NOT NULL, shard INTEGER NOT NULL, mseq INTEGER NOT NULL,"
    " PRIMARY KEY(dispatch_id, lane, chunk)) WITHOUT ROWID;"
    "CREATE INDEX dispatch_chunks_lane ON dispatch_chunks(shard, lane, mseq);"
    /* chunks = ascending u32 big-endian chunk ids */
    "CREATE TABLE dispatch_progress(dispatch_id BLOB NOT NULL, lane INTEGER NOT NULL,"
    " shard INTEGER NOT NULL, mseq INTEGER NOT NULL, chunks BLOB NOT NULL, completed_at INTEGER,"
    " PRIMARY KEY(dispatch_id, lane)) WITHOUT ROWID;"
    "CREATE INDEX dispatch_progress_lane ON dispatch_progress(shard, lane, mseq);"
    "CREATE TABLE lane_watermarks(shard INTEGER NOT NULL, lane INTEGER NOT NULL,"
    " materialized INTEGER NOT NULL, floor INTEGER NOT NULL,"
    " PRIMARY KEY(shard, lane)) WITHOUT ROWID;";

/* Version 2: the retention floor of each conversation (history.expire raises it; the
 * history module reports seqs at or below it as HistoryUnavailable). */
static const char schema_v2[] =
    "ALTER TABLE conversations ADD COLUMN retention_floor INTEGER NOT NULL DEFAULT 0;";

/* Version 3: the membership floor of each conversation (conversations.members_prune raises
 * it; versions below it are pruned and members_at reports them unavailable; 0 = none). */
static const char schema_v3[] =
    "ALTER TABLE conversations ADD COLUMN membership_floor INTEGER NOT NULL DEFAULT 0;";

/* Version 4: the chunks a dispatch has applied per lane move into its progress row
 * (`applied`, ascending u32 big-endian chunk ids, filled by fill_applied below), and the
 * table that held one row per chunk goes: every append wrote that row and its index
 * entry, on pages the random DispatchId scattered (~8 of a p2p transaction's ~52 WAL
 * pages). */
static const char schema_v4[] = "ALTER TABLE dispatch_progress ADD COLUMN applied BLOB;";
static const char schema_v4_end[] = "DROP TABLE dispatch_chunks;";

/* Version 5: a hard delete finds a message's inline mailbox copies through the progress
 * rows of its dispatches (one per dispatch and lane, naming the message and the lane's
 * seq) instead of an index over every entry: that index cost each of a 1,000-member
 * group's entries a B-tree insert (the writer's CPU per group message -12 %, p99 at
 * 50 msgs/s 178-225 ms against 278-319). A batch's entries are one message's
 * (mailboxes.append checks it), so the row's message is its entries'. */
static const char schema_v5[] =
    "ALTER TABLE dispatch_progress ADD COLUMN message_id BLOB;"
    "UPDATE dispatch_progress SET message_id = (SELECT m.message_id FROM mailbox m"
    " WHERE m.shard = dispatch_progress.shard AND m.lane = dispatch_progress.lane"
    " AND m.mseq = dispatch_progress.mseq LIMIT 1);"
    "CREATE INDEX dispatch_progress_message ON dispatch_progress(message_id)"
    " WHERE message_id IS NOT NULL;"
    "DROP INDEX mailbox_message;";

/* Version 6: the per-user index is filled in bulk, not per entry (docs/mailbox.md,
 * "Settling"). An entry is written at its lane position (`mailbox_position`: unique, so a
 * replayed batch still inserts nothing, and appended in order, so a group message's 1,000
 * entries share a few pages) and enters `mailbox_index` when its lane settles (settle_due
 * in sqlite_mailbox.c), in one sorted pass up to the lane's watermark, which the lane row
 * records (`settled`). Per entry, the index insert dirtied its user's page: ~1,000 pages
 * of WAL for each message to a group of 1,000, the store's largest cost (bench/HISTORY.md,
 * "What bounds 2 and 3"). A range reads the index up to `settled` and the lane above it.
 * Existing entries up to each lane's watermark are settled here. */
static const char schema_v6[] =
    "CREATE TABLE mailbox_index(tenant BLOB NOT NULL, user BLOB NOT NULL,"
    " mseq INTEGER NOT NULL, ordinal INTEGER NOT NULL, entry INTEGER NOT NULL,"
    " PRIMARY KEY(tenant, user, mseq, ordinal)) WITHOUT ROWID;"
    "ALTER TABLE lane_watermarks ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;"
    "UPDATE lane_watermarks SET settled = materialized;"
    "INSERT INTO mailbox_index SELECT m.tenant, m.user, m.mseq, m.ordinal, m.rowid"
    " FROM mailbox m JOIN lane_watermarks w ON w.shard = m.shard AND w.lane = m.lane"
    " WHERE m.mseq <= w.settled;"
    "DROP INDEX mailbox_entry;"
    "DROP INDEX mailbox_lane;"
    "CREATE UNIQUE INDEX mailbox_position ON mailbox(shard, lane, mseq, tenant, user, ordinal);";

/* Version 7: a log record's rowid is its position (sq_log_pos: the stream's slot above
 * the 40-bit offset), so the (stream, offset) index beside the table goes: every append
 * wrote an entry into it (two per one-to-one message, outbox and dispatch) and every read
 * went through it to the row. The consumers' (stream, offset) index goes too: it served
 * only a trim's minimum over a stream's few consumers, and every consumer update moved
 * an entry in it. The rows are copied in position order, so the new table is written
 * once, in sequence. */
static const char schema_v7[] =
    "CREATE TABLE log_records_v7(pos INTEGER PRIMARY KEY, stream INTEGER NOT NULL, key BLOB,"
    " epoch INTEGER NOT NULL, fence INTEGER NOT NULL, payload BLOB NOT NULL);"
    "INSERT INTO log_records_v7 SELECT"
    " (CASE WHEN stream = 0 THEN 0 ELSE (stream & 4294967295) + 1 END) << 40 | offset,"
    " stream, key, epoch, fence, payload FROM log_records ORDER BY stream, offset;"
    "DROP TABLE log_records;"
    "ALTER TABLE log_records_v7 RENAME TO log_records;"
    "CREATE UNIQUE INDEX log_records_key ON log_records(stream, key) WHERE key IS NOT NULL;"
    "DROP INDEX log_consumers_stream;";

static const char *const migrations[] = {schema_v1, schema_v2, schema_v3, schema_v4,
                                         schema_v5, schema_v6, schema_v7};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

static int exec_sql(sq_conn *c, const char *sql) {
  return sq_exec_logged(c->db, sql, "store.sqlite.schema");
}

/* Version 4's data step: each progress row's `applied` from its dispatch_chunks rows. */
static int fill_applied(sq_conn *c) {
  sqlite3_stmt *rd = NULL, *up = NULL;
  int rc = sqlite3_prepare_v2(c->db,
                              "SELECT dispatch_id, lane, chunk FROM dispatch_chunks"
                              " ORDER BY dispatch_id, lane, chunk",
                              -1, &rd, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(c->db,
                            "UPDATE dispatch_progress SET applied = coalesce(applied, x'') || ?3"
                            " WHERE dispatch_id=?1 AND lane=?2",
                            -1, &up, NULL);
  while (rc == SQLITE_OK && (rc = sqlite3_step(rd)) == SQLITE_ROW) {
    uint32_t chunk = (uint32_t)sqlite3_column_int64(rd, 2);
    uint8_t be[4];
    sq_chunk_put(be, chunk);
    sqlite3_bind_value(up, 1, sqlite3_column_value(rd, 0));
    sqlite3_bind_value(up, 2, sqlite3_column_value(rd, 1));
    sqlite3_bind_blob(up, 3, be, 4, SQLITE_TRANSIENT);
    rc = sqlite3_step(up) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(c->db);
    sqlite3_reset(up);
  }
  sqlite3_finalize(rd);
  sqlite3_finalize(up);
  if (rc == SQLITE_DONE) return exec_sql(c, schema_v4_end);
  QIM_LOGE(NULL, "store.sqlite.schema", "step=fill_applied rc=%d msg=\"%s\"", rc,
           sqlite3_errmsg(c->db));
  return sq_errno(rc);
}

/* One migration step: `from` → from + 1, atomically. */
static int migrate_step(sq_conn *c, int from, const qim_shard_config *shards) {
  char tail[200];
  int rc = exec_sql(c, "BEGIN IMMEDIATE");
  if (rc) return rc;
  rc = exec_sql(c, migrations[from]);
  if (rc == 0 && from == 3) rc = fill_applied(c);
  if (rc == 0 && from == 0) {
    snprintf(tail, sizeof tail,
             "INSERT INTO meta VALUES('shard_count', %u), ('lanes_per_shard', %u);",
             shards->shard_count, shards->lanes_per_shard);
    rc = exec_sql(c, tail);
  }
  if (rc == 0) {
    snprintf(tail, sizeof tail, "PRAGMA user_version=%d;", from + 1);
    rc = exec_sql(c, tail);
  }
  if (rc == 0) rc = exec_sql(c, "COMMIT");
  if (rc) exec_sql(c, "ROLLBACK");
  return rc;
}

static int meta_get(sq_conn *c, const char *key, int64_t *out) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db, "SELECT value FROM meta WHERE key=?", -1, &st, NULL) != SQLITE_OK)
    return sq_last_error(c);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_errno(rc);
}

static int check_shards(sq_conn *c, const qim_shard_config *shards) {
  int64_t count, lanes;
  int rc = meta_get(c, "shard_count", &count);
  if (rc == 0) rc = meta_get(c, "lanes_per_shard", &lanes);
  if (rc) return rc;
  if (count != (int64_t)shards->shard_count || lanes != (int64_t)shards->lanes_per_shard) {
    QIM_LOGE(NULL, "store.sqlite.shard_config_mismatch",
             "stored_shards=%lld stored_lanes=%lld shards=%u lanes=%u", (long long)count,
             (long long)lanes, shards->shard_count, shards->lanes_per_shard);
    return -EINVAL;
  }
  return 0;
}

/* A layout this backend can hold: lanes fit a byte, and sq_log_pos packs a dispatch
 * stream's shard into the bits above its offsets. */
static int layout_valid(const qim_shard_config *shards) {
  return shards->lanes_per_shard <= 255 && shards->shard_count <= SQ_LOG_SHARDS_MAX ? 0 : -EINVAL;
}

int sq_schema_layout(sq_conn *c, qim_shard_config *shards) {
  if (shards->shard_count && shards->lanes_per_shard) return layout_valid(shards);
  int version;
  int rc = sq_pragma_int(c, "user_version", &version);
  int64_t count = -1, lanes = -1;
  if (rc == 0 && version > 0) rc = meta_get(c, "shard_count", &count);
  if (rc == 0 && version > 0) rc = meta_get(c, "lanes_per_shard", &lanes);
  if (rc) return rc;
  if (!shards->shard_count)
    shards->shard_count = count > 0 ? (uint32_t)count : QIM_STORE_DEFAULT_SHARDS;
  if (!shards->lanes_per_shard)
    shards->lanes_per_shard = lanes > 0 ? (uint32_t)lanes : QIM_STORE_DEFAULT_LANES;
  return layout_valid(shards);
}

int sq_schema_migrate(sq_conn *c, const qim_shard_config *shards) {
  int version;
  int rc = sq_pragma_int(c, "user_version", &version);
  if (rc) return rc;
  if (version > SCHEMA_VERSION) {
    QIM_LOGE(NULL, "store.sqlite.schema_too_new", "version=%d known=%d", version, SCHEMA_VERSION);
    return -EINVAL;
  }
  for (; version < SCHEMA_VERSION; version++) {
    rc = migrate_step(c, version, shards);
    if (rc) return rc;
  }
  return check_shards(c, shards);
}
