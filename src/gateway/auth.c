/*
 * auth.c — {hi}, {acc} and {login}: the handshake, account creation with the basic
 * scheme, login by password or token, and the tokens themselves.
 *
 * Passwords are argon2id strings (libsodium crypto_pwhash_str). Hashing and verifying
 * take tens of milliseconds by design, so every acc/login runs as a worker job, never on
 * a loop; a login for an unknown name verifies against a dummy hash so that the answer
 * takes as long as for a known one.
 *
 * Tokens are 81 bytes, sent as standard base64 (Tinode's secret encoding):
 *   u8 version (1) | u128 tenant | u128 user | u64 token_epoch | u64 expires_ms |
 *   HMAC-SHA256(token_key, "qim.token.v1\0" || the 49 bytes before it)
 * A token is valid while unexpired, for its tenant, and while its epoch is not below the
 * user's token_epoch (raising the epoch revokes every older token).
 */
#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

#define TOKEN_SIGNED 49
#define LOGIN_MAX 32
#define PASSWORD_MAX 1024
static const char TOKEN_DOMAIN[] = "qim.token.v1"; /* hashed with its NUL */

/* ---- tokens ------------------------------------------------------------------------------------ */

static void put_be64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

static void token_mac(const uint8_t key[GW_TOKEN_KEY], const uint8_t *signed_part,
                      uint8_t mac[32]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key, GW_TOKEN_KEY);
  crypto_auth_hmacsha256_update(&st, (const uint8_t *)TOKEN_DOMAIN, sizeof TOKEN_DOMAIN);
  crypto_auth_hmacsha256_update(&st, signed_part, TOKEN_SIGNED);
  crypto_auth_hmacsha256_final(&st, mac);
}

void qim__gw_token_seal(const uint8_t key[GW_TOKEN_KEY], uint8_t raw[GW_TOKEN_RAW]) {
  token_mac(key, raw, raw + TOKEN_SIGNED);
}

int qim__gw_token_make(const qim_gateway *g, qim_tenant_id t, qim_user_id u, uint64_t epoch,
                       uint64_t expires_ms, char *out, size_t cap) {
  uint8_t raw[GW_TOKEN_RAW];
  raw[0] = 1;
  qim_u128_to_be(t.v, raw + 1);
  qim_u128_to_be(u.v, raw + 17);
  put_be64(raw + 33, epoch);
  put_be64(raw + 41, expires_ms);
  qim__gw_token_seal(g->d.token_key, raw);
  return qim_b64std_encode(raw, sizeof raw, out, cap);
}

int qim__gw_token_open(const uint8_t key[GW_TOKEN_KEY], uint64_t now_ms, const uint8_t *raw,
                       size_t len, qim_tenant_id tenant, qim_user_id *user, uint64_t *epoch,
                       uint64_t *expires_ms) {
  uint8_t mac[32];
  if (len != GW_TOKEN_RAW || raw[0] != 1) return -EACCES;
  token_mac(key, raw, mac);
  if (crypto_verify_32(mac, raw + TOKEN_SIGNED) != 0) return -EACCES;
  if (!qim_u128_eq(qim_u128_from_be(raw + 1), tenant.v)) return -EACCES;
  uint64_t exp = get_be64(raw + 41);
  if (exp <= now_ms) return -EACCES;
  user->v = qim_u128_from_be(raw + 17);
  *epoch = get_be64(raw + 33);
  *expires_ms = exp;
  return 0;
}

int qim__gw_token_check(const qim_gateway *g, const uint8_t *raw, size_t len, qim_tenant_id tenant,
                        qim_user_id *user, uint64_t *epoch, uint64_t *expires_ms) {
  return qim__gw_token_open(g->d.token_key, qim__gw_now(g), raw, len, tenant, user, epoch,
                            expires_ms);
}

/* ---- {hi} --------------------------------------------------------------------------------------- */

static json_t *hi_params(const qim_gateway *g) {
  const qim_config *c = g->d.cfg;
  return json_pack("{sssssIsIsisisisIsoso}", "ver", "0.25", "build", "qim:0.1.0", "maxMessageSize",
                   (json_int_t)c->max_message_size, "maxSubscriberCount", (json_int_t)c->member_limit,
                   "minTagLength", 2, "maxTagLength", 96, "maxTagCount", 16, "msgDelAge",
                   (json_int_t)(c->msg_delete_age_ms / 1000), "reqCred", json_object(), "maxFileUploadSize",
                   json_integer(0));
}

