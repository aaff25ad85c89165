/*
 * group_control.c — announcing a membership change: the Control message(s) that carry
 * it through the commit pipeline to every member's mailbox (DESIGN.md §1 rule 8).
 *
 * The JSON (docs/groups.md) names the version, the seq position, who acted and, per
 * member, what changed. A change touching many members is split into parts of
 * cfg.control_changes members so every Control stays far below max_message_size. Each
 * part's ClientMessageId is derived from (conversation, version, part): committing the
 * same part twice yields the same message, never a second one.
 */
#include <blake3.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "group/group_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"

static const char CMID_DOMAIN[] = "qim.membership-control.v1";

qim_client_message_id qim__group_control_cmid(qim_conversation_id conv, qim_membership_version version, uint32_t part) {
  uint8_t buf[16 + 8 + 4];
  qim_u128_to_be(conv.v, buf);
  for (int i = 0; i < 8; i++) buf[16 + i] = (uint8_t)(version >> (56 - 8 * i));
  for (int i = 0; i < 4; i++) buf[24 + i] = (uint8_t)(part >> (24 - 8 * i));
  qim_client_message_id id;
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, CMID_DOMAIN, sizeof CMID_DOMAIN); /* with its NUL, like core's domains */
  blake3_hasher_update(&h, buf, sizeof buf);
  blake3_hasher_finalize(&h, id.b, sizeof id.b);
  id.b[15] |= 1; /* never the all-zero (invalid) cmid */
  return id;
}

static json_t *user_json(qim_user_id u) {
  char name[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(u, name, sizeof name);
  return json_string(name);
}

static json_t *change_json(const qim__group_change *c) {
  json_t *o = json_object();
  json_object_set_new(o, "user", user_json(c->user));
  json_object_set_new(o, "change", json_string(c->change));
  if (c->has_role) {
    char mode[QIM_GROUP_MODE_CAP];
    qim_group_mode_format(qim_group_role_mode(c->role), mode);
    json_object_set_new(o, "role", json_string(qim_group_role_name(c->role)));
    json_object_set_new(o, "mode", json_string(mode));
  }
  return o;
}

char *qim__group_control_json(const qim__group_event *ev, size_t from, size_t to, uint32_t part, uint32_t parts) {
  char group[QIM_TOPIC_NAME_CAP];
  qim_group_id_format((qim_group_id){ev->conversation_id.v}, group, sizeof group);
  json_t *o = json_object();
  json_object_set_new(o, "op", json_string(ev->op));
  json_object_set_new(o, "group", json_string(group));
  json_object_set_new(o, "version", json_integer((json_int_t)ev->version));
  json_object_set_new(o, "position", json_integer((json_int_t)ev->position));
  json_object_set_new(o, "part", json_integer(part));
  json_object_set_new(o, "parts", json_integer(parts));
  if (ev->actor) json_object_set_new(o, "actor", user_json(ev->actor->user_id));
  if (ev->principal) {
    json_t *p = json_object();
    json_object_set_new(p, "service", json_string(ev->principal->service_name));
    json_object_set_new(p, "subject", json_string(ev->principal->subject));
    json_object_set_new(o, "principal", p);
  }
  json_t *arr = json_array();
  for (size_t i = from; i < to; i++) json_array_append_new(arr, change_json(&ev->changes[i]));
  json_object_set_new(o, "changes", arr);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

/* Failures worth another try: the store or commit was momentarily unable. */
static bool transient(int rc) { return rc == QIM_E_COMMIT_UNAVAILABLE || rc == -EAGAIN; }

static int commit_part(qim_groups *g, const qim_commit_control *ctl, qim_commit_result *res) {
  int rc = 0;
  for (uint32_t attempt = 1; attempt <= g->cfg.control_attempts; attempt++) {
    *res = (qim_commit_result){0};
    rc = qim_commit_send_control_sync(g->commit, ctl, res);
    if (rc == QIM_E_COMMIT_RECOVERABLE) rc = 0; /* durable in flight; recovery finishes it */
    if (!transient(rc)) break;
    nanosleep(&(struct timespec){0, 20000000L * attempt}, NULL);
  }
  return rc;
}

void qim__group_announce(qim_groups *g, const qim__group_event *ev, const qim_trace_id *trace,
                         qim_group_change_result *out) {
  uint32_t per = g->cfg.control_changes;
  uint32_t parts = ev->count ? (uint32_t)((ev->count + per - 1) / per) : 1;
  qim_commit_control ctl = {
      .actor = ev->actor && ev->actor_still_member ? *ev->actor
                                                  : (qim_authenticated_actor){ev->tenant, ev->owner, {{0, 0}}},
      .conversation_id = ev->conversation_id,
      .content = {.message_type = QIM_MESSAGE_TYPE_CONTROL, .custom_type = (char *)QIM_GROUP_CONTROL_TYPE,
                  .schema_version = QIM_GROUP_CONTROL_SCHEMA},
      .retention_class = QIM_RETENTION_CLASS_DEFAULT,
      .trace_id = trace ? *trace : qim_trace_id_new(),
  };
  out->control_status = 0;
  out->control_count = 0;
  for (uint32_t part = 1; part <= parts; part++) {
    size_t from = (size_t)(part - 1) * per, to = from + per < ev->count ? from + per : ev->count;
    char *json = qim__group_control_json(ev, from, to, part, parts);
    ctl.client_message_id = qim__group_control_cmid(ev->conversation_id, ev->version, part);
    ctl.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)json, json ? strlen(json) : 0};
    qim_commit_result res;
    int rc = json ? commit_part(g, &ctl, &res) : -ENOMEM;
    free(json);
    if (rc) {
      QIM_LOGE(&ctl.trace_id, "group.control_failed", "version=%llu part=%u rc=%s", (unsigned long long)ev->version,
               part, qim_err_name(rc));
      if (!out->control_status) out->control_status = rc;
      continue;
    }
    if (out->control_count++ == 0) out->control = res.ack;
  }
}
