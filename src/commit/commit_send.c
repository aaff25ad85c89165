/*
 * commit_send.c — the sending side up to reserve: the checks a client send must pass
 * (cmid, size, mentions, rate limit, clock, write permission, references), the
 * proposal that fixes the message once and for all, the reserve itself and what its
 * three answers (Fresh / Existing / Committed) mean for the caller.
 *
 * Cheap checks answer synchronously; those that read the store run as a chain of
 * store calls completing on the caller's queue. A plain send to a conversation whose
 * kind is cached reads nothing: its reserve checks the sender's write permission. Those reads may complete in any order
 * (the store has several reader threads), so a send waits in its conversation's gate
 * until every send that reached the commit before it has reserved or failed: seqs follow
 * the order of arrival, and a client pipelining pubs sees them delivered in that order.
 * A retry of a key this process is already driving never reaches the store: it waits on
 * the live entry (after the content comparison that makes a reused cmid a 409).
 */
#include <errno.h>
#include <string.h>

#include "commit/commit_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

/* Seqs stay below this: the Tinode SDK uses larger values for local messages. */
#define SEQ_LIMIT UINT64_C(0x0FFFFFFF)

static void checks_done(qim__commit_send *x, int status);

static size_t content_size(const qim_message_content *m) {
  size_t n = m->payload_or_ciphertext.n;
  if (m->has_media_metadata) n += m->media_metadata.n;
  if (m->custom_type) n += strlen(m->custom_type);
  return n;
}

/* ---- completion ---------------------------------------------------------------------- */

static void op_item_run(qim_cq_item *it) {
  qim_commit_op *op = (qim_commit_op *)((char *)it - offsetof(qim_commit_op, item_));
  op->done(op);
}

static void send_free(qim__commit_send *x) {
  qim_store_member_free(&x->member);
  qim_delivery_audience_free(&x->proposal.delivery.audience);
  qim_free(x);
}

void qim__send_finish(qim__commit_send *x, int status, const qim_error *err,
                      const qim_committed_message *ack) {
  qim_commit_op *op = x->op;
  qim_commit_result *r = &op->result;
  memset(r, 0, sizeof *r);
  r->status = status;
  if (err) r->error = *err;
  r->error.code = status;
  r->reserve = x->outcome;
  if (status == 0 && ack) r->ack = *ack;
  static const char *const kinds[] = {"fresh", "existing", "committed"};
  if (status == 0) {
    QIM__COUNT(x->c, acks);
    QIM_LOGI(&x->trace, "commit.acked", "kind=%s seq=%llu", kinds[x->outcome],
             (unsigned long long)r->ack.coordinates.conversation_seq);
  } else {
    QIM__COUNT(x->c, refused);
    QIM_LOGI(&x->trace, "commit.failed", "kind=%s err=%s", kinds[x->outcome], qim_err_name(status));
  }
  op->priv_ = NULL;
  send_free(x);
  op->item_.run = op_item_run;
  qim_cq_post(op->cq, &op->item_);
}

static void send_fail(qim__commit_send *x, int status) { qim__send_finish(x, status, NULL, NULL); }

/* A synchronous refusal: the result is set and `done` never runs. */
static int refuse(qim_commit *c, qim_commit_op *op, int status, const qim_error *err,
                  const qim_trace_id *trace) {
  memset(&op->result, 0, sizeof op->result);
  if (err) op->result.error = *err;
  op->result.status = op->result.error.code = status;
  QIM__COUNT(c, refused);
  QIM_LOGI(trace, "commit.refused", "err=%s", qim_err_name(status));
  return status;
}

/* Refuses `op` after its send state was built: the trace is copied first, because the
 * state that holds it is freed before the refusal is logged. */
static int send_drop(qim__commit_send *x, int status) {
  qim_commit *c = x->c;
  qim_commit_op *op = x->op;
  qim_trace_id trace = x->trace;
  op->priv_ = NULL;
  send_free(x);
  return refuse(c, op, status, NULL, &trace);
}

/* ---- attaching to a live entry ---------------------------------------------------------- */

