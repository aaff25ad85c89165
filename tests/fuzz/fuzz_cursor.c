/*
 * fuzz_cursor.c — libFuzzer harness for mailbox cursor tokens (src/mailbox/cursor.c): the
 * opaque `cursor` a client sends back in {sync}. The input is the token text.
 *
 * What must hold:
 *   - parsing refuses anything but the canonical 128-character token (MailboxCursorInvalid,
 *     leaving nothing allocated), and what it accepts formats back to exactly the input;
 *   - a parsed token verifies exactly when its MAC is the one the key gives for its body and
 *     its identity is the actor's own on the actor's shard and lane — checked against a
 *     fresh signature, so the fuzzer cannot forge one by luck;
 *   - a cursor signed here (identity drawn from the input) formats, parses back equal and
 *     verifies; changed in any one character of its token, or presented by another device,
 *     it no longer verifies.
 * Seeds: tests/fuzz/corpus/cursor/ (tokens signed with the key below, some tampered, made
 * by gen/seeds_cursor.py).
 */
#include <string.h>

#include "fuzz.h"
#include "mailbox/mailbox.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/record.h"
#include "qim/shard.h"

/* The seeds are signed with this key: 32 bytes 0x01..0x20. */
static uint8_t kKey[QIM_MAILBOX_CURSOR_KEY_SIZE];
static const qim_shard_config kShards = {4, 2};
static const char kB64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static qim_authenticated_actor actor_of(const qim_cursor_identity *id) {
  return (qim_authenticated_actor){id->tenant_id, id->user_id, id->device_id};
}

static int identity_equal(const qim_cursor_identity *a, const qim_cursor_identity *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->user_id.v, b->user_id.v) &&
         qim_u128_eq(a->device_id.v, b->device_id.v) && a->mailbox_shard == b->mailbox_shard &&
         a->lane == b->lane && a->shard_epoch == b->shard_epoch;
}

/* The token as the fuzzer gave it. */
static void fuzz_parse(const char *s, size_t n) {
  qim_mailbox_cursor c;
  int rc = qim_mailbox_cursor_parse(s, n, &c);
  if (rc != 0) {
    FUZZ_CHECK(rc == QIM_E_MAILBOX_CURSOR_INVALID);
    FUZZ_CHECK(c.signed_token.p == NULL && c.signed_token.n == 0);
    return;
  }
  char again[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  FUZZ_CHECK(qim_mailbox_cursor_format(&c, again, sizeof again) == QIM_MAILBOX_CURSOR_TOKEN_LEN);
  FUZZ_CHECK(n == QIM_MAILBOX_CURSOR_TOKEN_LEN && memcmp(again, s, n) == 0);
  qim_mailbox_cursor fresh;
  qim_mailbox_cursor_sign(kKey, &c.identity, c.last_applied_seq, &fresh);
  const qim_cursor_identity *id = &c.identity;
  int genuine = qim_bytes_equal(&fresh.signed_token, &c.signed_token);
  int own_lane = id->mailbox_shard == qim_shard_of_user(&kShards, id->tenant_id, id->user_id) &&
                 id->lane == qim_lane_of_user(&kShards, id->tenant_id, id->user_id);
  qim_authenticated_actor actor = actor_of(id);
  int vr = qim_mailbox_cursor_verify(kKey, &kShards, &c, &actor);
  FUZZ_CHECK(vr == 0 || vr == QIM_E_MAILBOX_CURSOR_INVALID);
  FUZZ_CHECK((vr == 0) == (genuine && own_lane));
  qim_mailbox_cursor_free(&fresh);
  qim_mailbox_cursor_free(&c);
}

/* A cursor signed here from input bytes: round trip, then tampering. */
static void fuzz_signed(const uint8_t *data, size_t size) {
  uint8_t b[64] = {0};
  memcpy(b, data, size < sizeof b ? size : sizeof b);
  qim_cursor_identity id = {.shard_epoch = (qim_shard_epoch)(b[48] << 8 | b[49])};
  id.tenant_id.v = qim_u128_from_be(b);
  id.user_id.v = qim_u128_from_be(b + 16);
  id.device_id.v = qim_u128_from_be(b + 32);
  id.mailbox_shard = qim_shard_of_user(&kShards, id.tenant_id, id.user_id);
  id.lane = qim_lane_of_user(&kShards, id.tenant_id, id.user_id);
  uint64_t seq = 0;
  for (int i = 0; i < 8; i++) seq = seq << 8 | b[50 + i];
  qim_mailbox_cursor c, back;
  qim_mailbox_cursor_sign(kKey, &id, seq, &c);
  char tok[QIM_MAILBOX_CURSOR_TOKEN_CAP];
  FUZZ_CHECK(qim_mailbox_cursor_format(&c, tok, sizeof tok) == QIM_MAILBOX_CURSOR_TOKEN_LEN);
  FUZZ_CHECK(qim_mailbox_cursor_parse(tok, QIM_MAILBOX_CURSOR_TOKEN_LEN, &back) == 0);
  FUZZ_CHECK(identity_equal(&back.identity, &id) && back.last_applied_seq == seq);
  qim_authenticated_actor actor = actor_of(&id);
  FUZZ_CHECK(qim_mailbox_cursor_verify(kKey, &kShards, &back, &actor) == 0);
  qim_authenticated_actor other = actor;
  other.device_id.v.lo ^= 1;
  FUZZ_CHECK(qim_mailbox_cursor_verify(kKey, &kShards, &back, &other) ==
             QIM_E_MAILBOX_CURSOR_INVALID);
  qim_mailbox_cursor_free(&back);
  uint32_t h = fuzz_hash(data, size);
  size_t at = h % QIM_MAILBOX_CURSOR_TOKEN_LEN;
  const char *pos = strchr(kB64url, tok[at]);
  FUZZ_CHECK(pos != NULL);
  tok[at] = kB64url[(size_t)(pos - kB64url + 1 + (h >> 8) % 63) % 64]; /* another character */
  if (qim_mailbox_cursor_parse(tok, QIM_MAILBOX_CURSOR_TOKEN_LEN, &back) == 0) {
    FUZZ_CHECK(qim_mailbox_cursor_verify(kKey, &kShards, &back, &actor) ==
               QIM_E_MAILBOX_CURSOR_INVALID);
    qim_mailbox_cursor_free(&back);
  }
  qim_mailbox_cursor_free(&c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  for (size_t i = 0; i < sizeof kKey; i++) kKey[i] = (uint8_t)(i + 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_parse((const char *)data, size);
  fuzz_signed(data, size);
  return 0;
}
