/*
 * test_commit_sender_order.c — a conversation's seqs follow the order in which its sends
 * reached the commit, even when the store answers the checks before reserve (the
 * conversation and member reads, which run on several reader threads) out of order. A
 * client that pipelines pubs without waiting for each ack sees them delivered in the order
 * it sent them (qim-bench counted such deliveries as "late" before this was fixed).
 */
#include <stdatomic.h>

#include "commit_fixture.h"
#include "qim/err.h"

/* Holds the first send's conversation read until the second send has passed every check
 * and the commit has finished handling that (a marker posted behind the second send's
 * conversation read on its own queue runs: a plain send's reserve checks membership
 * itself, so that read is its last check). */
typedef struct hold {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int conv_gets;
  bool first_held, marker_ran;
  qim_cq_item marker;
} hold;

static hold H = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void marker_run(qim_cq_item *it) {
  (void)it;
  pthread_mutex_lock(&H.mu);
  H.marker_ran = true;
  pthread_cond_broadcast(&H.cv);
  pthread_mutex_unlock(&H.mu);
}

static void hold_after(hook_store *h, const char *op, qim_store_req *req) {
  (void)h;
  pthread_mutex_lock(&H.mu);
  if (strcmp(op, "conversations.get") == 0 && ++H.conv_gets == 1) {
    H.first_held = true;
    pthread_cond_broadcast(&H.cv);
    while (!H.marker_ran) pthread_cond_wait(&H.cv, &H.mu);
  } else if (strcmp(op, "conversations.get") == 0 && H.conv_gets == 2) {
    /* The second send's read (the first's is held). The marker runs on its queue right
     * after the commit handled this completion. */
    H.marker.run = marker_run;
    qim_cq_post(req->cq, &H.marker);
  }
  pthread_mutex_unlock(&H.mu);
}

typedef struct one_send {
  fx *f;
  qim_authenticated_send send;
  qim_commit_op op;
  atomic_bool done;
} one_send;

static void one_done(qim_commit_op *op) {
  atomic_store(&((one_send *)op->data)->done, true);
}

/* A client loop of its own: one send on its own queue, drained until it completes. */
static void *send_on_own_queue(void *arg) {
  one_send *s = arg;
  qim_cq *cq;
  if (qim_cq_new_blocking(&cq) != 0) abort();
  s->op = (qim_commit_op){.cq = cq, .done = one_done, .data = s};
  if (qim_commit_send(s->f->commit, &s->send, &s->op) != 0) abort();
  while (!atomic_load(&s->done)) qim_cq_wait(cq, 100);
  qim_cq_free(cq);
  return NULL;
}

static void test_a_later_send_whose_checks_finish_first_still_gets_the_later_seq(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id a = fx_user(1), b = fx_user(2);
  qim_conversation_id conv = fx_direct(&f, a, b);
  one_send first = {.f = &f, .send = fx_send(&f, a, conv, 1, "first")};
  one_send second = {.f = &f, .send = fx_send(&f, a, conv, 2, "second")};
  f.hook->after = hold_after;
  pthread_t t1, t2;
  assert_int_equal(pthread_create(&t1, NULL, send_on_own_queue, &first), 0);
  pthread_mutex_lock(&H.mu);
  while (!H.first_held) pthread_cond_wait(&H.cv, &H.mu);
  pthread_mutex_unlock(&H.mu);
  assert_int_equal(pthread_create(&t2, NULL, send_on_own_queue, &second), 0);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  f.hook->after = NULL;
  assert_int_equal(first.op.result.status, 0);
  assert_int_equal(second.op.result.status, 0);
  assert_int_equal(first.op.result.ack.coordinates.conversation_seq, 1);
  assert_int_equal(second.op.result.ack.coordinates.conversation_seq, 2);
  fx_close(&f);
}

/* A send refused by its checks does not hold back the sends that came after it. */
static void test_a_send_refused_by_its_checks_releases_the_sends_behind_it(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_user_id a = fx_user(1), b = fx_user(2), outsider = fx_user(3);
  qim_conversation_id conv = fx_direct(&f, a, b);
  fx_make_user(&f, outsider);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  one_send s[3] = {{.f = &f, .send = fx_send(&f, outsider, conv, 1, "not mine")},
                   {.f = &f, .send = fx_send(&f, a, conv, 2, "one")},
                   {.f = &f, .send = fx_send(&f, b, conv, 3, "two")}};
  for (int i = 0; i < 3; i++) {
    s[i].op = (qim_commit_op){.cq = cq, .done = one_done, .data = &s[i]};
    assert_int_equal(qim_commit_send(f.commit, &s[i].send, &s[i].op), 0);
  }
  for (int i = 0; i < 3; i++)
    while (!atomic_load(&s[i].done)) qim_cq_wait(cq, 100);
  qim_cq_free(cq);
  assert_int_equal(s[0].op.result.status, QIM_E_COMMIT_PERMISSION_DENIED);
  assert_int_equal(s[1].op.result.status, 0);
  assert_int_equal(s[2].op.result.status, 0);
  assert_int_equal(s[1].op.result.ack.coordinates.conversation_seq, 1);
  assert_int_equal(s[2].op.result.ack.coordinates.conversation_seq, 2);
  fx_close(&f);
}

int main(void) {
  qim_log_set_level(QIM_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_later_send_whose_checks_finish_first_still_gets_the_later_seq),
      cmocka_unit_test(test_a_send_refused_by_its_checks_releases_the_sends_behind_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
