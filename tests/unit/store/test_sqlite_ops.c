/*
 * test_sqlite_ops.c — behaviour of the SQLite backend's operations, domain by domain,
 * through the public vtable (the conformance suite runs the contract vectors; these
 * pin down backend details and give quick coverage while developing).
 */
#include <sqlite3.h>

#include "store_fixture.h"

typedef struct env {
  char *dir;
  qim_store *s;
} env;

static int setup(void **state) {
  env *e = calloc(1, sizeof *e);
  e->dir = qim_test_tmpdir("store-ops");
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

/* ---- logs ------------------------------------------------------------------------------ */

static int log_append1(qim_store *s, qim_log_stream stream, uint8_t keybyte, const char *payload,
                       qim_store_log_append *out) {
  qim_store_log_append a = {0};
  a.stream = stream;
  memset(a.key, keybyte, 16);
  a.payload = (qim_bytes){(uint8_t *)payload, strlen(payload)};
  qim_store_log_append_req r = {0};
  r.appends = &a;
  r.append_count = 1;
  int rc = QIM_STORE_SYNC(s, logs.append, &r);
  if (out) *out = a;
  return rc;
}

static void test_log_offsets_dense_from_one_and_keys_idempotent(void **state) {
  env *e = *state;
  qim_log_stream outbox = {QIM_LOG_STREAM_OUTBOX, 0};
  qim_store_log_append a;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(log_append1(e->s, outbox, (uint8_t)(i + 1), "x", &a), 0);
    assert_int_equal(a.out_position.offset, (uint64_t)i + 1);
    assert_false(a.out_existed);
  }
  assert_int_equal(log_append1(e->s, outbox, 2, "other", &a), 0);
  assert_true(a.out_existed);
  assert_int_equal(a.out_position.offset, 2);

  qim_store_log_read_req rd = {0};
  rd.stream = outbox;
  rd.from = 0;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 3);
  assert_int_equal(rd.out_end, 4);
  assert_int_equal(rd.out_records[1].offset, 2);
  assert_memory_equal(rd.out_records[1].payload.p, "x", 1);
  qim_store_log_read_free(&rd);
}

/* Each stream's records are a run of rows of their own (schema 7's positions): offsets,
 * reads, keys and trims of the outbox and two shards' dispatch streams never mix, however
 * their appends interleave. */
static void test_log_streams_keep_their_own_offsets_reads_and_trims(void **state) {
  env *e = *state;
  qim_log_stream streams[3] = {{QIM_LOG_STREAM_OUTBOX, 0},
                               {QIM_LOG_STREAM_MAILBOX_DISPATCH, 0},
                               {QIM_LOG_STREAM_MAILBOX_DISPATCH, 3}};
  char payload[8];
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 3; k++) {
      qim_store_log_append a;
      snprintf(payload, sizeof payload, "%d/%d", k, i + 1);
      assert_int_equal(log_append1(e->s, streams[k], (uint8_t)(16 * k + i + 1), payload, &a), 0);
      assert_int_equal(a.out_position.offset, (uint64_t)i + 1);
    }
  qim_store_log_append a; /* a key is per stream: shard 3's first key is new on shard 0 */
  assert_int_equal(log_append1(e->s, streams[1], 33, "1/5", &a), 0);
  assert_false(a.out_existed);
  assert_int_equal(a.out_position.offset, 5);
  assert_int_equal(log_append1(e->s, streams[2], 33, "again", &a), 0);
  assert_true(a.out_existed);
  assert_int_equal(a.out_position.offset, 1);

  qim_store_log_trim_req tr = {0};
  tr.stream = streams[1];
  tr.below = 3;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.trim, &tr), 0);
  assert_int_equal(tr.out_trim, 3);
  size_t expect_count[3] = {4, 3, 4};
  uint64_t expect_first[3] = {1, 3, 1};
  for (int k = 0; k < 3; k++) {
    qim_store_log_read_req rd = {0};
    rd.stream = streams[k];
    rd.from = expect_first[k];
    rd.max = 10;
    assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
    assert_int_equal(rd.out_count, expect_count[k]);
    for (size_t j = 0; j < rd.out_count; j++) {
      snprintf(payload, sizeof payload, "%d/%d", k, (int)(expect_first[k] + j));
      assert_int_equal(rd.out_records[j].offset, expect_first[k] + j);
      assert_int_equal(rd.out_records[j].payload.n, strlen(payload));
      assert_memory_equal(rd.out_records[j].payload.p, payload, strlen(payload));
    }
    qim_store_log_read_free(&rd);
  }
}

static void raw_sql(const char *dir, const char *sql);

/* An offset is the low 40 bits of its record's row: the last one a stream can hold reads
 * back as its own, and the next append fails instead of running into the next stream. */
