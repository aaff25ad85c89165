/*
 * test_commit_crash.c — kill -9 at every step boundary of the commit, for real.
 *
 * A child process opens the store and a commit and sends from four threads at once;
 * a hook at the store INTERFACE (commit_fixture.h's hook_store, between store calls)
 * raises SIGKILL right after the N-th completion of one step: the reserve, the RECORDED
 * advance, the OUTBOXED advance, the read-back of the publication, or the COMMITTED
 * advance (the ACK never leaves). Every reserve answer the child got is written to a
 * pipe first. The parent then restarts from the files alone, runs recovery, and checks
 * that every reserved message is in history exactly once and in the outbox exactly once,
 * with the seq given at reserve, the outbox in seq order per conversation; then every
 * client retries all its messages and the conversation is exactly the plan, gap-free.
 *
 * Those kills run on the staged path (commit_in_reserve off: one store call per step).
 * With the one-transaction commit on, the reserve is the only call of most sends, so the
 * kills are right after its answer (Committed, not yet acknowledged) and inside its
 * transaction, before the COMMIT is durable (the store's before_commit hook).
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commit_fixture.h"
#include "qim/err.h"

enum { SENDERS = 4, PER_SENDER = 6, TOTAL = SENDERS * PER_SENDER };

enum crash_point { AT_RESERVE, AT_RECORDED, AT_OUTBOXED, AT_VERIFY, AT_COMMITTED, AT_DURABLE_COMMIT };

typedef struct report {
  uint8_t cmid[16];
  uint64_t sender;
  uint64_t seq;
} report;

typedef struct crash_ctx {
  enum crash_point point;
  int kill_at;
  int fd;
  atomic_int seen;
} crash_ctx;

static qim_conversation_id group, direct;

static bool is_point(const crash_ctx *x, const char *op, const qim_store_req *req) {
  switch (x->point) {
  case AT_RESERVE: return strcmp(op, "intents.reserve") == 0;
  case AT_RECORDED: return hook_is_advance(op, req, QIM_COMMIT_STATE_RECORDED);
  case AT_OUTBOXED: return hook_is_advance(op, req, QIM_COMMIT_STATE_OUTBOXED);
  case AT_VERIFY: return strcmp(op, "logs.read") == 0;
  case AT_COMMITTED: return hook_is_advance(op, req, QIM_COMMIT_STATE_COMMITTED);
  case AT_DURABLE_COMMIT: return false; /* crash_before_commit */
  }
  return false;
}

/* Runs in the child after each store call completed, before the commit sees it. */
static void crash_after(hook_store *h, const char *op, qim_store_req *req) {
  crash_ctx *x = h->ctx;
  if (strcmp(op, "intents.reserve") == 0 && req->status == 0) {
    const qim_store_intent_reserve_req *q = (const qim_store_intent_reserve_req *)req;
    report r;
    memcpy(r.cmid, q->proposal->key.client_message_id.b, 16);
    r.sender = q->proposal->key.sender_id.v.lo;
    r.seq = q->out.kind == QIM_RESERVE_RESULT_COMMITTED ? q->out.committed.coordinates.conversation_seq
                                                        : q->out.intent.coordinates.conversation_seq;
    if (write(x->fd, &r, sizeof r) != (ssize_t)sizeof r) _exit(4);
  }
  if (req->status == 0 && is_point(x, op, req) && atomic_fetch_add(&x->seen, 1) + 1 == x->kill_at)
    raise(SIGKILL);
}

/* The store's writer, before the N-th durable COMMIT (the transaction is lost). Counts only
 * once the senders started: setup has no commits in the child. */
static void crash_before_commit(void *ctx) {
  crash_ctx *x = ctx;
  if (x->point == AT_DURABLE_COMMIT && atomic_fetch_add(&x->seen, 1) + 1 == x->kill_at) raise(SIGKILL);
}

static const char *text_of(uint64_t sender, int i, char buf[32]) {
  snprintf(buf, 32, "u%llu-m%d", (unsigned long long)sender, i);
  return buf;
}

static uint64_t cmid_of(uint64_t sender, int i) { return sender * 100 + (uint64_t)i; }

/* Sender 1 talks in the direct conversation every other message; everyone else in the group. */
static qim_conversation_id conv_of(uint64_t sender, int i) { return sender == 1 && i % 2 ? direct : group; }

typedef struct sender_arg {
  fx *f;
  uint64_t user;
} sender_arg;

static void *child_sender(void *arg) {
  sender_arg *s = arg;
  for (int i = 0; i < PER_SENDER; i++) {
    char buf[32];
    qim_authenticated_send m = fx_send(s->f, fx_user(s->user), conv_of(s->user, i), cmid_of(s->user, i),
                                       text_of(s->user, i, buf));
    qim_commit_result r;
    qim_commit_send_sync(s->f->commit, &m, &r);
  }
  return NULL;
}

