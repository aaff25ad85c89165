/*
 * test_sqlite_backend.c — the SQLite backend's machinery, which the conformance vectors
 * cannot see: group commit really batches, a failing operation fails alone inside a
 * batch (run again with savepoints only when it had written), a transaction SQLite rolls back whole fails every operation in it, a full queue
 * is backpressure, a lingering transaction takes the writes that arrive meanwhile but
 * stops lingering for a lone client, a write's `committed` hint runs once it committed and
 * before its completion (never for a failed one), completions arrive on the caller's event
 * loop, data survives a reopen, the shard configuration is fixed at creation, and a
 * store-memory store keeps its mode until it is converted back (from_memory=1).
 */
#include <dirent.h>
#include <ftw.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "store_fixture.h"

static qim_log_stream outbox(void) {
  return (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0};
}

/* A single-entry outbox append request; `n` makes the key unique. */
typedef struct append_op {
  qim_store_log_append_req req;
  qim_store_log_append a;
} append_op;

static void append_init(append_op *op, uint64_t n, const void *payload, size_t len) {
  memset(op, 0, sizeof *op);
  op->a.stream = outbox();
  memcpy(op->a.key, &n, sizeof n);
  op->a.key[15] = 0xAB;
  op->a.payload = (qim_bytes){(uint8_t *)payload, len};
  op->req.appends = &op->a;
  op->req.append_count = 1;
}

static size_t outbox_count(qim_store *s) {
  qim_store_log_read_req rd = {0};
  rd.stream = outbox();
  rd.max = 100000;
  assert_int_equal(QIM_STORE_SYNC(s, logs.read, &rd), 0);
  size_t n = rd.out_count;
  qim_store_log_read_free(&rd);
  return n;
}

/* ---- group commit ------------------------------------------------------------------------- */

#define SUBMITTERS 64
#define PER_SUBMITTER 40

typedef struct submitter {
  qim_store *s;
  int index;
  int failures;
} submitter;

static void *submit_loop(void *arg) {
  submitter *sub = arg;
  for (int i = 0; i < PER_SUBMITTER; i++) {
    append_op op;
    append_init(&op, (uint64_t)sub->index * 1000 + (uint64_t)i, "m", 1);
    if (QIM_STORE_SYNC(sub->s, logs.append, &op.req) != 0) sub->failures++;
  }
  return NULL;
}

static void test_group_commit_batches_concurrent_submitters(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-batch");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  pthread_t th[SUBMITTERS];
  submitter subs[SUBMITTERS];
  for (int i = 0; i < SUBMITTERS; i++) {
    subs[i] = (submitter){s, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, submit_loop, &subs[i]), 0);
  }
  for (int i = 0; i < SUBMITTERS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(subs[i].failures, 0);
  }
  qim_store_stats st;
  qim_store_get_stats(s, &st);
  assert_int_equal(st.operations, SUBMITTERS * PER_SUBMITTER);
  assert_int_equal(st.fsyncs, st.transactions);
  assert_true(st.pages_written >= st.transactions); /* every commit wrote at least a page */
  /* At most one sync per 8 operations: one covers every COMMIT written before it. */
  assert_true(st.syncs * 8 <= st.operations);
  /* The writer commits the next batch while one syncs, so its batches are smaller; they
   * still group (64 submitters: 69-196 transactions for 2,560 operations here). Their
   * average size is the scheduler's: with the submitters starved of CPU (three busy
   * processes beside the suite) it fell below 2 once in 12 runs. What grouping itself
   * guarantees is that operations waiting together share a transaction, so some batch
   * holds 4 or more (buckets 4-7 and up), and no batch of one per operation. */
  uint64_t grouped = 0;
  for (int i = 2; i < 8; i++) grouped += st.batch_hist[i];
  assert_true(grouped > 0);
  assert_true(st.transactions < st.operations);
  assert_int_equal(outbox_count(s), SUBMITTERS * PER_SUBMITTER);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- failures inside a batch -------------------------------------------------------------- */

typedef struct gated {
  char *dir;
  fx_gate gate;
  qim_store *s;
  qim_cq *cq;
  int done;
} gated;

/* Opens a store whose writer can be held, and holds it inside a first batch. */
static void gated_open(gated *g, const char *suffix, uint32_t queue_capacity) {
  memset(g, 0, sizeof *g);
  g->dir = qim_test_tmpdir("store-gate");
  fx_gate_init(&g->gate);
  qim_store_options o = fx_options();
  o.before_commit = fx_gate_hook;
  o.hook_ctx = &g->gate;
  o.queue_capacity = queue_capacity;
  g->s = fx_open(g->dir, suffix, &o);
  assert_int_equal(qim_cq_new_blocking(&g->cq), 0);
}

static void gated_hold(gated *g, append_op *first) {
  fx_gate_arm(&g->gate);
  append_init(first, 999999, "first", 5);
  fx_async(&first->req.req, g->cq, &g->done);
  assert_int_equal(g->s->vt->logs.append(g->s, &first->req), 0);
  fx_gate_wait_entered(&g->gate);
}

static void gated_close(gated *g) {
  qim_store_close(g->s);
  qim_cq_free(g->cq);
  fx_gate_destroy(&g->gate);
  qim_test_rmtree(g->dir);
}

/* Behind a held first batch: two appends, a and c, and between them b, which writes a row
 * (ADD user 2) and then fails (ADD user 2 again), so all of it must go. */
typedef struct three_ops {
  append_op first, a, c;
  qim_store_member_change ch[2];
  qim_store_members_change_req b;
} three_ops;

