/*
 * cursor.c — signed mailbox cursors: the canonical encoding, HMAC-SHA256 signing and checking,
 * the wire token, and opening a cursor for a device that has none.
 *
 * Canonical body (64 bytes, big-endian): u8 version (1) | u128 tenant | u128 user |
 * u128 device | u32 mailbox_shard | u8 lane | u16 shard_epoch | u64 last_applied_seq.
 * signed_token = HMAC-SHA256(key, "qim.mailbox-cursor.v1\0" || body) — the domain string keeps
 * a cursor MAC from ever being valid as any other MAC made with the same key.
 * Token = base64url, no padding, of body || signed_token (96 bytes → 128 characters).
 *
 * A cursor proves which seq the server said a device had covered, for whom; it is not secret.
 * Checking compares in constant time (libsodium). Cursors of older epochs stay valid: whether
 * one still works is decided on its packed 64-bit seq against the lane's floor and watermark
 * (pull.c), never on the epoch in the identity.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"

#define BODY_SIZE 64
#define MAC_SIZE crypto_auth_hmacsha256_BYTES
#define TOKEN_BYTES (BODY_SIZE + MAC_SIZE)
#define CURSOR_VERSION 1
static const char DOMAIN[] = "qim.mailbox-cursor.v1"; /* hashed with its NUL */

static uint8_t *put_be(uint8_t *p, uint64_t v, int width) {
  for (int i = width - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
  return p + width;
}

static uint64_t get_be(const uint8_t *p, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; i++) v = v << 8 | p[i];
  return v;
}

/* The MAC input: domain (with NUL) || body. */
static void mac_input(const qim_cursor_identity *id, qim_mailbox_seq seq, uint8_t out[sizeof DOMAIN + BODY_SIZE]) {
  memcpy(out, DOMAIN, sizeof DOMAIN);
  uint8_t *p = out + sizeof DOMAIN;
  p = put_be(p, CURSOR_VERSION, 1);
  qim_u128_to_be(id->tenant_id.v, p), p += 16;
  qim_u128_to_be(id->user_id.v, p), p += 16;
  qim_u128_to_be(id->device_id.v, p), p += 16;
  p = put_be(p, id->mailbox_shard, 4);
  p = put_be(p, id->lane, 1);
  p = put_be(p, id->shard_epoch, 2);
  put_be(p, seq, 8);
}

void qim_mailbox_cursor_sign(const uint8_t key[QIM_MAILBOX_CURSOR_KEY_SIZE], const qim_cursor_identity *id,
                             qim_mailbox_seq last_applied_seq, qim_mailbox_cursor *out) {
  uint8_t in[sizeof DOMAIN + BODY_SIZE];
  mac_input(id, last_applied_seq, in);
  *out = (qim_mailbox_cursor){.identity = *id, .last_applied_seq = last_applied_seq};
  out->signed_token.p = qim_malloc(MAC_SIZE);
  out->signed_token.n = MAC_SIZE;
  crypto_auth_hmacsha256(out->signed_token.p, in, sizeof in, key);
}

void qim_mailbox_cursor_free(qim_mailbox_cursor *c) {
  if (!c) return;
  qim_free(c->signed_token.p);
  c->signed_token = (qim_bytes){0};
}

int qim_mailbox_cursor_format(const qim_mailbox_cursor *c, char *out, size_t cap) {
  if (c->signed_token.n != MAC_SIZE) return -EINVAL;
  if (cap < QIM_MAILBOX_CURSOR_TOKEN_CAP) return -ENOSPC;
  uint8_t raw[sizeof DOMAIN + BODY_SIZE], token[TOKEN_BYTES];
  mac_input(&c->identity, c->last_applied_seq, raw);
  memcpy(token, raw + sizeof DOMAIN, BODY_SIZE);
  memcpy(token + BODY_SIZE, c->signed_token.p, MAC_SIZE);
  return qim_b64url_encode(token, sizeof token, out, cap);
}

int qim_mailbox_cursor_parse(const char *token, size_t len, qim_mailbox_cursor *out) {
  *out = (qim_mailbox_cursor){0};
  uint8_t raw[TOKEN_BYTES];
  size_t n = 0;
  if (!token || len != QIM_MAILBOX_CURSOR_TOKEN_LEN || qim_b64url_decode(token, len, raw, sizeof raw, &n) < 0 ||
      n != TOKEN_BYTES || raw[0] != CURSOR_VERSION)
    return qim_err_raise(QIM_E_MAILBOX_CURSOR_INVALID);
  const uint8_t *p = raw + 1;
  qim_cursor_identity *id = &out->identity;
  id->tenant_id.v = qim_u128_from_be(p), p += 16;
  id->user_id.v = qim_u128_from_be(p), p += 16;
  id->device_id.v = qim_u128_from_be(p), p += 16;
  id->mailbox_shard = (qim_mailbox_shard_id)get_be(p, 4), p += 4;
  id->lane = (qim_lane_id)get_be(p, 1), p += 1;
  id->shard_epoch = (qim_shard_epoch)get_be(p, 2), p += 2;
  out->last_applied_seq = get_be(p, 8);
  out->signed_token.p = qim_memdup(raw + BODY_SIZE, MAC_SIZE);
  out->signed_token.n = MAC_SIZE;
  return 0;
}

