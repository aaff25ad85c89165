/*
 * store.c — the storage benchmark (`make bench-store`): durable message commits per
 * second through the SQLite backend, where one message is the whole commit —
 * intents.reserve + advance to RECORDED (history row) + OUTBOXED (outbox append) +
 * COMMITTED — every write fsync'd (synchronous=FULL) before it is acknowledged.
 *
 * From one run it prints:
 *   (a) one message at a time: a single submitter that sends a message and waits for it
 *       before the next, so nothing from other messages can share its transaction;
 *   (b) group commit: 64 concurrent submitters, each in its own conversation;
 * their ratio, and transactions per operation under (b). Each phase runs both ways a
 * submitter can drive a message: "pipelined" (the four operations queued back to back,
 * then one wait — queue order keeps them in sequence) and "stepwise" (a wait after every
 * operation, as a caller that needs each result before the next step does). (a) and (b)
 * are compared in the same mode.
 *
 * Usage: qim-bench-store [DIR] [SECONDS]   (DIR must be on a real disk; default $TMPDIR
 * or /tmp; SECONDS per phase, default 3)
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qim/clock.h"
#include "qim/err.h"
#include "qim/mem.h"
#include "qim/record.h"

#define SUBMITTERS 64
#define TARGET_MSGS_PER_SEC 15000.0
#define TARGET_RATIO 3.0
#define TARGET_OPS_PER_TXN 8.0

static const char body[] =
    "{\"txt\":\"a benchmark message of about one hundred bytes, like a short chat line.\"}";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static qim_u128 id(uint64_t kind, uint64_t n) {
  return (qim_u128){0xBE00000000000000ull | kind, n};
}

static void be64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

/* Time-ordered ids, as the commit module makes them (DESIGN.md §1b). */
static qim_id_gen idgen;

/* A text message of `sender` in its own group; `n` makes the cmid unique. */
static void proposal(qim_commit_intent *p, uint64_t sender, uint64_t n) {
  memset(p, 0, sizeof *p);
  p->key.tenant_id.v = id(1, 1);
  p->key.sender_id.v = id(2, sender);
  p->key.client_message_id.b[0] = 0xC1;
  be64(p->key.client_message_id.b + 8, n);
  p->coordinates.conversation_id.v = id(3, sender);
  if (qim_id_gen_message_id(&idgen, &p->coordinates.message_id) ||
      qim_id_gen_last_activity_id(&idgen, &p->coordinates.last_activity_id))
    abort(); /* the system clock stepped back: no sensible figure from this run */
  p->delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
  p->delivery.inline_body = true;
  p->delivery.created_at = 1700000000000ull + n;
  p->record.coordinates = p->coordinates;
  p->record.sender.tenant_id = p->key.tenant_id;
  p->record.sender.user_id = p->key.sender_id;
  p->record.client_message_id = p->key.client_message_id;
  p->record.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  p->record.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)body, sizeof body - 1};
  p->record.created_at = p->delivery.created_at;
}

/* ---- one message --------------------------------------------------------------------- */

typedef struct message_ops {
  qim_store_intent_reserve_req reserve;
  qim_store_intent_advance_req step[3];
  int done;
} message_ops;

static void count_done(qim_store_req *r) {
  (*(int *)r->data)++;
}

/* Submits with retry on backpressure (never expected at these depths). */
#define SUBMIT(s, call, r)                                          \
  do {                                                              \
    int rc_;                                                        \
    while ((rc_ = (s)->vt->call((s), (r))) == -EAGAIN) usleep(100); \
    if (rc_) return rc_;                                            \
  } while (0)

static int send_message(qim_store *s, qim_cq *cq, uint64_t sender, uint64_t n, bool stepwise) {
  qim_commit_intent p;
  proposal(&p, sender, n);
  message_ops m = {0};
  m.reserve.req = (qim_store_req){.cq = cq, .done = count_done, .data = &m.done};
  m.reserve.proposal = &p;
  SUBMIT(s, intents.reserve, &m.reserve);
  int want = 1;
  for (int i = 0; i < 3; i++) {
    if (stepwise)
      while (m.done < want) qim_cq_wait(cq, -1);
    m.step[i].req = (qim_store_req){.cq = cq, .done = count_done, .data = &m.done};
    m.step[i].key = p.key;
    m.step[i].to = (qim_commit_state)(QIM_COMMIT_STATE_RECORDED + i);
    m.step[i].now = p.record.created_at;
    SUBMIT(s, intents.advance, &m.step[i]);
    want++;
  }
  while (m.done < want) qim_cq_wait(cq, -1);
  qim_commit_intent_free(&m.reserve.out.intent);
  int rc = m.reserve.req.status;
  for (int i = 0; i < 3 && rc == 0; i++) rc = m.step[i].req.status;
  return rc;
}

