/*
 * client_e2e.c — the C client runtime against the real qimd (started here on a free
 * loopback port with its own data directory, stopped by pid): two accounts made through
 * the client ({acc}), one creates a group and the other joins; a message sent by one
 * reaches the other through the mailbox ({sync}); a send whose ack is lost while qimd is
 * frozen (SIGSTOP) is resent after the reconnect with the same cmid and stored once; a
 * persistent store survives qim_client_close and a reopen (cursor and entries kept,
 * nothing exported twice); after a retention trim the reopened store's cursor is expired
 * (410) and the runtime rebuilds it.
 *   usage: e2e_client QIMD
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qim/client.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "testsupport.h"

#define API_KEY "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K" /* qimd's default (Tinode's demo key) */
#define WAIT_MS 20000                              /* sanitizer builds are slow */
#define SERVICE_TOKEN "client-e2e-service-token-0123456789"

static const char *qimd_path;

/* What the tests share: the server, two devices, the group. */
static struct {
  pid_t qimd;
  int port;
  char *dir, url[64], bob_scope[512], qimd_log[600], login_a[32], login_b[32], grp[32];
  qim_client *alice, *bob;
  uint64_t seen[64]; /* seqs of the message entries bob was given (the cmid is the sender's) */
  size_t seen_n;
} W;

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len))
    abort();
  close(fd);
  return ntohs(a.sin_port);
}

/* Starts qimd and waits for its ready line (stderr goes to a file in the test's directory). */
static void start_qimd(void) {
  char listen[32], data[600], log[600];
  int port = W.port = free_port();
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  snprintf(W.url, sizeof W.url, "ws://127.0.0.1:%d", port);
  snprintf(data, sizeof data, "%s/data", W.dir);
  snprintf(log, sizeof log, "%s/qimd.stderr", W.dir);
  snprintf(W.qimd_log, sizeof W.qimd_log, "%s", log);
  W.qimd = fork();
  assert_true(W.qimd >= 0);
  if (W.qimd == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    /* A tiny mailbox retention, applied only when asked (POST /v0/admin/retention), so only
     * the last test, which asks, expires a cursor. */
    execl(qimd_path, qimd_path, "--listen", listen, "--data", data, "--service-token",
          "e2e:" SERVICE_TOKEN, "--mailbox-retain-count", "4", "--mailbox-retention-interval", "1h",
          (char *)NULL);
    _exit(127);
  }
  WAIT_FOR(qim_test_file_holds(log, "event=server.ready"), WAIT_MS);
  assert_true(qim_test_file_holds(log, "event=server.ready"));
}

static void stop_qimd(void) {
  if (W.qimd <= 0) return;
  kill(W.qimd, SIGCONT);
  kill(W.qimd, SIGTERM);
  int status = 0;
  waitpid(W.qimd, &status, 0);
  W.qimd = 0;
}

/* Polls until an event of `kind` that `match` accepts; others are released on the way. */
typedef bool (*matcher)(const qim_client_event *ev, const void *arg);

static void remember(qim_client *c, const qim_client_event *ev) {
  if (c != W.bob || ev->kind != QIM_CLIENT_EVENT_MESSAGES_ADDED) return;
  for (size_t i = 0; i < ev->message_count; i++)
    if (ev->messages[i].event_type == QIM_EVENT_TYPE_MESSAGE && W.seen_n < 64)
      W.seen[W.seen_n++] = ev->messages[i].coordinates.conversation_seq;
}

static qim_client_event await(qim_client *c, qim_client_event_kind kind, matcher match,
                              const void *arg) {
  int64_t end = qim_test_now_ms() + WAIT_MS;
  while (qim_test_now_ms() < end) {
    qim_client_event ev;
    int rc = qim_client_poll_event(c, &ev, 200);
    if (rc == QIM_AGAIN) continue;
    assert_int_equal(rc, 0);
    remember(c, &ev);
    if (getenv("QIM_E2E_VERBOSE"))
      fprintf(stderr, "%s: event %d state %d failed %s count %zu\n", c == W.bob ? "bob" : "alice",
              (int)ev.kind, (int)ev.connection_state, qim_err_name(ev.failed), ev.message_count);
    if (ev.kind == kind && (!match || match(&ev, arg))) return ev;
    qim_client_event_release(&ev);
  }
  fail_msg("no event of kind %d within %d ms", (int)kind, WAIT_MS);
  return (qim_client_event){0};
}

static bool is_state(const qim_client_event *ev, const void *arg) {
  return ev->connection_state == *(const qim_connection_state *)arg;
}