int qim_mailbox_cursor_verify(const uint8_t key[QIM_MAILBOX_CURSOR_KEY_SIZE], const qim_shard_config *shards,
                              const qim_mailbox_cursor *c, const qim_authenticated_actor *actor) {
  if (c->signed_token.n != MAC_SIZE) return qim_err_raise(QIM_E_MAILBOX_CURSOR_INVALID);
  uint8_t in[sizeof DOMAIN + BODY_SIZE];
  mac_input(&c->identity, c->last_applied_seq, in);
  if (crypto_auth_hmacsha256_verify(c->signed_token.p, in, sizeof in, key) != 0)
    return qim_err_raise(QIM_E_MAILBOX_CURSOR_INVALID);
  const qim_cursor_identity *id = &c->identity;
  if (!qim_u128_eq(id->tenant_id.v, actor->tenant_id.v) || !qim_u128_eq(id->user_id.v, actor->user_id.v) ||
      !qim_u128_eq(id->device_id.v, actor->device_id.v) ||
      id->mailbox_shard != qim_shard_of_user(shards, actor->tenant_id, actor->user_id) ||
      id->lane != qim_lane_of_user(shards, actor->tenant_id, actor->user_id))
    return qim_err_raise(QIM_E_MAILBOX_CURSOR_INVALID); /* someone else's, or signed before a reshard */
  return 0;
}

/* ---- opening a cursor -------------------------------------------------------------------------- */

static void open_finish(qim_mailbox_cursor_op *op, int rc) {
  op->status = rc;
  if (rc) op->error.code = rc;
  op->done(op);
}

static void open_watermark(qim_store_req *r) {
  qim_mailbox_cursor_op *op = r->data;
  qim_mailbox *m = op->m_;
  if (r->status) {
    open_finish(op, qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE));
    return;
  }
  const qim_lane_watermark *wm = &op->wm_.out;
  qim_cursor_identity id = {op->actor.tenant_id, op->actor.user_id, op->actor.device_id, wm->shard, wm->lane,
                            qim__mb_identity_epoch(m, wm)};
  qim_mailbox_seq seq = op->from == QIM_MAILBOX_CURSOR_FROM_FLOOR ? (wm->floor ? wm->floor - 1 : 0) : wm->materialized;
  qim_mailbox_cursor_sign(m->opt.cursor_key, &id, seq, &op->cursor);
  open_finish(op, 0);
}

int qim_mailbox_cursor_open(qim_mailbox *m, qim_mailbox_cursor_op *op) {
  if (!op->cq || !op->done) return -EINVAL;
  op->status = 0;
  op->error = (qim_error){0};
  op->cursor = (qim_mailbox_cursor){0};
  op->m_ = m;
  qim_mailbox_shard_id shard = qim_shard_of_user(&m->opt.shards, op->actor.tenant_id, op->actor.user_id);
  qim_lane_id lane = qim_lane_of_user(&m->opt.shards, op->actor.tenant_id, op->actor.user_id);
  int rc = qim__mb_lane_serving(m, shard, lane, &op->error);
  if (rc) return op->status = rc;
  op->wm_ = (qim_store_watermark_get_req){.req = {.cq = op->cq, .done = open_watermark, .data = op},
                                          .shard = shard, .lane = lane};
  rc = m->store->vt->mailboxes.watermark_get(m->store, &op->wm_);
  if (rc) return op->status = op->error.code = qim_err_raise(QIM_E_MAILBOX_UNAVAILABLE);
  return 0;
}

static void open_sync_done(qim_mailbox_cursor_op *op) { op->data = NULL; }

int qim_mailbox_cursor_open_sync(qim_mailbox *m, const qim_authenticated_actor *actor, qim_mailbox_cursor_from from,
                                 qim_mailbox_cursor *out, qim_error *err) {
  qim_cq *cq;
  int rc = qim_cq_new_blocking(&cq);
  if (rc) return rc;
  qim_mailbox_cursor_op op = {.cq = cq, .done = open_sync_done, .data = &op, .actor = *actor, .from = from};
  rc = qim_mailbox_cursor_open(m, &op);
  while (rc == 0 && op.data) qim_cq_wait(cq, -1);
  qim_cq_free(cq);
  if (err) *err = op.error;
  if (rc) return rc;
  *out = op.cursor;
  return op.status;
}
