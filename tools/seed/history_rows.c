/*
 * history_rows.c — bulk seeding of a conversation's history (see history_rows.h): one
 * SQLite transaction of history records built like the commit path builds them (content
 * through qim_history_content_from_tinode, the record through qim_message_record_encode),
 * then the conversation counters a FRESH reserve would have moved.
 */
#include "history_rows.h"

#include <errno.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "history/history.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

/* A seeded message is far below any max_message_size; this only bounds the conversion. */
#define SEED_MAX_MESSAGE 4096

int qim_seed_history_content(uint64_t seq, size_t sender, char *out, size_t cap) {
  return snprintf(out, cap,
                  "{\"qbn\":%llu,\"qbs\":%zu,\"qbt\":0,\"txt\":\"seeded message %llu, about the "
                  "length of a line of chat\"}",
                  (unsigned long long)seq, sender, (unsigned long long)seq);
}

static int sql_fail(sqlite3 *db, const char *what) {
  fprintf(stderr, "qim-seed: %s: %s\n", what, sqlite3_errmsg(db));
  return -EIO;
}

static void bind_u128(sqlite3_stmt *st, int i, qim_u128 v) {
  uint8_t b[16];
  qim_u128_to_be(v, b);
  sqlite3_bind_blob(st, i, b, 16, SQLITE_TRANSIENT);
}

/* The message record of `seq`, as commit_send.c fills a proposal's record. */
static int make_record(const qim_seed_history *h, uint64_t seq, qim_message_record *r,
                       qim_history_tinode_msg *m) {
  size_t who = (size_t)(seq % h->sender_count);
  char text[256];
  qim_seed_history_content(seq, who, text, sizeof text);
  json_t *content = json_loads(text, 0, NULL);
  int rc =
      content ? qim_history_content_from_tinode(NULL, content, SEED_MAX_MESSAGE, 0, m) : -EINVAL;
  json_decref(content);
  if (rc) return rc;
  memset(r, 0, sizeof *r);
  if ((rc = qim_id_gen_message_id(h->ids, &r->coordinates.message_id)) ||
      (rc = qim_id_gen_last_activity_id(h->ids, &r->coordinates.last_activity_id)))
    return rc;
  r->coordinates.conversation_id = h->conversation_id;
  r->coordinates.conversation_seq = seq;
  r->sender = h->senders[who];
  r->client_message_id.b[0] = 0x5E; /* non-zero, unique per seq */
  for (int i = 0; i < 8; i++) r->client_message_id.b[8 + i] = (uint8_t)(seq >> (56 - 8 * i));
  r->content = m->content;
  r->retention_class = QIM_RETENTION_CLASS_DEFAULT;
  r->state = QIM_MESSAGE_STATE_NORMAL;
  r->created_at = qim_message_id_millis(&r->coordinates.message_id);
  return 0;
}

/* One history row, with the columns sqlite_intents.c writes at RECORDED. */
static int insert_row(sqlite3_stmt *st, const qim_seed_history *h, const qim_message_record *r) {
  qim_bytes body;
  int rc = qim_message_record_encode(r, &body);
  if (rc) return rc;
  sqlite3_reset(st);
  bind_u128(st, 1, h->tenant_id.v);
  bind_u128(st, 2, h->conversation_id.v);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)r->coordinates.conversation_seq);
  sqlite3_bind_blob(st, 4, r->coordinates.message_id.b, 16, SQLITE_TRANSIENT);
  bind_u128(st, 5, r->sender.user_id.v);
  sqlite3_bind_blob(st, 6, r->client_message_id.b, 16, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 7, (int)r->content.message_type);
  sqlite3_bind_int(st, 8, (int)r->state);
  sqlite3_bind_int(st, 9, (int)r->retention_class);
  sqlite3_bind_int64(st, 10, (sqlite3_int64)r->created_at);
  sqlite3_bind_int64(st, 11, (sqlite3_int64)r->created_at);
  sqlite3_bind_int64(st, 12, (sqlite3_int64)r->content.payload_or_ciphertext.n);
  sqlite3_bind_blob(st, 13, body.p, (int)body.n, SQLITE_TRANSIENT);
  rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -EIO;
  qim_bytes_free(&body);
  return rc;
}