static void child_main(fx *f, crash_ctx *x) {
  f->before_commit = crash_before_commit;
  f->before_commit_ctx = x;
  fx_open_store(f);
  fx_start_commit(f);
  f->hook->ctx = x;
  f->hook->after = crash_after;
  pthread_t th[SENDERS];
  sender_arg args[SENDERS];
  for (int i = 0; i < SENDERS; i++) {
    args[i] = (sender_arg){f, (uint64_t)i + 1};
    pthread_create(&th[i], NULL, child_sender, &args[i]);
  }
  for (int i = 0; i < SENDERS; i++) pthread_join(th[i], NULL);
  _exit(3); /* the kill never came */
}

/* Runs the child to its death; returns the reserve answers it reported. */
static size_t crash_child(fx *f, enum crash_point point, int kill_at, report *out, size_t cap) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    qim_log_set_level(QIM_LOG_ERROR);
    crash_ctx x = {.point = point, .kill_at = kill_at, .fd = fds[1]};
    child_main(f, &x);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t got;
  while (n < cap && (got = read(fds[0], &out[n], sizeof out[n])) == (ssize_t)sizeof out[n]) n++;
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGKILL);
  return n;
}

/* Each history record once, seqs dense from 1, and each in the outbox exactly once with
 * the same record, the outbox in seq order per conversation. Returns the record count. */
static size_t check_conversation(fx *f, qim_conversation_id conv, const fx_outbox *o) {
  qim_message_record *h;
  size_t n = fx_history(f, conv, fx_user(1), &h);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(h[i].coordinates.conversation_seq, i + 1);
    for (size_t j = i + 1; j < n; j++)
      assert_false(memcmp(h[i].client_message_id.b, h[j].client_message_id.b, 16) == 0 &&
                   qim_u128_eq(h[i].sender.user_id.v, h[j].sender.user_id.v));
    size_t in_outbox = 0;
    for (size_t k = 0; k < o->n; k++)
      if (memcmp(o->env[k].record.coordinates.message_id.b, h[i].coordinates.message_id.b, 16) == 0) {
        assert_true(qim_message_record_equal(&o->env[k].record, &h[i]));
        in_outbox++;
      }
    assert_int_equal(in_outbox, 1);
  }
  fx_history_free(h, n);
  return n;
}

static void check_after_recovery(fx *f, const report *rep, size_t nrep, bool must_adopt) {
  qim_commit_task t;
  assert_int_equal(qim_commit_recover_sync(f->commit, &t), 0);
  assert_int_equal(t.failed, 0);
  assert_int_equal(t.committed, t.adopted);
  if (must_adopt) assert_true(t.adopted >= 1); /* the killed step left an intent in flight */
  for (size_t i = 0; i < nrep; i++) {
    qim_commit_key k = {.tenant_id = f->tenant, .sender_id = fx_user(rep[i].sender)};
    memcpy(k.client_message_id.b, rep[i].cmid, 16);
    qim_loaded_commit lc;
    assert_int_equal(qim_commit_load_sync(f->commit, &k, &lc), 0);
    assert_int_equal(lc.kind, QIM_LOADED_COMMIT_COMMITTED);
    assert_int_equal(lc.committed.coordinates.conversation_seq, rep[i].seq);
  }
  fx_outbox o;
  fx_outbox_read(f, &o);
  fx_assert_outbox_ordered(&o);
  size_t n = check_conversation(f, group, &o) + check_conversation(f, direct, &o);
  assert_int_equal(n, o.n);
  assert_true(n >= nrep);
  fx_outbox_free(&o);
}

/* Every client retries every message: each gets its reserved seq back or a new one. */
static void check_after_retries(fx *f, const report *rep, size_t nrep) {
  for (uint64_t u = 1; u <= SENDERS; u++) {
    for (int i = 0; i < PER_SENDER; i++) {
      char buf[32];
      qim_authenticated_send m = fx_send(f, fx_user(u), conv_of(u, i), cmid_of(u, i), text_of(u, i, buf));
      qim_commit_result r;
      assert_int_equal(qim_commit_send_sync(f->commit, &m, &r), 0);
      for (size_t k = 0; k < nrep; k++)
        if (rep[k].sender == u && memcmp(rep[k].cmid, m.request.client_message_id.b, 16) == 0) {
          assert_int_equal(r.reserve, QIM_RESERVE_RESULT_COMMITTED);
          assert_int_equal(r.ack.coordinates.conversation_seq, rep[k].seq);
        }
    }
  }
  fx_outbox o;
  fx_outbox_read(f, &o);
  assert_int_equal(o.n, TOTAL);
  fx_assert_outbox_ordered(&o);
  assert_int_equal(check_conversation(f, group, &o) + check_conversation(f, direct, &o), TOTAL);
  fx_outbox_free(&o);
}