static void three_ops_init(gated *g, three_ops *t) {
  memset(t, 0, sizeof *t);
  fx_create_group(g->s, 1, 1);
  gated_hold(g, &t->first);
  append_init(&t->a, 1, "a", 1);
  append_init(&t->c, 2, "c", 1);
  for (int i = 0; i < 2; i++)
    t->ch[i] = (qim_store_member_change){QIM_STORE_MEMBER_ADD, fx_user(2), QIM_GROUP_ROLE_MEMBER, 0x2F, 0x2F};
  t->b = (qim_store_members_change_req){.tenant_id = fx_tenant(), .conversation_id = fx_conv(1),
                                        .changes = t->ch, .change_count = 2};
}

static void three_ops_submit(gated *g, three_ops *t) {
  assert_int_equal(g->s->vt->logs.append(g->s, &t->a.req), 0);
  assert_int_equal(g->s->vt->conversations.members_change(g->s, &t->b), 0);
  assert_int_equal(g->s->vt->logs.append(g->s, &t->c.req), 0);
}

/* Runs a, b and c as one batch behind the held one; the store's counters around it. */
static void three_ops_run(gated *g, three_ops *t, qim_store_stats *before, qim_store_stats *after) {
  fx_async(&t->a.req.req, g->cq, &g->done);
  fx_async(&t->b.req, g->cq, &g->done);
  fx_async(&t->c.req.req, g->cq, &g->done);
  three_ops_submit(g, t);
  qim_store_get_stats(g->s, before);
  fx_gate_release(&g->gate);
  fx_wait_count(g->cq, &g->done, 4);
  qim_store_get_stats(g->s, after);
}

static void test_failing_operation_fails_alone_in_its_batch(void **state) {
  (void)state;
  gated g;
  gated_open(&g, NULL, 0);
  three_ops t;
  three_ops_init(&g, &t);
  append_op *first = &t.first, *a = &t.a, *c = &t.c;
  qim_store_members_change_req *b = &t.b;
  qim_store_stats before, after;
  three_ops_run(&g, &t, &before, &after);

  assert_int_equal(first->req.req.status, 0);
  assert_int_equal(a->req.req.status, 0);
  assert_int_equal(b->req.status, QIM_E_GROUP_ALREADY_EXISTS);
  assert_int_equal(c->req.req.status, 0);
  /* the held batch and one more: a, b and c shared a transaction */
  assert_int_equal(after.transactions - before.transactions, 2);
  assert_int_equal(after.batch_hist[1] - before.batch_hist[1], 1);
  assert_int_equal(after.failed_operations - before.failed_operations, 1);
  /* b failed having written: the batch ran again, each op under a savepoint */
  assert_int_equal(after.redos - before.redos, 1);
  assert_int_equal(outbox_count(g.s), 3);
  qim_store_member_get_req mg = {0};
  mg.tenant_id = fx_tenant();
  mg.conversation_id = fx_conv(1);
  mg.user_id = fx_user(2);
  assert_int_equal(QIM_STORE_SYNC(g.s, conversations.member_get, &mg), -ENOENT);
  gated_close(&g);
}

/* An operation that fails before writing a row leaves nothing to undo: its batch runs once,
 * bare, and the others commit. */
static void test_operation_failing_before_any_write_costs_no_second_run(void **state) {
  (void)state;
  gated g;
  gated_open(&g, NULL, 0);
  three_ops t;
  three_ops_init(&g, &t);
  t.b.conversation_id = fx_conv(7); /* no such group: refused before anything is written */
  qim_store_stats before, after;
  three_ops_run(&g, &t, &before, &after);

  assert_int_equal(t.a.req.req.status, 0);
  assert_int_not_equal(t.b.req.status, 0);
  assert_int_equal(t.c.req.req.status, 0);
  assert_int_equal(t.c.a.out_position.offset, t.a.a.out_position.offset + 1);
  assert_int_equal(after.transactions - before.transactions, 2);
  assert_int_equal(after.failed_operations - before.failed_operations, 1);
  assert_int_equal(after.redos - before.redos, 0);
  assert_int_equal(outbox_count(g.s), 3);
  gated_close(&g);
}

/* ---- the committed hint ------------------------------------------------------------------ */

/* What a write's `committed` hint saw: how often it ran, and whether its `done` had. */
typedef struct hint_seen {
  atomic_int runs;
  atomic_bool done_before;
  int *done;                          /* the completion counter */
  const qim_log_position *position;  /* an append's output, or NULL */
} hint_seen;

static void hint_record(qim_store_req *r) {
  hint_seen *h = r->committed_ctx;
  if (r->status != 0) fail_msg("hint for a write that failed");
  if (h->position && h->position->offset == 0) fail_msg("hint before the outputs were set");
  atomic_fetch_add(&h->runs, 1);
}

static void hint_done(qim_store_req *r) {
  hint_seen *h = r->committed_ctx;
  if (atomic_load(&h->runs) == 0 && r->status == 0) atomic_store(&h->done_before, true);
  (*h->done)++;
}

static void hint_on(qim_store_req *r, hint_seen *h, gated *g) {
  *h = (hint_seen){.done = &g->done};
  r->cq = g->cq;
  r->done = hint_done;
  r->committed = hint_record;
  r->committed_ctx = h;
}

static void test_committed_hint_runs_once_before_done_for_each_committed_write(void **state) {
  (void)state;
  gated g;
  gated_open(&g, NULL, 0);
  three_ops t;
  three_ops_init(&g, &t);
  hint_seen ha, hb, hc;
  hint_on(&t.a.req.req, &ha, &g);
  hint_on(&t.b.req, &hb, &g);
  hint_on(&t.c.req.req, &hc, &g);
  ha.position = &t.a.a.out_position, hc.position = &t.c.a.out_position;
  three_ops_submit(&g, &t);
  fx_gate_release(&g.gate);
  fx_wait_count(g.cq, &g.done, 4);
  assert_int_equal(t.b.req.status, QIM_E_GROUP_ALREADY_EXISTS);
  assert_int_equal(atomic_load(&ha.runs), 1);
  assert_int_equal(atomic_load(&hb.runs), 0);
  assert_int_equal(atomic_load(&hc.runs), 1);
  assert_false(atomic_load(&ha.done_before));
  assert_false(atomic_load(&hc.done_before));
  gated_close(&g);
}

