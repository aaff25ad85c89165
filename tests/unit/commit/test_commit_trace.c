/*
 * test_commit_trace.c — one TraceId can be followed through the log line of every step
 * a message passes: a plain send, a send whose step fails and is resumed, and an intent
 * finished by recovery after a restart (which logs with the TraceId the intent froze).
 */
#include <stdatomic.h>

#include "commit_fixture.h"
#include "qim/err.h"

static qim_user_id a, b;

static void assert_logged(const qim_trace_id *t, const char *event, const char *needle) {
  if (fx_log_count(t, event, needle) == 0) fail_msg("no %s line with the trace%s%s", event, needle ? " and " : "",
                                                     needle ? needle : "");
}

static void test_trace_followed_through_every_step_of_a_send(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, a, b);
  qim_test_log_start(QIM_LOG_DEBUG);
  qim_authenticated_send s = fx_send(&f, a, conv, 1, "trace me");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_logged(&s.trace_id, "commit.send", NULL);
  assert_logged(&s.trace_id, "commit.reserved", "kind=fresh");
  assert_logged(&s.trace_id, "commit.reserved", "in_reserve=1"); /* the one-transaction path */
  assert_logged(&s.trace_id, "commit.recorded", "seq=1");
  assert_logged(&s.trace_id, "commit.outboxed", "seq=1");
  assert_logged(&s.trace_id, "commit.verified", NULL);
  assert_logged(&s.trace_id, "commit.committed", "seq=1");
  assert_logged(&s.trace_id, "commit.acked", "kind=fresh");
  /* One line per step: the steps are not logged twice. */
  assert_int_equal(fx_log_count(&s.trace_id, "commit.recorded", NULL), 1);
  assert_int_equal(fx_log_count(&s.trace_id, "commit.committed", NULL), 1);
  /* The replay of the ACK is logged with the retry's own trace. */
  qim_trace_id first = s.trace_id;
  s.trace_id = qim_trace_id_new();
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_logged(&s.trace_id, "commit.acked", "kind=committed");
  assert_int_equal(fx_log_count(&first, "commit.acked", NULL), 1);
  qim_test_log_stop();
  fx_close(&f);
}

static atomic_int fail_once;

static int fail_outbox(hook_store *h, const char *op, qim_store_req *req) {
  (void)h;
  if (!hook_is_advance(op, req, QIM_COMMIT_STATE_OUTBOXED)) return 0;
  return atomic_exchange(&fail_once, 0) ? -EIO : 0;
}

static void test_trace_followed_through_a_failed_step_and_its_retry(void **state) {
  (void)state;
  fx f;
  fx_open_staged(&f);
  qim_conversation_id conv = fx_direct(&f, a, b);
  atomic_store(&fail_once, 1);
  f.hook->before = fail_outbox;
  qim_test_log_start(QIM_LOG_DEBUG);
  qim_authenticated_send s = fx_send(&f, a, conv, 1, "bumpy");
  qim_commit_result r;
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), QIM_E_COMMIT_RECOVERABLE);
  assert_logged(&s.trace_id, "commit.step_failed", "step=outboxed");
  assert_logged(&s.trace_id, "commit.failed", "err=CommitError::Recoverable");
  assert_int_equal(qim_commit_send_sync(f.commit, &s, &r), 0);
  assert_logged(&s.trace_id, "commit.attached", NULL);
  assert_logged(&s.trace_id, "commit.retry", NULL);
  assert_logged(&s.trace_id, "commit.outboxed", NULL);
  assert_logged(&s.trace_id, "commit.committed", NULL);
  assert_logged(&s.trace_id, "commit.acked", "kind=existing");
  qim_test_log_stop();
  fx_close(&f);
}

static void test_trace_followed_through_recovery_after_restart(void **state) {
  (void)state;
  fx f;
  fx_open(&f, NULL);
  qim_conversation_id conv = fx_direct(&f, a, b);
  qim_trace_id t;
  fx_orphan(&f, a, conv, true, 1, "left behind", &t);
  fx_restart(&f);
  qim_test_log_start(QIM_LOG_DEBUG);
  qim_commit_task task;
  assert_int_equal(qim_commit_recover_sync(f.commit, &task), 0);
  assert_int_equal(task.committed, 1);
  assert_logged(&t, "commit.adopted", "state=reserved");
  assert_logged(&t, "commit.recorded", NULL);
  assert_logged(&t, "commit.outboxed", NULL);
  assert_logged(&t, "commit.verified", NULL);
  assert_logged(&t, "commit.committed", "seq=1");
  qim_test_log_stop();
  fx_close(&f);
}

int main(void) {
  a = fx_user(1);
  b = fx_user(2);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_followed_through_every_step_of_a_send),
      cmocka_unit_test(test_trace_followed_through_a_failed_step_and_its_retry),
      cmocka_unit_test(test_trace_followed_through_recovery_after_restart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