static bool has_cmid(const qim_client_event *ev, const void *arg) {
  const qim_client_message_id *cmid = arg;
  return memcmp(ev->pending_resolved.client_message_id.b, cmid->b, 16) == 0;
}

/* A MessagesAdded holding the message with conversation seq *arg. */
static bool has_seq(const qim_client_event *ev, const void *arg) {
  for (size_t i = 0; i < ev->message_count; i++)
    if (ev->messages[i].event_type == QIM_EVENT_TYPE_MESSAGE &&
        ev->messages[i].coordinates.conversation_seq == *(const uint64_t *)arg)
      return true;
  return false;
}

static void await_online(qim_client *c) {
  qim_connection_state online = QIM_CONNECTION_STATE_ONLINE;
  qim_client_event ev = await(c, QIM_CLIENT_EVENT_CONNECTION_CHANGED, is_state, &online);
  qim_client_event_release(&ev);
}

static qim_client *open_device(const char *scope, const char *login, qim_client_auth scheme,
                               uint32_t deadline_ms) {
  qim_client_config cfg = {.url = W.url,
                           .api_key = API_KEY,
                           .deadline_ms = deadline_ms,
                           .reconnect_min_ms = 100,
                           .reconnect_max_ms = 500};
  cfg.store.mode =
      scope ? QIM_LOCAL_STORE_MODE_PERSISTENT : QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST;
  cfg.store.scope = (char *)scope;
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_credentials cr = {.scheme = scheme, .login = login, .password = "secret-pw"};
  assert_int_equal(qim_client_connect(c, &cr), 0);
  await_online(c);
  return c;
}

/* Sends `text` from alice; returns the seq of its PendingResolved and its cmid. */
static uint64_t alice_sends(const char *text, qim_client_message_id *cmid) {
  char content[128];
  snprintf(content, sizeof content, "{\"txt\":\"%s\"}", text);
  assert_int_equal(qim_client_send(W.alice, W.grp, content, cmid), 0);
  qim_client_event ev = await(W.alice, QIM_CLIENT_EVENT_PENDING_RESOLVED, has_cmid, cmid);
  uint64_t seq = ev.pending_resolved.coordinates.conversation_seq;
  qim_client_event_release(&ev);
  return seq;
}

static size_t times_seen(uint64_t seq) {
  size_t n = 0;
  for (size_t i = 0; i < W.seen_n; i++) n += W.seen[i] == seq;
  return n;
}

/* What `sql` counts in bob's store file. */
static int bob_rows(const char *sql) {
  char path[600];
  snprintf(path, sizeof path, "%s/qimclient.db", W.bob_scope);
  return (int)qim_test_sqlite_int(path, sql);
}

/* How many times `needle` occurs in qimd's stderr so far. */
static int log_count(const char *needle) {
  FILE *f = fopen(W.qimd_log, "r");
  char line[4096];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  if (f) fclose(f);
  return n;
}

/* POST /v0/admin/retention: every mailbox lane trims now; returns the HTTP status. */
static int post_retention(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)W.port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char req[512];
  int n =
      snprintf(req, sizeof req,
               "POST /v0/admin/retention HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Qim-Service-Token: %s\r\n"
               "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
               SERVICE_TOKEN);
  assert_int_equal(write(fd, req, (size_t)n), n);
  char ans[64] = {0};
  assert_true(read(fd, ans, sizeof ans - 1) > 12);
  close(fd);
  int status = 0;
  sscanf(ans, "HTTP/1.1 %d", &status);
  return status;
}

static int setup(void **state) {
  (void)state;
  W.dir = qim_test_tmpdir("client-e2e");
  start_qimd();
  snprintf(W.bob_scope, sizeof W.bob_scope, "%s/bob", W.dir);
  assert_int_equal(mkdir(W.bob_scope, 0700), 0);
  unsigned r = (unsigned)getpid() ^ (unsigned)qim_test_now_ms();
  snprintf(W.login_a, sizeof W.login_a, "alice%u", r);
  snprintf(W.login_b, sizeof W.login_b, "bob%u", r);
  W.alice = open_device(NULL, W.login_a, QIM_CLIENT_AUTH_NEW_ACCOUNT, 1500);
  W.bob = open_device(W.bob_scope, W.login_b, QIM_CLIENT_AUTH_NEW_ACCOUNT, 10000);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  qim_client_close(W.alice);
  qim_client_close(W.bob);
  stop_qimd();
  qim_test_rmtree(W.dir);
  return 0;
}

