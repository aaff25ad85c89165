/*
 * client_session.c — the client runtime's protocol over one WebSocket (docs/client.md):
 *
 *   {hi device} → {login} (or {acc} for a new account) → {sub me} → {sync}… → Online
 *
 * The mailbox is the single source of truth: while Online, a push ({data}, or {pres} on
 * me) only triggers another {sync}. A page is stored (entries de-duplicated on event_id)
 * together with its cursor in one transaction, and only then exported as MessagesAdded.
 * 410 "cursor expired" rebuilds (reset the store, re-read sessions, sync from the fresh
 * cursor); 400 "cursor invalid" drops the cursor and syncs from the mailbox's floor.
 * Pending sends go out as {pub cmid} once their topic is joined on this connection, again
 * after every reconnect with the same cmid, until the {ctrl 202}.
 */
#include <string.h>

#include "client/client_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define CLIENT_VERSION "0.25.3"

/* Sends `frame` (stolen) and starts the deadline of request `id`. */
static void request(qim_client *c, const char *id, json_t *frame) {
  if (qim__client_conn_send(c, frame) == 0) qim__client_wait_add(c, id);
}

/* A failure with a domain error: report it, then drop the connection. */
static void fail(qim_client *c, int code, bool reconnect) {
  qim__client_emit_failed(c, code);
  qim__client_conn_drop(c, reconnect);
}

static int code_of_reply(int ctrl) {
  if (ctrl == 401 || ctrl == 403) return QIM_E_CLIENT_PERMISSION_DENIED;
  if (ctrl >= 500) return QIM_E_CLIENT_UNAVAILABLE;
  return QIM_E_CLIENT_PROTOCOL_FAILURE;
}

static bool in_list(char **list, size_t n, const char *topic) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i], topic) == 0) return true;
  return false;
}

static void list_add(char ***list, size_t *n, const char *topic) {
  if (in_list(*list, *n, topic)) return;
  *list = qim_realloc(*list, (*n + 1) * sizeof **list);
  (*list)[(*n)++] = qim_strdup(topic);
}

static void list_del(char **list, size_t *n, const char *topic) {
  for (size_t i = 0; i < *n; i++)
    if (strcmp(list[i], topic) == 0) {
      qim_free(list[i]);
      list[i] = list[--*n];
      return; /* list_add keeps names unique */
    }
}

static void list_clear(char ***list, size_t *n) {
  for (size_t i = 0; i < *n; i++) qim_free((*list)[i]);
  qim_free(*list);
  *list = NULL;
  *n = 0;
}

/* ---- joining topics, pending sends, deferred commands ---------------------------------------- */

/* True when `topic` is joined; otherwise asks for it (once per connection). */
static bool joined(qim_client *c, const char *topic) {
  if (in_list(c->joined, c->joined_n, topic)) return true;
  if (!in_list(c->joining, c->joining_n, topic)) {
    char id[80];
    snprintf(id, sizeof id, "s:%s", topic);
    request(c, id, json_pack("{s:{s:s,s:s}}", "sub", "id", id, "topic", topic));
    list_add(&c->joining, &c->joining_n, topic);
  }
  return false;
}

static void flush_pending(qim_client *c) {
  if (c->state != QIM_CONNECTION_STATE_ONLINE || !c->conn) return;
  qim__client_pending *p = NULL;
  size_t n = 0;
  if (qim__client_store_pending_list(c->store, &p, &n) != 0) {
    qim__client_emit_failed(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE);
    return;
  }
  for (size_t i = 0; i < n && c->conn; i++) {
    char cmid[23], id[80];
    qim__client_cmid_text(&p[i].cmid, cmid);
    snprintf(id, sizeof id, "p:%s", cmid);
    bool in_flight = false;
    for (size_t w = 0; w < c->wait_n && !in_flight; w++) in_flight = !strcmp(c->waits[w].id, id);
    if (in_flight || !joined(c, p[i].topic)) continue;
    json_t *content = json_loads(p[i].content, JSON_DECODE_ANY, NULL);
    request(c, id,
            json_pack("{s:{s:s,s:s,s:o,s:s}}", "pub", "id", id, "topic", p[i].topic, "content",
                      content ? content : json_null(), "cmid", cmid));
  }
  qim__client_pending_free(p, n);
}

static void get_sessions(qim_client *c, const char *id) {
  request(c, id, json_pack("{s:{s:s,s:s,s:s}}", "get", "id", id, "topic", "me", "what", "sub"));
}

