/*
 * test_history_wipe.c — "deleted means gone" (DESIGN.md §1 rule 7): after a hard delete,
 * a recall or a retention expiry, no API returns the body (history row, outbox envelope,
 * mailbox dispatch, inline mailbox entry) and the raw bytes of the SQLite database file
 * and its WAL hold no trace of it within the store's bound — while a body that was not
 * deleted is still found by the same scan, so the scan can fail.
 */
#include <unistd.h>

#include "fanout/fanout.h"
#include "history_fixture.h"
#include "qim/shard.h"
#include "testsupport.h"

static int setup(void **state) {
  hx *x = calloc(1, sizeof *x);
  hx_open(x, "hwipe", NULL);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  hx_close(*state);
  free(*state);
  return 0;
}

/* ---- raw bytes ---------------------------------------------------------------------------- */

static bool store_holds(hx *x, const char *needle) {
  char db[600], wal[600];
  snprintf(db, sizeof db, "%s/h.db", x->dir);
  snprintf(wal, sizeof wal, "%s/h.db-wal", x->dir);
  return qim_test_file_holds(db, needle) || qim_test_file_holds(wal, needle);
}

/* Polls until the needle is gone from both files, at most the store's bound + 2 s. */
static bool store_forgets(hx *x, const char *needle) {
  for (int waited = 0; waited <= QIM_STORE_WIPE_BOUND_MS + 2000; waited += 100) {
    if (!store_holds(x, needle)) return true;
    usleep(100 * 1000);
  }
  return false;
}

/* ---- copies of the body in every place ----------------------------------------------------------
 */

/* The fanout writes the dispatch records; an inline mailbox entry is appended by hand
 * (the materializer's job) for user `u`. Returns the entry's mailbox seq. */
static qim_mailbox_seq spread(hx *x, uint64_t g, qim_conversation_seq seq, uint64_t u) {
  qim_fanout *f;
  qim_fanout_options fo = {.shards = HX_SHARDS};
  assert_int_equal(qim_fanout_new(x->store, &fo, &f), 0);
  uint32_t done = 0;
  assert_int_equal(qim_fanout_run_once(f, 1000, &done), 0);
  assert_true(done > 0);
  qim_fanout_free(f);
  qim_message_record rec = hx_record(x, g, seq);
  qim_mailbox_shard_id shard = qim_shard_of_user(&HX_SHARDS, HX_TENANT, hx_user(u));
  qim_store_shard_takeover_req t = {.shard = shard, .owner = 1};
  assert_int_equal(QIM_STORE_SYNC(x->store, mailboxes.shard_takeover, &t), 0);
  qim_mailbox_seq mseq = qim_mailbox_seq_make(t.out_epoch, 1000 + seq);
  qim_mailbox_entry e = {.tenant_id = HX_TENANT,
                         .user_id = hx_user(u),
                         .mailbox_seq = mseq,
                         .event_id = qim_event_id_make(mseq, 0),
                         .event_type = QIM_EVENT_TYPE_MESSAGE,
                         .coordinates = rec.coordinates,
                         .sender_id = rec.sender.user_id,
                         .has_content = true,
                         .content = rec.content,
                         .body_included = true,
                         .created_at = rec.created_at};
  uint32_t chunk0 = 0;
  qim_append_mailbox_batch b = {
      .shard = shard,
      .lane = qim_lane_of_user(&HX_SHARDS, HX_TENANT, hx_user(u)),
      .dispatch_id = qim_dispatch_id_make(&rec.coordinates.message_id, shard),
      .mailbox_seq = mseq,
      .entries = &e,
      .entry_count = 1};
  b.progress = (qim_dispatch_progress){.dispatch_id = b.dispatch_id,
                                       .shard = shard,
                                       .lane = b.lane,
                                       .completed_chunks = &chunk0,
                                       .completed_chunk_count = 1};
  qim_store_mailbox_append_req a = {.batch = &b, .owner_epoch = t.out_epoch};
  assert_int_equal(QIM_STORE_SYNC(x->store, mailboxes.append, &a), 0);
  qim_message_record_free(&rec);
  return mseq;
}