static void test_one_device_sends_the_other_receives_through_sync(void **state) {
  (void)state;
  assert_int_equal(qim_client_join(W.alice, "newclientgroup"), 0);
  qim_client_event ev = await(W.alice, QIM_CLIENT_EVENT_SESSIONS_UPDATED, NULL, NULL);
  assert_int_equal(ev.sessions->session_count, 1); /* a fresh account: the new group only */
  qim_group_id g = {ev.sessions->sessions[0].conversation_id.v};
  assert_true(qim_group_id_format(g, W.grp, sizeof W.grp) > 0);
  qim_client_event_release(&ev);
  assert_int_equal(qim_client_join(W.bob, W.grp), 0);
  ev = await(W.bob, QIM_CLIENT_EVENT_SESSIONS_UPDATED, NULL, NULL);
  assert_int_equal(ev.sessions->session_count, 1);
  qim_client_event_release(&ev);

  qim_client_message_id cmid;
  uint64_t seq = alice_sends("hello bob", &cmid);
  assert_true(seq >= 1);
  ev = await(W.bob, QIM_CLIENT_EVENT_MESSAGES_ADDED, has_seq, &seq);
  for (size_t i = 0; i < ev.message_count; i++)
    if (ev.messages[i].event_type == QIM_EVENT_TYPE_MESSAGE) {
      assert_int_equal(ev.messages[i].coordinates.conversation_seq, seq);
      assert_true(ev.messages[i].has_content);
      assert_non_null(memmem(ev.messages[i].content.payload_or_ciphertext.p,
                             ev.messages[i].content.payload_or_ciphertext.n, "hello bob", 9));
    }
  qim_client_event_release(&ev);
  assert_int_equal(times_seen(seq), 1);

  /* Bob's members request lists both accounts. */
  assert_int_equal(qim_client_get_members(W.bob, W.grp), 0);
  ev = await(W.bob, QIM_CLIENT_EVENT_MEMBERS_UPDATED, NULL, NULL);
  assert_int_equal(ev.members->member_count, 2);
  qim_client_event_release(&ev);
}

static bool is_deadline(const qim_client_event *ev, const void *arg) {
  (void)arg;
  return ev->failed == QIM_E_CLIENT_DEADLINE_EXCEEDED;
}

static void test_send_whose_ack_is_lost_is_resent_with_the_same_cmid_and_stored_once(void **state) {
  (void)state;
  qim_client_message_id before, lost, after;
  uint64_t seq0 = alice_sends("before the freeze", &before);
  /* qimd frozen: the {pub} reaches its socket, no ack comes back within the deadline. */
  assert_int_equal(kill(W.qimd, SIGSTOP), 0);
  assert_int_equal(qim_client_send(W.alice, W.grp, "{\"txt\":\"lost ack\"}", &lost), 0);
  qim_client_event ev = await(W.alice, QIM_CLIENT_EVENT_FAILED, is_deadline, NULL);
  qim_client_event_release(&ev);
  assert_int_equal(kill(W.qimd, SIGCONT), 0);
  /* The runtime reconnects and resends the pending send with the same cmid. */
  ev = await(W.alice, QIM_CLIENT_EVENT_PENDING_RESOLVED, has_cmid, &lost);
  uint64_t seq1 = ev.pending_resolved.coordinates.conversation_seq;
  qim_client_event_release(&ev);
  uint64_t seq2 = alice_sends("after the freeze", &after);
  assert_int_equal(seq1, seq0 + 1);
  assert_int_equal(seq2, seq1 + 1); /* no second copy of the lost-ack message took a seq */
  ev = await(W.bob, QIM_CLIENT_EVENT_MESSAGES_ADDED, has_seq, &seq2);
  qim_client_event_release(&ev);
  assert_int_equal(times_seen(seq1), 1);
  assert_int_equal(bob_rows("SELECT count(*) FROM entries WHERE json LIKE '%lost ack%'"), 1);
}