/* Runs a host command if it can run now; false keeps it deferred. */
static bool run_cmd(qim_client *c, const qim__client_cmd *cmd) {
  if (c->state != QIM_CONNECTION_STATE_ONLINE || !c->conn) return false;
  char id[80];
  switch (cmd->kind) {
    case QIM__CMD_JOIN:
      snprintf(id, sizeof id, "j:%s", cmd->topic);
      request(c, id, json_pack("{s:{s:s,s:s}}", "sub", "id", id, "topic", cmd->topic));
      return true;
    case QIM__CMD_SESSIONS:
      get_sessions(c, "ss");
      return true;
    case QIM__CMD_MEMBERS:
      if (!joined(c, cmd->topic)) return false;
      snprintf(id, sizeof id, "g:%s", cmd->topic);
      request(c, id,
              json_pack("{s:{s:s,s:s,s:s}}", "get", "id", id, "topic", cmd->topic, "what", "sub"));
      return true;
    default:
      return true;
  }
}

static void run_deferred(qim_client *c) {
  size_t kept = 0;
  for (size_t i = 0; i < c->deferred_n; i++)
    if (!run_cmd(c, &c->deferred[i])) c->deferred[kept++] = c->deferred[i];
  c->deferred_n = kept;
}

/* Forgets the commands waiting for `topic` (its join was refused). */
static void drop_deferred(qim_client *c, const char *topic) {
  size_t kept = 0;
  for (size_t i = 0; i < c->deferred_n; i++)
    if (strcmp(c->deferred[i].topic, topic) != 0) c->deferred[kept++] = c->deferred[i];
  c->deferred_n = kept;
}

static void defer(qim_client *c, const qim__client_cmd *cmd) {
  if (c->deferred_n == c->deferred_cap) {
    c->deferred_cap = c->deferred_cap ? 2 * c->deferred_cap : 8;
    c->deferred = qim_realloc(c->deferred, c->deferred_cap * sizeof *c->deferred);
  }
  c->deferred[c->deferred_n++] = *cmd;
}

static void start_sync(qim_client *c);

/* After a 503: the sync, and the pending sends, once more. */
static void retry_cb(uv_timer_t *t) {
  qim_client *c = t->data;
  if (!c->conn) return;
  if (c->retry_sync) {
    c->retry_sync = false;
    start_sync(c);
  }
  flush_pending(c);
}

/* ---- sync --------------------------------------------------------------------------------------
 */

static void start_sync(qim_client *c) {
  if (!c->conn) return;
  if (c->syncing) {
    c->sync_dirty = true; /* a push during a sync: one more round when it ends */
    return;
  }
  char *cursor = NULL;
  if (qim__client_store_cursor(c->store, &cursor) != 0) {
    fail(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE, false);
    return;
  }
  json_t *body = json_pack("{s:s}", "id", "sy");
  if (cursor) json_object_set_new(body, "cursor", json_string(cursor));
  if (c->cfg.sync_limit) json_object_set_new(body, "limit", json_integer(c->cfg.sync_limit));
  c->sync_had_cursor = cursor != NULL;
  qim_free(cursor);
  c->syncing = true;
  request(c, "sy", json_pack("{s:o}", "sync", body));
}

static void went_online(qim_client *c) {
  c->backoff_ms = c->cfg.reconnect_min_ms;
  qim__client_emit_state(c, QIM_CONNECTION_STATE_ONLINE);
  flush_pending(c);
  run_deferred(c);
}