/* A hard delete of `seq` in conversation 1 by `actor`: a recall when `recall`. */
static void hard_delete(hx *x, uint64_t actor, qim_conversation_seq seq, bool recall) {
  qim_history_delete_req d = {.actor = hx_actor(actor),
                              .conversation_id = hx_conv(1),
                              .ranges = (qim_store_seq_range[]){{seq, 0}},
                              .range_count = 1,
                              .hard = true};
  qim_history_delete_result r;
  assert_int_equal(qim_history_delete(x->history, &d, &r), 0);
  assert_int_equal(recall ? r.recalled : r.deleted, 1);
  qim_history_delete_result_free(&r);
}

/* Trims user u's lane up to and including `mseq` (its entries go) and every dispatch
 * stream (its records go): the retention passes' work. */
static void trim_copies(hx *x, uint64_t u, qim_mailbox_seq mseq) {
  qim_store_watermark_advance_req w = {
      .advance = {.shard = qim_shard_of_user(&HX_SHARDS, HX_TENANT, hx_user(u)),
                  .lane = qim_lane_of_user(&HX_SHARDS, HX_TENANT, hx_user(u)),
                  .materialized = mseq + 1,
                  .floor = mseq + 1},
      .owner_epoch = qim_mailbox_seq_epoch(mseq)};
  assert_int_equal(QIM_STORE_SYNC(x->store, mailboxes.watermark_advance, &w), 0);
  for (uint32_t s = 0; s < HX_SHARDS.shard_count; s++) {
    qim_store_log_read_req d = {.stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, s}, .max = 1000};
    assert_int_equal(QIM_STORE_SYNC(x->store, logs.read, &d), 0);
    for (size_t i = 0; i < d.out_count; i++) qim_store_log_record_free(&d.out_records[i]);
    qim_free(d.out_records);
    qim_store_log_trim_req t = {.stream = d.stream, .below = d.out_end};
    assert_int_equal(QIM_STORE_SYNC(x->store, logs.trim, &t), 0);
    assert_int_equal(t.out_trim, d.out_end); /* every record of the stream went */
  }
}

/* No API returns the body: the record, the outbox envelope, every dispatch, the mailbox. */
static void assert_no_api_returns(hx *x, uint64_t g, qim_conversation_seq seq, uint64_t u,
                                  const char *needle) {
  qim_message_record rec = hx_record(x, g, seq);
  assert_int_equal(rec.content.payload_or_ciphertext.n, 0);
  qim_message_id mid = rec.coordinates.message_id;
  qim_message_record_free(&rec);
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .max = 100000};
  assert_int_equal(QIM_STORE_SYNC(x->store, logs.read, &r), 0);
  for (size_t i = 0; i < r.out_count; i++) {
    assert_null(
        memmem(r.out_records[i].payload.p, r.out_records[i].payload.n, needle, strlen(needle)));
    qim_store_log_record_free(&r.out_records[i]);
  }
  qim_free(r.out_records);
  int dispatches = 0;
  for (uint32_t s = 0; s < HX_SHARDS.shard_count; s++) {
    qim_store_log_read_req d = {.stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, s}, .max = 100000};
    assert_int_equal(QIM_STORE_SYNC(x->store, logs.read, &d), 0);
    for (size_t i = 0; i < d.out_count; i++) {
      qim_group_dispatch gd;
      if (!d.out_records[i].fence &&
          qim_group_dispatch_decode(d.out_records[i].payload.p, d.out_records[i].payload.n, &gd) ==
              0) {
        if (memcmp(gd.source_message.message_id.b, mid.b, 16) == 0) {
          dispatches++;
          assert_int_equal(gd.content.payload_or_ciphertext.n, 0); /* the fanout's "redacted" */
        }
        qim_group_dispatch_free(&gd);
      }
      qim_store_log_record_free(&d.out_records[i]);
    }
    qim_free(d.out_records);
  }
  assert_true(dispatches > 0);
  qim_store_mailbox_range_req m = {
      .query = {
          .tenant_id = HX_TENANT, .user_id = hx_user(u), .up_to_seq = INT64_MAX, .max_items = 100}};
  assert_int_equal(QIM_STORE_SYNC(x->store, mailboxes.range, &m), 0);
  assert_true(m.out_count > 0);
  for (size_t i = 0; i < m.out_count; i++) {
    if (memcmp(m.out_entries[i].coordinates.message_id.b, mid.b, 16) == 0)
      assert_int_equal(m.out_entries[i].content.payload_or_ciphertext.n, 0);
    qim_mailbox_entry_free(&m.out_entries[i]);
  }
  qim_free(m.out_entries);
}