/* A qim client's stable device id (hi.device) becomes its DeviceId; Tinode clients keep
 * the random per-session one. */
static void hi_device(gw_session *s, const char *dev) {
  uint8_t h[16];
  crypto_generichash(h, sizeof h, (const uint8_t *)dev, strlen(dev), NULL, 0);
  s->device.v = qim_u128_from_be(h);
  if (qim_u128_is_zero(s->device.v)) s->device.v.lo = 1;
  s->device_stable = true;
}

void qim__gw_hi(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_hi *h = &r->msg.u.hi;
  uint32_t v = h->ver ? qim_proto_version_parse(h->ver) : 0;
  if (s->state != GW_NEW) {
    /* A repeated {hi}: the same or no version only refreshes; another version is refused. */
    if (h->ver && h->ver[0] && v != s->ver)
      qim__gw_ctrl(s, r, NULL, 409, "command out of sequence", NULL);
    else
      qim__gw_ctrl(s, r, NULL, 200, "ok", NULL);
  } else if (v == 0) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
  } else if (v < 0x1400) {
    qim__gw_ctrl(s, r, NULL, 505, "version not supported", NULL);
  } else {
    s->ver = v;
    snprintf(s->ua, sizeof s->ua, "%s", h->ua ? h->ua : "");
    if (h->device) hi_device(s, h->device);
    s->state = GW_HI;
    qim__gw_ctrl(s, r, NULL, 201, "created", hi_params(s->loop->gw));
  }
  qim__gw_req_done(r);
}

/* ---- attempts per address ---------------------------------------------------------------------- */

/*
 * Password hashing costs tens of milliseconds of CPU, so acc and login attempts are
 * limited per remote address (login_rate per second, bursts of login_burst) → 429. An
 * address whose slot holds another address takes the slot over only when that bucket is
 * full (idle); otherwise the two share it, which errs on the side of limiting.
 */
static bool attempt_allowed(gw_session *s) {
  const qim_config *c = s->loop->gw->d.cfg;
  const uint8_t *addr = qim_conn_peer_addr(s->conn);
  uint64_t h = 1469598103934665603u;
  for (int i = 0; i < 16; i++) h = (h ^ addr[i]) * 1099511628211u;
  gw_rate *r = &s->loop->rate[h % GW_RATE_SLOTS];
  uint64_t now = qim__gw_now(s->loop->gw);
  double burst = c->login_burst;
  if (r->used) {
    double dt = now > r->at_ms ? (double)(now - r->at_ms) : 0;
    r->tokens += dt * c->login_rate / 1000.0;
    if (r->tokens > burst) r->tokens = burst;
  }
  if (!r->used || (memcmp(r->addr, addr, 16) != 0 && r->tokens >= burst)) {
    memcpy(r->addr, addr, 16);
    r->used = true;
    r->tokens = burst;
  }
  r->at_ms = now;
  if (r->tokens < 1) return false;
  r->tokens -= 1;
  return true;
}

/* ---- credentials --------------------------------------------------------------------------------- */

/* Splits a basic secret "login:password"; lowercases the login. 0, -EINVAL (no colon,
 * sizes beyond any policy), or QIM_E... never: policy is checked by the caller. */
static int split_basic(const uint8_t *sec, size_t n, char *login, size_t lcap, char *pw, size_t pcap) {
  const uint8_t *colon = memchr(sec, ':', n);
  if (!colon) return -EINVAL;
  size_t ln = (size_t)(colon - sec), pn = n - ln - 1;
  if (ln >= lcap || pn >= pcap) return -E2BIG;
  for (size_t i = 0; i < ln; i++) login[i] = (char)tolower(sec[i]);
  login[ln] = '\0';
  memcpy(pw, colon + 1, pn);
  pw[pn] = '\0';
  if (strlen(login) != ln || strlen(pw) != pn) return -EINVAL; /* embedded NUL */
  return 0;
}

/* Tinode's basic policy: the login has min..32 printable characters without ':' or
 * spaces; the password at least password_min_length. */
static bool policy_ok(const qim_config *c, const char *login, const char *pw) {
  size_t ln = strlen(login);
  if (ln < c->login_min_length || ln > LOGIN_MAX) return false;
  for (size_t i = 0; i < ln; i++)
    if ((unsigned char)login[i] <= ' ' || login[i] == 0x7f) return false;
  return strlen(pw) >= c->password_min_length;
}