/* Parses, stores and exports one page; false when the connection was dropped. */
static bool store_page(qim_client *c, json_t *entries, const char *cursor) {
  size_t n = json_array_size(entries);
  qim__client_entry *row = qim_calloc(n ? n : 1, sizeof *row);
  qim_mailbox_entry *me = qim_calloc(n ? n : 1, sizeof *me);
  char **json = qim_calloc(n ? n : 1, sizeof *json);
  bool *inserted = qim_calloc(n ? n : 1, sizeof *inserted);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *e = json_array_get(entries, i);
    rc = qim__client_frame_entry(c, e, &me[i]) ? QIM_E_CLIENT_PROTOCOL_FAILURE : 0;
    json[i] = json_dumps(e, JSON_COMPACT);
    json_t *seq = json_object_get(e, "seq");
    row[i] = (qim__client_entry){.event_id = me[i].event_id,
                                 .topic = json_string_value(json_object_get(e, "topic")),
                                 .type = json_string_value(json_object_get(e, "type")),
                                 .from = json_string_value(json_object_get(e, "from")),
                                 .seq = seq ? (uint64_t)json_integer_value(seq) : 0,
                                 .json = json[i] ? json[i] : "{}"};
    if (!row[i].from) row[i].from = "";
  }
  if (rc) {
    rc = qim_err_raise(rc);
  } else {
    rc = qim__client_store_add_page(c->store, row, n, c->self, cursor, inserted);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; i++) {
    if (rc == 0 && inserted[i])
      me[out++] = me[i]; /* a repeat of a stored entry is not news */
    else
      qim_mailbox_entry_free(&me[i]);
    free(json[i]);
  }
  qim_free(row);
  qim_free(json);
  qim_free(inserted);
  if (rc == 0 && out) {
    qim_client_event ev = {
        .kind = QIM_CLIENT_EVENT_MESSAGES_ADDED, .messages = me, .message_count = out};
    qim__client_emit(c, &ev);
  } else {
    qim_free(me);
  }
  if (rc) fail(c, rc, true);
  return rc == 0;
}

static void on_sync_page(qim_client *c, json_t *page) {
  if (!qim__client_wait_take(c, "sy")) return; /* a page for a request of a lost connection */
  c->syncing = false;
  json_t *entries = json_object_get(page, "entries");
  const char *cursor = json_string_value(json_object_get(page, "cursor"));
  if (!json_is_array(entries) || !cursor) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  if (!store_page(c, entries, cursor)) return;
  c->sync_more = json_is_true(json_object_get(page, "more"));
  if (c->sync_more) {
    start_sync(c);
    return;
  }
  if (c->state != QIM_CONNECTION_STATE_ONLINE) went_online(c);
  if (c->sync_dirty) {
    c->sync_dirty = false;
    start_sync(c);
  }
}

/* 410: the local store's history is no longer continuous with the mailbox. */
static void rebuild(qim_client *c, json_t *params) {
  const char *tw = json_string_value(json_object_get(params, "trim_watermark"));
  const char *fresh = json_string_value(json_object_get(params, "cursor"));
  qim_log(QIM_LOG_WARN, NULL, "client.cursor_expired", "trim_watermark=%s fresh_cursor=%s",
          tw ? tw : "-", fresh ? "yes" : "no");
  qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_CURSOR_EXPIRED));
  qim__client_emit_state(c, QIM_CONNECTION_STATE_REBUILDING);
  char *old = NULL;
  if (qim__client_store_cursor(c->store, &old) != 0) {
    fail(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE, false);
    return;
  }
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_REBUILD_REQUIRED};
  qim_cursor_identity id = {.tenant_id = c->tenant, .device_id = c->device};
  qim_user_id_parse(c->self, strlen(c->self), &id.user_id);
  ev.rebuild.expired_cursor.identity = id;
  ev.rebuild.reset_cursor = id;
  if (old) ev.rebuild.expired_cursor.signed_token = (qim_bytes){(uint8_t *)old, strlen(old)};
  qim__client_emit(c, &ev);
  /* Without a fresh cursor the next sync starts at the mailbox's floor (protocol §3.11). */
  if (qim__client_store_reset(c->store, fresh) != 0) {
    fail(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE, false);
    return;
  }
  qim_client_event reset = {.kind = QIM_CLIENT_EVENT_LOCAL_STORE_RESET};
  qim__client_emit(c, &reset);
  c->rebuilding = true;
  get_sessions(c, "rb");
}

static void on_sync_error(qim_client *c, int code, const char *text, json_t *params) {
  c->syncing = false;
  if (code == 410) {
    rebuild(c, params);
  } else if (code == 400 && strcmp(text, "cursor invalid") == 0 && c->sync_had_cursor) {
    /* (Said of a sync that carried no cursor it is nonsense, and retrying would loop.) */
    qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_CURSOR_INVALID));
    if (qim__client_store_set_cursor(c->store, NULL) != 0) {
      fail(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE, false);
      return;
    }
    start_sync(c); /* from the floor; entries already stored are de-duplicated */
  } else if (code == 503) {
    qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_UNAVAILABLE));
    c->retry_sync = true;
    uv_timer_start(&c->retry_timer, retry_cb, c->backoff_ms, 0);
  } else {
    fail(c, qim_err_raise(code_of_reply(code)), true);
  }
}

/* ---- login --------------------------------------------------------------------------------------
 */

