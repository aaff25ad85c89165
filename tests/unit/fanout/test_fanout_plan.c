/*
 * test_fanout_plan.c — the pure half of the fanout: planning one dispatch per shard with
 * chunked recipients, the membership-Control audience, and the determinism check
 * (including what counts as a redacted body).
 */
#include "testsupport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fanout/fanout.h"
#include "fanout_fixture.h"
#include "qim/err.h"
#include "qim/shard.h"

static const qim_shard_config SHARDS = {4, 2};
static const qim_log_position SRC = {{QIM_LOG_STREAM_OUTBOX, 0}, 12};

/* Every user 1..n appears in exactly one chunk of exactly one dispatch, on its shard. */
static void check_exactly_once(const qim_fanout_plan *p, size_t n, uint32_t chunk) {
  unsigned char *seen = calloc(n + 1, 1);
  qim_mailbox_shard_id prev = 0;
  for (size_t d = 0; d < p->dispatch_count; d++) {
    const qim_group_dispatch *g = &p->dispatches[d];
    if (d) assert_true(g->target_shard > prev);
    prev = g->target_shard;
    qim_dispatch_id want = qim_dispatch_id_make(&g->source_message.message_id, g->target_shard);
    assert_memory_equal(g->dispatch_id.b, want.b, 16);
    for (size_t c = 0; c < g->chunk_count; c++) {
      const qim_recipient_chunk *ch = &g->recipient_chunks[c];
      assert_int_equal(ch->chunk_id, c);
      assert_true(ch->recipient_count >= 1 && ch->recipient_count <= chunk);
      if (c + 1 < g->chunk_count) assert_int_equal(ch->recipient_count, chunk);
      for (size_t i = 0; i < ch->recipient_count; i++) {
        qim_user_id u = ch->recipient_ids[i];
        assert_int_equal(qim_shard_of_user(&SHARDS, FX_TENANT, u), g->target_shard);
        assert_true(u.v.lo >= 1 && u.v.lo <= n);
        assert_int_equal(seen[u.v.lo], 0);
        seen[u.v.lo] = 1;
      }
    }
  }
  for (size_t i = 1; i <= n; i++) assert_int_equal(seen[i], 1);
  free(seen);
}

static void test_plan_puts_each_recipient_in_one_chunk_of_one_dispatch_per_shard(void **state) {
  (void)state;
  size_t n = 300;
  qim_user_id *u = qim_malloc(2 * n * sizeof *u);
  for (size_t i = 0; i < n; i++) u[i] = u[n + i] = fx_user(n - i); /* reversed, each twice */
  qim_committed_envelope e;
  fx_envelope(&e, (qim_conversation_id){{3, 3}}, 5);
  fx_group(&e, 9, (uint32_t)n, NULL, 0);
  qim_fanout_plan p;
  assert_int_equal(qim_fanout_plan_make(&e, SRC, u, 2 * n, &SHARDS, 16, &p), 0);
  assert_int_equal(p.dispatch_count, 4);
  assert_int_equal(p.source.offset, 12);
  check_exactly_once(&p, n, 16);
  const qim_group_dispatch *g = &p.dispatches[0];
  assert_int_equal(g->membership_version, 9);
  assert_memory_equal(g->trace_id.b, e.intent.trace_id.b, 16);
  assert_true(qim_message_content_equal(&g->content, &e.record.content));
  assert_int_equal(g->created_at, e.intent.delivery.created_at);
  assert_true(g->inline_body);
  assert_int_equal(g->source_message.conversation_seq, 5);
  qim_fanout_plan_free(&p);
  qim_committed_envelope_free(&e);
  qim_free(u);
}

static void test_plan_of_one_recipient_is_one_dispatch_with_one_chunk(void **state) {
  (void)state;
  qim_user_id u = fx_user(1);
  qim_committed_envelope e;
  fx_envelope(&e, (qim_conversation_id){{3, 4}}, 1);
  fx_direct(&e, &u, 1);
  qim_fanout_plan p;
  assert_int_equal(qim_fanout_plan_make(&e, SRC, &u, 1, &SHARDS, 256, &p), 0);
  assert_int_equal(p.dispatch_count, 1);
  assert_int_equal(p.dispatches[0].chunk_count, 1);
  assert_int_equal(p.dispatches[0].membership_version, 0); /* Direct: no snapshot */
  qim_fanout_plan_free(&p);
  assert_int_equal(qim_fanout_plan_make(&e, SRC, &u, 1, &SHARDS, 0, &p), -EINVAL);
  qim_committed_envelope_free(&e);
}

