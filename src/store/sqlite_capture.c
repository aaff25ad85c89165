/*
 * sqlite_capture.c — a transaction's row changes as bytes, and those bytes applied again:
 * the record a journal needs to make a batch durable without the WAL (docs/store.md,
 * "Next: the database in memory").
 *
 * Capture is SQLite's pre-update hook on one connection: every row an INSERT, UPDATE or
 * DELETE changes is written, as it changes, into the capture's buffer: an insert or update
 * as the row's new values (with its rowid in a rowid table), a delete as the row's key
 * (its rowid, or a WITHOUT ROWID table's key columns). The hook cannot tell a change that
 * a savepoint later undoes, so the connection's owner marks its savepoints here and the
 * buffer is cut back on ROLLBACK TO (measured: ~5-15 µs a one-to-one message on the
 * writer, where an SQLite session per batch, which prepares its statements again for each
 * new session, cost ~60 µs).
 *
 * Apply runs the changes in order on another connection whose schema is the same, inside
 * its caller's transaction: an insert or update becomes INSERT OR REPLACE of the whole
 * row (rowid included, so rows that others name by rowid keep it), a delete a DELETE by key.
 *
 * Encoding, per change: op ('I' for a row's new values, inserted or updated; 'D' for a
 * delete), the table's name (u8 length, bytes), for a
 * rowid table the rowid (i64), then the values (new row, or the key for a delete), each a
 * type byte (SQLITE_INTEGER ...) and its bytes: i64 or f64 little-endian, u32 length and
 * the bytes for text and blobs, nothing for NULL.
 */
#include <errno.h>
#include <string.h>

#include "qim/log.h"
#include "qim/mem.h"
#include "store/sqlite_int.h"

#define CAPTURE_MARKS_MAX 8
#define TABLES_MAX 64

/* What the capture and the apply need to know of one table. */
typedef struct sq_table {
  char *name;
  bool rowid;       /* a rowid table */
  bool rowid_alias; /* whose INTEGER PRIMARY KEY column is the rowid */
  int ncols;
  char **cols;
  int npk, pk[8]; /* key columns in key order (WITHOUT ROWID tables) */
  sqlite3_stmt *put, *del; /* apply's statements */
} sq_table;

typedef struct sq_schema {
  sq_table t[TABLES_MAX];
  int n;
} sq_schema;

struct sq_capture {
  sqlite3 *db;
  sq_schema schema;
  uint8_t *buf;
  size_t len, cap;
  size_t marks[CAPTURE_MARKS_MAX];
  int nmarks;
  bool broken; /* a change it could not record: the bytes are not the transaction */
};

struct sq_replay {
  sqlite3 *db;
  sq_schema schema;
};

/* ---- the schema --------------------------------------------------------------------------- */

static char *dup_text(const unsigned char *s) {
  size_t n = strlen((const char *)s);
  char *d = qim_malloc(n + 1);
  memcpy(d, s, n + 1);
  return d;
}

static int table_columns(sqlite3 *db, sq_table *t) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return sq_errno(rc);
  sqlite3_bind_text(st, 1, t->name, -1, SQLITE_STATIC);
  int pk_of[8] = {0};
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    t->cols = qim_realloc(t->cols, (size_t)(t->ncols + 1) * sizeof *t->cols);
    t->cols[t->ncols] = dup_text(sqlite3_column_text(st, 0));
    int pk = sqlite3_column_int(st, 2);
    if (pk > 0 && pk <= 8) {
      pk_of[pk - 1] = t->ncols;
      if (pk > t->npk) t->npk = pk;
      t->rowid_alias = t->rowid && pk == 1 &&
                       sqlite3_stricmp((const char *)sqlite3_column_text(st, 1), "INTEGER") == 0;
    }
    t->ncols++;
  }
  sqlite3_finalize(st);
  memcpy(t->pk, pk_of, sizeof t->pk);
  if (t->npk != 1) t->rowid_alias = false;
  return rc == SQLITE_DONE ? 0 : sq_errno(rc);
}