static void test_log_offsets_stop_below_2_40_and_never_reach_the_next_stream(void **state) {
  env *e = *state;
  qim_log_stream outbox = {QIM_LOG_STREAM_OUTBOX, 0}, shard0 = {QIM_LOG_STREAM_MAILBOX_DISPATCH, 0};
  qim_store_log_append a;
  assert_int_equal(log_append1(e->s, shard0, 1, "first of shard 0", &a), 0);
  qim_store_close(e->s);
  raw_sql(e->dir, "INSERT INTO log_streams VALUES(0, 1099511627775, 0);");
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);
  assert_int_equal(log_append1(e->s, outbox, 1, "last", &a), 0);
  assert_int_equal(a.out_position.offset, UINT64_C(1099511627775));
  assert_int_equal(log_append1(e->s, outbox, 2, "past", &a), QIM_E_COMMIT_LOG_UNAVAILABLE);
  qim_store_log_read_req rd = {0};
  rd.stream = outbox;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 1);
  assert_memory_equal(rd.out_records[0].payload.p, "last", 4);
  qim_store_log_read_free(&rd);
  rd = (qim_store_log_read_req){0};
  rd.stream = shard0;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 1);
  assert_memory_equal(rd.out_records[0].payload.p, "first of shard 0", 16);
  qim_store_log_read_free(&rd);
}

static void test_log_trim_respects_consumer_and_protect(void **state) {
  env *e = *state;
  qim_log_stream outbox = {QIM_LOG_STREAM_OUTBOX, 0};
  for (int i = 0; i < 10; i++)
    assert_int_equal(log_append1(e->s, outbox, (uint8_t)(i + 1), "p", NULL), 0);
  qim_store_log_consumer_set_req cs = {0};
  cs.consumer = "fanout";
  cs.stream = outbox;
  cs.offset = 6;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.consumer_set, &cs), 0);
  qim_store_log_trim_req tr = {0};
  tr.stream = outbox;
  tr.below = 9;
  tr.protect = 0;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.trim, &tr), 0);
  assert_int_equal(tr.out_trim, 6);
  tr.protect = 4;
  tr.below = 9;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.trim, &tr), 0);
  assert_int_equal(tr.out_trim, 6); /* never backwards */

  qim_store_log_read_req rd = {0};
  rd.stream = outbox;
  rd.from = 5;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  rd.from = 6;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 5);
  assert_int_equal(rd.out_trim, 6);
  qim_store_log_read_free(&rd);

  qim_store_log_redact_req red = {0};
  red.position = (qim_log_position){outbox, 3};
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.redact, &red), QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE);
  red.position.offset = 7;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.redact, &red), 0);
}

static void test_takeover_bumps_epoch_fences_and_stamps_dispatch(void **state) {
  env *e = *state;
  qim_log_stream d1 = {QIM_LOG_STREAM_MAILBOX_DISPATCH, 1};
  qim_store_log_append a;
  assert_int_equal(log_append1(e->s, d1, 1, "before", &a), 0);
  assert_int_equal(a.out_epoch, 0);
  qim_store_shard_takeover_req t = {0};
  t.shard = 1;
  t.owner = 77;
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.shard_takeover, &t), 0);
  assert_int_equal(t.out_epoch, 1);
  assert_int_equal(t.out_fence.offset, 2);
  assert_int_equal(log_append1(e->s, d1, 2, "after", &a), 0);
  assert_int_equal(a.out_epoch, 1);
  assert_int_equal(a.out_position.offset, 3);
  qim_store_shard_get_req g = {0};
  g.shard = 1;
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.shard_get, &g), 0);
  assert_int_equal(g.out_epoch, 1);
  assert_int_equal(g.out_owner, 77);

  qim_store_log_read_req rd = {0};
  rd.stream = d1;
  rd.from = 1;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 3);
  assert_true(rd.out_records[1].fence);
  assert_int_equal(rd.out_records[1].epoch, 1);
  qim_store_log_read_free(&rd);
}

/* ---- intents ----------------------------------------------------------------------------- */

