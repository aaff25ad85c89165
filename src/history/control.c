/*
 * control.c — the Control messages that carry every history change to the members'
 * devices (DESIGN.md §1 rule 8): custom_type "qim.history", schema 1, compact JSON with an
 * "op" (formats in docs/history.md), committed through the commit module with a
 * ClientMessageId derived from the change, so that committing the same change twice is
 * one message.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blake3.h"
#include "history/history_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

static const char CMID_DOMAIN[] = "qim.history-control.v1"; /* hashed with its NUL */

static void put_be64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* blake3(domain\0 || op || conversation_be16 || a_be8 || b_be16)[0..16], lowest bit of the
 * last byte set so it is never the all-zero (invalid) id. */
static qim_client_message_id control_cmid(qim__control_op op, qim_conversation_id conv, uint64_t a,
                                          qim_u128 b) {
  uint8_t in[1 + 16 + 8 + 16];
  in[0] = (uint8_t)op;
  qim_u128_to_be(conv.v, in + 1);
  put_be64(in + 17, a);
  qim_u128_to_be(b, in + 25);
  blake3_hasher hs;
  blake3_hasher_init(&hs);
  blake3_hasher_update(&hs, CMID_DOMAIN, sizeof CMID_DOMAIN);
  blake3_hasher_update(&hs, in, sizeof in);
  qim_client_message_id id;
  blake3_hasher_finalize(&hs, id.b, sizeof id.b);
  id.b[15] |= 1;
  return id;
}

json_t *qim__user_json(qim_user_id u) {
  char name[QIM_TOPIC_NAME_CAP];
  qim_user_id_format(u, name, sizeof name);
  return json_string(name);
}

json_t *qim__ranges_json(const qim_store_seq_range *r, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_object();
    json_object_set_new(o, "low", json_integer((json_int_t)r[i].low));
    if (r[i].hi != r[i].low + 1) json_object_set_new(o, "hi", json_integer((json_int_t)r[i].hi));
    json_array_append_new(a, o);
  }
  return a;
}

/* Failures worth another try: the store or the commit was momentarily unable. */
static bool transient(int rc) {
  return rc == QIM_E_COMMIT_UNAVAILABLE || rc == -EAGAIN || rc == QIM_AGAIN;
}

static int commit_with_retries(qim_history *h, const qim_commit_control *ctl) {
  int rc = 0;
  for (uint32_t attempt = 1; attempt <= h->cfg.control_attempts; attempt++) {
    qim_commit_result res = {0};
    rc = qim_commit_send_control_sync(h->commit, ctl, &res);
    if (rc == QIM_E_COMMIT_RECOVERABLE) rc = 0; /* durable in flight: recovery finishes it */
    if (!transient(rc)) break;
    nanosleep(&(struct timespec){0, 20000000L * attempt}, NULL);
  }
  return rc;
}

int qim__history_control(qim_history *h, qim__control_op op, const qim_authenticated_actor *actor,
                         qim_conversation_id conv, const qim_user_id *audience_user, uint64_t a,
                         qim_u128 b, json_t *payload, const qim_trace_id *trace) {
  char *text = json_dumps(payload, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(payload);
  if (!text) return -ENOMEM;
  qim_delivery_audience direct = {.kind = QIM_DELIVERY_AUDIENCE_DIRECT};
  if (audience_user) {
    direct.direct.recipients = (qim_user_id *)audience_user;
    direct.direct.recipient_count = 1;
  }
  qim_commit_control ctl = {
      .actor = *actor,
      .conversation_id = conv,
      .client_message_id = control_cmid(op, conv, a, b),
      .content = {.message_type = QIM_MESSAGE_TYPE_CONTROL,
                  .custom_type = (char *)QIM_HISTORY_CONTROL_TYPE,
                  .schema_version = QIM_HISTORY_CONTROL_SCHEMA,
                  .payload_or_ciphertext = {(uint8_t *)text, strlen(text)}},
      .retention_class = QIM_RETENTION_CLASS_DEFAULT,
      .trace_id = trace ? *trace : qim_trace_id_new(),
      .audience = audience_user ? &direct : NULL,
  };
  int rc = commit_with_retries(h, &ctl);
  if (rc)
    QIM_LOGE(&ctl.trace_id, "history.control_failed", "op=%d err=%s", (int)op, qim_err_name(rc));
  free(text); /* jansson allocated it */
  return rc;
}