/* -EEXIST unless the conversation stands at latest_seq == from. */
static int check_position(sqlite3 *db, const qim_seed_history *h) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT latest_seq FROM conversations WHERE tenant=? AND conv=?"
                         " AND NOT deleted",
                         -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, "select conversation");
  bind_u128(st, 1, h->tenant_id.v);
  bind_u128(st, 2, h->conversation_id.v);
  int step = sqlite3_step(st), rc = 0;
  if (step != SQLITE_ROW)
    rc = step == SQLITE_DONE ? -ENOENT : sql_fail(db, "select conversation");
  else if ((uint64_t)sqlite3_column_int64(st, 0) != h->from)
    rc = -EEXIST;
  sqlite3_finalize(st);
  return rc;
}

/* What conv_position_take does per FRESH reserve of a non-Control message, all at once. */
static int move_counters(sqlite3 *db, const qim_seed_history *h, const qim_message_record *last) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "UPDATE conversations SET latest_seq=?3, next_order=next_order+?4,"
                         " touched_at=max(touched_at, ?5),"
                         " last_activity=CASE WHEN ?6 > last_activity THEN ?6 ELSE last_activity"
                         " END WHERE tenant=?1 AND conv=?2",
                         -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, "update conversation");
  bind_u128(st, 1, h->tenant_id.v);
  bind_u128(st, 2, h->conversation_id.v);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)h->to);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)(h->to - h->from));
  sqlite3_bind_int64(st, 5, (sqlite3_int64)last->created_at);
  sqlite3_bind_blob(st, 6, last->coordinates.last_activity_id.b, 16, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : sql_fail(db, "update conversation");
  sqlite3_finalize(st);
  return rc;
}

static int append_rows(sqlite3 *db, const qim_seed_history *h) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "INSERT INTO records(tenant, conv, seq, message_id, sender, cmid,"
                         " message_type, state, retention, created_at, updated_at, size, body)"
                         " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         -1, &st, NULL) != SQLITE_OK)
    return sql_fail(db, "prepare insert");
  int rc = 0;
  qim_message_record r = {0};
  for (uint64_t seq = h->from + 1; rc == 0 && seq <= h->to; seq++) {
    qim_history_tinode_msg m;
    rc = make_record(h, seq, &r, &m);
    if (rc == 0 && insert_row(st, h, &r) != 0) rc = sql_fail(db, "insert record");
    qim_history_tinode_msg_free(&m);
  }
  sqlite3_finalize(st);
  return rc ? rc : move_counters(db, h, &r);
}

int qim_seed_history_append(const qim_seed_history *h) {
  if (!h || !h->db_path || !h->ids || !h->senders || !h->sender_count || h->to <= h->from)
    return -EINVAL;
  sqlite3 *db;
  if (sqlite3_open_v2(h->db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    int rc = sql_fail(db, h->db_path);
    sqlite3_close(db);
    return rc;
  }
  sqlite3_busy_timeout(db, 5000);
  /* One transaction without fsyncs; the checkpoint at the end (synchronous again) makes it
   * durable at once. */
  int rc =
      sqlite3_exec(db, "PRAGMA synchronous=OFF; BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK
          ? 0
          : sql_fail(db, "begin");
  if (rc == 0) rc = check_position(db, h);
  if (rc == 0) rc = append_rows(db, h);
  const char *end = rc == 0 ? "COMMIT" : "ROLLBACK";
  if (sqlite3_exec(db, end, NULL, NULL, NULL) != SQLITE_OK && rc == 0) rc = sql_fail(db, end);
  if (rc == 0 && sqlite3_exec(db, "PRAGMA synchronous=FULL; PRAGMA wal_checkpoint(TRUNCATE)", NULL,
                              NULL, NULL) != SQLITE_OK)
    rc = sql_fail(db, "checkpoint");
  sqlite3_close(db);
  return rc;
}
