/*
 * test_commit_send.c — one send through the public API: every state it passes, what
 * reserve fixes, the three reserve answers, and every error a send can get.
 */
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <uv.h>

#include "commit_fixture.h"
#include "qim/err.h"

static qim_user_id alice, bob, carol;

static void users(void) {
  alice = fx_user(1);
  bob = fx_user(2);
  carol = fx_user(3);
}

/* ---- hooks used below ----------------------------------------------------------------- */

typedef struct trail {
  pthread_mutex_t mu;
  char ops[64][32];
  int n;
} trail;

/* Records the order of intent calls (reserve, advance to each state). */
static void trail_after(hook_store *h, const char *op, qim_store_req *req) {
  trail *t = h->ctx;
  if (strncmp(op, "intents.", 8) != 0) return;
  pthread_mutex_lock(&t->mu);
  if (t->n < 64) {
    if (strcmp(op, "intents.advance") == 0)
      snprintf(t->ops[t->n++], 32, "advance:%d", (int)((qim_store_intent_advance_req *)req)->to);
    else
      snprintf(t->ops[t->n++], 32, "%s", op + 8);
  }
  pthread_mutex_unlock(&t->mu);
}

typedef struct failer {
  const char *op;
  int to;          /* advance target, -1 = any */
  int status;
  atomic_int left; /* how many more calls to fail */
  atomic_int seen;
} failer;

static int fail_before(hook_store *h, const char *op, qim_store_req *req) {
  failer *f = h->ctx;
  if (strcmp(op, f->op) != 0) return 0;
  if (f->to >= 0 && !hook_is_advance(op, req, (qim_commit_state)f->to)) return 0;
  atomic_fetch_add(&f->seen, 1);
  if (atomic_load(&f->left) <= 0) return 0;
  atomic_fetch_sub(&f->left, 1);
  return f->status;
}

/* ---- transitions and what reserve fixes ---------------------------------------------------- */

static void test_fresh_send_passes_every_state_then_acks(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  trail t = {.mu = PTHREAD_MUTEX_INITIALIZER};
  f.hook->ctx = &t;
  f.hook->after = trail_after;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "hello");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_FRESH);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  assert_memory_equal(r.ack.client_message_id.b, s.request.client_message_id.b, 16);
  f.hook->after = NULL;
  /* reserve, then one advance per state, in order, and nothing after the ACK. */
  assert_int_equal(t.n, 4);
  assert_string_equal(t.ops[0], "reserve");
  assert_string_equal(t.ops[1], "advance:1");
  assert_string_equal(t.ops[2], "advance:2");
  assert_string_equal(t.ops[3], "advance:3");
  qim_loaded_commit lc;
  qim_commit_key k = fx_key(&f, alice, 1);
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_COMMITTED);
  assert_memory_equal(&lc.committed.coordinates, &r.ack.coordinates, sizeof r.ack.coordinates);
  fx_close(&f);
}

static void test_reserve_fixes_record_and_direct_audience(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_authenticated_send s = fx_send(&f, bob, conv, 1, "hi alice");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  const qim_committed_envelope *e = &o.env[0];
  assert_true(qim_message_record_equal(&e->record, &e->intent.record));
  assert_memory_equal(e->record.coordinates.message_id.b, r.ack.coordinates.message_id.b, 16);
  assert_int_equal(e->record.coordinates.conversation_seq, 1);
  assert_int_equal(e->record.state, QIM_MESSAGE_STATE_NORMAL);
  assert_int_equal(e->record.retention_class, QIM_RETENTION_CLASS_DEFAULT);
  assert_int_equal(e->record.created_at, FX_T0);
  assert_true(qim_u128_eq(e->record.sender.user_id.v, bob.v));
  assert_memory_equal(e->intent.trace_id.b, s.trace_id.b, 16);
  const qim_frozen_delivery_input *d = &e->intent.delivery;
  assert_int_equal(d->audience.kind, QIM_DELIVERY_AUDIENCE_DIRECT);
  assert_int_equal(d->audience.direct.recipient_count, 2); /* the peer and the sender */
  assert_true(qim_u128_eq(d->audience.direct.recipients[0].v, alice.v));
  assert_true(qim_u128_eq(d->audience.direct.recipients[1].v, bob.v));
  assert_true(d->inline_body);
  assert_int_equal(d->created_at, FX_T0);
  qim_message_record *h;
  size_t n = fx_history(&f, conv, alice, &h);
  assert_int_equal(n, 1);
  assert_true(qim_message_record_equal(&h[0], &e->record)); /* the history row is the record */
  fx_history_free(h, n);
  fx_outbox_free(&o);
  fx_close(&f);
}

