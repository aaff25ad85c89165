/*
 * test_pull.c — MailboxPullRequest → MailboxPage: pages never split an event group (by items or
 * bytes), covered_through_seq keeps up for a user with no entries, up_to_seq bounds a page,
 * cursors expire below the trim floor (retention by count and by age) or ahead of what the shard
 * holds, cursors of older epochs stay valid, and the MailboxStoreError variants a pull can give:
 * GroupTooLarge, CursorExpired, CorruptEntry, InvariantViolation, Unavailable.
 */
#include <sqlite3.h>

#include "mb_fixture.h"

typedef struct world {
  fx_env *env;
  qim_mailbox *m;
  qim_manual_clock clock;
} world;

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  w->env = fx_env_new("mb-pull");
  qim_manual_clock_init(&w->clock, 1700000000000ull);
  qim_mailbox_options o = fx_mb_options();
  o.clock = &w->clock.clock;
  w->m = fx_mailbox(w->env->store, &o);
  fx_acquire_all(w->m);
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  qim_mailbox_free(w->m);
  fx_env_free(w->env);
  free(w);
  return 0;
}

/* A message from `from` mentioning `to` (a two-entry group for `to`), `extra` bytes long. */
static qim_mailbox_seq send_mention(world *w, uint64_t n, qim_user_id from, qim_user_id to, size_t extra) {
  char name[32], *payload = malloc(200 + extra);
  qim_user_id_format(to, name, sizeof name);
  int len = sprintf(payload, "{\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}}],\"txt\":\"", name);
  memset(payload + len, 'x', extra);
  strcpy(payload + len + extra, "\"}");
  fx_msg msg = {.n = n, .sender = from, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true, .payload = payload};
  qim_user_id r[] = {from, to};
  qim_mailbox_seq seq = fx_send(w->env->store, &msg, qim_shard_of_user(&(qim_shard_config){FX_SHARDS, FX_LANES}, fx_tenant(), to), r, 2);
  free(payload);
  return seq;
}

static int pull_once(qim_mailbox *m, qim_user_id u, qim_mailbox_seq from, uint32_t items, uint32_t bytes,
                     qim_mailbox_page *page, qim_error *err) {
  qim_mailbox_cursor c = fx_cursor(m, u, from), next = {0};
  qim_mailbox_pull_request rq = fx_pull_request(u, &c, items, bytes);
  int rc = qim_mailbox_pull_sync(m, &rq, page, &next, err);
  qim_mailbox_cursor_free(&c);
  qim_mailbox_cursor_free(&next);
  return rc;
}

/* ---- pages ---------------------------------------------------------------------------------------- */

static void test_pages_never_split_an_event_group(void **state) {
  world *w = *state;
  qim_user_id a = fx_user_on(0, 0, 0), b = fx_user_on(0, 1, 0);
  qim_mailbox_seq seqs[5];
  for (int i = 0; i < 5; i++) seqs[i] = send_mention(w, (uint64_t)(10 + i), a, b, 10);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  /* 3 items per page: only one 2-entry group fits, never a group and a half */
  fx_pulled p = fx_pull_all(w->m, b, 0, 3);
  assert_int_equal(p.n, 10);
  assert_int_equal(p.pages, 5);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(p.e[2 * i].mailbox_seq, seqs[i]);
    assert_int_equal(p.e[2 * i + 1].mailbox_seq, seqs[i]);
    assert_int_equal(p.e[2 * i + 1].event_type, QIM_EVENT_TYPE_MENTION);
  }
  fx_pulled_free(&p);
  qim_mailbox_page page;
  assert_int_equal(pull_once(w->m, b, 0, 5, 0, &page, NULL), 0); /* 5 items: two groups */
  assert_int_equal(page.entry_count, 4);
  assert_true(page.has_more);
  assert_int_equal(page.covered_through_seq, seqs[1]); /* only complete groups are covered */
  qim_mailbox_page_free(&page);
  /* by bytes: each group carries ~80 bytes of body */
  assert_int_equal(pull_once(w->m, b, 0, 100, 200, &page, NULL), 0);
  assert_int_equal(page.entry_count, 4);
  assert_true(page.has_more);
  assert_int_equal(page.covered_through_seq, seqs[1]);
  qim_mailbox_page_free(&page);
  /* up_to_seq bounds the page; covered stops there */
  qim_mailbox_cursor c = fx_cursor(w->m, b, 0), next;
  qim_mailbox_pull_request rq = fx_pull_request(b, &c, 100, 0);
  rq.range.up_to_seq = seqs[2];
  assert_int_equal(qim_mailbox_pull_sync(w->m, &rq, &page, &next, NULL), 0);
  assert_int_equal(page.entry_count, 6);
  assert_false(page.has_more);
  assert_int_equal(page.covered_through_seq, seqs[2]);
  assert_int_equal(page.lane_watermark, seqs[4]);
  assert_int_equal(next.last_applied_seq, seqs[2]);
  qim_mailbox_page_free(&page);
  qim_mailbox_cursor_free(&next);
  qim_mailbox_cursor_free(&c);
}

