/*
 * test_client_store.c — the client runtime's local store (src/client/client_store.c):
 * entries de-duplicated on event_id, the cursor moving only with a stored page,
 * conversation summaries, rebuild's reset, pending sends, a device id that survives a
 * reopen, and LocalStoreFailure through qim_client_open when the file is no database.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/client_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "testsupport.h"

static qim__client_store *open_memory(void) {
  qim_local_store_location loc = {.mode = QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST};
  qim__client_store *s = NULL;
  assert_int_equal(qim__client_store_open(&loc, &s), 0);
  return s;
}

static qim__client_entry msg(qim_event_id id, const char *topic, uint64_t seq, const char *from) {
  return (qim__client_entry){
      .event_id = id, .topic = topic, .type = "message", .from = from, .seq = seq, .json = "{}"};
}

/* The number `sql` counts, read straight from the database file under `dir`. */
static int count_rows(const char *dir, const char *sql) {
  char path[512];
  snprintf(path, sizeof path, "%s/qimclient.db", dir);
  return (int)qim_test_sqlite_int(path, sql);
}

static void test_page_repeated_entry_is_stored_once_and_not_inserted_again(void **state) {
  (void)state;
  qim__client_store *s = open_memory();
  qim__client_entry page1[] = {msg(256, "grpA", 1, "usrB"), msg(512, "grpA", 2, "usrB")};
  qim__client_entry page2[] = {msg(512, "grpA", 2, "usrB"), msg(768, "grpA", 3, "usrB")};
  bool ins[2];
  assert_int_equal(qim__client_store_add_page(s, page1, 2, "usrSelf", "c1", ins), 0);
  assert_true(ins[0] && ins[1]);
  assert_int_equal(qim__client_store_add_page(s, page2, 2, "usrSelf", "c2", ins), 0);
  assert_false(ins[0]); /* sync is at least once: the repeat is not news */
  assert_true(ins[1]);
  char *cur = NULL;
  assert_int_equal(qim__client_store_cursor(s, &cur), 0);
  assert_string_equal(cur, "c2");
  qim_free(cur);
  qim__client_store_close(s);
}

static void test_unread_counts_messages_from_others_only(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-store");
  qim_local_store_location loc = {.scope = dir, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT};
  qim__client_store *s = NULL;
  assert_int_equal(qim__client_store_open(&loc, &s), 0);
  qim__client_entry page[] = {msg(256, "grpA", 1, "usrB"), msg(512, "grpA", 2, "usrSelf"),
                              msg(768, "grpA", 3, "usrB")};
  bool ins[3];
  assert_int_equal(qim__client_store_add_page(s, page, 3, "usrSelf", "c", ins), 0);
  assert_int_equal(count_rows(dir, "SELECT unread FROM conversations WHERE topic='grpA'"), 2);
  assert_int_equal(count_rows(dir, "SELECT latest_seq FROM conversations WHERE topic='grpA'"), 3);
  /* A session listing sets the read position: unread is what lies beyond it. */
  assert_int_equal(qim__client_store_set_summary(s, "grpA", 3, 2), 0);
  assert_int_equal(count_rows(dir, "SELECT unread FROM conversations WHERE topic='grpA'"), 1);
  qim__client_store_close(s);
  qim_test_rmtree(dir);
}

static void test_reset_empties_entries_and_summaries_and_sets_the_fresh_cursor(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-store");
  qim_local_store_location loc = {.scope = dir, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT};
  qim__client_store *s = NULL;
  assert_int_equal(qim__client_store_open(&loc, &s), 0);
  qim__client_entry page[] = {msg(256, "grpA", 1, "usrB")};
  bool ins[1];
  assert_int_equal(qim__client_store_add_page(s, page, 1, "usrSelf", "old", ins), 0);
  qim_client_message_id cmid = {{1}};
  assert_int_equal(qim__client_store_pending_add(s, &cmid, "grpA", "\"x\""), 0);
  assert_int_equal(qim__client_store_reset(s, "fresh"), 0);
  assert_int_equal(count_rows(dir, "SELECT count(*) FROM entries"), 0);
  assert_int_equal(count_rows(dir, "SELECT count(*) FROM conversations"), 0);
  assert_int_equal(count_rows(dir, "SELECT count(*) FROM pending"), 1); /* sends survive */
  char *cur = NULL;
  assert_int_equal(qim__client_store_cursor(s, &cur), 0);
  assert_string_equal(cur, "fresh");
  qim_free(cur);
  assert_int_equal(qim__client_store_reset(s, NULL), 0);
  assert_int_equal(qim__client_store_cursor(s, &cur), 0);
  assert_null(cur);
  qim__client_store_close(s);
  qim_test_rmtree(dir);
}

