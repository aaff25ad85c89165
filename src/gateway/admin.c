/*
 * admin.c — the plain-HTTP routes next to the WebSocket endpoint, for operators and
 * internal services (docs/gateway.md "Admin HTTP API"):
 *   GET  /healthz              liveness: 200 {"status":"ok"} while the gateway runs (no auth);
 *   GET  /readyz               readiness: 200 only when the store answers and the pipeline
 *                              (every mailbox shard, the fanout) is up, else 503 (no auth);
 *   POST /v0/admin/groups      create a group owned by a user (GroupCreateRequest);
 *   POST /v0/admin/members     AdminMembershipChange (add / remove), or a role change or ban
 *                              made on behalf of a member;
 *   POST /v0/admin/pipeline    pause / resume a pipeline stage, for tests that prove
 *                              live delivery comes from the pipeline;
 *   POST /v0/admin/retention   run every mailbox lane's retention pass now;
 *   GET  /v0/admin/stats       the gateway's counters.
 * Admin routes need `X-Qim-Service-Token: <token>` naming one of qimd's service tokens
 * (--service-token SERVICE:TOKEN, compared in constant time): without one they answer 401,
 * with an unknown one 403 — InternalIdentityRequired, with a JSON error body. The service
 * becomes the InternalPrincipal of the group calls. Group routes also name the tenant the
 * way clients do, with an API key (X-Tinode-APIKey or ?apikey=).
 *
 * The group module and the readiness probe block (store round trips), so those routes
 * answer later: the request body is parsed on the loop, the work runs in libuv's thread
 * pool, and the answer goes back on the connection's loop (qim_net_http_answer).
 *
 * The pipeline body is {"stage": "materialize" | "push", "paused": true | false}:
 * "materialize" stops every mailbox lane before its next step (nothing new reaches
 * mailboxes, so nothing is pushed; commits and their 202 acks go on), "push" lets lanes
 * materialize but hold their pushes. Resuming delivers what waited, once.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

static void reply_json(qim_http_reply *rep, int status, json_t *body) {
  char *t = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  qim_http_reply_set(rep, status, "application/json", t, t ? strlen(t) : 0);
  free(t);
}

static json_t *error_body(int status, const char *text, int rc) {
  json_t *b = json_pack("{s{siss}}", "ctrl", "code", status, "text", text);
  if (rc) json_object_set_new(b, "error", json_string(qim_err_name(rc)));
  return b;
}

static void reply_error(qim_http_reply *rep, int status, const char *text) {
  reply_json(rep, status, error_body(status, text, 0));
}

/* The calling service's name, or NULL after answering 401 (no token) or 403 (unknown). */
static const char *authorize(qim_gateway *g, const qim_http_request *req, qim_http_reply *rep) {
  const char *tok = req->header[QIM_HTTP_H_SERVICE_TOKEN], *service = NULL;
  if (tok && *tok && qim_config_service_for_token(g->d.cfg, tok, strlen(tok), &service) == 0)
    return service;
  int rc = qim_err_raise(QIM_E_GROUP_INTERNAL_IDENTITY_REQUIRED);
  bool none = !tok || !*tok;
  reply_json(
      rep, none ? 401 : 403,
      error_body(none ? 401 : 403, none ? "authentication required" : "permission denied", rc));
  return NULL;
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
  json_t *b = req->body
                  ? json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, NULL)
                  : NULL;
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
  QIM_LOGI(NULL, "gateway.pipeline_control", "service=%s stage=%s paused=%s", service, stage,
           p ? "true" : "false");
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
  qim_net_stats ns;
  qim_net_stats_get(g->net, &ns);
  json_t *more = json_pack("{sIsIsIsIsIsI}", "presence_sent", (json_int_t)s.presence_sent, "presence_deferred",
                           (json_int_t)s.presence_deferred, "fanout_capped", (json_int_t)s.fanout_capped,
                           "rate_limited", (json_int_t)s.rate_limited, "typing_limited",
                           (json_int_t)s.typing_limited, "loop_stalls", (json_int_t)ns.loop_stalls);
  json_object_update(j, more);
  json_decref(more);
  qim_store_stats st;
  qim_store_get_stats(g->d.store, &st);
  json_object_set_new(j, "store",
                      json_pack("{sIsIsIsIsIsIsIsIsIsIsIsIsIsIsI}", "operations", (json_int_t)st.operations,
                                "transactions", (json_int_t)st.transactions, "fsyncs",
                                (json_int_t)st.fsyncs, "reads", (json_int_t)st.reads,
                                "reads_inline", (json_int_t)st.reads_inline,
                                "pages_written", (json_int_t)st.pages_written, "lingers",
                                (json_int_t)st.lingers, "lingered", (json_int_t)st.lingered,
                                "rejected_backpressure", (json_int_t)st.rejected_backpressure,
                                "checkpoints", (json_int_t)st.checkpoints, "checkpoints_background",
                                (json_int_t)st.checkpoints_background, "syncs",
                                (json_int_t)st.syncs, "sync_waits", (json_int_t)st.sync_waits,
                                "slow_syncs", (json_int_t)st.slow_syncs, "slow_transactions",
                                (json_int_t)st.slow_transactions));
  reply_json(rep, 200, j);
}

