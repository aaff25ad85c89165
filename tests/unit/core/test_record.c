/*
 * test_record.c — record.h: free / copy / equal of the composite values, and the
 * canonical encodings: round trips (intents with direct and group audiences, records,
 * envelopes, dispatches with several chunks, mailbox entries), determinism, a byte-exact
 * layout check, and rejection of every truncation, trailing garbage and malformed field.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"
#include "testsupport.h"

/* ---- sample values ------------------------------------------------------------------- */

static qim_bytes bytes_of(const char *s) {
  qim_bytes b = {NULL, strlen(s)};
  b.p = qim_memdup(s, b.n);
  return b;
}

static void fill_id(uint8_t b[16], uint8_t seed) {
  for (int i = 0; i < 16; i++) b[i] = (uint8_t)(seed + i * 3);
}

static qim_message_coordinates sample_coords(void) {
  qim_message_coordinates c;
  fill_id(c.message_id.b, 0x10);
  c.conversation_id.v = (qim_u128){0x1111, 0x2222};
  c.conversation_seq = 42;
  fill_id(c.last_activity_id.b, 0x20);
  return c;
}

static qim_message_content sample_content(void) {
  qim_message_content c = {0};
  c.message_type = QIM_MESSAGE_TYPE_CUSTOM;
  c.custom_type = qim_strdup("app.poll");
  c.schema_version = 3;
  c.payload_or_ciphertext = bytes_of("{\"q\":\"lunch?\"}");
  c.has_media_metadata = true;
  c.media_metadata = bytes_of("\x01\x02media");
  return c;
}

static qim_message_record sample_record(void) {
  qim_message_record r = {0};
  r.coordinates = sample_coords();
  r.sender = (qim_authenticated_actor){{{0, 1}}, {{0, 77}}, {{5, 6}}};
  fill_id(r.client_message_id.b, 0x30);
  r.content = sample_content();
  r.retention_class = QIM_RETENTION_CLASS_COMPLIANCE_HOLD;
  r.state = QIM_MESSAGE_STATE_EDITED;
  r.created_at = 1700000000123;
  return r;
}

static qim_commit_intent sample_intent(int group) {
  qim_commit_intent in = {0};
  in.key.tenant_id.v = (qim_u128){0, 1};
  in.key.sender_id.v = (qim_u128){0, 77};
  fill_id(in.key.client_message_id.b, 0x30);
  in.coordinates = sample_coords();
  in.state = QIM_COMMIT_STATE_OUTBOXED;
  if (group) {
    in.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    in.delivery.audience.group.group_id.v = (qim_u128){0, 0x2222};
    in.delivery.audience.group.membership_version = 9;
    in.delivery.audience.group.member_count = 5000;
    in.delivery.audience.group.target_shard_count = 3;
    in.delivery.audience.group.target_shards = qim_malloc(3 * sizeof(qim_mailbox_shard_id));
    in.delivery.audience.group.target_shards[0] = 0;
    in.delivery.audience.group.target_shards[1] = 17;
    in.delivery.audience.group.target_shards[2] = 0xFFFFFFFFu;
  } else {
    in.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    in.delivery.audience.direct.recipient_count = 2;
    in.delivery.audience.direct.recipients = qim_malloc(2 * sizeof(qim_user_id));
    in.delivery.audience.direct.recipients[0].v = (qim_u128){0, 77};
    in.delivery.audience.direct.recipients[1].v = (qim_u128){UINT64_MAX, 78};
  }
  in.delivery.inline_body = true;
  in.delivery.created_at = 1700000000123;
  in.record = sample_record();
  fill_id(in.trace_id.b, 0x40);
  return in;
}