/* ---- phases ----------------------------------------------------------------------------- */

typedef struct phase {
  qim_store *s;
  bool stepwise;
  double seconds;
  atomic_bool stop;
  atomic_ullong messages;
  atomic_int errors;
  uint64_t next_n[SUBMITTERS]; /* per-submitter message counter, kept across phases */
} phase;

typedef struct worker {
  phase *ph;
  uint64_t sender;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  phase *ph = w->ph;
  qim_cq *cq;
  if (qim_cq_new_blocking(&cq)) return NULL;
  while (!atomic_load(&ph->stop)) {
    int rc = send_message(ph->s, cq, w->sender, ph->next_n[w->sender]++, ph->stepwise);
    if (rc) {
      if (atomic_fetch_add(&ph->errors, 1) == 0)
        fprintf(stderr, "bench: message failed: %s\n", qim_err_name(rc));
      break;
    }
    atomic_fetch_add(&ph->messages, 1);
  }
  qim_cq_free(cq);
  return NULL;
}

typedef struct result {
  double msgs_per_s;
  double ops_per_txn;
  double txn_per_msg;
  double pages_per_txn;
} result;

static int run_phase(phase *ph, int submitters, result *out) {
  qim_store_stats a, b;
  qim_store_get_stats(ph->s, &a);
  atomic_store(&ph->stop, false);
  atomic_store(&ph->messages, 0);
  atomic_store(&ph->errors, 0);
  pthread_t th[SUBMITTERS];
  worker w[SUBMITTERS];
  double t0 = now_s();
  for (int i = 0; i < submitters; i++) {
    w[i] = (worker){ph, (uint64_t)i};
    if (pthread_create(&th[i], NULL, worker_main, &w[i])) return -EAGAIN;
  }
  struct timespec nap = {(time_t)ph->seconds, (long)((ph->seconds - (time_t)ph->seconds) * 1e9)};
  nanosleep(&nap, NULL);
  atomic_store(&ph->stop, true);
  for (int i = 0; i < submitters; i++) pthread_join(th[i], NULL);
  double dt = now_s() - t0;
  qim_store_get_stats(ph->s, &b);
  if (atomic_load(&ph->errors)) return -EIO;
  double msgs = (double)atomic_load(&ph->messages);
  double ops = (double)(b.operations - a.operations),
         txns = (double)(b.transactions - a.transactions);
  out->msgs_per_s = msgs / dt;
  out->ops_per_txn = txns > 0 ? ops / txns : 0;
  out->txn_per_msg = msgs > 0 ? txns / msgs : 0;
  out->pages_per_txn = txns > 0 ? (double)(b.pages_written - a.pages_written) / txns : 0;
  return 0;
}

/* ---- the disk's own cost ----------------------------------------------------------------- */

/*
 * The baseline that bounds everything above: writing `pages` 4 KB pages at the end of a
 * file region and fdatasync — what a WAL commit does, without any CPU work — measured in the
 * same directory. With S submitters each waiting for its message, a transaction holds at
 * most S messages, so S / latency(pages of one such transaction) bounds (b).
 */