static void test_reserve_fresh_existing_committed_and_reused(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 1, 1, "hello");
  qim_store_intent_reserve_req r = {0};
  r.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  assert_int_equal(r.out.kind, QIM_RESERVE_RESULT_FRESH);
  assert_int_equal(r.out.intent.coordinates.conversation_seq, 1);
  assert_int_equal(r.out.intent.delivery.audience.group.membership_version, 1);
  assert_int_equal(r.out.intent.delivery.audience.group.member_count, 1);
  assert_int_equal(r.out.intent.delivery.audience.group.target_shard_count, 1);
  qim_commit_intent_free(&r.out.intent);

  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  assert_int_equal(r.out.kind, QIM_RESERVE_RESULT_EXISTING);
  assert_int_equal(r.out.intent.coordinates.conversation_seq, 1);
  qim_commit_intent_free(&r.out.intent);

  qim_commit_intent other = fx_proposal(1, 1, 1, "different");
  r.proposal = &other;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r),
                   QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
  qim_commit_intent_free(&other);

  qim_store_intent_advance_req ar = {0};
  ar.key = p.key;
  ar.to = QIM_COMMIT_STATE_OUTBOXED;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.advance, &ar),
                   QIM_E_MESSAGE_STORE_INVALID_STATE_TRANSITION);
  assert_int_equal(fx_commit(e->s, &p), 1); /* reserve again → EXISTING, then all steps */
  r.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  assert_int_equal(r.out.kind, QIM_RESERVE_RESULT_COMMITTED);
  assert_int_equal(r.out.committed.coordinates.conversation_seq, 1);

  ar.to = QIM_COMMIT_STATE_RECORDED;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.advance, &ar),
                   QIM_E_MESSAGE_STORE_INVALID_STATE_TRANSITION);
  ar.to = QIM_COMMIT_STATE_COMMITTED;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.advance, &ar), 0);
  assert_int_equal(ar.out_position.offset, 1);

  qim_store_record_get_req g = {0};
  g.tenant_id = fx_tenant();
  g.conversation_id = fx_conv(1);
  g.seq = 1;
  assert_int_equal(QIM_STORE_SYNC(e->s, history.get, &g), 0);
  assert_memory_equal(g.out.content.payload_or_ciphertext.p, "hello", 5);
  qim_message_record_free(&g.out);
  qim_commit_intent_free(&p);
}

static void test_reserve_by_non_member_is_denied(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 2, 1, "hi");
  qim_store_intent_reserve_req r = {0};
  r.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  qim_commit_intent_free(&p);
}

static void test_outboxed_requires_predecessors(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  qim_commit_intent p1 = fx_proposal(1, 1, 1, "one"), p2 = fx_proposal(1, 1, 2, "two");
  qim_store_intent_reserve_req r = {0};
  r.proposal = &p1;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  qim_commit_intent_free(&r.out.intent);
  r.proposal = &p2;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r), 0);
  qim_commit_intent_free(&r.out.intent);
  qim_store_intent_advance_req ar = {0};
  ar.key = p2.key;
  ar.to = QIM_COMMIT_STATE_RECORDED;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.advance, &ar), 0);
  ar.to = QIM_COMMIT_STATE_OUTBOXED;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.advance, &ar),
                   QIM_E_COMMIT_LOG_INVARIANT_VIOLATION);

  qim_store_intent_list_req lr = {0};
  lr.limit = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.list_in_flight, &lr), 0);
  assert_int_equal(lr.out_count, 2);
  assert_int_equal(lr.out_intents[0].coordinates.conversation_seq, 1);
  assert_int_equal(lr.out_intents[1].state, QIM_COMMIT_STATE_RECORDED);
  for (size_t i = 0; i < lr.out_count; i++) qim_commit_intent_free(&lr.out_intents[i]);
  qim_free(lr.out_intents);
  qim_commit_intent_free(&p1);
  qim_commit_intent_free(&p2);
}

/* ---- conversations --------------------------------------------------------------------- */

static void change1(qim_store *s, qim_store_member_op op, uint64_t user, int want) {
  qim_store_member_change ch = {op, fx_user(user), QIM_GROUP_ROLE_MEMBER, 0x2F, 0x2F};
  qim_store_members_change_req r = {0};
  r.tenant_id = fx_tenant();
  r.conversation_id = fx_conv(1);
  r.changes = &ch;
  r.change_count = 1;
  r.member_limit = 3;
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_change, &r), want);
}

static size_t members_at(qim_store *s, uint64_t version, int want) {
  qim_store_members_at_req r = {0};
  r.tenant_id = fx_tenant();
  r.conversation_id = fx_conv(1);
  r.version = version;
  r.limit = 100;
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_at, &r), want);
  size_t n = r.out_count;
  qim_free(r.out_members);
  return n;
}

static void test_membership_versions_read_exactly(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  change1(e->s, QIM_STORE_MEMBER_ADD, 2, 0); /* v2 */
  change1(e->s, QIM_STORE_MEMBER_ADD, 3, 0); /* v3 */
  change1(e->s, QIM_STORE_MEMBER_ADD, 3, QIM_E_GROUP_ALREADY_EXISTS);
  change1(e->s, QIM_STORE_MEMBER_ADD, 4, QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  change1(e->s, QIM_STORE_MEMBER_BAN, 2, 0); /* v4 */
  change1(e->s, QIM_STORE_MEMBER_ADD, 2, QIM_E_GROUP_PERMISSION_DENIED);
  change1(e->s, QIM_STORE_MEMBER_REMOVE, 9, QIM_E_GROUP_NOT_FOUND);
  assert_int_equal(members_at(e->s, 1, 0), 1);
  assert_int_equal(members_at(e->s, 2, 0), 2);
  assert_int_equal(members_at(e->s, 3, 0), 3);
  assert_int_equal(members_at(e->s, 4, 0), 2);
  members_at(e->s, 5, QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);

  qim_store_conv_get_req g = {0};
  g.tenant_id = fx_tenant();
  g.conversation_id = fx_conv(1);
  assert_int_equal(QIM_STORE_SYNC(e->s, conversations.get, &g), 0);
  assert_int_equal(g.out.membership_version, 4);
  assert_int_equal(g.out.member_count, 2);
  qim_store_conversation_free(&g.out);

  qim_store_subscriptions_req sr = {0};
  sr.tenant_id = fx_tenant();
  sr.user_id = fx_user(2);
  sr.limit = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, conversations.subscriptions, &sr), 0);
  assert_int_equal(sr.out_count, 1);
  assert_true(sr.out_members[0].banned);
  assert_true(sr.out_members[0].has_left_at);
  qim_store_member_free(&sr.out_members[0]);
  qim_store_conversation_free(&sr.out_convs[0]);
  qim_free(sr.out_members);
  qim_free(sr.out_convs);
}