static void test_persistent_store_survives_close_and_reopen_without_exporting_twice(void **state) {
  (void)state;
  int entries = bob_rows("SELECT count(*) FROM entries");
  assert_true(entries >= 4);
  assert_int_equal(bob_rows("SELECT count(*) FROM meta WHERE key='cursor'"), 1);
  qim_client_close(W.bob);
  W.bob = NULL;
  size_t seen = W.seen_n;
  W.bob = open_device(W.bob_scope, W.login_b, QIM_CLIENT_AUTH_BASIC, 10000);
  /* Synced from the kept cursor: nothing new, so nothing is exported again. */
  int64_t end = qim_test_now_ms() + 1000;
  while (qim_test_now_ms() < end) {
    qim_client_event ev;
    if (qim_client_poll_event(W.bob, &ev, 100) != 0) continue;
    assert_int_not_equal(ev.kind, QIM_CLIENT_EVENT_MESSAGES_ADDED);
    qim_client_event_release(&ev);
  }
  assert_int_equal(bob_rows("SELECT count(*) FROM entries"), entries);
  qim_client_message_id cmid;
  uint64_t seq = alice_sends("welcome back", &cmid);
  qim_client_event ev = await(W.bob, QIM_CLIENT_EVENT_MESSAGES_ADDED, has_seq, &seq);
  qim_client_event_release(&ev);
  assert_int_equal(W.seen_n, seen + 1); /* only the new message */
  assert_int_equal(bob_rows("SELECT count(*) FROM entries WHERE type='message'"),
                   bob_rows("SELECT count(DISTINCT json) FROM entries WHERE type='message'"));
}

static bool is_expired(const qim_client_event *ev, const void *arg) {
  (void)arg;
  return ev->failed == QIM_E_CLIENT_CURSOR_EXPIRED;
}

static void test_cursor_expired_by_retention_rebuilds_the_reopened_store(void **state) {
  (void)state;
  qim_client_close(W.bob);
  W.bob = NULL;
  /* Twelve messages while bob is away; the lane keeps four dispatch records. */
  qim_client_message_id cmid;
  uint64_t last = 0;
  for (int i = 0; i < 12; i++) last = alice_sends("while bob is away", &cmid);
  /* Alice's own mailbox (the same, only lane) has the last one: it is materialized. */
  qim_client_event ev = await(W.alice, QIM_CLIENT_EVENT_MESSAGES_ADDED, has_seq, &last);
  qim_client_event_release(&ev);
  int trimmed = log_count("event=mailbox.lane_trimmed");
  assert_int_equal(post_retention(), 202);
  WAIT_FOR(log_count("event=mailbox.lane_trimmed") > trimmed, WAIT_MS);
  assert_true(log_count("event=mailbox.lane_trimmed") > trimmed);

  qim_client_config cfg = {
      .url = W.url,
      .api_key = API_KEY,
      .store = {.scope = W.bob_scope, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT}};
  assert_int_equal(qim_client_open(&cfg, &W.bob), 0);
  qim_client_credentials cr = {
      .scheme = QIM_CLIENT_AUTH_BASIC, .login = W.login_b, .password = "secret-pw"};
  assert_int_equal(qim_client_connect(W.bob, &cr), 0);
  ev = await(W.bob, QIM_CLIENT_EVENT_FAILED, is_expired, NULL);
  ev = await(W.bob, QIM_CLIENT_EVENT_REBUILD_REQUIRED, NULL, NULL);
  assert_true(ev.rebuild.expired_cursor.signed_token.n > 0);
  qim_client_event_release(&ev);
  ev = await(W.bob, QIM_CLIENT_EVENT_LOCAL_STORE_RESET, NULL, NULL);
  ev = await(W.bob, QIM_CLIENT_EVENT_SESSIONS_UPDATED, NULL, NULL);
  assert_int_equal(ev.sessions->session_count, 1);
  assert_int_equal(ev.sessions->sessions[0].latest_conversation_seq, last);
  qim_client_event_release(&ev);
  await_online(W.bob);
  /* The fresh cursor is at the watermark: nothing old comes back, the next message does. */
  assert_int_equal(bob_rows("SELECT count(*) FROM entries"), 0);
  assert_int_equal(bob_rows("SELECT latest_seq FROM conversations"), (int)last);
  uint64_t seq = alice_sends("after the rebuild", &cmid);
  ev = await(W.bob, QIM_CLIENT_EVENT_MESSAGES_ADDED, has_seq, &seq);
  qim_client_event_release(&ev);
  assert_int_equal(bob_rows("SELECT count(*) FROM entries WHERE type='message'"), 1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s QIMD\n", argv[0]);
    return 2;
  }
  qimd_path = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_device_sends_the_other_receives_through_sync),
      cmocka_unit_test(test_send_whose_ack_is_lost_is_resent_with_the_same_cmid_and_stored_once),
      cmocka_unit_test(test_persistent_store_survives_close_and_reopen_without_exporting_twice),
      cmocka_unit_test(test_cursor_expired_by_retention_rebuilds_the_reopened_store),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
