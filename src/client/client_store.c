/*
 * client_store.c — the client runtime's local store: one SQLite database, a file
 * `qimclient.db` under the scope directory (Persistent) or ":memory:" (InMemoryForTest).
 *
 *   meta(key PRIMARY KEY, value)       'device' (16 bytes), 'cursor' (text)
 *   entries(event_id PRIMARY KEY, topic, seq, type, sender, json)
 *   conversations(topic PRIMARY KEY, latest_seq, read_seq, unread)
 *   pending(cmid PRIMARY KEY, topic, content, created_at)
 *
 * Both threads use it (qim_client_send writes the pending row from the host's thread, so
 * the send is durable before the call returns), hence one mutex around the connection.
 * synchronous=FULL: a pending send or a page acknowledged by a commit survives power loss.
 * Every SQLite failure is QIM_E_CLIENT_LOCAL_STORE_FAILURE.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "client/client_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

struct qim__client_store {
  pthread_mutex_t mu;
  sqlite3 *db;
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS entries(event_id INTEGER PRIMARY KEY, topic TEXT NOT NULL,"
    " seq INTEGER NOT NULL, type TEXT NOT NULL, sender TEXT NOT NULL, json TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS conversations(topic TEXT PRIMARY KEY,"
    " latest_seq INTEGER NOT NULL, read_seq INTEGER NOT NULL, unread INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS pending(cmid BLOB PRIMARY KEY, topic TEXT NOT NULL,"
    " content TEXT NOT NULL, created_at INTEGER NOT NULL);";

/* Logs the SQLite error of `what` and raises LocalStoreFailure. */
static int fail(qim__client_store *s, const char *what) {
  qim_log(QIM_LOG_WARN, NULL, "client.store_failed", "step=%s error=\"%s\"", what,
          s && s->db ? sqlite3_errmsg(s->db) : "open");
  return qim_err_raise(QIM_E_CLIENT_LOCAL_STORE_FAILURE);
}

int qim__client_store_open(const qim_local_store_location *loc, qim__client_store **out) {
  char path[4096];
  if (loc->mode == QIM_LOCAL_STORE_MODE_PERSISTENT) {
    int n = snprintf(path, sizeof path, "%s/qimclient.db", loc->scope);
    if (n < 0 || (size_t)n >= sizeof path) return -ENAMETOOLONG;
  } else {
    snprintf(path, sizeof path, ":memory:");
  }
  qim__client_store *s = qim_calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) goto fail;
  sqlite3_busy_timeout(s->db, 5000);
  /* A file that is not a database fails here, on the first read of its header. */
  if (sqlite3_exec(s->db, schema, NULL, NULL, NULL) != SQLITE_OK) goto fail;
  *out = s;
  return 0;
fail:;
  int rc = fail(s, "open");
  qim__client_store_close(s);
  return rc;
}

void qim__client_store_close(qim__client_store *s) {
  if (!s) return;
  sqlite3_close(s->db);
  pthread_mutex_destroy(&s->mu);
  qim_free(s);
}

/* Prepares `sql` or fails; the caller holds the mutex. */
static sqlite3_stmt *prep(qim__client_store *s, const char *sql) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
  return st;
}

/* Runs a statement that returns no rows; 0 or LocalStoreFailure. */
static int run(qim__client_store *s, sqlite3_stmt *st, const char *what) {
  int rc = st && sqlite3_step(st) == SQLITE_DONE ? 0 : fail(s, what);
  sqlite3_finalize(st);
  return rc;
}

static int meta_get(qim__client_store *s, const char *key, void **val, size_t *n) {
  sqlite3_stmt *st = prep(s, "SELECT value FROM meta WHERE key=?");
  if (!st) return fail(s, "meta_get");
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  int r = sqlite3_step(st), rc = 0;
  *val = NULL;
  if (r == SQLITE_ROW) {
    *n = (size_t)sqlite3_column_bytes(st, 0);
    const void *p = sqlite3_column_blob(st, 0);
    *val = qim_calloc(1, *n + 1); /* +1: a text value comes back NUL-terminated */
    if (*n) memcpy(*val, p, *n);
  } else if (r != SQLITE_DONE) {
    rc = fail(s, "meta_get");
  }
  sqlite3_finalize(st);
  return rc;
}

static int meta_put(qim__client_store *s, const char *key, const void *val, size_t n) {
  sqlite3_stmt *st = prep(s, val ? "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)"
                                 : "DELETE FROM meta WHERE key=?");
  if (st) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (val) sqlite3_bind_blob(st, 2, val, (int)n, SQLITE_STATIC);
  }
  return run(s, st, "meta_put");
}