static void encode_plan(const qim_fanout_plan *p, qim_bytes *out) {
  for (size_t i = 0; i < p->dispatch_count; i++) assert_int_equal(qim_group_dispatch_encode(&p->dispatches[i], &out[i]), 0);
}

static void test_plan_is_a_pure_function_of_its_inputs(void **state) {
  (void)state;
  qim_user_id u[50];
  for (int i = 0; i < 50; i++) u[i] = fx_user((uint64_t)(i * 37 % 50 + 1));
  qim_committed_envelope e;
  fx_envelope(&e, (qim_conversation_id){{3, 5}}, 2);
  fx_group(&e, 2, 50, NULL, 0);
  qim_fanout_plan a, b;
  assert_int_equal(qim_fanout_plan_make(&e, SRC, u, 50, &SHARDS, 7, &a), 0);
  for (int i = 0; i < 25; i++) { /* a different input order gives the same plan */
    qim_user_id t = u[i];
    u[i] = u[49 - i];
    u[49 - i] = t;
  }
  assert_int_equal(qim_fanout_plan_make(&e, SRC, u, 50, &SHARDS, 7, &b), 0);
  assert_int_equal(a.dispatch_count, b.dispatch_count);
  qim_bytes ea[8] = {0}, eb[8] = {0};
  encode_plan(&a, ea);
  encode_plan(&b, eb);
  for (size_t i = 0; i < a.dispatch_count; i++) {
    assert_true(qim_bytes_equal(&ea[i], &eb[i]));
    assert_int_equal(qim_fanout_dispatch_check(&ea[i], &eb[i]), 0);
    qim_free(ea[i].p);
    qim_free(eb[i].p);
  }
  qim_fanout_plan_free(&a);
  qim_fanout_plan_free(&b);
  qim_committed_envelope_free(&e);
}

/* One planned dispatch of a 10-member group, encoded. */
static void one_dispatch(qim_group_dispatch *d, qim_bytes *enc) {
  qim_user_id u[10];
  for (int i = 0; i < 10; i++) u[i] = fx_user((uint64_t)i + 1);
  qim_committed_envelope e;
  fx_envelope(&e, (qim_conversation_id){{3, 6}}, 4);
  fx_group(&e, 3, 10, NULL, 0);
  qim_fanout_plan p;
  qim_shard_config one = {1, 1};
  assert_int_equal(qim_fanout_plan_make(&e, SRC, u, 10, &one, 256, &p), 0);
  assert_int_equal(p.dispatch_count, 1);
  qim_group_dispatch_copy(d, &p.dispatches[0]);
  assert_int_equal(qim_group_dispatch_encode(d, enc), 0);
  qim_fanout_plan_free(&p);
  qim_committed_envelope_free(&e);
}

static void test_check_accepts_a_redacted_stored_body(void **state) {
  (void)state;
  qim_group_dispatch d;
  qim_bytes planned, redacted;
  one_dispatch(&d, &planned);
  assert_int_equal(qim_fanout_dispatch_redact(&planned, &redacted), 0);
  assert_false(qim_bytes_equal(&planned, &redacted));
  assert_int_equal(qim_fanout_dispatch_check(&redacted, &planned), 0);
  /* and the other way round: the outbox body was wiped, the dispatch not yet */
  assert_int_equal(qim_fanout_dispatch_check(&planned, &redacted), 0);
  /* redacting twice changes nothing */
  qim_bytes again;
  assert_int_equal(qim_fanout_dispatch_redact(&redacted, &again), 0);
  assert_true(qim_bytes_equal(&again, &redacted));
  qim_free(again.p);
  qim_bytes junk = {(uint8_t *)"nope", 4};
  assert_int_equal(qim_fanout_dispatch_redact(&junk, &again), -EINVAL);
  qim_free(planned.p);
  qim_free(redacted.p);
  qim_group_dispatch_free(&d);
}

