/*
 * record_codec.c — the canonical binary encodings of record.h (layout documented there).
 *
 * Encoders and decoders are written field by field in declaration order with the sticky
 * writer/reader of codec.h; each top-level function adds the version/tag header, checks
 * the status once, and on a failed decode frees whatever was already built.
 */
#include <errno.h>
#include <string.h>

#include "core/codec.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"

#define CODEC_VERSION 1
#define DISPATCH_VERSION 2
#define ENVELOPE_VERSION 2
enum { TAG_RECORD = 'R', TAG_INTENT = 'I', TAG_ENVELOPE = 'E', TAG_DISPATCH = 'D', TAG_ENTRY = 'M' };

/* Minimum encoded sizes, used to bound element counts before allocating. */
#define ID_SIZE 16
#define CHUNK_MIN_SIZE 8

static void w_header(qim__wbuf *w, uint8_t version, uint8_t tag) {
  qim__w_u8(w, version);
  qim__w_u8(w, tag);
}

/* Reads the header of a value of `tag` whose layout is at version `newest`; every version
 * from 1 up to it still decodes (the dispatch gained the sender's tenant, user and cmid at
 * 2, with those fields zero in a version 1 record; the envelope carries its record once, as
 * its intent's, at 2: DESIGN.md §1 rule 3 makes them equal). Returns the version read. */
static uint8_t r_header(qim__rbuf *r, uint8_t tag, uint8_t newest) {
  uint8_t version = qim__r_u8(r), got = qim__r_u8(r);
  if (!r->err && (version < 1 || version > newest || got != tag)) r->err = -EINVAL;
  return version;
}

static void w_id16(qim__wbuf *w, const uint8_t b[16]) { qim__w_raw(w, b, 16); }
static void r_id16(qim__rbuf *r, uint8_t b[16]) { qim__r_raw(r, b, 16); }

/* ---- content ------------------------------------------------------------------------ */

static void enc_content(qim__wbuf *w, const qim_message_content *c) {
  qim__w_enum(w, (int)c->message_type, QIM_MESSAGE_TYPE_CONTROL);
  qim__w_bool(w, c->custom_type != NULL);
  if (c->custom_type) qim__w_bytes(w, (const uint8_t *)c->custom_type, strlen(c->custom_type));
  qim__w_u32(w, c->schema_version);
  qim__w_bytes(w, c->payload_or_ciphertext.p, c->payload_or_ciphertext.n);
  qim__w_bool(w, c->has_media_metadata);
  if (c->has_media_metadata) qim__w_bytes(w, c->media_metadata.p, c->media_metadata.n);
}

/* A length-prefixed string without NUL bytes, as a fresh C string. */
static char *dec_string(qim__rbuf *r) {
  qim_bytes b;
  qim__r_bytes(r, &b);
  if (r->err) return NULL;
  if (b.n && memchr(b.p, 0, b.n)) {
    r->err = -EINVAL;
    qim_bytes_free(&b);
    return NULL;
  }
  char *s = qim_malloc(b.n + 1);
  if (b.n) memcpy(s, b.p, b.n);
  s[b.n] = '\0';
  qim_bytes_free(&b);
  return s;
}

static void dec_content(qim__rbuf *r, qim_message_content *c) {
  c->message_type = (qim_message_type)qim__r_enum(r, QIM_MESSAGE_TYPE_CONTROL);
  if (qim__r_bool(r)) c->custom_type = dec_string(r);
  c->schema_version = qim__r_u32(r);
  qim__r_bytes(r, &c->payload_or_ciphertext);
  c->has_media_metadata = qim__r_bool(r);
  if (c->has_media_metadata) qim__r_bytes(r, &c->media_metadata);
}

/* ---- coordinates, actor, record --------------------------------------------------------- */

static void enc_coords(qim__wbuf *w, const qim_message_coordinates *c) {
  w_id16(w, c->message_id.b);
  qim__w_u128(w, c->conversation_id.v);
  qim__w_u64(w, c->conversation_seq);
  w_id16(w, c->last_activity_id.b);
}

static void dec_coords(qim__rbuf *r, qim_message_coordinates *c) {
  r_id16(r, c->message_id.b);
  c->conversation_id.v = qim__r_u128(r);
  c->conversation_seq = qim__r_u64(r);
  r_id16(r, c->last_activity_id.b);
}

static void enc_actor(qim__wbuf *w, const qim_authenticated_actor *a) {
  qim__w_u128(w, a->tenant_id.v);
  qim__w_u128(w, a->user_id.v);
  qim__w_u128(w, a->device_id.v);
}

