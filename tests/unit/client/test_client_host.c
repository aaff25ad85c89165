/*
 * test_client_host.c — embedding the client runtime (include/qim/client.h) without a
 * server: the configuration a host may not ask for (ClientHostError: among them a store
 * scope that is missing, not a directory, or not writable), a runtime that
 * cannot start, calls that need a connection first, and the bounded event queue: full,
 * it holds events back rather than dropping them, and a host that stops draining gets
 * EventExportFailed.
 */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qim/client.h"
#include "qim/err.h"
#include "testsupport.h"

/* A loopback port nothing listens on: bound, then closed again. */
static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static qim_client_config memory_config(const char *url) {
  return (qim_client_config){
      .url = url, .api_key = "key", .store = {.mode = QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST}};
}

/* A client that connects to a port nothing listens on, with the queue and timings given. */
static qim_client *connect_refused(uint32_t queue_cap, uint32_t export_ms, uint32_t backoff_ms) {
  static char url[64];
  snprintf(url, sizeof url, "ws://127.0.0.1:%d", closed_port());
  qim_client_config cfg = memory_config(url);
  cfg.event_queue_cap = queue_cap;
  cfg.export_deadline_ms = export_ms;
  cfg.reconnect_min_ms = backoff_ms;
  cfg.reconnect_max_ms = 2 * backoff_ms;
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_credentials cr = {.scheme = QIM_CLIENT_AUTH_BASIC, .login = "a", .password = "p"};
  assert_int_equal(qim_client_connect(c, &cr), 0);
  return c;
}

static void test_persistent_scope_missing_or_not_a_directory_is_stable_path_unavailable(
    void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-host");
  char missing[512], file[512];
  snprintf(missing, sizeof missing, "%s/nope", dir);
  snprintf(file, sizeof file, "%s/file", dir);
  fclose(fopen(file, "w"));
  qim_client_config cfg = memory_config("ws://127.0.0.1:1");
  cfg.store = (qim_local_store_location){.scope = missing, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT};
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), QIM_E_HOST_STABLE_PATH_UNAVAILABLE);
  cfg.store.scope = file;
  assert_int_equal(qim_client_open(&cfg, &c), QIM_E_HOST_STABLE_PATH_UNAVAILABLE);
  assert_null(c);
  /* The same directory that exists opens, and the store file appears in it. */
  cfg.store.scope = dir;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_close(c);
  char db[600];
  snprintf(db, sizeof db, "%s/qimclient.db", dir);
  assert_int_equal(access(db, F_OK), 0);
  qim_test_rmtree(dir);
}

/* In a child that cannot write `ro` (root drops to nobody first, since root writes any
 * directory): 0 when `ro` is refused as StablePathUnavailable while `rw`, a directory it
 * can write beside it, opens; what went otherwise, as an exit status. */
static int child_scope_check(char *ro, char *rw) {
  if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 10;
  struct stat st;
  if (stat(ro, &st) != 0 || !S_ISDIR(st.st_mode)) return 11; /* only writing is denied */
  qim_client_config cfg = memory_config("ws://127.0.0.1:1");
  cfg.store = (qim_local_store_location){.scope = ro, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT};
  qim_client *c = NULL;
  if (qim_client_open(&cfg, &c) != QIM_E_HOST_STABLE_PATH_UNAVAILABLE || c) return 12;
  cfg.store.scope = rw;
  if (qim_client_open(&cfg, &c) != 0) return 13;
  qim_client_close(c);
  return 0;
}

static void test_persistent_scope_not_writable_is_stable_path_unavailable(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-scope");
  char ro[512], rw[512];
  snprintf(ro, sizeof ro, "%s/ro", dir);
  snprintf(rw, sizeof rw, "%s/rw", dir);
  assert_int_equal(mkdir(ro, 0555), 0);
  assert_int_equal(mkdir(rw, 0777), 0);
  assert_int_equal(chmod(rw, 0777), 0); /* past the umask: nobody writes it */
  assert_int_equal(chmod(dir, 0755), 0); /* nobody may look inside */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(child_scope_check(ro, rw));
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  qim_test_rmtree(dir);
}

static void test_in_memory_store_when_host_requires_persistent_is_refused(void **state) {
  (void)state;
  qim_client_config cfg = memory_config("ws://127.0.0.1:1");
  cfg.persistent_required = true;
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), QIM_E_HOST_PERSISTENT_STORE_REQUIRED);
  assert_null(c);
  cfg.persistent_required = false;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_close(c);
}

static void test_tls_url_and_host_names_are_unsupported_capabilities(void **state) {
  (void)state;
  const char *unsupported[] = {"wss://127.0.0.1:443", "ws://chat.example.com:80"};
  for (size_t i = 0; i < 2; i++) {
    qim_client_config cfg = memory_config(unsupported[i]);
    qim_client *c = NULL;
    assert_int_equal(qim_client_open(&cfg, &c), QIM_E_HOST_UNSUPPORTED_CAPABILITY);
  }
  const char *malformed[] = {"http://127.0.0.1:1", "ws://127.0.0.1", "ws://127.0.0.1:99999"};
  for (size_t i = 0; i < 3; i++) {
    qim_client_config cfg = memory_config(malformed[i]);
    qim_client *c = NULL;
    assert_int_equal(qim_client_open(&cfg, &c), -EINVAL);
  }
}

