/*
 * gen_record_corpus.c — writes the seeds of tests/fuzz/corpus/record/: canonical encodings
 * (record.h) of realistic values of every encoded type — direct and group intents, a
 * committed envelope, group dispatches with several chunks, mailbox entries with and without
 * their optionals — plus a few near misses (truncated, wrong tag, wrong version, a bool that
 * is 2, an entry whose event id does not match its seq). Run once; the outputs are checked
 * in and nothing in the test suite runs this:
 *   cmake --build build --target fuzz_gen_record_corpus
 *   build/tests/fuzz/fuzz_gen_record_corpus tests/fuzz/corpus/record
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"

static const char *dir;

static void put(const char *name, const uint8_t *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void put_bytes(const char *name, qim_bytes *b, int rc) {
  if (rc != 0) {
    fprintf(stderr, "%s: encode failed (%d)\n", name, rc);
    exit(1);
  }
  put(name, b->p, b->n);
}

static void id16(uint8_t b[16], uint8_t seed) {
  for (int i = 0; i < 16; i++) b[i] = (uint8_t)(seed * 17 + i);
}

static qim_u128 u128(uint64_t hi, uint64_t lo) {
  return (qim_u128){hi, lo};
}

static qim_message_content content(int kind) {
  qim_message_content c = {.message_type = QIM_MESSAGE_TYPE_TEXT, .schema_version = 1};
  const char *txt =
      kind == 0 ? "{\"txt\":\"hello\"}" : "{\"txt\":\"report\",\"fmt\":[{\"tp\":\"ST\"}]}";
  c.payload_or_ciphertext.n = strlen(txt);
  c.payload_or_ciphertext.p = qim_memdup(txt, c.payload_or_ciphertext.n);
  if (kind == 1) {
    c.message_type = QIM_MESSAGE_TYPE_CUSTOM;
    c.custom_type = qim_strdup("x-poll");
  } else if (kind == 2) {
    c.message_type = QIM_MESSAGE_TYPE_MEDIA;
    c.has_media_metadata = true;
    c.media_metadata.n = 5;
    c.media_metadata.p = qim_memdup("\x01\x02\x03\x04\x05", 5);
  }
  return c;
}

static qim_message_coordinates coords(uint64_t seq) {
  qim_message_coordinates c = {.conversation_id = {u128(7, 42)}, .conversation_seq = seq};
  id16(c.message_id.b, (uint8_t)seq);
  id16(c.last_activity_id.b, (uint8_t)(seq + 100));
  return c;
}

static qim_message_record record(uint64_t seq, int kind) {
  qim_message_record r = {.coordinates = coords(seq),
                          .sender = {{u128(0, 1)}, {u128(0, 1001)}, {u128(0, 5)}},
                          .content = content(kind),
                          .retention_class = (qim_retention_class)(kind % 4),
                          .state = (qim_message_state)(seq % 4),
                          .created_at = 1700000000000ull + seq};
  id16(r.client_message_id.b, (uint8_t)(seq + 50));
  return r;
}

static qim_commit_intent intent(uint64_t seq, int group) {
  qim_commit_intent in = {.key = {{u128(0, 1)}, {u128(0, 1001)}},
                          .coordinates = coords(seq),
                          .state = (qim_commit_state)(seq % 4),
                          .record = record(seq, group ? 1 : 0)};
  id16(in.key.client_message_id.b, (uint8_t)(seq + 50));
  id16(in.trace_id.b, 0xee);
  qim_delivery_audience *a = &in.delivery.audience;
  if (group) {
    a->kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    a->group.group_id.v = u128(7, 42);
    a->group.membership_version = 12;
    a->group.member_count = 1000;
    a->group.target_shard_count = 3;
    a->group.target_shards = qim_malloc(3 * sizeof(qim_mailbox_shard_id));
    a->group.target_shards[0] = 0, a->group.target_shards[1] = 5, a->group.target_shards[2] = 63;
  } else {
    a->kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    a->direct.recipient_count = 2;
    a->direct.recipients = qim_malloc(2 * sizeof(qim_user_id));
    a->direct.recipients[0].v = u128(0, 1001);
    a->direct.recipients[1].v = u128(0, 1002);
  }
  in.delivery.inline_body = !group;
  in.delivery.created_at = 1700000000000ull + seq;
  return in;
}

static qim_group_dispatch dispatch(int chunks) {
  qim_group_dispatch d = {.source_message = coords(9),
                          .target_shard = 5,
                          .membership_version = 12,
                          .content = content(chunks % 3),
                          .inline_body = chunks % 2,
                          .created_at = 1700000000123ull};
  id16(d.dispatch_id.b, 0xd1);
  id16(d.trace_id.b, 0xee);
  d.chunk_count = (size_t)chunks;
  d.recipient_chunks = chunks ? qim_calloc((size_t)chunks, sizeof *d.recipient_chunks) : NULL;
  for (int i = 0; i < chunks; i++) {
    qim_recipient_chunk *c = &d.recipient_chunks[i];
    c->chunk_id = (uint32_t)i;
    c->recipient_count = (size_t)(i + 1);
    c->recipient_ids = qim_malloc(c->recipient_count * sizeof(qim_user_id));
    for (size_t j = 0; j < c->recipient_count; j++)
      c->recipient_ids[j].v = u128(0, 2000 + 10 * i + j);
  }
  return d;
}

static qim_mailbox_entry entry(int variant) {
  qim_mailbox_entry e = {.tenant_id = {u128(0, 1)},
                         .user_id = {u128(0, 1002)},
                         .mailbox_seq = qim_mailbox_seq_make(3, 77 + (uint64_t)variant),
                         .event_ordinal = (uint8_t)variant,
                         .event_type = (qim_event_type)(variant % 4),
                         .coordinates = coords(9),
                         .sender_id = {u128(0, 1001)},
                         .created_at = 1700000000456ull};
  e.event_id = qim_event_id_make(e.mailbox_seq, e.event_ordinal);
  if (variant != 2) {
    e.has_client_message_id = true;
    id16(e.client_message_id.b, 59);
  }
  if (variant != 1) {
    e.has_content = true;
    e.content = content(variant);
    e.body_included = variant == 0;
  }
  return e;
}

static void near_misses(const qim_bytes *entry_bytes) {
  qim_bytes b;
  qim_bytes_copy(&b, entry_bytes);
  put("miss_truncated_entry.bin", b.p, b.n - 1);
  b.p[0] = 2;
  put("miss_version2_entry.bin", b.p, b.n);
  b.p[0] = 1, b.p[1] = 'R';
  put("miss_wrong_tag_entry.bin", b.p, b.n);
  b.p[1] = 'M';
  b.p[2 + 16 + 16 + 8 + 1 + 7] ^= 1; /* the low byte of event_id */
  put("miss_event_id_entry.bin", b.p, b.n);
  qim_bytes_free(&b);
  static const uint8_t empty_dispatch_bad_bool[] = {1, 'D', 2};
  put("miss_short_dispatch.bin", empty_dispatch_bad_bool, sizeof empty_dispatch_bad_bool);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  qim_bytes b;
  for (int k = 0; k < 3; k++) {
    char name[64];
    qim_message_record r = record(3 + (uint64_t)k, k);
    snprintf(name, sizeof name, "record_%d.bin", k);
    put_bytes(name, &b, qim_message_record_encode(&r, &b));
    qim_bytes_free(&b);
    qim_message_record_free(&r);
  }
  for (int g = 0; g < 2; g++) {
    qim_commit_intent in = intent(4 + (uint64_t)g, g);
    put_bytes(g ? "intent_group.bin" : "intent_direct.bin", &b, qim_commit_intent_encode(&in, &b));
    qim_bytes_free(&b);
    qim_committed_envelope env = {0};
    qim_commit_intent_copy(&env.intent, &in);
    qim_message_record_copy(&env.record, &in.record);
    put_bytes(g ? "envelope_group.bin" : "envelope_direct.bin", &b,
              qim_committed_envelope_encode(&env, &b));
    qim_bytes_free(&b);
    qim_committed_envelope_free(&env);
    qim_commit_intent_free(&in);
  }
  for (int c = 0; c <= 3; c++) {
    char name[64];
    qim_group_dispatch d = dispatch(c);
    snprintf(name, sizeof name, "dispatch_%d_chunks.bin", c);
    put_bytes(name, &b, qim_group_dispatch_encode(&d, &b));
    qim_bytes_free(&b);
    qim_group_dispatch_free(&d);
  }
  qim_bytes first = {0};
  for (int v = 0; v < 3; v++) {
    char name[64];
    qim_mailbox_entry e = entry(v);
    snprintf(name, sizeof name, "entry_%d.bin", v);
    put_bytes(name, &b, qim_mailbox_entry_encode(&e, &b));
    if (v == 0)
      first = b;
    else
      qim_bytes_free(&b);
    qim_mailbox_entry_free(&e);
  }
  near_misses(&first);
  qim_bytes_free(&first);
  return 0;
}
