/*
 * test_client_session.c — the client runtime's connection state machine against a small
 * scripted WebSocket server on a loopback port (test scaffolding: it speaks the frames of
 * docs/protocol.md the way qimd does, and each test scripts the answers it needs): sync
 * pages stored then exported once, a push that triggers another sync, pending sends
 * resent with the same cmid after a reconnect, members, and every way a connection goes
 * wrong — 401, a refused token (Kicked), ctrl 205 (Kicked), no answer (DeadlineExceeded),
 * a frame that is not JSON (ProtocolFailure), a drop between pages (SyncIncomplete), 410
 * (rebuild), 400 "cursor invalid", 503.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qim/client.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/websocket.h"
#include "testsupport.h"

/* ---- the scripted server ------------------------------------------------------------------- */

typedef struct fake fake;
/* Answers one client frame; returns 1 to close the connection without more. */
typedef int (*fake_handler)(fake *f, json_t *msg);

struct fake {
  int lfd, port, fd;
  pthread_t thread;
  atomic_bool stop;
  atomic_int connections;
  bool silent; /* accept and read, never answer: not even the upgrade */
  fake_handler handler;
  /* what the scripts count and remember */
  int syncs, pubs, seq;
  char sync_cursor[8][64]; /* the cursor of each {sync}, "" without one */
  char pub_cmid[8][23];
  char login_scheme[8][16];
};

static char USR[32], USR2[32], GRP[32];