static qim_group_dispatch sample_dispatch(void) {
  static const size_t sizes[] = {2, 0, 3};
  qim_group_dispatch d = {0};
  d.source_message = sample_coords();
  d.target_shard = 17;
  d.dispatch_id = qim_dispatch_id_make(&d.source_message.message_id, d.target_shard);
  d.tenant_id.v = (qim_u128){0, 1};
  d.sender_id.v = (qim_u128){5, 6};
  fill_id(d.client_message_id.b, 0x30);
  d.membership_version = 9;
  d.chunk_count = 3;
  d.recipient_chunks = qim_calloc(3, sizeof *d.recipient_chunks);
  for (size_t i = 0; i < 3; i++) {
    qim_recipient_chunk *c = &d.recipient_chunks[i];
    c->chunk_id = (uint32_t)i;
    c->recipient_count = sizes[i];
    c->recipient_ids = sizes[i] ? qim_malloc(sizes[i] * sizeof(qim_user_id)) : NULL;
    for (size_t j = 0; j < sizes[i]; j++) c->recipient_ids[j].v = (qim_u128){i, 100 + j};
  }
  d.content = sample_content();
  d.inline_body = true;
  d.created_at = 1700000000123;
  fill_id(d.trace_id.b, 0x40);
  return d;
}

static qim_mailbox_entry sample_entry(int with_body) {
  qim_mailbox_entry e = {0};
  e.tenant_id.v = (qim_u128){0, 1};
  e.user_id.v = (qim_u128){0, 100};
  e.mailbox_seq = qim_mailbox_seq_make(2, 1234);
  e.event_ordinal = 1;
  e.event_id = qim_event_id_make(e.mailbox_seq, e.event_ordinal);
  e.event_type = with_body ? QIM_EVENT_TYPE_MESSAGE : QIM_EVENT_TYPE_MENTION;
  e.coordinates = sample_coords();
  e.sender_id.v = (qim_u128){0, 77};
  e.has_client_message_id = with_body;
  if (with_body) fill_id(e.client_message_id.b, 0x30);
  e.has_content = with_body;
  if (with_body) e.content = sample_content();
  e.body_included = with_body;
  e.created_at = 1700000000123;
  return e;
}

/* ---- generic codec checks ---------------------------------------------------------------- */

/* One type's codec, seen through void pointers so every check below runs on each type. */
typedef struct codec {
  size_t size;
  int (*encode)(const void *v, qim_bytes *out);
  int (*decode)(const uint8_t *p, size_t n, void *dst);
  int (*equal)(const void *a, const void *b);
  void (*free)(void *v);
} codec;

/* Wrappers with void-pointer signatures (calling through a cast function pointer would
 * be undefined behaviour). */
#define CODEC(name, T, prefix)                                                                          \
  static int name##_enc(const void *v, qim_bytes *out) { return prefix##_encode(v, out); }              \
  static int name##_dec(const uint8_t *p, size_t n, void *dst) { return prefix##_decode(p, n, dst); }   \
  static int name##_eq(const void *a, const void *b) { return prefix##_equal(a, b); }                   \
  static void name##_free(void *v) { prefix##_free(v); }                                                \
  static const codec *name##_codec(void) {                                                              \
    static const codec c = {sizeof(T), name##_enc, name##_dec, name##_eq, name##_free};                 \
    return &c;                                                                                          \
  }

CODEC(record, qim_message_record, qim_message_record)
CODEC(intent, qim_commit_intent, qim_commit_intent)
CODEC(envelope, qim_committed_envelope, qim_committed_envelope)
CODEC(dispatch, qim_group_dispatch, qim_group_dispatch)
CODEC(entry, qim_mailbox_entry, qim_mailbox_entry)

/* Encode → decode → equal, and re-encoding gives the same bytes. */
static qim_bytes check_round_trip(const codec *c, const void *value) {
  qim_bytes enc = {0}, again = {0};
  assert_int_equal(c->encode(value, &enc), 0);
  void *back = calloc(1, c->size);
  assert_int_equal(c->decode(enc.p, enc.n, back), 0);
  assert_true(c->equal(value, back));
  assert_int_equal(c->encode(back, &again), 0);
  assert_true(qim_bytes_equal(&enc, &again));
  c->free(back);
  free(back);
  qim_bytes_free(&again);
  return enc;
}

/* Every proper prefix and every one-byte extension is rejected, leaving dst zeroed and
 * nothing allocated. */
