/*
 * content.c — a Tinode {pub}'s head and content as a qim MessageContent, and back.
 *
 * The stored payload is the whole Tinode envelope as canonical JSON,
 * {"content":…,"head":…} (compact, keys sorted, "head" left out when empty), so {data}
 * rebuilds head and content exactly as they were published: replace, reply, forwarded,
 * mime, mentions, webrtc, … all survive without this module knowing them. The other
 * MessageContent fields are derived from it (docs/history.md has the table): the message
 * type, the custom type (a non-text mime), the attachment references (media_metadata),
 * and, outside the content, the mention targets and the reply / replace seqs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

/* ---- head fields -------------------------------------------------------------------- */

/* ":N" (Tinode's same-topic form) or a plain positive integer (seed 003's examples). */
static bool parse_seq_ref(const json_t *v, qim_conversation_seq *out) {
  if (json_is_integer(v)) {
    json_int_t n = json_integer_value(v);
    if (n <= 0) return false;
    *out = (qim_conversation_seq)n;
    return true;
  }
  const char *s = json_string_value(v);
  if (!s || s[0] != ':' || s[1] == '\0') return false;
  uint64_t n;
  if (qim_u64_parse(s + 1, strlen(s + 1), &n) || n == 0) return false;
  *out = n;
  return true;
}

static bool is_text_mime(const char *mime) {
  return !mime || strcmp(mime, "text/plain") == 0 || strcmp(mime, "text/x-drafty") == 0;
}

/* The head as stored: a copy without "sender" (only the server sets it: PROTOCOL.md §5),
 * NULL when nothing is left. */
static json_t *head_stored(const json_t *head) {
  if (!head || json_object_size(head) == 0) return NULL;
  json_t *copy = json_deep_copy(head);
  json_object_del(copy, "sender");
  if (json_object_size(copy) == 0) {
    json_decref(copy);
    return NULL;
  }
  return copy;
}

/* Checks the head fields this module interprets and takes the seqs they name. */
static int head_fields(const json_t *head, qim_history_tinode_msg *out) {
  if (!head) return 0;
  const json_t *mime = json_object_get(head, "mime");
  if (mime && !json_is_string(mime)) return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_CONTENT);
  const json_t *replace = json_object_get(head, "replace");
  if (replace) {
    if (!parse_seq_ref(replace, &out->replace))
      return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_CONTENT);
    out->has_replace = true;
  }
  /* A reply to another topic ("grpX:5") is kept in the head but references nothing here. */
  out->has_reply_to = parse_seq_ref(json_object_get(head, "reply"), &out->reply_to);
  return 0;
}

/* ---- Drafty entities ------------------------------------------------------------------ */

static bool is_attachment_type(const char *tp) {
  return tp && (!strcmp(tp, "EX") || !strcmp(tp, "IM") || !strcmp(tp, "AU") || !strcmp(tp, "VD"));
}

/* One attachment reference: the ref plus what the entity says about it. */
static json_t *attachment_of(const char *tp, const json_t *data) {
  static const char *const keys[] = {"mime", "name", "size", "width", "height", "duration"};
  json_t *a = json_object();
  json_object_set_new(a, "tp", json_string(tp));
  json_object_set(a, "ref", json_object_get(data, "ref"));
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *v = json_object_get(data, keys[i]);
    if (v) json_object_set(a, keys[i], v);
  }
  return a;
}

static void add_mention(const json_t *data, uint32_t max, qim_history_tinode_msg *out) {
  const char *val = json_string_value(json_object_get(data, "val"));
  qim_user_id u;
  if (!val || qim_user_id_parse(val, strlen(val), &u)) return;
  for (size_t i = 0; i < out->mention_count; i++)
    if (qim_u128_eq(out->mentions[i].v, u.v)) return;
  if (out->mention_count >= max) return;
  out->mentions = qim_realloc(out->mentions, (out->mention_count + 1) * sizeof *out->mentions);
  out->mentions[out->mention_count++] = u;
}

/* Walks ent[]: MN → mention targets, EX/IM/AU/VD with data.ref → attachments. */
static void drafty_entities(const json_t *content, uint32_t max_mentions, json_t *attachments,
                            qim_history_tinode_msg *out) {
  const json_t *ent = json_is_object(content) ? json_object_get(content, "ent") : NULL;
  size_t i;
  const json_t *e;
  json_array_foreach(ent, i, e) {
    const char *tp = json_string_value(json_object_get(e, "tp"));
    const json_t *data = json_object_get(e, "data");
    if (!tp || !json_is_object(data)) continue;
    if (strcmp(tp, "MN") == 0)
      add_mention(data, max_mentions, out);
    else if (is_attachment_type(tp) && json_is_string(json_object_get(data, "ref")))
      json_array_append_new(attachments, attachment_of(tp, data));
  }
}