/* Reads exactly n bytes, giving up when the peer closes or the test stops. */
static int read_full(fake *f, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {.fd = f->fd, .events = POLLIN};
    if (atomic_load(&f->stop)) return -1;
    if (poll(&p, 1, 20) <= 0) continue;
    ssize_t r = read(f->fd, (char *)buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void fake_send(fake *f, const char *fmt, ...) {
  char text[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  uint8_t head[4] = {0x81, (uint8_t)n};
  size_t hl = 2;
  if (n > 125) {
    head[1] = 126;
    head[2] = (uint8_t)(n >> 8);
    head[3] = (uint8_t)n;
    hl = 4;
  }
  assert_int_equal(write(f->fd, head, hl), (ssize_t)hl);
  assert_int_equal(write(f->fd, text, (size_t)n), n);
}

/* The upgrade: the request's key in, 101 with its accept value out. */
static int handshake(fake *f) {
  char req[4096];
  size_t n = 0;
  while (n < sizeof req - 1 && (n < 4 || memcmp(req + n - 4, "\r\n\r\n", 4) != 0))
    if (read_full(f, req + n++, 1)) return -1;
  req[n] = '\0';
  char *k = strstr(req, "Sec-WebSocket-Key: ");
  if (!k) return -1;
  char key[25] = {0}, accept[QIM_WS_ACCEPT_LEN + 1];
  memcpy(key, k + 19, 24);
  qim_websocket_accept(key, accept);
  char ans[256];
  int an =
      snprintf(ans, sizeof ans,
               "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: %s\r\n\r\n",
               accept);
  return write(f->fd, ans, (size_t)an) == an ? 0 : -1;
}

/* One masked client frame as text (NUL-terminated, caller frees); NULL at the end. */
static char *read_frame(fake *f, int *op) {
  uint8_t h[2], mask[4];
  if (read_full(f, h, 2)) return NULL;
  uint64_t len = h[1] & 0x7F;
  if (len == 126) {
    uint8_t e[2];
    if (read_full(f, e, 2)) return NULL;
    len = ((uint64_t)e[0] << 8) | e[1];
  } else if (len == 127) {
    return NULL; /* the runtime never sends frames this large in these tests */
  }
  if (read_full(f, mask, 4)) return NULL;
  char *p = malloc(len + 1);
  if (read_full(f, p, len)) {
    free(p);
    return NULL;
  }
  for (uint64_t i = 0; i < len; i++) p[i] ^= mask[i & 3];
  p[len] = '\0';
  *op = h[0] & 0x0F;
  return p;
}

static void serve(fake *f) {
  if (f->silent) {
    char b[256];
    while (read_full(f, b, 1) == 0) continue;
    return;
  }
  if (handshake(f)) return;
  int op = 0;
  char *text;
  while ((text = read_frame(f, &op)) != NULL) {
    json_t *m = op == 1 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (op == 8) break;
    int stop = m ? f->handler(f, m) : 0;
    json_decref(m);
    if (stop) break;
  }
}

static void *fake_main(void *arg) {
  fake *f = arg;
  while (!atomic_load(&f->stop)) {
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    if (poll(&p, 1, 20) <= 0) continue;
    f->fd = accept(f->lfd, NULL, NULL);
    if (f->fd < 0) continue;
    atomic_fetch_add(&f->connections, 1);
    serve(f);
    close(f->fd);
  }
  return NULL;
}

static const char *frame_id(json_t *body) {
  return json_string_value(json_object_get(body, "id"));
}

#define TS "\"ts\":\"2026-01-01T00:00:00.000Z\""

/* What qimd answers when nothing special is scripted. */
static int answer_default(fake *f, json_t *m) {
  json_t *b;
  if ((b = json_object_get(m, "hi"))) {
    fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"code\":201,\"text\":\"created\"," TS "}}",
              frame_id(b));
  } else if ((b = json_object_get(m, "login")) || (b = json_object_get(m, "acc"))) {
    fake_send(f,
              "{\"ctrl\":{\"id\":\"%s\",\"code\":200,\"text\":\"ok\",\"params\":{\"user\":\"%s\","
              "\"token\":\"tok\",\"cursor\":\"c0\"}," TS "}}",
              frame_id(b), USR);
  } else if ((b = json_object_get(m, "sub"))) {
    const char *topic = json_string_value(json_object_get(b, "topic"));
    fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"topic\":\"%s\",\"code\":200,\"text\":\"ok\"," TS "}}",
              frame_id(b), topic);
  } else if ((b = json_object_get(m, "sync"))) {
    fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[],\"cursor\":\"c-end\"}}", frame_id(b));
  } else if ((b = json_object_get(m, "get"))) {
    fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"code\":204,\"text\":\"no content\"," TS "}}",
              frame_id(b));
  } else if ((b = json_object_get(m, "pub"))) {
    fake_send(f,
              "{\"ctrl\":{\"id\":\"%s\",\"topic\":\"%s\",\"code\":202,\"text\":\"accepted\","
              "\"params\":{\"seq\":%d}," TS "}}",
              frame_id(b), json_string_value(json_object_get(b, "topic")), ++f->seq);
  }
  return 0;
}

/* Records the {sync}'s cursor and the {pub}'s cmid, the login's scheme; returns the body. */
static json_t *note(fake *f, json_t *m, const char *kind) {
  json_t *b = json_object_get(m, kind);
  if (!b) return NULL;
  if (!strcmp(kind, "sync")) {
    const char *cur = json_string_value(json_object_get(b, "cursor"));
    if (f->syncs < 8) snprintf(f->sync_cursor[f->syncs], 64, "%s", cur ? cur : "");
    f->syncs++;
  } else if (!strcmp(kind, "pub") && f->pubs < 8) {
    snprintf(f->pub_cmid[f->pubs++], 23, "%s", json_string_value(json_object_get(b, "cmid")));
  } else if (!strcmp(kind, "login")) {
    int i = atomic_load(&f->connections) - 1;
    if (i < 8)
      snprintf(f->login_scheme[i], 16, "%s", json_string_value(json_object_get(b, "scheme")));
  }
  return b;
}

static fake *fake_start(fake_handler h, bool silent) {
  fake *f = calloc(1, sizeof *f);
  f->handler = h;
  f->silent = silent;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(f->lfd, 8), 0);
  assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
  f->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
  return f;
}

