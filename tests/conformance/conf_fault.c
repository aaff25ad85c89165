/*
 * conf_fault.c — a deliberately broken backend: a qim_store whose vtable forwards every
 * call to a real store, except that in each mode it breaks exactly one promise of
 * store.h. The broken-backend test runs the contract vectors against every mode and
 * requires SemanticMismatch failures: a suite that passes a broken store proves nothing.
 *
 * Faults are made by rewriting a request before it is forwarded (and restoring it on
 * completion, so the caller sees its own input again) or by rewriting the outputs when
 * the inner store completes. The completion is intercepted by swapping req.done/req.data
 * for a hook and putting them back before the caller's `done` runs.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "qim/mem.h"
#include "qim/record.h"

static const char *const fault_names[CONF_FAULT_COUNT_] = {
    [CONF_FAULT_NONE] = "none",
    [CONF_FAULT_LOG_APPEND_NOT_IDEMPOTENT] = "log-append-not-idempotent",
    [CONF_FAULT_INTENT_BACKWARD] = "intent-backward",
    [CONF_FAULT_IGNORE_EPOCH_FENCE] = "ignore-epoch-fence",
    [CONF_FAULT_OTHER_USERS_DELLOG] = "other-users-dellog",
    [CONF_FAULT_REPLAY_REPORTED_FRESH] = "replay-reported-fresh",
    [CONF_FAULT_CMID_REUSE_ACCEPTED] = "cmid-reuse-accepted",
    [CONF_FAULT_READ_BELOW_TRIM] = "read-below-trim",
    [CONF_FAULT_MEMBERS_AT_CURRENT] = "members-at-current",
    [CONF_FAULT_RECEIPT_BACKWARD] = "receipt-backward",
    [CONF_FAULT_MAILBOX_DUPLICATE] = "mailbox-duplicate",
};

const char *conf_fault_name(conf_fault_mode m) {
  return m >= 0 && m < CONF_FAULT_COUNT_ ? fault_names[m] : "?";
}

int conf_fault_parse(const char *name, size_t len) {
  for (int i = 0; i < CONF_FAULT_COUNT_; i++)
    if (strlen(fault_names[i]) == len && !memcmp(fault_names[i], name, len)) return i;
  return -1;
}

/* What the wrapper remembers from completions: shard epochs and membership versions. */
typedef struct fact {
  qim_u128 key;
  uint64_t value;
} fact;

typedef struct fault_store {
  qim_store base;
  qim_store *inner;
  conf_fault_mode mode;
  pthread_mutex_t mu;
  fact *facts;
  size_t nfacts;
  uint64_t calls;
} fault_store;

static void fact_put(fault_store *f, qim_u128 key, uint64_t value) {
  pthread_mutex_lock(&f->mu);
  size_t i = 0;
  while (i < f->nfacts && !(f->facts[i].key.hi == key.hi && f->facts[i].key.lo == key.lo)) i++;
  if (i == f->nfacts) f->facts = qim_realloc(f->facts, ++f->nfacts * sizeof *f->facts);
  f->facts[i] = (fact){key, value};
  pthread_mutex_unlock(&f->mu);
}

static bool fact_get(fault_store *f, qim_u128 key, uint64_t *value) {
  bool found = false;
  pthread_mutex_lock(&f->mu);
  for (size_t i = 0; i < f->nfacts && !found; i++)
    if (f->facts[i].key.hi == key.hi && f->facts[i].key.lo == key.lo) *value = f->facts[i].value, found = true;
  pthread_mutex_unlock(&f->mu);
  return found;
}

/* Shard epochs and membership versions share the table under distinct key spaces. */
static qim_u128 shard_key(qim_mailbox_shard_id s) { return (qim_u128){UINT64_MAX, s}; }
static qim_u128 conv_key(qim_conversation_id c) { return (qim_u128){c.v.hi ^ 0x5a5a5a5a5a5a5a5aULL, c.v.lo}; }

/* ---- completion interception ---------------------------------------------------------------- */

typedef struct hook hook;
struct hook {
  fault_store *f;
  void (*done)(qim_store_req *);
  void *data;
  void (*fix)(hook *h, qim_store_req *r);
  uint64_t saved;       /* an input overwritten before forwarding */
  qim_u128 saved_id;
  uint8_t (*saved_keys)[16];
};

static void hook_done(qim_store_req *r) {
  hook *h = r->data;
  r->done = h->done;
  r->data = h->data;
  h->fix(h, r);
  qim_free(h->saved_keys);
  qim_free(h);
  r->done(r); /* last: it may free the request */
}

static hook *intercept(fault_store *f, qim_store_req *r, void (*fix)(hook *, qim_store_req *)) {
  hook *h = qim_calloc(1, sizeof *h);
  *h = (hook){.f = f, .done = r->done, .data = r->data, .fix = fix};
  r->done = hook_done;
  r->data = h;
  return h;
}

