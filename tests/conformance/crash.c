/*
 * crash.c — the SQLite crash test: kill -9 never loses an acknowledged operation and never
 * exposes a half-written one.
 *
 * The test binary re-executes itself as a child (crash_child.c) that commits messages and
 * big log batches through the store and acknowledges each completed operation on a pipe.
 * The parent SIGKILLs it at a random moment, reopens the database and checks:
 *   - every acknowledged message is COMMITTED with its seq, has its history row and its
 *     outbox record; every acknowledged log append is at its offset with its payload;
 *   - nothing is half-written: per conversation the seqs 1..latest are each held by a
 *     history row or a RESERVED intent (dense, no gap), a RESERVED intent has no row, a
 *     RECORDED one has its row and no outbox record, anything further has both; the
 *     outbox and the dispatch logs have dense offsets, unique keys and intact payloads,
 *     and the outbox holds each conversation's messages in seq order.
 * Then the next child starts on the same database (recovering what was in flight). The
 * child's before_commit hook counts its entries and exits in shared memory; a kill between
 * the two landed inside a transaction, and at least half of the kills must have.
 * Finally two controls damage the database behind the store's back (a history row, an
 * outbox record) and require the checks, run in a fresh process, to report exactly that.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "crash.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "testsupport.h"

#define KILLS 12
#define COMMIT_TIMEOUT_MS 60000

/* ---- shared with the child ------------------------------------------------------------- */

void crash_log_payload(const uint8_t key[16], uint8_t out[CRASH_LOG_PAYLOAD]) {
  for (int i = 0; i < CRASH_LOG_PAYLOAD; i++) out[i] = (uint8_t)(key[i % 16] ^ (i * 31));
}

qim_conversation_id crash_conv(int idx) {
  return (qim_conversation_id){{0, (uint64_t)(CRASH_CONV_BASE + idx)}};
}

qim_store_options crash_options(void) { return (qim_store_options){.shards = {4, 2}}; }

/* ---- what the children acknowledged ------------------------------------------------------- */

typedef struct acks {
  crash_ack *v;
  size_t n, cap;
} acks;

static acks messages, log_appends;

static void keep(acks *a, const crash_ack *x) {
  if (a->n == a->cap) {
    a->cap = a->cap ? a->cap * 2 : 1024;
    a->v = qim_realloc(a->v, a->cap * sizeof *a->v);
  }
  a->v[a->n++] = *x;
}

typedef struct pipe_reader {
  int fd;
  uint8_t buf[sizeof(crash_ack) * 256];
  size_t have;
  bool eof;
} pipe_reader;

/* Reads what is available (waiting up to timeout_ms) and files whole records. */
static void read_acks(pipe_reader *p, int timeout_ms) {
  struct pollfd pfd = {p->fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) <= 0) return;
  ssize_t n = read(p->fd, p->buf + p->have, sizeof p->buf - p->have);
  if (n <= 0) {
    p->eof = n == 0;
    return;
  }
  p->have += (size_t)n;
  size_t whole = p->have / sizeof(crash_ack) * sizeof(crash_ack);
  for (size_t off = 0; off < whole; off += sizeof(crash_ack)) {
    crash_ack a;
    memcpy(&a, p->buf + off, sizeof a);
    keep(a.kind == CRASH_ACK_MESSAGE ? &messages : &log_appends, &a);
  }
  memmove(p->buf, p->buf + whole, p->have - whole);
  p->have -= whole;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- one kill ------------------------------------------------------------------------------- */

static pid_t spawn_child(const char *url, const char *shared, uint32_t cycle, uint32_t seed, int *rfd) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* the parent drains it anyway; this only smooths */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char c[16], s[16];
    snprintf(c, sizeof c, "%u", cycle);
    snprintf(s, sizeof s, "%u", seed);
    if (dup2(p[1], CRASH_ACK_FD) < 0) _exit(126);
    execl("/proc/self/exe", "crash_sqlite", "--child", url, shared, c, s, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  *rfd = p[0];
  return pid;
}