/* c->mu held. The key is being driven here: wait for it, unless the content differs. A
 * placeholder's content is not the key's yet: its reserve may still be refused because the
 * store holds other content (perhaps this send's), so a send that differs from it waits
 * as a rival and is reserved again once the placeholder's reserve answers. */
static int attach(qim__commit_send *x, qim__commit_entry *e) {
  const qim_message_content *mine = e->reserved ? &e->intent.record.content : e->proposal_content;
  qim_conversation_id conv = e->reserved ? e->intent.coordinates.conversation_id : e->proposal_conv;
  if (!qim_u128_eq(conv.v, x->conv_id.v) || !qim_message_content_equal(mine, x->content)) {
    if (e->reserved) return qim_err_raise(QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED);
    x->entry = NULL;
    x->wnext = e->rivals;
    e->rivals = x;
    return 0;
  }
  x->outcome = QIM_RESERVE_RESULT_EXISTING;
  x->entry = e;
  x->wnext = e->waiters;
  e->waiters = x;
  QIM__COUNT(x->c, existing);
  qim__entry_log(e, "commit.attached", "kind=existing");
  if (e->failed) qim__entry_resume(x->c, e); /* the caller resumes it now */
  return 0;
}

/* ---- store calls of the checks ------------------------------------------------------------ */

/* Points the request head at the caller's queue (after the request was zeroed). */
static void prep(qim__commit_send *x, void (*done)(qim_store_req *)) {
  qim_store_req *r = &x->rq.head;
  r->cq = x->op->cq;
  r->done = done;
  r->data = x;
}

static int map_store_error(int st) {
  if (st == -ENOENT) return qim_err_raise(QIM_E_COMMIT_PERMISSION_DENIED);
  if (st == QIM_E_MESSAGE_STORE_INVALID_CLIENT_MESSAGE_ID)
    return qim_err_raise(QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  if (st == QIM_E_COMMIT_PERMISSION_DENIED || st == QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED ||
      st == QIM_E_COMMIT_INVALID_REFERENCE)
    return st;
  return qim_err_raise(QIM_E_COMMIT_UNAVAILABLE);
}

static void reply_checked(qim_store_req *r) {
  qim__commit_send *x = r->data;
  qim_store_record_query_req *q = &x->rq.query;
  bool found = r->status == 0 && q->out_count == 1 &&
               q->out_records[0].coordinates.conversation_seq == x->reply_seq;
  int st = r->status;
  for (size_t i = 0; i < q->out_count; i++) qim_message_record_free(&q->out_records[i]);
  qim_free(q->out_records);
  if (st < 0) return checks_done(x, map_store_error(st));
  if (!found) return checks_done(x, qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE));
  checks_done(x, 0);
}

/* reply_to must name a record the sender can see: inside its membership window, not
 * in its own soft-delete log (the store applies both). */
static void check_reply(qim__commit_send *x) {
  if (!x->has_reply) return checks_done(x, 0);
  if (x->reply_seq == 0 || x->reply_seq >= SEQ_LIMIT)
    return checks_done(x, qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE));
  qim_store_record_query_req *q = &x->rq.query;
  memset(q, 0, sizeof *q);
  prep(x, reply_checked);
  q->tenant_id = x->actor.tenant_id;
  q->conversation_id = x->conv_id;
  q->viewer = x->actor.user_id;
  q->window_low = x->member.joined_at;
  q->window_high = x->member.has_left_at ? x->member.left_at : SEQ_LIMIT;
  x->reply_range.low = x->reply_seq;
  x->reply_range.hi = x->reply_seq + 1;
  q->ranges = &x->reply_range;
  q->range_count = 1;
  q->direction = QIM_HISTORY_DIRECTION_NEWER;
  q->max_items = 1;
  q->max_bytes = 1;
  int rc = x->c->store->vt->history.query(x->c->store, q);
  if (rc < 0) checks_done(x, map_store_error(rc));
}

static void check_mentions(qim__commit_send *x);