/* One operation of each non-log domain, to see how a lost batch reports in each. */
typedef struct family_ops {
  qim_store_member_change change;
  qim_store_members_change_req members;
  qim_commit_intent proposal;
  qim_store_intent_reserve_req reserve;
  qim_store_shard_takeover_req takeover;
} family_ops;

static void family_submit(gated *g, family_ops *f) {
  memset(f, 0, sizeof *f);
  f->change = (qim_store_member_change){QIM_STORE_MEMBER_ADD, fx_user(5), QIM_GROUP_ROLE_MEMBER,
                                        0x2F, 0x2F};
  f->members.tenant_id = fx_tenant();
  f->members.conversation_id = fx_conv(1);
  f->members.changes = &f->change;
  f->members.change_count = 1;
  f->proposal = fx_proposal(1, 1, 1, "lost");
  f->reserve.proposal = &f->proposal;
  f->takeover.shard = 1;
  f->takeover.owner = 9;
  fx_async(&f->members.req, g->cq, &g->done);
  fx_async(&f->reserve.req, g->cq, &g->done);
  fx_async(&f->takeover.req, g->cq, &g->done);
  assert_int_equal(g->s->vt->conversations.members_change(g->s, &f->members), 0);
  assert_int_equal(g->s->vt->intents.reserve(g->s, &f->reserve), 0);
  assert_int_equal(g->s->vt->mailboxes.shard_takeover(g->s, &f->takeover), 0);
}

/* Each failed in its own domain's words, left no outputs and no trace in the store. */
static void family_check_lost(gated *g, family_ops *f) {
  assert_int_equal(f->members.req.status, QIM_E_GROUP_UNAVAILABLE);
  assert_int_equal(f->reserve.req.status, QIM_E_MESSAGE_STORE_UNAVAILABLE);
  assert_null(f->reserve.out.intent.record.content.payload_or_ciphertext.p);
  assert_int_equal(f->takeover.req.status, QIM_E_MATERIALIZE_UNAVAILABLE);
  qim_store_member_get_req mg = {0};
  mg.tenant_id = fx_tenant();
  mg.conversation_id = fx_conv(1);
  mg.user_id = fx_user(5);
  assert_int_equal(QIM_STORE_SYNC(g->s, conversations.member_get, &mg), -ENOENT);
  qim_store_intent_load_req lr = {0};
  lr.key = f->proposal.key;
  assert_int_equal(QIM_STORE_SYNC(g->s, intents.load, &lr), QIM_E_MESSAGE_STORE_COMMIT_NOT_FOUND);
  qim_store_shard_get_req sg = {0};
  sg.shard = 1;
  assert_int_equal(QIM_STORE_SYNC(g->s, mailboxes.shard_get, &sg), 0);
  assert_int_equal(sg.out_epoch, 0);
  qim_commit_intent_free(&f->proposal);
}

/* SQLITE_FULL from a size cap makes SQLite roll the whole transaction back: nothing of
 * the batch may be reported done, and nothing of it may be visible. */
static void test_whole_transaction_rollback_fails_every_operation(void **state) {
  (void)state;
  gated g;
  gated_open(&g, "?max_page_count=120", 0);
  fx_create_group(g.s, 1, 1);
  append_op first, ops[4];
  hint_seen hints[4];
  family_ops fam;
  gated_hold(&g, &first);
  size_t big_len = 2u << 20;
  uint8_t *big = calloc(1, big_len);
  for (int i = 0; i < 4; i++) {
    append_init(&ops[i], (uint64_t)i + 1, i == 2 ? (const void *)big : "small",
                i == 2 ? big_len : 5);
    hint_on(&ops[i].req.req, &hints[i], &g);
    assert_int_equal(g.s->vt->logs.append(g.s, &ops[i].req), 0);
  }
  family_submit(&g, &fam); /* after the op that fills the database: never ran */
  fx_gate_release(&g.gate);
  fx_wait_count(g.cq, &g.done, 8);
  assert_int_equal(first.req.req.status, 0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(ops[i].req.req.status, QIM_E_COMMIT_LOG_TRANSACTION_ABORTED);
    assert_int_equal(atomic_load(&hints[i].runs), 0); /* nothing of it committed */
  }
  qim_store_stats st;
  qim_store_get_stats(g.s, &st);
  assert_int_equal(st.failed_operations, 7);
  assert_int_equal(st.fsyncs, st.transactions - 1);
  assert_int_equal(outbox_count(g.s), 1);
  family_check_lost(&g, &fam);
  /* The store keeps working after the lost batch. */
  append_op after;
  append_init(&after, 77, "after", 5);
  assert_int_equal(QIM_STORE_SYNC(g.s, logs.append, &after.req), 0);
  assert_int_equal(after.a.out_position.offset, 2);
  free(big);
  gated_close(&g);
}

static void test_full_queue_is_backpressure(void **state) {
  (void)state;
  gated g;
  gated_open(&g, NULL, 4);
  append_op first, ops[5];
  gated_hold(&g, &first);
  for (int i = 0; i < 4; i++) {
    append_init(&ops[i], (uint64_t)i + 1, "q", 1);
    fx_async(&ops[i].req.req, g.cq, &g.done);
    assert_int_equal(g.s->vt->logs.append(g.s, &ops[i].req), 0);
  }
  append_init(&ops[4], 5, "q", 1);
  fx_async(&ops[4].req.req, g.cq, &g.done);
  assert_int_equal(g.s->vt->logs.append(g.s, &ops[4].req), -EAGAIN);
  qim_store_stats st;
  qim_store_get_stats(g.s, &st);
  assert_int_equal(st.rejected_backpressure, 1);
  fx_gate_release(&g.gate);
  fx_wait_count(g.cq, &g.done, 5);
  for (int i = 0; i < 4; i++) assert_int_equal(ops[i].req.req.status, 0);
  assert_int_equal(g.done, 5); /* the refused request never completes */
  gated_close(&g);
}

