/*
 * record.c — free / copy / equal of the contract's composite values (record.h).
 *
 * Every free zeroes what it released, so freeing twice or freeing a zeroed value is
 * harmless. Copies are deep and allocate with qim_malloc (internal sizes: abort on OOM).
 * Equality compares fields, never struct bytes, so padding and the contents of unused
 * variants or absent optionals (has_* == false) never matter.
 */
#include "qim/record.h"

#include <string.h>

#include "qim/ids.h"
#include "qim/mem.h"

/* ---- small helpers ---------------------------------------------------------------- */

static void *dup_array(const void *p, size_t count, size_t elem) {
  return count ? qim_memdup(p, count * elem) : NULL;
}

static int id16_eq(const uint8_t *a, const uint8_t *b) { return memcmp(a, b, 16) == 0; }

static int user_ids_eq(const qim_user_id *a, const qim_user_id *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!qim_u128_eq(a[i].v, b[i].v)) return 0;
  return 1;
}

static int str_eq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

int qim_message_coordinates_equal(const qim_message_coordinates *a, const qim_message_coordinates *b) {
  return id16_eq(a->message_id.b, b->message_id.b) && qim_u128_eq(a->conversation_id.v, b->conversation_id.v) &&
         a->conversation_seq == b->conversation_seq && id16_eq(a->last_activity_id.b, b->last_activity_id.b);
}

int qim_authenticated_actor_equal(const qim_authenticated_actor *a, const qim_authenticated_actor *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->user_id.v, b->user_id.v) &&
         qim_u128_eq(a->device_id.v, b->device_id.v);
}

/* ---- bytes ------------------------------------------------------------------------ */

void qim_bytes_free(qim_bytes *b) {
  qim_free(b->p);
  *b = (qim_bytes){0};
}

void qim_bytes_copy(qim_bytes *dst, const qim_bytes *src) {
  dst->p = src->n ? qim_memdup(src->p, src->n) : NULL;
  dst->n = src->n;
}

int qim_bytes_equal(const qim_bytes *a, const qim_bytes *b) {
  return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

/* ---- content and record ----------------------------------------------------------- */

void qim_message_content_free(qim_message_content *c) {
  qim_free(c->custom_type);
  qim_bytes_free(&c->payload_or_ciphertext);
  qim_bytes_free(&c->media_metadata);
  *c = (qim_message_content){0};
}

void qim_message_content_copy(qim_message_content *dst, const qim_message_content *src) {
  *dst = *src;
  dst->custom_type = qim_strdup(src->custom_type);
  qim_bytes_copy(&dst->payload_or_ciphertext, &src->payload_or_ciphertext);
  if (src->has_media_metadata) qim_bytes_copy(&dst->media_metadata, &src->media_metadata);
  else dst->media_metadata = (qim_bytes){0};
}

int qim_message_content_equal(const qim_message_content *a, const qim_message_content *b) {
  return a->message_type == b->message_type && str_eq(a->custom_type, b->custom_type) &&
         a->schema_version == b->schema_version &&
         qim_bytes_equal(&a->payload_or_ciphertext, &b->payload_or_ciphertext) &&
         a->has_media_metadata == b->has_media_metadata &&
         (!a->has_media_metadata || qim_bytes_equal(&a->media_metadata, &b->media_metadata));
}

void qim_message_record_free(qim_message_record *r) {
  qim_message_content_free(&r->content);
  *r = (qim_message_record){0};
}

void qim_message_record_copy(qim_message_record *dst, const qim_message_record *src) {
  *dst = *src;
  qim_message_content_copy(&dst->content, &src->content);
}

int qim_message_record_equal(const qim_message_record *a, const qim_message_record *b) {
  return qim_message_coordinates_equal(&a->coordinates, &b->coordinates) &&
         qim_authenticated_actor_equal(&a->sender, &b->sender) &&
         id16_eq(a->client_message_id.b, b->client_message_id.b) &&
         qim_message_content_equal(&a->content, &b->content) && a->retention_class == b->retention_class &&
         a->state == b->state && a->created_at == b->created_at;
}

/* ---- audience and intent ---------------------------------------------------------- */

void qim_delivery_audience_free(qim_delivery_audience *a) {
  qim_free(a->direct.recipients);
  qim_free(a->group.target_shards);
  *a = (qim_delivery_audience){0};
}

void qim_delivery_audience_copy(qim_delivery_audience *dst, const qim_delivery_audience *src) {
  *dst = (qim_delivery_audience){.kind = src->kind};
  if (src->kind == QIM_DELIVERY_AUDIENCE_DIRECT) {
    dst->direct.recipients = dup_array(src->direct.recipients, src->direct.recipient_count, sizeof(qim_user_id));
    dst->direct.recipient_count = src->direct.recipient_count;
  } else {
    dst->group = src->group;
    dst->group.target_shards =
        dup_array(src->group.target_shards, src->group.target_shard_count, sizeof(qim_mailbox_shard_id));
  }
}

int qim_delivery_audience_equal(const qim_delivery_audience *a, const qim_delivery_audience *b) {
  if (a->kind != b->kind) return 0;
  if (a->kind == QIM_DELIVERY_AUDIENCE_DIRECT)
    return a->direct.recipient_count == b->direct.recipient_count &&
           user_ids_eq(a->direct.recipients, b->direct.recipients, a->direct.recipient_count);
  if (!qim_u128_eq(a->group.group_id.v, b->group.group_id.v) ||
      a->group.membership_version != b->group.membership_version || a->group.member_count != b->group.member_count ||
      a->group.target_shard_count != b->group.target_shard_count)
    return 0;
  for (size_t i = 0; i < a->group.target_shard_count; i++)
    if (a->group.target_shards[i] != b->group.target_shards[i]) return 0;
  return 1;
}

void qim_commit_intent_free(qim_commit_intent *i) {
  qim_delivery_audience_free(&i->delivery.audience);
  qim_message_record_free(&i->record);
  *i = (qim_commit_intent){0};
}

void qim_commit_intent_copy(qim_commit_intent *dst, const qim_commit_intent *src) {
  *dst = *src;
  qim_delivery_audience_copy(&dst->delivery.audience, &src->delivery.audience);
  qim_message_record_copy(&dst->record, &src->record);
}

static int commit_key_equal(const qim_commit_key *a, const qim_commit_key *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->sender_id.v, b->sender_id.v) &&
         id16_eq(a->client_message_id.b, b->client_message_id.b);
}