/* ---- history --------------------------------------------------------------------------- */

/* Reserves and records message 1 of group 1 with `text`: its key (and its message id in
 * *id when asked). */
static qim_commit_key record_message(qim_store *s, const char *text, qim_message_id *id) {
  fx_create_group(s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 1, 1, text);
  qim_commit_key key = p.key;
  if (id) *id = p.coordinates.message_id;
  qim_store_intent_reserve_req rr = {0};
  rr.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(s, intents.reserve, &rr), 0);
  qim_commit_intent_free(&rr.out.intent);
  qim_store_intent_advance_req ar = {0};
  ar.key = key;
  ar.to = QIM_COMMIT_STATE_RECORDED;
  assert_int_equal(QIM_STORE_SYNC(s, intents.advance, &ar), 0);
  qim_commit_intent_free(&p);
  return key;
}

static void test_wipe_body_erases_history_and_intent(void **state) {
  env *e = *state;
  qim_commit_key key = record_message(e->s, "secret", NULL);

  fx_hard_delete(e->s, 1, 1);

  qim_store_intent_load_req lr = {0};
  lr.key = key;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.load, &lr), 0);
  assert_int_equal(lr.out.kind, QIM_LOADED_COMMIT_IN_FLIGHT);
  assert_int_equal(lr.out.intent.record.content.payload_or_ciphertext.n, 0);
  qim_commit_intent_free(&lr.out.intent);

  qim_store_record_query_req q = {0};
  q.tenant_id = fx_tenant();
  q.conversation_id = fx_conv(1);
  q.viewer = fx_user(1);
  q.window_high = 100;
  q.max_items = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, history.query, &q), 0);
  assert_int_equal(q.out_count, 1);
  assert_int_equal(q.out_records[0].state, QIM_MESSAGE_STATE_DELETED);
  assert_int_equal(q.out_records[0].content.payload_or_ciphertext.n, 0);
  qim_message_record_free(&q.out_records[0]);
  qim_free(q.out_records);
  q.skip_deleted = true;
  assert_int_equal(QIM_STORE_SYNC(e->s, history.query, &q), 0);
  assert_int_equal(q.out_count, 0);
  qim_free(q.out_records);
}

static void test_reserve_with_zero_cmid_is_invalid(void **state) {
  env *e = *state;
  fx_create_group(e->s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 1, 1, "x");
  memset(p.key.client_message_id.b, 0, 16);
  qim_store_intent_reserve_req r = {0};
  r.proposal = &p;
  assert_int_equal(QIM_STORE_SYNC(e->s, intents.reserve, &r),
                   QIM_E_MESSAGE_STORE_INVALID_CLIENT_MESSAGE_ID);
  qim_commit_intent_free(&p);
}

/* ---- mailboxes --------------------------------------------------------------------------- */

typedef struct mbatch {
  qim_mailbox_entry entries[4];
  uint32_t chunks[4];
  qim_append_mailbox_batch b;
  qim_store_mailbox_append_req r;
} mbatch;

/* `n` entries (ordinals 0..n-1) for user 1 at (epoch, offset), as chunk `chunk` of a
 * dispatch whose progress then lists chunks 0..chunk (or only `chunk` when !prefix). */
