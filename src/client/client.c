/*
 * client.c — libqimclient's host side (qim/client.h): checking the configuration,
 * opening the local store, starting and joining the runtime thread, and the bounded
 * command queue through which host threads reach the loop.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"

/* Splits "ws://HOST:PORT[/]" into c->host / c->port; what v1 cannot do is a capability. */
static int parse_url(qim_client *c, const char *url) {
  if (strncmp(url, "wss://", 6) == 0) return qim_err_raise(QIM_E_HOST_UNSUPPORTED_CAPABILITY);
  if (strncmp(url, "ws://", 5) != 0) return -EINVAL;
  const char *h = url + 5, *hend, *p;
  if (*h == '[') {
    hend = strchr(h, ']');
    if (!hend || hend[1] != ':') return -EINVAL;
    p = hend + 2;
    h++;
    c->ipv6 = true;
  } else {
    hend = strchr(h, ':');
    if (!hend) return -EINVAL;
    p = hend + 1;
  }
  size_t hl = (size_t)(hend - h);
  if (hl == 0 || hl >= sizeof c->host) return -EINVAL;
  memcpy(c->host, h, hl);
  c->host[hl] = '\0';
  char *end = NULL;
  long port = strtol(p, &end, 10);
  if (end == p || port <= 0 || port > 65535 || (*end && strcmp(end, "/") != 0)) return -EINVAL;
  c->port = (int)port;
  if (strcmp(c->host, "localhost") == 0) snprintf(c->host, sizeof c->host, "127.0.0.1");
  /* Name resolution would block the loop or need a resolver thread: v1 takes addresses. */
  uint8_t a[16];
  if (inet_pton(c->ipv6 ? AF_INET6 : AF_INET, c->host, a) != 1)
    return qim_err_raise(QIM_E_HOST_UNSUPPORTED_CAPABILITY);
  snprintf(c->hostport, sizeof c->hostport, c->ipv6 ? "[%s]:%d" : "%s:%d", c->host, c->port);
  return 0;
}

/* The scope a persistent store lives in must be a writable directory that exists. */
static int check_scope(const qim_local_store_location *loc, bool required) {
  if (loc->mode == QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST)
    return required ? qim_err_raise(QIM_E_HOST_PERSISTENT_STORE_REQUIRED) : 0;
  if (loc->mode != QIM_LOCAL_STORE_MODE_PERSISTENT || !loc->scope || !loc->scope[0]) return -EINVAL;
  struct stat st;
  if (stat(loc->scope, &st) != 0 || !S_ISDIR(st.st_mode) || access(loc->scope, W_OK | X_OK) != 0)
    return qim_err_raise(QIM_E_HOST_STABLE_PATH_UNAVAILABLE);
  return 0;
}

static void defaults(qim_client_config *cfg) {
  if (!cfg->deadline_ms) cfg->deadline_ms = 10000;
  if (!cfg->reconnect_min_ms) cfg->reconnect_min_ms = 250;
  if (cfg->reconnect_max_ms < cfg->reconnect_min_ms)
    cfg->reconnect_max_ms = cfg->reconnect_min_ms > 8000 ? cfg->reconnect_min_ms : 8000;
  if (!cfg->event_queue_cap) cfg->event_queue_cap = 256;
  if (!cfg->export_deadline_ms) cfg->export_deadline_ms = 30000;
}

static void wake_cb(uv_async_t *a);

static void runtime_main(void *arg) {
  qim_client *c = arg;
  qim_log_name_thread("client");
  uv_run(&c->loop, UV_RUN_DEFAULT);
}

/* Loop, handles and thread; on failure everything made here is undone. */
static int start_runtime(qim_client *c) {
  int rc = uv_loop_init(&c->loop);
  if (rc) goto fail;
  rc = uv_async_init(&c->loop, &c->wake, wake_cb);
  if (rc) goto fail_loop;
  c->wake.data = c;
  uv_timer_t *timers[] = {&c->reconnect_timer, &c->tick_timer, &c->export_timer, &c->retry_timer};
  for (size_t i = 0; i < sizeof timers / sizeof *timers; i++) {
    uv_timer_init(&c->loop, timers[i]);
    timers[i]->data = c;
  }
  rc = uv_thread_create(&c->thread, runtime_main, c);
  if (rc) goto fail_handles;
  return 0;
fail_handles:
  uv_close((uv_handle_t *)&c->wake, NULL);
  for (size_t i = 0; i < sizeof timers / sizeof *timers; i++)
    uv_close((uv_handle_t *)timers[i], NULL);
  uv_run(&c->loop, UV_RUN_DEFAULT);
fail_loop:
  uv_loop_close(&c->loop);
fail:
  qim_log(QIM_LOG_WARN, NULL, "client.start_failed", "error=%s", uv_err_name(rc));
  return qim_err_raise(QIM_E_HOST_RUNTIME_START_FAILED);
}

