/*
 * bench/commit.c — sends per second through the full commit on SQLite: checks, reserve,
 * history row, outbox publication, read-back, Committed, ACK; every step durable
 * (synchronous=FULL, group commit).
 *
 * Sender threads each behave like a gateway loop with many connections: they keep
 * `--inflight` sends outstanding on their own completion queue. Two runs, on fresh
 * stores: every send new; then 10% of sends are client retries of an earlier cmid (same
 * content), which must come back with the first send's seq. Printed per run: sends/s,
 * latency percentiles, store transactions and fsyncs per send, and the run's checks.
 *
 *   qim-bench-commit [--senders N] [--inflight W] [--messages M] [--conversations C] [--dup PCT]
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commit/commit.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"

typedef struct opts {
  int senders, inflight, messages, conversations, dup_pct;
} opts;

typedef struct env {
  qim_store *store;
  qim_commit *commit;
  qim_tenant_id tenant;
  qim_conversation_id *convs;
  char dir[256];
} env;

typedef struct slot {
  qim_commit_op op;
  qim_authenticated_send send;
  char text[48];
  uint64_t t0;
  int msg;        /* index of the message in the sender's plan */
  bool retry;
  struct sender *s;
} slot;

typedef struct sender {
  env *e;
  const opts *o;
  int index;
  qim_cq *cq;
  slot *slots;
  int next, done, busy;
  uint64_t *lat;           /* ns per completed send */
  uint64_t *seq_of;        /* seq acked per message of the plan (0 = none yet) */
  uint64_t errors, retries, retry_mismatch;
  unsigned rng;
} sender;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "qim-bench-commit: %s: %s (%d)\n", what, qim_err_name(rc), rc);
  exit(1);
}

static qim_user_id user_of(int i) { return (qim_user_id){{0, (uint64_t)i + 1}}; }

/* Users 1..senders, and `conversations` groups everybody is a member of. */
static void env_populate(env *e, const opts *o) {
  e->convs = qim_calloc((size_t)o->conversations, sizeof *e->convs);
  for (int c = 0; c < o->conversations; c++) {
    qim_store_conv_create_req r;
    memset(&r, 0, sizeof r);
    r.conv.tenant_id = e->tenant;
    r.conv.conversation_id.v = (qim_u128){0xbe, (uint64_t)c + 1};
    r.conv.kind = QIM_CONVERSATION_GROUP;
    r.conv.owner_id = user_of(0);
    r.now = 1;
    int rc = QIM_STORE_SYNC(e->store, conversations.create, &r);
    if (rc) die("conversations.create", rc);
    e->convs[c] = r.conv.conversation_id;
    for (int u = 1; u < o->senders; u++) {
      qim_store_member_change ch = {.op = QIM_STORE_MEMBER_ADD, .user_id = user_of(u),
                                    .role = QIM_GROUP_ROLE_MEMBER, .mode_want = 0x2f, .mode_given = 0x2f};
      qim_store_members_change_req m;
      memset(&m, 0, sizeof m);
      m.tenant_id = e->tenant;
      m.conversation_id = e->convs[c];
      m.changes = &ch;
      m.change_count = 1;
      m.member_limit = 100000;
      m.now = 1;
      if ((rc = QIM_STORE_SYNC(e->store, conversations.members_change, &m))) die("members_change", rc);
    }
  }
}

