/*
 * test_fanout_group.c — groups, commit and fanout together on one SQLite store: the
 * audience of every message is the member set at its reserve, exactly — a member removed
 * after still receives it, one added after does not — also while members join and
 * leave on several threads during sends from several others; and the membership
 * Control messages reach the members they concern.
 */
#include "testsupport.h"

#include <pthread.h>

#include "../group/group_fixture.h"
#include "fanout/fanout.h"
#include "fanout_store_fixture.h"
#include "qim/err.h"

static qim_fanout *fanout_of(gx *x) {
  qim_fanout_options o = {.shards = GX_SHARDS, .chunk_size = 16};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(x->store, &o, &f), 0);
  return f;
}

static void drain(qim_fanout *f) {
  uint32_t n;
  do assert_int_equal(qim_fanout_run_once(f, 64, &n), 0);
  while (n);
}

static void test_member_removed_after_a_message_still_receives_it_one_added_after_does_not(void **state) {
  (void)state;
  gx x;
  gx_open(&x, "fanout-group", NULL);
  gx_create(&x, 1, 1, 2, 9); /* users 1..10 */
  qim_committed_message m1 = gx_send(&x, 1, 2, 1);
  qim_authenticated_actor owner = gx_actor(1);
  qim_group_change_result rm, add;
  assert_int_equal(qim_group_remove(x.groups, &owner, gx_group(1), gx_user(5), NULL, &rm), 0);
  qim_user_id u50 = gx_user(50);
  assert_int_equal(qim_group_add(x.groups, &owner, gx_group(1), &u50, 1, QIM_GROUP_ROLE_MEMBER, NULL, &add), 0);
  qim_committed_message m2 = gx_send(&x, 1, 2, 2);
  qim_fanout *f = fanout_of(&x);
  drain(f);
  fx_dispatches d;
  fx_all_dispatches(x.store, &d);
  assert_int_equal(fx_count_recipient(&d, &m1.coordinates.message_id, gx_user(5)), 1);
  assert_int_equal(fx_count_recipient(&d, &m1.coordinates.message_id, gx_user(50)), 0);
  assert_int_equal(fx_count_all(&d, &m1.coordinates.message_id, NULL), 10);
  assert_int_equal(fx_count_recipient(&d, &m2.coordinates.message_id, gx_user(5)), 0);
  assert_int_equal(fx_count_recipient(&d, &m2.coordinates.message_id, gx_user(50)), 1);
  assert_int_equal(fx_count_all(&d, &m2.coordinates.message_id, NULL), 10);
  /* the removal's Control reaches the removed member too; the addition's the new one */
  assert_int_equal(fx_count_recipient(&d, &rm.control.coordinates.message_id, gx_user(5)), 1);
  assert_int_equal(fx_count_all(&d, &rm.control.coordinates.message_id, NULL), 10);
  assert_int_equal(fx_count_recipient(&d, &add.control.coordinates.message_id, gx_user(50)), 1);
  fx_dispatches_free(&d);
  qim_fanout_free(f);
  gx_close(&x);
}

/* ---- concurrency --------------------------------------------------------------------------------- */

#define CHURN_THREADS 2
#define CHURN_USERS 12   /* per churn thread */
#define SENDERS 3
#define SENDS 25
#define CHURN_STEPS 40

typedef struct event {
  qim_conversation_seq position;
  bool join;
} event;

typedef struct user_log {
  event ev[CHURN_STEPS + 2];
  size_t n;
} user_log;

typedef struct shared {
  gx *x;
  user_log users[CHURN_THREADS * CHURN_USERS]; /* user 100 + i */
  qim_committed_message sent[SENDERS][SENDS];
} shared;

typedef struct targ {
  shared *sh;
  int id;
} targ;