static void test_group_send_freezes_membership_snapshot(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id m[] = {bob, carol};
  qim_conversation_id conv = fx_group(&f, 1, alice, m, 2);
  qim_authenticated_send s = fx_send(&f, carol, conv, 1, "hello group");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  /* A later join does not change the frozen snapshot. */
  fx_make_user(&f, fx_user(4));
  assert_int_equal(fx_member_change(&f, conv, QIM_STORE_MEMBER_ADD, fx_user(4), FX_MODE_MEMBER), 0);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  const qim_delivery_audience *a = &o.env[0].intent.delivery.audience;
  assert_int_equal(a->kind, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  assert_true(qim_u128_eq(a->group.group_id.v, conv.v));
  assert_int_equal(a->group.membership_version, 3); /* created (1), bob (2), carol (3) */
  assert_int_equal(a->group.member_count, 3);
  assert_true(a->group.target_shard_count >= 1);
  fx_outbox_free(&o);
  fx_close(&f);
}

static void test_body_over_inline_threshold_is_not_inlined(void **state) {
  (void)state;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.inline_body_max = 8;
  fx f;
  fx_open(&f, &cfg);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_authenticated_send small = fx_send(&f, alice, conv, 1, "12345678");
  qim_authenticated_send big = fx_send(&f, alice, conv, 2, "123456789");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &small, &r), 0);
  assert_int_equal(qim_commit_send_sync(f.commit, &big, &r), 0);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 2);
  assert_true(o.env[0].intent.delivery.inline_body);
  assert_false(o.env[1].intent.delivery.inline_body);
  fx_outbox_free(&o);
  fx_close(&f);
}

/* ---- the three reserve answers ------------------------------------------------------------------ */

static void test_retry_after_commit_replays_the_same_ack(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "once");
  qim_commit_result r1, r2;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r1), 0);
  s.request.request_id = 77; /* a new request: RequestId is never stored */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r2), 0);
  assert_int_equal(r2.reserve, QIM_RESERVE_RESULT_COMMITTED);
  assert_memory_equal(&r1.ack, &r2.ack, sizeof r1.ack);
  qim_message_record *h;
  size_t n = fx_history(&f, conv, alice, &h);
  assert_int_equal(n, 1);
  fx_history_free(h, n);
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  fx_outbox_free(&o);
  fx_close(&f);
}

static void test_retry_with_other_content_is_refused_as_reused(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "original");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_authenticated_send other = fx_send(&f, alice, conv, 1, "changed");
  assert_int_equal(qim_commit_send_sync(f.commit, &other, &r), QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
  assert_int_equal(qim_err_ctrl_code(r.status), 409);
  /* The same cmid in another conversation is a reuse too, never the old message. */
  qim_conversation_id conv2 = fx_direct(&f, alice, carol);
  qim_authenticated_send moved = fx_send(&f, alice, conv2, 1, "original");
  assert_int_equal(qim_commit_send_sync(f.commit, &moved, &r), QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
  fx_close(&f);
}

static void test_retry_of_failed_step_resumes_the_intent_as_existing(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  failer fl = {.op = "intents.advance", .to = QIM_COMMIT_STATE_OUTBOXED, .status = -EIO, .left = 1};
  f.hook->ctx = &fl;
  f.hook->before = fail_before;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "bumpy");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RECOVERABLE);
  qim_commit_key k = fx_key(&f, alice, 1);
  assert_true(fx_key_equal(&r.error.key, &k));
  assert_int_equal(qim_err_ctrl_code(r.status), 503);
  qim_loaded_commit lc;
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_IN_FLIGHT);
  assert_int_equal(lc.intent.state, QIM_COMMIT_STATE_RECORDED);
  assert_int_equal(lc.intent.coordinates.conversation_seq, 1);
  qim_commit_intent_free(&lc.intent);
  /* The client retries: the same intent is resumed, never a second seq. */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_EXISTING);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  fx_close(&f);
}

