/*
 * fanout_plan.c — the pure half of the fanout: from an envelope and its resolved
 * recipients to a FanoutPlan (one GroupDispatch per target shard, chunked), and the
 * determinism check that compares a replayed dispatch with the stored one. Nothing here
 * reads a clock, a random source or the store, which is what makes replays byte-identical.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fanout/fanout.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

/* A recipient with its shard, sorted by (shard, user). */
typedef struct placed {
  qim_mailbox_shard_id shard;
  qim_user_id user;
} placed;

static int placed_cmp(const void *a, const void *b) {
  const placed *x = a, *y = b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  return qim_u128_cmp(x->user.v, y->user.v);
}

/* Recipients placed on their shards, sorted, duplicates dropped; returns the count. */
static size_t place_recipients(const qim_user_id *users, size_t count, qim_tenant_id tenant,
                               const qim_shard_config *shards, placed **out) {
  placed *p = count ? qim_malloc(count * sizeof *p) : NULL;
  for (size_t i = 0; i < count; i++) p[i] = (placed){qim_shard_of_user(shards, tenant, users[i]), users[i]};
  if (count) qsort(p, count, sizeof *p, placed_cmp);
  size_t n = 0;
  for (size_t i = 0; i < count; i++)
    if (n == 0 || placed_cmp(&p[n - 1], &p[i]) != 0) p[n++] = p[i];
  *out = p;
  return n;
}

/* Fills the parts every dispatch of one envelope shares. */
static void dispatch_common(qim_group_dispatch *d, const qim_committed_envelope *env) {
  const qim_commit_intent *in = &env->intent;
  d->source_message = env->record.coordinates;
  /* who sent it (dispatch encoding v2): the materializer needs the tenant for the lane hash,
   * and the sender and cmid for MailboxEntry */
  d->tenant_id = env->record.sender.tenant_id;
  d->sender_id = env->record.sender.user_id;
  d->client_message_id = env->record.client_message_id;
  d->membership_version =
      in->delivery.audience.kind == QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT ? in->delivery.audience.group.membership_version : 0;
  qim_message_content_copy(&d->content, &env->record.content);
  d->inline_body = in->delivery.inline_body;
  d->created_at = in->delivery.created_at;
  d->trace_id = in->trace_id;
}

/* The recipients p[0..n) (one shard) cut into chunks of chunk_size. */
static void dispatch_chunks(qim_group_dispatch *d, const placed *p, size_t n, uint32_t chunk_size) {
  d->chunk_count = (n + chunk_size - 1) / chunk_size;
  d->recipient_chunks = qim_calloc(d->chunk_count, sizeof *d->recipient_chunks);
  for (size_t c = 0; c < d->chunk_count; c++) {
    qim_recipient_chunk *ch = &d->recipient_chunks[c];
    size_t from = c * chunk_size, to = from + chunk_size < n ? from + chunk_size : n;
    ch->chunk_id = (uint32_t)c;
    ch->recipient_count = to - from;
    ch->recipient_ids = qim_malloc(ch->recipient_count * sizeof *ch->recipient_ids);
    for (size_t i = from; i < to; i++) ch->recipient_ids[i - from] = p[i].user;
  }
}

int qim_fanout_plan_make(const qim_committed_envelope *env, qim_log_position source,
                         const qim_user_id *recipients, size_t count, const qim_shard_config *shards,
                         uint32_t chunk_size, qim_fanout_plan *out) {
  *out = (qim_fanout_plan){.source = source};
  if (chunk_size == 0 || shards->shard_count == 0) return -EINVAL;
  placed *p;
  size_t n = place_recipients(recipients, count, env->intent.key.tenant_id, shards, &p);
  size_t groups = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || p[i].shard != p[i - 1].shard) groups++;
  out->dispatches = groups ? qim_calloc(groups, sizeof *out->dispatches) : NULL;
  for (size_t i = 0, g = 0; i < n; g++) {
    size_t j = i;
    while (j < n && p[j].shard == p[i].shard) j++;
    qim_group_dispatch *d = &out->dispatches[g];
    d->target_shard = p[i].shard;
    d->dispatch_id = qim_dispatch_id_make(&env->record.coordinates.message_id, p[i].shard);
    dispatch_common(d, env);
    dispatch_chunks(d, p + i, j - i, chunk_size);
    i = j;
  }
  out->dispatch_count = groups;
  qim_free(p);
  return 0;
}