/* Toggles the membership of its own users; each change's seq position is recorded. */
static void *churn_main(void *arg) {
  targ *t = arg;
  qim_authenticated_actor owner = gx_actor(1);
  unsigned seed = (unsigned)t->id * 7919u + 1;
  for (int step = 0; step < CHURN_STEPS; step++) {
    int k = t->id * CHURN_USERS + (int)(rand_r(&seed) % CHURN_USERS);
    user_log *l = &t->sh->users[k];
    bool member = l->n && l->ev[l->n - 1].join;
    qim_user_id u = gx_user(100 + (uint64_t)k);
    qim_group_change_result r;
    if (member)
      assert_int_equal(qim_group_remove(t->sh->x->groups, &owner, gx_group(1), u, NULL, &r), 0);
    else
      assert_int_equal(qim_group_add(t->sh->x->groups, &owner, gx_group(1), &u, 1, QIM_GROUP_ROLE_MEMBER, NULL, &r), 0);
    l->ev[l->n++] = (event){r.position, !member};
  }
  return NULL;
}

static void *send_main(void *arg) {
  targ *t = arg;
  for (int i = 0; i < SENDS; i++)
    t->sh->sent[t->id][i] = gx_send(t->sh->x, 1, 2 + (uint64_t)t->id, 1000u * (uint64_t)t->id + (uint64_t)i + 1);
  return NULL;
}

/* Member for seq N: the state after every change at a position below N. */
static bool member_at(const user_log *l, qim_conversation_seq n) {
  bool in = false;
  for (size_t i = 0; i < l->n && l->ev[i].position < n; i++) in = l->ev[i].join;
  return in;
}

static void test_concurrent_joins_leaves_and_sends_keep_every_audience_exact(void **state) {
  (void)state;
  gx x;
  gx_open(&x, "fanout-race", NULL);
  gx_create(&x, 1, 1, 2, SENDERS); /* owner 1, senders 2..4, never changed */
  shared *sh = calloc(1, sizeof *sh);
  sh->x = &x;
  pthread_t th[CHURN_THREADS + SENDERS];
  targ args[CHURN_THREADS + SENDERS];
  for (int i = 0; i < CHURN_THREADS + SENDERS; i++) {
    args[i] = (targ){sh, i < CHURN_THREADS ? i : i - CHURN_THREADS};
    assert_int_equal(pthread_create(&th[i], NULL, i < CHURN_THREADS ? churn_main : send_main, &args[i]), 0);
  }
  for (int i = 0; i < CHURN_THREADS + SENDERS; i++) pthread_join(th[i], NULL);
  qim_fanout *f = fanout_of(&x);
  drain(f);
  fx_dispatches d;
  fx_all_dispatches(x.store, &d);
  size_t checked_in = 0, checked_out = 0;
  for (int s = 0; s < SENDERS; s++)
    for (int i = 0; i < SENDS; i++) {
      const qim_committed_message *m = &sh->sent[s][i];
      qim_conversation_seq n = m->coordinates.conversation_seq;
      size_t expected = 1 + SENDERS;
      for (uint64_t u = 1; u <= 1 + SENDERS; u++)
        assert_int_equal(fx_count_recipient(&d, &m->coordinates.message_id, gx_user(u)), 1);
      for (int k = 0; k < CHURN_THREADS * CHURN_USERS; k++) {
        bool in = member_at(&sh->users[k], n);
        assert_int_equal(fx_count_recipient(&d, &m->coordinates.message_id, gx_user(100 + (uint64_t)k)), in ? 1 : 0);
        expected += in;
        in ? checked_in++ : checked_out++;
      }
      assert_int_equal(fx_count_all(&d, &m->coordinates.message_id, NULL), expected);
    }
  assert_true(checked_in > 0 && checked_out > 0); /* both cases were exercised */
  fx_dispatches_free(&d);
  qim_fanout_free(f);
  free(sh);
  gx_close(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_member_removed_after_a_message_still_receives_it_one_added_after_does_not),
      cmocka_unit_test(test_concurrent_joins_leaves_and_sends_keep_every_audience_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
