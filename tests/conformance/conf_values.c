/*
 * conf_values.c — JSON forms of the composite values the store takes and returns
 * (records, intents, mailbox entries, progress, users, conversations, members).
 *
 * Outputs mirror the C structs field by field (names without the `out_` prefix; an
 * absent Option is null), so a vector can check any field by naming it. The commit
 * proposal is the one input with a compact form: it names each fact once (README.md
 * "Proposals") and this file expands it into the redundant CommitIntent the store takes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"

#define ENUM(names, v) conf_json_enum(names, conf_names_count(names), (int)(v))
#define TRY(x)                  \
  do {                          \
    int rc_ = (x);              \
    if (rc_) return rc_;        \
  } while (0)

static json_t *must(json_t *v) {
  if (!v) abort();
  return v;
}

/* An array of id structs whose first member is a qim_u128 (UserId and friends). */
static json_t *u128_array(const void *base, size_t n, size_t stride) {
  json_t *a = must(json_array());
  for (size_t i = 0; i < n; i++) {
    qim_u128 v;
    memcpy(&v, (const char *)base + i * stride, sizeof v);
    json_array_append_new(a, conf_json_u128(v));
  }
  return a;
}

/* ---- content, coordinates, records ---------------------------------------------------- */

int conf_dec_content(conf_ctx *c, json_t *v, qim_message_content *out) {
  memset(out, 0, sizeof *out);
  int t;
  const char *custom;
  uint64_t schema;
  TRY(conf_get_enum(c, v, "message_type", conf_names_message_type, &t));
  TRY(conf_get_str(c, v, "custom_type", &custom));
  TRY(conf_get_u64(c, v, "schema_version", &schema));
  out->message_type = (qim_message_type)t;
  out->schema_version = (uint32_t)schema;
  if (custom) out->custom_type = qim_strdup(custom);
  json_t *media = conf_get(c, v, "media_metadata");
  int rc = conf_get_bytes(c, v, "payload", &out->payload_or_ciphertext);
  if (!rc && media && !json_is_null(media)) {
    out->has_media_metadata = true;
    rc = conf_val_bytes(c, media, "media_metadata", &out->media_metadata);
  }
  if (rc) qim_message_content_free(out);
  return rc;
}

json_t *conf_enc_content(const qim_message_content *m) {
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o}", "message_type",
                        ENUM(conf_names_message_type, m->message_type), "custom_type",
                        conf_json_str(m->custom_type), "schema_version",
                        conf_json_u64(m->schema_version), "payload",
                        conf_json_bytes(&m->payload_or_ciphertext), "media_metadata",
                        m->has_media_metadata ? conf_json_bytes(&m->media_metadata) : json_null()));
}

int conf_dec_coordinates(conf_ctx *c, json_t *v, qim_message_coordinates *out) {
  memset(out, 0, sizeof *out);
  TRY(conf_get_id16(c, v, "message_id", out->message_id.b));
  TRY(conf_get_u128(c, v, "conversation_id", &out->conversation_id.v));
  TRY(conf_get_u64(c, v, "conversation_seq", &out->conversation_seq));
  return conf_get_id16(c, v, "last_activity_id", out->last_activity_id.b);
}

json_t *conf_enc_coordinates(const qim_message_coordinates *m) {
  return must(json_pack("{s:o,s:o,s:o,s:o}", "message_id", conf_json_id16(m->message_id.b),
                        "conversation_id", conf_json_u128(m->conversation_id.v),
                        "conversation_seq", conf_json_u64(m->conversation_seq),
                        "last_activity_id", conf_json_id16(m->last_activity_id.b)));
}