static void mention_checked(qim_store_req *r) {
  qim__commit_send *x = r->data;
  qim_store_member *m = &x->rq.member_get.out;
  bool member = r->status == 0 && !m->has_left_at;
  int st = r->status;
  if (st == 0) qim_store_member_free(m);
  if (st < 0 && st != -ENOENT) return checks_done(x, map_store_error(st));
  if (!member) return checks_done(x, qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE));
  x->mention_i++;
  check_mentions(x);
}

static bool is_direct_user(const qim__conv_facts *f, qim_user_id u) {
  return qim_u128_eq(f->direct_users[0].v, u.v) || qim_u128_eq(f->direct_users[1].v, u.v);
}

/* Every mention target must be a current member (a direct conversation: one of its two). */
static void check_mentions(qim__commit_send *x) {
  for (; x->mention_i < x->mention_count; x->mention_i++) {
    qim_user_id u = x->mentions[x->mention_i];
    if (x->facts.kind == QIM_CONVERSATION_DIRECT) {
      if (!is_direct_user(&x->facts, u))
        return checks_done(x, qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE));
      continue;
    }
    if (qim_u128_eq(u.v, x->actor.user_id.v)) continue;
    qim_store_member_get_req *g = &x->rq.member_get;
    memset(g, 0, sizeof *g);
    prep(x, mention_checked);
    g->tenant_id = x->actor.tenant_id;
    g->conversation_id = x->conv_id;
    g->user_id = u;
    int rc = x->c->store->vt->conversations.member_get(x->c->store, g);
    if (rc < 0) checks_done(x, map_store_error(rc));
    return;
  }
  check_reply(x);
}

static void member_checked(qim_store_req *r) {
  qim__commit_send *x = r->data;
  if (r->status < 0) return checks_done(x, map_store_error(r->status));
  x->member = x->rq.member_get.out;
  const qim_store_member *m = &x->member;
  if (m->has_left_at || m->banned || !(m->mode_want & m->mode_given & QIM_MODE_W))
    return checks_done(x, qim_err_raise(QIM_E_COMMIT_PERMISSION_DENIED));
  check_mentions(x);
}

/* The conversation's kind is known. A plain client send (no mentions, no reply) needs
 * nothing more before its reserve: the reserve itself checks the sender's membership, ban
 * and W mode in the transaction that allocates the seq (`authorize`). Mentions and replies
 * need the sender's row first (its membership window). */
static void facts_known(qim__commit_send *x) {
  if (x->kind == QIM__SEND_CONTROL) return checks_done(x, 0);
  if (x->mention_count == 0 && !x->has_reply) {
    x->authorize = true;
    return checks_done(x, 0);
  }
  qim_store_member_get_req *g = &x->rq.member_get;
  memset(g, 0, sizeof *g);
  prep(x, member_checked);
  g->tenant_id = x->actor.tenant_id;
  g->conversation_id = x->conv_id;
  g->user_id = x->actor.user_id;
  int rc = x->c->store->vt->conversations.member_get(x->c->store, g);
  if (rc < 0) checks_done(x, map_store_error(rc));
}

static qim__conv_facts *facts_slot(qim_commit *c, qim_tenant_id t, qim_conversation_id id) {
  uint64_t h = (id.v.hi ^ id.v.lo ^ t.v.lo) * UINT64_C(0x9E3779B97F4A7C15);
  return &c->facts[(h >> 32) % QIM__FACTS_SLOTS];
}

/* c->mu held. True (and x->facts set) when the conversation's facts are cached. */
static bool facts_find(qim__commit_send *x) {
  const qim__conv_facts *f = facts_slot(x->c, x->actor.tenant_id, x->conv_id);
  if (!f->valid || !qim_u128_eq(f->id.v, x->conv_id.v) || !qim_u128_eq(f->tenant_id.v, x->actor.tenant_id.v))
    return false;
  x->facts = *f;
  return true;
}