static void fake_stop(fake *f) {
  atomic_store(&f->stop, true);
  pthread_join(f->thread, NULL);
  close(f->lfd);
  free(f);
}

/* ---- the client side ----------------------------------------------------------------------- */

static qim_client *client_for(fake *f, uint32_t deadline_ms) {
  static char url[64];
  snprintf(url, sizeof url, "ws://127.0.0.1:%d", f->port);
  qim_client_config cfg = {.url = url,
                           .api_key = "key",
                           .store = {.mode = QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST},
                           .deadline_ms = deadline_ms,
                           .reconnect_min_ms = 20,
                           .reconnect_max_ms = 50};
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_credentials cr = {.scheme = QIM_CLIENT_AUTH_BASIC, .login = "alice", .password = "pw"};
  assert_int_equal(qim_client_connect(c, &cr), 0);
  return c;
}

static qim_client_event next(qim_client *c) {
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 5000), 0);
  return ev;
}

static void expect_state(qim_client *c, qim_connection_state st) {
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_CONNECTION_CHANGED);
  assert_int_equal(ev.connection_state, st);
}

static void expect_failed(qim_client *c, int code) {
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_FAILED);
  assert_string_equal(qim_err_name(ev.failed), qim_err_name(code));
}

/* The next MessagesAdded: its conversation seqs, in order, into seqs[]; returns the count. */
static size_t expect_messages(qim_client *c, uint64_t *seqs, size_t cap) {
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_MESSAGES_ADDED);
  assert_true(ev.message_count <= cap);
  for (size_t i = 0; i < ev.message_count; i++)
    seqs[i] = ev.messages[i].coordinates.conversation_seq;
  size_t n = ev.message_count;
  qim_client_event_release(&ev);
  return n;
}

static void expect_online(qim_client *c) {
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
}

/* A scripted server answering with `h` and a client of it that has reached Online. */
static qim_client *online_with(fake **f, fake_handler h) {
  *f = fake_start(h, false);
  qim_client *c = client_for(*f, 5000);
  expect_online(c);
  return c;
}

/* Queues `json` for `topic` and returns its cmid. */
static qim_client_message_id send_json(qim_client *c, const char *topic, const char *json) {
  qim_client_message_id cmid;
  assert_int_equal(qim_client_send(c, topic, json, &cmid), 0);
  return cmid;
}

static void entry(char *out, size_t cap, unsigned event_id, unsigned seq) {
  snprintf(out, cap,
           "{\"event_id\":\"%u\",\"type\":\"message\",\"topic\":\"%s\",\"seq\":%u,"
           "\"from\":\"%s\"," TS ",\"content\":{\"txt\":\"m%u\"}}",
           event_id, GRP, seq, USR2, seq);
}

static int setup(void **state) {
  (void)state;
  qim_user_id_format((qim_user_id){{0, 7}}, USR, sizeof USR);
  qim_user_id_format((qim_user_id){{0, 8}}, USR2, sizeof USR2);
  qim_group_id_format((qim_group_id){{0, 9}}, GRP, sizeof GRP);
  return 0;
}

/* ---- sync ---------------------------------------------------------------------------------- */

/* Page 1 (two entries, more), page 2 (one repeat, one new), then a push and page 3. */
static int pages(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  if (!b) return answer_default(f, m);
  char e1[256], e2[256], e3[256], e4[256];
  entry(e1, sizeof e1, 256, 1);
  entry(e2, sizeof e2, 512, 2);
  entry(e3, sizeof e3, 768, 3);
  entry(e4, sizeof e4, 1024, 4);
  if (f->syncs == 1) {
    fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[%s,%s],\"more\":true,\"cursor\":\"c1\"}}",
              frame_id(b), e1, e2);
  } else if (f->syncs == 2) {
    fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[%s,%s],\"cursor\":\"c2\"}}", frame_id(b),
              e2, e3);
    fake_send(f, "{\"pres\":{\"topic\":\"me\",\"src\":\"%s\",\"what\":\"msg\",\"seq\":4}}", GRP);
  } else {
    fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[%s],\"cursor\":\"c3\"}}", frame_id(b), e4);
  }
  return 0;
}