/* Waits (draining acks) until the child has begun `commits` commits and `acked` messages
 * are acknowledged; false when the child died or took too long. */
static bool await_child(pipe_reader *p, crash_shared *shared, uint64_t commits, size_t acked) {
  uint64_t deadline = now_ms() + COMMIT_TIMEOUT_MS;
  while (atomic_load(&shared->entered) < commits || messages.n < acked) {
    if (p->eof || now_ms() > deadline) return false;
    read_acks(p, 1);
  }
  return true;
}

static void sleep_draining(pipe_reader *p, uint64_t ms) {
  uint64_t until = now_ms() + ms;
  while (now_ms() < until) read_acks(p, (int)(until - now_ms()));
}

/*
 * Runs one child and kills it at a random moment of its k-th commit cycle (k random in
 * 2..6, so the moment scales with the build's speed): uniformly within the cycle, or when
 * `aim`, 0-20 ms after its commit hook began (the hook pauses longer than that). With
 * `min_messages`, the k cycles count from when the child has acknowledged that many
 * messages, so the run as a whole does a known amount of work whatever the scheduling
 * (a kill in cycle 2..6 of a fresh child may come before any message finished its four
 * steps). Returns whether the kill landed inside a transaction, read after the child is
 * dead.
 */
static bool run_and_kill(const char *url, const char *shared_path, crash_shared *shared,
                         uint32_t cycle, unsigned *rng, bool aim, size_t min_messages) {
  pipe_reader p = {0};
  atomic_store(&shared->entered, 0); /* the previous kill may have left them unequal */
  atomic_store(&shared->left, 0);
  pid_t pid = spawn_child(url, shared_path, cycle, (uint32_t)rand_r(rng), &p.fd);
  bool ok = await_child(&p, shared, 0, messages.n + min_messages);
  uint64_t k = atomic_load(&shared->entered) + 2 + (uint64_t)(rand_r(rng) % 5);
  ok = ok && await_child(&p, shared, k - 1, 0);
  uint64_t before = now_ms();
  ok = ok && await_child(&p, shared, k, 0);
  uint64_t began = now_ms();
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("the child did not acknowledge %zu messages and reach commit %llu", min_messages,
             (unsigned long long)k);
  }
  uint64_t period = began - before + 1;
  sleep_draining(&p, aim ? (uint64_t)(rand_r(rng) % 20) : (uint64_t)rand_r(rng) % period);
  assert_int_equal(kill(pid, SIGKILL), 0);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    fail_msg("the child ended on its own (status 0x%x) before the kill", status);
  while (!p.eof) read_acks(&p, 1000);
  close(p.fd);
  return atomic_load(&shared->entered) != atomic_load(&shared->left);
}

/* ---- checks after reopening ------------------------------------------------------------------ */

typedef struct conv_view {
  qim_conversation_seq latest;
  uint8_t (*rec)[16];   /* rec[seq]: message id of the history row, zero when none */
  qim_commit_intent *in_flight;
  size_t n_in_flight;
} conv_view;

typedef struct view {
  conv_view conv[CRASH_CONVERSATIONS];
  uint8_t (*outbox)[16];      /* message ids in the outbox, sorted */
  size_t n_outbox;
} view;

static const uint8_t zero16[16];
/* In-flight intents seen after kills, by state: the checks met every half-done state. */
static size_t seen_in_state[QIM_COMMIT_STATE_COMMITTED];

static int cmp16(const void *a, const void *b) { return memcmp(a, b, 16); }

static bool in_outbox(const view *v, const uint8_t id[16]) {
  return v->n_outbox && bsearch(id, v->outbox, v->n_outbox, 16, cmp16) != NULL;
}