json_t *conf_enc_record(const qim_message_record *r) {
  json_t *sender = must(json_pack("{s:o,s:o,s:o}", "tenant_id", conf_json_u128(r->sender.tenant_id.v),
                                  "user_id", conf_json_u128(r->sender.user_id.v), "device_id",
                                  conf_json_u128(r->sender.device_id.v)));
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "coordinates",
                        conf_enc_coordinates(&r->coordinates), "sender", sender,
                        "client_message_id", conf_json_id16(r->client_message_id.b), "content",
                        conf_enc_content(&r->content), "retention_class",
                        ENUM(conf_names_retention, r->retention_class), "state",
                        ENUM(conf_names_message_state, r->state), "created_at",
                        conf_json_u64(r->created_at)));
}

/* ---- intents ------------------------------------------------------------------------------- */

int conf_dec_key(conf_ctx *c, json_t *v, qim_commit_key *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(v)) {
    snprintf(c->err, sizeof c->err, "key: expected {tenant_id, sender_id, client_message_id}");
    return -EINVAL;
  }
  TRY(conf_get_u128(c, v, "tenant_id", &out->tenant_id.v));
  TRY(conf_get_u128(c, v, "sender_id", &out->sender_id.v));
  return conf_get_id16(c, v, "client_message_id", out->client_message_id.b);
}

static json_t *enc_key(const qim_commit_key *k) {
  return must(json_pack("{s:o,s:o,s:o}", "tenant_id", conf_json_u128(k->tenant_id.v), "sender_id",
                        conf_json_u128(k->sender_id.v), "client_message_id",
                        conf_json_id16(k->client_message_id.b)));
}

static json_t *enc_audience(const qim_delivery_audience *a) {
  if (a->kind == QIM_DELIVERY_AUDIENCE_DIRECT)
    return must(json_pack("{s:s,s:o}", "kind", "direct", "recipients",
                          u128_array(a->direct.recipients, a->direct.recipient_count,
                                     sizeof *a->direct.recipients)));
  json_t *shards = must(json_array());
  for (size_t i = 0; i < a->group.target_shard_count; i++)
    json_array_append_new(shards, conf_json_u64(a->group.target_shards[i]));
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o}", "kind", ENUM(conf_names_audience, a->kind),
                        "group_id", conf_json_u128(a->group.group_id.v), "membership_version",
                        conf_json_u64(a->group.membership_version), "member_count",
                        conf_json_u64(a->group.member_count), "target_shards", shards));
}

json_t *conf_enc_intent(const qim_commit_intent *i) {
  json_t *delivery = must(json_pack("{s:o,s:b,s:o}", "audience", enc_audience(&i->delivery.audience),
                                    "inline_body", i->delivery.inline_body, "created_at",
                                    conf_json_u64(i->delivery.created_at)));
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "key", enc_key(&i->key), "coordinates",
                        conf_enc_coordinates(&i->coordinates), "state",
                        ENUM(conf_names_commit_state, i->state), "delivery", delivery, "record",
                        conf_enc_record(&i->record), "trace_id", conf_json_id16(i->trace_id.b)));
}

json_t *conf_enc_committed(const qim_committed_message *m) {
  return must(json_pack("{s:o,s:o}", "client_message_id", conf_json_id16(m->client_message_id.b),
                        "coordinates", conf_enc_coordinates(&m->coordinates)));
}

/* {"direct": [users...]} or {"group": id}. */
static int dec_audience(conf_ctx *c, json_t *v, qim_delivery_audience *out) {
  json_t *direct = conf_get(c, v, "direct"), *group = conf_get(c, v, "group");
  if (json_is_array(direct)) {
    out->kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    size_t n = json_array_size(direct);
    out->direct.recipients = n ? qim_calloc(n, sizeof *out->direct.recipients) : NULL;
    out->direct.recipient_count = n;
    for (size_t i = 0; i < n; i++)
      TRY(conf_val_u128(c, json_array_get(direct, i), "audience.direct[]",
                        &out->direct.recipients[i].v));
    return 0;
  }
  if (group) {
    out->kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    return conf_val_u128(c, group, "audience.group", &out->group.group_id.v);
  }
  snprintf(c->err, sizeof c->err, "proposal.audience: expected {\"direct\": [...]} or {\"group\": id}");
  return -EINVAL;
}