static void test_sync_pages_are_stored_then_exported_once_and_a_push_syncs_again(void **state) {
  (void)state;
  fake *f = fake_start(pages, false);
  qim_client *c = client_for(f, 5000);
  uint64_t seqs[4];
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  assert_int_equal(expect_messages(c, seqs, 4), 2);
  assert_true(seqs[0] == 1 && seqs[1] == 2);
  /* seq 2 came again on page 2: stored once, exported once. */
  assert_int_equal(expect_messages(c, seqs, 4), 1);
  assert_int_equal(seqs[0], 3);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_int_equal(expect_messages(c, seqs, 4), 1); /* the push's sync, still Online */
  assert_int_equal(seqs[0], 4);
  /* A new device starts at the login's cursor; each page continues from the last one. */
  assert_string_equal(f->sync_cursor[0], "c0");
  assert_string_equal(f->sync_cursor[1], "c1");
  assert_string_equal(f->sync_cursor[2], "c2");
  qim_client_close(c);
  fake_stop(f);
}

/* The connection drops after a page that promised more. */
static int drop_between_pages(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  if (!b) return answer_default(f, m);
  if (f->syncs > 1 && atomic_load(&f->connections) == 1) return 1;
  char e1[256];
  entry(e1, sizeof e1, 256 * (unsigned)f->syncs, (unsigned)f->syncs);
  fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[%s],%s\"cursor\":\"c%d\"}}", frame_id(b), e1,
            f->syncs == 1 ? "\"more\":true," : "", f->syncs);
  return 0;
}

static void test_connection_lost_between_pages_is_sync_incomplete_then_resumes(void **state) {
  (void)state;
  fake *f = fake_start(drop_between_pages, false);
  qim_client *c = client_for(f, 5000);
  uint64_t seqs[4];
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  assert_int_equal(expect_messages(c, seqs, 4), 1);
  expect_failed(c, QIM_E_CLIENT_SYNC_INCOMPLETE);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  /* The reconnect continues from the cursor of the page that was stored. */
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  assert_int_equal(expect_messages(c, seqs, 4), 1);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_string_equal(f->sync_cursor[2], "c1");
  qim_client_close(c);
  fake_stop(f);
}

/* 410 on the first sync; sessions; then the fresh cursor must be used. */
static int expired(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  json_t *g = json_object_get(m, "get");
  if (g) {
    fake_send(f,
              "{\"meta\":{\"id\":\"%s\",\"topic\":\"me\"," TS
              ",\"sub\":[{\"topic\":\"%s\",\"seq\":4,"
              "\"read\":1}]}}",
              frame_id(g), GRP);
    return 0;
  }
  if (!b) return answer_default(f, m);
  if (f->syncs == 1) {
    fake_send(f,
              "{\"ctrl\":{\"id\":\"%s\",\"code\":410,\"text\":\"cursor expired\",\"params\":"
              "{\"trim_watermark\":\"99\",\"cursor\":\"fresh\"}," TS "}}",
              frame_id(b));
    return 0;
  }
  return answer_default(f, m);
}

static void test_cursor_expired_rebuilds_from_the_fresh_cursor(void **state) {
  (void)state;
  fake *f = fake_start(expired, false);
  qim_client *c = client_for(f, 5000);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  expect_failed(c, QIM_E_CLIENT_CURSOR_EXPIRED);
  expect_state(c, QIM_CONNECTION_STATE_REBUILDING);
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_REBUILD_REQUIRED);
  assert_int_equal(ev.rebuild.expired_cursor.signed_token.n, 2);
  assert_memory_equal(ev.rebuild.expired_cursor.signed_token.p, "c0", 2);
  qim_client_event_release(&ev);
  ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_LOCAL_STORE_RESET);
  ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_SESSIONS_UPDATED);
  assert_int_equal(ev.sessions->session_count, 1);
  assert_int_equal(ev.sessions->sessions[0].latest_conversation_seq, 4);
  assert_int_equal(ev.sessions->sessions[0].unread_count, 3);
  qim_client_event_release(&ev);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_int_equal(f->syncs, 2);
  assert_string_equal(f->sync_cursor[1], "fresh");
  qim_client_close(c);
  fake_stop(f);
}

