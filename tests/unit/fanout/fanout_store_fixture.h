/*
 * fanout_store_fixture.h — a real SQLite store for the fanout tests: groups made through
 * the store's membership calls, outbox records appended by hand with an audience frozen
 * the way reserve freezes it, and whole dispatch logs read back. Header-only.
 */
#ifndef QIM_FANOUT_STORE_FIXTURE_H
#define QIM_FANOUT_STORE_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "fanout_fixture.h"
#include "qim/shard.h"
#include "store/store.h"

#define FX_FN static __attribute__((unused))
static const qim_shard_config FX_SHARDS = {4, 2};

FX_FN qim_store *fx_open(const char *dir, const char *name) {
  char url[512];
  snprintf(url, sizeof url, "sqlite:%s/%s.db", dir, name);
  qim_store_options opt = {.shards = FX_SHARDS};
  qim_store *s = NULL;
  assert_int_equal(qim_store_open(url, &opt, &s), 0);
  return s;
}

/* Applies one op to users first..first+n-1; returns the new version. */
FX_FN qim_membership_version fx_change(qim_store *s, qim_conversation_id conv, qim_store_member_op op,
                                       uint64_t first, size_t n) {
  qim_store_member_change *ch = qim_calloc(n, sizeof *ch);
  for (size_t i = 0; i < n; i++)
    ch[i] = (qim_store_member_change){op, fx_user(first + i), QIM_GROUP_ROLE_MEMBER, 0x2F, 0x2F};
  qim_store_members_change_req r = {.tenant_id = FX_TENANT, .conversation_id = conv, .changes = ch,
                                    .change_count = n, .member_limit = 100000, .now = 1};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.members_change, &r), 0);
  qim_free(ch);
  return r.out_version;
}

/* A group owned by fx_user(first) with members fx_user(first .. first+n-1). */
FX_FN qim_membership_version fx_make_group(qim_store *s, qim_conversation_id conv, uint64_t first, size_t n) {
  qim_store_conv_create_req c = {.now = 1};
  c.conv = (qim_store_conversation){.tenant_id = FX_TENANT, .conversation_id = conv, .kind = QIM_CONVERSATION_GROUP,
                                    .owner_id = fx_user(first), .default_mode_auth = 0x2F};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.create, &c), 0);
  return n > 1 ? fx_change(s, conv, QIM_STORE_MEMBER_ADD, first + 1, n - 1) : 1;
}

FX_FN qim_membership_version fx_version(qim_store *s, qim_conversation_id conv) {
  qim_store_conv_get_req r = {.tenant_id = FX_TENANT, .conversation_id = conv};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.get, &r), 0);
  qim_store_conversation_free(&r.out);
  return r.out.membership_version;
}

/* The members at exactly `v` (all pages); *n set; caller frees. */
FX_FN qim_user_id *fx_members_at(qim_store *s, qim_conversation_id conv, qim_membership_version v, size_t *n) {
  qim_user_id *all = NULL;
  size_t count = 0;
  qim_store_members_at_req r = {.tenant_id = FX_TENANT, .conversation_id = conv, .version = v, .limit = 700};
  for (;;) {
    assert_int_equal(QIM_STORE_SYNC(s, conversations.members_at, &r), 0);
    all = qim_realloc(all, (count + r.out_count + 1) * sizeof *all);
    for (size_t i = 0; i < r.out_count; i++) all[count++] = r.out_members[i].user_id;
    if (r.out_count) r.after_user = r.out_members[r.out_count - 1].user_id;
    r.has_after = true;
    bool more = r.out_has_more && r.out_count;
    qim_free(r.out_members);
    if (!more) break;
  }
  *n = count;
  return all;
}

/* Freezes the group's current snapshot into e's audience, as reserve does. */
FX_FN void fx_freeze(qim_store *s, qim_committed_envelope *e, qim_conversation_id conv) {
  qim_membership_version v = fx_version(s, conv);
  size_t n;
  qim_user_id *m = fx_members_at(s, conv, v, &n);
  qim_mailbox_shard_id shards[64];
  size_t ns = 0;
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++)
    for (size_t i = 0; i < n; i++)
      if (qim_shard_of_user(&FX_SHARDS, FX_TENANT, m[i]) == sh) {
        shards[ns++] = sh;
        break;
      }
  fx_group(e, v, (uint32_t)n, shards, ns);
  qim_free(m);
}

FX_FN uint64_t fx_outbox_put(qim_store *s, const qim_committed_envelope *e) {
  qim_store_log_append a = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}};
  memcpy(a.key, e->intent.coordinates.message_id.b, 16);
  assert_int_equal(qim_committed_envelope_encode(e, &a.payload), 0);
  qim_store_log_append_req r = {.appends = &a, .append_count = 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.append, &r), 0);
  qim_free(a.payload.p);
  return a.out_position.offset;
}

/* A message to `conv` frozen at its current membership, put in the outbox. */
FX_FN uint64_t fx_send(qim_store *s, qim_conversation_id conv, uint64_t seq) {
  qim_committed_envelope e;
  fx_envelope(&e, conv, seq);
  fx_freeze(s, &e, conv);
  uint64_t off = fx_outbox_put(s, &e);
  qim_committed_envelope_free(&e);
  return off;
}