static void conv_checked(qim_store_req *r) {
  qim__commit_send *x = r->data;
  if (r->status < 0) return checks_done(x, map_store_error(r->status));
  qim_store_conversation *cv = &x->rq.conv_get.out;
  bool deleted = cv->deleted;
  x->facts = (qim__conv_facts){.valid = true, .tenant_id = x->actor.tenant_id, .id = x->conv_id,
                               .kind = cv->kind, .direct_users = {cv->direct_users[0], cv->direct_users[1]}};
  qim_store_conversation_free(cv);
  if (deleted) return checks_done(x, qim_err_raise(QIM_E_COMMIT_PERMISSION_DENIED));
  pthread_mutex_lock(&x->c->mu);
  *facts_slot(x->c, x->actor.tenant_id, x->conv_id) = x->facts;
  pthread_mutex_unlock(&x->c->mu);
  facts_known(x);
}

/* ---- the proposal and reserve ------------------------------------------------------- */

/* Everything fixed at reserve except what the store allocates (the seq and, for a
 * group, the membership snapshot). Content is borrowed from the caller. */
static void build_proposal(qim__commit_send *x) {
  qim_commit_intent *p = &x->proposal;
  memset(p, 0, sizeof *p);
  p->key.tenant_id = x->actor.tenant_id;
  p->key.sender_id = x->actor.user_id;
  p->key.client_message_id = x->cmid;
  p->coordinates.message_id = x->message_id;
  p->coordinates.conversation_id = x->conv_id;
  p->coordinates.last_activity_id = x->activity_id;
  p->state = QIM_COMMIT_STATE_RESERVED;
  qim_delivery_audience *a = &p->delivery.audience;
  if (x->audience) {
    a->kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    a->direct.recipient_count = x->audience->direct.recipient_count;
    a->direct.recipients = qim_memdup(x->audience->direct.recipients,
                                      a->direct.recipient_count * sizeof *a->direct.recipients);
  } else if (x->facts.kind == QIM_CONVERSATION_DIRECT) {
    a->kind = QIM_DELIVERY_AUDIENCE_DIRECT;
    a->direct.recipients = qim_memdup(x->facts.direct_users, sizeof x->facts.direct_users);
    a->direct.recipient_count = 2;
  } else {
    a->kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    a->group.group_id.v = x->conv_id.v;
  }
  p->delivery.inline_body = content_size(x->content) <= x->c->cfg.inline_body_max;
  p->delivery.created_at = qim_message_id_millis(&x->message_id);
  p->record.coordinates = p->coordinates;
  p->record.sender = x->actor;
  p->record.client_message_id = x->cmid;
  p->record.content = *x->content;
  p->record.retention_class = x->retention;
  p->record.state = QIM_MESSAGE_STATE_NORMAL;
  p->record.created_at = p->delivery.created_at;
  p->trace_id = x->trace;
}

static void reserve_done(qim_store_req *r);

/* c->mu held: the placeholder that concurrent retries of the key will wait on. */
static qim__commit_entry *placeholder_new(qim__commit_send *x) {
  qim__commit_entry *e = qim__entry_new(x->c, &x->proposal.key, x->actor.tenant_id, x->conv_id);
  qim__commit_conv *cv = e->conv;
  e->proposal_content = x->content;
  e->proposal_conv = x->conv_id;
  e->trace = x->trace;
  e->reserving = true;
  e->ticket = cv->next_ticket++;
  e->in_pending = true;
  e->pprev = cv->pending_tail;
  if (cv->pending_tail) cv->pending_tail->pnext = e; else cv->pending_head = e;
  cv->pending_tail = e;
  x->entry = e;
  return e;
}

/* The reserve committed the message in its own transaction: the outbox record can be read
 * (unconfirmed) already, so the fanout starts on it while the sync runs (store.h,
 * "Committed"). On the store's writer thread. */
static void reserve_outboxed_hint(qim_store_req *r) {
  const qim_commit *c = r->committed_ctx;
  if (((qim_store_intent_reserve_req *)r)->out_committed_here) c->cfg.on_outboxed(c->cfg.hook_ctx);
}

