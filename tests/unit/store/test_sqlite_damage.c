/*
 * test_sqlite_damage.c — a damaged database is reported, not trusted and not a crash: a
 * stored value that does not decode is the domain's corruption error, and a read the
 * database can no longer answer is the domain's Unavailable. The damage is done through a
 * second SQLite connection to the same file, the way a broken disk or a stray tool would.
 */
#include <sqlite3.h>

#include "store_fixture.h"

typedef struct env {
  char *dir;
  qim_store *s;
} env;

static int setup(void **state) {
  env *e = calloc(1, sizeof *e);
  e->dir = qim_test_tmpdir("store-damage");
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env *e = *state;
  qim_store_close(e->s);
  qim_test_rmtree(e->dir);
  free(e);
  return 0;
}

/* Runs `sql` on a connection of its own to the store's file. */
static void tamper(const char *dir, const char *sql) {
  char path[4096];
  snprintf(path, sizeof path, "%s/store.db", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) fprintf(stderr, "tamper: %s\n", err ? err : "?");
  sqlite3_free(err);
  assert_int_equal(rc, SQLITE_OK);
  sqlite3_close(db);
}

static void append_entry(qim_store *s) {
  qim_shard_config cfg = fx_options().shards;
  qim_mailbox_entry en = {0};
  en.tenant_id = fx_tenant();
  en.user_id = fx_user(1);
  en.mailbox_seq = qim_mailbox_seq_make(0, 1);
  en.event_id = qim_event_id_make(en.mailbox_seq, 0);
  uint32_t chunk = 0;
  qim_append_mailbox_batch b = {0};
  b.shard = qim_shard_of_user(&cfg, en.tenant_id, en.user_id);
  b.lane = qim_lane_of_user(&cfg, en.tenant_id, en.user_id);
  b.mailbox_seq = en.mailbox_seq;
  b.entries = &en;
  b.entry_count = 1;
  b.progress = (qim_dispatch_progress){b.dispatch_id, b.shard, b.lane, &chunk, 1, false, 0};
  qim_store_mailbox_append_req r = {0};
  r.batch = &b;
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.append, &r), 0);
}

static int range_status(qim_store *s) {
  qim_store_mailbox_range_req r = {0};
  r.query = (qim_mailbox_range_query){fx_tenant(), fx_user(1), 0, UINT64_MAX, 10, 0};
  int rc = QIM_STORE_SYNC(s, mailboxes.range, &r);
  assert_null(r.out_entries); /* only failures are expected here */
  return rc;
}

static void test_undecodable_mailbox_entry_is_corrupt_entry(void **state) {
  env *e = *state;
  append_entry(e->s);
  tamper(e->dir, "UPDATE mailbox SET body = x'0102'");
  assert_int_equal(range_status(e->s), QIM_E_MAILBOX_CORRUPT_ENTRY);
}

static void test_undecodable_intent_is_an_invariant_violation(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 1, 1, "x");
  qim_store_intent_reserve_req r = {0};
  r.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  qim_commit_intent_free(&r.out.intent);
  tamper(e->dir, "UPDATE intents SET body = x'00'");
  qim_store_intent_load_req l = {0};
  l.key = p.key;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.load, &l), QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  qim_commit_intent_free(&p);
}

static void test_unanswerable_reads_are_unavailable_in_their_domain(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  append_entry(e->s);
  tamper(e->dir,
         "DROP TABLE log_streams; DROP TABLE mailbox; DROP TABLE member_versions;"
         " DROP TABLE records;");
  qim_store_log_read_req lr = {0};
  lr.stream = (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0};
  lr.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &lr), QIM_E_COMMIT_LOG_UNAVAILABLE);
  assert_int_equal(range_status(e->s), QIM_E_MAILBOX_UNAVAILABLE);
  qim_store_members_at_req ma = {0};
  ma.tenant_id = fx_tenant();
  ma.conversation_id = fx_conv(1);
  ma.version = 1;
  ma.limit = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, conversations.members_at, &ma), QIM_E_FANOUT_UNAVAILABLE);
  qim_store_record_get_req rg = {0};
  rg.tenant_id = fx_tenant();
  rg.conversation_id = fx_conv(1);
  rg.seq = 1;
  assert_int_equal(QIM_STORE_SYNC(e->s, history.get, &rg), QIM_E_MESSAGE_STORE_UNAVAILABLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_undecodable_mailbox_entry_is_corrupt_entry, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_undecodable_intent_is_an_invariant_violation, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_unanswerable_reads_are_unavailable_in_their_domain,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
