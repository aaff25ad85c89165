/*
 * sqlite_accounts.c — users, credentials and API keys in the SQLite backend.
 *
 * Password hashing happens before a credential reaches the store (the argon2id string
 * is stored as given), so every operation here is a small single-statement write or a
 * point read. Storage failures surface as -errno: accounts have no domain error of
 * their own for "unavailable".
 */
#include <errno.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "store/sqlite_int.h"

#define ACCOUNT_ERRORS 0, 0, 0

/* ---- users ------------------------------------------------------------------------------- */

static int user_create_exec(sq_conn *c, qim_store_req *base) {
  qim_store_user_create_req *r = (void *)base;
  const qim_store_user *u = &r->user;
  sqlite3_stmt *st =
      sq_prep(c,
              "INSERT INTO users(tenant, user, public_json, private_json, created_at,"
              " updated_at, token_epoch) VALUES(?, ?, ?, ?, ?, ?, ?)");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, u->tenant_id.v);
  sq_bind_u128(st, 2, u->user_id.v);
  sq_bind_text(st, 3, u->public_json);
  sq_bind_text(st, 4, u->private_json);
  sq_bind_u64(st, 5, u->created_at);
  sq_bind_u64(st, 6, u->updated_at);
  sq_bind_u64(st, 7, u->token_epoch);
  return sq_run(c, st); /* -EEXIST when the id is taken */
}

const sq_op sq_op_user_create = {"accounts.user_create", true, NULL,
                                 user_create_exec,       NULL, ACCOUNT_ERRORS};

static int user_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_user_get_req *r = (void *)base;
  r->out = (qim_store_user){0};
  return 0;
}

static void user_get_discard(qim_store_req *base) {
  qim_store_user_get_req *r = (void *)base;
  qim_store_user_free(&r->out);
}

static int user_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_user_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT public_json, private_json, created_at, updated_at, token_epoch"
                             " FROM users WHERE tenant=? AND user=?");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, r->tenant_id.v);
  sq_bind_u128(st, 2, r->user_id.v);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc < 0 ? rc : -ENOENT;
  qim_store_user *u = &r->out;
  u->tenant_id = r->tenant_id;
  u->user_id = r->user_id;
  u->public_json = sq_col_text(st, 0);
  u->private_json = sq_col_text(st, 1);
  u->created_at = sq_col_u64(st, 2);
  u->updated_at = sq_col_u64(st, 3);
  u->token_epoch = sq_col_u64(st, 4);
  return 0;
}

const sq_op sq_op_user_get = {"accounts.user_get", false,         user_get_prepare, user_get_exec,
                              user_get_discard,    ACCOUNT_ERRORS};

static int user_update_exec(sq_conn *c, qim_store_req *base) {
  qim_store_user_update_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE users SET public_json=coalesce(?3, public_json),"
                             " private_json=coalesce(?4, private_json),"
                             " token_epoch=token_epoch + ?5, updated_at=?6"
                             " WHERE tenant=?1 AND user=?2 RETURNING token_epoch");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, r->tenant_id.v);
  sq_bind_u128(st, 2, r->user_id.v);
  sq_bind_text(st, 3, r->public_json);
  sq_bind_text(st, 4, r->private_json);
  sqlite3_bind_int(st, 5, r->bump_token_epoch ? 1 : 0);
  sq_bind_u64(st, 6, r->now);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc < 0 ? rc : -ENOENT;
  r->out_token_epoch = sq_col_u64(st, 0);
  return sq_run(c, st); /* finish the statement so the update is complete */
}

const sq_op sq_op_user_update = {"accounts.user_update", true, NULL,
                                 user_update_exec,       NULL, ACCOUNT_ERRORS};

/* ---- credentials ---------------------------------------------------------------------------- */

static int cred_create_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_cred_create_req *r = (void *)base;
  return r->cred.login && r->cred.secret_hash ? 0 : -EINVAL;
}