/* c->mu held. Reserves the send (or attaches it to a live entry of its key). */
static void send_reserve(qim__commit_send *x) {
  qim_commit *c = x->c;
  build_proposal(x);
  if (c->closing) return send_fail(x, qim_err_raise(QIM_E_COMMIT_UNAVAILABLE));
  qim__commit_entry *e = qim__entry_find(c, &x->proposal.key);
  if (e) {
    int rc = attach(x, e);
    if (rc < 0) send_fail(x, rc);
    return;
  }
  e = placeholder_new(x);
  qim_store_intent_reserve_req *q = &x->rq.reserve;
  memset(q, 0, sizeof *q);
  prep(x, reserve_done);
  if (c->cfg.on_outboxed) q->req.committed = reserve_outboxed_hint, q->req.committed_ctx = c;
  q->proposal = &x->proposal;
  q->authorize = x->authorize;
  q->sender_read = x->kind == QIM__SEND_CLIENT;
  q->commit = c->cfg.commit_in_reserve;
  q->now = qim__wall_ms(c);
  int rc = c->store->vt->intents.reserve(c->store, q);
  if (rc < 0) {
    qim__commit_conv *cv = e->conv;
    rc = qim_err_raise(QIM_E_COMMIT_UNAVAILABLE);
    e->reserving = false;
    x->entry = NULL;
    qim__entry_complete_waiters(c, e, rc);
    qim__entry_free(c, e);
    qim__conv_kick(c, cv);
    qim__conv_maybe_free(c, cv);
    send_fail(x, rc);
  }
}

/* ---- the gate: reserves in arrival order ------------------------------------------------ */

/* c->mu held. The send joins its conversation's gate (commit_int.h). */
static void gate_enter(qim_commit *c, qim__commit_send *x) {
  qim__commit_conv *cv = qim__conv_get(c, x->actor.tenant_id, x->conv_id);
  x->gate = cv;
  x->gnext = NULL;
  if (cv->gate_tail)
    cv->gate_tail->gnext = x;
  else
    cv->gate_head = x;
  cv->gate_tail = x;
}

/* c->mu held. Reserves, or fails, the sends at the head of the gate whose checks are done. */
static void gate_release(qim_commit *c, qim__commit_conv *cv) {
  cv->gate_busy = true; /* a failed reserve below must not free cv under us */
  qim__commit_send *x;
  while ((x = cv->gate_head) && x->gate_passed) {
    cv->gate_head = x->gnext;
    if (!cv->gate_head) cv->gate_tail = NULL;
    x->gate = NULL;
    if (x->gate_status)
      send_fail(x, x->gate_status);
    else
      send_reserve(x);
  }
  cv->gate_busy = false;
  qim__conv_maybe_free(c, cv);
}

/* c->mu held. Takes a send refused synchronously out of the gate (it never completes). */
static void gate_leave(qim_commit *c, qim__commit_send *x) {
  qim__commit_conv *cv = x->gate;
  qim__commit_send *prev = NULL;
  for (qim__commit_send *p = cv->gate_head; p != x; p = p->gnext) prev = p;
  if (prev)
    prev->gnext = x->gnext;
  else
    cv->gate_head = x->gnext;
  if (cv->gate_tail == x) cv->gate_tail = prev;
  x->gate = NULL;
  gate_release(c, cv);
}

/* The checks of the send are done: status 0 reserves it, an error fails it — once every
 * send of the conversation that arrived before it has reserved or failed. */
static void checks_done(qim__commit_send *x, int status) {
  qim_commit *c = x->c;
  pthread_mutex_lock(&c->mu);
  x->gate_passed = true;
  x->gate_status = status;
  gate_release(c, x->gate);
  pthread_mutex_unlock(&c->mu);
}

/* c->mu held. The owner's reserve failed: unless a drain found the intent meanwhile
 * (then the store holds it after all and the owner waits like a retry would), every
 * send waiting on the placeholder gets the error. */
static void reserve_failed(qim__commit_send *x, qim__commit_entry *e, int st) {
  qim_commit *c = x->c;
  if (e->reserved) {
    x->outcome = QIM_RESERVE_RESULT_EXISTING;
    x->wnext = e->waiters;
    e->waiters = x;
    qim__entry_drive(c, e);
    return;
  }
  int code = map_store_error(st);
  qim__entry_complete_waiters(c, e, code);
  qim__entry_free(c, e);
  send_fail(x, code);
}