/* base64 of "login:password", the basic secret. */
static char *basic_secret(const qim_client_credentials *cr) {
  size_t n = strlen(cr->login) + 1 + strlen(cr->password);
  char *plain = qim_malloc(n + 1), *out = qim_malloc(4 * (n / 3 + 1) + 1);
  snprintf(plain, n + 1, "%s:%s", cr->login, cr->password);
  if (qim_b64std_encode((const uint8_t *)plain, n, out, 4 * (n / 3 + 1) + 1) < 0) out[0] = '\0';
  qim_free(plain);
  return out;
}

static void send_login(qim_client *c) {
  /* After the first login every reconnect uses its token: the password is not resent. */
  const char *token = c->token                                ? c->token
                      : c->cr.scheme == QIM_CLIENT_AUTH_TOKEN ? c->cr.token
                                                              : NULL;
  c->token_login = token != NULL;
  if (token) {
    char *b = qim_strdup(token); /* the token travels as the secret, as Tinode's SDK sends it */
    request(c, "lg",
            json_pack("{s:{s:s,s:s,s:s}}", "login", "id", "lg", "scheme", "token", "secret", b));
    qim_free(b);
    return;
  }
  char *secret = basic_secret(&c->cr);
  if (c->cr.scheme == QIM_CLIENT_AUTH_NEW_ACCOUNT)
    request(c, "lg",
            json_pack("{s:{s:s,s:s,s:s,s:s,s:b}}", "acc", "id", "lg", "user", "new", "scheme",
                      "basic", "secret", secret, "login", 1));
  else
    request(
        c, "lg",
        json_pack("{s:{s:s,s:s,s:s}}", "login", "id", "lg", "scheme", "basic", "secret", secret));
  qim_free(secret);
}

static void on_login(qim_client *c, int code, json_t *params) {
  if (code >= 300) {
    int rc = qim_err_raise(code_of_reply(code == 409 ? 403 : code));
    qim__client_emit_failed(c, rc);
    if (rc == QIM_E_CLIENT_UNAVAILABLE) {
      qim__client_conn_drop(c, true);
      return;
    }
    /* A refused token means this device was signed out: Kicked, as an eviction is. */
    if (c->token_login && rc == QIM_E_CLIENT_PERMISSION_DENIED)
      qim__client_emit_state(c, QIM_CONNECTION_STATE_KICKED);
    qim__client_conn_drop(c, false);
    return;
  }
  const char *user = json_string_value(json_object_get(params, "user"));
  const char *token = json_string_value(json_object_get(params, "token"));
  const char *cursor = json_string_value(json_object_get(params, "cursor"));
  qim_user_id uid;
  if (!user || strlen(user) >= sizeof c->self || qim_user_id_parse(user, strlen(user), &uid) != 0) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  snprintf(c->self, sizeof c->self, "%s", user);
  if (token) {
    qim_free(c->token);
    c->token = qim_strdup(token);
  }
  /* A new device starts from the login's cursor; a device that has one keeps its own. */
  char *have = NULL;
  int rc = qim__client_store_cursor(c->store, &have);
  if (rc == 0 && !have && cursor) rc = qim__client_store_set_cursor(c->store, cursor);
  qim_free(have);
  if (rc) {
    fail(c, rc, false);
    return;
  }
  qim__client_emit_state(c, QIM_CONNECTION_STATE_SYNCHRONIZING);
  request(c, "me", json_pack("{s:{s:s,s:s}}", "sub", "id", "me", "topic", "me"));
}

/* ---- replies -------------------------------------------------------------------------------- */

static void on_sessions(qim_client *c, const char *id, json_t *subs) {
  qim_session_page *page = NULL;
  if (qim__client_frame_sessions(c, subs, &page) != 0) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  for (size_t i = 0; i < json_array_size(subs); i++) {
    json_t *s = json_array_get(subs, i);
    const char *topic = json_string_value(json_object_get(s, "topic"));
    json_int_t seq = json_integer_value(json_object_get(s, "seq"));
    json_int_t read = json_integer_value(json_object_get(s, "read"));
    if (topic && (strncmp(topic, "grp", 3) == 0 || strncmp(topic, "usr", 3) == 0) &&
        qim__client_store_set_summary(c->store, topic, seq > 0 ? (uint64_t)seq : 0,
                                      read > 0 ? (uint64_t)read : 0) != 0) {
      qim__client_emit_failed(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE);
      break;
    }
  }
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_SESSIONS_UPDATED, .sessions = page};
  qim__client_emit(c, &ev);
  if (strcmp(id, "rb") == 0 && c->rebuilding) {
    c->rebuilding = false;
    start_sync(c);
  }
}