static int cred_create_exec(sq_conn *c, qim_store_req *base) {
  qim_store_cred_create_req *r = (void *)base;
  const qim_store_credential *cr = &r->cred;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO credentials(tenant, login, user, secret_hash)"
                             " VALUES(?, ?, ?, ?)");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, cr->tenant_id.v);
  sq_bind_text(st, 2, cr->login);
  sq_bind_u128(st, 3, cr->user_id.v);
  sq_bind_text(st, 4, cr->secret_hash);
  return sq_run(c, st); /* -EEXIST when the login is taken */
}

const sq_op sq_op_cred_create = {"accounts.cred_create", true, cred_create_prepare,
                                 cred_create_exec,       NULL, ACCOUNT_ERRORS};

static int cred_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_cred_get_req *r = (void *)base;
  r->out = (qim_store_credential){0};
  return r->login ? 0 : -EINVAL;
}

static void cred_get_discard(qim_store_req *base) {
  qim_store_cred_get_req *r = (void *)base;
  qim_store_credential_free(&r->out);
}

static int cred_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_cred_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT user, secret_hash FROM credentials"
                             " WHERE tenant=? AND login=?");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, r->tenant_id.v);
  sq_bind_text(st, 2, r->login);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc < 0 ? rc : -ENOENT;
  r->out.tenant_id = r->tenant_id;
  r->out.login = qim_strdup(r->login);
  r->out.user_id.v = sq_col_u128(st, 0);
  r->out.secret_hash = sq_col_text(st, 1);
  return 0;
}

const sq_op sq_op_cred_get = {"accounts.cred_get", false,         cred_get_prepare, cred_get_exec,
                              cred_get_discard,    ACCOUNT_ERRORS};

static int cred_update_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_cred_update_req *r = (void *)base;
  return r->secret_hash ? 0 : -EINVAL;
}

static int cred_update_exec(sq_conn *c, qim_store_req *base) {
  qim_store_cred_update_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "UPDATE credentials SET secret_hash=? WHERE tenant=? AND user=?");
  if (!st) return sq_last_error(c);
  sq_bind_text(st, 1, r->secret_hash);
  sq_bind_u128(st, 2, r->tenant_id.v);
  sq_bind_u128(st, 3, r->user_id.v);
  int rc = sq_run(c, st);
  if (rc) return rc;
  return sq_changes(c) ? 0 : -ENOENT;
}

const sq_op sq_op_cred_update = {"accounts.cred_update", true, cred_update_prepare,
                                 cred_update_exec,       NULL, ACCOUNT_ERRORS};

/* ---- API keys -------------------------------------------------------------------------------- */

static int apikey_put_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_apikey_put_req *r = (void *)base;
  return r->api_key ? 0 : -EINVAL;
}

static int apikey_put_exec(sq_conn *c, qim_store_req *base) {
  qim_store_apikey_put_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO apikeys(api_key, tenant) VALUES(?, ?)"
                             " ON CONFLICT(api_key) DO UPDATE SET tenant = excluded.tenant");
  if (!st) return sq_last_error(c);
  sq_bind_text(st, 1, r->api_key);
  sq_bind_u128(st, 2, r->tenant_id.v);
  return sq_run(c, st);
}

const sq_op sq_op_apikey_put = {"accounts.apikey_put", true, apikey_put_prepare,
                                apikey_put_exec,       NULL, ACCOUNT_ERRORS};

static int apikey_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_apikey_get_req *r = (void *)base;
  return r->api_key ? 0 : -EINVAL;
}

static int apikey_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_apikey_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "SELECT tenant FROM apikeys WHERE api_key=?");
  if (!st) return sq_last_error(c);
  sq_bind_text(st, 1, r->api_key);
  int rc = sq_step(c, st);
  if (rc <= 0) return rc < 0 ? rc : -ENOENT;
  r->out_tenant_id.v = sq_col_u128(st, 0);
  return 0;
}

const sq_op sq_op_apikey_get = {"accounts.apikey_get", false, apikey_get_prepare,
                                apikey_get_exec,       NULL,  ACCOUNT_ERRORS};