/* c->mu held. The key was committed before: replay the ACK (unless it was for another
 * conversation: then the cmid is being reused). */
static void reserve_replayed(qim__commit_send *x, qim__commit_entry *e, const qim_committed_message *cm) {
  qim_commit *c = x->c;
  QIM__COUNT(c, replayed);
  x->outcome = QIM_RESERVE_RESULT_COMMITTED;
  x->wnext = e->waiters;
  e->waiters = x;
  qim__entry_log(e, "commit.reserved", "kind=committed");
  if (!qim_u128_eq(cm->coordinates.conversation_id.v, x->conv_id.v)) {
    qim__entry_complete_waiters(c, e, qim_err_raise(QIM_E_COMMIT_CLIENT_MESSAGE_ID_REUSED));
  } else {
    for (qim__commit_send *w = e->waiters; w; w = w->wnext) w->outcome = QIM_RESERVE_RESULT_COMMITTED;
    e->intent.coordinates = cm->coordinates;
    qim__entry_complete_waiters(c, e, 0);
  }
  qim__entry_free(c, e);
}

/* c->mu held. Fresh or Existing: the store holds the intent; drive it. */
static void reserve_held(qim__commit_send *x, qim__commit_entry *e, qim_store_intent_reserve_req *q) {
  qim_commit *c = x->c;
  qim__commit_conv *cv = e->conv;
  bool fresh = q->out.kind == QIM_RESERVE_RESULT_FRESH;
  if (!e->reserved) {
    e->intent = q->out.intent;
    e->reserved = true;
    e->state = e->intent.state;
    e->trace = e->intent.trace_id;
  } else {
    qim_commit_intent_free(&q->out.intent);
  }
  memset(&q->out.intent, 0, sizeof q->out.intent);
  qim__pending_remove(cv, e);
  x->outcome = q->out.kind;
  if (fresh) {
    QIM__COUNT(c, fresh);
    e->has_order = true;
    e->order = q->out_order;
    e->horizon = cv->next_ticket - 1;
    if (!e->listed && e->state < QIM_COMMIT_STATE_OUTBOXED) qim__ready_insert(cv, e);
  } else {
    QIM__COUNT(c, existing);
    if (!e->listed && e->state < QIM_COMMIT_STATE_OUTBOXED) e->needs_drain = true;
  }
  char extra[64];
  snprintf(extra, sizeof extra, "kind=%s order=%llu", fresh ? "fresh" : "existing",
           (unsigned long long)q->out_order);
  qim__entry_log(e, "commit.reserved", extra);
  x->wnext = e->waiters;
  e->waiters = x;
  if (e->needs_drain) qim__conv_request_drain(c, cv);
  qim__entry_drive(c, e);
}

/* c->mu held. The store committed the fresh key in the reserve's own transaction (nothing
 * earlier in the conversation was unpublished, store.h): no step is left. The entry never
 * joins the ready list or takes an outbox slot; leaving the pending list lets later
 * intents of the conversation, which the writer ordered after it, move on. */
static void reserve_committed_here(qim__commit_send *x, qim__commit_entry *e,
                                   const qim_store_intent_reserve_req *q) {
  qim_commit *c = x->c;
  QIM__COUNT(c, fresh);
  QIM__COUNT(c, committed_in_reserve);
  qim__pending_remove(e->conv, e);
  if (!e->reserved) e->intent.coordinates = q->out.committed.coordinates;
  e->reserved = true;
  e->state = QIM_COMMIT_STATE_COMMITTED;
  e->position = q->out_position;
  e->has_position = true;
  x->outcome = QIM_RESERVE_RESULT_FRESH;
  x->wnext = e->waiters;
  e->waiters = x;
  char extra[80];
  snprintf(extra, sizeof extra, "kind=fresh order=%llu in_reserve=1 offset=%llu",
           (unsigned long long)q->out_order, (unsigned long long)q->out_position.offset);
  qim__entry_log(e, "commit.reserved", extra);
  /* The steps happened, inside the reserve: their lines keep a trace readable either way. */
  qim__entry_log(e, "commit.recorded", NULL);
  snprintf(extra, sizeof extra, "offset=%llu", (unsigned long long)q->out_position.offset);
  qim__entry_log(e, "commit.outboxed", extra);
  qim__entry_log(e, "commit.verified", NULL);
  qim__entry_drive(c, e); /* Committed: completes the waiters and frees the entry */
}

