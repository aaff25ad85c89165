/*
 * wrap_store.h — a forwarding store for fault injection at the store-interface level.
 *
 * Every call goes to the inner store unchanged, except where a switch is on:
 *   split_append   logs.append with a consumer offset runs the appends WITHOUT the offset
 *                  (as a backend without cross-key transactions would, or a crash right
 *                  between the two halves), then completes with
 *                  COMMIT_LOG_TRANSACTION_ABORTED (the offset commit failed) — or, with
 *                  kill_after_split, SIGKILLs the process right there;
 *   park_append    a combined append runs in the inner store as usual (its COMMIT and its
 *                  `committed` hint) but its completion is parked until
 *                  wrap_release_parked posts it: a sync that has not finished yet;
 *   unconfirm_append  a combined append that committed completes with
 *                  COMMIT_LOG_PUBLICATION_NOT_DURABLE, as when the sync after it failed;
 *   fail_read      logs.read completes with -EIO;
 *   fail_conv_get  conversations.get completes with -EIO;
 *   fail_reserve   intents.reserve completes with -EIO;
 *   tamper         members_at results pass through tamper(req, ctx) first (a changed
 *                  stored snapshot).
 * Overridden calls run the inner call synchronously on the calling thread, so use the
 * wrapper from worker/test threads (QIM_STORE_SYNC callers), as the fanout and groups do.
 * Header-only: each tests/unit/<room>/test_*.c is its own binary.
 */
#ifndef QIM_WRAP_STORE_H
#define QIM_WRAP_STORE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "store/store.h"

typedef struct wrap_store {
  qim_store base;
  qim_store_vtable vt;
  qim_store *inner;
  atomic_int split_append, kill_after_split, fail_read, fail_conv_get, fail_reserve;
  atomic_int splits;  /* combined appends split so far */
  atomic_int park_append, unconfirm_append;
  pthread_mutex_t mu; /* the parked completions */
  struct wrap_parked { qim_store_req *req; void (*done)(qim_store_req *); void *data; bool arrived; } parked[16];
  int intercepted;      /* combined appends that went through the two switches above */
  void (*tamper)(qim_store_members_at_req *r, void *ctx);
  void *tamper_ctx;
} wrap_store;

static inline wrap_store *wrap_of(qim_store *s) { return (wrap_store *)s; }

#define WRAP_FN static __attribute__((unused))
#define WRAP_FWD(grp, fn, type)                                                   \
  WRAP_FN int wrap_##grp##_##fn(qim_store *s, type *r) {                            \
    return wrap_of(s)->inner->vt->grp.fn(wrap_of(s)->inner, r);                     \
  }
WRAP_FWD(accounts, user_create, qim_store_user_create_req)
WRAP_FWD(accounts, user_get, qim_store_user_get_req)
WRAP_FWD(accounts, user_update, qim_store_user_update_req)
WRAP_FWD(accounts, cred_create, qim_store_cred_create_req)
WRAP_FWD(accounts, cred_get, qim_store_cred_get_req)
WRAP_FWD(accounts, cred_update, qim_store_cred_update_req)
WRAP_FWD(accounts, apikey_put, qim_store_apikey_put_req)
WRAP_FWD(accounts, apikey_get, qim_store_apikey_get_req)
WRAP_FWD(conversations, create, qim_store_conv_create_req)
WRAP_FWD(conversations, update, qim_store_conv_update_req)
WRAP_FWD(conversations, members_change, qim_store_members_change_req)
WRAP_FWD(conversations, member_get, qim_store_member_get_req)
WRAP_FWD(conversations, member_receipt, qim_store_member_receipt_req)
WRAP_FWD(conversations, subscriptions, qim_store_subscriptions_req)
WRAP_FWD(conversations, member_private, qim_store_member_private_req)
WRAP_FWD(conversations, members_prune, qim_store_members_prune_req)
WRAP_FWD(intents, advance, qim_store_intent_advance_req)
WRAP_FWD(intents, load, qim_store_intent_load_req)
WRAP_FWD(intents, list_in_flight, qim_store_intent_list_req)
WRAP_FWD(intents, forget, qim_store_intent_forget_req)
WRAP_FWD(history, get, qim_store_record_get_req)
WRAP_FWD(history, query, qim_store_record_query_req)
WRAP_FWD(history, set_state, qim_store_record_set_state_req)
WRAP_FWD(history, dellog_add, qim_store_dellog_add_req)
WRAP_FWD(history, dellog_query, qim_store_dellog_query_req)
WRAP_FWD(history, expire, qim_store_record_expire_req)
WRAP_FWD(logs, consumer_get, qim_store_log_consumer_get_req)
WRAP_FWD(logs, consumer_set, qim_store_log_consumer_set_req)
WRAP_FWD(logs, trim, qim_store_log_trim_req)
WRAP_FWD(logs, redact, qim_store_log_redact_req)
WRAP_FWD(mailboxes, shard_takeover, qim_store_shard_takeover_req)
WRAP_FWD(mailboxes, shard_get, qim_store_shard_get_req)
WRAP_FWD(mailboxes, append, qim_store_mailbox_append_req)
WRAP_FWD(mailboxes, progress_get, qim_store_progress_get_req)
WRAP_FWD(mailboxes, range, qim_store_mailbox_range_req)
WRAP_FWD(mailboxes, watermark_get, qim_store_watermark_get_req)
WRAP_FWD(mailboxes, watermark_advance, qim_store_watermark_advance_req)
#undef WRAP_FWD