typedef struct auth_job {
  gw_job j;
  qim_tenant_id tenant;
  char login[LOGIN_MAX + 2];
  char password[PASSWORD_MAX + 1];
  char *public_json, *private_json;
  bool create, do_login, token_scheme;
  uint8_t token_raw[GW_TOKEN_RAW];
  size_t token_len;
  int rc;               /* 0 = the session logs in as `user` (when do_login) */
  qim_user_id user;
  qim_device_id device; /* hi.device's, when device_stable: its login gets a sync cursor */
  bool device_stable;
} auth_job;

static void auth_destroy(gw_job *j) {
  auth_job *a = (auth_job *)j;
  sodium_memzero(a->password, sizeof a->password);
  qim_free(a->public_json);
  qim_free(a->private_json);
}

static void auth_after(gw_job *j) {
  auth_job *a = (auth_job *)j;
  gw_session *s = j->req->s;
  if (a->rc == 0 && a->do_login && qim__gw_session_open(s) && s->state != GW_AUTH)
    qim__gw_session_login(s, a->user);
  qim__gw_job_finish(j);
}

/* Refuses a request with `code` (text `text`, or Tinode's text for the code when NULL):
 * frees the job if one was made and finishes the request. */
static void auth_refuse(gw_session *s, gw_req *r, auth_job *a, int code, const char *text) {
  qim__gw_ctrl(s, r, NULL, code, text ? text : qim_proto_code_text(code), NULL);
  if (a) {
    auth_destroy(&a->j);
    qim_free(a);
  }
  qim__gw_req_done(r);
}

/* Starts the job answering r in the thread pool, for the session's tenant and device. */
static void auth_start(gw_session *s, gw_req *r, auth_job *a, void (*run)(gw_job *)) {
  a->tenant = s->tenant;
  a->device = s->device;
  a->device_stable = s->device_stable;
  a->j.req = r;
  a->j.run = run;
  a->j.after = auth_after;
  a->j.destroy = auth_destroy;
  qim__gw_job_start(s->loop, &a->j);
}

static uint32_t pw_ops(const qim_gateway *g) {
  return g->o.pwhash_opslimit ? g->o.pwhash_opslimit : crypto_pwhash_OPSLIMIT_INTERACTIVE;
}

static size_t pw_mem(const qim_gateway *g) {
  return g->o.pwhash_memlimit ? g->o.pwhash_memlimit : 32u << 20;
}

/* The reply of a successful login: {user, authlvl, token, expires} (+ desc for acc). */
static json_t *login_params(const qim_gateway *g, qim_tenant_id t, qim_user_id u, uint64_t epoch) {
  char name[QIM_TOPIC_NAME_CAP], tok[128], ts[QIM_TIMESTAMP_CAP];
  uint64_t expires = qim__gw_now(g) + g->d.cfg->token_lifetime_ms;
  qim_user_id_format(u, name, sizeof name);
  qim__gw_token_make(g, t, u, epoch, expires, tok, sizeof tok);
  qim_timestamp_format(expires, ts);
  return json_pack("{ssssssss}", "user", name, "authlvl", "auth", "token", tok, "expires", ts);
}

/* A qim device (hi.device) also gets its mailbox cursor at login (sync.c). */
static void login_cursor(const auth_job *a, qim_gateway *g, json_t *params) {
  if (!a->device_stable) return;
  qim_authenticated_actor act = {.tenant_id = a->tenant, .user_id = a->user, .device_id = a->device};
  qim__gw_sync_login_cursor(g, &act, params);
}

static json_t *parse_or_null(const char *s) {
  return s ? json_loads(s, JSON_DECODE_ANY, NULL) : NULL;
}

static json_t *acc_desc(uint64_t now, const char *pub, const char *priv) {
  char ts[QIM_TIMESTAMP_CAP];
  qim_timestamp_format(now, ts);
  json_t *d = json_pack("{sssss{ssss}}", "created", ts, "updated", ts, "defacs", "auth", "JRWPAS", "anon", "N");
  json_t *p = parse_or_null(pub), *q = parse_or_null(priv);
  if (p) json_object_set_new(d, "public", p);
  if (q) json_object_set_new(d, "private", q);
  return d;
}