/* c->mu held. The rivals of an answered placeholder reserve again: now the key is either
 * held (attach decides with the stored content) or free (the store decides). */
static void rivals_retry(qim__commit_send *w) {
  while (w) {
    qim__commit_send *next = w->wnext;
    qim_delivery_audience_free(&w->proposal.delivery.audience);
    send_reserve(w);
    w = next;
  }
}

static void reserve_done(qim_store_req *r) {
  qim__commit_send *x = r->data;
  qim_commit *c = x->c;
  qim_store_intent_reserve_req *q = &x->rq.reserve;
  pthread_mutex_lock(&c->mu);
  qim__commit_entry *e = x->entry;
  qim__commit_conv *cv = e->conv;
  qim__commit_send *rivals = e->rivals;
  e->rivals = NULL;
  e->reserving = false;
  bool here = r->status == 0 && q->out_committed_here;
  if (r->status < 0)
    reserve_failed(x, e, r->status);
  else if (here)
    reserve_committed_here(x, e, q);
  else if (q->out.kind == QIM_RESERVE_RESULT_COMMITTED)
    reserve_replayed(x, e, &q->out.committed);
  else
    reserve_held(x, e, q);
  rivals_retry(rivals);
  qim__conv_kick(c, cv);
  qim__conv_maybe_free(c, cv);
  pthread_mutex_unlock(&c->mu);
}

/* ---- entry points -------------------------------------------------------------------- */

static qim__commit_send *send_new(qim_commit *c, qim_commit_op *op, int kind) {
  qim__commit_send *x = qim_calloc(1, sizeof *x);
  x->c = c;
  x->op = op;
  x->kind = kind;
  x->outcome = QIM_RESERVE_RESULT_FRESH;
  op->priv_ = x;
  return x;
}

/* Ids are taken before anything is stored: a clock that stepped back refuses the send
 * before it can make an out-of-order MessageId. */
static int take_ids(qim__commit_send *x) {
  int rc = qim_id_gen_message_id(x->c->ids, &x->message_id);
  if (rc == 0) rc = qim_id_gen_last_activity_id(x->c->ids, &x->activity_id);
  return rc;
}

/* Attaches to a live entry of the key, or starts the checks: from the conversation's cached
 * facts, or with conversations.get. */
static int send_begin(qim__commit_send *x) {
  qim_commit *c = x->c;
  char conv[33], cmid[33];
  qim__u128_hex(x->conv_id.v, conv);
  qim__hex16(x->cmid.b, cmid);
  QIM_LOGI(&x->trace, "commit.send", "conv=%s cmid=%s control=%d", conv, cmid, x->kind == QIM__SEND_CONTROL);
  pthread_mutex_lock(&c->mu);
  int rc = c->closing ? -ESHUTDOWN : 0;
  qim__commit_entry *e = rc == 0 ? qim__entry_find(c, &(qim_commit_key){x->actor.tenant_id, x->actor.user_id, x->cmid}) : NULL;
  bool known = false;
  if (e)
    rc = attach(x, e);
  else if (rc == 0) {
    gate_enter(c, x);
    known = facts_find(x);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc < 0 || e) {
    if (rc < 0) return send_drop(x, rc);
    return 0;
  }
  if (known) {
    facts_known(x);
    return 0;
  }
  qim_store_conv_get_req *g = &x->rq.conv_get;
  memset(g, 0, sizeof *g);
  prep(x, conv_checked);
  g->tenant_id = x->actor.tenant_id;
  g->conversation_id = x->conv_id;
  rc = c->store->vt->conversations.get(c->store, g);
  if (rc < 0) {
    pthread_mutex_lock(&c->mu);
    gate_leave(c, x);
    pthread_mutex_unlock(&c->mu);
    return send_drop(x, qim_err_raise(QIM_E_COMMIT_UNAVAILABLE));
  }
  return 0;
}