static void test_a_group_larger_than_the_page_is_group_too_large(void **state) {
  world *w = *state;
  qim_user_id a = fx_user_on(1, 0, 0), b = fx_user_on(1, 1, 0);
  send_mention(w, 20, a, b, 500);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_mailbox_page page;
  qim_error err;
  assert_int_equal(pull_once(w->m, b, 0, 1, 0, &page, &err), QIM_E_MAILBOX_GROUP_TOO_LARGE); /* 2 entries */
  assert_int_equal(err.code, QIM_E_MAILBOX_GROUP_TOO_LARGE);
  assert_int_equal(pull_once(w->m, b, 0, 10, 100, &page, &err), QIM_E_MAILBOX_GROUP_TOO_LARGE); /* 500+ bytes */
  assert_int_equal(pull_once(w->m, b, 0, 10, 1000, &page, &err), 0);
  assert_int_equal(page.entry_count, 2);
  qim_mailbox_page_free(&page);
}

static void test_a_quiet_users_covered_seq_keeps_up(void **state) {
  world *w = *state;
  qim_user_id talker = fx_user_on(2, 0, 0), quiet = fx_user_on(2, 0, 1);
  fx_msg msg = {.n = 30, .sender = talker, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq last = 0;
  for (int i = 0; i < 4; i++) {
    msg.n = 30 + (uint64_t)i;
    last = fx_send(w->env->store, &msg, 2, &talker, 1); /* quiet is in the same lane, never a recipient */
  }
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  fx_pulled p = fx_pull_all(w->m, quiet, 0, 10);
  assert_int_equal(p.n, 0);
  assert_int_equal(p.covered, last);
  assert_int_equal(p.watermark, last);
  fx_pulled_free(&p);
  /* and from there, the next page starts after it */
  qim_user_id r[] = {talker, quiet};
  msg.n = 40;
  qim_mailbox_seq mine = fx_send(w->env->store, &msg, 2, r, 2);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  p = fx_pull_all(w->m, quiet, last, 10);
  assert_int_equal(p.n, 1);
  assert_int_equal(p.e[0].mailbox_seq, mine);
  assert_int_equal(p.covered, mine);
  fx_pulled_free(&p);
}

/* ---- expiry ------------------------------------------------------------------------------------------ */

static void expect_expired(world *w, qim_user_id u, qim_mailbox_seq from, qim_mailbox_seq floor) {
  qim_mailbox_page page;
  qim_error err;
  assert_int_equal(pull_once(w->m, u, from, 10, 0, &page, &err), QIM_E_MAILBOX_CURSOR_EXPIRED);
  assert_int_equal(err.code, QIM_E_MAILBOX_CURSOR_EXPIRED);
  assert_int_equal(err.trim_watermark, floor);
}

static void test_cursors_below_the_count_retention_floor_expire(void **state) {
  world *w = *state;
  qim_mailbox_free(w->m);
  qim_mailbox_options o = fx_mb_options();
  o.retain_count = 2;
  o.retain_age_ms = QIM_MAILBOX_KEEP_FOREVER;
  w->m = fx_mailbox(w->env->store, &o); /* takes the shards over again: fences at offset 2 */
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(0, 1, 0);
  fx_msg msg = {.sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq s[4];
  for (int i = 0; i < 4; i++) {
    msg.n = 50 + (uint64_t)i;
    s[i] = fx_send(w->env->store, &msg, 0, &u, 1); /* offsets 3..6 */
  }
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_mailbox_retention_kick(w->m);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  /* the newest 2 records stay (offsets 5, 6): everything up to s[1] was trimmed */
  qim_mailbox_lane_status st;
  qim_mailbox_lane_status_get(w->m, 0, 1, &st);
  qim_mailbox_seq floor = s[1] + 1;
  assert_int_equal(st.watermark.floor, floor);
  assert_int_equal(st.trimmed, 4); /* two fences and two dispatches */
  expect_expired(w, u, 0, floor);
  expect_expired(w, u, s[0], floor);
  fx_pulled p = fx_pull_all(w->m, u, s[1], 10); /* lost nothing: still valid */
  assert_int_equal(p.n, 2);
  assert_int_equal(p.e[0].mailbox_seq, s[2]);
  fx_pulled_free(&p);
  qim_authenticated_actor a = fx_actor(u, 1);
  qim_mailbox_cursor c;
  assert_int_equal(qim_mailbox_cursor_open_sync(w->m, &a, QIM_MAILBOX_CURSOR_FROM_FLOOR, &c, NULL), 0);
  assert_int_equal(c.last_applied_seq, s[1]);
  qim_mailbox_cursor_free(&c);
  /* the dispatch log went too, below both lanes' floors */
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, 0}, .from = 1, .max = 10};
  assert_int_equal(QIM_STORE_SYNC(w->env->store, logs.read, &r), QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  assert_int_equal(r.out_trim, qim_mailbox_seq_offset(floor));
}

static void test_cursors_below_the_age_retention_floor_expire(void **state) {
  world *w = *state;
  qim_mailbox_free(w->m);
  qim_mailbox_options o = fx_mb_options();
  o.clock = &w->clock.clock;
  o.retain_count = QIM_MAILBOX_KEEP_ALL;
  o.retain_age_ms = 1000;
  w->m = fx_mailbox(w->env->store, &o);
  fx_acquire_all(w->m);
  qim_user_id u = fx_user_on(1, 0, 0);
  fx_msg msg = {.sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq s[3];
  for (int i = 0; i < 3; i++) {
    msg.n = (uint64_t)(i * 600); /* created at +0, +600, +1200 ms */
    s[i] = fx_send(w->env->store, &msg, 1, &u, 1);
  }
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_manual_clock_set_wall(&w->clock, 1700000000000ull + 1700); /* the first two are > 1 s old */
  qim_mailbox_retention_kick(w->m);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  expect_expired(w, u, 0, s[1] + 1);
  fx_pulled p = fx_pull_all(w->m, u, s[1], 10);
  assert_int_equal(p.n, 1);
  assert_int_equal(p.e[0].mailbox_seq, s[2]);
  fx_pulled_free(&p);
}

static void test_a_cursor_ahead_of_what_the_shard_holds_expires(void **state) {
  world *w = *state;
  qim_user_id u = fx_user_on(2, 1, 0);
  fx_msg msg = {.n = 60, .sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq s1 = fx_send(w->env->store, &msg, 2, &u, 1);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  expect_expired(w, u, s1 + 1, 0); /* above the watermark */
  /* a cursor claiming epoch 0 for an offset whose record carries epoch 1: the log it came from
   * lost its tail and the offset was reused */
  expect_expired(w, u, qim_mailbox_seq_make(0, qim_mailbox_seq_offset(s1)), 0);
  fx_pulled p = fx_pull_all(w->m, u, qim_mailbox_seq_make(1, 1), 10); /* the fence's seq: fine */
  assert_int_equal(p.n, 1);
  fx_pulled_free(&p);
}

static void test_cursors_from_an_older_epoch_stay_valid(void **state) {
  world *w = *state;
  qim_user_id u = fx_user_on(0, 0, 0);
  fx_msg msg = {.n = 70, .sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq s1 = fx_send(w->env->store, &msg, 0, &u, 1);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_mailbox_cursor old = fx_cursor(w->m, u, s1); /* identity epoch 1 */
  assert_int_equal(qim_mailbox_shard_acquire_sync(w->m, 0, NULL), 0); /* epoch 2 */
  msg.n = 71;
  qim_mailbox_seq s2 = fx_send(w->env->store, &msg, 0, &u, 1);
  assert_int_equal(qim_mailbox_seq_epoch(s2), 2);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  qim_mailbox_pull_request rq = fx_pull_request(u, &old, 10, 0);
  qim_mailbox_page page;
  qim_mailbox_cursor next;
  assert_int_equal(qim_mailbox_pull_sync(w->m, &rq, &page, &next, NULL), 0);
  assert_int_equal(page.entry_count, 1);
  assert_int_equal(page.entries[0].mailbox_seq, s2);
  assert_int_equal(next.identity.shard_epoch, 2);
  assert_int_equal(next.last_applied_seq, s2);
  qim_mailbox_page_free(&page);
  qim_mailbox_cursor_free(&next);
  qim_mailbox_cursor_free(&old);
}

/* ---- store errors ------------------------------------------------------------------------------------- */

static void test_an_undecodable_stored_entry_is_corrupt_entry(void **state) {
  world *w = *state;
  qim_user_id u = fx_user_on(1, 1, 0);
  fx_msg msg = {.n = 80, .sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  fx_send(w->env->store, &msg, 1, &u, 1);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/store.db", w->env->dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  assert_int_equal(sqlite3_exec(db, "UPDATE mailbox SET body = x'0102'", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  qim_mailbox_page page;
  qim_error err;
  assert_int_equal(pull_once(w->m, u, 0, 10, 0, &page, &err), QIM_E_MAILBOX_CORRUPT_ENTRY);
}

/* A wrapper that damages range answers, to prove the page is checked. */
static int damage;
static void damage_range(fx_wrap *wrap, qim_store_req *r) {
  (void)wrap;
  qim_store_mailbox_range_req *q = (qim_store_mailbox_range_req *)r;
  if (r->status || q->out_count < 2) return;
  if (damage == 1) { /* out of order */
    qim_mailbox_entry t = q->out_entries[0];
    q->out_entries[0] = q->out_entries[1];
    q->out_entries[1] = t;
  } else if (damage == 2) { /* a group cut in half: its first entry missing */
    qim_mailbox_entry_free(&q->out_entries[0]);
    memmove(q->out_entries, q->out_entries + 1, (q->out_count - 1) * sizeof *q->out_entries);
    q->out_count--;
  } else if (damage == 3) { /* someone else's entry */
    q->out_entries[1].user_id.v.lo ^= 1;
  }
}

static void test_damaged_range_answers_are_caught(void **state) {
  world *w = *state;
  qim_user_id a = fx_user_on(2, 0, 0), b = fx_user_on(2, 1, 0);
  send_mention(w, 90, a, b, 5);
  send_mention(w, 91, a, b, 5);
  assert_int_equal(qim_mailbox_drain(w->m, 10000), 0);
  fx_wrap *wrap = fx_wrap_new(w->env->store);
  wrap->hook_op = FX_RANGE;
  wrap->hook = damage_range;
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *reader = fx_mailbox(&wrap->base, &o); /* owns nothing: reads straight from the store */
  int want[] = {0, QIM_E_MAILBOX_INVARIANT_VIOLATION, QIM_E_MAILBOX_INVARIANT_VIOLATION, QIM_E_MAILBOX_CORRUPT_ENTRY};
  for (damage = 0; damage < 4; damage++) {
    qim_mailbox_page page;
    qim_error err;
    int rc = pull_once(reader, b, 0, 10, 0, &page, &err);
    assert_int_equal(rc, want[damage]);
    if (rc == 0) {
      assert_int_equal(page.entry_count, 4);
      qim_mailbox_page_free(&page);
    }
  }
  /* and a store that fails is Unavailable, at each step of the pull */
  fx_op ops[] = {FX_WM_GET, FX_RANGE};
  for (int i = 0; i < 2; i++) {
    fx_wrap_set(wrap, ops[i], FX_REFUSE, 1, 1);
    qim_mailbox_page page;
    qim_error err;
    assert_int_equal(pull_once(reader, b, 0, 10, 0, &page, &err), QIM_E_MAILBOX_UNAVAILABLE);
    assert_int_equal(err.code, QIM_E_MAILBOX_UNAVAILABLE);
  }
  qim_mailbox_free(reader);
  fx_wrap_free(wrap);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pages_never_split_an_event_group, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_group_larger_than_the_page_is_group_too_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_quiet_users_covered_seq_keeps_up, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cursors_below_the_count_retention_floor_expire, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cursors_below_the_age_retention_floor_expire, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_cursor_ahead_of_what_the_shard_holds_expires, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cursors_from_an_older_epoch_stay_valid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_an_undecodable_stored_entry_is_corrupt_entry, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_range_answers_are_caught, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