typedef struct fx_log {
  qim_store_log_record *r;
  size_t n;
} fx_log;

FX_FN void fx_read(qim_store *s, qim_log_stream stream, fx_log *out) {
  *out = (fx_log){0};
  uint64_t from = 0;
  for (;;) {
    qim_store_log_read_req r = {.stream = stream, .from = from, .max = 500};
    assert_int_equal(QIM_STORE_SYNC(s, logs.read, &r), 0);
    out->r = qim_realloc(out->r, (out->n + r.out_count + 1) * sizeof *out->r);
    if (r.out_count) memcpy(out->r + out->n, r.out_records, r.out_count * sizeof *r.out_records);
    out->n += r.out_count;
    if (r.out_count) from = r.out_records[r.out_count - 1].offset + 1;
    size_t got = r.out_count;
    qim_free(r.out_records);
    if (!got || from >= r.out_end) break;
  }
}

FX_FN void fx_log_free(fx_log *l) {
  for (size_t i = 0; i < l->n; i++) qim_store_log_record_free(&l->r[i]);
  qim_free(l->r);
  *l = (fx_log){0};
}

FX_FN qim_log_stream fx_dispatch_stream(qim_mailbox_shard_id shard) {
  return (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, shard};
}

FX_FN uint64_t fx_consumer(qim_store *s) {
  qim_store_log_consumer_get_req r = {.consumer = "fanout", .stream = {QIM_LOG_STREAM_OUTBOX, 0}};
  assert_int_equal(QIM_STORE_SYNC(s, logs.consumer_get, &r), 0);
  return r.out_offset;
}

/* The outbox's first offset and the offset after its last record (the store numbers
 * records densely but need not start at 0). */
FX_FN uint64_t fx_outbox_first(qim_store *s) {
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.read, &r), 0);
  uint64_t first = r.out_count ? r.out_records[0].offset : r.out_end;
  for (size_t i = 0; i < r.out_count; i++) qim_store_log_record_free(&r.out_records[i]);
  qim_free(r.out_records);
  return first;
}

FX_FN uint64_t fx_outbox_end(qim_store *s) {
  qim_store_log_read_req r = {.stream = {QIM_LOG_STREAM_OUTBOX, 0}, .from = 0, .max = 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.read, &r), 0);
  for (size_t i = 0; i < r.out_count; i++) qim_store_log_record_free(&r.out_records[i]);
  qim_free(r.out_records);
  return r.out_end;
}

FX_FN void fx_consumer_set(qim_store *s, uint64_t off) {
  qim_store_log_consumer_set_req r = {.consumer = "fanout", .stream = {QIM_LOG_STREAM_OUTBOX, 0}, .offset = off};
  assert_int_equal(QIM_STORE_SYNC(s, logs.consumer_set, &r), 0);
}

/* Every dispatch of every shard, decoded, in (shard, offset) order. */
typedef struct fx_dispatches {
  qim_group_dispatch *d;
  size_t n;
} fx_dispatches;

FX_FN void fx_all_dispatches(qim_store *s, fx_dispatches *out) {
  *out = (fx_dispatches){0};
  for (uint32_t sh = 0; sh < FX_SHARDS.shard_count; sh++) {
    fx_log l;
    fx_read(s, fx_dispatch_stream(sh), &l);
    out->d = qim_realloc(out->d, (out->n + l.n + 1) * sizeof *out->d);
    for (size_t i = 0; i < l.n; i++) {
      if (l.r[i].fence) continue;
      assert_int_equal(qim_group_dispatch_decode(l.r[i].payload.p, l.r[i].payload.n, &out->d[out->n]), 0);
      assert_int_equal(out->d[out->n].target_shard, sh);
      assert_memory_equal(l.r[i].key, out->d[out->n].source_message.message_id.b, 16);
      out->n++;
    }
    fx_log_free(&l);
  }
}

FX_FN void fx_dispatches_free(fx_dispatches *x) {
  for (size_t i = 0; i < x->n; i++) qim_group_dispatch_free(&x->d[i]);
  qim_free(x->d);
  *x = (fx_dispatches){0};
}

/* How many times `u` is a recipient of message `mid` across all dispatches. */
FX_FN int fx_count_recipient(const fx_dispatches *x, const qim_message_id *mid, qim_user_id u) {
  int n = 0;
  for (size_t i = 0; i < x->n; i++) {
    if (memcmp(x->d[i].source_message.message_id.b, mid->b, 16) != 0) continue;
    for (size_t c = 0; c < x->d[i].chunk_count; c++)
      for (size_t k = 0; k < x->d[i].recipient_chunks[c].recipient_count; k++)
        n += qim_u128_eq(x->d[i].recipient_chunks[c].recipient_ids[k].v, u.v);
  }
  return n;
}

/* Recipients of message `mid` in total. */
FX_FN size_t fx_count_all(const fx_dispatches *x, const qim_message_id *mid, size_t *dispatches) {
  size_t n = 0, d = 0;
  for (size_t i = 0; i < x->n; i++) {
    if (memcmp(x->d[i].source_message.message_id.b, mid->b, 16) != 0) continue;
    d++;
    for (size_t c = 0; c < x->d[i].chunk_count; c++) n += x->d[i].recipient_chunks[c].recipient_count;
  }
  if (dispatches) *dispatches = d;
  return n;
}

#endif