/* ---- completions on an event loop -------------------------------------------------------- */

typedef struct loop_ctx {
  uv_thread_t loop_thread;
  qim_cq *cq;
  int done, wrong_thread, failed;
} loop_ctx;

#define LOOP_OPS 20

static void on_loop_done(qim_store_req *r) {
  loop_ctx *lc = r->data;
  uv_thread_t self = uv_thread_self();
  if (!uv_thread_equal(&self, &lc->loop_thread)) lc->wrong_thread++;
  if (r->status != 0) lc->failed++;
  if (++lc->done == LOOP_OPS) qim_cq_free(lc->cq); /* the loop then has nothing left */
}

static void test_completions_run_on_the_loop_thread(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-loop");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  loop_ctx lc = {.loop_thread = uv_thread_self()};
  assert_int_equal(qim_cq_new_loop(&loop, &lc.cq), 0);
  append_op writes[LOOP_OPS / 2];
  qim_store_log_consumer_get_req reads[LOOP_OPS / 2];
  for (int i = 0; i < LOOP_OPS / 2; i++) {
    append_init(&writes[i], (uint64_t)i + 1, "w", 1);
    writes[i].req.req = (qim_store_req){.cq = lc.cq, .done = on_loop_done, .data = &lc};
    assert_int_equal(s->vt->logs.append(s, &writes[i].req), 0);
    reads[i] = (qim_store_log_consumer_get_req){0};
    reads[i].req = (qim_store_req){.cq = lc.cq, .done = on_loop_done, .data = &lc};
    reads[i].consumer = "c";
    reads[i].stream = outbox();
    assert_int_equal(s->vt->logs.consumer_get(s, &reads[i]), 0);
  }
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(lc.done, LOOP_OPS);
  assert_int_equal(lc.wrong_thread, 0);
  assert_int_equal(lc.failed, 0);
  assert_int_equal(uv_loop_close(&loop), 0);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- reopening ------------------------------------------------------------------------------ */

/* ---- the linger (commit_linger_us) ------------------------------------------------------- */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Writes that arrive while a transaction lingers join it: one COMMIT for all. */
static void test_linger_gathers_writes_that_arrive_while_it_waits(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-linger");
  qim_store_options o = fx_options();
  o.commit_linger_us = 300000; /* far longer than the pause between the writes below */
  qim_store *s = fx_open(dir, NULL, &o);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  qim_store_stats before, after;
  qim_store_get_stats(s, &before);
  append_op ops[3];
  int done = 0;
  for (int i = 0; i < 3; i++) {
    append_init(&ops[i], (uint64_t)i + 1, "l", 1);
    fx_async(&ops[i].req.req, cq, &done);
    assert_int_equal(s->vt->logs.append(s, &ops[i].req), 0);
    if (i == 0) sleep_ms(50); /* the first is executed and waiting for company by now */
  }
  fx_wait_count(cq, &done, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(ops[i].req.req.status, 0);
  qim_store_get_stats(s, &after);
  assert_int_equal(after.transactions - before.transactions, 1);
  assert_true(after.lingers - before.lingers >= 1);
  assert_int_equal(outbox_count(s), 3);
  qim_store_close(s);
  qim_cq_free(cq);
  qim_test_rmtree(dir);
}

/* A client whose next write waits for the answer to its last gains nothing from a
 * linger: after one that gathered nothing the writer commits at once, trying again only
 * every 32nd batch. */
static void test_linger_stops_for_a_lone_sequential_client(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-linger-lone");
  qim_store_options o = fx_options();
  o.commit_linger_us = 20000;
  qim_store *s = fx_open(dir, NULL, &o);
  qim_store_stats before, after;
  qim_store_get_stats(s, &before);
  for (int i = 0; i < 64; i++) {
    append_op op;
    append_init(&op, (uint64_t)i + 1, "s", 1);
    assert_int_equal(QIM_STORE_SYNC(s, logs.append, &op.req), 0);
  }
  qim_store_get_stats(s, &after);
  assert_int_equal(after.transactions - before.transactions, 64);
  assert_true(after.lingers - before.lingers <= 4); /* the first, then a probe per 32 */
  assert_int_equal(after.lingered - before.lingered, 0);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* ---- reads on a worker's own thread ------------------------------------------------------ */

#define READERS 32 /* more than the store's 16 pooled connections for them */

typedef struct reading {
  qim_store *s;
  int failures, wrong;
} reading;

static void *read_loop(void *arg) {
  reading *rd = arg;
  for (int i = 0; i < 50; i++) {
    qim_store_log_read_req r = {0};
    r.stream = outbox();
    r.max = 10;
    if (QIM_STORE_SYNC(rd->s, logs.read, &r) != 0) rd->failures++;
    if (r.out_count != 3) rd->wrong++;
    for (size_t k = 0; k < r.out_count; k++) qim_store_log_record_free(&r.out_records[k]);
    qim_free(r.out_records);
  }
  return NULL;
}

/* A worker's read (blocking completion queue) runs inside the call on its own thread, and
 * still completes through its queue; many at once all get answers (those beyond the pooled
 * connections wait for a reader thread); an event loop's read never runs on the loop. */
static void test_worker_reads_run_on_their_own_thread_loop_reads_do_not(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-inline");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  for (uint64_t i = 1; i <= 3; i++) {
    append_op op;
    append_init(&op, i, "r", 1);
    assert_int_equal(QIM_STORE_SYNC(s, logs.append, &op.req), 0);
  }
  qim_store_stats before, after;
  qim_store_get_stats(s, &before);
  reading rd[READERS];
  pthread_t t[READERS];
  for (int i = 0; i < READERS; i++) {
    rd[i] = (reading){s, 0, 0};
    assert_int_equal(pthread_create(&t[i], NULL, read_loop, &rd[i]), 0);
  }
  for (int i = 0; i < READERS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(rd[i].failures, 0);
    assert_int_equal(rd[i].wrong, 0);
  }
  qim_store_get_stats(s, &after);
  assert_int_equal(after.reads - before.reads, READERS * 50);
  assert_true(after.reads_inline - before.reads_inline > 0);

  /* The same read from an event loop goes to a reader thread. */
  uv_loop_t loop;
  uv_loop_init(&loop);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_loop(&loop, &cq), 0);
  qim_store_log_read_req r = {0};
  r.stream = outbox();
  r.max = 10;
  int done = 0;
  fx_async(&r.req, cq, &done);
  qim_store_get_stats(s, &before);
  assert_int_equal(s->vt->logs.read(s, &r), 0);
  while (!done) uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(r.req.status, 0);
  assert_int_equal(r.out_count, 3);
  for (size_t k = 0; k < r.out_count; k++) qim_store_log_record_free(&r.out_records[k]);
  qim_free(r.out_records);
  qim_store_get_stats(s, &after);
  assert_int_equal(after.reads_inline, before.reads_inline);
  qim_cq_free(cq);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* Reserving `p` again answers Committed at `seq`: the commit outlived a close and reopen. */
static void assert_committed_at(qim_store *s, qim_commit_intent *p, uint64_t seq) {
  qim_store_intent_reserve_req r = {0};
  r.proposal = p;
  assert_int_equal(QIM_STORE_SYNC(s, intents.reserve, &r), 0);
  assert_int_equal(r.out.kind, QIM_RESERVE_RESULT_COMMITTED);
  assert_int_equal(r.out.committed.coordinates.conversation_seq, seq);
}

/* A default store in `dir` left closed with one group and one commit of `body` (seq 1). */
static void closed_store_with_one_commit(const char *dir, const qim_store_options *o,
                                         const char *body, qim_commit_intent *p) {
  qim_store *s = fx_open(dir, NULL, o);
  fx_create_group(s, 1, 1);
  *p = fx_proposal(1, 1, 1, body);
  assert_int_equal(fx_commit(s, p), 1);
  qim_store_close(s);
}

static void test_reopen_keeps_committed_data(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-reopen");
  qim_store_options o = fx_options();
  qim_commit_intent p;
  closed_store_with_one_commit(dir, &o, "kept", &p);

  qim_store *s = fx_open(dir, NULL, &o);
  assert_committed_at(s, &p, 1);
  assert_int_equal(outbox_count(s), 1);
  qim_commit_intent_free(&p);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

static void test_reopen_with_other_shard_config_is_refused(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-shards");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  qim_store_close(s);
  o.shards.shard_count = 8;
  char *url = fx_url(dir, NULL);
  s = NULL;
  assert_int_equal(qim_store_open(url, &o, &s), -EINVAL);
  assert_null(s);
  o.shards = fx_options().shards;
  assert_int_equal(qim_store_open(url, &o, &s), 0);
  qim_store_close(s);
  assert_int_equal(qim_store_open("nosuch:/tmp/x", &o, &s), -EINVAL);
  free(url);
  qim_test_rmtree(dir);
}

/* ---- deleted means gone ------------------------------------------------------------------ */

/* Whether `needle` occurs anywhere in the file (a missing file holds nothing). */
static bool file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t n = strlen(needle), cap = 1 << 20, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  bool found = false;
  for (size_t i = 0; !found && i + n <= len; i++) found = memcmp(buf + i, needle, n) == 0;
  free(buf);
  return found;
}

static bool store_files_contain(const char *dir, const char *needle) {
  char path[4096];
  snprintf(path, sizeof path, "%s/store.db", dir);
  bool in_db = file_contains(path, needle);
  snprintf(path, sizeof path, "%s/store.db-wal", dir);
  return in_db || file_contains(path, needle);
}

/* Materializes the message inline into its sender's mailbox (shard epoch 0). */
static void mailbox_put(qim_store *s, const qim_commit_intent *p) {
  qim_shard_config cfg = fx_options().shards;
  qim_mailbox_entry e = {0};
  e.tenant_id = fx_tenant();
  e.user_id = fx_user(1);
  e.mailbox_seq = qim_mailbox_seq_make(0, 1);
  e.event_id = qim_event_id_make(e.mailbox_seq, 0);
  e.event_type = QIM_EVENT_TYPE_MESSAGE;
  e.coordinates = p->coordinates;
  e.coordinates.conversation_seq = 1;
  e.sender_id = fx_user(1);
  e.has_content = e.body_included = true;
  e.content = p->record.content; /* borrowed */
  uint32_t chunk = 0;
  qim_append_mailbox_batch b = {0};
  b.shard = qim_shard_of_user(&cfg, e.tenant_id, e.user_id);
  b.lane = qim_lane_of_user(&cfg, e.tenant_id, e.user_id);
  b.dispatch_id = qim_dispatch_id_make(&p->coordinates.message_id, b.shard);
  b.mailbox_seq = e.mailbox_seq;
  b.entries = &e;
  b.entry_count = 1;
  b.progress = (qim_dispatch_progress){b.dispatch_id, b.shard, b.lane, &chunk, 1, false, 0};
  qim_store_mailbox_append_req r = {0};
  r.batch = &b;
  assert_int_equal(QIM_STORE_SYNC(s, mailboxes.append, &r), 0);
}

/* A wiped and redacted body is overwritten in the database (secure_delete) and, once writes
 * pause, the WAL that still held old page images is emptied. */
/* Opens dir's store with `want` (0 = unspecified) and returns the layout in effect. */
static qim_shard_config open_layout(const char *dir, uint32_t shards, uint32_t lanes) {
  qim_shard_config got = {0, 0};
  qim_store_options o = {.shards = {shards, lanes}, .layout_out = &got};
  qim_store *s = fx_open(dir, NULL, &o);
  qim_store_close(s);
  return got;
}

/* A layout left unspecified is the one the store was created with, or the default for a
 * new store; one given must still match. */
static void test_unspecified_layout_is_the_stores_own_or_the_default(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-layout");
  qim_shard_config l = open_layout(dir, 0, 0);
  assert_int_equal(l.shard_count, QIM_STORE_DEFAULT_SHARDS);
  assert_int_equal(l.lanes_per_shard, QIM_STORE_DEFAULT_LANES);
  l = open_layout(dir, QIM_STORE_DEFAULT_SHARDS, 0);
  assert_int_equal(l.lanes_per_shard, QIM_STORE_DEFAULT_LANES);
  qim_test_rmtree(dir);

  dir = qim_test_tmpdir("store-layout2");
  l = open_layout(dir, 8, 3);
  assert_int_equal(l.shard_count, 8);
  l = open_layout(dir, 0, 0);
  assert_int_equal(l.shard_count, 8);
  assert_int_equal(l.lanes_per_shard, 3);
  l = open_layout(dir, 0, 3);
  assert_int_equal(l.shard_count, 8);
  l = open_layout(dir, 8, 0);
  assert_int_equal(l.lanes_per_shard, 3);
  char *url = fx_url(dir, NULL);
  qim_store *s = NULL;
  qim_store_options o = {.shards = {0, 4}};
  assert_int_equal(qim_store_open(url, &o, &s), -EINVAL); /* one given field still counts */
  assert_null(s);
  free(url);
  qim_test_rmtree(dir);
}

static void test_wiped_body_leaves_no_bytes_on_disk(void **state) {
  (void)state;
  static const char secret[] = "the-secret-body-7f3a9c";
  char *dir = qim_test_tmpdir("store-gone");
  qim_store_options o = fx_options();
  qim_store *s = fx_open(dir, NULL, &o);
  fx_create_group(s, 1, 1);
  qim_commit_intent p = fx_proposal(1, 1, 1, secret);
  assert_int_equal(fx_commit(s, &p), 1);
  mailbox_put(s, &p);
  assert_true(store_files_contain(dir, secret));

  fx_hard_delete(s, 1, 1);
  qim_store_log_redact_req red = {0};
  red.position = (qim_log_position){outbox(), 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.redact, &red), 0);
  struct timespec pause = {1, 600000000}; /* past the writer's idle checkpoint */
  nanosleep(&pause, NULL);
  assert_false(store_files_contain(dir, secret));
  qim_commit_intent_free(&p);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* Any regular file under the tree holds `needle`. */
static const char *tree_needle;
static bool tree_found;
static int tree_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (type == FTW_F && file_contains(path, tree_needle)) tree_found = true;
  return 0;
}
static bool tree_contains(const char *dir, const char *needle) {
  tree_needle = needle;
  tree_found = false;
  assert_int_equal(nftw(dir, tree_visit, 16, FTW_PHYS), 0);
  return tree_found;
}

/* A store-memory store in `dir` (its memory directory `dir`/mem, snapshots every 16 KiB)
 * with group 1 created; `mem` and `suffix` (4200 and 4300 bytes) receive the directory and
 * the location's query, for reopening. */
static qim_store *memory_store(const char *dir, char *mem, char *suffix, qim_store_options *o) {
  snprintf(mem, 4200, "%s/mem", dir);
  assert_int_equal(mkdir(mem, 0700), 0);
  snprintf(suffix, 4300, "?memory=%s&snapshot_kb=16", mem);
  qim_store *s = fx_open(dir, suffix, o);
  fx_create_group(s, 1, 1);
  return s;
}

/* A closed store-memory store (memory_store) holding `n` commits of `body` in group 1, at
 * seqs 1..n; returns their proposals (qim_commit_intent_free each, then free). */
static qim_commit_intent *closed_memory_store_with_commits(const char *dir, char *mem, char *suffix,
                                                           qim_store_options *o, int n,
                                                           const char *body) {
  qim_store *s = memory_store(dir, mem, suffix, o);
  qim_commit_intent *p = calloc((size_t)n, sizeof *p);
  for (int i = 0; i < n; i++) {
    p[i] = fx_proposal(1, 1, (uint64_t)i + 1, body);
    assert_int_equal(fx_commit(s, &p[i]), (uint64_t)i + 1);
  }
  qim_store_close(s);
  return p;
}

/* What a power loss takes: every file of the memory directory. */
static void empty_memory_dir(const char *mem) {
  DIR *d = opendir(mem);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) {
    char live[4600];
    snprintf(live, sizeof live, "%s/%s", mem, e->d_name);
    if (e->d_name[0] != '.') unlink(live);
  }
  closedir(d);
}

