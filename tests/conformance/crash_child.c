/*
 * crash_child.c — the process the crash test kills: it commits messages and log appends
 * as fast as the store takes them and acknowledges each to the parent only after the
 * store reported it done (durable).
 *
 * 64 message submitters (one per conversation, each: reserve → recorded → outboxed →
 * committed, then the next message) and 4 log submitters (50 appends per request) keep
 * ~70 operations queued, so every group commit is a large transaction. The before_commit
 * hook pauses a few milliseconds (a slow disk) between counting its entry and its exit in
 * shared memory: most of the child's life is spent inside a transaction, and the parent
 * can tell afterwards whether its SIGKILL landed there. A message a previous child left in
 * flight is first driven to COMMITTED (recovery, in seq order per conversation).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "qim/err.h"
#include "qim/cq.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"

typedef struct child child;

/* One conversation's message pipeline. */
typedef struct msg_sub {
  union {
    qim_store_req req;
    qim_store_intent_reserve_req reserve;
    qim_store_intent_advance_req advance;
  } u;
  child *C;
  int idx;
  uint32_t n;                 /* messages started by this child */
  qim_commit_intent proposal; /* owns its content */
  qim_commit_key key;
  qim_commit_state next;      /* the step being submitted */
  qim_conversation_seq seq;
} msg_sub;

typedef struct log_sub {
  qim_store_log_append_req req;
  qim_store_log_append appends[CRASH_LOG_BATCH];
  uint8_t payloads[CRASH_LOG_BATCH][CRASH_LOG_PAYLOAD];
  child *C;
  int idx;
  uint32_t n;
} log_sub;

struct child {
  qim_store *store;
  qim_cq *cq;
  crash_shared *shared;
  uint32_t cycle, seed;
  msg_sub msgs[CRASH_CONVERSATIONS];
  log_sub logs[CRASH_LOG_SUBMITTERS];
  qim_store_req *retry[CRASH_CONVERSATIONS + CRASH_LOG_SUBMITTERS]; /* refused with -EAGAIN */
  size_t nretry;
};

static _Noreturn void die(const char *what, int rc) {
  fprintf(stderr, "crash child: %s: %s\n", what, qim_err_name(rc));
  _exit(3);
}

static void ack(crash_ack_kind kind, uint32_t idx, uint64_t value, const uint8_t key[16]) {
  crash_ack a = {.kind = kind, .idx = idx, .value = value};
  if (key) memcpy(a.key, key, 16);
  /* One write of a record below PIPE_BUF is atomic; the parent reads whole records. */
  if (write(CRASH_ACK_FD, &a, sizeof a) != (ssize_t)sizeof a) die("ack write", -errno);
}

/* Sanitizer builds execute a batch several times slower; the pause grows with them so
 * that it still dominates the commit cycle. */
#if defined(__SANITIZE_ADDRESS__)
#define PAUSE_SCALE 3
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAUSE_SCALE 3
#endif
#endif
#ifndef PAUSE_SCALE
#define PAUSE_SCALE 1
#endif

/* The slow disk, and the marker of "inside a transaction" around it: 60-150 ms. */
static void hook(void *ctx) {
  child *C = ctx;
  atomic_fetch_add(&C->shared->entered, 1);
  long ms = PAUSE_SCALE * (60 + rand_r(&C->seed) % 90);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&C->shared->left, 1);
}

static void submit(child *C, qim_store_req *r, int rc) {
  if (rc == -EAGAIN) {
    C->retry[C->nretry++] = r; /* backpressure: resubmitted after the next completion */
  } else if (rc != 0) {
    die("submit", rc);
  }
}

/* ---- messages --------------------------------------------------------------------------- */

static void msg_done(qim_store_req *r);

static int msg_submit(msg_sub *m) {
  child *C = m->C;
  memset(&m->u, 0, sizeof m->u);
  m->u.req.cq = C->cq;
  m->u.req.done = msg_done;
  m->u.req.data = m;
  if (m->next == QIM_COMMIT_STATE_RESERVED) {
    m->u.reserve.proposal = &m->proposal;
    return C->store->vt->intents.reserve(C->store, &m->u.reserve);
  }
  m->u.advance.key = m->key;
  m->u.advance.to = m->next;
  m->u.advance.now = 1000 + m->n;
  return C->store->vt->intents.advance(C->store, &m->u.advance);
}

/* A fresh message: its cmid (= message id) is unique across every child of the test. */
static void msg_start(msg_sub *m) {
  uint8_t id[16];
  qim_u128_to_be((qim_u128){0, ((uint64_t)m->C->cycle << 40) | ((uint64_t)m->idx << 24) | ++m->n}, id);
  qim_commit_intent *p = &m->proposal;
  qim_commit_intent_free(p);
  memset(p, 0, sizeof *p);
  p->key = (qim_commit_key){{{0, CRASH_TENANT}}, {{0, CRASH_SENDER}}, {{0}}};
  memcpy(p->key.client_message_id.b, id, 16);
  memcpy(p->coordinates.message_id.b, id, 16);
  memcpy(p->coordinates.last_activity_id.b, id, 16);
  p->coordinates.conversation_id = crash_conv(m->idx);
  p->delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
  p->delivery.audience.group.group_id.v = p->coordinates.conversation_id.v;
  p->delivery.inline_body = true;
  p->delivery.created_at = 1000;
  p->record.coordinates = p->coordinates;
  p->record.sender.tenant_id = p->key.tenant_id;
  p->record.sender.user_id = p->key.sender_id;
  p->record.client_message_id = p->key.client_message_id;
  p->record.content.payload_or_ciphertext.p = qim_memdup(id, 16);
  p->record.content.payload_or_ciphertext.n = 16;
  p->record.created_at = 1000;
  m->key = p->key;
  m->next = QIM_COMMIT_STATE_RESERVED;
  submit(m->C, &m->u.req, msg_submit(m));
}

