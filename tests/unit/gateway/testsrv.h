/*
 * testsrv.h — a qim_net server on 127.0.0.1 with an ephemeral port and a handler that
 * records what happens, for the gateway's socket tests. The handler runs on loop
 * threads, so it never asserts: it records under a mutex, and the test thread reads
 * through the locked getters and waits with WAIT_FOR() (testsupport.h).
 *
 * Handler behaviour: text and binary messages are echoed with their opcode, except
 * these text commands: "close:<code>" (qim_conn_close), "flood:<n>:<size>" (n text
 * frames of size bytes), "sleep:<ms>" (blocks the loop, then answers "slept"),
 * "selfsend" (qim_net_send to itself from its own loop), "ip" (the per-IP count),
 * "tenant" (the tenant's low word), "peer" (the peer address). API keys: "good" ->
 * tenant 42, "other" -> tenant 7, anything else (or none) is refused.
 */
#ifndef QIM_TEST_TESTSRV_H
#define QIM_TEST_TESTSRV_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/net.h"
#include "qim/mem.h"

#define TSRV_MAX 2048

typedef struct tsrv {
  qim_net *net;
  uint16_t port;
  pthread_mutex_t mu;
  uint64_t open_ids[TSRV_MAX];
  int nopen;
  uint64_t closed_ids[TSRV_MAX];
  int close_codes[TSRV_MAX];
  int nclosed;
  int nmessages;
  int loop_starts, loop_stops;
  char last_msg[256];
} tsrv;

static inline int tsrv_apikey(void *ud, const char *key, qim_tenant_id *tenant) {
  (void)ud;
  if (key && strcmp(key, "good") == 0) {
    tenant->v.lo = 42;
    return 0;
  }
  if (key && strcmp(key, "other") == 0) {
    tenant->v.lo = 7;
    return 0;
  }
  return -1;
}

static inline void tsrv_on_open(qim_conn *c, void *ud) {
  tsrv *s = ud;
  pthread_mutex_lock(&s->mu);
  if (s->nopen < TSRV_MAX) s->open_ids[s->nopen] = qim_conn_id(c);
  s->nopen++;
  pthread_mutex_unlock(&s->mu);
}

static inline void tsrv_reply(qim_conn *c, const char *fmt, unsigned long long v) {
  char out[64];
  int n = snprintf(out, sizeof out, fmt, v);
  qim_conn_send_text(c, out, (size_t)n);
}

/* Runs a text command; false when the message is not one. */
static inline bool tsrv_command(qim_conn *c, const char *m, size_t len) {
  unsigned code, count, size;
  char buf[64];
  if (len >= sizeof buf) return false;
  memcpy(buf, m, len);
  buf[len] = '\0';
  if (sscanf(buf, "close:%u", &code) == 1) {
    qim_conn_close(c, (uint16_t)code, "bye");
  } else if (sscanf(buf, "flood:%u:%u", &count, &size) == 2) {
    char *p = malloc(size);
    memset(p, 'f', size);
    for (unsigned i = 0; i < count && qim_conn_send_text(c, p, size) == 0; i++) {
    }
    free(p);
  } else if (sscanf(buf, "sleep:%u", &code) == 1) {
    usleep(code * 1000u); /* blocks this loop on purpose (inbox tests) */
    qim_conn_send_text(c, "slept", 5);
  } else if (strcmp(buf, "selfsend") == 0) {
    /* A send by id from the connection's own loop thread (no inbox hop). */
    qim_ws_frame *f = qim_ws_frame_new(QIM_WS_OP_TEXT, "self", 4);
    qim_net_send(qim_conn_net(c), qim_conn_id(c), f);
    qim_ws_frame_unref(f);
  } else if (strcmp(buf, "ip") == 0) {
    tsrv_reply(c, "ip:%llu", qim_conn_ip_count(c));
  } else if (strcmp(buf, "tenant") == 0) {
    tsrv_reply(c, "tenant:%llu", (unsigned long long)qim_conn_tenant(c)->v.lo);
  } else if (strcmp(buf, "peer") == 0) {
    char peer[64];
    qim_conn_peer_str(c, peer, sizeof peer);
    qim_conn_send_text(c, peer, strlen(peer));
  } else {
    return false;
  }
  return true;
}