/* Store-memory mode: a wiped and redacted body is gone from every file on the disk (the base,
 * the page log, the journal's segments) and in the memory directory within the bound: an
 * erase starts a snapshot at once, which copies the WAL up to its cut, writes the
 * overwritten pages into the base, zeroes the page log and the segment it keeps, and removes
 * the others it covers. */
static void test_memory_mode_wiped_body_leaves_no_bytes_in_any_file(void **state) {
  (void)state;
  static const char secret[] = "the-memory-secret-body-5d21";
  char *dir = qim_test_tmpdir("store-memory-gone");
  char mem[4200], suffix[4300];
  qim_store_options o = fx_options();
  qim_store *s = memory_store(dir, mem, suffix, &o);
  qim_commit_intent p = fx_proposal(1, 1, 1, secret);
  assert_int_equal(fx_commit(s, &p), 1);
  mailbox_put(s, &p);
  for (int i = 2; i < 40; i++) { /* enough journal for page sets before the erase */
    qim_commit_intent q = fx_proposal(1, 1, (uint64_t)i, "filler-body-of-a-later-message");
    assert_int_equal(fx_commit(s, &q), (uint64_t)i);
    qim_commit_intent_free(&q);
  }
  /* Where it is by now depends on the snapshots: the journal, the page log or the base. */
  struct timespec settle = {0, 300000000};
  nanosleep(&settle, NULL);
  assert_true(tree_contains(dir, secret));

  fx_hard_delete(s, 1, 1);
  qim_store_log_redact_req red = {0};
  red.position = (qim_log_position){outbox(), 1};
  assert_int_equal(QIM_STORE_SYNC(s, logs.redact, &red), 0);
  /* Gone within the store's bound: the erase's snapshot (the snapshot thread runs at a low
   * priority, so a busy machine delays it) and the writer's idle checkpoint. */
  bool gone = false;
  struct timespec step = {0, 100000000};
  for (int waited = 0; !gone && waited <= QIM_STORE_WIPE_BOUND_MS; waited += 100) {
    nanosleep(&step, NULL);
    gone = !tree_contains(dir, secret);
  }
  assert_true(gone);
  qim_store_close(s);
  s = fx_open(dir, suffix, &o); /* and what reopens from the disk is whole */
  assert_false(tree_contains(dir, secret));
  qim_store_close(s);
  qim_commit_intent_free(&p);
  qim_test_rmtree(dir);
}