static void dec_actor(qim__rbuf *r, qim_authenticated_actor *a) {
  a->tenant_id.v = qim__r_u128(r);
  a->user_id.v = qim__r_u128(r);
  a->device_id.v = qim__r_u128(r);
}

static void enc_record(qim__wbuf *w, const qim_message_record *m) {
  enc_coords(w, &m->coordinates);
  enc_actor(w, &m->sender);
  w_id16(w, m->client_message_id.b);
  enc_content(w, &m->content);
  qim__w_enum(w, (int)m->retention_class, QIM_RETENTION_CLASS_TENANT_CUSTOM);
  qim__w_enum(w, (int)m->state, QIM_MESSAGE_STATE_DELETED);
  qim__w_u64(w, m->created_at);
}

static void dec_record(qim__rbuf *r, qim_message_record *m) {
  dec_coords(r, &m->coordinates);
  dec_actor(r, &m->sender);
  r_id16(r, m->client_message_id.b);
  dec_content(r, &m->content);
  m->retention_class = (qim_retention_class)qim__r_enum(r, QIM_RETENTION_CLASS_TENANT_CUSTOM);
  m->state = (qim_message_state)qim__r_enum(r, QIM_MESSAGE_STATE_DELETED);
  m->created_at = qim__r_u64(r);
}

/* ---- audience and intent ---------------------------------------------------------------- */

static void enc_user_ids(qim__wbuf *w, const qim_user_id *ids, size_t n) {
  qim__w_count(w, n);
  for (size_t i = 0; i < n && !w->err; i++) qim__w_u128(w, ids[i].v);
}

static qim_user_id *dec_user_ids(qim__rbuf *r, size_t *count) {
  size_t n = qim__r_count(r, ID_SIZE);
  qim_user_id *ids = n ? qim_malloc(n * sizeof *ids) : NULL;
  for (size_t i = 0; i < n; i++) ids[i].v = qim__r_u128(r);
  *count = n;
  return ids;
}