static void check_truncation_and_trailing(const codec *c, const qim_bytes *enc) {
  void *dst = malloc(c->size);
  void *zero = calloc(1, c->size);
  size_t base = qim_mem_used();
  for (size_t len = 0; len < enc->n; len++) {
    uint8_t *copy = malloc(len ? len : 1); /* exact-size buffer: ASan catches overreads */
    memcpy(copy, enc->p, len);
    memset(dst, 0x5A, c->size);
    assert_int_equal(c->decode(copy, len, dst), -EINVAL);
    assert_memory_equal(dst, zero, c->size);
    free(copy);
  }
  uint8_t *longer = malloc(enc->n + 1);
  memcpy(longer, enc->p, enc->n);
  for (int b = 0; b < 256; b += 85) {
    longer[enc->n] = (uint8_t)b;
    assert_int_equal(c->decode(longer, enc->n + 1, dst), -EINVAL);
  }
  assert_int_equal(qim_mem_used(), base);
  free(longer);
  free(dst);
  free(zero);
}

static void check_codec(const codec *c, void *value) {
  qim_bytes enc = check_round_trip(c, value);
  check_truncation_and_trailing(c, &enc);
  /* A different header (version or tag) is rejected. */
  void *dst = calloc(1, c->size);
  for (int pos = 0; pos < 2; pos++) {
    enc.p[pos] ^= 0x40;
    assert_int_equal(c->decode(enc.p, enc.n, dst), -EINVAL);
    enc.p[pos] ^= 0x40;
  }
  assert_int_equal(c->decode(NULL, 0, dst), -EINVAL);
  free(dst);
  qim_bytes_free(&enc);
  c->free(value);
}

/* ---- codec tests ------------------------------------------------------------------------ */

static void test_record_codec(void **state) {
  (void)state;
  qim_message_record r = sample_record();
  check_codec(record_codec(), &r);
  qim_message_record plain = sample_record();
  qim_free(plain.content.custom_type);
  plain.content.custom_type = NULL;
  plain.content.has_media_metadata = false;
  qim_bytes_free(&plain.content.media_metadata);
  qim_bytes_free(&plain.content.payload_or_ciphertext);
  check_codec(record_codec(), &plain);
}

static void test_intent_codec_direct_audience(void **state) {
  (void)state;
  qim_commit_intent in = sample_intent(0);
  check_codec(intent_codec(), &in);
}

static void test_intent_codec_group_audience(void **state) {
  (void)state;
  qim_commit_intent in = sample_intent(1);
  check_codec(intent_codec(), &in);
  qim_commit_intent empty = sample_intent(1);
  qim_free(empty.delivery.audience.group.target_shards);
  empty.delivery.audience.group.target_shards = NULL;
  empty.delivery.audience.group.target_shard_count = 0;
  check_codec(intent_codec(), &empty);
}

static void test_envelope_codec(void **state) {
  (void)state;
  qim_committed_envelope e = {sample_intent(1), sample_record()};
  check_codec(envelope_codec(), &e);
}

/* Version 2 holds the record once, as the intent's: the envelope's bytes are the intent's
 * after the header, and an envelope whose record differs cannot be encoded. */
static void test_envelope_codec_carries_its_record_once(void **state) {
  (void)state;
  qim_committed_envelope e = {sample_intent(1), sample_record()};
  qim_bytes env = {0}, in = {0}, untouched = {0};
  assert_int_equal(qim_committed_envelope_encode(&e, &env), 0);
  assert_int_equal(qim_commit_intent_encode(&e.intent, &in), 0);
  assert_int_equal(env.n, in.n);
  assert_memory_equal(env.p + 2, in.p + 2, in.n - 2);
  e.record.content.payload_or_ciphertext.p[0] ^= 1;
  assert_int_equal(qim_committed_envelope_encode(&e, &untouched), -EINVAL);
  assert_null(untouched.p);
  qim_bytes_free(&env);
  qim_bytes_free(&in);
  qim_committed_envelope_free(&e);
}