static void msg_done(qim_store_req *r) {
  msg_sub *m = r->data;
  if (r->status != 0) die("message step", r->status);
  if (m->next == QIM_COMMIT_STATE_RESERVED) {
    if (m->u.reserve.out.kind != QIM_RESERVE_RESULT_FRESH) die("reserve of a fresh cmid", -EEXIST);
    m->seq = m->u.reserve.out.intent.coordinates.conversation_seq;
    qim_commit_intent_free(&m->u.reserve.out.intent);
  }
  if (m->next == QIM_COMMIT_STATE_COMMITTED) {
    ack(CRASH_ACK_MESSAGE, (uint32_t)m->idx, m->seq, m->key.client_message_id.b);
    msg_start(m);
    return;
  }
  m->next++;
  submit(m->C, &m->u.req, msg_submit(m));
}

/* ---- log appends ------------------------------------------------------------------------ */

static void log_done(qim_store_req *r);

static void log_start(log_sub *l) {
  memset(&l->req, 0, sizeof l->req);
  l->n++;
  for (int i = 0; i < CRASH_LOG_BATCH; i++) {
    qim_store_log_append *a = &l->appends[i];
    memset(a, 0, sizeof *a);
    a->stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, (uint32_t)l->idx};
    qim_u128_to_be((qim_u128){l->C->cycle, ((uint64_t)l->idx << 48) | ((uint64_t)l->n << 16) | (uint64_t)i}, a->key);
    crash_log_payload(a->key, l->payloads[i]);
    a->payload = (qim_bytes){l->payloads[i], CRASH_LOG_PAYLOAD};
  }
  l->req.req.cq = l->C->cq;
  l->req.req.done = log_done;
  l->req.req.data = l;
  l->req.appends = l->appends;
  l->req.append_count = CRASH_LOG_BATCH;
  submit(l->C, &l->req.req, l->C->store->vt->logs.append(l->C->store, &l->req));
}

static void log_done(qim_store_req *r) {
  log_sub *l = r->data;
  if (r->status != 0) die("log append", r->status);
  for (int i = 0; i < CRASH_LOG_BATCH; i++)
    ack(CRASH_ACK_LOG, (uint32_t)l->idx, l->appends[i].out_position.offset, l->appends[i].key);
  log_start(l);
}

/* ---- start-up: recovery of what the previous child left in flight ----------------------- */

/* In-flight intents continue from their state; at most one per conversation (each
 * submitter is sequential), so per-conversation outbox order holds. */
static void plan_recovery(child *C, bool *recovering) {
  qim_store_intent_list_req r = {.limit = 10000};
  int rc = QIM_STORE_SYNC(C->store, intents.list_in_flight, &r);
  if (rc) die("list in flight", rc);
  for (size_t i = 0; i < r.out_count; i++) {
    qim_commit_intent *in = &r.out_intents[i];
    int idx = (int)(in->coordinates.conversation_id.v.lo - CRASH_CONV_BASE);
    if (idx < 0 || idx >= CRASH_CONVERSATIONS || recovering[idx]) die("unexpected in-flight intent", -EINVAL);
    msg_sub *m = &C->msgs[idx];
    recovering[idx] = true;
    m->key = in->key;
    m->seq = in->coordinates.conversation_seq;
    m->next = in->state + 1;
  }
  for (size_t i = 0; i < r.out_count; i++) qim_commit_intent_free(&r.out_intents[i]);
  qim_free(r.out_intents);
}

static void open_shared(child *C, const char *path) {
  int fd = open(path, O_RDWR);
  if (fd < 0) die("open shared", -errno);
  C->shared = mmap(NULL, sizeof *C->shared, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (C->shared == MAP_FAILED) die("mmap shared", -errno);
}

int crash_child_main(const char *db_url, const char *shared_path, uint32_t cycle, uint32_t seed) {
  static child C;
  C.cycle = cycle;
  C.seed = seed;
  open_shared(&C, shared_path);
  qim_store_options opt = crash_options();
  opt.before_commit = hook;
  opt.hook_ctx = &C;
  int rc = qim_store_open(db_url, &opt, &C.store);
  if (rc) die("open store", rc);
  if ((rc = qim_cq_new_blocking(&C.cq))) die("cq", rc);
  bool recovering[CRASH_CONVERSATIONS] = {false};
  plan_recovery(&C, recovering);
  for (int i = 0; i < CRASH_CONVERSATIONS; i++) {
    msg_sub *m = &C.msgs[i];
    m->C = &C;
    m->idx = i;
    if (recovering[i])
      submit(&C, &m->u.req, msg_submit(m));
    else
      msg_start(m);
  }
  for (int i = 0; i < CRASH_LOG_SUBMITTERS; i++) {
    C.logs[i].C = &C;
    C.logs[i].idx = i;
    log_start(&C.logs[i]);
  }
  for (;;) {
    qim_cq_wait(C.cq, -1);
    size_t n = C.nretry;
    C.nretry = 0;
    for (size_t i = 0; i < n; i++) {
      qim_store_req *r = C.retry[i];
      if (r->done == msg_done) submit(&C, r, msg_submit(r->data));
      else submit(&C, r, C.store->vt->logs.append(C.store, (qim_store_log_append_req *)r));
    }
  }
}