static void mbatch_init(mbatch *m, qim_shard_epoch epoch, uint64_t offset, int n, uint32_t chunk,
                        bool prefix, qim_shard_epoch owner_epoch) {
  memset(m, 0, sizeof *m);
  qim_shard_config cfg = fx_options().shards;
  qim_append_mailbox_batch *b = &m->b;
  b->shard = qim_shard_of_user(&cfg, fx_tenant(), fx_user(1));
  b->lane = qim_lane_of_user(&cfg, fx_tenant(), fx_user(1));
  b->dispatch_id.b[0] = 0xD1;
  b->dispatch_id.b[15] = (uint8_t)offset;
  b->chunk_id = chunk;
  b->mailbox_seq = qim_mailbox_seq_make(epoch, offset);
  for (int i = 0; i < n; i++) {
    qim_mailbox_entry *en = &m->entries[i];
    en->tenant_id = fx_tenant();
    en->user_id = fx_user(1);
    en->mailbox_seq = b->mailbox_seq;
    en->event_ordinal = (uint8_t)i;
    en->event_id = qim_event_id_make(b->mailbox_seq, (uint8_t)i);
    en->event_type = i ? QIM_EVENT_TYPE_MENTION : QIM_EVENT_TYPE_MESSAGE;
    en->coordinates.conversation_id = fx_conv(1);
    en->coordinates.message_id.b[15] = (uint8_t)offset;
  }
  b->entries = m->entries;
  b->entry_count = (size_t)n;
  size_t k = 0;
  for (uint32_t c = prefix ? 0 : chunk; c <= chunk; c++) m->chunks[k++] = c;
  b->progress = (qim_dispatch_progress){b->dispatch_id, b->shard, b->lane, m->chunks, k, false, 0};
  m->r.batch = b;
  m->r.owner_epoch = owner_epoch;
}

/* How many chunks the stored progress of the batch's (dispatch, lane) lists (it must exist). */
static size_t completed_chunks(qim_store *s, const qim_append_mailbox_batch *b) {
  qim_store_progress_get_req pg = {0};
  pg.dispatch_id = b->dispatch_id;
  pg.lane = b->lane;
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.progress_get, &pg), 0);
  assert_true(pg.out_found);
  qim_free(pg.out.completed_chunks);
  return pg.out.completed_chunk_count;
}

static void take_shard(qim_store *s, qim_mailbox_shard_id shard) {
  qim_store_shard_takeover_req t = {0};
  t.shard = shard;
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.shard_takeover, &t), 0);
}

static void test_mailbox_append_is_fenced_idempotent_and_checks_progress(void **state) {
  env *e = *state;
  mbatch m;
  mbatch_init(&m, 0, 1, 1, 0, true, 0);
  take_shard(e->s, m.b.shard); /* epoch 1 */
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), QIM_E_MATERIALIZE_SHARD_NOT_OWNED);
  mbatch_init(&m, 1, 5, 1, 0, true, 1);
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  assert_int_equal(m.r.out.mailbox_seq, qim_mailbox_seq_make(1, 5));
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0); /* replay */
  assert_int_equal(m.r.out.mailbox_seq, qim_mailbox_seq_make(1, 5));
  /* chunk 1 of the same dispatch whose progress forgets chunk 0: going backwards */
  mbatch_init(&m, 1, 5, 1, 1, false, 1);
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r),
                   QIM_E_MATERIALIZE_PROGRESS_CONFLICT);
  mbatch_init(&m, 1, 5, 1, 1, true, 1);
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);

  assert_int_equal(completed_chunks(e->s, &m.b), 2);
}

/* Runs SQL on the store's file directly (the store closed). */
static void raw_sql(const char *dir, const char *sql) {
  char path[600];
  snprintf(path, sizeof path, "%s/store.db", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) fprintf(stderr, "raw_sql: %s\n", err ? err : "?");
  sqlite3_free(err);
  assert_int_equal(rc, SQLITE_OK);
  sqlite3_close(db);
}

/* The first column of the first row of a query on the store's file (a connection of its
 * own: the store may be open). */