/* Outbox records written before version 2 (intent, then the record again) still decode. */
static void test_envelope_version_1_still_decodes(void **state) {
  (void)state;
  qim_committed_envelope e = {sample_intent(0), sample_record()}, back;
  qim_bytes in = {0}, rec = {0};
  assert_int_equal(qim_commit_intent_encode(&e.intent, &in), 0);
  assert_int_equal(qim_message_record_encode(&e.record, &rec), 0);
  size_t n = in.n + rec.n - 2;
  uint8_t *v1 = malloc(n);
  v1[0] = 1, v1[1] = 'E';
  memcpy(v1 + 2, in.p + 2, in.n - 2);
  memcpy(v1 + in.n, rec.p + 2, rec.n - 2);
  assert_int_equal(qim_committed_envelope_decode(v1, n, &back), 0);
  assert_true(qim_committed_envelope_equal(&e, &back));
  qim_committed_envelope_free(&back);
  assert_int_equal(qim_committed_envelope_decode(v1, n - 1, &back), -EINVAL);
  v1[n - 1] ^= 1; /* the second copy's created_at only: not an envelope this codec writes */
  assert_int_equal(qim_committed_envelope_decode(v1, n, &back), -EINVAL);
  free(v1);
  qim_bytes_free(&in);
  qim_bytes_free(&rec);
  qim_committed_envelope_free(&e);
}

static void test_dispatch_codec_with_several_chunks(void **state) {
  (void)state;
  qim_group_dispatch d = sample_dispatch();
  check_codec(dispatch_codec(), &d);
}

static void test_mailbox_entry_codec(void **state) {
  (void)state;
  qim_mailbox_entry with = sample_entry(1), without = sample_entry(0);
  check_codec(entry_codec(), &with);
  check_codec(entry_codec(), &without);
}