static int dec_proposal_ids(conf_ctx *c, json_t *v, qim_commit_intent *o) {
  TRY(conf_get_u128(c, v, "tenant", &o->key.tenant_id.v));
  TRY(conf_get_u128(c, v, "sender", &o->key.sender_id.v));
  TRY(conf_get_id16(c, v, "cmid", o->key.client_message_id.b));
  TRY(conf_get_u128(c, v, "device", &o->record.sender.device_id.v));
  TRY(conf_get_u128(c, v, "conversation", &o->coordinates.conversation_id.v));
  TRY(conf_get_id16(c, v, "message_id", o->coordinates.message_id.b));
  TRY(conf_get_id16(c, v, "trace_id", o->trace_id.b));
  /* The activity id defaults to the message id (both are time-ordered). */
  if (conf_get(c, v, "last_activity_id"))
    return conf_get_id16(c, v, "last_activity_id", o->coordinates.last_activity_id.b);
  memcpy(o->coordinates.last_activity_id.b, o->coordinates.message_id.b, 16);
  return 0;
}

static int dec_proposal_content(conf_ctx *c, json_t *v, qim_commit_intent *o) {
  json_t *content = json_pack("{s:O?,s:O?,s:O?,s:O?,s:O?}", "message_type",
                              conf_get(c, v, "type"), "custom_type",
                              conf_get(c, v, "custom_type"), "schema_version",
                              conf_get(c, v, "schema_version"), "payload",
                              conf_get(c, v, "payload"), "media_metadata",
                              conf_get(c, v, "media_metadata"));
  int rc = conf_dec_content(c, must(content), &o->record.content);
  json_decref(content);
  return rc;
}

int conf_dec_proposal(conf_ctx *c, json_t *v, qim_commit_intent *o) {
  memset(o, 0, sizeof *o);
  if (!json_is_object(v)) {
    snprintf(c->err, sizeof c->err, "proposal: expected an object");
    return -EINVAL;
  }
  int retention, state;
  bool inline_body = true;
  uint64_t created;
  int rc = dec_proposal_ids(c, v, o);
  if (!rc) rc = dec_proposal_content(c, v, o);
  if (!rc) rc = conf_get_enum(c, v, "retention", conf_names_retention, &retention);
  if (!rc) rc = conf_get_enum(c, v, "state", conf_names_message_state, &state);
  if (!rc) rc = conf_get_u64(c, v, "created_at", &created);
  if (!rc && conf_get(c, v, "inline_body")) rc = conf_get_bool(c, v, "inline_body", &inline_body);
  if (!rc) rc = dec_audience(c, conf_get(c, v, "audience"), &o->delivery.audience);
  if (rc) {
    qim_commit_intent_free(o);
    return rc;
  }
  o->state = QIM_COMMIT_STATE_RESERVED;
  o->delivery.inline_body = inline_body;
  o->delivery.created_at = created;
  o->record.coordinates = o->coordinates;
  o->record.sender.tenant_id = o->key.tenant_id;
  o->record.sender.user_id = o->key.sender_id;
  o->record.client_message_id = o->key.client_message_id;
  o->record.retention_class = (qim_retention_class)retention;
  o->record.state = (qim_message_state)state;
  o->record.created_at = created;
  return 0;
}

/* ---- mailboxes ------------------------------------------------------------------------------ */