int qim_client_open(const qim_client_config *cfg, qim_client **out) {
  if (!cfg || !out || !cfg->url || !cfg->api_key) return -EINVAL;
  qim_client *c = qim_calloc(1, sizeof *c);
  int rc = parse_url(c, cfg->url);
  if (rc) goto fail;
  rc = check_scope(&cfg->store, cfg->persistent_required);
  if (rc) goto fail;
  c->cfg = *cfg;
  c->cfg.url = c->cfg.api_key = NULL;
  c->cfg.store.scope = NULL;
  defaults(&c->cfg);
  c->tenant = qim_u128_is_zero(cfg->tenant.v) ? (qim_tenant_id){{0, 1}} : cfg->tenant;
  int n = snprintf(c->path, sizeof c->path, "/v0/channels?apikey=%s", cfg->api_key);
  if (n < 0 || (size_t)n >= sizeof c->path) {
    rc = -EINVAL;
    goto fail;
  }
  rc = qim__client_store_open(&cfg->store, &c->store);
  if (rc) goto fail;
  rc = qim__client_store_device(c->store, &c->device);
  if (rc) goto fail_store;
  uint8_t be[16];
  qim_u128_to_be(c->device.v, be);
  qim_hex_encode(be, sizeof be, c->device_text, sizeof c->device_text);
  pthread_mutex_init(&c->mu, NULL);
  qim__client_equeue_init(&c->events, c->cfg.event_queue_cap, &c->wake);
  c->backoff_ms = c->cfg.reconnect_min_ms;
  rc = start_runtime(c);
  if (rc) goto fail_queue;
  *out = c;
  return 0;
fail_queue:
  qim__client_equeue_destroy(&c->events);
  pthread_mutex_destroy(&c->mu);
fail_store:
  qim__client_store_close(c->store);
fail:
  qim_free(c);
  return rc;
}

static void free_credentials(qim_client_credentials *cr) {
  qim_free((char *)cr->login);
  qim_free((char *)cr->password);
  qim_free((char *)cr->token);
  memset(cr, 0, sizeof *cr);
}

/* Queues a command for the loop; -EAGAIN when the bounded queue is full. */
static int post(qim_client *c, const qim__client_cmd *cmd) {
  pthread_mutex_lock(&c->mu);
  int rc = c->cmd_count == QIM__CLIENT_CMD_CAP ? -EAGAIN : 0;
  if (rc == 0) {
    c->cmds[(c->cmd_head + c->cmd_count++) % QIM__CLIENT_CMD_CAP] = *cmd;
    if (cmd->kind == QIM__CMD_CONNECT) c->has_credentials = true;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) uv_async_send(&c->wake);
  return rc;
}

bool qim__client_take_cmd(qim_client *c, qim__client_cmd *out) {
  pthread_mutex_lock(&c->mu);
  bool any = c->cmd_count > 0;
  if (any) {
    *out = c->cmds[c->cmd_head];
    c->cmd_head = (c->cmd_head + 1) % QIM__CLIENT_CMD_CAP;
    c->cmd_count--;
  }
  pthread_mutex_unlock(&c->mu);
  return any;
}

static void close_cb_noop(uv_handle_t *h) {
  (void)h;
}

/* Everything a host thread asked for, then room the host made in the event queue. */
static void wake_cb(uv_async_t *a) {
  qim_client *c = a->data;
  qim__client_cmd cmd;
  while (!c->stopping && qim__client_take_cmd(c, &cmd)) {
    if (cmd.kind == QIM__CMD_STOP) {
      c->stopping = true;
      qim__client_conn_drop(c, false);
      uv_close((uv_handle_t *)&c->wake, close_cb_noop);
      uv_close((uv_handle_t *)&c->reconnect_timer, close_cb_noop);
      uv_close((uv_handle_t *)&c->tick_timer, close_cb_noop);
      uv_close((uv_handle_t *)&c->export_timer, close_cb_noop);
      uv_close((uv_handle_t *)&c->retry_timer, close_cb_noop);
      return;
    }
    qim__client_session_command(c, &cmd);
  }
  if (!c->stopping) qim__client_events_drained(c);
}