static double fsync_latency_ms(const char *dir, int samples, int pages) {
  char path[4200];
  snprintf(path, sizeof path, "%s/fsync-probe", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  static char page[4096];
  off_t span = (off_t)pages * (off_t)sizeof page * 8; /* reused like a WAL, preallocated */
  double total = -1;
  int ok = 1;
  for (off_t off = 0; ok && off < span; off += (off_t)sizeof page)
    ok = pwrite(fd, page, sizeof page, off) == (ssize_t)sizeof page;
  if (ok && fsync(fd) == 0) {
    double t0 = now_s();
    off_t off = 0;
    int i = 0;
    for (; i < samples && ok; i++) {
      for (int p = 0; p < pages && ok; p++, off = (off + (off_t)sizeof page) % span)
        ok = pwrite(fd, page, sizeof page, off) == (ssize_t)sizeof page;
      ok = ok && fdatasync(fd) == 0;
    }
    if (ok) total = (now_s() - t0) * 1000.0 / samples;
  }
  close(fd);
  unlink(path);
  return total;
}

/* ---- setup and report ----------------------------------------------------------------- */

static int create_groups(qim_store *s) {
  for (uint64_t i = 0; i < SUBMITTERS; i++) {
    qim_store_conv_create_req r = {0};
    r.conv.tenant_id.v = id(1, 1);
    r.conv.conversation_id.v = id(3, i);
    r.conv.kind = QIM_CONVERSATION_GROUP;
    r.conv.owner_id.v = id(2, i);
    r.now = 1700000000000ull;
    int rc = QIM_STORE_SYNC(s, conversations.create, &r);
    if (rc) return rc;
  }
  return 0;
}

static const char *verdict(bool ok) {
  return ok ? "PASS" : "FAIL";
}

static void report_mode(const char *mode, const result *a, const result *b) {
  double ratio = a->msgs_per_s > 0 ? b->msgs_per_s / a->msgs_per_s : 0;
  printf("\n[%s]\n", mode);
  printf("  (a) one message at a time, 1 submitter : %9.0f msgs/s  (%.2f transactions/message)\n",
         a->msgs_per_s, a->txn_per_msg);
  printf(
      "  (b) group commit, %d submitters        : %9.0f msgs/s  (%.1f operations/transaction,"
      " %.0f WAL pages/transaction)\n",
      SUBMITTERS, b->msgs_per_s, b->ops_per_txn, b->pages_per_txn);
  printf("  ratio (b)/(a)                          : %9.2f\n", ratio);
  printf("  transactions per operation under (b)  :    1/%.1f\n", b->ops_per_txn);
  printf("  targets: (b) >= %.0f msgs/s %s; ratio >= %.0fx %s; <= 1 txn per %.0f ops %s\n",
         TARGET_MSGS_PER_SEC, verdict(b->msgs_per_s >= TARGET_MSGS_PER_SEC), TARGET_RATIO,
         verdict(ratio >= TARGET_RATIO), TARGET_OPS_PER_TXN,
         verdict(b->ops_per_txn >= TARGET_OPS_PER_TXN));
}

/* What the disk alone allows (b): messages per transaction / (write its pages + fdatasync). */
static void report_disk(const char *dir, const result *b) {
  int pages = (int)(b->pages_per_txn + 0.5);
  if (pages < 1) pages = 1;
  double one = fsync_latency_ms(dir, 100, 1), batch = fsync_latency_ms(dir, 100, pages);
  double msgs_per_txn = b->ops_per_txn / 4;
  printf(
      "\ndisk (same directory, no CPU work): 1 page + fdatasync = %.2f ms; %d pages + fdatasync"
      " = %.2f ms\n",
      one, pages, batch);
  if (batch > 0)
    printf("  => ceiling for pipelined (b): %.0f msgs/transaction / %.2f ms = %.0f msgs/s\n",
           msgs_per_txn, batch, msgs_per_txn / batch * 1000.0);
}

int main(int argc, char **argv) {
  const char *base = argc > 1 ? argv[1] : getenv("TMPDIR");
  double seconds = argc > 2 ? atof(argv[2]) : 3.0;
  if (!base || !*base) base = "/tmp";
  if (seconds <= 0) seconds = 3.0;
  char dir[4096], url[4200];
  snprintf(dir, sizeof dir, "%s/qim-bench-store-XXXXXX", base);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(url, sizeof url, "sqlite:%s/bench.db", dir);
  qim_writer_id writer;
  if (qim_writer_id_make(1, 0, &writer) ||
      qim_id_gen_init(&idgen, qim_clock_system(), writer, 1000))
    return 1;
  qim_store_options o = {.shards = {16, 4}};
  qim_store *s = NULL;
  int rc = qim_store_open(url, &o, &s);
  if (rc == 0) rc = create_groups(s);
  printf("qim store benchmark: sqlite (WAL, synchronous=FULL) in %s, %.1f s per phase\n", dir,
         seconds);
  printf("one message = reserve + RECORDED (history) + OUTBOXED (outbox append) + COMMITTED\n");
  static phase ph;
  ph.s = s;
  ph.seconds = seconds;
  result r[2][2];
  for (int mode = 0; rc == 0 && mode < 2; mode++) {
    ph.stepwise = mode == 1;
    rc = run_phase(&ph, 1, &r[mode][0]);
    if (rc == 0) rc = run_phase(&ph, SUBMITTERS, &r[mode][1]);
  }
  if (rc == 0) {
    report_mode("pipelined: 4 operations queued together, one wait per message", &r[0][0],
                &r[0][1]);
    report_mode("stepwise: one wait per operation", &r[1][0], &r[1][1]);
    report_disk(dir, &r[0][1]);
  } else {
    fprintf(stderr, "bench failed: %s\n", qim_err_name(rc));
  }
  qim_store_close(s);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return rc == 0 ? 0 : 1;
}
