/*
 * test_cursor.c — signed cursors: the token round trip and its fixed layout, and every way a
 * cursor is refused as CursorInvalid (a changed byte anywhere, a malformed token, another key,
 * another tenant / user / device, a shard or lane that is not the user's); opening cursors from
 * the floor and from now.
 */
#include "mb_fixture.h"

static const uint8_t *key(void) {
  static qim_mailbox_options o;
  o = fx_mb_options();
  return o.cursor_key;
}

static qim_cursor_identity identity_of(qim_user_id u, uint64_t device) {
  qim_shard_config cfg = fx_shards();
  qim_authenticated_actor a = fx_actor(u, device);
  return (qim_cursor_identity){a.tenant_id, a.user_id, a.device_id, qim_shard_of_user(&cfg, a.tenant_id, u),
                               qim_lane_of_user(&cfg, a.tenant_id, u), 3};
}

static void test_a_cursor_token_round_trips_and_verifies(void **state) {
  (void)state;
  qim_shard_config cfg = fx_shards();
  qim_user_id u = fx_user_on(1, 1, 0);
  qim_cursor_identity id = identity_of(u, 4);
  qim_mailbox_cursor c, back;
  qim_mailbox_cursor_sign(key(), &id, qim_mailbox_seq_make(3, 77), &c);
  assert_int_equal(c.signed_token.n, 32);
  char token[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  assert_int_equal(qim_mailbox_cursor_format(&c, token, sizeof token), QIM_MAILBOX_CURSOR_TOKEN_LEN);
  assert_int_equal(strlen(token), 128);
  assert_int_equal(qim_mailbox_cursor_parse(token, strlen(token), &back), 0);
  assert_memory_equal(&back.identity, &c.identity, sizeof c.identity);
  assert_int_equal(back.last_applied_seq, qim_mailbox_seq_make(3, 77));
  assert_true(qim_bytes_equal(&back.signed_token, &c.signed_token));
  qim_authenticated_actor a = fx_actor(u, 4);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &back, &a), 0);
  /* the layout: version 1, then the identity big-endian */
  uint8_t raw[96];
  size_t n;
  assert_int_equal(qim_b64url_decode(token, 128, raw, sizeof raw, &n), 0);
  assert_int_equal(n, 96);
  assert_int_equal(raw[0], 1);
  assert_int_equal(raw[1 + 48 + 4], id.lane);
  assert_int_equal(raw[1 + 48 + 4 + 1 + 1], 3); /* low byte of the epoch */
  assert_int_equal(raw[63], 77);                /* low byte of the seq */
  assert_int_equal(qim_mailbox_cursor_format(&c, token, 128), -ENOSPC);
  qim_mailbox_cursor_free(&back);
  qim_mailbox_cursor_free(&c);
  qim_mailbox_cursor none = {0};
  assert_int_equal(qim_mailbox_cursor_format(&none, token, sizeof token), -EINVAL);
}