static int acc_store(auth_job *a, qim_gateway *g, const char *hash, uint64_t now) {
  a->user.v = qim_u128_random();
  qim_store_cred_create_req cr = {.cred = {.tenant_id = a->tenant, .login = a->login, .user_id = a->user,
                                           .secret_hash = (char *)hash}};
  int rc = QIM_STORE_SYNC(g->d.store, accounts.cred_create, &cr);
  if (rc) return rc;
  qim_store_user_create_req ur = {.user = {.tenant_id = a->tenant, .user_id = a->user,
                                           .public_json = a->public_json, .private_json = a->private_json,
                                           .created_at = now, .updated_at = now}};
  return QIM_STORE_SYNC(g->d.store, accounts.user_create, &ur);
}

static void acc_run(gw_job *j) {
  auth_job *a = (auth_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g);
  char hash[crypto_pwhash_STRBYTES];
  int rc = crypto_pwhash_str(hash, a->password, strlen(a->password), pw_ops(g), pw_mem(g)) ? -ENOMEM : 0;
  if (rc == 0) rc = acc_store(a, g, hash, now);
  a->rc = rc;
  if (rc == -EEXIST) {
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 409, "duplicate credential", NULL, now);
    return;
  }
  if (rc) {
    QIM_LOGW(&r->trace, "gateway.acc_failed", "err=%s", qim_err_name(rc));
    qim__gw_out_fail(&j->out, r->msg.id, NULL, rc, now);
    return;
  }
  json_t *params;
  if (a->do_login) {
    params = login_params(g, a->tenant, a->user, 0);
    login_cursor(a, g, params);
  } else {
    char name[QIM_TOPIC_NAME_CAP];
    qim_user_id_format(a->user, name, sizeof name);
    params = json_pack("{ssss}", "user", name, "authlvl", "auth");
  }
  json_object_set_new(params, "desc", acc_desc(now, a->public_json, a->private_json));
  qim__gw_out_ctrl(&j->out, r->msg.id, NULL, a->do_login ? 200 : 201, a->do_login ? "ok" : "created", params,
                   now);
  QIM_LOGI(&r->trace, "gateway.account_created", "login=%s", a->login);
}

/* Serializes desc.public / desc.private for the store; -E2BIG beyond max_message_size. */
static int desc_json(const json_t *v, uint32_t max, char **out) {
  *out = NULL;
  if (!v) return 0;
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!t) return -ENOMEM;
  size_t n = strlen(t);
  char *c = qim_memdup(t, n + 1);
  free(t);
  if (n > max) {
    qim_free(c);
    return -E2BIG;
  }
  *out = c;
  return 0;
}

/* ---- {acc} on one's own account ------------------------------------------------------------- */

/*
 * A password change (scheme basic, secret "login:newpass"; the login empty or the
 * account's own) replaces the credential's hash and raises the user's token_epoch in the
 * same job, so every token made before is refused at its next use; the session that
 * changed it stays logged in and gets a fresh token in the reply (qim extension params
 * token/expires; Tinode answers a bare 200). desc.public / desc.private update the
 * account. Other parts (tags, cred, status, a login change) are not offered.
 */
static void acc_update_run(gw_job *j) {
  auth_job *a = (auth_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g);
  int rc = 0;
  bool password = a->password[0] != '\0';
  if (password && a->login[0]) {
    /* Changing the login is not offered: the name must be the account's own. */
    qim_store_cred_get_req cg = {.tenant_id = a->tenant, .login = a->login};
    rc = QIM_STORE_SYNC(g->d.store, accounts.cred_get, &cg);
    if (rc == 0 && !qim_u128_eq(cg.out.user_id.v, a->user.v)) rc = -EPERM;
    if (rc == -ENOENT) rc = -EPERM;
    qim_store_credential_free(&cg.out);
  }
  if (rc == 0 && password) {
    char hash[crypto_pwhash_STRBYTES];
    rc = crypto_pwhash_str(hash, a->password, strlen(a->password), pw_ops(g), pw_mem(g)) ? -ENOMEM
                                                                                         : 0;
    qim_store_cred_update_req cu = {
        .tenant_id = a->tenant, .user_id = a->user, .secret_hash = hash};
    if (rc == 0) rc = QIM_STORE_SYNC(g->d.store, accounts.cred_update, &cu);
  }
  qim_store_user_update_req uu = {.tenant_id = a->tenant,
                                  .user_id = a->user,
                                  .public_json = a->public_json,
                                  .private_json = a->private_json,
                                  .bump_token_epoch = password,
                                  .now = now};
  if (rc == 0) rc = QIM_STORE_SYNC(g->d.store, accounts.user_update, &uu);
  a->rc = rc;
  if (rc == -EPERM) {
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 501, "not implemented", NULL, now);
  } else if (rc) {
    qim__gw_out_fail(&j->out, r->msg.id, NULL, rc, now);
  } else {
    json_t *params = password ? login_params(g, a->tenant, a->user, uu.out_token_epoch) : NULL;
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", params, now);
    QIM_LOGI(&r->trace, "gateway.account_updated", "password=%d epoch=%llu", password,
             (unsigned long long)uu.out_token_epoch);
  }
}