/* A byte-exact encoding, built independently here, pins the version-1 layout. */
static uint8_t *put(uint8_t *p, uint64_t v, int width) {
  for (int i = width - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
  return p + width;
}

static void test_record_layout_is_pinned(void **state) {
  (void)state;
  qim_message_record r = sample_record();
  uint8_t want[256], *p = want;
  p = put(p, 1, 1), p = put(p, 'R', 1);
  memcpy(p, r.coordinates.message_id.b, 16), p += 16;
  p = put(p, 0x1111, 8), p = put(p, 0x2222, 8), p = put(p, 42, 8);
  memcpy(p, r.coordinates.last_activity_id.b, 16), p += 16;
  p = put(p, 0, 8), p = put(p, 1, 8), p = put(p, 0, 8), p = put(p, 77, 8), p = put(p, 5, 8), p = put(p, 6, 8);
  memcpy(p, r.client_message_id.b, 16), p += 16;
  p = put(p, QIM_MESSAGE_TYPE_CUSTOM, 1), p = put(p, 1, 1), p = put(p, 8, 4);
  memcpy(p, "app.poll", 8), p += 8;
  p = put(p, 3, 4), p = put(p, 14, 4);
  memcpy(p, "{\"q\":\"lunch?\"}", 14), p += 14;
  p = put(p, 1, 1), p = put(p, 7, 4);
  memcpy(p, "\x01\x02media", 7), p += 7;
  p = put(p, QIM_RETENTION_CLASS_COMPLIANCE_HOLD, 1), p = put(p, QIM_MESSAGE_STATE_EDITED, 1);
  p = put(p, 1700000000123, 8);
  qim_bytes enc;
  assert_int_equal(qim_message_record_encode(&r, &enc), 0);
  assert_int_equal(enc.n, (size_t)(p - want));
  assert_memory_equal(enc.p, want, enc.n);
  qim_bytes_free(&enc);
  qim_message_record_free(&r);
}

/* A dispatch is written at version 2 with the sender after the coordinates; a version-1
 * encoding (the same bytes without those 48) still decodes, with the sender fields zero. */
static void test_dispatch_version_2_layout_and_version_1_decoding(void **state) {
  (void)state;
  qim_group_dispatch d = sample_dispatch(), back;
  qim_bytes enc;
  assert_int_equal(qim_group_dispatch_encode(&d, &enc), 0);
  uint8_t want[2 + 16 + 56 + 48], *p = want;
  p = put(p, 2, 1), p = put(p, 'D', 1);
  memcpy(p, d.dispatch_id.b, 16), p += 16;
  memcpy(p, d.source_message.message_id.b, 16), p += 16;
  p = put(p, 0x1111, 8), p = put(p, 0x2222, 8), p = put(p, 42, 8);
  memcpy(p, d.source_message.last_activity_id.b, 16), p += 16;
  p = put(p, 0, 8), p = put(p, 1, 8), p = put(p, 5, 8), p = put(p, 6, 8);
  memcpy(p, d.client_message_id.b, 16), p += 16;
  assert_true(enc.n > sizeof want);
  assert_memory_equal(enc.p, want, sizeof want);

  /* Version 1: drop the 48 sender bytes and change the version byte. */
  size_t sender_at = 2 + 16 + 56, v1n = enc.n - 48;
  uint8_t *v1 = malloc(v1n);
  memcpy(v1, enc.p, sender_at);
  memcpy(v1 + sender_at, enc.p + sender_at + 48, enc.n - sender_at - 48);
  v1[0] = 1;
  assert_int_equal(qim_group_dispatch_decode(v1, v1n, &back), 0);
  assert_true(qim_u128_is_zero(back.tenant_id.v) && qim_u128_is_zero(back.sender_id.v));
  qim_client_message_id zero = {{0}};
  assert_memory_equal(back.client_message_id.b, zero.b, 16);
  back.tenant_id = d.tenant_id, back.sender_id = d.sender_id, back.client_message_id = d.client_message_id;
  assert_true(qim_group_dispatch_equal(&d, &back));
  qim_group_dispatch_free(&back);
  /* Version 3 is unknown. */
  v1[0] = 3;
  assert_int_equal(qim_group_dispatch_decode(v1, v1n, &back), -EINVAL);
  free(v1);
  qim_bytes_free(&enc);
  qim_group_dispatch_free(&d);
}

/* Offset of the content inside an encoded record: header, coordinates, actor, cmid. */
#define RECORD_CONTENT_AT (2 + 56 + 48 + 16)

static void test_decode_rejects_malformed_fields(void **state) {
  (void)state;
  qim_message_record r = sample_record(), out;
  qim_bytes enc;
  assert_int_equal(qim_message_record_encode(&r, &enc), 0);
  size_t base = qim_mem_used();
  struct { size_t at; uint8_t value; } cases[] = {
      {RECORD_CONTENT_AT, 4},         /* message type out of range */
      {RECORD_CONTENT_AT + 1, 2},     /* bool that is neither 0 nor 1 */
      {RECORD_CONTENT_AT + 2, 0x80},  /* custom_type length far past the end */
      {RECORD_CONTENT_AT + 9, 0},     /* NUL inside custom_type "app.poll" */
      {enc.n - 10, 4},                /* retention class out of range */
      {enc.n - 9, 4},                 /* state out of range */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t saved = enc.p[cases[i].at];
    enc.p[cases[i].at] = cases[i].value;
    assert_int_equal(qim_message_record_decode(enc.p, enc.n, &out), -EINVAL);
    enc.p[cases[i].at] = saved;
  }
  assert_int_equal(qim_mem_used(), base);
  assert_int_equal(qim_message_record_decode(enc.p, enc.n, &out), 0);
  qim_message_record_free(&out);
  /* One type's bytes are not another's. */
  qim_commit_intent in;
  assert_int_equal(qim_commit_intent_decode(enc.p, enc.n, &in), -EINVAL);
  qim_bytes_free(&enc);
  qim_message_record_free(&r);
}

static void test_huge_counts_fail_without_allocating(void **state) {
  (void)state;
  qim_commit_intent in = sample_intent(0);
  qim_bytes enc;
  assert_int_equal(qim_commit_intent_encode(&in, &enc), 0);
  /* The direct recipient count sits after header, key (48), coordinates (56), state, kind. */
  size_t at = 2 + 48 + 56 + 1 + 1;
  assert_int_equal(enc.p[at + 3], 2);
  memset(enc.p + at, 0xFF, 4);
  size_t base = qim_mem_used();
  qim_commit_intent out;
  assert_int_equal(qim_commit_intent_decode(enc.p, enc.n, &out), -EINVAL);
  assert_int_equal(qim_mem_used(), base);
  qim_bytes_free(&enc);
  qim_commit_intent_free(&in);
}

static void test_entry_event_id_must_match_seq_and_ordinal(void **state) {
  (void)state;
  qim_mailbox_entry e = sample_entry(1), out;
  qim_bytes enc = {0};
  e.event_id++;
  assert_int_equal(qim_mailbox_entry_encode(&e, &enc), -EINVAL);
  assert_null(enc.p);
  e.event_id--;
  assert_int_equal(qim_mailbox_entry_encode(&e, &enc), 0);
  /* event_id is the u64 after header, tenant, user, seq and ordinal. */
  enc.p[2 + 16 + 16 + 8 + 1 + 7] ^= 1;
  assert_int_equal(qim_mailbox_entry_decode(enc.p, enc.n, &out), -EINVAL);
  qim_bytes_free(&enc);
  qim_mailbox_entry_free(&e);
}

static void test_encode_rejects_enum_out_of_range(void **state) {
  (void)state;
  qim_message_record r = sample_record();
  qim_bytes enc = {0};
  r.state = (qim_message_state)7;
  assert_int_equal(qim_message_record_encode(&r, &enc), -EINVAL);
  assert_null(enc.p);
  qim_message_record_free(&r);
}

/* ---- free / copy / equal ---------------------------------------------------------------- */

static void test_copies_are_deep_and_equal(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  qim_commit_intent in = sample_intent(0), in2;
  qim_commit_intent_copy(&in2, &in);
  assert_true(qim_commit_intent_equal(&in, &in2));
  assert_ptr_not_equal(in.record.content.custom_type, in2.record.content.custom_type);
  in2.delivery.audience.direct.recipients[1].v.lo++;
  assert_false(qim_commit_intent_equal(&in, &in2));
  qim_commit_intent_free(&in2);

  qim_group_dispatch d = sample_dispatch(), d2;
  qim_group_dispatch_copy(&d2, &d);
  assert_true(qim_group_dispatch_equal(&d, &d2));
  d2.recipient_chunks[2].recipient_ids[0].v.hi++;
  assert_false(qim_group_dispatch_equal(&d, &d2));
  qim_group_dispatch_free(&d2);
  /* The sender fields of version 2 take part in equality. */
  for (int field = 0; field < 3; field++) {
    qim_group_dispatch_copy(&d2, &d);
    if (field == 0) d2.tenant_id.v.lo++;
    if (field == 1) d2.sender_id.v.hi++;
    if (field == 2) d2.client_message_id.b[15] ^= 1;
    assert_false(qim_group_dispatch_equal(&d, &d2));
    qim_group_dispatch_free(&d2);
  }

  qim_mailbox_entry e = sample_entry(1), e2;
  qim_mailbox_entry_copy(&e2, &e);
  assert_true(qim_mailbox_entry_equal(&e, &e2));
  e2.content.payload_or_ciphertext.p[0] ^= 1;
  assert_false(qim_mailbox_entry_equal(&e, &e2));
  qim_mailbox_entry_free(&e2);

  qim_committed_envelope env = {sample_intent(1), sample_record()}, env2;
  qim_committed_envelope_copy(&env2, &env);
  assert_true(qim_committed_envelope_equal(&env, &env2));
  env2.record.created_at++;
  assert_false(qim_committed_envelope_equal(&env, &env2));
  qim_committed_envelope_free(&env2);
  qim_committed_envelope_free(&env);

  qim_commit_intent_free(&in);
  qim_group_dispatch_free(&d);
  qim_mailbox_entry_free(&e);
  assert_int_equal(qim_mem_used(), base);
}

static void test_equal_notices_each_kind_of_difference(void **state) {
  (void)state;
  qim_message_record a = sample_record(), b;
  qim_message_record_copy(&b, &a);
  b.coordinates.conversation_seq++;
  assert_false(qim_message_record_equal(&a, &b));
  b.coordinates.conversation_seq--;
  b.sender.device_id.v.lo++;
  assert_false(qim_message_record_equal(&a, &b));
  b.sender.device_id.v.lo--;
  b.client_message_id.b[15] ^= 1;
  assert_false(qim_message_record_equal(&a, &b));
  b.client_message_id.b[15] ^= 1;
  b.content.custom_type[0] = 'b';
  assert_false(qim_message_record_equal(&a, &b));
  b.content.custom_type[0] = 'a';
  b.content.media_metadata.n--;
  assert_false(qim_message_record_equal(&a, &b));
  /* Absent media: the stale bytes no longer matter. */
  a.content.has_media_metadata = b.content.has_media_metadata = false;
  assert_true(qim_message_record_equal(&a, &b));
  qim_free(b.content.custom_type);
  b.content.custom_type = NULL;
  assert_false(qim_message_record_equal(&a, &b));
  b.content.media_metadata.n++;
  qim_message_record_free(&a);
  qim_message_record_free(&b);

  qim_commit_intent d = sample_intent(0), g = sample_intent(1);
  assert_false(qim_delivery_audience_equal(&d.delivery.audience, &g.delivery.audience));
  qim_commit_intent g2;
  qim_commit_intent_copy(&g2, &g);
  g2.delivery.audience.group.target_shards[1]++;
  assert_false(qim_commit_intent_equal(&g, &g2));
  qim_commit_intent_free(&g2);
  qim_commit_intent_free(&d);
  qim_commit_intent_free(&g);
}

static void test_free_accepts_zeroed_and_repeated(void **state) {
  (void)state;
  size_t base = qim_mem_used();
  qim_commit_intent in = {0};
  qim_commit_intent_free(&in);
  qim_group_dispatch d = sample_dispatch();
  qim_group_dispatch_free(&d);
  qim_group_dispatch_free(&d);
  qim_history_page hp = {0};
  hp.record_count = 2;
  hp.records = qim_calloc(2, sizeof *hp.records);
  hp.records[0] = sample_record();
  hp.records[1] = sample_record();
  qim_history_page_free(&hp);
  qim_mailbox_page mp = {0};
  mp.entry_count = 1;
  mp.entries = qim_calloc(1, sizeof *mp.entries);
  mp.entries[0] = sample_entry(1);
  qim_mailbox_page_free(&mp);
  qim_member_page mem = {0};
  mem.member_count = 1;
  mem.members = qim_calloc(1, sizeof *mem.members);
  mem.has_next_cursor = true;
  mem.next_cursor.bytes = bytes_of("cursor");
  qim_member_page_free(&mem);
  qim_session_page sp = {0};
  sp.session_count = 1;
  sp.sessions = qim_calloc(1, sizeof *sp.sessions);
  sp.next_cursor.bytes = bytes_of("c");
  qim_session_page_free(&sp);
  qim_session_page_free(&sp);
  assert_null(sp.sessions);
  assert_int_equal(qim_mem_used(), base);
}

static void test_bytes_helpers(void **state) {
  (void)state;
  qim_bytes a = bytes_of("abc"), b, empty = {0}, empty2;
  qim_bytes_copy(&b, &a);
  assert_true(qim_bytes_equal(&a, &b));
  assert_ptr_not_equal(a.p, b.p);
  b.p[2] = 'd';
  assert_false(qim_bytes_equal(&a, &b));
  qim_bytes_copy(&empty2, &empty);
  assert_null(empty2.p);
  assert_true(qim_bytes_equal(&empty, &empty2));
  assert_false(qim_bytes_equal(&a, &empty));
  qim_bytes_free(&a);
  qim_bytes_free(&b);
  assert_null(a.p);
  assert_int_equal(a.n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_record_codec),
      cmocka_unit_test(test_intent_codec_direct_audience),
      cmocka_unit_test(test_intent_codec_group_audience),
      cmocka_unit_test(test_envelope_codec),
      cmocka_unit_test(test_envelope_codec_carries_its_record_once),
      cmocka_unit_test(test_envelope_version_1_still_decodes),
      cmocka_unit_test(test_dispatch_codec_with_several_chunks),
      cmocka_unit_test(test_dispatch_version_2_layout_and_version_1_decoding),
      cmocka_unit_test(test_mailbox_entry_codec),
      cmocka_unit_test(test_record_layout_is_pinned),
      cmocka_unit_test(test_decode_rejects_malformed_fields),
      cmocka_unit_test(test_huge_counts_fail_without_allocating),
      cmocka_unit_test(test_entry_event_id_must_match_seq_and_ordinal),
      cmocka_unit_test(test_encode_rejects_enum_out_of_range),
      cmocka_unit_test(test_copies_are_deep_and_equal),
      cmocka_unit_test(test_equal_notices_each_kind_of_difference),
      cmocka_unit_test(test_free_accepts_zeroed_and_repeated),
      cmocka_unit_test(test_bytes_helpers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