int qim_commit_intent_equal(const qim_commit_intent *a, const qim_commit_intent *b) {
  return commit_key_equal(&a->key, &b->key) && qim_message_coordinates_equal(&a->coordinates, &b->coordinates) &&
         a->state == b->state && qim_delivery_audience_equal(&a->delivery.audience, &b->delivery.audience) &&
         a->delivery.inline_body == b->delivery.inline_body && a->delivery.created_at == b->delivery.created_at &&
         qim_message_record_equal(&a->record, &b->record) && id16_eq(a->trace_id.b, b->trace_id.b);
}

void qim_committed_envelope_free(qim_committed_envelope *e) {
  qim_commit_intent_free(&e->intent);
  qim_message_record_free(&e->record);
}

void qim_committed_envelope_copy(qim_committed_envelope *dst, const qim_committed_envelope *src) {
  qim_commit_intent_copy(&dst->intent, &src->intent);
  qim_message_record_copy(&dst->record, &src->record);
}

int qim_committed_envelope_equal(const qim_committed_envelope *a, const qim_committed_envelope *b) {
  return qim_commit_intent_equal(&a->intent, &b->intent) && qim_message_record_equal(&a->record, &b->record);
}

bool qim_committed_envelope_matches(const qim_committed_envelope *env, const qim_commit_intent *in) {
  const qim_message_record *a = &env->record, *b = &in->record;
  if (memcmp(a->coordinates.message_id.b, b->coordinates.message_id.b, 16) != 0 ||
      a->coordinates.conversation_seq != in->coordinates.conversation_seq ||
      memcmp(a->client_message_id.b, b->client_message_id.b, 16) != 0 ||
      memcmp(env->intent.key.client_message_id.b, in->key.client_message_id.b, 16) != 0)
    return false;
  return a->state != QIM_MESSAGE_STATE_NORMAL || qim_message_record_equal(a, b);
}

/* ---- dispatch ------------------------------------------------------------------------ */

void qim_group_dispatch_free(qim_group_dispatch *d) {
  for (size_t i = 0; i < d->chunk_count && d->recipient_chunks; i++) qim_free(d->recipient_chunks[i].recipient_ids);
  qim_free(d->recipient_chunks);
  qim_message_content_free(&d->content);
  *d = (qim_group_dispatch){0};
}