/* Reads a whole stream: dense offsets, and each record handed to `each`. */
static void read_stream(qim_store *s, qim_log_stream stream, void (*each)(const qim_store_log_record *, void *), void *ctx) {
  qim_store_log_read_req r = {.stream = stream, .from = 0, .max = 5000};
  uint64_t expect = 0;
  bool first = true;
  for (;;) {
    assert_int_equal(QIM_STORE_SYNC(s, logs.read, &r), 0);
    for (size_t i = 0; i < r.out_count; i++) {
      if (!first && r.out_records[i].offset != expect)
        fail_msg("stream %d:%u: offset %llu follows %llu (a gap)", stream.kind, stream.shard,
                 (unsigned long long)r.out_records[i].offset, (unsigned long long)expect - 1);
      first = false;
      expect = r.out_records[i].offset + 1;
      each(&r.out_records[i], ctx);
      qim_store_log_record_free(&r.out_records[i]);
    }
    size_t got = r.out_count;
    qim_free(r.out_records);
    if (got < r.max) break;
    r.from = expect;
    r.out_records = NULL;
  }
  if (!first && expect != r.out_end) fail_msg("stream end %llu, last record %llu", (unsigned long long)r.out_end, (unsigned long long)expect - 1);
}

/* Outbox: each payload is a whole CommittedEnvelope keyed by its message id, and each
 * conversation's messages appear in seq order. */
typedef struct outbox_ctx {
  view *v;
  qim_conversation_seq last_seq[CRASH_CONVERSATIONS];
} outbox_ctx;

static void on_outbox(const qim_store_log_record *rec, void *p) {
  outbox_ctx *o = p;
  qim_committed_envelope env;
  if (qim_committed_envelope_decode(rec->payload.p, rec->payload.n, &env) != 0)
    fail_msg("outbox offset %llu: torn envelope", (unsigned long long)rec->offset);
  assert_memory_equal(env.intent.coordinates.message_id.b, rec->key, 16);
  int idx = (int)(env.intent.coordinates.conversation_id.v.lo - CRASH_CONV_BASE);
  assert_true(idx >= 0 && idx < CRASH_CONVERSATIONS);
  qim_conversation_seq seq = env.intent.coordinates.conversation_seq;
  if (seq <= o->last_seq[idx]) fail_msg("outbox: conversation %d seq %llu after %llu", idx, (unsigned long long)seq, (unsigned long long)o->last_seq[idx]);
  o->last_seq[idx] = seq;
  qim_committed_envelope_free(&env);
  view *v = o->v;
  v->outbox = qim_realloc(v->outbox, (v->n_outbox + 1) * 16);
  memcpy(v->outbox[v->n_outbox++], rec->key, 16);
}

static void load_outbox(qim_store *s, view *v) {
  static outbox_ctx o;
  memset(&o, 0, sizeof o);
  o.v = v;
  read_stream(s, (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0}, on_outbox, &o);
  if (v->n_outbox) qsort(v->outbox, v->n_outbox, 16, cmp16);
  for (size_t i = 1; i < v->n_outbox; i++)
    if (!memcmp(v->outbox[i - 1], v->outbox[i], 16)) fail_msg("outbox: a message appears twice");
}