static int64_t raw_int(const char *dir, const char *sql) {
  char path[600];
  snprintf(path, sizeof path, "%s/store.db", dir);
  sqlite3 *db;
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/* What schema 7 changed, undone: log records are rows with an (stream, offset) index beside
 * them, and consumers have a (stream, offset) index. */
#define SCHEMA_7_UNDONE                                                                     \
  "CREATE TABLE log_records_v6(stream INTEGER NOT NULL, offset INTEGER NOT NULL, key BLOB,"  \
  " epoch INTEGER NOT NULL, fence INTEGER NOT NULL, payload BLOB NOT NULL);"                 \
  "INSERT INTO log_records_v6 SELECT stream, pos & 1099511627775, key, epoch, fence, payload" \
  " FROM log_records;"                                                                       \
  "DROP TABLE log_records; ALTER TABLE log_records_v6 RENAME TO log_records;"                \
  "CREATE UNIQUE INDEX log_records_pos ON log_records(stream, offset);"                      \
  "CREATE UNIQUE INDEX log_records_key ON log_records(stream, key) WHERE key IS NOT NULL;"   \
  "CREATE INDEX log_consumers_stream ON log_consumers(stream, offset);"

/* What schema 6 changed, undone: entries are indexed per user as they are written. */
#define SCHEMA_6_UNDONE                                                                     \
  "DROP TABLE mailbox_index; ALTER TABLE lane_watermarks DROP COLUMN settled;"             \
  "DROP INDEX mailbox_position;"                                                           \
  "CREATE UNIQUE INDEX mailbox_entry ON mailbox(tenant, user, mseq, ordinal);"             \
  "CREATE INDEX mailbox_lane ON mailbox(shard, lane, mseq);"

/* What schema 5 changed, undone: the progress rows' message and its index go, the index
 * over every entry's message comes back. */
#define SCHEMA_5_UNDONE                                                                   \
  "DROP INDEX dispatch_progress_message; ALTER TABLE dispatch_progress DROP COLUMN message_id;" \
  "CREATE INDEX mailbox_message ON mailbox(message_id);"

/* Schema 4 moved the applied chunks from a table of their own into the progress row: a
 * store written by schema 3 still answers a replay with the original receipt (a replay
 * at another seq would otherwise be a ProgressConflict), and its next chunk applies. */
static void test_schema_3_store_keeps_its_applied_chunks_after_upgrade(void **state) {
  env *e = *state;
  mbatch m;
  mbatch_init(&m, 1, 5, 1, 0, true, 1);
  take_shard(e->s, m.b.shard); /* epoch 1 */
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  qim_store_close(e->s);
  raw_sql(
      e->dir,
      "CREATE TABLE dispatch_chunks(dispatch_id BLOB NOT NULL, lane INTEGER NOT NULL,"
      " chunk INTEGER NOT NULL, shard INTEGER NOT NULL, mseq INTEGER NOT NULL,"
      " PRIMARY KEY(dispatch_id, lane, chunk)) WITHOUT ROWID;"
      "CREATE INDEX dispatch_chunks_lane ON dispatch_chunks(shard, lane, mseq);"
      "INSERT INTO dispatch_chunks SELECT dispatch_id, lane, 0, shard, mseq FROM dispatch_progress;"
      "ALTER TABLE dispatch_progress DROP COLUMN applied;" SCHEMA_7_UNDONE SCHEMA_6_UNDONE
      SCHEMA_5_UNDONE
      "PRAGMA user_version=3;");
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);

  mbatch_init(&m, 1, 6, 1, 0, true, 1);
  m.b.dispatch_id.b[15] = 5; /* the same dispatch, offered again at another seq */
  m.b.progress.dispatch_id = m.b.dispatch_id;
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  assert_int_equal(m.r.out.mailbox_seq, qim_mailbox_seq_make(1, 5));
  mbatch_init(&m, 1, 5, 1, 1, true, 1);
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  assert_int_equal(completed_chunks(e->s, &m.b), 2);
  qim_store_close(e->s);
  raw_sql(e->dir, "CREATE TABLE dispatch_chunks(x); DROP TABLE dispatch_chunks;"); /* it was gone */
  e->s = fx_open(e->dir, NULL, &o);
}

static int range(qim_store *s, uint32_t max_items, qim_store_mailbox_range_req *r);
static void range_free(qim_store_mailbox_range_req *r);

/* Schema 5 finds a message's inline mailbox copies through its dispatches' progress rows:
 * a store written by schema 4 (no message on those rows) still has its copies wiped by a
 * hard delete after the upgrade. */
static void test_schema_4_store_wipes_its_inline_mailbox_copies_after_upgrade(void **state) {
  env *e = *state;
  qim_message_id id;
  record_message(e->s, "secret", &id);
  mbatch m;
  mbatch_init(&m, 1, 5, 1, 0, true, 1);
  qim_mailbox_entry *en = &m.entries[0];
  en->coordinates.message_id = id;
  en->has_content = en->body_included = true;
  en->content.payload_or_ciphertext = (qim_bytes){(uint8_t *)"secret", 6};
  take_shard(e->s, m.b.shard); /* epoch 1 */
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  qim_store_close(e->s);
  raw_sql(e->dir, SCHEMA_7_UNDONE SCHEMA_6_UNDONE SCHEMA_5_UNDONE "PRAGMA user_version=4;");
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);

  fx_hard_delete(e->s, 1, 1);
  qim_store_mailbox_range_req r;
  assert_int_equal(range(e->s, 10, &r), 0);
  assert_int_equal(r.out_count, 1);
  assert_false(r.out_entries[0].has_content && r.out_entries[0].content.payload_or_ciphertext.n);
  range_free(&r);
}

static int range(qim_store *s, uint32_t max_items, qim_store_mailbox_range_req *r) {
  memset(r, 0, sizeof *r);
  r->query = (qim_mailbox_range_query){fx_tenant(), fx_user(1), 0, UINT64_MAX, max_items, 0};
  return QIM_STORE_SYNC(s, mailboxes.range, r);
}

static void range_free(qim_store_mailbox_range_req *r) {
  for (size_t i = 0; i < r->out_count; i++) qim_mailbox_entry_free(&r->out_entries[i]);
  qim_free(r->out_entries);
}