/* Undoes intercept() when the inner store refused synchronously (done will not run). */
static int refused(qim_store_req *r, int rc) {
  if (rc < 0 && r->done == hook_done) {
    hook *h = r->data;
    r->done = h->done;
    r->data = h->data;
    h->fix(h, r); /* restore inputs; outputs are untouched because status is not 0 */
    qim_free(h->saved_keys);
    qim_free(h);
  }
  return rc;
}

#define F(s) ((fault_store *)(s))
#define INNER(s) (F(s)->inner)

/* ---- faults ----------------------------------------------------------------------------------- */

/* log-append-not-idempotent: every call gets fresh keys, so a repeated key appends again. */
static void fix_log_append(hook *h, qim_store_req *r) {
  qim_store_log_append_req *q = (qim_store_log_append_req *)r;
  for (size_t i = 0; i < q->append_count; i++) {
    memcpy(q->appends[i].key, h->saved_keys[i], 16);
    q->appends[i].out_existed = false;
  }
}

static int f_log_append(qim_store *s, qim_store_log_append_req *r) {
  if (F(s)->mode != CONF_FAULT_LOG_APPEND_NOT_IDEMPOTENT || r->append_count == 0)
    return INNER(s)->vt->logs.append(INNER(s), r);
  hook *h = intercept(F(s), &r->req, fix_log_append);
  uint64_t salt = __atomic_add_fetch(&F(s)->calls, 1, __ATOMIC_RELAXED);
  h->saved_keys = qim_calloc(r->append_count, 16);
  for (size_t i = 0; i < r->append_count; i++) {
    memcpy(h->saved_keys[i], r->appends[i].key, 16);
    for (int b = 0; b < 8; b++) r->appends[i].key[b] ^= (uint8_t)(salt >> (8 * b)) ^ 0xa5;
  }
  return refused(&r->req, INNER(s)->vt->logs.append(INNER(s), r));
}

/* intent-backward: a refused backward or skipping step is reported as done. */
static void fix_advance(hook *h, qim_store_req *r) {
  (void)h;
  if (r->status == QIM_E_MESSAGE_STORE_INVALID_STATE_TRANSITION) r->status = 0;
}

static int f_advance(qim_store *s, qim_store_intent_advance_req *r) {
  if (F(s)->mode == CONF_FAULT_INTENT_BACKWARD) intercept(F(s), &r->req, fix_advance);
  return refused(&r->req, INNER(s)->vt->intents.advance(INNER(s), r));
}

/* replay-reported-fresh / cmid-reuse-accepted: the reserve answer lies about the key. */
static void fix_reserve(hook *h, qim_store_req *r) {
  qim_store_intent_reserve_req *q = (qim_store_intent_reserve_req *)r;
  if (h->f->mode == CONF_FAULT_REPLAY_REPORTED_FRESH && r->status == 0 &&
      q->out.kind == QIM_RESERVE_RESULT_EXISTING)
    q->out.kind = QIM_RESERVE_RESULT_FRESH;
  if (h->f->mode == CONF_FAULT_CMID_REUSE_ACCEPTED && r->status == QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED) {
    r->status = 0;
    q->out.kind = QIM_RESERVE_RESULT_EXISTING;
    qim_commit_intent_copy(&q->out.intent, q->proposal);
  }
}

static int f_reserve(qim_store *s, qim_store_intent_reserve_req *r) {
  if (F(s)->mode == CONF_FAULT_REPLAY_REPORTED_FRESH || F(s)->mode == CONF_FAULT_CMID_REUSE_ACCEPTED)
    intercept(F(s), &r->req, fix_reserve);
  return refused(&r->req, INNER(s)->vt->intents.reserve(INNER(s), r));
}

/* ignore-epoch-fence: writes are re-stamped with the newest epoch the wrapper saw. */
static void fix_takeover(hook *h, qim_store_req *r) {
  qim_store_shard_takeover_req *q = (qim_store_shard_takeover_req *)r;
  if (r->status == 0) fact_put(h->f, shard_key(q->shard), q->out_epoch);
}

static int f_takeover(qim_store *s, qim_store_shard_takeover_req *r) {
  intercept(F(s), &r->req, fix_takeover);
  return refused(&r->req, INNER(s)->vt->mailboxes.shard_takeover(INNER(s), r));
}

static void fix_mailbox_append(hook *h, qim_store_req *r) {
  ((qim_store_mailbox_append_req *)r)->owner_epoch = (qim_shard_epoch)h->saved;
}