static void load_conversation(qim_store *s, int idx, conv_view *c) {
  qim_store_conv_get_req g = {.tenant_id = {{0, CRASH_TENANT}}, .conversation_id = crash_conv(idx)};
  assert_int_equal(QIM_STORE_SYNC(s, conversations.get, &g), 0);
  c->latest = g.out.latest_seq;
  qim_store_conversation_free(&g.out);
  c->rec = qim_calloc(c->latest + 2, 16);
  qim_store_record_query_req q = {.tenant_id = {{0, CRASH_TENANT}}, .conversation_id = crash_conv(idx),
                                  .viewer = {{0, CRASH_SENDER}}, .window_high = c->latest + 1000,
                                  .direction = QIM_HISTORY_DIRECTION_NEWER, .max_items = 1000000,
                                  .max_bytes = UINT32_MAX};
  assert_int_equal(QIM_STORE_SYNC(s, history.query, &q), 0);
  assert_false(q.out_has_more);
  for (size_t i = 0; i < q.out_count; i++) {
    qim_conversation_seq seq = q.out_records[i].coordinates.conversation_seq;
    if (seq < 1 || seq > c->latest) fail_msg("conversation %d: history row at seq %llu above latest %llu", idx, (unsigned long long)seq, (unsigned long long)c->latest);
    if (memcmp(c->rec[seq], zero16, 16)) fail_msg("conversation %d: two rows at seq %llu", idx, (unsigned long long)seq);
    memcpy(c->rec[seq], q.out_records[i].coordinates.message_id.b, 16);
    qim_message_record_free(&q.out_records[i]);
  }
  qim_free(q.out_records);
  qim_store_intent_list_req l = {.has_conversation = true, .tenant_id = {{0, CRASH_TENANT}},
                                 .conversation_id = crash_conv(idx), .limit = 10000};
  assert_int_equal(QIM_STORE_SYNC(s, intents.list_in_flight, &l), 0);
  c->in_flight = l.out_intents;
  c->n_in_flight = l.out_count;
}

/* Nothing half-written: every seq is a row or a RESERVED intent, and each intent's state
 * matches exactly the effects that are visible. */
static void check_conversation(const view *v, int idx) {
  const conv_view *c = &v->conv[idx];
  bool *reserved = qim_calloc(c->latest + 2, 1);
  for (size_t i = 0; i < c->n_in_flight; i++) {
    const qim_commit_intent *in = &c->in_flight[i];
    qim_conversation_seq seq = in->coordinates.conversation_seq;
    const uint8_t *id = in->coordinates.message_id.b;
    if (in->state < QIM_COMMIT_STATE_COMMITTED) seen_in_state[in->state]++;
    if (seq < 1 || seq > c->latest) fail_msg("conversation %d: intent at seq %llu above latest", idx, (unsigned long long)seq);
    bool row = !memcmp(c->rec[seq], id, 16), any_row = memcmp(c->rec[seq], zero16, 16) != 0;
    if (in->state == QIM_COMMIT_STATE_RESERVED) {
      if (any_row) fail_msg("conversation %d seq %llu: a history row for a RESERVED intent", idx, (unsigned long long)seq);
      reserved[seq] = true;
    } else if (!row) {
      fail_msg("conversation %d seq %llu: state %d without its history row", idx, (unsigned long long)seq, in->state);
    }
    bool out = in_outbox(v, id);
    if (in->state >= QIM_COMMIT_STATE_OUTBOXED && !out) fail_msg("conversation %d seq %llu: OUTBOXED but not in the outbox", idx, (unsigned long long)seq);
    if (in->state < QIM_COMMIT_STATE_OUTBOXED && out) fail_msg("conversation %d seq %llu: in the outbox but state %d", idx, (unsigned long long)seq, in->state);
  }
  for (qim_conversation_seq seq = 1; seq <= c->latest; seq++) {
    bool row = memcmp(c->rec[seq], zero16, 16) != 0;
    if (row == reserved[seq]) fail_msg("conversation %d seq %llu: %s", idx, (unsigned long long)seq, row ? "row and reservation" : "a gap: neither row nor reservation");
    bool recorded_only = false;
    for (size_t i = 0; i < c->n_in_flight; i++)
      if (c->in_flight[i].coordinates.conversation_seq == seq && c->in_flight[i].state == QIM_COMMIT_STATE_RECORDED) recorded_only = true;
    if (row && !recorded_only && !in_outbox(v, c->rec[seq]))
      fail_msg("conversation %d seq %llu: a committed row missing from the outbox", idx, (unsigned long long)seq);
  }
  qim_free(reserved);
}