void qim_fanout_plan_free(qim_fanout_plan *p) {
  if (!p) return;
  for (size_t i = 0; i < p->dispatch_count; i++) qim_group_dispatch_free(&p->dispatches[i]);
  qim_free(p->dispatches);
  *p = (qim_fanout_plan){0};
}

/* ---- the users a membership Control names ------------------------------------------------ */

/* Bound on the users one membership Control may name (the group size limit is far below). */
#define MEMBERSHIP_USERS_MAX 1000000

void qim_fanout_membership_users(const qim_message_content *c, qim_user_id **out, size_t *count) {
  *out = NULL;
  *count = 0;
  if (c->message_type != QIM_MESSAGE_TYPE_CONTROL || !c->custom_type ||
      strcmp(c->custom_type, QIM_FANOUT_MEMBERSHIP_TYPE) != 0 || c->payload_or_ciphertext.n == 0)
    return;
  json_t *root = json_loadb((const char *)c->payload_or_ciphertext.p, c->payload_or_ciphertext.n,
                            JSON_REJECT_DUPLICATES, NULL);
  json_t *changes = root ? json_object_get(root, "changes") : NULL;
  size_t n = json_is_array(changes) ? json_array_size(changes) : 0;
  if (n > MEMBERSHIP_USERS_MAX) n = 0;
  qim_user_id *users = n ? qim_malloc(n * sizeof *users) : NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = json_string_value(json_object_get(json_array_get(changes, i), "user"));
    if (name && qim_user_id_parse(name, strlen(name), &users[k]) == 0) k++;
  }
  json_decref(root);
  if (k == 0) {
    qim_free(users);
    users = NULL;
  }
  *out = users;
  *count = k;
}

/* ---- redaction and the determinism check ------------------------------------------------ */

static int content_redacted(const qim_message_content *c) {
  return c->payload_or_ciphertext.n == 0 && !c->has_media_metadata;
}

static void content_drop_body(qim_message_content *c) {
  qim_bytes_free(&c->payload_or_ciphertext);
  qim_bytes_free(&c->media_metadata);
  c->has_media_metadata = false;
}

int qim_fanout_dispatch_redact(const qim_bytes *stored, qim_bytes *out) {
  qim_group_dispatch d;
  int rc = qim_group_dispatch_decode(stored->p, stored->n, &d);
  if (rc) return -EINVAL;
  content_drop_body(&d.content);
  rc = qim_group_dispatch_encode(&d, out);
  qim_group_dispatch_free(&d);
  return rc;
}

int qim_fanout_dispatch_check(const qim_bytes *stored, const qim_bytes *planned) {
  if (qim_bytes_equal(stored, planned)) return 0;
  qim_group_dispatch s, p;
  if (qim_group_dispatch_decode(stored->p, stored->n, &s))
    return qim_err_raise(QIM_E_FANOUT_DETERMINISM_VIOLATION);
  if (qim_group_dispatch_decode(planned->p, planned->n, &p)) {
    qim_group_dispatch_free(&s);
    return qim_err_raise(QIM_E_FANOUT_DETERMINISM_VIOLATION);
  }
  int redacted = content_redacted(&s.content) || content_redacted(&p.content);
  content_drop_body(&s.content);
  content_drop_body(&p.content);
  qim_bytes se = {0}, pe = {0};
  int same = redacted && qim_group_dispatch_encode(&s, &se) == 0 && qim_group_dispatch_encode(&p, &pe) == 0 &&
             qim_bytes_equal(&se, &pe);
  qim_free(se.p);
  qim_free(pe.p);
  qim_group_dispatch_free(&s);
  qim_group_dispatch_free(&p);
  return same ? 0 : qim_err_raise(QIM_E_FANOUT_DETERMINISM_VIOLATION);
}
