/*
 * fanout_fixture.h — envelopes and user ids for the fanout tests, built by hand so the
 * planning tests need no store. Header-only (static functions) because every
 * tests/unit/<room>/test_*.c is its own binary.
 */
#ifndef QIM_FANOUT_FIXTURE_H
#define QIM_FANOUT_FIXTURE_H

#include <string.h>

#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

#define FX_TENANT ((qim_tenant_id){{0, 7}})

static inline qim_user_id fx_user(uint64_t n) { return (qim_user_id){{0x5500, n}}; }

/* An envelope of a Text message "hello" in `conv` with seq `seq`; the audience is set by
 * fx_direct / fx_group. Free with qim_committed_envelope_free. */
static inline void fx_envelope(qim_committed_envelope *e, qim_conversation_id conv, uint64_t seq) {
  memset(e, 0, sizeof *e);
  qim_commit_intent *in = &e->intent;
  in->key.tenant_id = FX_TENANT;
  in->key.sender_id = fx_user(1);
  in->key.client_message_id.b[15] = (uint8_t)seq;
  in->key.client_message_id.b[0] = 1;
  /* unique per (conversation, seq): 8 bytes of the conversation, 8 of the seq */
  for (int i = 0; i < 8; i++) in->coordinates.message_id.b[i] = (uint8_t)(conv.v.lo >> (56 - 8 * i));
  for (int i = 0; i < 8; i++) in->coordinates.message_id.b[8 + i] = (uint8_t)(seq >> (56 - 8 * i));
  in->coordinates.conversation_id = conv;
  in->coordinates.conversation_seq = seq;
  in->coordinates.last_activity_id.b[3] = (uint8_t)seq;
  in->state = QIM_COMMIT_STATE_OUTBOXED;
  in->delivery.inline_body = true;
  in->delivery.created_at = 1700000000000ull + seq;
  for (int i = 0; i < 16; i++) in->trace_id.b[i] = (uint8_t)(0xA0 + i);
  qim_message_record *r = &in->record;
  r->coordinates = in->coordinates;
  r->sender = (qim_authenticated_actor){FX_TENANT, fx_user(1), {{0, 9}}};
  r->client_message_id = in->key.client_message_id;
  r->content.message_type = QIM_MESSAGE_TYPE_TEXT;
  r->content.schema_version = 1;
  r->content.payload_or_ciphertext.p = (uint8_t *)qim_strdup("hello");
  r->content.payload_or_ciphertext.n = 5;
  r->created_at = in->delivery.created_at;
  qim_message_record_copy(&e->record, r);
}

static inline void fx_direct(qim_committed_envelope *e, const qim_user_id *users, size_t n) {
  qim_delivery_audience *a = &e->intent.delivery.audience;
  a->kind = QIM_DELIVERY_AUDIENCE_DIRECT;
  a->direct.recipients = qim_memdup(users, n * sizeof *users);
  a->direct.recipient_count = n;
}

static inline void fx_group(qim_committed_envelope *e, qim_membership_version v, uint32_t count,
                            const qim_mailbox_shard_id *shards, size_t nshards) {
  qim_delivery_audience *a = &e->intent.delivery.audience;
  a->kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
  a->group.group_id.v = e->intent.coordinates.conversation_id.v;
  a->group.membership_version = v;
  a->group.member_count = count;
  a->group.target_shards = nshards ? qim_memdup(shards, nshards * sizeof *shards) : NULL;
  a->group.target_shard_count = nshards;
}

#endif