/* 400 "cursor invalid" to a cursor, then a page to a sync without one; or 503 first. */
static int invalid(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  if (b && f->syncs == 1) {
    fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"code\":400,\"text\":\"cursor invalid\"," TS "}}",
              frame_id(b));
    return 0;
  }
  return answer_default(f, m);
}

static int busy(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  if (b && f->syncs == 1) {
    fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"code\":503,\"text\":\"service unavailable\"," TS "}}",
              frame_id(b));
    return 0;
  }
  return answer_default(f, m);
}

static void test_cursor_invalid_drops_the_cursor_and_syncs_from_the_floor(void **state) {
  (void)state;
  fake *f = fake_start(invalid, false);
  qim_client *c = client_for(f, 5000);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  expect_failed(c, QIM_E_CLIENT_CURSOR_INVALID);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_string_equal(f->sync_cursor[0], "c0");
  assert_string_equal(f->sync_cursor[1], "");
  qim_client_close(c);
  fake_stop(f);
}

static void test_sync_answered_503_is_unavailable_and_retried(void **state) {
  (void)state;
  fake *f = fake_start(busy, false);
  qim_client *c = client_for(f, 5000);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  expect_failed(c, QIM_E_CLIENT_UNAVAILABLE);
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_int_equal(f->syncs, 2);
  assert_int_equal(atomic_load(&f->connections), 1); /* retried on the same connection */
  qim_client_close(c);
  fake_stop(f);
}

/* ---- pending sends, members --------------------------------------------------------------- */

/* The first {pub} gets no ack: the connection drops under it. */
static int lose_first_ack(fake *f, json_t *m) {
  note(f, m, "login");
  if (note(f, m, "pub") && f->pubs == 1) return 1;
  return answer_default(f, m);
}

static void test_pending_send_is_resent_with_the_same_cmid_after_reconnect(void **state) {
  (void)state;
  fake *f = NULL;
  qim_client *c = online_with(&f, lose_first_ack);
  qim_client_message_id cmid = send_json(c, GRP, "{\"txt\":\"hello\"}");
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  expect_online(c);
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_PENDING_RESOLVED);
  assert_memory_equal(ev.pending_resolved.client_message_id.b, cmid.b, 16);
  assert_int_equal(ev.pending_resolved.coordinates.conversation_seq, 1);
  qim_group_id g;
  assert_int_equal(qim_group_id_parse(GRP, strlen(GRP), &g), 0);
  assert_true(qim_u128_eq(ev.pending_resolved.coordinates.conversation_id.v, g.v));
  assert_int_equal(f->pubs, 2);
  assert_string_equal(f->pub_cmid[0], f->pub_cmid[1]);
  /* The reconnect logs in with the first login's token, not the password again. */
  assert_string_equal(f->login_scheme[0], "basic");
  assert_string_equal(f->login_scheme[1], "token");
  /* Resolved means gone from the store: nothing is sent again after another reconnect. */
  assert_int_equal(qim_client_poll_event(c, &ev, 200), QIM_AGAIN);
  assert_int_equal(f->pubs, 2);
  qim_client_close(c);
  fake_stop(f);
}

static int members(fake *f, json_t *m) {
  json_t *g = json_object_get(m, "get");
  if (g && strcmp(json_string_value(json_object_get(g, "topic")), GRP) == 0) {
    fake_send(f,
              "{\"meta\":{\"id\":\"%s\",\"topic\":\"%s\"," TS
              ",\"sub\":[{\"user\":\"%s\",\"acs\":"
              "{\"mode\":\"JRWPASDO\"}},{\"user\":\"%s\",\"acs\":{\"mode\":\"JRWP\"}}]}}",
              frame_id(g), GRP, USR, USR2);
    return 0;
  }
  return answer_default(f, m);
}