static void test_runtime_that_cannot_create_its_loop_is_runtime_start_failed(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    qim_err_raise(QIM_OK); /* opens the error log while a descriptor is still to be had */
    qim_client_config cfg = memory_config("ws://127.0.0.1:1");
    int lowest = dup(0);
    close(lowest);
    /* No new descriptor from here on: the loop's epoll instance cannot be made. */
    struct rlimit rl = {.rlim_cur = (rlim_t)lowest, .rlim_max = (rlim_t)lowest};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    qim_client *c = NULL;
    int rc = qim_client_open(&cfg, &c);
    _exit(rc == QIM_E_HOST_RUNTIME_START_FAILED ? 0 : rc == 0 ? 1 : 2);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_send_join_or_members_before_connect_is_connect_required(void **state) {
  (void)state;
  qim_client_config cfg = memory_config("ws://127.0.0.1:1");
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_message_id cmid;
  assert_int_equal(qim_client_send(c, "grpX", "{\"txt\":\"hi\"}", &cmid),
                   QIM_E_CLIENT_CONNECT_REQUIRED);
  assert_int_equal(qim_client_join(c, "grpX"), QIM_E_CLIENT_CONNECT_REQUIRED);
  assert_int_equal(qim_client_get_members(c, "grpX"), QIM_E_CLIENT_CONNECT_REQUIRED);
  assert_int_equal(qim_client_get_sessions(c), QIM_E_CLIENT_CONNECT_REQUIRED);
  assert_int_equal(qim_client_send(c, "grpX", "{not json", &cmid), -EINVAL);
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 0), QIM_AGAIN); /* nothing happened */
  assert_int_equal(qim_client_state(c), QIM_CONNECTION_STATE_DISCONNECTED);
  qim_client_close(c);
}

static void test_refused_connection_is_unavailable_and_retried_with_backoff(void **state) {
  (void)state;
  qim_client *c = connect_refused(0, 0, 20);
  /* Connecting, Failed(Unavailable), Disconnected, then again: twice round at least. */
  int connecting = 0, unavailable = 0, disconnected = 0;
  int64_t end = qim_test_now_ms() + 5000;
  while ((connecting < 2 || unavailable < 2) && qim_test_now_ms() < end) {
    qim_client_event ev;
    if (qim_client_poll_event(c, &ev, 100) != 0) continue;
    if (ev.kind == QIM_CLIENT_EVENT_CONNECTION_CHANGED) {
      connecting += ev.connection_state == QIM_CONNECTION_STATE_CONNECTING;
      disconnected += ev.connection_state == QIM_CONNECTION_STATE_DISCONNECTED;
    }
    unavailable += ev.kind == QIM_CLIENT_EVENT_FAILED && ev.failed == QIM_E_CLIENT_UNAVAILABLE;
    qim_client_event_release(&ev);
  }
  assert_true(connecting >= 2);
  assert_true(unavailable >= 2);
  assert_true(disconnected >= 1);
  qim_client_close(c);
}

static void test_full_event_queue_holds_events_back_and_loses_none(void **state) {
  (void)state;
  qim_client *c = connect_refused(2, 0, 1);
  /* Without polling, the runtime may not run ahead: no reconnect while events are held. */
  qim_test_sleep_ms(300);
  /* Every attempt yields Connecting, Failed, Disconnected, in that order, with no gap. */
  const int want[3] = {QIM_CLIENT_EVENT_CONNECTION_CHANGED, QIM_CLIENT_EVENT_FAILED,
                       QIM_CLIENT_EVENT_CONNECTION_CHANGED};
  for (int i = 0; i < 12; i++) {
    qim_client_event ev;
    assert_int_equal(qim_client_poll_event(c, &ev, 2000), 0);
    assert_int_equal(ev.kind, want[i % 3]);
    if (i % 3 == 0) assert_int_equal(ev.connection_state, QIM_CONNECTION_STATE_CONNECTING);
    if (i % 3 == 2) assert_int_equal(ev.connection_state, QIM_CONNECTION_STATE_DISCONNECTED);
    qim_client_event_release(&ev);
  }
  qim_client_close(c);
}

static void test_host_that_stops_draining_gets_event_export_failed_once(void **state) {
  (void)state;
  qim_client *c = connect_refused(1, 100, 0);
  qim_test_sleep_ms(400);
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 0), QIM_E_HOST_EVENT_EXPORT_FAILED);
  /* Reported once; the events held meanwhile follow, the first one first. */
  assert_int_equal(qim_client_poll_event(c, &ev, 1000), 0);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_CONNECTION_CHANGED);
  assert_int_equal(ev.connection_state, QIM_CONNECTION_STATE_CONNECTING);
  qim_client_event_release(&ev);
  assert_int_equal(qim_client_poll_event(c, &ev, 1000), 0);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_FAILED);
  qim_client_event_release(&ev);
  qim_client_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_persistent_scope_missing_or_not_a_directory_is_stable_path_unavailable),
      cmocka_unit_test(test_persistent_scope_not_writable_is_stable_path_unavailable),
      cmocka_unit_test(test_in_memory_store_when_host_requires_persistent_is_refused),
      cmocka_unit_test(test_tls_url_and_host_names_are_unsupported_capabilities),
      cmocka_unit_test(test_runtime_that_cannot_create_its_loop_is_runtime_start_failed),
      cmocka_unit_test(test_send_join_or_members_before_connect_is_connect_required),
      cmocka_unit_test(test_refused_connection_is_unavailable_and_retried_with_backoff),
      cmocka_unit_test(test_full_event_queue_holds_events_back_and_loses_none),
      cmocka_unit_test(test_host_that_stops_draining_gets_event_export_failed_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