static void test_pending_sends_list_in_order_and_leave_when_removed(void **state) {
  (void)state;
  qim__client_store *s = open_memory();
  qim_client_message_id a = {{1, 2}}, b = {{3, 4}};
  assert_int_equal(qim__client_store_pending_add(s, &a, "grpA", "{\"txt\":\"a\"}"), 0);
  assert_int_equal(qim__client_store_pending_add(s, &b, "grpB", "{\"txt\":\"b\"}"), 0);
  /* The same cmid twice is refused: one ClientMessageId is one message. */
  assert_int_equal(qim__client_store_pending_add(s, &a, "grpA", "1"),
                   QIM_E_CLIENT_LOCAL_STORE_FAILURE);
  qim__client_pending *p = NULL;
  size_t n = 0;
  assert_int_equal(qim__client_store_pending_list(s, &p, &n), 0);
  assert_int_equal(n, 2);
  assert_memory_equal(p[0].cmid.b, a.b, 16);
  assert_string_equal(p[1].topic, "grpB");
  assert_string_equal(p[1].content, "{\"txt\":\"b\"}");
  qim__client_pending_free(p, n);
  assert_int_equal(qim__client_store_pending_remove(s, &a), 0);
  assert_int_equal(qim__client_store_pending_drop_topic(s, "grpB"), 0);
  assert_int_equal(qim__client_store_pending_list(s, &p, &n), 0);
  assert_int_equal(n, 0);
  qim__client_pending_free(p, n);
  qim__client_store_close(s);
}

static void test_device_id_is_made_once_and_kept_across_reopen(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-store");
  qim_local_store_location loc = {.scope = dir, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT};
  qim__client_store *s = NULL;
  qim_device_id d1, d2, d3;
  assert_int_equal(qim__client_store_open(&loc, &s), 0);
  assert_int_equal(qim__client_store_device(s, &d1), 0);
  assert_int_equal(qim__client_store_device(s, &d2), 0);
  qim__client_store_close(s);
  assert_int_equal(qim__client_store_open(&loc, &s), 0);
  assert_int_equal(qim__client_store_device(s, &d3), 0);
  qim__client_store_close(s);
  assert_false(qim_u128_is_zero(d1.v));
  assert_true(qim_u128_eq(d1.v, d2.v) && qim_u128_eq(d1.v, d3.v));
  qim_test_rmtree(dir);
}

static void test_open_on_a_file_that_is_not_a_database_is_local_store_failure(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-store");
  char path[512];
  snprintf(path, sizeof path, "%s/qimclient.db", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 0; i < 200; i++) fputs("this is not an SQLite database file. ", f);
  fclose(f);
  qim_client_config cfg = {.url = "ws://127.0.0.1:1",
                           .api_key = "k",
                           .store = {.scope = dir, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT}};
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), QIM_E_CLIENT_LOCAL_STORE_FAILURE);
  assert_null(c);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_page_repeated_entry_is_stored_once_and_not_inserted_again),
      cmocka_unit_test(test_unread_counts_messages_from_others_only),
      cmocka_unit_test(test_reset_empties_entries_and_summaries_and_sets_the_fresh_cursor),
      cmocka_unit_test(test_pending_sends_list_in_order_and_leave_when_removed),
      cmocka_unit_test(test_device_id_is_made_once_and_kept_across_reopen),
      cmocka_unit_test(test_open_on_a_file_that_is_not_a_database_is_local_store_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