static void head_attachments(const json_t *head, json_t *attachments) {
  const json_t *list = head ? json_object_get(head, "attachments") : NULL;
  size_t i;
  const json_t *v;
  json_array_foreach(list, i, v) {
    if (!json_is_string(v)) continue;
    json_t *a = json_object();
    json_object_set(a, "ref", (json_t *)v);
    json_array_append_new(attachments, a);
  }
}

/* ---- from Tinode ----------------------------------------------------------------------- */

static int dump_to(const json_t *v, qim_bytes *out) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  if (!s) return -ENOMEM;
  out->n = strlen(s);
  out->p = qim_memdup(s, out->n);
  free(s);
  return 0;
}

static int build_content(const json_t *head, const json_t *content, json_t *stored_head,
                         json_t *attachments, qim_history_tinode_msg *out) {
  qim_message_content *c = &out->content;
  const char *mime = json_string_value(json_object_get(head, "mime"));
  json_t *env = json_object();
  json_object_set(env, "content", (json_t *)content);
  if (stored_head) json_object_set(env, "head", stored_head);
  int rc = dump_to(env, &c->payload_or_ciphertext);
  json_decref(env);
  if (rc) return rc;
  c->schema_version = QIM_PAYLOAD_SCHEMA_TINODE;
  if (!is_text_mime(mime)) {
    c->message_type = QIM_MESSAGE_TYPE_CUSTOM;
    c->custom_type = qim_strdup(mime);
  } else {
    c->message_type = json_array_size(attachments) ? QIM_MESSAGE_TYPE_MEDIA : QIM_MESSAGE_TYPE_TEXT;
  }
  if (json_array_size(attachments)) {
    json_t *meta = json_pack("{sO}", "attachments", attachments);
    rc = dump_to(meta, &c->media_metadata);
    json_decref(meta);
    c->has_media_metadata = rc == 0;
  }
  return rc;
}

int qim_history_content_from_tinode(const json_t *head, const json_t *content,
                                    uint32_t max_message_size, uint32_t max_mentions,
                                    qim_history_tinode_msg *out) {
  memset(out, 0, sizeof *out);
  if (json_is_null(head)) head = NULL;
  if (!content || json_is_null(content) || (head && !json_is_object(head)))
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_CONTENT);
  int rc = head_fields(head, out);
  if (rc) return rc;
  json_t *attachments = json_array();
  head_attachments(head, attachments);
  drafty_entities(content, max_mentions, attachments, out);
  json_t *stored_head = head_stored(head);
  rc = build_content(head, content, stored_head, attachments, out);
  json_decref(stored_head);
  json_decref(attachments);
  size_t size = out->content.payload_or_ciphertext.n + out->content.media_metadata.n;
  if (rc == 0 && size > max_message_size) rc = qim_err_raise(QIM_E_COMMIT_MESSAGE_TOO_LARGE);
  if (rc) qim_history_tinode_msg_free(out);
  return rc;
}

void qim_history_tinode_msg_free(qim_history_tinode_msg *m) {
  if (!m) return;
  qim_message_content_free(&m->content);
  qim_free(m->mentions);
  memset(m, 0, sizeof *m);
}

/* ---- to Tinode --------------------------------------------------------------------------- */

/* Opaque bytes (a qim client's ciphertext): base64 content, the type as the mime. */
static int opaque_to_tinode(const qim_message_content *c, json_t **head, json_t **content) {
  size_t cap = (c->payload_or_ciphertext.n + 2) / 3 * 4 + 1;
  char *b64 = qim_malloc(cap);
  qim_b64std_encode(c->payload_or_ciphertext.p, c->payload_or_ciphertext.n, b64, cap);
  *content = json_string(b64);
  qim_free(b64);
  *head = json_pack("{ss}", "mime", c->custom_type ? c->custom_type : "application/octet-stream");
  return 0;
}

int qim_history_content_to_tinode(const qim_message_content *c, json_t **head, json_t **content) {
  *head = NULL;
  *content = NULL;
  if (c->payload_or_ciphertext.n == 0) { /* wiped */
    *content = json_null();
    return 0;
  }
  if (c->schema_version != QIM_PAYLOAD_SCHEMA_TINODE) return opaque_to_tinode(c, head, content);
  json_t *env = json_loadb((const char *)c->payload_or_ciphertext.p, c->payload_or_ciphertext.n,
                           JSON_DECODE_ANY, NULL);
  json_t *body = json_object_get(env, "content");
  json_t *h = json_object_get(env, "head");
  if (!json_is_object(env) || !body || (h && !json_is_object(h))) {
    json_decref(env);
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVARIANT_VIOLATION);
  }
  *content = json_incref(body);
  *head = h ? json_incref(h) : NULL;
  json_decref(env);
  return 0;
}