static void test_load_of_unknown_key_is_commit_not_found(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_loaded_commit lc;
  qim_commit_key k = fx_key(&f, alice, 404);
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  fx_close(&f);
}

/* ---- errors before reserve ------------------------------------------------------------------------- */

static void test_zero_cmid_is_invalid(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "x");
  memset(s.request.client_message_id.b, 0, 16);
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  fx_close(&f);
}

static void test_body_over_max_size_is_too_large(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  size_t max = f.cfg.max_message_size;
  char *body = malloc(max + 2);
  memset(body, 'a', max + 1);
  body[max + 1] = 0;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, body);
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_MESSAGE_TOO_LARGE);
  assert_int_equal(qim_err_ctrl_code(r.status), 413);
  body[max] = 0; /* exactly the limit is fine */
  s = fx_send(&f, alice, conv, 2, body);
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  free(body);
  fx_close(&f);
}

static void test_sender_without_write_permission_is_denied(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id m[] = {bob};
  qim_conversation_id conv = fx_group(&f, 1, alice, m, 1);
  qim_commit_result r;
  /* Not a member. */
  fx_make_user(&f, carol);
  qim_authenticated_send s = fx_send(&f, carol, conv, 1, "let me in");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  /* A member whose mode lacks W (a reader). */
  assert_int_equal(fx_member_change(&f, conv, QIM_STORE_MEMBER_ADD, carol, QIM_MODE_J | QIM_MODE_R), 0);
  s = fx_send(&f, carol, conv, 2, "read only");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  /* A member who left. */
  assert_int_equal(fx_member_change(&f, conv, QIM_STORE_MEMBER_REMOVE, bob, 0), 0);
  s = fx_send(&f, bob, conv, 3, "gone");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  /* A conversation that does not exist. */
  qim_conversation_id nowhere = {{0xdead, 0xbeef}};
  s = fx_send(&f, alice, nowhere, 4, "anyone?");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  assert_int_equal(qim_err_ctrl_code(r.status), 403);
  /* A client may not forge a Control message. */
  s = fx_send(&f, alice, conv, 5, "{}");
  s.request.content.message_type = QIM_MESSAGE_TYPE_CONTROL;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_PERMISSION_DENIED);
  fx_close(&f);
}

static void test_reply_to_must_exist_and_be_visible(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id m[] = {bob};
  qim_conversation_id conv = fx_group(&f, 1, alice, m, 1);
  qim_commit_result r;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "first");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  s = fx_send(&f, bob, conv, 2, "re: first");
  s.request.has_reply_to = true;
  s.request.reply_to_conversation_seq = 1;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  s = fx_send(&f, bob, conv, 3, "re: nothing");
  s.request.has_reply_to = true;
  s.request.reply_to_conversation_seq = 9;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_REFERENCE);
  /* carol joins after seq 2: seqs 1 and 2 are outside her window. */
  fx_make_user(&f, carol);
  assert_int_equal(fx_member_change(&f, conv, QIM_STORE_MEMBER_ADD, carol, FX_MODE_MEMBER), 0);
  s = fx_send(&f, carol, conv, 4, "re: before my time");
  s.request.has_reply_to = true;
  s.request.reply_to_conversation_seq = 1;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_REFERENCE);
  fx_close(&f);
}