/* Writes a copy of a journal segment's first record after its last one, as a kept segment
 * written over holds old records past its new ones. The record head: magic u32, payload
 * length u32, position u64, check u64, little-endian (sqlite_memory.c). False when the
 * segment holds no record. */
static bool segment_add_old_tail(const char *path) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  uint8_t h[24], *first = NULL;
  size_t first_n = 0;
  long end = 0;
  for (;;) {
    if (fread(h, 1, sizeof h, f) != sizeof h) break;
    uint32_t magic = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    uint32_t len = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
    if (magic != 0x514a3031u) break;
    if (!first) {
      first_n = sizeof h + len;
      first = malloc(first_n);
      memcpy(first, h, sizeof h);
      assert_int_equal(fread(first + sizeof h, 1, len, f), len);
    } else {
      assert_int_equal(fseek(f, (long)len, SEEK_CUR), 0);
    }
    end = ftell(f);
  }
  bool added = first && end > 0;
  if (added) {
    assert_int_equal(fseek(f, end, SEEK_SET), 0);
    assert_int_equal(fwrite(first, 1, first_n, f), first_n);
  }
  free(first);
  fclose(f);
  return added;
}

/* Store-memory mode: covered segments are kept and written over as the next ones, so a
 * replay can read new records followed by old ones (here made so: a copy of the segment's
 * first record after its last). Opening after a power loss (the memory directory emptied)
 * skips the old records and brings back every committed intent, each at its own seq. */