/* Every ordinary table of the main schema, as it is now. */
static int schema_load(sqlite3 *db, sq_schema *s) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT name, wr FROM pragma_table_list WHERE schema = 'main'"
                              " AND type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return sq_errno(rc);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && s->n < TABLES_MAX) {
    sq_table *t = &s->t[s->n++];
    t->name = dup_text(sqlite3_column_text(st, 0));
    t->rowid = sqlite3_column_int(st, 1) == 0;
  }
  sqlite3_finalize(st);
  if (rc == SQLITE_ROW) return -E2BIG;
  if (rc != SQLITE_DONE) return sq_errno(rc);
  for (int i = 0; i < s->n; i++)
    if ((rc = table_columns(db, &s->t[i]))) return rc;
  return 0;
}

static void schema_free(sq_schema *s) {
  for (int i = 0; i < s->n; i++) {
    sq_table *t = &s->t[i];
    for (int c = 0; c < t->ncols; c++) qim_free(t->cols[c]);
    qim_free(t->cols);
    qim_free(t->name);
    sqlite3_finalize(t->put);
    sqlite3_finalize(t->del);
  }
  s->n = 0;
}

static sq_table *schema_find(sq_schema *s, const char *name, size_t len) {
  for (int i = 0; i < s->n; i++)
    if (strlen(s->t[i].name) == len && memcmp(s->t[i].name, name, len) == 0) return &s->t[i];
  return NULL;
}

/* ---- capture ------------------------------------------------------------------------------ */

static void put(sq_capture *c, const void *p, size_t n) {
  if (c->len + n > c->cap) {
    c->cap = (c->len + n) * 2 + 4096;
    c->buf = qim_realloc(c->buf, c->cap);
  }
  if (n) memcpy(c->buf + c->len, p, n); /* an empty value's pointer may be NULL */
  c->len += n;
}

static void put_u8(sq_capture *c, uint8_t v) { put(c, &v, 1); }

static void put_le(sq_capture *c, uint64_t v, int bytes) {
  uint8_t b[8];
  for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
  put(c, b, (size_t)bytes);
}

static void put_value(sq_capture *c, sqlite3_value *v) {
  int type = v ? sqlite3_value_type(v) : SQLITE_NULL;
  put_u8(c, (uint8_t)type);
  if (type == SQLITE_INTEGER) {
    put_le(c, (uint64_t)sqlite3_value_int64(v), 8);
  } else if (type == SQLITE_FLOAT) {
    double d = sqlite3_value_double(v);
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(c, u, 8);
  } else if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
    const void *p = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(v) : sqlite3_value_blob(v);
    int n = sqlite3_value_bytes(v);
    put_le(c, (uint64_t)n, 4);
    put(c, p, (size_t)n);
  }
}

static void put_head(sq_capture *c, uint8_t op, const sq_table *t, sqlite3_int64 rowid) {
  put_u8(c, op);
  size_t n = strlen(t->name);
  put_u8(c, (uint8_t)n);
  put(c, t->name, n);
  if (t->rowid) put_le(c, (uint64_t)rowid, 8);
}

static void put_row(sq_capture *c, const sq_table *t, sqlite3_int64 rowid) {
  put_head(c, 'I', t, rowid);
  for (int i = 0; i < t->ncols; i++) {
    sqlite3_value *v = NULL;
    if (sqlite3_preupdate_new(c->db, i, &v) != SQLITE_OK) c->broken = true;
    put_value(c, v);
  }
}

static void put_delete(sq_capture *c, const sq_table *t, sqlite3_int64 rowid) {
  put_head(c, 'D', t, rowid);
  for (int k = 0; !t->rowid && k < t->npk; k++) {
    sqlite3_value *v = NULL;
    if (sqlite3_preupdate_old(c->db, t->pk[k], &v) != SQLITE_OK) c->broken = true;
    put_value(c, v);
  }
}