/* Delivers a request's completion the way a backend does: on its queue, later. */
WRAP_FN void wrap_run_done(qim_cq_item *it) {
  qim_store_req *r = (qim_store_req *)it; /* `item` is the first member */
  r->done(r);
}

WRAP_FN int wrap_complete(qim_store_req *r, int status) {
  r->status = status;
  r->item.run = wrap_run_done;
  qim_cq_post(r->cq, &r->item);
  return 0;
}

/* A combined append's completion, intercepted: parked, or turned into "not durable". */
WRAP_FN void wrap_append_done(qim_store_req *r) {
  wrap_store *w = r->data;
  pthread_mutex_lock(&w->mu);
  int i = 0;
  while (w->parked[i].req != r) i++;
  struct wrap_parked p = w->parked[i];
  if (atomic_load(&w->park_append)) {
    w->parked[i].arrived = true;
    pthread_mutex_unlock(&w->mu);
    return;
  }
  w->parked[i] = (struct wrap_parked){0};
  pthread_mutex_unlock(&w->mu);
  r->done = p.done, r->data = p.data;
  if (r->status == 0) r->status = qim_err_raise(QIM_E_COMMIT_LOG_PUBLICATION_NOT_DURABLE);
  r->done(r);
}

/* Posts every parked completion to its queue, as the backend would have; one still to
 * arrive goes straight to its caller. Call it from the thread that runs those completions. */
static inline void wrap_release_parked(wrap_store *w) {
  atomic_store(&w->park_append, 0);
  pthread_mutex_lock(&w->mu);
  for (int i = 0; i < 16; i++) {
    qim_store_req *r = w->parked[i].req;
    if (!r) continue;
    r->done = w->parked[i].done, r->data = w->parked[i].data;
    bool arrived = w->parked[i].arrived;
    w->parked[i] = (struct wrap_parked){0};
    if (!arrived) continue;
    r->item.run = wrap_run_done;
    qim_cq_post(r->cq, &r->item);
  }
  pthread_mutex_unlock(&w->mu);
}

WRAP_FN int wrap_logs_append(qim_store *s, qim_store_log_append_req *r) {
  wrap_store *w = wrap_of(s);
  if ((atomic_load(&w->park_append) || atomic_load(&w->unconfirm_append)) && r->has_consumer) {
    pthread_mutex_lock(&w->mu);
    int i = 0;
    while (w->parked[i].req) i++;
    w->parked[i] = (struct wrap_parked){&r->req, r->req.done, r->req.data, false};
    w->intercepted++;
    pthread_mutex_unlock(&w->mu);
    r->req.done = wrap_append_done;
    r->req.data = w;
    int rc = w->inner->vt->logs.append(w->inner, r);
    if (rc) {
      pthread_mutex_lock(&w->mu);
      r->req.done = w->parked[i].done, r->req.data = w->parked[i].data;
      w->parked[i] = (struct wrap_parked){0};
      pthread_mutex_unlock(&w->mu);
    }
    return rc;
  }
  if (!atomic_load(&w->split_append) || !r->has_consumer) return w->inner->vt->logs.append(w->inner, r);
  qim_store_log_append_req first = *r; /* same appends array: outputs land in the caller's */
  first.has_consumer = false;
  first.req.committed = NULL; /* the combined call never commits: no hint (store.h, "Committed") */
  int rc = QIM_STORE_SYNC(w->inner, logs.append, &first);
  atomic_fetch_add(&w->splits, 1);
  if (rc == 0 && atomic_load(&w->kill_after_split)) raise(SIGKILL);
  return wrap_complete(&r->req, rc ? rc : qim_err_raise(QIM_E_COMMIT_LOG_TRANSACTION_ABORTED));
}