static void test_members_of_a_group_arrive_as_a_member_page(void **state) {
  (void)state;
  fake *f = fake_start(members, false);
  qim_client *c = client_for(f, 5000);
  assert_int_equal(qim_client_get_members(c, GRP), 0); /* deferred until Online */
  expect_online(c);
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_MEMBERS_UPDATED);
  assert_int_equal(ev.members->member_count, 2);
  assert_int_equal(ev.members->members[0].role, QIM_GROUP_ROLE_OWNER);
  assert_int_equal(ev.members->members[1].role, QIM_GROUP_ROLE_MEMBER);
  assert_int_equal(ev.members->members[1].user_id.v.lo, 8);
  qim_client_event_release(&ev);
  qim_client_close(c);
  fake_stop(f);
}

/* ---- connections that go wrong -------------------------------------------------------------- */

static int refuse_login(fake *f, json_t *m) {
  json_t *b = json_object_get(m, "login");
  if (!b) return answer_default(f, m);
  fake_send(f, "{\"ctrl\":{\"id\":\"%s\",\"code\":401,\"text\":\"authentication failed\"," TS "}}",
            frame_id(b));
  return 0;
}

static void test_wrong_password_is_permission_denied_without_reconnect(void **state) {
  (void)state;
  fake *f = fake_start(refuse_login, false);
  qim_client *c = client_for(f, 5000);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_failed(c, QIM_E_CLIENT_PERMISSION_DENIED);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 300), QIM_AGAIN);
  assert_int_equal(atomic_load(&f->connections), 1);
  qim_client_close(c);
  fake_stop(f);
}

/* Connection 1 goes Online and drops; connection 2 refuses the token. */
static int revoke_token(fake *f, json_t *m) {
  json_t *b = note(f, m, "login");
  if (b && atomic_load(&f->connections) == 2) {
    fake_send(f,
              "{\"ctrl\":{\"id\":\"%s\",\"code\":401,\"text\":\"authentication failed\"," TS "}}",
              frame_id(b));
    return 0;
  }
  if (note(f, m, "sync")) {
    answer_default(f, m);
    return 1;
  }
  return answer_default(f, m);
}

static void test_token_refused_on_reconnect_is_kicked(void **state) {
  (void)state;
  fake *f = NULL;
  qim_client *c = online_with(&f, revoke_token);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_failed(c, QIM_E_CLIENT_PERMISSION_DENIED);
  expect_state(c, QIM_CONNECTION_STATE_KICKED);
  assert_string_equal(f->login_scheme[1], "token");
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 300), QIM_AGAIN);
  assert_int_equal(atomic_load(&f->connections), 2);
  qim_client_close(c);
  fake_stop(f);
}

static int evict(fake *f, json_t *m) {
  answer_default(f, m);
  if (json_object_get(m, "sync"))
    fake_send(f,
              "{\"ctrl\":{\"topic\":\"me\",\"code\":205,\"text\":\"evicted\",\"params\":{\"unsub\":"
              "true}," TS "}}");
  return 0;
}

static void test_evicted_is_kicked_and_stays_down_until_connect(void **state) {
  (void)state;
  fake *f = NULL;
  qim_client *c = online_with(&f, evict);
  expect_state(c, QIM_CONNECTION_STATE_KICKED);
  qim_client_event ev;
  assert_int_equal(qim_client_poll_event(c, &ev, 300), QIM_AGAIN);
  assert_int_equal(atomic_load(&f->connections), 1);
  /* qim_client_connect is the way back. */
  qim_client_credentials cr = {.scheme = QIM_CLIENT_AUTH_TOKEN, .token = "tok"};
  assert_int_equal(qim_client_connect(c, &cr), 0);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  expect_online(c);
  qim_client_close(c);
  fake_stop(f);
}

