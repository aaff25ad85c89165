/*
 * test_sqlite_capture.c — a transaction's row changes captured as bytes (sqlite_capture.c)
 * and applied to a second database with the same schema give that database the same rows,
 * rowids included: inserts, updates, upserts, a row moved to another rowid, deletes by
 * rowid and by a WITHOUT ROWID key, every value type, and the changes a ROLLBACK TO undid
 * left out. A change the capture could not record (a table created after it began) makes
 * its bytes unusable, and bytes that do not decode are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/sqlite_int.h"

static const char schema[] =
    "CREATE TABLE r(a INTEGER NOT NULL, b TEXT NOT NULL, c BLOB, d REAL, PRIMARY KEY(a, b));"
    "CREATE UNIQUE INDEX r_c ON r(c);"
    "CREATE TABLE n(x BLOB, y INTEGER);"
    "CREATE TABLE ip(id INTEGER PRIMARY KEY, v TEXT);"
    "CREATE TABLE w(k1 BLOB NOT NULL, k2 INTEGER NOT NULL, v BLOB, PRIMARY KEY(k2, k1))"
    " WITHOUT ROWID;";

static sqlite3 *open_db(void) {
  sqlite3 *db;
  assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, schema, NULL, NULL, NULL), SQLITE_OK);
  return db;
}

static void run(sqlite3 *db, const char *sql) {
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) fprintf(stderr, "%s: %s\n", sql, err ? err : "?");
  sqlite3_free(err);
  assert_int_equal(rc, SQLITE_OK);
}

/* Every row of every table, rowids included, as text. */
static char *dump(sqlite3 *db) {
  static const char *const q[] = {
      "SELECT 'r', rowid, quote(a), quote(b), quote(c), quote(d) FROM r ORDER BY rowid",
      "SELECT 'n', rowid, quote(x), quote(y) FROM n ORDER BY rowid",
      "SELECT 'ip', rowid, quote(id), quote(v) FROM ip ORDER BY rowid",
      "SELECT 'w', quote(k1), quote(k2), quote(v) FROM w ORDER BY k2, k1",
  };
  size_t cap = 1 << 16, len = 0;
  char *out = calloc(1, cap);
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, q[i], -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      for (int c = 0; c < sqlite3_column_count(st); c++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", sqlite3_column_text(st, c),
                                c + 1 < sqlite3_column_count(st) ? "," : "\n");
    sqlite3_finalize(st);
  }
  assert_true(len < cap - 1);
  return out;
}

static void replay(sqlite3 *to, const uint8_t *p, size_t n, int expect) {
  sq_replay *y;
  assert_int_equal(sq_replay_new(to, &y), 0);
  run(to, "BEGIN");
  assert_int_equal(sq_replay_apply(y, p, n), expect);
  run(to, expect == 0 ? "COMMIT" : "ROLLBACK");
  sq_replay_free(y);
}

