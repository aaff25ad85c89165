/*
 * test_cq.c — completion queues: items posted from other threads run on the owner (the
 * loop thread, or whoever waits/drains), none is lost or run twice, waits time out, and
 * freeing a queue runs what is still queued.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <uv.h>

#include "qim/cq.h"
#include "testsupport.h"

typedef struct counted {
  qim_cq_item item;
  int *counter;
  pthread_t ran_on;
} counted;

static void count_run(qim_cq_item *it) {
  counted *c = (counted *)it;
  c->ran_on = pthread_self();
  (*c->counter)++;
}

typedef struct poster {
  qim_cq *cq;
  counted *items;
  int n;
} poster;

static void *post_all(void *arg) {
  poster *p = arg;
  for (int i = 0; i < p->n; i++) qim_cq_post(p->cq, &p->items[i].item);
  return NULL;
}

static void test_blocking_wait_runs_items_on_the_waiter(void **state) {
  (void)state;
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  enum { N = 1000 };
  int count = 0;
  counted *items = calloc(N, sizeof *items);
  for (int i = 0; i < N; i++) items[i] = (counted){{NULL, count_run}, &count, 0};
  poster p = {cq, items, N};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, post_all, &p), 0);
  while (count < N) assert_true(qim_cq_wait(cq, 5000) >= 0);
  pthread_join(th, NULL);
  assert_int_equal(count, N);
  for (int i = 0; i < N; i++) assert_true(pthread_equal(items[i].ran_on, pthread_self()));
  assert_int_equal(qim_cq_drain(cq), 0);
  qim_cq_free(cq);
  free(items);
}

static void test_blocking_wait_times_out_when_nothing_comes(void **state) {
  (void)state;
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  assert_int_equal(qim_cq_wait(cq, 50), 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
  assert_true(ms >= 45);
  qim_cq_free(cq);
}

typedef struct chain {
  qim_cq_item item;
  qim_cq *cq;
  qim_cq_item *next_item;
  int *counter;
} chain;

static void chain_run(qim_cq_item *it) {
  chain *c = (chain *)it;
  (*c->counter)++;
  if (c->next_item) qim_cq_post(c->cq, c->next_item); /* posted from inside a callback */
}

static void test_drain_runs_items_posted_by_callbacks(void **state) {
  (void)state;
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int count = 0;
  chain second = {{NULL, chain_run}, cq, NULL, &count};
  chain first = {{NULL, chain_run}, cq, &second.item, &count};
  qim_cq_post(cq, &first.item);
  assert_int_equal(qim_cq_drain(cq), 2);
  assert_int_equal(count, 2);
  qim_cq_free(cq);
}

static void test_free_runs_what_is_still_queued(void **state) {
  (void)state;
  qim_cq *cq;
  assert_int_equal(qim_cq_new_blocking(&cq), 0);
  int count = 0;
  counted it = {{NULL, count_run}, &count, 0};
  qim_cq_post(cq, &it.item);
  qim_cq_free(cq);
  assert_int_equal(count, 1);
}

/* ---- loop queues ------------------------------------------------------------------------- */

enum { LOOP_POSTERS = 4, LOOP_PER_POSTER = 2000 };

typedef struct loop_item {
  qim_cq_item item;
  struct loop_state *ls;
} loop_item;

typedef struct loop_state {
  qim_cq *cq;
  uv_thread_t loop_thread;
  int count, wrong_thread;
} loop_state;

static void loop_run(qim_cq_item *it) {
  loop_state *ls = ((loop_item *)it)->ls;
  uv_thread_t self = uv_thread_self();
  if (!uv_thread_equal(&self, &ls->loop_thread)) ls->wrong_thread++;
  /* The last item frees the queue from its own callback, which a loop queue allows. */
  if (++ls->count == LOOP_POSTERS * LOOP_PER_POSTER) qim_cq_free(ls->cq);
}

typedef struct loop_poster {
  qim_cq *cq;
  loop_item *items;
} loop_poster;

static void *loop_post_all(void *arg) {
  loop_poster *p = arg;
  for (int i = 0; i < LOOP_PER_POSTER; i++) qim_cq_post(p->cq, &p->items[i].item);
  return NULL;
}

static void test_loop_queue_runs_every_item_on_the_loop_thread(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  loop_state ls = {.loop_thread = uv_thread_self()};
  assert_int_equal(qim_cq_new_loop(&loop, &ls.cq), 0);
  loop_item *items = calloc(LOOP_POSTERS * LOOP_PER_POSTER, sizeof *items);
  for (int i = 0; i < LOOP_POSTERS * LOOP_PER_POSTER; i++)
    items[i] = (loop_item){{NULL, loop_run}, &ls};
  pthread_t th[LOOP_POSTERS];
  loop_poster lp[LOOP_POSTERS];
  for (int i = 0; i < LOOP_POSTERS; i++) {
    lp[i] = (loop_poster){ls.cq, items + i * LOOP_PER_POSTER};
    assert_int_equal(pthread_create(&th[i], NULL, loop_post_all, &lp[i]), 0);
  }
  /* Returns once the queue was freed: its handle was the loop's only one. */
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  for (int i = 0; i < LOOP_POSTERS; i++) pthread_join(th[i], NULL);
  assert_int_equal(ls.count, LOOP_POSTERS * LOOP_PER_POSTER);
  assert_int_equal(ls.wrong_thread, 0);
  assert_int_equal(uv_loop_close(&loop), 0);
  free(items);
}

static void test_wait_on_a_loop_queue_is_refused(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  qim_cq *cq;
  assert_int_equal(qim_cq_new_loop(&loop, &cq), 0);
  assert_int_equal(qim_cq_wait(cq, 0), -EINVAL);
  qim_cq_free(cq);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocking_wait_runs_items_on_the_waiter),
      cmocka_unit_test(test_blocking_wait_times_out_when_nothing_comes),
      cmocka_unit_test(test_drain_runs_items_posted_by_callbacks),
      cmocka_unit_test(test_free_runs_what_is_still_queued),
      cmocka_unit_test(test_loop_queue_runs_every_item_on_the_loop_thread),
      cmocka_unit_test(test_wait_on_a_loop_queue_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