static int f_mailbox_append(qim_store *s, qim_store_mailbox_append_req *r) {
  uint64_t epoch;
  if (F(s)->mode == CONF_FAULT_IGNORE_EPOCH_FENCE && fact_get(F(s), shard_key(r->batch->shard), &epoch)) {
    intercept(F(s), &r->req, fix_mailbox_append)->saved = r->owner_epoch;
    r->owner_epoch = (qim_shard_epoch)epoch;
  }
  return refused(&r->req, INNER(s)->vt->mailboxes.append(INNER(s), r));
}

static void fix_watermark(hook *h, qim_store_req *r) {
  ((qim_store_watermark_advance_req *)r)->owner_epoch = (qim_shard_epoch)h->saved;
}

static int f_watermark_advance(qim_store *s, qim_store_watermark_advance_req *r) {
  uint64_t epoch;
  if (F(s)->mode == CONF_FAULT_IGNORE_EPOCH_FENCE && fact_get(F(s), shard_key(r->advance.shard), &epoch)) {
    intercept(F(s), &r->req, fix_watermark)->saved = r->owner_epoch;
    r->owner_epoch = (qim_shard_epoch)epoch;
  }
  return refused(&r->req, INNER(s)->vt->mailboxes.watermark_advance(INNER(s), r));
}

/* other-users-dellog: the query filters by a user who deleted nothing, so the viewer's
 * own soft-deleted records come back. */
static void fix_query(hook *h, qim_store_req *r) {
  ((qim_store_record_query_req *)r)->viewer.v = h->saved_id;
}

static int f_query(qim_store *s, qim_store_record_query_req *r) {
  if (F(s)->mode == CONF_FAULT_OTHER_USERS_DELLOG) {
    intercept(F(s), &r->req, fix_query)->saved_id = r->viewer.v;
    r->viewer.v = (qim_u128){UINT64_MAX, UINT64_MAX - 1};
  }
  return refused(&r->req, INNER(s)->vt->history.query(INNER(s), r));
}

/* read-below-trim: a read below the trim point returns nothing instead of the error. */
static void fix_read(hook *h, qim_store_req *r) {
  (void)h;
  qim_store_log_read_req *q = (qim_store_log_read_req *)r;
  if (r->status == QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE) {
    r->status = 0;
    q->out_count = 0;
    q->out_end = q->from;
  }
}

static int f_log_read(qim_store *s, qim_store_log_read_req *r) {
  if (F(s)->mode == CONF_FAULT_READ_BELOW_TRIM) intercept(F(s), &r->req, fix_read);
  return refused(&r->req, INNER(s)->vt->logs.read(INNER(s), r));
}

/* members-at-current: exact-version reads are answered from the newest version. */
static void fix_conv_create(hook *h, qim_store_req *r) {
  if (r->status == 0) fact_put(h->f, conv_key(((qim_store_conv_create_req *)r)->conv.conversation_id), 1);
}

static int f_conv_create(qim_store *s, qim_store_conv_create_req *r) {
  intercept(F(s), &r->req, fix_conv_create);
  return refused(&r->req, INNER(s)->vt->conversations.create(INNER(s), r));
}

static void fix_members_change(hook *h, qim_store_req *r) {
  qim_store_members_change_req *q = (qim_store_members_change_req *)r;
  if (r->status == 0) fact_put(h->f, conv_key(q->conversation_id), q->out_version);
}

static int f_members_change(qim_store *s, qim_store_members_change_req *r) {
  intercept(F(s), &r->req, fix_members_change);
  return refused(&r->req, INNER(s)->vt->conversations.members_change(INNER(s), r));
}

static void fix_members_at(hook *h, qim_store_req *r) {
  ((qim_store_members_at_req *)r)->version = h->saved;
}

static int f_members_at(qim_store *s, qim_store_members_at_req *r) {
  uint64_t latest;
  if (F(s)->mode == CONF_FAULT_MEMBERS_AT_CURRENT && fact_get(F(s), conv_key(r->conversation_id), &latest) &&
      r->version < latest) {
    intercept(F(s), &r->req, fix_members_at)->saved = r->version;
    r->version = latest;
  }
  return refused(&r->req, INNER(s)->vt->conversations.members_at(INNER(s), r));
}

/* receipt-backward: the answer echoes what was asked, even when it is lower. */
static void fix_receipt(hook *h, qim_store_req *r) {
  (void)h;
  qim_store_member_receipt_req *q = (qim_store_member_receipt_req *)r;
  if (r->status == 0) {
    if (q->read_seq) q->out_read = q->read_seq;
    if (q->recv_seq) q->out_recv = q->recv_seq;
  }
}

static int f_member_receipt(qim_store *s, qim_store_member_receipt_req *r) {
  if (F(s)->mode == CONF_FAULT_RECEIPT_BACKWARD) intercept(F(s), &r->req, fix_receipt);
  return refused(&r->req, INNER(s)->vt->conversations.member_receipt(INNER(s), r));
}

