/*
 * gwclient.h — an in-process qimd (store, pipeline, gateway: server/node.c) on an
 * ephemeral loopback port, and a small Tinode client over wsclient.h that sends JSON
 * requests and waits for the frames that answer them. For the gateway's session tests.
 * Functions never assert; the tests check what they return.
 */
#ifndef QIM_TEST_GWCLIENT_H
#define QIM_TEST_GWCLIENT_H

#include <jansson.h>
#include <stdarg.h>

#include "qim/ids.h"
#include "server/node.c" /* the server's wiring: libqim only */
#include "testsupport.h"
#include "wsclient.h"

#define GWC_APIKEY "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K"
#define GWC_TOKEN "gw-test-service-token-0123456789"

typedef struct gwsrv {
  char *dir;
  qim_config cfg;
  qim_node node;
  uint16_t port;
} gwsrv;

/* Starts a node in a fresh directory: 2 loops, 2 shards x 2 lanes, cheap password hashes,
 * plus up to 8 more flags (`extra`, NULL-terminated; may be NULL). */
static inline int gwsrv_start_with(gwsrv *s, const char *const *extra) {
  memset(s, 0, sizeof *s);
  s->dir = qim_test_tmpdir("gateway");
  char data[1024];
  snprintf(data, sizeof data, "%s", s->dir);
  char *argv[24] = {"--data", data, "--io-threads", "2", "--shard-count", "2", "--lanes-per-shard", "2",
                     "--service-token", "test:" GWC_TOKEN, "--log-level", "warn"};
  int argc = 12;
  for (int i = 0; extra && extra[i] && argc < 20; i++) argv[argc++] = (char *)extra[i];
  qim_config_error err;
  int rc = qim_config_load(&s->cfg, argc, argv, NULL, &err);
  if (rc) {
    fprintf(stderr, "%s\n", err.message);
    return rc;
  }
  qim_log_set_level(QIM_LOG_WARN);
  qim_node_options o = {.ephemeral_port = true, .pwhash_opslimit = 1, .pwhash_memlimit = 8192};
  rc = qim_node_open(&s->node, &s->cfg, &o);
  if (rc == 0) s->port = qim_node_port(&s->node);
  return rc;
}

static inline int gwsrv_start(gwsrv *s) { return gwsrv_start_with(s, NULL); }

static inline void gwsrv_stop(gwsrv *s) {
  qim_node_close(&s->node);
  qim_test_rmtree(s->dir);
  s->dir = NULL;
}

typedef struct gwc {
  wsc w;
  int next_id;
  char user[32];
} gwc;

/* Connects and upgrades with the demo key; 0 or an error. */
static inline int gwc_open(gwc *c, uint16_t port) {
  memset(c, 0, sizeof *c);
  c->next_id = 100;
  int rc = wsc_upgrade(&c->w, port, "/v0/channels?apikey=" GWC_APIKEY, NULL);
  if (rc < 0) return rc;
  return rc == 101 ? 0 : -EPROTO;
}

static inline void gwc_close(gwc *c) { wsc_close(&c->w); }

/* Sends a printf-formatted text frame. */
static inline int gwc_sendf(gwc *c, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *buf = malloc((size_t)n + 1);
  vsnprintf(buf, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  int rc = wsc_send_text(&c->w, buf);
  free(buf);
  return rc;
}

/* The next text frame parsed as JSON (NULL on timeout / close / bad JSON). */
static inline json_t *gwc_next(gwc *c, int timeout_ms) {
  int op;
  char *p;
  size_t n;
  if (wsc_recv_data(&c->w, &op, &p, &n, timeout_ms) != 0) return NULL;
  json_t *j = op == 0x1 ? json_loadb(p, n, 0, NULL) : NULL;
  free(p);
  return j;
}

/* Reads frames until one has top-level key `kind` (and, when id is non-NULL, that id);
 * frames before it are dropped. NULL on timeout. The result's inner object is
 * json_object_get(result, kind). */
static inline json_t *gwc_wait(gwc *c, const char *kind, const char *id, int timeout_ms) {
  int64_t end = wsc_now_ms() + timeout_ms;
  for (;;) {
    int64_t left = end - wsc_now_ms();
    if (left <= 0) return NULL;
    json_t *j = gwc_next(c, (int)left);
    if (!j) return NULL;
    json_t *in = json_object_get(j, kind);
    const char *jid = json_string_value(json_object_get(in, "id"));
    if (in && (!id || (jid && strcmp(jid, id) == 0))) return j;
    json_decref(j);
  }
}

/* The code of the {ctrl} answering request `id` (-1 on timeout). */
static inline int gwc_code(gwc *c, const char *id, json_t **ctrl) {
  json_t *j = gwc_wait(c, "ctrl", id, 5000);
  int code = j ? (int)json_integer_value(json_object_get(json_object_get(j, "ctrl"), "code")) : -1;
  if (ctrl)
    *ctrl = j;
  else
    json_decref(j);
  return code;
}

/* hi, then acc (login:true) for `login`/`pw`; 0 when both succeeded; fills c->user. */
static inline int gwc_signup(gwc *c, const char *login, const char *pw) {
  gwc_sendf(c, "{\"hi\":{\"id\":\"1\",\"ver\":\"0.25.3\"}}");
  if (gwc_code(c, "1", NULL) != 201) return -1;
  char sec[256], b64[400];
  int n = snprintf(sec, sizeof sec, "%s:%s", login, pw);
  qim_b64std_encode((const uint8_t *)sec, (size_t)n, b64, sizeof b64);
  gwc_sendf(c, "{\"acc\":{\"id\":\"2\",\"user\":\"new\",\"scheme\":\"basic\",\"secret\":\"%s\",\"login\":true,"
               "\"desc\":{\"public\":{\"fn\":\"%s\"}}}}",
            b64, login);
  json_t *ctrl;
  if (gwc_code(c, "2", &ctrl) != 200) {
    json_decref(ctrl);
    return -1;
  }
  const char *u = json_string_value(json_object_get(json_object_get(json_object_get(ctrl, "ctrl"), "params"), "user"));
  snprintf(c->user, sizeof c->user, "%s", u ? u : "");
  json_decref(ctrl);
  return 0;
}

#endif /* QIM_TEST_GWCLIENT_H */
