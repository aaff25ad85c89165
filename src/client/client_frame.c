/*
 * client_frame.c — what the client runtime reads out of qimd's JSON frames: a {sync}
 * entry as a MailboxEntry, a {meta sub} listing as a MemberPage or a SessionPage, topic
 * names as ConversationIds, and the cmid spelling (docs/protocol.md §3.6, §4.3, §4.6).
 * Anything that does not have the documented shape is -EPROTO; the caller turns that
 * into ProtocolFailure.
 */
#include <string.h>

#include "client/client_int.h"
#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "qim/shard.h"

void qim__client_cmid_text(const qim_client_message_id *cmid, char out[23]) {
  /* 16 bytes are always 22 characters: this cannot run out of room. */
  if (qim_b64url_encode(cmid->b, 16, out, 23) < 0) out[0] = '\0';
}

int qim__client_cmid_parse(const char *text, qim_client_message_id *out) {
  size_t n = 0;
  if (strlen(text) != 22 || qim_b64url_decode(text, 22, out->b, 16, &n) != 0 || n != 16)
    return -EPROTO;
  return 0;
}

int qim__client_conversation(qim_client *c, const char *topic, qim_conversation_id *out) {
  size_t n = strlen(topic);
  if (strncmp(topic, "grp", 3) == 0) {
    qim_group_id g;
    if (qim_group_id_parse(topic, n, &g) != 0) return -EPROTO;
    *out = qim_group_conversation(g);
    return 0;
  }
  qim_user_id self, peer;
  if (strncmp(topic, "usr", 3) != 0 || qim_user_id_parse(topic, n, &peer) != 0 ||
      qim_user_id_parse(c->self, strlen(c->self), &self) != 0)
    return -EPROTO;
  *out = qim_conversation_id_direct(c->tenant, self, peer);
  return 0;
}

static const char *str(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

static int event_type(const char *t, qim_event_type *out) {
  static const char *names[] = {"message", "mention", "membership", "control"};
  for (int i = 0; i < 4; i++)
    if (strcmp(t, names[i]) == 0) {
      *out = (qim_event_type)i;
      return 0;
    }
  return -EPROTO;
}

int qim__client_frame_entry(qim_client *c, json_t *e, qim_mailbox_entry *out) {
  memset(out, 0, sizeof *out);
  uint64_t id = 0, seq = 0;
  const char *eid = str(e, "event_id"), *from = str(e, "from"), *cmid = str(e, "cmid");
  if (qim_u64_parse(eid, strlen(eid), &id) != 0 || event_type(str(e, "type"), &out->event_type))
    return -EPROTO;
  json_t *js = json_object_get(e, "seq");
  if (js && (!json_is_integer(js) || json_integer_value(js) < 0)) return -EPROTO;
  seq = js ? (uint64_t)json_integer_value(js) : 0;
  out->tenant_id = c->tenant;
  if (qim_user_id_parse(c->self, strlen(c->self), &out->user_id) != 0) return -EPROTO;
  out->event_id = id;
  out->mailbox_seq = id >> 8;
  out->event_ordinal = (uint8_t)(id & 0xff);
  out->coordinates.conversation_seq = seq;
  if (qim__client_conversation(c, str(e, "topic"), &out->coordinates.conversation_id))
    return -EPROTO;
  if (from[0] && qim_user_id_parse(from, strlen(from), &out->sender_id) != 0) return -EPROTO;
  if (cmid[0]) {
    if (qim__client_cmid_parse(cmid, &out->client_message_id)) return -EPROTO;
    out->has_client_message_id = true;
  }
  const char *ts = str(e, "ts");
  if (ts[0] && qim_timestamp_parse(ts, strlen(ts), &out->created_at) != 0) return -EPROTO;
  json_t *content = json_object_get(e, "content");
  if (content) {
    /* The Tinode content as compact JSON; a control or membership entry's JSON likewise. */
    char *text = json_dumps(content, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return -ENOMEM;
    out->has_content = true;
    out->body_included = true;
    out->content.message_type = out->event_type == QIM_EVENT_TYPE_MESSAGE
                                    ? QIM_MESSAGE_TYPE_TEXT
                                    : QIM_MESSAGE_TYPE_CONTROL;
    out->content.payload_or_ciphertext.n = strlen(text);
    out->content.payload_or_ciphertext.p = qim_memdup(text, strlen(text));
    free(text);
  }
  return 0;
}

/* Tinode access letters to a role: O owner, A admin, W member, anything less a guest. */
static qim_group_role role_of(const char *mode) {
  if (strchr(mode, 'O')) return QIM_GROUP_ROLE_OWNER;
  if (strchr(mode, 'A')) return QIM_GROUP_ROLE_ADMIN;
  if (strchr(mode, 'W')) return QIM_GROUP_ROLE_MEMBER;
  return QIM_GROUP_ROLE_GUEST;
}

/* A listing's length and a zeroed array for it; -EPROTO when `subs` is not a list. */
static int alloc_items(json_t *subs, size_t size, void **items, size_t *n) {
  if (subs && !json_is_array(subs)) return -EPROTO;
  *n = json_array_size(subs);
  *items = *n ? qim_calloc(*n, size) : NULL;
  return 0;
}

int qim__client_frame_members(json_t *subs, qim_member_page **out) {
  size_t n = 0;
  void *items = NULL;
  if (alloc_items(subs, sizeof(qim_group_member), &items, &n)) return -EPROTO;
  qim_member_page *p = qim_calloc(1, sizeof *p);
  p->members = items;
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_array_get(subs, i);
    const char *user = str(s, "user");
    if (qim_user_id_parse(user, strlen(user), &p->members[i].user_id) != 0) {
      qim_free(p->members);
      qim_free(p);
      return -EPROTO;
    }
    p->members[i].role = role_of(str(json_object_get(s, "acs"), "mode"));
    p->members[i].has_left_at = json_is_string(json_object_get(s, "deleted"));
  }
  p->member_count = n;
  *out = p;
  return 0;
}

int qim__client_frame_sessions(qim_client *c, json_t *subs, qim_session_page **out) {
  size_t n = 0;
  void *items = NULL;
  if (alloc_items(subs, sizeof(qim_session_summary), &items, &n)) return -EPROTO;
  qim_session_page *p = qim_calloc(1, sizeof *p);
  p->sessions = items;
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_array_get(subs, i);
    qim_session_summary *ss = &p->sessions[p->session_count];
    json_int_t seq = json_integer_value(json_object_get(s, "seq"));
    json_int_t read = json_integer_value(json_object_get(s, "read"));
    /* A listing may name topics the runtime has no id for (fnd, sys): they are skipped. */
    if (qim__client_conversation(c, str(s, "topic"), &ss->conversation_id) != 0) continue;
    ss->latest_conversation_seq = seq > 0 ? (uint64_t)seq : 0;
    ss->unread_count = seq > read ? (uint32_t)(seq - (read > 0 ? read : 0)) : 0;
    p->session_count++;
  }
  *out = p;
  return 0;
}