/* POST {} (any body): every owned mailbox lane runs its retention pass at its next step
 * (trims what mailbox_retain_count / age no longer keep). 202: the pass runs right after. */
static void retention(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  qim_gateway *g = ud;
  if (strcmp(req->method, "POST") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  const char *service = authorize(g, req, rep);
  if (!service) return;
  qim_mailbox_retention_kick(g->d.mailbox);
  QIM_LOGI(NULL, "gateway.retention_kick", "service=%s", service);
  reply_json(rep, 202, json_pack("{ss}", "retention", "started"));
}

/* ---- answered later: group calls and the readiness probe
 * ----------------------------------------- */

#define ADMIN_LIST_MAX 1000 /* users in one request */

typedef struct admin_job admin_job;
struct admin_job {
  uv_work_t work;
  qim_gateway *g;
  gw_loop *l;
  uint64_t conn;
  qim_trace_id trace;
  const char *service; /* inside the configuration */
  qim_tenant_id tenant;
  json_t *body;              /* the parsed request (owned) */
  void (*run)(admin_job *j); /* worker thread: sets status and reply */
  int status;
  json_t *reply;
};

static void admin_work(uv_work_t *w) {
  admin_job *j = w->data;
  j->run(j);
}

static void admin_after(uv_work_t *w, int status) {
  (void)status;
  admin_job *j = w->data;
  gw_loop *l = j->l;
  char *t = j->reply ? json_dumps(j->reply, JSON_COMPACT) : NULL;
  if (qim_net_http_answer(j->g->net, j->conn, j->status, "application/json", t,
                          t ? strlen(t) : 0) != 0)
    QIM_LOGW(&j->trace, "gateway.admin_answer_dropped", "status=%d", j->status);
  free(t);
  json_decref(j->reply);
  json_decref(j->body);
  qim_free(j);
  qim__gw_loop_release(l);
}

/* Takes j: its run() goes to the thread pool, the answer comes from admin_after. */
static void defer(qim_gateway *g, qim_http_reply *rep, admin_job *j, void (*run)(admin_job *j)) {
  j->g = g;
  j->l = &g->loops[rep->loop];
  j->conn = rep->conn_id;
  j->trace = qim_trace_id_new();
  j->run = run;
  j->work.data = j;
  rep->defer = true;
  qim__gw_loop_hold(j->l);
  if (uv_queue_work(j->l->uv, &j->work, admin_work, admin_after))
    abort(); /* invalid arguments only */
}

static void job_error(admin_job *j, int rc) {
  const char *text;
  j->status = qim__gw_err_code(rc, &text);
  j->reply = error_body(j->status, text, rc);
}

/* A JSON object body, or NULL after answering 400. */
static json_t *object_body(const qim_http_request *req, qim_http_reply *rep) {
  json_t *b = req->body
                  ? json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, NULL)
                  : NULL;
  if (json_is_object(b)) return b;
  json_decref(b);
  reply_error(rep, 400, "malformed");
  return NULL;
}

/* The tenant named by the request's API key (as for clients); false after answering 403. */
static bool tenant_of(qim_gateway *g, const qim_http_request *req, qim_http_reply *rep,
                      qim_tenant_id *t) {
  if (req->apikey &&
      qim_config_tenant_for_api_key(g->d.cfg, req->apikey, strlen(req->apikey), t) == 0)
    return true;
  reply_error(rep, 403, "valid API key required");
  return false;
}

/* "usr…" of member `key` of o; false when absent or not a user id. */
static bool user_of(const json_t *o, const char *key, qim_user_id *u) {
  const char *v = json_string_value(json_object_get(o, key));
  return v && qim_user_id_parse(v, strlen(v), u) == 0;
}

/* A list of "usr…" (absent = empty); -EINVAL for anything else or more than ADMIN_LIST_MAX.
 * *out is qim_malloc'ed (NULL when empty). */
static int users_of(const json_t *o, const char *key, qim_user_id **out, size_t *n) {
  json_t *a = json_object_get(o, key);
  *out = NULL;
  *n = 0;
  if (!a) return 0;
  if (!json_is_array(a) || json_array_size(a) > ADMIN_LIST_MAX) return -EINVAL;
  if (json_array_size(a) == 0) return 0;
  qim_user_id *v = qim_calloc(json_array_size(a), sizeof *v);
  size_t i;
  json_t *x;
  json_array_foreach(a, i, x) {
    const char *s = json_string_value(x);
    if (!s || qim_user_id_parse(s, strlen(s), &v[i]) != 0) {
      qim_free(v);
      return -EINVAL;
    }
  }
  *out = v;
  *n = json_array_size(a);
  return 0;
}

