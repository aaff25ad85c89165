/*
 * store_fixture.h — helpers shared by the SQLite backend's unit tests: opening a store in
 * a temporary directory, building ids, conversations and commit proposals, and a gate
 * that holds the writer thread inside a batch (via the before_commit hook) so a test
 * can line up the next batch deterministically.
 */
#ifndef QIM_TEST_STORE_FIXTURE_H
#define QIM_TEST_STORE_FIXTURE_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"
#include "testsupport.h"

static inline qim_u128 fx_id(uint64_t n) {
  return (qim_u128){0x5100000000000000ull, n};
}
static inline qim_tenant_id fx_tenant(void) {
  return (qim_tenant_id){fx_id(1)};
}
static inline qim_user_id fx_user(uint64_t n) {
  return (qim_user_id){fx_id(100 + n)};
}
static inline qim_conversation_id fx_conv(uint64_t n) {
  return (qim_conversation_id){fx_id(1000 + n)};
}

static inline qim_store_options fx_options(void) {
  qim_store_options o = {0};
  o.shards = (qim_shard_config){4, 2};
  return o;
}

/* "sqlite:<dir>/store.db" plus an optional "?..." suffix; caller frees. */
static inline char *fx_url(const char *dir, const char *suffix) {
  char *url;
  if (asprintf(&url, "sqlite:%s/store.db%s", dir, suffix ? suffix : "") < 0) abort();
  return url;
}

static inline qim_store *fx_open(const char *dir, const char *suffix, const qim_store_options *o) {
  char *url = fx_url(dir, suffix);
  qim_store *s = NULL;
  int rc = qim_store_open(url, o, &s);
  free(url);
  assert_int_equal(rc, 0);
  return s;
}

static inline void fx_create_group(qim_store *s, uint64_t conv, uint64_t owner) {
  qim_store_conv_create_req r = {0};
  r.conv.tenant_id = fx_tenant();
  r.conv.conversation_id = fx_conv(conv);
  r.conv.kind = QIM_CONVERSATION_GROUP;
  r.conv.owner_id = fx_user(owner);
  r.now = 1000;
  assert_int_equal(QIM_STORE_SYNC(s, conversations.create, &r), 0);
}

/* A text message proposal from `sender` into group `conv`; `n` makes the cmid and
 * message id unique. Owns its heap members: free with qim_commit_intent_free. */
static inline qim_commit_intent fx_proposal(uint64_t conv, uint64_t sender, uint64_t n,
                                            const char *text) {
  qim_commit_intent p = {0};
  p.key.tenant_id = fx_tenant();
  p.key.sender_id = fx_user(sender);
  memset(p.key.client_message_id.b, 0, 16);
  p.key.client_message_id.b[0] = 0xC1;
  for (int i = 0; i < 8; i++) p.key.client_message_id.b[8 + i] = (uint8_t)(n >> (56 - 8 * i));
  p.coordinates.conversation_id = fx_conv(conv);
  p.coordinates.message_id.b[0] = 0x11;
  for (int i = 0; i < 8; i++) p.coordinates.message_id.b[8 + i] = (uint8_t)(n >> (56 - 8 * i));
  p.coordinates.last_activity_id = (qim_last_activity_id){{0}};
  memcpy(p.coordinates.last_activity_id.b, p.coordinates.message_id.b, 16);
  p.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
  p.delivery.inline_body = true;
  p.delivery.created_at = 5000 + n;
  p.record.coordinates = p.coordinates;
  p.record.sender = (qim_authenticated_actor){fx_tenant(), fx_user(sender), {fx_id(9)}};
  p.record.client_message_id = p.key.client_message_id;
  p.record.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  p.record.content.payload_or_ciphertext.n = strlen(text);
  p.record.content.payload_or_ciphertext.p = (uint8_t *)qim_strdup(text);
  p.record.created_at = 5000 + n;
  return p;
}

/* The whole commit of one message: reserve + RECORDED + OUTBOXED + COMMITTED. */
static inline qim_conversation_seq fx_commit(qim_store *s, const qim_commit_intent *p) {
  qim_store_intent_reserve_req rr = {0};
  rr.proposal = p;
  assert_int_equal(QIM_STORE_SYNC(s, intents.reserve, &rr), 0);
  qim_conversation_seq seq = rr.out.intent.coordinates.conversation_seq;
  qim_commit_intent_free(&rr.out.intent);
  for (int to = QIM_COMMIT_STATE_RECORDED; to <= QIM_COMMIT_STATE_COMMITTED; to++) {
    qim_store_intent_advance_req ar = {0};
    ar.key = p->key;
    ar.to = (qim_commit_state)to;
    ar.now = 9000;
    assert_int_equal(QIM_STORE_SYNC(s, intents.advance, &ar), 0);
  }
  return seq;
}

/* A hard delete of seq in conversation conv: DELETED with the body wiped everywhere. */
static inline void fx_hard_delete(qim_store *s, uint64_t conv, qim_conversation_seq seq) {
  qim_store_record_set_state_req w = {0};
  w.tenant_id = fx_tenant();
  w.conversation_id = fx_conv(conv);
  w.seq = seq;
  w.state = QIM_MESSAGE_STATE_DELETED;
  w.wipe_body = true;
  assert_int_equal(QIM_STORE_SYNC(s, history.set_state, &w), 0);
}

/* ---- the writer gate ------------------------------------------------------------------ */

typedef struct fx_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int armed;   /* the next commit waits */
  int entered; /* a commit is waiting */
} fx_gate;

static inline void fx_gate_init(fx_gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->armed = g->entered = 0;
}

/* The before_commit hook. */
static inline void fx_gate_hook(void *ctx) {
  fx_gate *g = ctx;
  pthread_mutex_lock(&g->mu);
  if (g->armed) {
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (g->armed) pthread_cond_wait(&g->cv, &g->mu);
    g->entered = 0;
  }
  pthread_mutex_unlock(&g->mu);
}

static inline void fx_gate_arm(fx_gate *g) {
  pthread_mutex_lock(&g->mu);
  g->armed = 1;
  pthread_mutex_unlock(&g->mu);
}

/* Waits until the writer sits in the hook. */
static inline void fx_gate_wait_entered(fx_gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->entered) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static inline void fx_gate_release(fx_gate *g) {
  pthread_mutex_lock(&g->mu);
  g->armed = 0;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static inline void fx_gate_destroy(fx_gate *g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}

/* ---- counting completions on a blocking queue ---------------------------------------- */

static inline void fx_count_done(qim_store_req *r) {
  (*(int *)r->data)++;
}

static inline void fx_async(qim_store_req *r, qim_cq *cq, int *counter) {
  r->cq = cq;
  r->done = fx_count_done;
  r->data = counter;
}

static inline void fx_wait_count(qim_cq *cq, int *counter, int want) {
  while (*counter < want) qim_cq_wait(cq, 1000);
}

#endif
