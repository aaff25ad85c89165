/*
 * test_sqlite_pcache.c — the store's page cache (src/store/sqlite_pcache.c) skips the
 * truncates that cannot remove a page and passes on those that can: commits after B-tree
 * splits that swapped pages through the lock-byte page's number walk nothing and lose
 * nothing, and a rolled-back transaction that grew the file has its pages cut away.
 *
 * A spy stacked on the store's cache counts the page moves to the lock-byte page's
 * number, so the test knows the swaps it is about happened.
 */
#include <sqlite3.h>

#include "store/sqlite_int.h"
#include "testsupport.h"

#define LOCK_BYTE_PAGE 262145u /* 1 GiB / 4 KiB + 1 */

static sqlite3_pcache_methods2 store_cache;
static unsigned moves_to_lock_byte_page;

static void spy_rekey(sqlite3_pcache *p, sqlite3_pcache_page *pg, unsigned from, unsigned to) {
  if (to == LOCK_BYTE_PAGE) moves_to_lock_byte_page++;
  store_cache.xRekey(p, pg, from, to);
}

static int install(void **state) {
  (void)state;
  /* Twice, as two stores' first opens might: the second must not wrap the first (every
   * page-cache call would then recurse until the stack ran out). */
  if (sq_pcache_install() != SQLITE_OK || sq_pcache_install() != SQLITE_OK) return -1;
  if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &store_cache) != SQLITE_OK) return -1;
  sqlite3_pcache_methods2 spy = store_cache;
  spy.xRekey = spy_rekey;
  if (sqlite3_config(SQLITE_CONFIG_PCACHE2, &spy) != SQLITE_OK) return -1;
  return sqlite3_initialize() == SQLITE_OK ? 0 : -1;
}

static void exec(sqlite3 *db, const char *sql) {
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) fail_msg("%s: %s", sql, err ? err : "?");
}

/* n rows of 300 bytes at random keys, bound one by one (a query that makes the rows
 * would add a temporary table, with a page cache of its own, to the counts). */
static void insert_rows(sqlite3 *db, int n) {
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, zeroblob(300))", -1, &st, NULL),
                   SQLITE_OK);
  for (int i = 0; i < n; i++) {
    uint8_t key[16];
    sqlite3_randomness(sizeof key, key);
    sqlite3_bind_blob(st, 1, key, sizeof key, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
}

static long long count_rows(sqlite3 *db) {
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), total(length(v)) FROM t", -1, &st, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  long long n = sqlite3_column_int64(st, 0);
  assert_int_equal((long long)sqlite3_column_double(st, 1), n * 300);
  sqlite3_finalize(st);
  return n;
}

/* The database passes SQLite's integrity check and holds `rows` rows. */
static void assert_intact(sqlite3 *db, long long rows) {
  assert_int_equal(count_rows(db), rows);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
  sqlite3_finalize(st);
}

/* A WAL database with a random-key table, as the store's writer uses them. */
static sqlite3 *open_db(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/t.db", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA cache_size=-2048;"
           "CREATE TABLE IF NOT EXISTS t(k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID");
  return db;
}

/* Transaction `round`: 40 rows at random keys, and (from the second round) the deletion
 * of every row whose key starts with a byte below 40, which frees pages for the next
 * splits to take, out of order. Returns the rows it kept. */
static long long churn_round(sqlite3 *db, int round) {
  exec(db, "BEGIN IMMEDIATE");
  insert_rows(db, 40);
  if (round % 10 == 9) exec(db, "DELETE FROM t WHERE substr(k, 1, 1) < x'28'");
  long long n = count_rows(db);
  exec(db, "COMMIT");
  return n;
}

static void test_commits_after_swapping_splits_walk_nothing_and_lose_nothing(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("pcache");
  sqlite3 *db = open_db(dir);
  uint64_t all0, walked0, all, walked;
  sq_pcache_counts(&all0, &walked0);
  long long kept = 0;
  for (int round = 0; round < 400; round++) kept = churn_round(db, round);
  sq_pcache_counts(&all, &walked);
  assert_true(moves_to_lock_byte_page > 0); /* the splits swapped pages through it */
  assert_true(all - all0 >= 400);           /* a truncate at every commit */
  assert_true(walked - walked0 < 10);       /* and none of them for nothing */
  assert_intact(db, kept);
  sqlite3_close(db);
  db = open_db(dir); /* from the file, not the cache */
  assert_intact(db, kept);
  sqlite3_close(db);
  qim_test_rmtree(dir);
}

static void test_a_rolled_back_growth_is_cut_from_the_cache(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("pcache");
  sqlite3 *db = open_db(dir);
  insert_rows(db, 200);
  uint64_t all, walked0, walked;
  sq_pcache_counts(&all, &walked0);
  exec(db, "BEGIN IMMEDIATE");
  insert_rows(db, 2000);
  exec(db, "ROLLBACK");
  sq_pcache_counts(&all, &walked);
  assert_true(walked > walked0); /* the pages past the old end had to go */
  assert_int_equal(count_rows(db), 200);
  /* The file grows again over the same page numbers: nothing of the rolled-back pages. */
  insert_rows(db, 1000);
  assert_intact(db, 1200);
  sqlite3_close(db);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_commits_after_swapping_splits_walk_nothing_and_lose_nothing),
      cmocka_unit_test(test_a_rolled_back_growth_is_cut_from_the_cache),
  };
  return cmocka_run_group_tests(tests, install, NULL);
}