static void test_a_changed_byte_anywhere_makes_the_cursor_invalid(void **state) {
  (void)state;
  qim_shard_config cfg = fx_shards();
  qim_user_id u = fx_user_on(2, 0, 0);
  qim_cursor_identity id = identity_of(u, 1);
  qim_mailbox_cursor c;
  qim_mailbox_cursor_sign(key(), &id, 1234, &c);
  char token[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  qim_mailbox_cursor_format(&c, token, sizeof token);
  qim_authenticated_actor a = fx_actor(u, 1);
  uint8_t raw[96];
  size_t n;
  qim_b64url_decode(token, 128, raw, sizeof raw, &n);
  for (size_t i = 0; i < 96; i++) {
    raw[i] ^= 0x01;
    char t2[QIM_MAILBOX_CURSOR_TOKEN_CAP];
    qim_b64url_encode(raw, 96, t2, sizeof t2);
    qim_mailbox_cursor back;
    int rc = qim_mailbox_cursor_parse(t2, 128, &back);
    if (rc == 0) rc = qim_mailbox_cursor_verify(key(), &cfg, &back, &a);
    assert_int_equal(rc, QIM_E_MAILBOX_CURSOR_INVALID);
    qim_mailbox_cursor_free(&back);
    raw[i] ^= 0x01;
  }
  qim_mailbox_cursor_free(&c);
}

static void test_malformed_tokens_are_invalid(void **state) {
  (void)state;
  qim_mailbox_cursor c;
  char token[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  qim_cursor_identity id = identity_of(fx_user_on(0, 0, 0), 1);
  qim_mailbox_cursor_sign(key(), &id, 5, &c);
  qim_mailbox_cursor_format(&c, token, sizeof token);
  qim_mailbox_cursor_free(&c);
  const char *bad[] = {"", "abc", NULL};
  for (int i = 0; bad[i]; i++) assert_int_equal(qim_mailbox_cursor_parse(bad[i], strlen(bad[i]), &c), QIM_E_MAILBOX_CURSOR_INVALID);
  assert_int_equal(qim_mailbox_cursor_parse(token, 127, &c), QIM_E_MAILBOX_CURSOR_INVALID);
  char longer[140];
  memcpy(longer, token, 128);
  memcpy(longer + 128, "AAAA", 4);
  assert_int_equal(qim_mailbox_cursor_parse(longer, 132, &c), QIM_E_MAILBOX_CURSOR_INVALID);
  token[10] = '+'; /* not base64url */
  assert_int_equal(qim_mailbox_cursor_parse(token, 128, &c), QIM_E_MAILBOX_CURSOR_INVALID);
  token[10] = '=';
  assert_int_equal(qim_mailbox_cursor_parse(token, 128, &c), QIM_E_MAILBOX_CURSOR_INVALID);
  assert_int_equal(qim_mailbox_cursor_parse(NULL, 128, &c), QIM_E_MAILBOX_CURSOR_INVALID);
  /* a version other than 1 */
  uint8_t raw[96] = {2};
  qim_b64url_encode(raw, 96, token, sizeof token);
  assert_int_equal(qim_mailbox_cursor_parse(token, 128, &c), QIM_E_MAILBOX_CURSOR_INVALID);
}

static void test_a_cursor_of_someone_else_or_another_key_is_invalid(void **state) {
  (void)state;
  qim_shard_config cfg = fx_shards();
  qim_user_id u = fx_user_on(0, 1, 0), other = fx_user_on(0, 1, 1);
  qim_cursor_identity id = identity_of(u, 1);
  qim_mailbox_cursor c;
  qim_mailbox_cursor_sign(key(), &id, 9, &c);
  qim_authenticated_actor mine = fx_actor(u, 1);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &mine), 0);
  qim_authenticated_actor foreign_user = fx_actor(other, 1), foreign_device = fx_actor(u, 2);
  qim_authenticated_actor foreign_tenant = mine;
  foreign_tenant.tenant_id.v.lo++;
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &foreign_user), QIM_E_MAILBOX_CURSOR_INVALID);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &foreign_device), QIM_E_MAILBOX_CURSOR_INVALID);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &foreign_tenant), QIM_E_MAILBOX_CURSOR_INVALID);
  uint8_t other_key[QIM_MAILBOX_CURSOR_KEY_SIZE] = {1};
  assert_int_equal(qim_mailbox_cursor_verify(other_key, &cfg, &c, &mine), QIM_E_MAILBOX_CURSOR_INVALID);
  qim_mailbox_cursor_free(&c);
  /* signed by us, but for a lane or shard that is not the user's */
  qim_cursor_identity wrong_lane = id, wrong_shard = id;
  wrong_lane.lane ^= 1;
  wrong_shard.mailbox_shard = (wrong_shard.mailbox_shard + 1) % FX_SHARDS;
  qim_mailbox_cursor_sign(key(), &wrong_lane, 9, &c);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &mine), QIM_E_MAILBOX_CURSOR_INVALID);
  qim_mailbox_cursor_free(&c);
  qim_mailbox_cursor_sign(key(), &wrong_shard, 9, &c);
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &mine), QIM_E_MAILBOX_CURSOR_INVALID);
  /* a token that is not 32 bytes */
  c.signed_token.n = 31;
  assert_int_equal(qim_mailbox_cursor_verify(key(), &cfg, &c, &mine), QIM_E_MAILBOX_CURSOR_INVALID);
  c.signed_token.n = 32;
  qim_mailbox_cursor_free(&c);
}