static void run_crash_with(enum crash_point point, int kill_at, bool in_reserve) {
  fx f;
  qim_commit_config cfg;
  fx_config(&cfg);
  cfg.commit_in_reserve = in_reserve;
  fx_open(&f, &cfg);
  direct = fx_direct(&f, fx_user(1), fx_user(2));
  qim_user_id m[] = {fx_user(2), fx_user(3), fx_user(4)};
  group = fx_group(&f, 1, fx_user(1), m, 3);
  fx_stop(&f); /* no store threads across fork() */
  report rep[4 * TOTAL];
  size_t nrep = crash_child(&f, point, kill_at, rep, sizeof rep / sizeof rep[0]);
  if (point != AT_DURABLE_COMMIT) assert_true(nrep >= 1); /* a lost first batch answered none */
  /* Time passes across a restart; the child's id generator was a copy of ours. */
  qim_manual_clock_advance(&f.clock, 10000);
  fx_open_store(&f);
  fx_start_commit(&f);
  check_after_recovery(&f, rep, nrep, !in_reserve && point != AT_COMMITTED);
  check_after_retries(&f, rep, nrep);
  fx_close(&f);
}

static void run_crash(enum crash_point point, int kill_at) { run_crash_with(point, kill_at, false); }

static void test_kill_after_reserve(void **state) { (void)state; run_crash(AT_RESERVE, 7); }
static void test_kill_after_recorded(void **state) { (void)state; run_crash(AT_RECORDED, 7); }
static void test_kill_after_outboxed(void **state) { (void)state; run_crash(AT_OUTBOXED, 7); }
static void test_kill_after_outbox_read_back(void **state) { (void)state; run_crash(AT_VERIFY, 7); }
static void test_kill_after_committed_before_ack(void **state) { (void)state; run_crash(AT_COMMITTED, 7); }
static void test_kill_after_first_reserve(void **state) { (void)state; run_crash(AT_RESERVE, 1); }
static void test_kill_after_reserve_committed_in_its_transaction(void **state) {
  (void)state;
  run_crash_with(AT_RESERVE, 7, true);
}
static void test_kill_after_first_reserve_committed_in_its_transaction(void **state) {
  (void)state;
  run_crash_with(AT_RESERVE, 1, true);
}
static void test_kill_before_a_reserve_transaction_is_durable(void **state) {
  (void)state;
  run_crash_with(AT_DURABLE_COMMIT, 6, true);
}
static void test_kill_before_the_first_reserve_transaction_is_durable(void **state) {
  (void)state;
  run_crash_with(AT_DURABLE_COMMIT, 1, true);
}

/* Recovery itself is killed half-way; the next recovery finishes the job. */
static void test_kill_during_recovery(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  direct = fx_direct(&f, fx_user(1), fx_user(2));
  qim_user_id m[] = {fx_user(2), fx_user(3), fx_user(4)};
  group = fx_group(&f, 1, fx_user(1), m, 3);
  fx_stop(&f);
  report rep[4 * TOTAL];
  size_t nrep = crash_child(&f, AT_RECORDED, 10, rep, sizeof rep / sizeof rep[0]);
  qim_manual_clock_advance(&f.clock, 10000);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    qim_log_set_level(QIM_LOG_ERROR);
    fx_open_store(&f);
    fx_start_commit(&f);
    crash_ctx x = {.point = AT_OUTBOXED, .kill_at = 1, .fd = fds[1]};
    f.hook->ctx = &x;
    f.hook->after = crash_after;
    qim_commit_task t;
    qim_commit_recover_sync(f.commit, &t);
    _exit(3);
  }
  close(fds[1]);
  close(fds[0]);
  qim_manual_clock_advance(&f.clock, 10000);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  fx_open_store(&f);
  fx_start_commit(&f);
  check_after_recovery(&f, rep, nrep, true);
  check_after_retries(&f, rep, nrep);
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_after_reserve),
      cmocka_unit_test(test_kill_after_recorded),
      cmocka_unit_test(test_kill_after_outboxed),
      cmocka_unit_test(test_kill_after_outbox_read_back),
      cmocka_unit_test(test_kill_after_committed_before_ack),
      cmocka_unit_test(test_kill_after_first_reserve),
      cmocka_unit_test(test_kill_after_reserve_committed_in_its_transaction),
      cmocka_unit_test(test_kill_after_first_reserve_committed_in_its_transaction),
      cmocka_unit_test(test_kill_before_a_reserve_transaction_is_durable),
      cmocka_unit_test(test_kill_before_the_first_reserve_transaction_is_durable),
      cmocka_unit_test(test_kill_during_recovery),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