/* 0, or the ctrl code refusing the update (texts in acc_update). */
static int acc_update_check(gw_session *s, const qim_proto_acc *m) {
  if (s->state != GW_AUTH) return 401;
  if (m->user && strcmp(m->user, "me") != 0 && strcmp(m->user, s->uname) != 0)
    return 403; /* root only in Tinode */
  if (m->scheme && strcmp(m->scheme, "basic") != 0) return 501;
  if (m->tags.n || m->cred.n || m->status || m->desc.has_defacs || m->desc.trusted_data) return 501;
  if (m->scheme && !m->has_secret) return 400;
  if (!m->scheme && !m->desc.public_data && !m->desc.private_data) return 400;
  return 0;
}

static void acc_update(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_acc *m = &r->msg.u.acc;
  const qim_config *c = s->loop->gw->d.cfg;
  int code = acc_update_check(s, m);
  auth_job *a = NULL;
  if (code == 0 && m->scheme && !attempt_allowed(s)) code = 429;
  if (code == 0) {
    a = qim_calloc(1, sizeof *a);
    int rc = 0;
    if (m->scheme) {
      rc = split_basic(m->secret, m->secret_len, a->login, sizeof a->login, a->password,
                       sizeof a->password);
      if (rc == -EINVAL)
        code = 400;
      else if (rc || strlen(a->password) < c->password_min_length || !a->password[0])
        code = 422;
    }
    if (!code && (desc_json(m->desc.public_data, c->max_message_size, &a->public_json) ||
                  desc_json(m->desc.private_data, c->max_message_size, &a->private_json)))
      code = 422;
  }
  if (code) {
    auth_refuse(s, r, a, code, NULL);
    return;
  }
  a->user = s->user;
  auth_start(s, r, a, acc_update_run);
}

void qim__gw_acc(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_acc *m = &r->msg.u.acc;
  qim_gateway *g = s->loop->gw;
  if (!m->user || strncmp(m->user, "new", 3) != 0) {
    acc_update(r); /* no user: one's own account, as in Tinode */
    return;
  }
  if (!m->scheme || strcmp(m->scheme, "basic") != 0) {
    qim__gw_ctrl(s, r, NULL, m->scheme && strncmp(m->scheme, "anon", 4) == 0 ? 501 : 401,
                 m->scheme && strncmp(m->scheme, "anon", 4) == 0 ? "not implemented"
                                                                  : "unknown authentication scheme",
                 NULL);
  } else if (m->login && s->state == GW_AUTH) {
    qim__gw_ctrl(s, r, NULL, 409, "already authenticated", NULL);
  } else if (!m->has_secret) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
  } else if (!attempt_allowed(s)) {
    qim__gw_ctrl(s, r, NULL, 429, "too many requests", NULL);
  } else {
    auth_job *a = qim_calloc(1, sizeof *a);
    const qim_config *c = g->d.cfg;
    int rc = split_basic(m->secret, m->secret_len, a->login, sizeof a->login, a->password, sizeof a->password);
    /* A secret that does not split is malformed; everything else that fails is policy:
     * a login or password out of bounds, a public/private beyond max_message_size. */
    bool malformed = rc == -EINVAL;
    if (rc == 0 && !policy_ok(c, a->login, a->password)) rc = -EPERM;
    if (rc == 0) rc = desc_json(m->desc.public_data, c->max_message_size, &a->public_json);
    if (rc == 0) rc = desc_json(m->desc.private_data, c->max_message_size, &a->private_json);
    if (rc) {
      auth_refuse(s, r, a, malformed ? 400 : 422, NULL);
      return;
    }
    a->create = true;
    a->do_login = m->login;
    auth_start(s, r, a, acc_run);
    return;
  }
  qim__gw_req_done(r);
}