static void env_open(env *e, const opts *o) {
  memset(e, 0, sizeof *e);
  const char *tmp = getenv("TMPDIR");
  snprintf(e->dir, sizeof e->dir, "%s/qim-bench-commit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(e->dir)) die("mkdtemp", -errno);
  char url[300];
  snprintf(url, sizeof url, "sqlite:%s/qim.db", e->dir);
  qim_store_options so = {.shards = {.shard_count = 16, .lanes_per_shard = 4}};
  int rc = qim_store_open(url, &so, &e->store);
  if (rc) die("qim_store_open", rc);
  e->tenant.v = (qim_u128){0, 1};
  env_populate(e, o);
  qim_commit_config cfg;
  qim_commit_config_default(&cfg);
  cfg.rate_per_sec = 0; /* measuring the pipeline, not the limiter */
  if ((rc = qim_commit_create(e->store, qim_clock_system(), NULL, &cfg, &e->commit))) die("qim_commit_create", rc);
}

static void env_close(env *e) {
  qim_commit_destroy(e->commit);
  qim_store_close(e->store);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
  if (system(cmd) != 0) fprintf(stderr, "qim-bench-commit: could not remove %s\n", e->dir);
  qim_free(e->convs);
}

/* ---- one sender ------------------------------------------------------------------ */

static void start_one(sender *s, slot *sl);

static void on_done(qim_commit_op *op) {
  slot *sl = op->data;
  sender *s = sl->s;
  s->lat[s->done++] = now_ns() - sl->t0;
  s->busy--;
  uint64_t seq = op->result.ack.coordinates.conversation_seq;
  if (op->result.status != 0)
    s->errors++;
  else if (!s->seq_of[sl->msg])
    s->seq_of[sl->msg] = seq; /* a retry may be answered before the send it repeats */
  else if (s->seq_of[sl->msg] != seq)
    s->retry_mismatch++;
  if (s->next < s->o->messages) start_one(s, sl);
}

/* The next send of the plan into `sl`: a new message, or (dup_pct of the time) a retry
 * of one of this sender's earlier messages with the same cmid and content. */
static void start_one(sender *s, slot *sl) {
  int n = s->next++;
  bool retry = n > 0 && (int)(rand_r(&s->rng) % 100) < s->o->dup_pct;
  int msg = retry ? (int)(rand_r(&s->rng) % (unsigned)n) : n;
  env *e = s->e;
  memset(&sl->send, 0, sizeof sl->send);
  sl->send.actor.tenant_id = e->tenant;
  sl->send.actor.user_id = user_of(s->index);
  sl->send.request.client_message_id.b[0] = 0xb0;
  sl->send.request.client_message_id.b[1] = (uint8_t)s->index;
  for (int i = 0; i < 4; i++) sl->send.request.client_message_id.b[15 - i] = (uint8_t)(msg >> (8 * i));
  sl->send.request.conversation_id = e->convs[(msg * 7 + s->index) % s->o->conversations];
  snprintf(sl->text, sizeof sl->text, "message %d of sender %d", msg, s->index);
  sl->send.request.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  sl->send.request.content.payload_or_ciphertext.p = (uint8_t *)sl->text;
  sl->send.request.content.payload_or_ciphertext.n = strlen(sl->text);
  sl->send.trace_id = qim_trace_id_new();
  sl->msg = msg;
  sl->retry = retry;
  s->retries += retry;
  sl->t0 = now_ns();
  sl->op = (qim_commit_op){.cq = s->cq, .done = on_done, .data = sl};
  s->busy++;
  int rc = qim_commit_send(e->commit, &sl->send, &sl->op);
  if (rc < 0) {
    s->busy--;
    s->errors++;
    s->lat[s->done++] = 0;
  }
}

static void *sender_main(void *arg) {
  sender *s = arg;
  for (int i = 0; i < s->o->inflight && s->next < s->o->messages; i++) start_one(s, &s->slots[i]);
  while (s->done < s->o->messages) qim_cq_wait(s->cq, 1000);
  return NULL;
}

/* ---- a run -------------------------------------------------------------------------- */

static uint64_t pct(uint64_t *v, size_t n, double p) {
  if (n == 0) return 0;
  size_t i = (size_t)(p * (double)(n - 1));
  return v[i];
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int run(const opts *o, const char *label) {
  env e;
  env_open(&e, o);
  sender *ss = qim_calloc((size_t)o->senders, sizeof *ss);
  pthread_t *th = qim_calloc((size_t)o->senders, sizeof *th);
  for (int i = 0; i < o->senders; i++) {
    sender *s = &ss[i];
    s->e = &e;
    s->o = o;
    s->index = i;
    s->rng = 12345u + (unsigned)i;
    s->slots = qim_calloc((size_t)o->inflight, sizeof *s->slots);
    for (int k = 0; k < o->inflight; k++) s->slots[k].s = s;
    s->lat = qim_calloc((size_t)o->messages, sizeof *s->lat);
    s->seq_of = qim_calloc((size_t)o->messages, sizeof *s->seq_of);
    if (qim_cq_new_blocking(&s->cq)) die("qim_cq_new_blocking", -ENOMEM);
  }
  qim_store_stats st0, st1;
  qim_store_get_stats(e.store, &st0);
  uint64_t t0 = now_ns();
  for (int i = 0; i < o->senders; i++) pthread_create(&th[i], NULL, sender_main, &ss[i]);
  for (int i = 0; i < o->senders; i++) pthread_join(th[i], NULL);
  double secs = (double)(now_ns() - t0) / 1e9;
  qim_store_get_stats(e.store, &st1);
  size_t total = (size_t)o->senders * (size_t)o->messages, k = 0;
  uint64_t *lat = qim_calloc(total, sizeof *lat), errors = 0, retries = 0, mismatch = 0;
  for (int i = 0; i < o->senders; i++) {
    memcpy(lat + k, ss[i].lat, (size_t)ss[i].done * sizeof *lat);
    k += (size_t)ss[i].done;
    errors += ss[i].errors;
    retries += ss[i].retries;
    mismatch += ss[i].retry_mismatch;
  }
  qsort(lat, k, sizeof *lat, cmp_u64);
  qim_commit_stats cs;
  qim_commit_get_stats(e.commit, &cs);
  printf("commit %-14s senders=%d inflight=%d conversations=%d sends=%zu retries=%llu  "
         "sends/s=%.0f  p50=%.2fms p99=%.2fms  txn/send=%.3f fsync/send=%.3f  "
         "errors=%llu retry_seq_mismatch=%llu fresh=%llu replayed=%llu existing=%llu "
         "in_reserve=%llu ops/send=%.2f\n",
         label, o->senders, o->inflight, o->conversations, total, (unsigned long long)retries,
         (double)total / secs, (double)pct(lat, k, 0.50) / 1e6, (double)pct(lat, k, 0.99) / 1e6,
         (double)(st1.transactions - st0.transactions) / (double)total,
         (double)(st1.fsyncs - st0.fsyncs) / (double)total, (unsigned long long)errors,
         (unsigned long long)mismatch, (unsigned long long)cs.fresh, (unsigned long long)cs.replayed,
         (unsigned long long)cs.existing, (unsigned long long)cs.committed_in_reserve,
         (double)(st1.operations - st0.operations) / (double)total);
  fflush(stdout);
  for (int i = 0; i < o->senders; i++) {
    qim_cq_free(ss[i].cq);
    qim_free(ss[i].slots);
    qim_free(ss[i].lat);
    qim_free(ss[i].seq_of);
  }
  qim_free(ss);
  qim_free(th);
  qim_free(lat);
  env_close(&e);
  return errors || mismatch ? 1 : 0;
}

static int arg_int(int argc, char **argv, const char *name, int def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
  return def;
}

int main(int argc, char **argv) {
  qim_log_set_level(QIM_LOG_WARN);
  opts o = {
      .senders = arg_int(argc, argv, "--senders", 8),
      .inflight = arg_int(argc, argv, "--inflight", 32),
      .messages = arg_int(argc, argv, "--messages", 2500),
      .conversations = arg_int(argc, argv, "--conversations", 64),
      .dup_pct = 0,
  };
  if (o.senders < 1 || o.senders > 200 || o.inflight < 1 || o.messages < 1 || o.conversations < 1) {
    fprintf(stderr, "usage: qim-bench-commit [--senders N] [--inflight W] [--messages M] [--conversations C] [--dup PCT]\n");
    return 2;
  }
  int rc = run(&o, "new");
  o.dup_pct = arg_int(argc, argv, "--dup", 10);
  char label[32];
  snprintf(label, sizeof label, "%d%%-retries", o.dup_pct);
  rc |= run(&o, label);
  return rc;
}