static void test_memory_mode_replay_skips_a_kept_segments_old_records(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-memory-kept");
  char mem[4200], suffix[4300], jdir[4300];
  qim_store_options o = fx_options();
  enum { N = 60 };
  qim_commit_intent *p =
      closed_memory_store_with_commits(dir, mem, suffix, &o, N, "a-body-of-the-journal");
  /* Every segment left gets an old record past its new ones. */
  snprintf(jdir, sizeof jdir, "%s/store.db-journal", dir);
  DIR *d = opendir(jdir);
  assert_non_null(d);
  int tails = 0;
  for (struct dirent *e; (e = readdir(d));) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", jdir, e->d_name);
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tails += segment_add_old_tail(path);
  }
  closedir(d);
  assert_true(tails > 0);
  empty_memory_dir(mem);
  qim_store *s = fx_open(dir, suffix, &o);
  for (int i = 0; i < N; i++) {
    assert_committed_at(s, &p[i], (uint64_t)i + 1);
    qim_commit_intent_free(&p[i]);
  }
  assert_int_equal(outbox_count(s), N);
  free(p);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* An empty file at `path`. */
static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
}

/* An empty file `name` in `dir`. */
static void touch_in(const char *dir, const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  touch(path);
}

static bool exists(const char *dir, const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* A store-memory store opened without memory= is refused (-EEXIST): its file lacks what the
 * journal holds since the last snapshot, so a plain open would lose acknowledged commits.
 * Opened again with memory=, every commit is there. Only a journal directory marks one. */
static void test_memory_store_opened_without_memory_is_refused(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-memory-plain");
  char mem[4200], suffix[4300];
  qim_store_options o = fx_options();
  qim_store *s = memory_store(dir, mem, suffix, &o);
  qim_commit_intent p = fx_proposal(1, 1, 1, "journaled");
  assert_int_equal(fx_commit(s, &p), 1);
  qim_store_close(s);

  char *url = fx_url(dir, NULL);
  s = NULL;
  assert_int_equal(qim_store_open(url, &o, &s), -EEXIST);
  assert_null(s);
  free(url);

  s = fx_open(dir, suffix, &o);
  assert_committed_at(s, &p, 1);
  qim_commit_intent_free(&p);
  qim_store_close(s);
  qim_test_rmtree(dir);

  /* A default store beside a file of that name (SQLite's own rollback journal, here empty,
   * so not hot) opens. */
  dir = qim_test_tmpdir("store-plain-journal-file");
  s = fx_open(dir, NULL, &o);
  qim_store_close(s);
  touch_in(dir, "store.db-journal");
  s = fx_open(dir, NULL, &o);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* A first store-memory opening that fails before journaling anything (its memory directory
 * is a file) leaves the default store it was opening as it was: opened plain again, it is
 * not refused, and its commit is there. */
static void test_failed_first_memory_open_leaves_the_default_store_openable(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-memory-failed-first");
  qim_store_options o = fx_options();
  qim_commit_intent p;
  closed_store_with_one_commit(dir, &o, "before-the-failed-open", &p);

  char mem[4200], suffix[4300];
  snprintf(mem, sizeof mem, "%s/not-a-directory", dir);
  touch(mem);
  snprintf(suffix, sizeof suffix, "?memory=%s", mem);
  char *url = fx_url(dir, suffix);
  qim_store *s = NULL;
  assert_int_not_equal(qim_store_open(url, &o, &s), 0);
  assert_null(s);
  free(url);

  s = fx_open(dir, NULL, &o);
  assert_committed_at(s, &p, 1);
  qim_commit_intent_free(&p);
  qim_store_close(s);
  qim_test_rmtree(dir);
}

/* The journal position a closed store's file stands at (its `meta` row; 0 without one).
 * Immutable: SQLite would take the journal directory beside it for its own journal. */
static uint64_t file_position(const char *dir) {
  char path[4300];
  snprintf(path, sizeof path, "file:%s/store.db?immutable=1", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL),
                   SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'journal_position'",
                                      -1, &st, NULL),
                   SQLITE_OK);
  uint64_t pos = sqlite3_step(st) == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return pos;
}

