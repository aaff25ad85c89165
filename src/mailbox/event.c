/*
 * event.c — what one dispatch becomes in one recipient's mailbox: its event group.
 *
 * The EventType comes from the content alone (so every lane and replay agrees):
 *   MessageType::Control with custom_type "qim.membership"  → Membership (group changes,
 *                                                              docs/groups.md)
 *   MessageType::Control with any other custom_type         → Control (edits, deletes, recalls,
 *                                                              the reader's read position)
 *   Text, Custom, Media                                      → Message, followed by a Mention
 *                                                              entry (next ordinal) when the
 *                                                              recipient is mentioned.
 * Mentions are read from the content (Drafty "MN" entities; in a Tinode payload, the document
 * under "content"), the same place the history helper takes SendMessage.mention_targets
 * from: the commit validates them but keeps them nowhere else, and the content is in every
 * dispatch, so no new field is needed.
 *
 * Bodies: a Message entry carries the content only when the dispatch says inline_body (else
 * the reader fetches it from history). Control and Membership entries always carry it: those
 * messages have no history row to fetch from, and their size is bounded like any message.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mailbox/mailbox_int.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/payload.h"
#include "qim/record.h"

/* Entities examined per message; a Drafty document with more is not a real one. */
#define MENTION_SCAN_MAX 4096

qim_event_type qim_mailbox_event_type(const qim_message_content *c) {
  if (c->message_type != QIM_MESSAGE_TYPE_CONTROL) return QIM_EVENT_TYPE_MESSAGE;
  if (c->custom_type && strcmp(c->custom_type, QIM_MAILBOX_MEMBERSHIP_TYPE) == 0)
    return QIM_EVENT_TYPE_MEMBERSHIP;
  return QIM_EVENT_TYPE_CONTROL;
}

static int user_cmp(const void *a, const void *b) {
  return qim_u128_cmp(((const qim_user_id *)a)->v, ((const qim_user_id *)b)->v);
}

/* The user named by one Drafty entity {"tp":"MN","data":{"val":"usr…"}}, if any. */
static bool mention_of(json_t *ent, qim_user_id *out) {
  const char *tp = json_string_value(json_object_get(ent, "tp"));
  if (!tp || strcmp(tp, "MN") != 0) return false;
  const char *val = json_string_value(json_object_get(json_object_get(ent, "data"), "val"));
  return val && qim_user_id_parse(val, strlen(val), out) == 0;
}

/* Sorts, removes duplicates and keeps the first QIM_MAILBOX_MENTIONS_MAX. */
static size_t normalize(qim_user_id *users, size_t n) {
  if (n == 0) return 0;
  qsort(users, n, sizeof *users, user_cmp);
  size_t k = 1;
  for (size_t i = 1; i < n; i++)
    if (user_cmp(&users[k - 1], &users[i]) != 0) users[k++] = users[i];
  return k < QIM_MAILBOX_MENTIONS_MAX ? k : QIM_MAILBOX_MENTIONS_MAX;
}

void qim_mailbox_mentions(const qim_message_content *c, qim_user_id **out, size_t *count) {
  *out = NULL;
  *count = 0;
  const qim_bytes *p = &c->payload_or_ciphertext;
  /* Only a JSON object can be a Drafty document; skip plain strings and ciphertext cheaply. */
  if (c->message_type == QIM_MESSAGE_TYPE_CONTROL || p->n < 2 || p->p[0] != '{') return;
  /* A Tinode payload keeps the document under "content". Our encoder wrote it and writes
   * a string "MN" as those four bytes: without them there is no mention to look for. */
  bool tinode = c->schema_version == QIM_PAYLOAD_SCHEMA_TINODE;
  if (tinode && !memmem(p->p, p->n, "\"MN\"", 4)) return;
  json_t *root = json_loadb((const char *)p->p, p->n, JSON_REJECT_DUPLICATES, NULL);
  json_t *ents = json_object_get(tinode ? json_object_get(root, "content") : root, "ent");
  size_t n = json_is_array(ents) ? json_array_size(ents) : 0;
  if (n > MENTION_SCAN_MAX) n = MENTION_SCAN_MAX;
  qim_user_id *users = n ? qim_malloc(n * sizeof *users) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (mention_of(json_array_get(ents, i), &users[k])) k++;
  json_decref(root);
  k = normalize(users, k);
  if (k == 0) {
    qim_free(users);
    return;
  }
  *out = users;
  *count = k;
}

/* ---- shared bodies ---------------------------------------------------------------------- */

mb_body *qim__mb_body_new(qim_message_content *moved_from) {
  mb_body *b = qim_malloc(sizeof *b);
  atomic_init(&b->refs, 1);
  b->content = *moved_from;
  *moved_from = (qim_message_content){0};
  return b;
}

mb_body *qim__mb_body_ref(mb_body *b) {
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  return b;
}

void qim__mb_body_unref(mb_body *b) {
  if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  qim_message_content_free(&b->content);
  qim_free(b);
}

/* ---- event groups ------------------------------------------------------------------------- */

/* A body that history's hard delete or recall wiped from the log (fanout.h: redaction). */
static bool redacted(const qim_message_content *c) {
  return c->payload_or_ciphertext.n == 0 && !c->has_media_metadata;
}

static bool is_mentioned(qim_user_id user, const qim_user_id *mentions, size_t n) {
  return n && bsearch(&user, mentions, n, sizeof *mentions, user_cmp) != NULL;
}

/* Entry `ordinal` of the group, with what every entry of it shares and nothing else. */
static qim_mailbox_entry group_entry(const qim_group_dispatch *d, qim_mailbox_seq seq,
                                     qim_user_id user, uint8_t ordinal, qim_event_type type) {
  return (qim_mailbox_entry){
      .tenant_id = d->tenant_id,
      .user_id = user,
      .mailbox_seq = seq,
      .event_ordinal = ordinal,
      .event_id = qim_event_id_make(seq, ordinal),
      .event_type = type,
      .coordinates = d->source_message,
      .sender_id = d->sender_id,
      .created_at = d->created_at,
  };
}

size_t qim__mb_event_group(const qim_group_dispatch *d, const mb_body *body, qim_mailbox_seq seq,
                           qim_user_id user, const qim_user_id *mentions, size_t mention_count,
                           qim_mailbox_entry out[2]) {
  qim_event_type type = qim_mailbox_event_type(&body->content);
  qim_mailbox_entry *e = &out[0];
  *e = group_entry(d, seq, user, 0, type);
  /* Only the sender's own devices need the cmid (they reconcile pending sends with it). */
  if (qim_u128_eq(user.v, d->sender_id.v)) {
    e->has_client_message_id = true;
    e->client_message_id = d->client_message_id;
  }
  bool with_body = type != QIM_EVENT_TYPE_MESSAGE || (d->inline_body && !redacted(&body->content));
  if (with_body) {
    e->has_content = true;
    e->content = body->content; /* shallow: the body outlives the entry */
    e->body_included = true;
  }
  if (type != QIM_EVENT_TYPE_MESSAGE || qim_u128_eq(user.v, d->sender_id.v) ||
      !is_mentioned(user, mentions, mention_count))
    return 1;
  out[1] = group_entry(d, seq, user, 1, QIM_EVENT_TYPE_MENTION);
  return 2;
}

size_t qim__mb_entry_size(const qim_mailbox_entry *e) {
  if (!e->has_content) return 0;
  return e->content.payload_or_ciphertext.n + (e->content.has_media_metadata ? e->content.media_metadata.n : 0);
}