static void check_acked_messages(qim_store *s, const view *v) {
  for (size_t i = 0; i < messages.n; i++) {
    const crash_ack *a = &messages.v[i];
    const conv_view *c = &v->conv[a->idx];
    if (a->value < 1 || a->value > c->latest || memcmp(c->rec[a->value], a->key, 16))
      fail_msg("acknowledged message (conversation %u seq %llu) has no history row", a->idx, (unsigned long long)a->value);
    if (!in_outbox(v, a->key)) fail_msg("acknowledged message (conversation %u seq %llu) not in the outbox", a->idx, (unsigned long long)a->value);
    qim_store_intent_load_req l = {.key = {{{0, CRASH_TENANT}}, {{0, CRASH_SENDER}}, {{0}}}};
    memcpy(l.key.client_message_id.b, a->key, 16);
    assert_int_equal(QIM_STORE_SYNC(s, intents.load, &l), 0);
    assert_int_equal(l.out.kind, QIM_LOADED_COMMIT_COMMITTED);
    assert_int_equal(l.out.committed.coordinates.conversation_seq, a->value);
    qim_commit_intent_free(&l.out.intent);
  }
}

/* Dispatch streams: intact payloads, unique keys, and every acknowledged append in place. */
typedef struct log_ctx {
  uint8_t (*keys)[16];
  uint64_t *offsets;
  size_t n;
} log_ctx;

static void on_log(const qim_store_log_record *rec, void *p) {
  log_ctx *l = p;
  uint8_t want[CRASH_LOG_PAYLOAD];
  crash_log_payload(rec->key, want);
  if (rec->payload.n != CRASH_LOG_PAYLOAD || memcmp(rec->payload.p, want, CRASH_LOG_PAYLOAD))
    fail_msg("dispatch offset %llu: torn payload", (unsigned long long)rec->offset);
  l->keys = qim_realloc(l->keys, (l->n + 1) * 16);
  l->offsets = qim_realloc(l->offsets, (l->n + 1) * sizeof *l->offsets);
  memcpy(l->keys[l->n], rec->key, 16);
  l->offsets[l->n++] = rec->offset;
}

static void check_logs(qim_store *s) {
  for (int shard = 0; shard < CRASH_LOG_SUBMITTERS; shard++) {
    log_ctx l = {0};
    read_stream(s, (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, (uint32_t)shard}, on_log, &l);
    for (size_t i = 0; i < log_appends.n; i++) {
      const crash_ack *a = &log_appends.v[i];
      if ((int)a->idx != shard) continue;
      uint64_t first = l.n ? l.offsets[0] : 0;
      if (!l.n || a->value < first || a->value - first >= l.n || memcmp(l.keys[a->value - first], a->key, 16))
        fail_msg("acknowledged append at dispatch:%d offset %llu is missing", shard, (unsigned long long)a->value);
    }
    if (l.n) qsort(l.keys, l.n, 16, cmp16);
    for (size_t i = 1; i < l.n; i++)
      if (!memcmp(l.keys[i - 1], l.keys[i], 16)) fail_msg("dispatch:%d: a key appended twice", shard);
    qim_free(l.keys);
    qim_free(l.offsets);
  }
}

static void verify(const char *url) {
  qim_store *s;
  qim_store_options opt = crash_options();
  assert_int_equal(qim_store_open(url, &opt, &s), 0);
  static view v;
  memset(&v, 0, sizeof v);
  load_outbox(s, &v);
  for (int i = 0; i < CRASH_CONVERSATIONS; i++) load_conversation(s, i, &v.conv[i]);
  for (int i = 0; i < CRASH_CONVERSATIONS; i++) check_conversation(&v, i);
  check_acked_messages(s, &v);
  check_logs(s);
  for (int i = 0; i < CRASH_CONVERSATIONS; i++) {
    qim_free(v.conv[i].rec);
    for (size_t j = 0; j < v.conv[i].n_in_flight; j++) qim_commit_intent_free(&v.conv[i].in_flight[j]);
    qim_free(v.conv[i].in_flight);
  }
  qim_free(v.outbox);
  qim_store_close(s);
}