static void hook(void *ctx, sqlite3 *db, int op, const char *zdb, const char *name,
                 sqlite3_int64 old_rowid, sqlite3_int64 new_rowid) {
  sq_capture *c = ctx;
  (void)db;
  if (strcmp(zdb, "main") != 0) return; /* temp tables are nobody's state */
  sq_table *t = schema_find(&c->schema, name, strlen(name));
  if (!t || sqlite3_preupdate_count(c->db) != t->ncols) {
    c->broken = true; /* a table or a column the capture did not load */
    return;
  }
  if (op == SQLITE_DELETE) {
    put_delete(c, t, old_rowid);
  } else {
    /* An update that moves a row to another rowid is a delete and an insert. */
    if (op == SQLITE_UPDATE && t->rowid && old_rowid != new_rowid) put_delete(c, t, old_rowid);
    put_row(c, t, new_rowid);
  }
}

int sq_capture_new(sqlite3 *db, sq_capture **out) {
  sq_capture *c = qim_calloc(1, sizeof *c);
  c->db = db;
  int rc = schema_load(db, &c->schema);
  if (rc) {
    schema_free(&c->schema);
    qim_free(c);
    return rc;
  }
  sqlite3_preupdate_hook(db, hook, c);
  *out = c;
  return 0;
}

void sq_capture_free(sq_capture *c) {
  if (!c) return;
  sqlite3_preupdate_hook(c->db, NULL, NULL);
  schema_free(&c->schema);
  qim_free(c->buf);
  qim_free(c);
}

void sq_capture_savepoint(sq_capture *c) {
  if (!c) return;
  if (c->nmarks < CAPTURE_MARKS_MAX)
    c->marks[c->nmarks++] = c->len;
  else
    c->broken = true; /* deeper than anything the store opens */
}

void sq_capture_release(sq_capture *c) {
  if (c && c->nmarks) c->nmarks--;
}

void sq_capture_rollback_to(sq_capture *c) {
  if (c && c->nmarks) c->len = c->marks[c->nmarks - 1];
}

void sq_capture_clear(sq_capture *c) {
  if (!c) return;
  c->len = 0;
  c->nmarks = 0;
  c->broken = false;
}

int sq_capture_bytes(const sq_capture *c, const uint8_t **p, size_t *n) {
  *p = c->buf;
  *n = c->len;
  return c->broken ? -EPROTO : 0;
}

/* ---- apply -------------------------------------------------------------------------------- */

typedef struct reader {
  const uint8_t *p, *end;
  bool bad;
} reader;

static const uint8_t *take(reader *r, size_t n) {
  if (r->bad || (size_t)(r->end - r->p) < n) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *at = r->p;
  r->p += n;
  return at;
}