static void enc_audience(qim__wbuf *w, const qim_delivery_audience *a) {
  qim__w_enum(w, (int)a->kind, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  if (a->kind == QIM_DELIVERY_AUDIENCE_DIRECT) {
    enc_user_ids(w, a->direct.recipients, a->direct.recipient_count);
    return;
  }
  qim__w_u128(w, a->group.group_id.v);
  qim__w_u64(w, a->group.membership_version);
  qim__w_u32(w, a->group.member_count);
  qim__w_count(w, a->group.target_shard_count);
  for (size_t i = 0; i < a->group.target_shard_count && !w->err; i++) qim__w_u32(w, a->group.target_shards[i]);
}

static void dec_audience(qim__rbuf *r, qim_delivery_audience *a) {
  a->kind = (qim_delivery_audience_kind)qim__r_enum(r, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  if (r->err) return;
  if (a->kind == QIM_DELIVERY_AUDIENCE_DIRECT) {
    a->direct.recipients = dec_user_ids(r, &a->direct.recipient_count);
    return;
  }
  a->group.group_id.v = qim__r_u128(r);
  a->group.membership_version = qim__r_u64(r);
  a->group.member_count = qim__r_u32(r);
  size_t n = qim__r_count(r, sizeof(uint32_t));
  a->group.target_shards = n ? qim_malloc(n * sizeof(qim_mailbox_shard_id)) : NULL;
  for (size_t i = 0; i < n; i++) a->group.target_shards[i] = qim__r_u32(r);
  a->group.target_shard_count = n;
}

static void enc_intent(qim__wbuf *w, const qim_commit_intent *in) {
  qim__w_u128(w, in->key.tenant_id.v);
  qim__w_u128(w, in->key.sender_id.v);
  w_id16(w, in->key.client_message_id.b);
  enc_coords(w, &in->coordinates);
  qim__w_enum(w, (int)in->state, QIM_COMMIT_STATE_COMMITTED);
  enc_audience(w, &in->delivery.audience);
  qim__w_bool(w, in->delivery.inline_body);
  qim__w_u64(w, in->delivery.created_at);
  enc_record(w, &in->record);
  w_id16(w, in->trace_id.b);
}

static void dec_intent(qim__rbuf *r, qim_commit_intent *in) {
  in->key.tenant_id.v = qim__r_u128(r);
  in->key.sender_id.v = qim__r_u128(r);
  r_id16(r, in->key.client_message_id.b);
  dec_coords(r, &in->coordinates);
  in->state = (qim_commit_state)qim__r_enum(r, QIM_COMMIT_STATE_COMMITTED);
  dec_audience(r, &in->delivery.audience);
  in->delivery.inline_body = qim__r_bool(r);
  in->delivery.created_at = qim__r_u64(r);
  dec_record(r, &in->record);
  r_id16(r, in->trace_id.b);
}

/* ---- dispatch --------------------------------------------------------------------------- */

static void enc_dispatch(qim__wbuf *w, const qim_group_dispatch *d) {
  w_id16(w, d->dispatch_id.b);
  enc_coords(w, &d->source_message);
  qim__w_u128(w, d->tenant_id.v);
  qim__w_u128(w, d->sender_id.v);
  w_id16(w, d->client_message_id.b);
  qim__w_u32(w, d->target_shard);
  qim__w_u64(w, d->membership_version);
  qim__w_count(w, d->chunk_count);
  for (size_t i = 0; i < d->chunk_count && !w->err; i++) {
    qim__w_u32(w, d->recipient_chunks[i].chunk_id);
    enc_user_ids(w, d->recipient_chunks[i].recipient_ids, d->recipient_chunks[i].recipient_count);
  }
  enc_content(w, &d->content);
  qim__w_bool(w, d->inline_body);
  qim__w_u64(w, d->created_at);
  w_id16(w, d->trace_id.b);
}

static void dec_dispatch(qim__rbuf *r, qim_group_dispatch *d, uint8_t version) {
  r_id16(r, d->dispatch_id.b);
  dec_coords(r, &d->source_message);
  if (version >= 2) {
    d->tenant_id.v = qim__r_u128(r);
    d->sender_id.v = qim__r_u128(r);
    r_id16(r, d->client_message_id.b);
  }
  d->target_shard = qim__r_u32(r);
  d->membership_version = qim__r_u64(r);
  size_t n = qim__r_count(r, CHUNK_MIN_SIZE);
  d->recipient_chunks = n ? qim_calloc(n, sizeof *d->recipient_chunks) : NULL;
  d->chunk_count = n;
  for (size_t i = 0; i < n; i++) {
    qim_recipient_chunk *c = &d->recipient_chunks[i];
    c->chunk_id = qim__r_u32(r);
    c->recipient_ids = dec_user_ids(r, &c->recipient_count);
  }
  dec_content(r, &d->content);
  d->inline_body = qim__r_bool(r);
  d->created_at = qim__r_u64(r);
  r_id16(r, d->trace_id.b);
}

/* ---- mailbox entry ---------------------------------------------------------------------- */

static void enc_entry(qim__wbuf *w, const qim_mailbox_entry *e) {
  if (e->event_id != qim_event_id_make(e->mailbox_seq, e->event_ordinal) && !w->err) w->err = -EINVAL;
  qim__w_u128(w, e->tenant_id.v);
  qim__w_u128(w, e->user_id.v);
  qim__w_u64(w, e->mailbox_seq);
  qim__w_u8(w, e->event_ordinal);
  qim__w_u64(w, e->event_id);
  qim__w_enum(w, (int)e->event_type, QIM_EVENT_TYPE_CONTROL);
  enc_coords(w, &e->coordinates);
  qim__w_u128(w, e->sender_id.v);
  qim__w_bool(w, e->has_client_message_id);
  if (e->has_client_message_id) w_id16(w, e->client_message_id.b);
  qim__w_bool(w, e->has_content);
  if (e->has_content) enc_content(w, &e->content);
  qim__w_bool(w, e->body_included);
  qim__w_u64(w, e->created_at);
}

static void dec_entry(qim__rbuf *r, qim_mailbox_entry *e) {
  e->tenant_id.v = qim__r_u128(r);
  e->user_id.v = qim__r_u128(r);
  e->mailbox_seq = qim__r_u64(r);
  e->event_ordinal = qim__r_u8(r);
  e->event_id = qim__r_u64(r);
  if (!r->err && e->event_id != qim_event_id_make(e->mailbox_seq, e->event_ordinal)) r->err = -EINVAL;
  e->event_type = (qim_event_type)qim__r_enum(r, QIM_EVENT_TYPE_CONTROL);
  dec_coords(r, &e->coordinates);
  e->sender_id.v = qim__r_u128(r);
  e->has_client_message_id = qim__r_bool(r);
  if (e->has_client_message_id) r_id16(r, e->client_message_id.b);
  e->has_content = qim__r_bool(r);
  if (e->has_content) dec_content(r, &e->content);
  e->body_included = qim__r_bool(r);
  e->created_at = qim__r_u64(r);
}

/* ---- public entry points -------------------------------------------------------------------- */

int qim_message_record_encode(const qim_message_record *m, qim_bytes *out) {
  qim__wbuf w = {0};
  w_header(&w, CODEC_VERSION, TAG_RECORD);
  enc_record(&w, m);
  return qim__w_finish(&w, out);
}

int qim_message_record_decode(const uint8_t *p, size_t n, qim_message_record *dst) {
  qim__rbuf r = qim__r_init(p, n);
  *dst = (qim_message_record){0};
  r_header(&r, TAG_RECORD, CODEC_VERSION);
  dec_record(&r, dst);
  int rc = qim__r_finish(&r);
  if (rc) qim_message_record_free(dst);
  return rc;
}

int qim_commit_intent_encode(const qim_commit_intent *in, qim_bytes *out) {
  qim__wbuf w = {0};
  w_header(&w, CODEC_VERSION, TAG_INTENT);
  enc_intent(&w, in);
  return qim__w_finish(&w, out);
}

int qim_commit_intent_decode(const uint8_t *p, size_t n, qim_commit_intent *dst) {
  qim__rbuf r = qim__r_init(p, n);
  *dst = (qim_commit_intent){0};
  r_header(&r, TAG_INTENT, CODEC_VERSION);
  dec_intent(&r, dst);
  int rc = qim__r_finish(&r);
  if (rc) qim_commit_intent_free(dst);
  return rc;
}

int qim_committed_envelope_encode(const qim_committed_envelope *e, qim_bytes *out) {
  if (!qim_message_record_equal(&e->record, &e->intent.record)) return -EINVAL;
  qim__wbuf w = {0};
  w_header(&w, ENVELOPE_VERSION, TAG_ENVELOPE);
  enc_intent(&w, &e->intent);
  return qim__w_finish(&w, out);
}

int qim_committed_envelope_decode(const uint8_t *p, size_t n, qim_committed_envelope *dst) {
  qim__rbuf r = qim__r_init(p, n);
  *dst = (qim_committed_envelope){0};
  uint8_t version = r_header(&r, TAG_ENVELOPE, ENVELOPE_VERSION);
  dec_intent(&r, &dst->intent);
  if (version == 1) dec_record(&r, &dst->record);
  int rc = qim__r_finish(&r);
  if (rc == 0 && version != 1) qim_message_record_copy(&dst->record, &dst->intent.record);
  /* Version 1's two copies were written equal (and wiped together): unequal ones are not an
   * envelope this codec could write again. */
  if (rc == 0 && version == 1 && !qim_message_record_equal(&dst->record, &dst->intent.record)) rc = -EINVAL;
  if (rc) qim_committed_envelope_free(dst);
  return rc;
}

int qim_group_dispatch_encode(const qim_group_dispatch *d, qim_bytes *out) {
  qim__wbuf w = {0};
  w_header(&w, DISPATCH_VERSION, TAG_DISPATCH);
  enc_dispatch(&w, d);
  return qim__w_finish(&w, out);
}

int qim_group_dispatch_decode(const uint8_t *p, size_t n, qim_group_dispatch *dst) {
  qim__rbuf r = qim__r_init(p, n);
  *dst = (qim_group_dispatch){0};
  uint8_t version = r_header(&r, TAG_DISPATCH, DISPATCH_VERSION);
  dec_dispatch(&r, dst, version);
  int rc = qim__r_finish(&r);
  if (rc) qim_group_dispatch_free(dst);
  return rc;
}

int qim_mailbox_entry_encode(const qim_mailbox_entry *e, qim_bytes *out) {
  qim__wbuf w = {0};
  w_header(&w, CODEC_VERSION, TAG_ENTRY);
  enc_entry(&w, e);
  return qim__w_finish(&w, out);
}

int qim_mailbox_entry_decode(const uint8_t *p, size_t n, qim_mailbox_entry *dst) {
  qim__rbuf r = qim__r_init(p, n);
  *dst = (qim_mailbox_entry){0};
  r_header(&r, TAG_ENTRY, CODEC_VERSION);
  dec_entry(&r, dst);
  int rc = qim__r_finish(&r);
  if (rc) qim_mailbox_entry_free(dst);
  return rc;
}