static void test_server_that_never_answers_is_deadline_exceeded(void **state) {
  (void)state;
  fake *f = fake_start(answer_default, true);
  qim_client *c = client_for(f, 200);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  int64_t t0 = qim_test_now_ms();
  expect_failed(c, QIM_E_CLIENT_DEADLINE_EXCEEDED);
  assert_true(qim_test_now_ms() - t0 >= 150);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING); /* and it tries again */
  qim_client_close(c);
  fake_stop(f);
}

static int garbage(fake *f, json_t *m) {
  if (!json_object_get(m, "hi")) return answer_default(f, m);
  fake_send(f, "this is not JSON");
  return 0;
}

static void test_frame_that_is_not_json_is_protocol_failure(void **state) {
  (void)state;
  fake *f = fake_start(garbage, false);
  qim_client *c = client_for(f, 5000);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_failed(c, QIM_E_CLIENT_PROTOCOL_FAILURE);
  expect_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
  qim_client_close(c);
  fake_stop(f);
}

/* Joining the group is refused: a send to it can never be delivered. */
static int refuse_group(fake *f, json_t *m) {
  json_t *b = json_object_get(m, "sub");
  note(f, m, "pub");
  if (b && strcmp(json_string_value(json_object_get(b, "topic")), GRP) == 0) {
    fake_send(
        f,
        "{\"ctrl\":{\"id\":\"%s\",\"topic\":\"%s\",\"code\":403,\"text\":\"permission denied\"," TS
        "}}",
        frame_id(b), GRP);
    return 0;
  }
  return answer_default(f, m);
}

static void test_send_to_a_group_that_refuses_the_join_is_permission_denied_and_dropped(
    void **state) {
  (void)state;
  fake *f = NULL;
  qim_client *c = online_with(&f, refuse_group);
  send_json(c, GRP, "{\"txt\":\"no\"}");
  expect_failed(c, QIM_E_CLIENT_PERMISSION_DENIED);
  assert_int_equal(qim_client_get_members(c, GRP), 0); /* refused again, then forgotten */
  expect_failed(c, QIM_E_CLIENT_PERMISSION_DENIED);
  /* The row is gone: a later flush (another send elsewhere) does not try it again. */
  qim_client_message_id other = send_json(c, USR2, "{\"txt\":\"yes\"}");
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_PENDING_RESOLVED);
  assert_memory_equal(ev.pending_resolved.client_message_id.b, other.b, 16);
  assert_int_equal(qim_client_poll_event(c, &ev, 300), QIM_AGAIN); /* no third join */
  assert_int_equal(f->pubs, 1);
  qim_client_close(c);
  fake_stop(f);
}

/* Forty pages of one entry each, every one saying more, and one answer per {sync}. */
static int forty_pages(fake *f, json_t *m) {
  json_t *b = note(f, m, "sync");
  if (!b) return answer_default(f, m);
  char e[256];
  entry(e, sizeof e, 256u * (unsigned)f->syncs, (unsigned)f->syncs);
  fake_send(f, "{\"sync\":{\"id\":\"%s\",\"entries\":[%s],%s\"cursor\":\"c%d\"}}", frame_id(b), e,
            f->syncs < 40 ? "\"more\":true," : "", f->syncs);
  return 0;
}