/* ---- the test ---------------------------------------------------------------------------------- */

static void create_conversations(const char *url) {
  qim_store *s;
  qim_store_options opt = crash_options();
  assert_int_equal(qim_store_open(url, &opt, &s), 0);
  for (int i = 0; i < CRASH_CONVERSATIONS; i++) {
    qim_store_conv_create_req r = {.conv = {.tenant_id = {{0, CRASH_TENANT}}, .conversation_id = crash_conv(i),
                                            .kind = QIM_CONVERSATION_GROUP, .owner_id = {{0, CRASH_SENDER}}},
                                   .now = 1000};
    assert_int_equal(QIM_STORE_SYNC(s, conversations.create, &r), 0);
  }
  qim_store_close(s);
}

static crash_shared *map_shared(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 4096), 0);
  crash_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  assert_true(sh != MAP_FAILED);
  return sh;
}

static void test_sigkill_inside_transactions_loses_nothing_acknowledged(void **state) {
  (void)state;
  const char *env_seed = getenv("QIM_CRASH_SEED");
  unsigned rng = env_seed ? (unsigned)strtoul(env_seed, NULL, 10) : (unsigned)time(NULL);
  printf("seed %u (QIM_CRASH_SEED to repeat)\n", rng);
  char *dir = qim_test_tmpdir("crash"), url[4200], shared_path[4200];
  snprintf(url, sizeof url, "sqlite:%s/store.db", dir);
  snprintf(shared_path, sizeof shared_path, "%s/shared", dir);
  crash_shared *shared = map_shared(shared_path);
  create_conversations(url);
  int inside = 0;
  uint64_t t0 = now_ms();
  for (uint32_t cycle = 1; cycle <= KILLS; cycle++) {
    /* Every third kill lands at a purely random moment of a commit cycle, the others are
     * aimed at the commit hook (inside the transaction). Every other child first
     * acknowledges a message per conversation: the others may die in recovery or in a
     * message's first steps, which is the point of them, but then no run guarantees work. */
    bool in_txn = run_and_kill(url, shared_path, shared, cycle, &rng, cycle % 3 != 0,
                               cycle % 2 ? 0 : CRASH_CONVERSATIONS);
    inside += in_txn;
    verify(url);
    printf("kill %2u: %s a transaction; %zu messages and %zu log appends acknowledged so far, all present\n",
           cycle, in_txn ? "inside" : "outside", messages.n, log_appends.n);
  }
  printf("%d of %d kills landed inside a transaction (%.1f s)\n", inside, KILLS, (now_ms() - t0) / 1e3);
  printf("left in flight by the kills: %zu reserved, %zu recorded, %zu outboxed\n",
         seen_in_state[QIM_COMMIT_STATE_RESERVED], seen_in_state[QIM_COMMIT_STATE_RECORDED],
         seen_in_state[QIM_COMMIT_STATE_OUTBOXED]);
  assert_true(inside * 2 >= KILLS);
  /* The children did real work, and the kills left intents in every half-done state. */
  assert_true(messages.n >= KILLS / 2 * (size_t)CRASH_CONVERSATIONS);
  assert_true(log_appends.n >= KILLS * (size_t)CRASH_LOG_BATCH * CRASH_LOG_SUBMITTERS / 2);
  for (int st = QIM_COMMIT_STATE_RESERVED; st < QIM_COMMIT_STATE_COMMITTED; st++) assert_true(seen_in_state[st] > 0);
  munmap(shared, sizeof *shared);
  qim_free(messages.v);
  qim_free(log_appends.v);
  qim_test_rmtree(dir);
}

/* ---- controls: the checks see damage --------------------------------------------------------- */

static const char *verify_url;

static void test_verify_only(void **state) {
  (void)state;
  verify(verify_url);
}