/* mailbox-duplicate: readers see the last entry twice, as if a replay wrote it again. */
static void fix_range(hook *h, qim_store_req *r) {
  (void)h;
  qim_store_mailbox_range_req *q = (qim_store_mailbox_range_req *)r;
  if (r->status != 0 || q->out_count == 0) return;
  q->out_entries = qim_realloc(q->out_entries, (q->out_count + 1) * sizeof *q->out_entries);
  qim_mailbox_entry_copy(&q->out_entries[q->out_count], &q->out_entries[q->out_count - 1]);
  q->out_count++;
}

static int f_mailbox_range(qim_store *s, qim_store_mailbox_range_req *r) {
  if (F(s)->mode == CONF_FAULT_MAILBOX_DUPLICATE) intercept(F(s), &r->req, fix_range);
  return refused(&r->req, INNER(s)->vt->mailboxes.range(INNER(s), r));
}

/* ---- plain forwarding ---------------------------------------------------------------------------- */

#define FWD(dom, call, type) \
  static int f_##dom##_##call(qim_store *s, type *r) { return INNER(s)->vt->dom.call(INNER(s), r); }

FWD(accounts, user_create, qim_store_user_create_req)
FWD(accounts, user_get, qim_store_user_get_req)
FWD(accounts, user_update, qim_store_user_update_req)
FWD(accounts, cred_create, qim_store_cred_create_req)
FWD(accounts, cred_get, qim_store_cred_get_req)
FWD(accounts, cred_update, qim_store_cred_update_req)
FWD(accounts, apikey_put, qim_store_apikey_put_req)
FWD(accounts, apikey_get, qim_store_apikey_get_req)
FWD(conversations, get, qim_store_conv_get_req)
FWD(conversations, member_private, qim_store_member_private_req)
FWD(conversations, members_prune, qim_store_members_prune_req)
FWD(conversations, update, qim_store_conv_update_req)
FWD(conversations, member_get, qim_store_member_get_req)
FWD(conversations, subscriptions, qim_store_subscriptions_req)
FWD(intents, load, qim_store_intent_load_req)
FWD(intents, list_in_flight, qim_store_intent_list_req)
FWD(intents, forget, qim_store_intent_forget_req)
FWD(history, get, qim_store_record_get_req)
FWD(history, set_state, qim_store_record_set_state_req)
FWD(history, dellog_add, qim_store_dellog_add_req)
FWD(history, dellog_query, qim_store_dellog_query_req)
FWD(history, expire, qim_store_record_expire_req)
FWD(logs, consumer_get, qim_store_log_consumer_get_req)
FWD(logs, consumer_set, qim_store_log_consumer_set_req)
FWD(logs, trim, qim_store_log_trim_req)
FWD(logs, redact, qim_store_log_redact_req)
FWD(mailboxes, shard_get, qim_store_shard_get_req)
FWD(mailboxes, progress_get, qim_store_progress_get_req)
FWD(mailboxes, watermark_get, qim_store_watermark_get_req)

static void f_stats(qim_store *s, qim_store_stats *out) { qim_store_get_stats(INNER(s), out); }

static void f_close(qim_store *s) {
  fault_store *f = F(s);
  qim_store_close(f->inner);
  pthread_mutex_destroy(&f->mu);
  qim_free(f->facts);
  qim_free(f);
}

static const qim_store_vtable fault_vt = {
    .name = "fault",
    .accounts = {f_accounts_user_create, f_accounts_user_get, f_accounts_user_update,
                 f_accounts_cred_create, f_accounts_cred_get, f_accounts_cred_update,
                 f_accounts_apikey_put, f_accounts_apikey_get},
    .conversations = {f_conv_create, f_conversations_get, f_conversations_update, f_members_change,
                      f_conversations_member_get, f_members_at, f_member_receipt,
                      f_conversations_subscriptions, f_conversations_member_private,
                      f_conversations_members_prune},
    .intents = {f_reserve, f_advance, f_intents_load, f_intents_list_in_flight, f_intents_forget},
    .history = {f_history_get, f_query, f_history_set_state, f_history_dellog_add,
                f_history_dellog_query, f_history_expire},
    .logs = {f_log_append, f_log_read, f_logs_consumer_get, f_logs_consumer_set, f_logs_trim,
             f_logs_redact},
    .mailboxes = {f_takeover, f_mailboxes_shard_get, f_mailbox_append, f_mailboxes_progress_get,
                  f_mailbox_range, f_mailboxes_watermark_get, f_watermark_advance},
    .stats = f_stats,
    .close = f_close,
};

qim_store *conf_fault_wrap(qim_store *inner, conf_fault_mode mode) {
  fault_store *f = qim_calloc(1, sizeof *f);
  f->base.vt = &fault_vt;
  f->inner = inner;
  f->mode = mode;
  pthread_mutex_init(&f->mu, NULL);
  return &f->base;
}