static uint64_t take_le(reader *r, int bytes) {
  const uint8_t *b = take(r, (size_t)bytes);
  uint64_t v = 0;
  for (int i = 0; b && i < bytes; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* Binds the next encoded value to parameter i. */
static void bind_next(reader *r, sqlite3_stmt *st, int i) {
  const uint8_t *t = take(r, 1);
  int type = t ? *t : SQLITE_NULL;
  if (type == SQLITE_INTEGER) {
    sqlite3_bind_int64(st, i, (sqlite3_int64)take_le(r, 8));
  } else if (type == SQLITE_FLOAT) {
    uint64_t u = take_le(r, 8);
    double d;
    memcpy(&d, &u, 8);
    sqlite3_bind_double(st, i, d);
  } else if (type == SQLITE_TEXT || type == SQLITE_BLOB) {
    size_t n = (size_t)take_le(r, 4);
    const uint8_t *p = take(r, n);
    if (!p) return;
    /* An empty value stays empty, not NULL (a NULL pointer would bind NULL). */
    if (type == SQLITE_TEXT)
      sqlite3_bind_text(st, i, n ? (const char *)p : "", (int)n, SQLITE_STATIC);
    else if (n)
      sqlite3_bind_blob(st, i, p, (int)n, SQLITE_STATIC);
    else
      sqlite3_bind_zeroblob(st, i, 0);
  } else if (type == SQLITE_NULL) {
    sqlite3_bind_null(st, i);
  } else {
    r->bad = true;
  }
}

/* Appends `s` to the SQL being built in b (room for it is the caller's: 4 KiB). */
static void cat(char *b, size_t cap, const char *s) {
  size_t n = strlen(b);
  snprintf(b + n, cap - n, "%s", s);
}

static int prepare_put(sqlite3 *db, sq_table *t) {
  char sql[4096] = "INSERT OR REPLACE INTO \"";
  cat(sql, sizeof sql, t->name);
  cat(sql, sizeof sql, "\"(");
  bool with_rowid = t->rowid && !t->rowid_alias;
  if (with_rowid) cat(sql, sizeof sql, "rowid");
  for (int i = 0; i < t->ncols; i++) {
    if (i || with_rowid) cat(sql, sizeof sql, ", ");
    cat(sql, sizeof sql, "\"");
    cat(sql, sizeof sql, t->cols[i]);
    cat(sql, sizeof sql, "\"");
  }
  cat(sql, sizeof sql, ") VALUES(");
  for (int i = 0; i < t->ncols + with_rowid; i++) cat(sql, sizeof sql, i ? ", ?" : "?");
  cat(sql, sizeof sql, ")");
  return sqlite3_prepare_v2(db, sql, -1, &t->put, NULL);
}

static int prepare_del(sqlite3 *db, sq_table *t) {
  char sql[4096] = "DELETE FROM \"";
  cat(sql, sizeof sql, t->name);
  cat(sql, sizeof sql, "\" WHERE ");
  if (t->rowid) cat(sql, sizeof sql, "rowid = ?");
  for (int k = 0; !t->rowid && k < t->npk; k++) {
    if (k) cat(sql, sizeof sql, " AND ");
    cat(sql, sizeof sql, "\"");
    cat(sql, sizeof sql, t->cols[t->pk[k]]);
    cat(sql, sizeof sql, "\" = ?");
  }
  return sqlite3_prepare_v2(db, sql, -1, &t->del, NULL);
}

/* One change: 0, or -EINVAL (bytes that do not decode or name an unknown table), or an
 * SQLite failure as -errno. */
static int apply_one(sq_replay *y, reader *r) {
  const uint8_t *op = take(r, 1);
  size_t nlen = (size_t)take_le(r, 1);
  const uint8_t *name = take(r, nlen);
  sq_table *t = name ? schema_find(&y->schema, (const char *)name, nlen) : NULL;
  if (!op || !t || (*op != 'I' && *op != 'D')) return -EINVAL;
  sqlite3_stmt **slot = *op == 'I' ? &t->put : &t->del;
  int rc = *slot ? SQLITE_OK : *op == 'I' ? prepare_put(y->db, t) : prepare_del(y->db, t);
  if (rc != SQLITE_OK) return sq_errno(rc);
  sqlite3_stmt *st = *slot;
  int i = 1;
  if (t->rowid && (*op == 'D' || !t->rowid_alias))
    sqlite3_bind_int64(st, i++, (sqlite3_int64)take_le(r, 8));
  else if (t->rowid)
    take_le(r, 8); /* the alias column carries it */
  int values = *op == 'I' ? t->ncols : t->rowid ? 0 : t->npk;
  for (int k = 0; k < values; k++) bind_next(r, st, i++);
  rc = r->bad ? SQLITE_MISUSE : sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (r->bad) return -EINVAL;
  return rc == SQLITE_DONE ? 0 : sq_errno(rc);
}

int sq_replay_new(sqlite3 *db, sq_replay **out) {
  sq_replay *y = qim_calloc(1, sizeof *y);
  y->db = db;
  int rc = schema_load(db, &y->schema);
  if (rc) {
    schema_free(&y->schema);
    qim_free(y);
    return rc;
  }
  *out = y;
  return 0;
}

int sq_replay_apply(sq_replay *y, const uint8_t *p, size_t n) {
  reader r = {p, p + n, false};
  while (r.p < r.end) {
    int rc = apply_one(y, &r);
    if (rc) return rc;
  }
  return 0;
}

void sq_replay_free(sq_replay *y) {
  if (!y) return;
  schema_free(&y->schema);
  qim_free(y);
}