int qim__client_store_device(qim__client_store *s, qim_device_id *out) {
  pthread_mutex_lock(&s->mu);
  void *v = NULL;
  size_t n = 0;
  int rc = meta_get(s, "device", &v, &n);
  if (rc == 0 && v && n == 16) {
    out->v = qim_u128_from_be(v);
  } else if (rc == 0) {
    /* First open of this store: the device id is made once and kept (DESIGN §1b). */
    do out->v = qim_u128_random();
    while (qim_u128_is_zero(out->v));
    uint8_t be[16];
    qim_u128_to_be(out->v, be);
    rc = meta_put(s, "device", be, sizeof be);
  }
  qim_free(v);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_cursor(qim__client_store *s, char **out) {
  pthread_mutex_lock(&s->mu);
  size_t n = 0;
  int rc = meta_get(s, "cursor", (void **)out, &n);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_set_cursor(qim__client_store *s, const char *cursor) {
  pthread_mutex_lock(&s->mu);
  int rc = meta_put(s, "cursor", cursor, cursor ? strlen(cursor) : 0);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* Inserts one entry unless its event id is stored (sync is at least once). */
static int add_entry(qim__client_store *s, const qim__client_entry *e, const char *self,
                     bool *inserted) {
  sqlite3_stmt *st = prep(s,
                          "INSERT OR IGNORE INTO entries(event_id, topic, seq, type, sender,"
                          " json) VALUES(?, ?, ?, ?, ?, ?)");
  if (!st) return fail(s, "add_entry");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)e->event_id); /* u64 kept bit for bit */
  sqlite3_bind_text(st, 2, e->topic, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)e->seq);
  sqlite3_bind_text(st, 4, e->type, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, e->from, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, e->json, -1, SQLITE_STATIC);
  int rc = run(s, st, "add_entry");
  if (rc) return rc;
  *inserted = sqlite3_changes(s->db) == 1;
  if (!*inserted || strcmp(e->type, "message") != 0 || !e->topic[0] || e->seq == 0) return 0;
  /* A new message moves its conversation's latest seq; one from someone else is unread. */
  st = prep(s,
            "INSERT INTO conversations(topic, latest_seq, read_seq, unread) VALUES(?1, ?2, 0, ?3)"
            " ON CONFLICT(topic) DO UPDATE SET latest_seq=max(latest_seq, ?2),"
            " unread=unread + (CASE WHEN ?2 > read_seq THEN ?3 ELSE 0 END)");
  if (st) {
    sqlite3_bind_text(st, 1, e->topic, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->seq);
    sqlite3_bind_int(st, 3, strcmp(e->from, self) != 0);
  }
  return run(s, st, "summary");
}

int qim__client_store_add_page(qim__client_store *s, const qim__client_entry *e, size_t n,
                               const char *self, const char *cursor, bool *inserted) {
  pthread_mutex_lock(&s->mu);
  int rc =
      sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : fail(s, "begin");
  for (size_t i = 0; rc == 0 && i < n; i++) rc = add_entry(s, &e[i], self, &inserted[i]);
  /* The cursor moves in the same transaction as the page it covers: never ahead of it. */
  if (rc == 0 && cursor) rc = meta_put(s, "cursor", cursor, strlen(cursor));
  if (rc == 0 && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    rc = fail(s, "commit");
  if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_reset(qim__client_store *s, const char *cursor) {
  pthread_mutex_lock(&s->mu);
  int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE; DELETE FROM entries; DELETE FROM conversations;",
                        NULL, NULL, NULL) == SQLITE_OK
               ? 0
               : fail(s, "reset");
  if (rc == 0) rc = meta_put(s, "cursor", cursor, cursor ? strlen(cursor) : 0);
  if (rc == 0 && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    rc = fail(s, "commit");
  if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_set_summary(qim__client_store *s, const char *topic, uint64_t latest,
                                  uint64_t read) {
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = prep(s,
                          "INSERT OR REPLACE INTO conversations(topic, latest_seq, read_seq,"
                          " unread) VALUES(?, ?, ?, ?)");
  if (st) {
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)latest);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)read);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)(latest > read ? latest - read : 0));
  }
  int rc = run(s, st, "set_summary");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_pending_add(qim__client_store *s, const qim_client_message_id *cmid,
                                  const char *topic, const char *content) {
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = prep(s,
                          "INSERT INTO pending(cmid, topic, content, created_at)"
                          " VALUES(?, ?, ?, strftime('%s','now'))");
  if (st) {
    sqlite3_bind_blob(st, 1, cmid->b, 16, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, topic, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, content, -1, SQLITE_STATIC);
  }
  int rc = run(s, st, "pending_add");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_pending_remove(qim__client_store *s, const qim_client_message_id *cmid) {
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = prep(s, "DELETE FROM pending WHERE cmid=?");
  if (st) sqlite3_bind_blob(st, 1, cmid->b, 16, SQLITE_STATIC);
  int rc = run(s, st, "pending_remove");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_pending_drop_topic(qim__client_store *s, const char *topic) {
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = prep(s, "DELETE FROM pending WHERE topic=?");
  if (st) sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
  int rc = run(s, st, "pending_drop_topic");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int qim__client_store_pending_list(qim__client_store *s, qim__client_pending **out, size_t *n) {
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&s->mu);
  sqlite3_stmt *st = prep(s, "SELECT cmid, topic, content FROM pending ORDER BY rowid");
  int rc = st ? 0 : fail(s, "pending_list"), r = SQLITE_DONE;
  size_t cap = 0;
  while (rc == 0 && (r = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? 2 * cap : 8;
      *out = qim_realloc(*out, cap * sizeof **out);
    }
    qim__client_pending *p = &(*out)[(*n)++];
    memset(p, 0, sizeof *p);
    if (sqlite3_column_bytes(st, 0) == 16) memcpy(p->cmid.b, sqlite3_column_blob(st, 0), 16);
    snprintf(p->topic, sizeof p->topic, "%s", (const char *)sqlite3_column_text(st, 1));
    p->content = qim_strdup((const char *)sqlite3_column_text(st, 2));
  }
  if (rc == 0 && r != SQLITE_DONE) rc = fail(s, "pending_list");
  sqlite3_finalize(st);
  pthread_mutex_unlock(&s->mu);
  if (rc) {
    qim__client_pending_free(*out, *n);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

void qim__client_pending_free(qim__client_pending *p, size_t n) {
  for (size_t i = 0; p && i < n; i++) qim_free(p[i].content);
  qim_free(p);
}