static void test_mailbox_range_keeps_event_groups_whole(void **state) {
  env *e = *state;
  mbatch m;
  mbatch_init(&m, 0, 1, 3, 0, true, 0); /* a group of 3 at seq (0, 1) */
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  mbatch_init(&m, 0, 2, 2, 0, true, 0); /* a group of 2 at seq (0, 2) */
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  qim_store_mailbox_range_req r;
  assert_int_equal(range(e->s, 4, &r), 0);
  assert_int_equal(r.out_count, 3); /* the second group would be split: next page */
  assert_true(r.out_has_more);
  range_free(&r);
  assert_int_equal(range(e->s, 5, &r), 0);
  assert_int_equal(r.out_count, 5);
  assert_false(r.out_has_more);
  assert_int_equal(r.out_entries[4].event_ordinal, 1);
  range_free(&r);
  assert_int_equal(range(e->s, 2, &r), QIM_E_MAILBOX_GROUP_TOO_LARGE);
  assert_null(r.out_entries);
}

/* Appends `n` entries for user 1 at (1, offset) and advances the watermark to them. */
static void append_advanced(qim_store *s, uint64_t offset, int n) {
  mbatch m;
  mbatch_init(&m, 1, offset, n, 0, true, 1);
  m.r.advance_to = m.b.mailbox_seq;
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.append, &m.r), 0);
}

/* The seqs of a range from `after`, at most max_items entries; returns the count. */
static size_t range_seqs(qim_store *s, uint64_t after, uint32_t max_items, uint64_t *seqs, bool *more) {
  qim_store_mailbox_range_req r;
  memset(&r, 0, sizeof r);
  r.query = (qim_mailbox_range_query){fx_tenant(), fx_user(1), after, UINT64_MAX, max_items, 0};
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.range, &r), 0);
  for (size_t i = 0; i < r.out_count; i++) {
    seqs[i] = r.out_entries[i].mailbox_seq;
    assert_int_equal(r.out_entries[i].event_ordinal, i == 0 || seqs[i] != seqs[i - 1] ? 0 : 1);
  }
  *more = r.out_has_more;
  size_t n = r.out_count;
  range_free(&r);
  return n;
}

/* Entries enter the per-user index when their lane has written settle_entries entries or
 * 1/64 as many batches (3 here) since it last settled, up to its watermark; a range reads
 * settled and unsettled entries as one mailbox (order, whole event groups, pages across
 * the settled position), a replay adds nothing to either, and a trim removes entries
 * from both. */
static void test_mailbox_range_reads_settled_and_unsettled_entries_alike(void **state) {
  env *e = *state;
  qim_store_close(e->s);
  qim_store_options o = fx_options();
  o.settle_entries = 3 * 64;
  e->s = fx_open(e->dir, NULL, &o);
  take_shard(e->s, qim_shard_of_user(&o.shards, fx_tenant(), fx_user(1))); /* epoch 1 */
  for (uint64_t off = 1; off <= 5; off++) append_advanced(e->s, off, 2);
  /* the third batch settled offsets 1-3; 4 and 5 wait */
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM mailbox_index"), 6);
  assert_int_equal(raw_int(e->dir, "SELECT max(settled) FROM lane_watermarks"), qim_mailbox_seq_make(1, 3));
  uint64_t seqs[16];
  bool more;
  assert_int_equal(range_seqs(e->s, 0, 16, seqs, &more), 10);
  assert_false(more);
  for (size_t i = 0; i < 10; i++) assert_int_equal(seqs[i], qim_mailbox_seq_make(1, 1 + i / 2));
  /* a page from offset 2 that crosses the settled position, then one that ends in a group */
  assert_int_equal(range_seqs(e->s, qim_mailbox_seq_make(1, 2), 4, seqs, &more), 4);
  assert_int_equal(seqs[0], qim_mailbox_seq_make(1, 3));
  assert_int_equal(seqs[3], qim_mailbox_seq_make(1, 4));
  assert_true(more);
  assert_int_equal(range_seqs(e->s, qim_mailbox_seq_make(1, 2), 3, seqs, &more), 2);
  assert_true(more);
  append_advanced(e->s, 2, 2); /* a replay of a settled batch */
  assert_int_equal(range_seqs(e->s, 0, 16, seqs, &more), 10);
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM mailbox"), 10);

  qim_store_watermark_advance_req w = {0};
  w.advance = (qim_watermark_advance){qim_shard_of_user(&o.shards, fx_tenant(), fx_user(1)),
                                      qim_lane_of_user(&o.shards, fx_tenant(), fx_user(1)),
                                      qim_mailbox_seq_make(1, 5), qim_mailbox_seq_make(1, 3)};
  w.owner_epoch = 1;
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.watermark_advance, &w), 0);
  assert_int_equal(range_seqs(e->s, 0, 16, seqs, &more), 6);
  assert_int_equal(seqs[0], qim_mailbox_seq_make(1, 3));
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM mailbox_index"), 2);
}

/* A store written before schema 6 has every entry up to its lanes' watermarks in the
 * per-user index after the upgrade, and the rest in its lane. */