/* The synchronous checks of a client send, cheapest first; the rate limit last, so a
 * malformed send costs no token. */
static int check_client(qim_commit *c, const qim_authenticated_send *s, qim_error *err) {
  const qim_send_message *m = &s->request;
  if (!qim_client_message_id_is_valid(&m->client_message_id))
    return qim_err_raise(QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  if (m->content.message_type == QIM_MESSAGE_TYPE_CONTROL) return qim_err_raise(QIM_E_COMMIT_PERMISSION_DENIED);
  if (content_size(&m->content) > c->cfg.max_message_size) return qim_err_raise(QIM_E_COMMIT_MESSAGE_TOO_LARGE);
  if (m->mention_count > c->cfg.max_mentions) return qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE);
  if (c->rate && qim__rate_take(c->rate, s->actor.tenant_id, s->actor.user_id, qim__now_ms(c),
                                &err->retry_after_ms) != 0) {
    QIM__COUNT(c, rate_limited);
    return qim_err_raise(QIM_E_COMMIT_RATE_LIMITED);
  }
  return 0;
}

int qim_commit_send(qim_commit *c, const qim_authenticated_send *s, qim_commit_op *op) {
  memset(&op->result, 0, sizeof op->result);
  op->priv_ = NULL;
  if (!op->cq || !op->done || !s) return op->result.status = op->result.error.code = -EINVAL;
  QIM__COUNT(c, sends);
  qim_error err = {0};
  int rc = check_client(c, s, &err);
  if (rc < 0) return refuse(c, op, rc, &err, &s->trace_id);
  qim__commit_send *x = send_new(c, op, QIM__SEND_CLIENT);
  x->actor = s->actor;
  x->conv_id = s->request.conversation_id;
  x->cmid = s->request.client_message_id;
  x->content = &s->request.content;
  x->mentions = s->request.mention_targets;
  x->mention_count = s->request.mention_count;
  x->has_reply = s->request.has_reply_to;
  x->reply_seq = s->request.reply_to_conversation_seq;
  x->retention = c->cfg.retention_class;
  x->trace = s->trace_id;
  rc = take_ids(x);
  if (rc < 0) return send_drop(x, rc);
  return send_begin(x);
}

int qim_commit_send_control(qim_commit *c, const qim_commit_control *ctl, qim_commit_op *op) {
  memset(&op->result, 0, sizeof op->result);
  op->priv_ = NULL;
  if (!op->cq || !op->done || !ctl) return op->result.status = op->result.error.code = -EINVAL;
  QIM__COUNT(c, sends);
  int rc = 0;
  if (!qim_client_message_id_is_valid(&ctl->client_message_id))
    rc = qim_err_raise(QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  else if (ctl->content.message_type != QIM_MESSAGE_TYPE_CONTROL)
    rc = -EINVAL;
  else if (ctl->audience && (ctl->audience->kind != QIM_DELIVERY_AUDIENCE_DIRECT ||
                             ctl->audience->direct.recipient_count == 0 || !ctl->audience->direct.recipients))
    rc = -EINVAL;
  else if (content_size(&ctl->content) > c->cfg.max_message_size)
    rc = qim_err_raise(QIM_E_COMMIT_MESSAGE_TOO_LARGE);
  if (rc < 0) return refuse(c, op, rc, NULL, &ctl->trace_id);
  qim__commit_send *x = send_new(c, op, QIM__SEND_CONTROL);
  x->actor = ctl->actor;
  x->conv_id = ctl->conversation_id;
  x->cmid = ctl->client_message_id;
  x->content = &ctl->content;
  x->retention = ctl->retention_class;
  x->audience = ctl->audience;
  x->trace = ctl->trace_id;
  rc = take_ids(x);
  if (rc < 0) return send_drop(x, rc);
  return send_begin(x);
}