static void test_mention_targets_must_be_members(void **state) {
  (void)state;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.max_mentions = 2;
  fx f;
  fx_open(&f, &cfg);
  qim_user_id m[] = {bob};
  qim_conversation_id conv = fx_group(&f, 1, alice, m, 1);
  fx_make_user(&f, carol);
  qim_commit_result r;
  qim_user_id ok[] = {bob, alice};
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "@bob @me");
  s.request.mention_targets = ok;
  s.request.mention_count = 2;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_user_id stranger[] = {carol};
  s = fx_send(&f, alice, conv, 2, "@carol");
  s.request.mention_targets = stranger;
  s.request.mention_count = 1;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_REFERENCE);
  qim_user_id many[] = {bob, bob, bob};
  s = fx_send(&f, alice, conv, 3, "@bob x3");
  s.request.mention_targets = many;
  s.request.mention_count = 3;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_REFERENCE);
  /* In a direct conversation only its two users can be mentioned. */
  qim_conversation_id dm = fx_direct(&f, alice, bob);
  s = fx_send(&f, alice, dm, 4, "@carol");
  s.request.mention_targets = stranger;
  s.request.mention_count = 1;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVALID_REFERENCE);
  fx_close(&f);
}

static void test_rate_limit_gives_retry_after_and_refills(void **state) {
  (void)state;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.rate_per_sec = 2;
  cfg.rate_burst = 2;
  fx f;
  fx_open(&f, &cfg);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_commit_result r;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "1");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  s = fx_send(&f, alice, conv, 2, "2");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  s = fx_send(&f, alice, conv, 3, "3");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RATE_LIMITED);
  assert_int_equal(r.error.retry_after_ms, 500); /* one token at 2/s */
  assert_int_equal(qim_err_ctrl_code(r.status), 429);
  /* Another user has a bucket of its own. */
  qim_authenticated_send b = fx_send(&f, bob, conv, 1, "me too");
  assert_int_equal(qim_commit_send_sync(f.commit, &b, &r), 0);
  qim_manual_clock_advance(&f.clock, 300);
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RATE_LIMITED);
  assert_int_equal(r.error.retry_after_ms, 200);
  qim_manual_clock_advance(&f.clock, 200);
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_commit_stats st;
  qim_commit_get_stats(f.commit, &st);
  assert_int_equal(st.rate_limited, 2);
  fx_close(&f);
}

static void test_clock_stepping_back_is_unsafe(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  qim_commit_result r;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "now");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_manual_clock_set_wall(&f.clock, FX_T0 - 500); /* within the 1000 ms tolerance */
  s = fx_send(&f, alice, conv, 2, "a bit earlier");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_manual_clock_set_wall(&f.clock, FX_T0 - 5000);
  s = fx_send(&f, alice, conv, 3, "much earlier");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_CLOCK_UNSAFE);
  qim_loaded_commit lc;
  qim_commit_key k = fx_key(&f, alice, 3);
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  fx_close(&f);
}

/* ---- failures after and at reserve ------------------------------------------------------------------- */

static void test_store_failure_at_reserve_is_unavailable(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  failer fl = {.op = "intents.reserve", .to = -1, .status = QIM_E_MESSAGE_STORE_UNAVAILABLE, .left = 1};
  f.hook->ctx = &fl;
  f.hook->before = fail_before;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "nope");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_UNAVAILABLE);
  qim_loaded_commit lc;
  qim_commit_key k = fx_key(&f, alice, 1);
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  /* The retry goes through and gets the first seq: nothing was reserved before. */
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_FRESH);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  fx_close(&f);
}

static void test_failed_record_step_is_recoverable_and_recovery_commits_it(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  failer fl = {.op = "intents.advance", .to = QIM_COMMIT_STATE_RECORDED, .status = -EIO, .left = 1};
  f.hook->ctx = &fl;
  f.hook->before = fail_before;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "later");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RECOVERABLE);
  qim_commit_key k = fx_key(&f, alice, 1);
  qim_loaded_commit lc;
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_IN_FLIGHT);
  assert_int_equal(lc.intent.state, QIM_COMMIT_STATE_RESERVED);
  qim_conversation_seq seq = lc.intent.coordinates.conversation_seq;
  qim_commit_intent_free(&lc.intent);
  /* Before the backoff passes nothing is retried; after it, recovery finishes it. */
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 0);
  qim_manual_clock_advance(&f.clock, 1000);
  assert_int_equal(qim_commit_recover_sync(f.commit, &t), 0);
  assert_int_equal(t.retried, 1);
  for (int i = 0; i < 200; i++) {
    assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
    if (lc.kind == QIM_LOADED_COMMIT_COMMITTED) break;
    qim_commit_intent_free(&lc.intent);
    usleep(10000);
  }
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_COMMITTED);
  assert_int_equal(lc.committed.coordinates.conversation_seq, seq);
  fx_close(&f);
}