/* 0 when every user has an account in the tenant; GROUP_NOT_FOUND-like -ENOENT otherwise. */
static int users_exist(qim_gateway *g, qim_tenant_id t, const qim_user_id *u, size_t n) {
  for (size_t i = 0; i < n; i++) {
    qim_store_user_get_req ug = {.tenant_id = t, .user_id = u[i]};
    int rc = QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug);
    qim_store_user_free(&ug.out);
    if (rc) return rc;
  }
  return 0;
}

static json_t *change_json(qim_group_id gid, const qim_group_change_result *r) {
  char name[QIM_TOPIC_NAME_CAP];
  qim_group_id_format(gid, name, sizeof name);
  return json_pack("{sssIsI}", "group", name, "membership_version",
                   (json_int_t)r->membership_version, "position", (json_int_t)r->position);
}

/* ---- POST /v0/admin/groups
 * ------------------------------------------------------------------------ */

/* {"owner":"usr…", "members":["usr…"…], "public":<any JSON>} → 201
 * {"group","owner","membership_version"} */
static void create_run(admin_job *j) {
  qim_gateway *g = j->g;
  qim_user_id owner, *inv = NULL;
  size_t ninv = 0;
  json_t *pub = json_object_get(j->body, "public");
  char *pub_json = pub ? json_dumps(pub, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  int rc = user_of(j->body, "owner", &owner) ? users_of(j->body, "members", &inv, &ninv) : -EINVAL;
  if (rc == 0 && pub_json && strlen(pub_json) > g->d.cfg->max_message_size) rc = -E2BIG;
  if (rc == 0) rc = users_exist(g, j->tenant, &owner, 1);
  if (rc == 0) rc = users_exist(g, j->tenant, inv, ninv);
  qim_group_id gid = {qim_u128_random()};
  qim_group_created created;
  if (rc == 0) {
    qim_authenticated_actor a = {.tenant_id = j->tenant, .user_id = owner};
    qim_group_create_request cr = {.group_id = gid, .invitees = inv, .invitee_count = ninv};
    rc = qim_group_create(g->d.groups, &a, &cr, &j->trace, &created, NULL);
  }
  if (rc == 0 && pub_json) {
    qim_store_conv_update_req u = {.tenant_id = j->tenant,
                                   .conversation_id = qim_group_conversation(gid),
                                   .public_json = pub_json,
                                   .now = qim__gw_now(g)};
    rc = QIM_STORE_SYNC(g->d.store, conversations.update, &u);
  }
  if (rc) {
    job_error(j, rc);
  } else {
    char gname[QIM_TOPIC_NAME_CAP], oname[QIM_TOPIC_NAME_CAP];
    qim_group_id_format(gid, gname, sizeof gname);
    qim_user_id_format(owner, oname, sizeof oname);
    j->status = 201;
    j->reply = json_pack("{sssssI}", "group", gname, "owner", oname, "membership_version",
                         (json_int_t)created.membership_version);
    QIM_LOGI(&j->trace, "gateway.admin_group_created", "service=%s group=%s owner=%s", j->service,
             gname, oname);
  }
  free(pub_json);
  qim_free(inv);
}

/* ---- POST /v0/admin/members
 * ------------------------------------------------------------------------ */

/* {"group","add":[…],"remove":[…],"subject"?}: AdminMembershipChange by the service. */
static int members_change(admin_job *j, qim_group_id gid, qim_group_change_result *res) {
  qim_admin_membership_change ch = {.group_id = gid};
  int rc = users_of(j->body, "add", &ch.add, &ch.add_count);
  if (rc == 0) rc = users_of(j->body, "remove", &ch.remove, &ch.remove_count);
  if (rc == 0 && ch.add_count + ch.remove_count == 0) rc = -EINVAL;
  if (rc == 0) rc = users_exist(j->g, j->tenant, ch.add, ch.add_count);
  const char *subject = json_string_value(json_object_get(j->body, "subject"));
  qim_internal_principal p = {.service_name = (char *)j->service,
                              .subject = (char *)(subject ? subject : j->service)};
  if (rc == 0) rc = qim_group_admin_change(j->g->d.groups, &p, j->tenant, &ch, &j->trace, res);
  qim_free(ch.add);
  qim_free(ch.remove);
  return rc;
}

/* {"group","op":"role"|"ban","user","role"?,"as"}: made on behalf of member `as`, whose
 * modes the group rules check (the group module has no principal form of these). */
static int members_as(admin_job *j, qim_group_id gid, const char *op,
                      qim_group_change_result *res) {
  qim_user_id as, user;
  if (!user_of(j->body, "as", &as) || !user_of(j->body, "user", &user)) return -EINVAL;
  qim_authenticated_actor a = {.tenant_id = j->tenant, .user_id = as};
  if (strcmp(op, "ban") == 0) return qim_group_ban(j->g->d.groups, &a, gid, user, &j->trace, res);
  const char *rn = json_string_value(json_object_get(j->body, "role"));
  qim_group_role role;
  if (!rn || qim_group_role_parse(rn, &role) != 0) return -EINVAL;
  return qim_group_set_role(j->g->d.groups, &a, gid, user, role, &j->trace, res);
}

static void members_run(admin_job *j) {
  const char *gn = json_string_value(json_object_get(j->body, "group"));
  const char *op = json_string_value(json_object_get(j->body, "op"));
  qim_group_id gid;
  qim_group_change_result res;
  int rc;
  if (!gn || qim_group_id_parse(gn, strlen(gn), &gid) != 0)
    rc = -EINVAL;
  else if (!op || strcmp(op, "change") == 0)
    rc = members_change(j, gid, &res);
  else if (strcmp(op, "role") == 0 || strcmp(op, "ban") == 0)
    rc = members_as(j, gid, op, &res);
  else
    rc = -EINVAL;
  if (rc) {
    job_error(j, rc);
    return;
  }
  j->status = 200;
  j->reply = change_json(gid, &res);
  QIM_LOGI(&j->trace, "gateway.admin_members", "service=%s group=%s op=%s version=%llu", j->service,
           gn, op ? op : "change", (unsigned long long)res.membership_version);
}

/* The shared front of both group routes: POST, a service token, an API key, a JSON object. */
static void group_route(qim_gateway *g, const qim_http_request *req, qim_http_reply *rep,
                        void (*run)(admin_job *)) {
  if (strcmp(req->method, "POST") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  const char *service = authorize(g, req, rep);
  qim_tenant_id t;
  if (!service || !tenant_of(g, req, rep, &t)) return;
  json_t *b = object_body(req, rep);
  if (!b) return;
  admin_job *j = qim_calloc(1, sizeof *j);
  j->service = service;
  j->tenant = t;
  j->body = b;
  defer(g, rep, j, run);
}

static void groups(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  group_route(ud, req, rep, create_run);
}
static void members(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  group_route(ud, req, rep, members_run);
}

/* ---- GET /readyz
 * ------------------------------------------------------------------------------------ */

/* Ready = the store answers a read, every mailbox shard is owned and replayed, the fanout
 * runs and is not halted. 503 names what is not. */
static void ready_run(admin_job *j) {
  qim_gateway *g = j->g;
  qim_store_watermark_get_req wg = {.shard = 0, .lane = 0};
  int store_rc = QIM_STORE_SYNC(g->d.store, mailboxes.watermark_get, &wg);
  int mb_rc = 0;
  for (uint32_t s = 0; mb_rc == 0 && s < g->d.shards.shard_count; s++) {
    qim_shard_readiness r;
    mb_rc = qim_mailbox_shard_readiness(g->d.mailbox, s, &r, NULL);
    if (mb_rc == 0 && r.kind != QIM_SHARD_READINESS_READY)
      mb_rc = qim_err_raise(QIM_E_MATERIALIZE_LANE_NOT_READY);
  }
  qim_fanout_status fs = {.running = true};
  if (g->d.fanout) qim_fanout_get_status(g->d.fanout, &fs);
  bool fan_ok = fs.running && !fs.halted;
  bool ok = store_rc == 0 && mb_rc == 0 && fan_ok;
  j->status = ok ? 200 : 503;
  j->reply = json_pack("{ssssssss}", "status", ok ? "ready" : "not ready", "store",
                       store_rc ? qim_err_name(store_rc) : "ok", "mailbox",
                       mb_rc ? qim_err_name(mb_rc) : "ok", "fanout",
                       fan_ok      ? "ok"
                       : fs.halted ? "halted"
                                   : "stopped");
}

static void readyz(const qim_http_request *req, qim_http_reply *rep, void *ud) {
  if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
    reply_error(rep, 405, "operation or method not allowed");
    return;
  }
  defer(ud, rep, qim_calloc(1, sizeof(admin_job)), ready_run);
}

int qim__gw_admin_routes(qim_gateway *g) {
  int rc = qim_net_add_route(g->net, "/healthz", healthz, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/readyz", readyz, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/groups", groups, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/members", members, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/pipeline", pipeline, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/retention", retention, g);
  if (rc == 0) rc = qim_net_add_route(g->net, "/v0/admin/stats", stats, g);
  return rc;
}