void qim_client_close(qim_client *c) {
  if (!c) return;
  qim__client_cmd stop = {.kind = QIM__CMD_STOP};
  /* STOP must get through: wait for room rather than leak a running thread. */
  while (post(c, &stop) == -EAGAIN) usleep(1000);
  uv_thread_join(&c->thread);
  uv_loop_close(&c->loop);
  qim__client_cmd cmd;
  while (qim__client_take_cmd(c, &cmd)) free_credentials(&cmd.cr);
  free_credentials(&c->cr);
  qim__client_session_free(c);
  qim__client_events_free_held(c);
  qim__client_equeue_destroy(&c->events);
  qim__client_store_close(c->store);
  pthread_mutex_destroy(&c->mu);
  qim_free(c->token);
  qim_free(c->waits);
  qim_free(c);
}

int qim_client_connect(qim_client *c, const qim_client_credentials *cr) {
  if (!c || !cr) return -EINVAL;
  bool token = cr->scheme == QIM_CLIENT_AUTH_TOKEN;
  if (token ? !cr->token || !cr->token[0]
            : (cr->scheme != QIM_CLIENT_AUTH_BASIC && cr->scheme != QIM_CLIENT_AUTH_NEW_ACCOUNT) ||
                  !cr->login || !cr->login[0] || !cr->password || strchr(cr->login, ':'))
    return -EINVAL;
  qim__client_cmd cmd = {.kind = QIM__CMD_CONNECT};
  cmd.cr.scheme = cr->scheme;
  cmd.cr.login = qim_strdup(cr->login);
  cmd.cr.password = qim_strdup(cr->password);
  cmd.cr.token = qim_strdup(cr->token);
  int rc = post(c, &cmd);
  if (rc) free_credentials(&cmd.cr);
  return rc;
}

/* A topic command needs credentials first (ConnectRequired) and a plausible topic. */
static int topic_cmd(qim_client *c, qim__client_cmd_kind kind, const char *topic) {
  if (!c) return -EINVAL;
  qim__client_cmd cmd = {.kind = kind};
  if (topic && (!topic[0] || strlen(topic) >= sizeof cmd.topic)) return -EINVAL;
  pthread_mutex_lock(&c->mu);
  bool connected = c->has_credentials;
  pthread_mutex_unlock(&c->mu);
  if (!connected) return qim_err_raise(QIM_E_CLIENT_CONNECT_REQUIRED);
  if (topic) snprintf(cmd.topic, sizeof cmd.topic, "%s", topic);
  return post(c, &cmd);
}

int qim_client_send(qim_client *c, const char *topic, const char *content_json,
                    qim_client_message_id *out_cmid) {
  if (!c || !topic || !topic[0] || strlen(topic) > 64 || !content_json || !out_cmid) return -EINVAL;
  json_t *content = json_loads(content_json, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
  if (!content) return -EINVAL;
  char *canon = json_dumps(content, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(content);
  pthread_mutex_lock(&c->mu);
  bool connected = c->has_credentials;
  pthread_mutex_unlock(&c->mu);
  int rc = connected ? 0 : qim_err_raise(QIM_E_CLIENT_CONNECT_REQUIRED);
  if (rc == 0) {
    uint8_t b[16];
    do {
      qim_u128 r = qim_u128_random();
      qim_u128_to_be(r, b);
    } while (qim_client_message_id_make(b, out_cmid) != 0);
    /* Durable before the call returns: a host crash after this loses nothing. */
    rc = qim__client_store_pending_add(c->store, out_cmid, topic, canon);
  }
  free(canon);
  if (rc) return rc;
  return topic_cmd(c, QIM__CMD_FLUSH, NULL);
}

int qim_client_join(qim_client *c, const char *topic) {
  if (!topic) return -EINVAL;
  return topic_cmd(c, QIM__CMD_JOIN, topic);
}

int qim_client_get_sessions(qim_client *c) {
  return topic_cmd(c, QIM__CMD_SESSIONS, NULL);
}

int qim_client_get_members(qim_client *c, const char *topic) {
  if (!topic) return -EINVAL;
  return topic_cmd(c, QIM__CMD_MEMBERS, topic);
}