/* Rewrites the record (both copies in memory, the one in the bytes) inside every outbox
 * envelope read back. */
static void tamper_after(hook_store *h, const char *op, qim_store_req *req) {
  (void)h;
  if (strcmp(op, "logs.read") != 0 || req->status != 0) return;
  qim_store_log_read_req *q = (qim_store_log_read_req *)req;
  for (size_t i = 0; i < q->out_count; i++) {
    qim_committed_envelope env;
    memset(&env, 0, sizeof env);
    if (qim_committed_envelope_decode(q->out_records[i].payload.p, q->out_records[i].payload.n, &env) != 0) abort();
    if (env.record.content.payload_or_ciphertext.n) {
      env.record.content.payload_or_ciphertext.p[0] ^= 1;
      env.intent.record.content.payload_or_ciphertext.p[0] ^= 1;
    }
    qim_bytes_free(&q->out_records[i].payload);
    if (qim_committed_envelope_encode(&env, &q->out_records[i].payload) != 0) abort();
    qim_committed_envelope_free(&env);
  }
}

static void test_envelope_differing_from_intent_is_invariant_violation(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  f.hook->after = tamper_after;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "pristine");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_INVARIANT_VIOLATION);
  f.hook->after = NULL;
  qim_commit_stats st;
  qim_commit_get_stats(f.commit, &st);
  assert_int_equal(st.invariant_violations, 1);
  /* Never Committed on a mismatch; once the store answers right it finishes. */
  qim_commit_key k = fx_key(&f, alice, 1);
  qim_loaded_commit lc;
  assert_int_equal(qim_commit_load_sync(f.commit, &k, &lc), 0);
  assert_int_equal(lc.kind, QIM_LOADED_COMMIT_IN_FLIGHT);
  assert_int_equal(lc.intent.state, QIM_COMMIT_STATE_OUTBOXED);
  qim_commit_intent_free(&lc.intent);
  qim_manual_clock_advance(&f.clock, 1000);
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_EXISTING);
  fx_close(&f);
}

/* Another driver finishes the intent between our steps: the store refuses the stale step
 * (InvalidStateTransition) and the commit reloads instead of failing. */
static int race_before(hook_store *h, const char *op, qim_store_req *req) {
  atomic_int *once = h->ctx;
  if (!hook_is_advance(op, req, QIM_COMMIT_STATE_RECORDED) || atomic_exchange(once, 0) == 0) return 0;
  qim_commit_key key = ((qim_store_intent_advance_req *)req)->key;
  for (int to = QIM_COMMIT_STATE_RECORDED; to <= QIM_COMMIT_STATE_COMMITTED; to++) {
    qim_store_intent_advance_req a;
    memset(&a, 0, sizeof a);
    a.key = key;
    a.to = (qim_commit_state)to;
    a.now = FX_T0;
    if (QIM_STORE_SYNC(h->real, intents.advance, &a) != 0) abort();
  }
  return 0;
}

static void test_step_overtaken_by_another_driver_reloads_and_acks(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  atomic_int once = 1;
  f.hook->ctx = &once;
  f.hook->before = race_before;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "raced");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1);
  f.hook->before = NULL;
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 1);
  fx_outbox_free(&o);
  fx_close(&f);
}

/* ---- control messages ------------------------------------------------------------------------------------ */