static void test_check_rejects_other_recipients_even_when_redacted(void **state) {
  (void)state;
  qim_group_dispatch d;
  qim_bytes planned, tampered, tampered_redacted;
  one_dispatch(&d, &planned);
  d.recipient_chunks[0].recipient_ids[3] = fx_user(999);
  assert_int_equal(qim_group_dispatch_encode(&d, &tampered), 0);
  assert_int_equal(qim_fanout_dispatch_check(&tampered, &planned), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  assert_int_equal(qim_fanout_dispatch_redact(&tampered, &tampered_redacted), 0);
  assert_int_equal(qim_fanout_dispatch_check(&tampered_redacted, &planned), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  qim_free(tampered.p);
  qim_free(tampered_redacted.p);
  qim_free(planned.p);
  qim_group_dispatch_free(&d);
}

static void test_check_rejects_a_different_unredacted_body_and_garbage(void **state) {
  (void)state;
  qim_group_dispatch d;
  qim_bytes planned, other;
  one_dispatch(&d, &planned);
  d.content.payload_or_ciphertext.p[0] = 'J';
  assert_int_equal(qim_group_dispatch_encode(&d, &other), 0);
  assert_int_equal(qim_fanout_dispatch_check(&other, &planned), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  qim_bytes junk = {(uint8_t *)"\x01\x44garbage", 9};
  assert_int_equal(qim_fanout_dispatch_check(&junk, &planned), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  assert_int_equal(qim_fanout_dispatch_check(&planned, &junk), QIM_E_FANOUT_DETERMINISM_VIOLATION);
  qim_free(other.p);
  qim_free(planned.p);
  qim_group_dispatch_free(&d);
}

static void set_payload(qim_message_content *c, const char *s) {
  qim_bytes_free(&c->payload_or_ciphertext);
  c->payload_or_ciphertext.p = (uint8_t *)qim_strdup(s);
  c->payload_or_ciphertext.n = strlen(s);
}

static void test_membership_control_names_its_users_other_content_names_none(void **state) {
  (void)state;
  char a[QIM_TOPIC_NAME_CAP], b[QIM_TOPIC_NAME_CAP], json[256];
  qim_user_id_format(fx_user(41), a, sizeof a);
  qim_user_id_format(fx_user(42), b, sizeof b);
  snprintf(json, sizeof json, "{\"op\":\"remove\",\"changes\":[{\"user\":\"%s\",\"change\":\"removed\"},"
           "{\"user\":\"%s\",\"change\":\"banned\"},{\"user\":\"bogus\"}]}", a, b);
  qim_message_content c = {.message_type = QIM_MESSAGE_TYPE_CONTROL, .custom_type = qim_strdup(QIM_FANOUT_MEMBERSHIP_TYPE)};
  set_payload(&c, json);
  qim_user_id *u;
  size_t n;
  qim_fanout_membership_users(&c, &u, &n);
  assert_int_equal(n, 2);
  assert_true(qim_u128_eq(u[0].v, fx_user(41).v) && qim_u128_eq(u[1].v, fx_user(42).v));
  qim_free(u);
  set_payload(&c, "{\"changes\":[{\"user\":"); /* truncated */
  qim_fanout_membership_users(&c, &u, &n);
  assert_int_equal(n, 0);
  assert_null(u);
  set_payload(&c, json);
  c.message_type = QIM_MESSAGE_TYPE_TEXT; /* a text that looks the same names nobody */
  qim_fanout_membership_users(&c, &u, &n);
  assert_int_equal(n, 0);
  qim_message_content_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_puts_each_recipient_in_one_chunk_of_one_dispatch_per_shard),
      cmocka_unit_test(test_plan_of_one_recipient_is_one_dispatch_with_one_chunk),
      cmocka_unit_test(test_plan_is_a_pure_function_of_its_inputs),
      cmocka_unit_test(test_check_accepts_a_redacted_stored_body),
      cmocka_unit_test(test_check_rejects_other_recipients_even_when_redacted),
      cmocka_unit_test(test_check_rejects_a_different_unredacted_body_and_garbage),
      cmocka_unit_test(test_membership_control_names_its_users_other_content_names_none),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