static void test_schema_5_store_settles_its_entries_on_upgrade(void **state) {
  env *e = *state;
  qim_shard_config cfg = fx_options().shards;
  take_shard(e->s, qim_shard_of_user(&cfg, fx_tenant(), fx_user(1))); /* epoch 1 */
  append_advanced(e->s, 1, 2);
  append_advanced(e->s, 2, 1);
  mbatch m; /* above the watermark: a dispatch still being written */
  mbatch_init(&m, 1, 3, 2, 0, true, 1);
  assert_int_equal(QIM_STORE_SYNC(e->s, mailboxes.append, &m.r), 0);
  qim_store_close(e->s);
  raw_sql(e->dir, "DELETE FROM mailbox_index;" SCHEMA_7_UNDONE SCHEMA_6_UNDONE "PRAGMA user_version=5;");
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM mailbox_index"), 3);
  uint64_t seqs[8];
  bool more;
  assert_int_equal(range_seqs(e->s, 0, 8, seqs, &more), 5);
  assert_int_equal(seqs[4], qim_mailbox_seq_make(1, 3));
}

/* Schema 7 moves every log record to the row of its position: a store written by schema 6
 * reads back the same records of each stream, finds its keys where they were, appends at
 * its next offsets and keeps its consumers; the two (stream, offset) indexes are gone. */
static void test_schema_6_store_keeps_its_log_records_after_upgrade(void **state) {
  env *e = *state;
  qim_log_stream outbox = {QIM_LOG_STREAM_OUTBOX, 0}, dispatch = {QIM_LOG_STREAM_MAILBOX_DISPATCH, 2};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(log_append1(e->s, outbox, (uint8_t)(i + 1), "out", NULL), 0);
    assert_int_equal(log_append1(e->s, dispatch, (uint8_t)(i + 1), "dis", NULL), 0);
  }
  qim_store_log_consumer_set_req cs = {0};
  cs.consumer = "fanout";
  cs.stream = outbox;
  cs.offset = 2;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.consumer_set, &cs), 0);
  qim_store_close(e->s);
  raw_sql(e->dir, SCHEMA_7_UNDONE "PRAGMA user_version=6;");
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM log_records WHERE offset = 3"), 2);
  qim_store_options o = fx_options();
  e->s = fx_open(e->dir, NULL, &o);
  assert_int_equal(raw_int(e->dir, "SELECT count(*) FROM sqlite_master WHERE name IN"
                                   " ('log_records_pos', 'log_consumers_stream')"),
                   0);

  qim_store_log_append a;
  assert_int_equal(log_append1(e->s, dispatch, 2, "again", &a), 0);
  assert_true(a.out_existed);
  assert_int_equal(a.out_position.offset, 2);
  assert_int_equal(log_append1(e->s, dispatch, 9, "dis", &a), 0);
  assert_false(a.out_existed);
  assert_int_equal(a.out_position.offset, 4);
  qim_store_log_read_req rd = {0};
  rd.stream = dispatch;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 4);
  for (size_t j = 0; j < 4; j++) {
    assert_int_equal(rd.out_records[j].offset, j + 1);
    assert_memory_equal(rd.out_records[j].payload.p, "dis", 3);
  }
  qim_store_log_read_free(&rd);
  qim_store_log_trim_req tr = {0}; /* the consumer stored before the upgrade still holds */
  tr.stream = outbox;
  tr.below = 4;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.trim, &tr), 0);
  assert_int_equal(tr.out_trim, 2);
  rd = (qim_store_log_read_req){0};
  rd.stream = outbox;
  rd.from = 2;
  rd.max = 10;
  assert_int_equal(QIM_STORE_SYNC(e->s, logs.read, &rd), 0);
  assert_int_equal(rd.out_count, 2);
  assert_memory_equal(rd.out_records[1].payload.p, "out", 3);
  qim_store_log_read_free(&rd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_log_offsets_dense_from_one_and_keys_idempotent, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_log_streams_keep_their_own_offsets_reads_and_trims, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_log_offsets_stop_below_2_40_and_never_reach_the_next_stream,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_log_trim_respects_consumer_and_protect, setup, teardown),
      cmocka_unit_test_setup_teardown(test_schema_6_store_keeps_its_log_records_after_upgrade, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_takeover_bumps_epoch_fences_and_stamps_dispatch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reserve_fresh_existing_committed_and_reused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reserve_by_non_member_is_denied, setup, teardown),
      cmocka_unit_test_setup_teardown(test_outboxed_requires_predecessors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_membership_versions_read_exactly, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wipe_body_erases_history_and_intent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reserve_with_zero_cmid_is_invalid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mailbox_append_is_fenced_idempotent_and_checks_progress,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_schema_3_store_keeps_its_applied_chunks_after_upgrade,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_mailbox_range_reads_settled_and_unsettled_entries_alike,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_schema_5_store_settles_its_entries_on_upgrade, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_schema_4_store_wipes_its_inline_mailbox_copies_after_upgrade,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_mailbox_range_keeps_event_groups_whole, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