WRAP_FN int wrap_logs_read(qim_store *s, qim_store_log_read_req *r) {
  wrap_store *w = wrap_of(s);
  if (atomic_load(&w->fail_read)) return wrap_complete(&r->req, -EIO);
  return w->inner->vt->logs.read(w->inner, r);
}

WRAP_FN int wrap_conversations_get(qim_store *s, qim_store_conv_get_req *r) {
  wrap_store *w = wrap_of(s);
  if (atomic_load(&w->fail_conv_get)) return wrap_complete(&r->req, -EIO);
  return w->inner->vt->conversations.get(w->inner, r);
}

WRAP_FN int wrap_intents_reserve(qim_store *s, qim_store_intent_reserve_req *r) {
  wrap_store *w = wrap_of(s);
  if (atomic_load(&w->fail_reserve)) return wrap_complete(&r->req, -EIO);
  return w->inner->vt->intents.reserve(w->inner, r);
}

WRAP_FN int wrap_conversations_members_at(qim_store *s, qim_store_members_at_req *r) {
  wrap_store *w = wrap_of(s);
  if (!w->tamper) return w->inner->vt->conversations.members_at(w->inner, r);
  qim_store_members_at_req copy = *r;
  int rc = QIM_STORE_SYNC(w->inner, conversations.members_at, &copy);
  r->out_members = copy.out_members;
  r->out_count = copy.out_count;
  r->out_has_more = copy.out_has_more;
  if (rc == 0) w->tamper(r, w->tamper_ctx);
  return wrap_complete(&r->req, rc);
}

WRAP_FN void wrap_close(qim_store *s) { /* the inner store is the test's */
  pthread_mutex_destroy(&wrap_of(s)->mu);
  qim_free(s);
}

static inline wrap_store *wrap_store_new(qim_store *inner) {
  wrap_store *w = qim_calloc(1, sizeof *w);
  w->inner = inner;
  pthread_mutex_init(&w->mu, NULL);
  w->vt = (qim_store_vtable){
      .name = "wrap",
      .accounts = {wrap_accounts_user_create, wrap_accounts_user_get, wrap_accounts_user_update,
                   wrap_accounts_cred_create, wrap_accounts_cred_get, wrap_accounts_cred_update,
                   wrap_accounts_apikey_put, wrap_accounts_apikey_get},
      .conversations = {wrap_conversations_create, wrap_conversations_get, wrap_conversations_update,
                        wrap_conversations_members_change, wrap_conversations_member_get,
                        wrap_conversations_members_at, wrap_conversations_member_receipt,
                        wrap_conversations_subscriptions, wrap_conversations_member_private,
                        wrap_conversations_members_prune},
      .intents = {wrap_intents_reserve, wrap_intents_advance, wrap_intents_load, wrap_intents_list_in_flight,
                  wrap_intents_forget},
      .history = {wrap_history_get, wrap_history_query, wrap_history_set_state, wrap_history_dellog_add,
                  wrap_history_dellog_query, wrap_history_expire},
      .logs = {wrap_logs_append, wrap_logs_read, wrap_logs_consumer_get, wrap_logs_consumer_set, wrap_logs_trim,
               wrap_logs_redact},
      .mailboxes = {wrap_mailboxes_shard_takeover, wrap_mailboxes_shard_get, wrap_mailboxes_append,
                    wrap_mailboxes_progress_get, wrap_mailboxes_range, wrap_mailboxes_watermark_get,
                    wrap_mailboxes_watermark_advance},
      .stats = NULL,
      .close = wrap_close,
  };
  w->base.vt = &w->vt;
  return w;
}

#endif