void qim_group_dispatch_copy(qim_group_dispatch *dst, const qim_group_dispatch *src) {
  *dst = *src;
  dst->recipient_chunks = dup_array(src->recipient_chunks, src->chunk_count, sizeof(qim_recipient_chunk));
  for (size_t i = 0; i < src->chunk_count; i++) {
    const qim_recipient_chunk *c = &src->recipient_chunks[i];
    dst->recipient_chunks[i].recipient_ids = dup_array(c->recipient_ids, c->recipient_count, sizeof(qim_user_id));
  }
  qim_message_content_copy(&dst->content, &src->content);
}

int qim_group_dispatch_equal(const qim_group_dispatch *a, const qim_group_dispatch *b) {
  if (!id16_eq(a->dispatch_id.b, b->dispatch_id.b) ||
      !qim_message_coordinates_equal(&a->source_message, &b->source_message) ||
      !qim_u128_eq(a->tenant_id.v, b->tenant_id.v) || !qim_u128_eq(a->sender_id.v, b->sender_id.v) ||
      !id16_eq(a->client_message_id.b, b->client_message_id.b) || a->target_shard != b->target_shard ||
      a->membership_version != b->membership_version || a->chunk_count != b->chunk_count ||
      !qim_message_content_equal(&a->content, &b->content) || a->inline_body != b->inline_body ||
      a->created_at != b->created_at || !id16_eq(a->trace_id.b, b->trace_id.b))
    return 0;
  for (size_t i = 0; i < a->chunk_count; i++) {
    const qim_recipient_chunk *x = &a->recipient_chunks[i], *y = &b->recipient_chunks[i];
    if (x->chunk_id != y->chunk_id || x->recipient_count != y->recipient_count ||
        !user_ids_eq(x->recipient_ids, y->recipient_ids, x->recipient_count))
      return 0;
  }
  return 1;
}

/* ---- mailbox entry --------------------------------------------------------------------- */

void qim_mailbox_entry_free(qim_mailbox_entry *e) {
  qim_message_content_free(&e->content);
  *e = (qim_mailbox_entry){0};
}

void qim_mailbox_entry_copy(qim_mailbox_entry *dst, const qim_mailbox_entry *src) {
  *dst = *src;
  if (src->has_content) qim_message_content_copy(&dst->content, &src->content);
  else dst->content = (qim_message_content){0};
}

int qim_mailbox_entry_equal(const qim_mailbox_entry *a, const qim_mailbox_entry *b) {
  return qim_u128_eq(a->tenant_id.v, b->tenant_id.v) && qim_u128_eq(a->user_id.v, b->user_id.v) &&
         a->mailbox_seq == b->mailbox_seq && a->event_ordinal == b->event_ordinal && a->event_id == b->event_id &&
         a->event_type == b->event_type && qim_message_coordinates_equal(&a->coordinates, &b->coordinates) &&
         qim_u128_eq(a->sender_id.v, b->sender_id.v) && a->has_client_message_id == b->has_client_message_id &&
         (!a->has_client_message_id || id16_eq(a->client_message_id.b, b->client_message_id.b)) &&
         a->has_content == b->has_content && (!a->has_content || qim_message_content_equal(&a->content, &b->content)) &&
         a->body_included == b->body_included && a->created_at == b->created_at;
}

/* ---- pages ------------------------------------------------------------------------------ */

void qim_history_page_free(qim_history_page *p) {
  for (size_t i = 0; i < p->record_count && p->records; i++) qim_message_record_free(&p->records[i]);
  qim_free(p->records);
  *p = (qim_history_page){0};
}

void qim_mailbox_page_free(qim_mailbox_page *p) {
  for (size_t i = 0; i < p->entry_count && p->entries; i++) qim_mailbox_entry_free(&p->entries[i]);
  qim_free(p->entries);
  *p = (qim_mailbox_page){0};
}

void qim_member_page_free(qim_member_page *p) {
  qim_free(p->members);
  qim_bytes_free(&p->next_cursor.bytes);
  *p = (qim_member_page){0};
}

void qim_session_page_free(qim_session_page *p) {
  qim_free(p->sessions);
  qim_bytes_free(&p->next_cursor.bytes);
  *p = (qim_session_page){0};
}