/* Through the pull API: a tampered cursor and a foreign one are refused before any read. */
static void test_pull_refuses_tampered_and_foreign_cursors(void **state) {
  (void)state;
  fx_env *env = fx_env_new("mb-cursor");
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(env->store, &o);
  qim_user_id u = fx_user_on(1, 0, 0), v = fx_user_on(1, 0, 1);
  qim_mailbox_cursor c = fx_cursor(m, u, 0);
  c.signed_token.p[0] ^= 0x80;
  qim_mailbox_pull_request rq = fx_pull_request(u, &c, 10, 0);
  qim_mailbox_page page;
  qim_mailbox_cursor next;
  qim_error err;
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, &err), QIM_E_MAILBOX_CURSOR_INVALID);
  assert_int_equal(err.code, QIM_E_MAILBOX_CURSOR_INVALID);
  c.signed_token.p[0] ^= 0x80;
  rq = fx_pull_request(v, &c, 10, 0); /* v presents u's cursor */
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, &err), QIM_E_MAILBOX_CURSOR_INVALID);
  rq = fx_pull_request(u, &c, 10, 0);
  rq.range.user_id = v; /* the range must be the actor's own */
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, &err), -EINVAL);
  qim_mailbox_cursor_free(&c);
  qim_mailbox_free(m);
  fx_env_free(env);
}

static void test_open_gives_a_cursor_at_the_watermark_or_the_floor(void **state) {
  (void)state;
  fx_env *env = fx_env_new("mb-cursor");
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(env->store, &o);
  fx_acquire_all(m);
  qim_user_id u = fx_user_on(2, 1, 0);
  fx_msg msg = {.n = 1, .sender = u, .type = QIM_MESSAGE_TYPE_TEXT, .inline_body = true};
  qim_mailbox_seq seq = fx_send(env->store, &msg, 2, &u, 1);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);
  qim_authenticated_actor a = fx_actor(u, 5);
  qim_mailbox_cursor now, floor;
  assert_int_equal(qim_mailbox_cursor_open_sync(m, &a, QIM_MAILBOX_CURSOR_FROM_NOW, &now, NULL), 0);
  assert_int_equal(qim_mailbox_cursor_open_sync(m, &a, QIM_MAILBOX_CURSOR_FROM_FLOOR, &floor, NULL), 0);
  assert_int_equal(now.last_applied_seq, seq);
  assert_int_equal(floor.last_applied_seq, 0);
  assert_int_equal(now.identity.shard_epoch, 1);
  qim_shard_config cfg = fx_shards();
  assert_int_equal(qim_mailbox_cursor_verify(o.cursor_key, &cfg, &now, &a), 0);
  /* from the floor the device gets everything; from now, nothing old */
  qim_mailbox_pull_request rq = {.actor = a, .cursor = floor, .range = {fx_tenant(), u, 0, 0, 10, 0}};
  qim_mailbox_page page;
  qim_mailbox_cursor next;
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, NULL), 0);
  assert_int_equal(page.entry_count, 1);
  qim_mailbox_page_free(&page);
  qim_mailbox_cursor_free(&next);
  rq.cursor = now;
  assert_int_equal(qim_mailbox_pull_sync(m, &rq, &page, &next, NULL), 0);
  assert_int_equal(page.entry_count, 0);
  assert_int_equal(page.covered_through_seq, seq);
  qim_mailbox_page_free(&page);
  qim_mailbox_cursor_free(&next);
  qim_mailbox_cursor_free(&now);
  qim_mailbox_cursor_free(&floor);
  qim_mailbox_free(m);
  fx_env_free(env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_cursor_token_round_trips_and_verifies),
      cmocka_unit_test(test_a_changed_byte_anywhere_makes_the_cursor_invalid),
      cmocka_unit_test(test_malformed_tokens_are_invalid),
      cmocka_unit_test(test_a_cursor_of_someone_else_or_another_key_is_invalid),
      cmocka_unit_test(test_pull_refuses_tampered_and_foreign_cursors),
      cmocka_unit_test(test_open_gives_a_cursor_at_the_watermark_or_the_floor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