static void test_full_queue_stops_reading_and_loses_no_page(void **state) {
  (void)state;
  fake *f = fake_start(forty_pages, false);
  static char url[64];
  snprintf(url, sizeof url, "ws://127.0.0.1:%d", f->port);
  qim_client_config cfg = {.url = url,
                           .api_key = "key",
                           .event_queue_cap = 2,
                           .store = {.mode = QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST}};
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  qim_client_credentials cr = {.scheme = QIM_CLIENT_AUTH_BASIC, .login = "alice", .password = "pw"};
  assert_int_equal(qim_client_connect(c, &cr), 0);
  /* The host does not poll: the runtime may not read past the page it cannot export. */
  qim_test_sleep_ms(300);
  assert_true(f->syncs <= 3);
  expect_state(c, QIM_CONNECTION_STATE_CONNECTING);
  expect_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  for (uint64_t want = 1; want <= 40; want++) {
    uint64_t seq = 0;
    assert_int_equal(expect_messages(c, &seq, 1), 1);
    assert_int_equal(seq, want);
  }
  expect_state(c, QIM_CONNECTION_STATE_ONLINE);
  assert_int_equal(f->syncs, 40);
  qim_client_close(c);
  fake_stop(f);
}

static void test_pending_send_survives_a_host_crash_and_goes_out_after_reopen(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("client-crash");
  qim_client_config cfg = {.url = "ws://127.0.0.1:1",
                           .api_key = "key",
                           .reconnect_min_ms = 20,
                           .store = {.scope = dir, .mode = QIM_LOCAL_STORE_MODE_PERSISTENT}};
  qim_client_credentials cr = {.scheme = QIM_CLIENT_AUTH_BASIC, .login = "alice", .password = "pw"};
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the host: sends while nothing answers, then dies without closing */
    qim_client *c = NULL;
    qim_client_message_id cmid;
    if (qim_client_open(&cfg, &c) || qim_client_connect(c, &cr) ||
        qim_client_send(c, GRP, "{\"txt\":\"kept\"}", &cmid))
      _exit(1);
    _exit(write(fds[1], cmid.b, 16) == 16 ? 0 : 2);
  }
  qim_client_message_id sent;
  assert_int_equal(read(fds[0], sent.b, 16), 16);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_int_equal(WEXITSTATUS(status), 0);
  close(fds[0]);
  close(fds[1]);
  fake *f = fake_start(answer_default, false);
  char url[64];
  snprintf(url, sizeof url, "ws://127.0.0.1:%d", f->port);
  cfg.url = url;
  qim_client *c = NULL;
  assert_int_equal(qim_client_open(&cfg, &c), 0);
  assert_int_equal(qim_client_connect(c, &cr), 0);
  expect_online(c);
  qim_client_event ev = next(c);
  assert_int_equal(ev.kind, QIM_CLIENT_EVENT_PENDING_RESOLVED);
  assert_memory_equal(ev.pending_resolved.client_message_id.b, sent.b, 16);
  qim_client_close(c);
  fake_stop(f);
  qim_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sync_pages_are_stored_then_exported_once_and_a_push_syncs_again),
      cmocka_unit_test(test_connection_lost_between_pages_is_sync_incomplete_then_resumes),
      cmocka_unit_test(test_cursor_expired_rebuilds_from_the_fresh_cursor),
      cmocka_unit_test(test_cursor_invalid_drops_the_cursor_and_syncs_from_the_floor),
      cmocka_unit_test(test_sync_answered_503_is_unavailable_and_retried),
      cmocka_unit_test(test_pending_send_is_resent_with_the_same_cmid_after_reconnect),
      cmocka_unit_test(test_members_of_a_group_arrive_as_a_member_page),
      cmocka_unit_test(test_wrong_password_is_permission_denied_without_reconnect),
      cmocka_unit_test(test_token_refused_on_reconnect_is_kicked),
      cmocka_unit_test(test_evicted_is_kicked_and_stays_down_until_connect),
      cmocka_unit_test(test_server_that_never_answers_is_deadline_exceeded),
      cmocka_unit_test(test_frame_that_is_not_json_is_protocol_failure),
      cmocka_unit_test(test_send_to_a_group_that_refuses_the_join_is_permission_denied_and_dropped),
      cmocka_unit_test(test_full_queue_stops_reading_and_loses_no_page),
      cmocka_unit_test(test_pending_send_survives_a_host_crash_and_goes_out_after_reopen),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