/* A store-memory store opened with from_memory=1 becomes a default store: every commit,
 * those only its journal held included (the memory directory emptied first, as a power
 * loss would), is in its file; the journal and page log are gone, so it then opens plain.
 * from_memory=1 on a default store changes nothing; beside memory= it is refused. */
static void test_memory_store_opened_from_memory_becomes_a_default_store(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-memory-leave");
  char mem[4200], suffix[4300];
  qim_store_options o = fx_options();
  enum { N = 60 };
  qim_commit_intent *p =
      closed_memory_store_with_commits(dir, mem, suffix, &o, N, "a-body-only-the-journal-may-hold");
  empty_memory_dir(mem);
  uint64_t before = file_position(dir);
  char *url = fx_url(dir, NULL);
  qim_store *s = NULL;
  assert_int_equal(qim_store_open(url, &o, &s), -EEXIST); /* the journal holds commits */
  free(url);

  s = fx_open(dir, "?from_memory=1", &o);
  for (int i = 0; i < N; i++) assert_committed_at(s, &p[i], (uint64_t)i + 1);
  assert_int_equal(outbox_count(s), N);
  qim_store_close(s);
  assert_true(file_position(dir) > before); /* the journal's records, not the base alone */
  assert_false(exists(dir, "store.db-journal"));
  assert_false(exists(dir, "store.db-pages"));
  assert_false(exists(dir, "store.db.leaving"));

  for (int round = 0; round < 2; round++) { /* plain, then from_memory=1 again: a no-op */
    s = fx_open(dir, round ? "?from_memory=1" : NULL, &o);
    for (int i = 0; i < N; i++) assert_committed_at(s, &p[i], (uint64_t)i + 1);
    assert_int_equal(outbox_count(s), N);
    qim_store_close(s);
  }
  for (int i = 0; i < N; i++) qim_commit_intent_free(&p[i]);
  free(p);
  snprintf(suffix, sizeof suffix, "?memory=%s&from_memory=1", mem);
  url = fx_url(dir, suffix);
  s = NULL;
  assert_int_equal(qim_store_open(url, &o, &s), -EINVAL);
  assert_null(s);
  free(url);
  qim_test_rmtree(dir);
}

/* A conversion back cut short before its rename leaves its copy (PATH.leaving, here with a
 * rollback journal of its own) beside the store: the next store-memory opening removes it
 * and the store's commit is there. */
static void test_memory_opening_removes_a_cut_short_conversions_copy(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("store-memory-leaving-left");
  char mem[4200], suffix[4300];
  qim_store_options o = fx_options();
  qim_commit_intent *p = closed_memory_store_with_commits(dir, mem, suffix, &o, 1, "kept-body");
  touch_in(dir, "store.db.leaving");
  touch_in(dir, "store.db.leaving-journal");
  qim_store *s = fx_open(dir, suffix, &o);
  assert_false(exists(dir, "store.db.leaving"));
  assert_false(exists(dir, "store.db.leaving-journal"));
  assert_committed_at(s, &p[0], 1);
  qim_store_close(s);
  qim_commit_intent_free(&p[0]);
  free(p);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_commit_batches_concurrent_submitters),
      cmocka_unit_test(test_failing_operation_fails_alone_in_its_batch),
      cmocka_unit_test(test_operation_failing_before_any_write_costs_no_second_run),
      cmocka_unit_test(test_committed_hint_runs_once_before_done_for_each_committed_write),
      cmocka_unit_test(test_whole_transaction_rollback_fails_every_operation),
      cmocka_unit_test(test_full_queue_is_backpressure),
      cmocka_unit_test(test_completions_run_on_the_loop_thread),
      cmocka_unit_test(test_linger_gathers_writes_that_arrive_while_it_waits),
      cmocka_unit_test(test_linger_stops_for_a_lone_sequential_client),
      cmocka_unit_test(test_worker_reads_run_on_their_own_thread_loop_reads_do_not),
      cmocka_unit_test(test_reopen_keeps_committed_data),
      cmocka_unit_test(test_memory_mode_wiped_body_leaves_no_bytes_in_any_file),
      cmocka_unit_test(test_memory_mode_replay_skips_a_kept_segments_old_records),
      cmocka_unit_test(test_memory_store_opened_without_memory_is_refused),
      cmocka_unit_test(test_failed_first_memory_open_leaves_the_default_store_openable),
      cmocka_unit_test(test_memory_store_opened_from_memory_becomes_a_default_store),
      cmocka_unit_test(test_memory_opening_removes_a_cut_short_conversions_copy),
      cmocka_unit_test(test_reopen_with_other_shard_config_is_refused),
      cmocka_unit_test(test_unspecified_layout_is_the_stores_own_or_the_default),
      cmocka_unit_test(test_wiped_body_leaves_no_bytes_on_disk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