static void test_replayed_changes_give_the_same_rows_and_rowids(void **state) {
  (void)state;
  sqlite3 *a = open_db(), *b = open_db();
  run(a, "INSERT INTO r VALUES(1, 'one', x'01', 1.5), (2, 'two', NULL, NULL);"
         "INSERT INTO n VALUES(x'aa', 1), (NULL, 2), (x'cc', 3);"
         "INSERT INTO ip(v) VALUES('kept before');"
         "INSERT INTO w VALUES(x'10', 1, 'v1'), (x'11', 1, 'v2');");
  sq_capture *cap;
  assert_int_equal(sq_capture_new(a, &cap), 0);
  run(b, "INSERT INTO r VALUES(1, 'one', x'01', 1.5), (2, 'two', NULL, NULL);"
         "INSERT INTO n VALUES(x'aa', 1), (NULL, 2), (x'cc', 3);"
         "INSERT INTO ip(v) VALUES('kept before');"
         "INSERT INTO w VALUES(x'10', 1, 'v1'), (x'11', 1, 'v2');");

  run(a, "BEGIN;"
         "INSERT INTO r VALUES(3, 'three', x'03', -2.25);"
         "INSERT INTO ip(id, v) VALUES(40, 'forty');"
         "INSERT INTO w VALUES(x'12', 2, NULL);"
         "INSERT INTO w VALUES(x'13', 3, x''), (x'14', 4, '');"); /* empty, not NULL */
  run(a, "SAVEPOINT op");
  sq_capture_savepoint(cap);
  run(a, "INSERT INTO r VALUES(9, 'undone', x'09', 0);"
         "UPDATE n SET y = 99;"
         "DELETE FROM w;");
  run(a, "ROLLBACK TO op");
  sq_capture_rollback_to(cap);
  run(a, "RELEASE op");
  sq_capture_release(cap);
  run(a, "UPDATE r SET d = 7.0, c = x'0202' WHERE a = 2;"
         "INSERT INTO r VALUES(1, 'one', x'0101', 3) ON CONFLICT(a, b) DO UPDATE SET c = excluded.c;"
         "UPDATE n SET rowid = rowid + 100 WHERE y = 2;" /* the row moves to another rowid */
         "DELETE FROM n WHERE y = 1;"
         "DELETE FROM w WHERE k1 = x'10' AND k2 = 1;"
         "UPDATE w SET v = 'changed' WHERE k2 = 1;"
         "UPDATE ip SET v = NULL WHERE id = 1;"
         "COMMIT;");
  const uint8_t *p;
  size_t n;
  assert_int_equal(sq_capture_bytes(cap, &p, &n), 0);
  assert_true(n > 0);
  replay(b, p, n, 0);
  char *da = dump(a), *db = dump(b);
  assert_string_equal(da, db);
  assert_non_null(strstr(db, "n,102,NULL,2\n")); /* the moved row kept its new rowid */
  assert_null(strstr(db, "undone"));
  assert_non_null(strstr(db, "w,X'13',3,X''\n"));
  assert_non_null(strstr(db, "w,X'14',4,''\n"));
  free(da);
  free(db);
  sq_capture_clear(cap);
  assert_int_equal(sq_capture_bytes(cap, &p, &n), 0);
  assert_int_equal(n, 0);
  sq_capture_free(cap);
  sqlite3_close(a);
  sqlite3_close(b);
}

static void test_a_table_the_capture_does_not_know_makes_its_bytes_unusable(void **state) {
  (void)state;
  sqlite3 *a = open_db();
  sq_capture *cap;
  assert_int_equal(sq_capture_new(a, &cap), 0);
  run(a, "CREATE TABLE later(v); INSERT INTO later VALUES(1);");
  const uint8_t *p;
  size_t n;
  assert_int_equal(sq_capture_bytes(cap, &p, &n), -EPROTO);
  sq_capture_clear(cap);
  run(a, "INSERT INTO ip(v) VALUES('fine');"); /* a known table: usable again */
  assert_int_equal(sq_capture_bytes(cap, &p, &n), 0);
  assert_true(n > 0);
  sq_capture_free(cap);
  sqlite3_close(a);
}

static void test_bytes_that_do_not_decode_are_refused(void **state) {
  (void)state;
  sqlite3 *a = open_db(), *b = open_db();
  sq_capture *cap;
  assert_int_equal(sq_capture_new(a, &cap), 0);
  run(a, "INSERT INTO w VALUES(x'0102030405', 5, 'value');");
  const uint8_t *p;
  size_t n;
  assert_int_equal(sq_capture_bytes(cap, &p, &n), 0);
  replay(b, p, n - 3, -EINVAL); /* cut inside the last value */
  uint8_t unknown[64];
  memcpy(unknown, p, n < sizeof unknown ? n : sizeof unknown);
  unknown[2] = 'z'; /* table "z" */
  replay(b, unknown, n < sizeof unknown ? n : sizeof unknown, -EINVAL);
  replay(b, p, n, 0);
  char *da = dump(a), *db = dump(b);
  assert_string_equal(da, db); /* the refused ones left nothing */
  free(da);
  free(db);
  sq_capture_free(cap);
  sqlite3_close(a);
  sqlite3_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replayed_changes_give_the_same_rows_and_rowids),
      cmocka_unit_test(test_a_table_the_capture_does_not_know_makes_its_bytes_unusable),
      cmocka_unit_test(test_bytes_that_do_not_decode_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
