/*
 * test_log.c — log.h: the exact line format (ts, level, event, trace first), trace id
 * presence, level filtering, control-byte neutralisation, long lines, the stderr
 * fallback, and whole lines under concurrent logging.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qim/clock.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "testsupport.h"

#define MAX_LINES 8

typedef struct capture {
  char *lines[MAX_LINES];
  int count;
} capture;

static void capture_sink(const char *line, void *ctx) {
  capture *c = ctx;
  if (c->count < MAX_LINES) c->lines[c->count] = strdup(line);
  c->count++;
}

static int capture_setup(void **state) {
  capture *c = calloc(1, sizeof *c);
  qim_log_set_level(QIM_LOG_INFO);
  qim_log_set_sink(capture_sink, c);
  *state = c;
  return 0;
}

static int capture_teardown(void **state) {
  capture *c = *state;
  qim_log_set_sink(NULL, NULL);
  qim_log_set_level(QIM_LOG_INFO);
  for (int i = 0; i < MAX_LINES && i < c->count; i++) free(c->lines[i]);
  free(c);
  return 0;
}

static void test_line_starts_with_ts_level_event_trace(void **state) {
  capture *c = *state;
  qim_trace_id trace = qim_trace_id_new();
  char hex[33];
  qim_hex_encode(trace.b, 16, hex, sizeof hex);
  uint64_t before = qim_clock_wall_ms(qim_clock_system());
  QIM_LOGI(&trace, "commit.reserved", "conv=%d seq=%d", 5, 7);
  assert_int_equal(c->count, 1);
  const char *line = c->lines[0];
  /* ts=<24 chars> first, and it is the current time. */
  assert_memory_equal(line, "ts=", 3);
  qim_timestamp_millis ts;
  assert_int_equal(qim_timestamp_parse(line + 3, 24, &ts), 0);
  assert_true(ts + 1000 >= before && ts <= before + 1000);
  char want[256];
  snprintf(want, sizeof want, " level=info event=commit.reserved trace=%s conv=5 seq=7", hex);
  assert_string_equal(line + 27, want);
}

static void test_missing_trace_and_empty_fields(void **state) {
  capture *c = *state;
  QIM_LOGW(NULL, "store.slow", NULL);
  QIM_LOGW(NULL, "store.slow", "%s", "");
  QIM_LOGE(NULL, "store.down", "err=%s", "EIO");
  assert_int_equal(c->count, 3);
  assert_string_equal(c->lines[0] + 27, " level=warn event=store.slow trace=-");
  assert_string_equal(c->lines[1] + 27, " level=warn event=store.slow trace=-");
  assert_string_equal(c->lines[2] + 27, " level=error event=store.down trace=- err=EIO");
}

static void test_level_filter_drops_lower_levels(void **state) {
  capture *c = *state;
  QIM_LOGD(NULL, "a", "x=1");
  assert_int_equal(c->count, 0);
  qim_log_set_level(QIM_LOG_WARN);
  QIM_LOGI(NULL, "b", "x=1");
  assert_int_equal(c->count, 0);
  QIM_LOGW(NULL, "c", "x=1");
  QIM_LOGE(NULL, "d", "x=1");
  assert_int_equal(c->count, 2);
  qim_log_set_level(QIM_LOG_DEBUG);
  QIM_LOGD(NULL, "e", "x=1");
  assert_int_equal(c->count, 3);
  assert_non_null(strstr(c->lines[2], " level=debug event=e "));
}

static void test_control_bytes_cannot_forge_lines(void **state) {
  capture *c = *state;
  QIM_LOGI(NULL, "gw.frame", "text=%s", "hi\nts=2020-01-01T00:00:00.000Z level=error\r\t\x7f");
  assert_int_equal(c->count, 1);
  assert_null(strpbrk(c->lines[0], "\n\r\t\x7f"));
  assert_non_null(strstr(c->lines[0], "text=hi?ts=2020-01-01T00:00:00.000Z level=error???"));
}

static void test_long_lines_are_complete_or_cut_with_marker(void **state) {
  capture *c = *state;
  char *mid = malloc(3001), *huge = malloc(40001);
  memset(mid, 'm', 3000);
  mid[3000] = '\0';
  memset(huge, 'h', 40000);
  huge[40000] = '\0';
  QIM_LOGI(NULL, "big", "v=%s end=1", mid);
  QIM_LOGI(NULL, "huge", "v=%s end=1", huge);
  assert_int_equal(c->count, 2);
  size_t n = strlen(c->lines[0]);
  assert_true(n > 3000);
  assert_string_equal(c->lines[0] + n - 6, " end=1");
  n = strlen(c->lines[1]);
  assert_in_range(n, 16000, 16383);
  assert_string_equal(c->lines[1] + n - 3, "...");
  free(mid);
  free(huge);
}

static void test_without_sink_lines_go_to_stderr_with_newline(void **state) {
  (void)state;
  qim_log_set_sink(NULL, NULL);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  QIM_LOGI(NULL, "to.stderr", "k=v");
  QIM_LOGI(NULL, "to.stderr", "k=w");
  dup2(saved, STDERR_FILENO);
  close(saved);
  char buf[512] = {0};
  rewind(tmp);
  size_t n = fread(buf, 1, sizeof buf - 1, tmp);
  fclose(tmp);
  assert_true(n > 0);
  char *first_nl = strchr(buf, '\n');
  assert_non_null(first_nl);
  assert_memory_equal(first_nl - 4, " k=v", 4);
  assert_memory_equal(first_nl + 1, "ts=", 3);
  assert_memory_equal(buf + n - 5, " k=w\n", 5);
}

/* ---- threads --------------------------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 2000

typedef struct line_check {
  int lines, bad;
} line_check;

/* Runs under the log lock: a torn or interleaved line shows up as a bad suffix. */
static void checking_sink(const char *line, void *ctx) {
  line_check *lc = ctx;
  lc->lines++;
  size_t n = strlen(line);
  if (n < 8 || strcmp(line + n - 8, " tail=ok") != 0 || strncmp(line, "ts=", 3) != 0 || strchr(line + 1, '\n'))
    lc->bad++;
}

static void *log_many(void *arg) {
  long t = (long)arg;
  qim_trace_id trace = qim_trace_id_new();
  for (int i = 0; i < PER_THREAD; i++) QIM_LOGI(&trace, "load", "thread=%ld i=%d tail=ok", t, i);
  return NULL;
}

static void test_concurrent_lines_arrive_whole(void **state) {
  (void)state;
  line_check lc = {0, 0};
  qim_log_set_sink(checking_sink, &lc);
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, log_many, (void *)t), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  qim_log_set_sink(NULL, NULL);
  assert_int_equal(lc.lines, THREADS * PER_THREAD);
  assert_int_equal(lc.bad, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_line_starts_with_ts_level_event_trace, capture_setup, capture_teardown),
      cmocka_unit_test_setup_teardown(test_missing_trace_and_empty_fields, capture_setup, capture_teardown),
      cmocka_unit_test_setup_teardown(test_level_filter_drops_lower_levels, capture_setup, capture_teardown),
      cmocka_unit_test_setup_teardown(test_control_bytes_cannot_forge_lines, capture_setup, capture_teardown),
      cmocka_unit_test_setup_teardown(test_long_lines_are_complete_or_cut_with_marker, capture_setup,
                                      capture_teardown),
      cmocka_unit_test(test_without_sink_lines_go_to_stderr_with_newline),
      cmocka_unit_test(test_concurrent_lines_arrive_whole),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