int conf_dec_mailbox_entry(conf_ctx *c, json_t *v, qim_mailbox_seq batch_seq, qim_mailbox_entry *o) {
  memset(o, 0, sizeof *o);
  uint64_t ord, seq = batch_seq, created;
  int type;
  TRY(conf_get_u128(c, v, "tenant_id", &o->tenant_id.v));
  TRY(conf_get_u128(c, v, "user_id", &o->user_id.v));
  if (conf_get(c, v, "mailbox_seq")) TRY(conf_get_u64(c, v, "mailbox_seq", &seq));
  TRY(conf_get_u64(c, v, "event_ordinal", &ord));
  TRY(conf_get_enum(c, v, "event_type", conf_names_event_type, &type));
  TRY(conf_dec_coordinates(c, conf_get(c, v, "coordinates"), &o->coordinates));
  TRY(conf_get_u128(c, v, "sender_id", &o->sender_id.v));
  TRY(conf_get_bool(c, v, "body_included", &o->body_included));
  TRY(conf_get_u64(c, v, "created_at", &created));
  o->mailbox_seq = seq;
  o->event_ordinal = (uint8_t)ord;
  o->event_id = qim_event_id_make(seq, o->event_ordinal);
  if (conf_get(c, v, "event_id")) TRY(conf_get_u64(c, v, "event_id", &o->event_id));
  o->event_type = (qim_event_type)type;
  o->created_at = created;
  json_t *cmid = conf_get(c, v, "client_message_id");
  if (cmid && !json_is_null(cmid)) {
    o->has_client_message_id = true;
    TRY(conf_val_id16(c, cmid, "client_message_id", o->client_message_id.b));
  }
  json_t *content = conf_get(c, v, "content");
  if (content && !json_is_null(content)) {
    o->has_content = true;
    TRY(conf_dec_content(c, content, &o->content));
  }
  return 0;
}

json_t *conf_enc_mailbox_entry(const qim_mailbox_entry *e) {
  json_t *o = must(json_pack(
      "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "tenant_id", conf_json_u128(e->tenant_id.v), "user_id",
      conf_json_u128(e->user_id.v), "mailbox_seq", conf_json_u64(e->mailbox_seq), "event_ordinal",
      conf_json_u64(e->event_ordinal), "event_id", conf_json_u64(e->event_id), "event_type",
      ENUM(conf_names_event_type, e->event_type), "coordinates", conf_enc_coordinates(&e->coordinates),
      "sender_id", conf_json_u128(e->sender_id.v)));
  json_object_set_new(o, "client_message_id",
                      e->has_client_message_id ? conf_json_id16(e->client_message_id.b) : json_null());
  json_object_set_new(o, "content", e->has_content ? conf_enc_content(&e->content) : json_null());
  json_object_set_new(o, "body_included", json_boolean(e->body_included));
  json_object_set_new(o, "created_at", conf_json_u64(e->created_at));
  return o;
}

int conf_dec_progress(conf_ctx *c, json_t *v, qim_dispatch_progress *o) {
  memset(o, 0, sizeof *o);
  uint64_t shard, lane, at;
  TRY(conf_get_id16(c, v, "dispatch_id", o->dispatch_id.b));
  TRY(conf_get_u64(c, v, "shard", &shard));
  TRY(conf_get_u64(c, v, "lane", &lane));
  o->shard = (qim_mailbox_shard_id)shard;
  o->lane = (qim_lane_id)lane;
  json_t *chunks = conf_get(c, v, "completed_chunks");
  size_t n = json_array_size(chunks);
  o->completed_chunks = n ? qim_calloc(n, sizeof *o->completed_chunks) : NULL;
  o->completed_chunk_count = n;
  for (size_t i = 0; i < n; i++) {
    uint64_t ch;
    TRY(conf_val_u64(c, json_array_get(chunks, i), "completed_chunks[]", &ch));
    o->completed_chunks[i] = (uint32_t)ch;
  }
  json_t *done = conf_get(c, v, "completed_at");
  if (done && !json_is_null(done)) {
    TRY(conf_val_u64(c, done, "completed_at", &at));
    o->has_completed_at = true;
    o->completed_at = at;
  }
  return 0;
}