/* Runs the checks on `url` in a fresh process; returns its output, *failed = exit status != 0. */
static char *verify_elsewhere(const char *url, bool *failed) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    dup2(p[1], STDERR_FILENO);
    execl("/proc/self/exe", "crash_sqlite", "--verify", url, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  char *out = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&out, &len);
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) fwrite(buf, 1, (size_t)n, mem);
  fclose(mem);
  close(p[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  *failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return out;
}

/* Damages the closed database with `sql` and requires the checks to report `symptom`. */
static void expect_checks_see(const char *db_path, const char *url, const char *sql, const char *symptom) {
  sqlite3 *db;
  assert_int_equal(sqlite3_open(db_path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  assert_true(sqlite3_changes(db) > 0);
  sqlite3_close(db);
  bool failed;
  char *out = verify_elsewhere(url, &failed);
  printf("control: %s -> %s\n", sql, strstr(out, symptom) ? symptom : "(not seen)");
  if (!failed || !strstr(out, symptom)) fputs(out, stdout);
  assert_true(failed);
  assert_non_null(strstr(out, symptom));
  free(out);
}

static void test_checks_see_a_lost_row_and_an_outbox_gap(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("crash-control"), url[4300], db_path[4200];
  snprintf(db_path, sizeof db_path, "%s/store.db", dir);
  snprintf(url, sizeof url, "sqlite:%s", db_path);
  create_conversations(url);
  /* Three committed messages in conversation 0, by the child's own code path. */
  qim_store *s;
  qim_store_options opt = crash_options();
  assert_int_equal(qim_store_open(url, &opt, &s), 0);
  for (uint8_t n = 1; n <= 3; n++) {
    qim_commit_intent p = {.key = {{{0, CRASH_TENANT}}, {{0, CRASH_SENDER}}, {{0}}}};
    p.key.client_message_id.b[15] = n;
    p.coordinates.message_id = (qim_message_id){{0}};
    p.coordinates.message_id.b[15] = n;
    p.coordinates.conversation_id = crash_conv(0);
    p.delivery.audience.kind = QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT;
    p.delivery.audience.group.group_id.v = p.coordinates.conversation_id.v;
    p.record.coordinates = p.coordinates;
    p.record.sender.user_id = p.key.sender_id;
    p.record.sender.tenant_id = p.key.tenant_id;
    p.record.client_message_id = p.key.client_message_id;
    qim_store_intent_reserve_req r = {.proposal = &p};
    assert_int_equal(QIM_STORE_SYNC(s, intents.reserve, &r), 0);
    qim_commit_intent_free(&r.out.intent);
    for (int st = QIM_COMMIT_STATE_RECORDED; st <= QIM_COMMIT_STATE_COMMITTED; st++) {
      qim_store_intent_advance_req a = {.key = p.key, .to = (qim_commit_state)st};
      assert_int_equal(QIM_STORE_SYNC(s, intents.advance, &a), 0);
    }
  }
  qim_store_close(s);
  bool failed;
  char *out = verify_elsewhere(url, &failed);
  if (failed) fputs(out, stdout);
  assert_false(failed); /* undamaged, the checks pass */
  free(out);
  /* The schema is the SQLite backend's (sqlite_schema.c): this control is SQLite-only. */
  expect_checks_see(db_path, url, "DELETE FROM records WHERE seq = 2", "neither row nor reservation");
  expect_checks_see(db_path, url, "DELETE FROM log_records WHERE pos = (SELECT min(pos) + 1 FROM log_records)",
                    "(a gap)");
  qim_test_rmtree(dir);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--verify")) {
    verify_url = argv[2];
    const struct CMUnitTest only[] = {cmocka_unit_test(test_verify_only)};
    return cmocka_run_group_tests(only, NULL, NULL);
  }
  if (argc == 6 && !strcmp(argv[1], "--child"))
    return crash_child_main(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 10),
                            (uint32_t)strtoul(argv[5], NULL, 10));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigkill_inside_transactions_loses_nothing_acknowledged),
      cmocka_unit_test(test_checks_see_a_lost_row_and_an_outbox_gap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