static void test_control_message_takes_no_seq_and_keeps_outbox_order(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id m[] = {bob};
  qim_conversation_id conv = fx_group(&f, 1, alice, m, 1);
  qim_commit_result r;
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "one");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  qim_commit_control ctl;
  memset(&ctl, 0, sizeof ctl);
  ctl.actor = s.actor;
  ctl.conversation_id = conv;
  ctl.client_message_id = fx_cmid(1000);
  ctl.content.message_type = QIM_MESSAGE_TYPE_CONTROL;
  ctl.content.payload_or_ciphertext.p = (uint8_t *)"{\"edit\":1}";
  ctl.content.payload_or_ciphertext.n = 10;
  ctl.trace_id = qim_trace_id_new();
  assert_int_equal(qim_commit_send_control_sync(f.commit, &ctl, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 1); /* the position, no new seq */
  assert_int_equal(qim_commit_send_control_sync(f.commit, &ctl, &r), 0); /* idempotent */
  assert_int_equal(r.reserve, QIM_RESERVE_RESULT_COMMITTED);
  s = fx_send(&f, bob, conv, 2, "two");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_int_equal(r.ack.coordinates.conversation_seq, 2); /* seqs stay gap-free */
  fx_outbox o;
  fx_outbox_read(&f, &o);
  assert_int_equal(o.n, 3);
  assert_int_equal(o.env[1].record.content.message_type, QIM_MESSAGE_TYPE_CONTROL);
  assert_int_equal(o.env[0].record.coordinates.conversation_seq, 1);
  assert_int_equal(o.env[2].record.coordinates.conversation_seq, 2);
  fx_outbox_free(&o);
  qim_message_record *h;
  size_t n = fx_history(&f, conv, alice, &h);
  assert_int_equal(n, 2); /* a Control message has no history row */
  fx_history_free(h, n);
  ctl.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  assert_int_equal(qim_commit_send_control_sync(f.commit, &ctl, &r), -EINVAL);
  fx_close(&f);
}

/* ---- completion on the caller's loop ------------------------------------------------------------------------ */

typedef struct loop_wait {
  int done;
  pthread_t thread;
} loop_wait;

static void loop_done(qim_commit_op *op) {
  loop_wait *w = op->data;
  w->done = 1;
  w->thread = pthread_self();
}

static void test_send_completes_on_the_callers_loop(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, alice, bob);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_loop(&loop, &cq), 0);
  loop_wait w = {0};
  qim_commit_op op = {.cq = cq, .done = loop_done, .data = &w};
  qim_authenticated_send s = fx_send(&f, alice, conv, 1, "async");
  assert_int_equal(qim_commit_send(f.commit, &s, &op), 0);
  while (!w.done) uv_run(&loop, UV_RUN_ONCE);
  assert_true(pthread_equal(w.thread, pthread_self()));
  assert_int_equal(op.result.status, 0);
  assert_int_equal(op.result.ack.coordinates.conversation_seq, 1);
  qim_cq_free(cq);
  uv_run(&loop, UV_RUN_NOWAIT);
  assert_int_equal(uv_loop_close(&loop), 0);
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  users();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fresh_send_passes_every_state_then_acks),
      cmocka_unit_test(test_reserve_fixes_record_and_direct_audience),
      cmocka_unit_test(test_group_send_freezes_membership_snapshot),
      cmocka_unit_test(test_body_over_inline_threshold_is_not_inlined),
      cmocka_unit_test(test_retry_after_commit_replays_the_same_ack),
      cmocka_unit_test(test_retry_with_other_content_is_refused_as_reused),
      cmocka_unit_test(test_retry_of_failed_step_resumes_the_intent_as_existing),
      cmocka_unit_test(test_load_of_unknown_key_is_commit_not_found),
      cmocka_unit_test(test_zero_cmid_is_invalid),
      cmocka_unit_test(test_body_over_max_size_is_too_large),
      cmocka_unit_test(test_sender_without_write_permission_is_denied),
      cmocka_unit_test(test_reply_to_must_exist_and_be_visible),
      cmocka_unit_test(test_mention_targets_must_be_members),
      cmocka_unit_test(test_rate_limit_gives_retry_after_and_refills),
      cmocka_unit_test(test_clock_stepping_back_is_unsafe),
      cmocka_unit_test(test_store_failure_at_reserve_is_unavailable),
      cmocka_unit_test(test_failed_record_step_is_recoverable_and_recovery_commits_it),
      cmocka_unit_test(test_envelope_differing_from_intent_is_invariant_violation),
      cmocka_unit_test(test_step_overtaken_by_another_driver_reloads_and_acks),
      cmocka_unit_test(test_control_message_takes_no_seq_and_keeps_outbox_order),
      cmocka_unit_test(test_send_completes_on_the_callers_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