static void on_members(qim_client *c, json_t *subs) {
  qim_member_page *page = NULL;
  if (qim__client_frame_members(subs, &page) != 0) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_MEMBERS_UPDATED, .members = page};
  qim__client_emit(c, &ev);
}

static void on_pub_ack(qim_client *c, const char *cmid_text, const char *topic, int code,
                       json_t *params) {
  qim_client_message_id cmid;
  if (qim__client_cmid_parse(cmid_text, &cmid) != 0) return;
  if (code >= 500) { /* 503 "retry with the same cmid": the row stays, the timer resends */
    qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_UNAVAILABLE));
    uv_timer_start(&c->retry_timer, retry_cb, c->backoff_ms, 0);
    return;
  }
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_PENDING_RESOLVED};
  json_t *seq = json_object_get(params, "seq");
  bool ok =
      code < 300 && json_is_integer(seq) && topic &&
      qim__client_conversation(c, topic, &ev.pending_resolved.coordinates.conversation_id) == 0;
  /* Refused for good (403, 409 cmid reused…): it can never be delivered, so it goes too. */
  if (qim__client_store_pending_remove(c->store, &cmid) != 0) {
    qim__client_emit_failed(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE);
    return;
  }
  if (!ok) {
    qim__client_emit_failed(
        c, qim_err_raise(code < 300 ? QIM_E_CLIENT_PROTOCOL_FAILURE : code_of_reply(code)));
    return;
  }
  ev.pending_resolved.client_message_id = cmid;
  ev.pending_resolved.coordinates.conversation_seq = (uint64_t)json_integer_value(seq);
  qim__client_emit(c, &ev);
}

static void on_joined(qim_client *c, const char *id, const char *topic, int code) {
  const char *asked = id + 2;
  list_del(c->joining, &c->joining_n, asked);
  if (code >= 300 && code != 304) { /* 304: already joined, as good as joined */
    int rc = qim_err_raise(code_of_reply(code));
    qim__client_emit_failed(c, rc);
    /* Sends to a topic this user may not join can never be delivered (docs/client.md). */
    if (rc == QIM_E_CLIENT_PERMISSION_DENIED &&
        qim__client_store_pending_drop_topic(c->store, asked))
      qim__client_emit_failed(c, QIM_E_CLIENT_LOCAL_STORE_FAILURE);
    if (rc == QIM_E_CLIENT_PERMISSION_DENIED) drop_deferred(c, asked); /* members of it, too */
    return;
  }
  list_add(&c->joined, &c->joined_n, topic ? topic : asked);
  if (id[0] == 'j') get_sessions(c, "ss"); /* a host's join: show it in the session list */
  flush_pending(c);
  run_deferred(c);
}

/* A {ctrl}: the reply to one of our requests, or the server's eviction notice. */
static void on_ctrl(qim_client *c, json_t *ctrl) {
  const char *id = json_string_value(json_object_get(ctrl, "id"));
  const char *topic = json_string_value(json_object_get(ctrl, "topic"));
  const char *text = json_string_value(json_object_get(ctrl, "text"));
  json_t *jcode = json_object_get(ctrl, "code"), *params = json_object_get(ctrl, "params");
  if (!json_is_integer(jcode)) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  int code = (int)json_integer_value(jcode);
  if (!id) {
    if (code == 205) { /* evicted: another login took this device's place, or an admin */
      qim__client_emit_state(c, QIM_CONNECTION_STATE_KICKED);
      qim__client_conn_drop(c, false);
    }
    return; /* other notices without id (400 to a note) concern no request of ours */
  }
  if (!qim__client_wait_take(c, id)) return; /* e.g. the page cursor after a {meta sub} */
  if (strcmp(id, "hi") == 0) {
    if (code >= 300)
      fail(c, qim_err_raise(code_of_reply(code)), code >= 500);
    else
      send_login(c);
  } else if (strcmp(id, "lg") == 0) {
    on_login(c, code, params);
  } else if (strcmp(id, "me") == 0) {
    if (code >= 300 && code != 304)
      fail(c, qim_err_raise(code_of_reply(code)), true);
    else
      start_sync(c);
  } else if (strcmp(id, "sy") == 0) {
    if (code < 300)
      fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true); /* no page */
    else
      on_sync_error(c, code, text ? text : "", params);
  } else if (strcmp(id, "ss") == 0 || strcmp(id, "rb") == 0 || strncmp(id, "g:", 2) == 0) {
    if (code >= 300) {
      fail(c, qim_err_raise(code_of_reply(code)), true);
    } else if (id[0] == 'g') {
      on_members(c, NULL); /* 204: nobody to list */
    } else {
      on_sessions(c, id, NULL);
    }
  } else if (strncmp(id, "p:", 2) == 0) {
    on_pub_ack(c, id + 2, topic, code, params);
  } else if (strncmp(id, "s:", 2) == 0 || strncmp(id, "j:", 2) == 0) {
    on_joined(c, id, topic, code);
  }
}