json_t *conf_enc_progress(const qim_dispatch_progress *p) {
  json_t *chunks = must(json_array());
  for (size_t i = 0; i < p->completed_chunk_count; i++)
    json_array_append_new(chunks, conf_json_u64(p->completed_chunks[i]));
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o}", "dispatch_id", conf_json_id16(p->dispatch_id.b),
                        "shard", conf_json_u64(p->shard), "lane", conf_json_u64(p->lane),
                        "completed_chunks", chunks, "completed_at",
                        p->has_completed_at ? conf_json_u64(p->completed_at) : json_null()));
}

/* ---- accounts and conversations ---------------------------------------------------------- */

json_t *conf_enc_user(const qim_store_user *u) {
  return must(json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "tenant_id", conf_json_u128(u->tenant_id.v),
                        "user_id", conf_json_u128(u->user_id.v), "public_json",
                        conf_json_text(u->public_json), "private_json",
                        conf_json_text(u->private_json), "created_at", conf_json_u64(u->created_at),
                        "updated_at", conf_json_u64(u->updated_at), "token_epoch",
                        conf_json_u64(u->token_epoch)));
}

json_t *conf_enc_conversation(const qim_store_conversation *c) {
  json_t *o = must(json_pack(
      "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "tenant_id", conf_json_u128(c->tenant_id.v),
      "conversation_id", conf_json_u128(c->conversation_id.v), "kind",
      ENUM(conf_names_conv_kind, c->kind), "owner_id", conf_json_u128(c->owner_id.v),
      "direct_users", u128_array(c->direct_users, 2, sizeof c->direct_users[0]),
      "latest_seq", conf_json_u64(c->latest_seq), "delid", conf_json_u64(c->delid),
      "last_activity_id", conf_json_id16(c->last_activity_id.b)));
  json_object_set_new(o, "created_at", conf_json_u64(c->created_at));
  json_object_set_new(o, "updated_at", conf_json_u64(c->updated_at));
  json_object_set_new(o, "touched_at", conf_json_u64(c->touched_at));
  json_object_set_new(o, "public_json", conf_json_text(c->public_json));
  json_object_set_new(o, "default_mode_auth", conf_json_mode(c->default_mode_auth));
  json_object_set_new(o, "default_mode_anon", conf_json_mode(c->default_mode_anon));
  json_object_set_new(o, "membership_version", conf_json_u64(c->membership_version));
  json_object_set_new(o, "member_count", conf_json_u64(c->member_count));
  json_object_set_new(o, "deleted", json_boolean(c->deleted));
  return o;
}

json_t *conf_enc_member(const qim_store_member *m) {
  json_t *o = must(json_pack(
      "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b}", "conversation_id", conf_json_u128(m->conversation_id.v),
      "user_id", conf_json_u128(m->user_id.v), "role", ENUM(conf_names_role, m->role), "mode_want",
      conf_json_mode(m->mode_want), "mode_given", conf_json_mode(m->mode_given), "joined_at",
      conf_json_u64(m->joined_at), "left_at", m->has_left_at ? conf_json_u64(m->left_at) : json_null(),
      "banned", m->banned));
  json_object_set_new(o, "read_seq", conf_json_u64(m->read_seq));
  json_object_set_new(o, "recv_seq", conf_json_u64(m->recv_seq));
  json_object_set_new(o, "clear_delid", conf_json_u64(m->clear_delid));
  json_object_set_new(o, "private_json", conf_json_text(m->private_json));
  json_object_set_new(o, "updated_at", conf_json_u64(m->updated_at));
  return o;
}

json_t *conf_enc_group_member(const qim_group_member *m) {
  return must(json_pack("{s:o,s:o,s:o,s:o}", "user_id", conf_json_u128(m->user_id.v), "role",
                        ENUM(conf_names_role, m->role), "joined_at", conf_json_u64(m->joined_at),
                        "left_at", m->has_left_at ? conf_json_u64(m->left_at) : json_null()));
}