/* ---- the three ways a body goes
 * ------------------------------------------------------------------ */

enum how { HARD_DELETE, RECALL, EXPIRY };

static const struct wipe_case {
  const char *name;
  enum how how;
} WIPES[] = {{"hard delete by the owner", HARD_DELETE},
             {"recall by the sender", RECALL},
             {"retention expiry", EXPIRY}};

static void wipe_one(hx *x, const struct wipe_case *c) {
  const char *secret = "SECRET-BODY-9f27c1d4e8b3a605-never-to-be-seen-again";
  const char *kept = "KEPT-BODY-0b8a77e1c2d94f36-still-here";
  hx_group_create(x, 1, 1, 2, 2);
  qim_conversation_seq seq;
  if (c->how == EXPIRY)
    seq = hx_send_class(x, 1, 2, secret, QIM_RETENTION_CLASS_EPHEMERAL_24H);
  else
    seq = hx_pub(x, 1, 2, secret);
  hx_pub(x, 1, 3, kept);
  spread(x, 1, seq, 3);
  assert_true(store_holds(x, secret)); /* the scan finds a body that is there */
  if (c->how == EXPIRY) {
    qim_manual_clock_advance(&x->clock, 25ull * 3600 * 1000);
    qim_history_sweep_result res;
    assert_int_equal(qim_history_sweep(x->history, &res), 0);
    assert_int_equal(res.expired, 1);
  } else {
    hard_delete(x, c->how == RECALL ? 2 : 1, seq, c->how == RECALL);
  }
  assert_no_api_returns(x, 1, seq, 3, secret);
  if (!store_forgets(x, secret))
    fail_msg("case '%s': the body is still in the database file or WAL", c->name);
  assert_true(store_holds(x, kept)); /* and the scan still sees what was not deleted */
}

static void test_a_hard_deleted_body_leaves_no_trace(void **state) {
  wipe_one(*state, &WIPES[0]);
}
static void test_a_recalled_body_leaves_no_trace(void **state) {
  wipe_one(*state, &WIPES[1]);
}
static void test_an_expired_body_leaves_no_trace(void **state) {
  wipe_one(*state, &WIPES[2]);
}

/* Trimming copies of a body erases nothing (no wipe is owed for them: the body lives on
 * in history), yet once the message is deleted the trimmed copies' old bytes are gone
 * from the files too, taken by the wipe the delete owes. */
static void test_trimmed_copies_erase_nothing_and_go_with_the_later_delete(void **state) {
  hx *x = *state;
  const char *secret = "SECRET-BODY-5d0e2b9a71c4f836-trimmed-then-deleted";
  const char *kept = "KEPT-BODY-c3a9e5170b2d48f6-still-here";
  hx_group_create(x, 1, 1, 2, 2);
  qim_conversation_seq seq = hx_pub(x, 1, 2, secret);
  hx_pub(x, 1, 3, kept);
  qim_mailbox_seq mseq = spread(x, 1, seq, 3);
  qim_store_stats before, after;
  qim_store_get_stats(x->store, &before);
  trim_copies(x, 3, mseq);
  qim_store_get_stats(x->store, &after);
  assert_int_equal(after.erases, before.erases);
  qim_store_mailbox_range_req m = {
      .query = {
          .tenant_id = HX_TENANT, .user_id = hx_user(3), .up_to_seq = INT64_MAX, .max_items = 100}};
  assert_int_equal(QIM_STORE_SYNC(x->store, mailboxes.range, &m), 0);
  assert_int_equal(m.out_count, 0); /* the trim took the inline copy */
  assert_true(store_holds(x, secret));

  hard_delete(x, 1, seq, false);
  qim_store_get_stats(x->store, &after);
  assert_true(after.erases > before.erases);
  if (!store_forgets(x, secret)) fail_msg("the trimmed copies' bytes outlived the delete");
  assert_true(store_holds(x, kept));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_a_hard_deleted_body_leaves_no_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_recalled_body_leaves_no_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_an_expired_body_leaves_no_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trimmed_copies_erase_nothing_and_go_with_the_later_delete,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