static void on_meta(qim_client *c, json_t *meta) {
  const char *id = json_string_value(json_object_get(meta, "id"));
  if (!id || !qim__client_wait_take(c, id)) return;
  json_t *sub = json_object_get(meta, "sub");
  if (strncmp(id, "g:", 2) == 0)
    on_members(c, sub);
  else if (strcmp(id, "ss") == 0 || strcmp(id, "rb") == 0)
    on_sessions(c, id, sub);
}

void qim__client_session_frame(qim_client *c, const char *text, size_t len) {
  json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
  json_t *v;
  if (!json_is_object(m)) {
    json_decref(m);
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
    return;
  }
  if ((v = json_object_get(m, "ctrl")) && json_is_object(v)) {
    on_ctrl(c, v);
  } else if ((v = json_object_get(m, "sync")) && json_is_object(v)) {
    on_sync_page(c, v);
  } else if ((v = json_object_get(m, "meta")) && json_is_object(v)) {
    on_meta(c, v);
  } else if ((v = json_object_get(m, "data")) && json_is_object(v)) {
    if (c->state == QIM_CONNECTION_STATE_ONLINE) start_sync(c); /* the mailbox has it too */
  } else if ((v = json_object_get(m, "pres")) && json_is_object(v)) {
    const char *topic = json_string_value(json_object_get(v, "topic"));
    if (topic && strcmp(topic, "me") == 0 && c->state == QIM_CONNECTION_STATE_ONLINE) start_sync(c);
  } else if (!json_is_object(json_object_get(m, "info"))) {
    fail(c, qim_err_raise(QIM_E_CLIENT_PROTOCOL_FAILURE), true);
  }
  json_decref(m);
}

void qim__client_session_open(qim_client *c) {
  request(c, "hi",
          json_pack("{s:{s:s,s:s,s:s,s:s}}", "hi", "id", "hi", "ver", CLIENT_VERSION, "ua",
                    "qim-client/1", "device", c->device_text));
}

void qim__client_session_lost(qim_client *c) {
  /* A page said more was ready and the rest never came: the host's view is behind. */
  if (c->sync_more) qim__client_emit_failed(c, qim_err_raise(QIM_E_CLIENT_SYNC_INCOMPLETE));
  c->syncing = c->sync_more = c->sync_dirty = c->rebuilding = c->retry_sync = false;
  uv_timer_stop(&c->retry_timer);
  list_clear(&c->joined, &c->joined_n);
  list_clear(&c->joining, &c->joining_n);
}

void qim__client_session_command(qim_client *c, const qim__client_cmd *cmd) {
  if (cmd->kind == QIM__CMD_CONNECT) {
    qim_free((char *)c->cr.login);
    qim_free((char *)c->cr.password);
    qim_free((char *)c->cr.token);
    c->cr = cmd->cr;
    qim_free(c->token); /* new credentials: the old session's token is not theirs */
    c->token = NULL;
    if (c->conn) qim__client_conn_drop(c, false);
    if (c->state == QIM_CONNECTION_STATE_KICKED)
      qim__client_emit_state(c, QIM_CONNECTION_STATE_DISCONNECTED);
    c->backoff_ms = c->cfg.reconnect_min_ms;
    if (!c->paused)
      qim__client_conn_start(c);
    else
      c->want_online = true; /* the drain starts it */
    return;
  }
  if (cmd->kind == QIM__CMD_FLUSH) {
    flush_pending(c);
    return;
  }
  if (!run_cmd(c, cmd)) defer(c, cmd);
}

void qim__client_session_free(qim_client *c) {
  list_clear(&c->joined, &c->joined_n);
  list_clear(&c->joining, &c->joining_n);
  qim_free(c->deferred);
  c->deferred = NULL;
  c->deferred_n = c->deferred_cap = 0;
}