static inline void tsrv_on_message(qim_conn *c, int opcode, const uint8_t *d, size_t len,
                                   void *ud) {
  tsrv *s = ud;
  pthread_mutex_lock(&s->mu);
  s->nmessages++;
  size_t n = len < sizeof s->last_msg - 1 ? len : sizeof s->last_msg - 1;
  memcpy(s->last_msg, d, n);
  s->last_msg[n] = '\0';
  pthread_mutex_unlock(&s->mu);
  if (opcode == QIM_WS_OP_TEXT && tsrv_command(c, (const char *)d, len)) return;
  qim_ws_frame *f = qim_ws_frame_new(opcode, d, len);
  qim_conn_send_frame(c, f);
  qim_ws_frame_unref(f);
}

static inline void tsrv_on_close(qim_conn *c, int code, void *ud) {
  tsrv *s = ud;
  pthread_mutex_lock(&s->mu);
  if (s->nclosed < TSRV_MAX) {
    s->closed_ids[s->nclosed] = qim_conn_id(c);
    s->close_codes[s->nclosed] = code;
  }
  s->nclosed++;
  pthread_mutex_unlock(&s->mu);
}

static inline void tsrv_loop_start(qim_net *net, unsigned i, uv_loop_t *uv, void *ud) {
  (void)net, (void)i, (void)uv;
  tsrv *s = ud;
  pthread_mutex_lock(&s->mu);
  s->loop_starts++;
  pthread_mutex_unlock(&s->mu);
}

static inline void tsrv_loop_stop(qim_net *net, unsigned i, uv_loop_t *uv, void *ud) {
  (void)net, (void)i, (void)uv;
  tsrv *s = ud;
  pthread_mutex_lock(&s->mu);
  s->loop_stops++;
  pthread_mutex_unlock(&s->mu);
}

/* A test configuration: loopback, ephemeral port, one loop, short deadlines. */
static inline void tsrv_config(qim_net_config *cfg) {
  qim_net_config_default(cfg);
  cfg->host = "127.0.0.1";
  cfg->port = 0;
  cfg->threads = 1;
  cfg->handshake_timeout = 3000;
  cfg->close_timeout = 1000;
}

/* Starts `s` with cfg and the recording handler; returns qim_net_start's result. */
static inline int tsrv_start(tsrv *s, const qim_net_config *cfg) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  qim_net_handler h = {
      .ud = s,
      .check_apikey = tsrv_apikey,
      .on_open = tsrv_on_open,
      .on_message = tsrv_on_message,
      .on_close = tsrv_on_close,
      .on_loop_start = tsrv_loop_start,
      .on_loop_stop = tsrv_loop_stop,
  };
  int rc = qim_net_new(cfg, &h, &s->net);
  if (rc) return rc;
  return 0;
}

/* Second half of starting, so tests can add routes in between. */
static inline int tsrv_run(tsrv *s) {
  int rc = qim_net_start(s->net);
  s->port = qim_net_port(s->net);
  return rc;
}

static inline void tsrv_stop(tsrv *s) {
  qim_net_free(s->net);
  s->net = NULL;
  pthread_mutex_destroy(&s->mu);
}

/* Locked reads of the recorded state. */
static inline int tsrv_nopen(tsrv *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->nopen;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static inline int tsrv_nclosed(tsrv *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->nclosed;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static inline int tsrv_nmessages(tsrv *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->nmessages;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static inline uint64_t tsrv_open_id(tsrv *s, int i) {
  pthread_mutex_lock(&s->mu);
  uint64_t id = s->open_ids[i];
  pthread_mutex_unlock(&s->mu);
  return id;
}

/* The close code recorded for connection `id`, or -1 if it has not closed. */
static inline int tsrv_close_code(tsrv *s, uint64_t id) {
  int code = -1;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->nclosed && i < TSRV_MAX; i++)
    if (s->closed_ids[i] == id) code = s->close_codes[i];
  pthread_mutex_unlock(&s->mu);
  return code;
}

static inline qim_net_stats tsrv_stats(tsrv *s) {
  qim_net_stats st;
  qim_net_stats_get(s->net, &st);
  return st;
}

#endif /* QIM_TEST_TESTSRV_H */