/* ---- {login} --------------------------------------------------------------------------------------- */

/* A hash to verify against when the login does not exist, so that the answer takes as
 * long as for a known login (made by qim_gateway_start). */
void qim__gw_dummy_hash(qim_gateway *g) {
  uint8_t pw[16];
  randombytes_buf(pw, sizeof pw);
  if (crypto_pwhash_str(g->dummy_hash, (const char *)pw, sizeof pw, pw_ops(g), pw_mem(g))) g->dummy_hash[0] = '\0';
}

static void login_basic_run(auth_job *a, qim_gateway *g, const gw_req *r, uint64_t now) {
  qim_store_cred_get_req cg = {.tenant_id = a->tenant, .login = a->login};
  int rc = QIM_STORE_SYNC(g->d.store, accounts.cred_get, &cg);
  const char *hash = rc == 0 ? cg.out.secret_hash : g->dummy_hash;
  bool ok = crypto_pwhash_str_verify(hash, a->password, strlen(a->password)) == 0 && rc == 0;
  if (rc == 0) a->user = cg.out.user_id;
  qim_store_credential_free(&cg.out);
  if (rc && rc != -ENOENT) {
    a->rc = rc;
    qim__gw_out_fail(&a->j.out, r->msg.id, NULL, rc, now);
    return;
  }
  a->rc = ok ? 0 : -EACCES;
}

static void login_run(gw_job *j) {
  auth_job *a = (auth_job *)j;
  qim_gateway *g = j->loop->gw;
  const gw_req *r = j->req;
  uint64_t now = qim__gw_now(g), epoch = 0, expires = 0;
  if (a->token_scheme) {
    a->rc = qim__gw_token_check(g, a->token_raw, a->token_len, a->tenant, &a->user, &epoch, &expires);
  } else {
    login_basic_run(a, g, r, now);
    if (a->j.out.n) return; /* a store failure, already answered */
  }
  qim_store_user_get_req ug = {.tenant_id = a->tenant, .user_id = a->user};
  if (a->rc == 0) {
    int rc = QIM_STORE_SYNC(g->d.store, accounts.user_get, &ug);
    if (rc == 0 && a->token_scheme && epoch < ug.out.token_epoch) rc = -EACCES; /* revoked */
    a->rc = rc == -ENOENT ? -EACCES : rc;
  }
  if (a->rc == -EACCES) {
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 401, "authentication failed", NULL, now);
  } else if (a->rc) {
    qim__gw_out_fail(&j->out, r->msg.id, NULL, a->rc, now);
  } else {
    json_t *params = login_params(g, a->tenant, a->user, ug.out.token_epoch);
    login_cursor(a, g, params);
    qim__gw_out_ctrl(&j->out, r->msg.id, NULL, 200, "ok", params, now);
  }
  qim_store_user_free(&ug.out);
}

void qim__gw_login(gw_req *r) {
  gw_session *s = r->s;
  const qim_proto_login *m = &r->msg.u.login;
  bool basic = m->scheme && strcmp(m->scheme, "basic") == 0;
  bool token = m->scheme && strcmp(m->scheme, "token") == 0;
  if (s->state == GW_AUTH) {
    qim__gw_ctrl(s, r, NULL, 409, "already authenticated", NULL);
  } else if (!basic && !token) {
    qim__gw_ctrl(s, r, NULL, 401, "unknown authentication scheme", NULL);
  } else if (!m->has_secret) {
    qim__gw_ctrl(s, r, NULL, 400, "malformed", NULL);
  } else if (!attempt_allowed(s)) {
    qim__gw_ctrl(s, r, NULL, 429, "too many requests", NULL);
  } else {
    auth_job *a = qim_calloc(1, sizeof *a);
    int rc = 0;
    if (basic) {
      rc = split_basic(m->secret, m->secret_len, a->login, sizeof a->login, a->password, sizeof a->password);
    } else if (m->secret_len == GW_TOKEN_RAW) {
      memcpy(a->token_raw, m->secret, GW_TOKEN_RAW);
      a->token_len = GW_TOKEN_RAW;
    } else {
      rc = -EACCES;
    }
    if (rc) {
      /* A secret that cannot be a credential fails like a wrong one. */
      auth_refuse(s, r, a, 401, "authentication failed");
      return;
    }
    a->do_login = true;
    a->token_scheme = token;
    auth_start(s, r, a, login_run);
    return;
  }
  qim__gw_req_done(r);
}
