/*
 * admin.c — the plain-HTTP routes next to the WebSocket endpoint:
 *   GET  /healthz              200 {"status":"ok"} while the gateway runs (no auth);
 *   POST /v0/admin/pipeline    pause / resume a pipeline stage, for tests that prove
 *                              live delivery comes from the pipeline;
 *   GET  /v0/admin/stats       the gateway's counters.
 * Admin routes need `X-Qim-Service-Token: <token>` naming one of qimd's service tokens
 * (--service-token SERVICE:TOKEN); without a valid one they answer 401.
 *
 * The pipeline body is {"stage": "materialize" | "push", "paused": true | false}:
 * "materialize" stops every mailbox lane before its next step (nothing new reaches
 * mailboxes, so nothing is pushed; commits and their 202 acks go on), "push" lets lanes
 * materialize but hold their pushes. Resuming delivers what waited, once.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/log.h"
#include "qim/mem.h"

static void reply_json(qim_http_reply *rep, int status, json_t *body) {
  char *t = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  qim_http_reply_set(rep, status, "application/json", t, t ? strlen(t) : 0);
  free(t);
}

static void reply_error(qim_http_reply *rep, int status, const char *text) {
  reply_json(rep, status, json_pack("{s{siss}}", "ctrl", "code", status, "text", text));
}

/* The calling service's name, or NULL after answering 401. */
static const char *authorize(qim_gateway *g, const qim_http_request *req, qim_http_reply *rep) {
  const char *tok = req->header[QIM_HTTP_H_SERVICE_TOKEN], *service = NULL;
  if (!tok || qim_config_service_for_token(g->d.cfg, tok, strlen(tok), &service) != 0) {
    reply_error(rep, 401, "authentication required");
    return NULL;
  }
  return service;
}

static void healthz(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  (void)ud;
  if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  reply_json(rep, 200, json_pack("{ss}", "status", "ok"));
}

static void pipeline(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  qim_gateway *g = ud;
  if (strcmp(req->method, "POST") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  const char *service = authorize(g, req, rep);
  if (!service) return;
  json_t *b = req->body ? json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  const char *stage = json_string_value(json_object_get(b, "stage"));
  json_t *paused = json_object_get(b, "paused");
  qim_mailbox_stage st;
  if (stage && strcmp(stage, "materialize") == 0)
    st = QIM_MAILBOX_STAGE_MATERIALIZE;
  else if (stage && strcmp(stage, "push") == 0)
    st = QIM_MAILBOX_STAGE_PUSH;
  else
    stage = NULL;
  if (!stage || !json_is_boolean(paused)) {
    json_decref(b);
    reply_error(rep, 400, "malformed");
    return;
  }
  bool p = json_is_true(paused);
  if (p)
    qim_mailbox_pause(g->d.mailbox, st);
  else
    qim_mailbox_resume(g->d.mailbox, st);
  QIM_LOGI(NULL, "gateway.pipeline_control", "service=%s stage=%s paused=%s", service, stage, p ? "true" : "false");
  reply_json(rep, 200, json_pack("{sssb}", "stage", stage, "paused", p));
  json_decref(b);
}

static void stats(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  qim_gateway *g = ud;
  if (strcmp(req->method, "GET") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  if (!authorize(g, req, rep)) return;
  qim_gateway_stats s;
  qim_gateway_stats_get(g, &s);
  json_t *j = json_pack("{sIsIsIsIsIsIsIsI}", "sessions", (json_int_t)s.sessions, "authenticated",
                        (json_int_t)s.authenticated, "requests", (json_int_t)s.requests, "errors",
                        (json_int_t)s.errors, "pushed_data", (json_int_t)s.pushed_data, "pushed_pres",
                        (json_int_t)s.pushed_pres, "push_batches", (json_int_t)s.push_batches,
                        "events_dropped", (json_int_t)s.events_dropped);
  json_t *more = json_pack("{sIsIsIsIsI}", "presence_sent", (json_int_t)s.presence_sent, "presence_deferred",
                           (json_int_t)s.presence_deferred, "fanout_capped", (json_int_t)s.fanout_capped,
                           "rate_limited", (json_int_t)s.rate_limited, "typing_limited",
                           (json_int_t)s.typing_limited);
  json_object_update(j, more);
  json_decref(more);
  reply_json(rep, 200, j);
}

int qim__gw_admin_routes(qim_gateway *g) {
  int rc = qim_net_add_route(g->net, "/healthz", healthz, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/pipeline", pipeline, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/stats", stats, g);
  return rc;
}
