/*
 * fuzz_proto.c — libFuzzer harness for the Tinode frame codec (src/gateway/proto.c), every
 * client frame type: hi, acc, login, sub, leave, pub, get, set, del, note, sync.
 *
 * Feeds arbitrary bytes to qim_proto_decode() and checks what must hold for every input:
 *   - a success yields a known kind with bounded id/topic, a failure yields a 400 with a
 *     bounded id and a static reason;
 *   - whatever the decoder produced, the encoder turns it back into valid JSON (the reply
 *     to a bad frame, and for a pub the {data} frame built from its head and content, for
 *     a note with a payload the {info} relaying it), and what it relays is unchanged;
 *   - the decoder reads JSON, not bytes: when the input is JSON, the same tree written
 *     again by jansson (compact, or indented with every non-ASCII character escaped)
 *     decodes to the same message — every decoded field compared — or the same error;
 *   - the pure helpers (modes, timestamps, hi.ver, cmid) round-trip what they accept.
 * Seeds: tests/fuzz/corpus/proto/ (the SDK's frames of PROTOCOL.md, one per frame type
 * and variant, and malformed ones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/proto.h"
#include "qim/clock.h"

/* ---- the decoded message, every field, as bytes (to compare two decodes) ------------- */

static void log_json(fuzz_log *l, const json_t *j) {
  if (!j) {
    fuzz_log_str(l, NULL);
    return;
  }
  char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  FUZZ_CHECK(s != NULL);
  fuzz_log_str(l, s);
  free(s);
}

static void log_bytes(fuzz_log *l, bool has, const uint8_t *p, size_t n) {
  fuzz_log_u64(l, has);
  fuzz_log_u64(l, n);
  fuzz_log_put(l, p, n);
}

static void log_ranges(fuzz_log *l, const qim_proto_ranges *r) {
  fuzz_log_u64(l, r->n);
  for (size_t i = 0; i < r->n; i++) fuzz_log_u64(l, (uint64_t)r->v[i].low << 32 | r->v[i].hi);
}

static void log_tags(fuzz_log *l, const qim_proto_tags *t) {
  fuzz_log_u64(l, t->present);
  fuzz_log_u64(l, t->n);
  for (size_t i = 0; i < t->n; i++) fuzz_log_str(l, t->v[i]);
}

static void log_cred(fuzz_log *l, const qim_proto_cred *c) {
  fuzz_log_str(l, c->meth);
  fuzz_log_str(l, c->val);
  fuzz_log_str(l, c->resp);
  log_json(l, c->params);
}

static void log_creds(fuzz_log *l, const qim_proto_creds *c) {
  fuzz_log_u64(l, c->n);
  for (size_t i = 0; i < c->n; i++) log_cred(l, &c->v[i]);
}

static void log_set_desc(fuzz_log *l, const qim_proto_set_desc *d) {
  uint64_t flags = (uint64_t)d->present | (uint64_t)d->has_defacs << 1;
  fuzz_log_u64(l, flags);
  fuzz_log_u64(l, (uint64_t)d->defacs_auth << 32 | d->defacs_anon);
  log_json(l, d->public_data);
  log_json(l, d->trusted_data);
  log_json(l, d->private_data);
}

static void log_get_opts(fuzz_log *l, const qim_proto_get_opts *o) {
  fuzz_log_u64(l, (uint64_t)o->present | (uint64_t)o->has_ims << 1 | (uint64_t)o->has_ranges << 2);
  fuzz_log_str(l, o->user);
  fuzz_log_str(l, o->topic);
  fuzz_log_u64(l, o->ims_ms);
  fuzz_log_u64(l, o->since);
  fuzz_log_u64(l, o->before);
  fuzz_log_u64(l, o->limit);
  if (o->has_ranges) log_ranges(l, &o->ranges);
}

static void log_get_query(fuzz_log *l, const qim_proto_get_query *q) {
  fuzz_log_u64(l, q->present);
  fuzz_log_u64(l, q->what);
  log_get_opts(l, &q->desc);
  log_get_opts(l, &q->sub);
  log_get_opts(l, &q->data);
  log_get_opts(l, &q->del);
}

static void log_set_query(fuzz_log *l, const qim_proto_set_query *q) {
  fuzz_log_u64(l, q->present);
  fuzz_log_u64(l, q->what);
  log_set_desc(l, &q->desc);
  fuzz_log_u64(l, q->sub.present);
  fuzz_log_str(l, q->sub.user);
  fuzz_log_u64(l, q->sub.mode);
  log_tags(l, &q->tags);
  fuzz_log_u64(l, q->has_cred);
  if (q->has_cred) log_cred(l, &q->cred);
  log_json(l, q->aux);
}

static void log_hi_acc_login(fuzz_log *l, const qim_proto_msg *m) {
  if (m->kind == QIM_PROTO_HI) {
    const qim_proto_hi *h = &m->u.hi;
    const char *s[] = {h->ver, h->ua, h->dev, h->platf, h->lang, h->device};
    for (size_t i = 0; i < 6; i++) fuzz_log_str(l, s[i]);
    fuzz_log_u64(l, h->bkg);
  } else if (m->kind == QIM_PROTO_ACC) {
    const qim_proto_acc *a = &m->u.acc;
    const char *s[] = {a->user, a->scheme, a->token, a->tmpscheme, a->status, a->authlevel};
    for (size_t i = 0; i < 6; i++) fuzz_log_str(l, s[i]);
    log_bytes(l, a->has_secret, a->secret, a->secret_len);
    log_bytes(l, a->has_tmpsecret, a->tmpsecret, a->tmpsecret_len);
    fuzz_log_u64(l, a->login);
    log_set_desc(l, &a->desc);
    log_tags(l, &a->tags);
    log_creds(l, &a->cred);
  } else {
    fuzz_log_str(l, m->u.login.scheme);
    log_bytes(l, m->u.login.has_secret, m->u.login.secret, m->u.login.secret_len);
    log_creds(l, &m->u.login.cred);
  }
}

static void log_payload(fuzz_log *l, const qim_proto_msg *m) {
  switch (m->kind) {
    case QIM_PROTO_HI:
    case QIM_PROTO_ACC:
    case QIM_PROTO_LOGIN:
      log_hi_acc_login(l, m);
      break;
    case QIM_PROTO_SUB:
      fuzz_log_u64(l, m->u.sub.bkg);
      log_set_query(l, &m->u.sub.set);
      log_get_query(l, &m->u.sub.get);
      break;
    case QIM_PROTO_LEAVE:
      fuzz_log_u64(l, m->u.leave.unsub);
      break;
    case QIM_PROTO_PUB:
      fuzz_log_u64(l, (uint64_t)m->u.pub.noecho | (uint64_t)m->u.pub.has_cmid << 1);
      log_json(l, m->u.pub.head);
      log_json(l, m->u.pub.content);
      if (m->u.pub.has_cmid) fuzz_log_put(l, m->u.pub.cmid.b, 16);
      break;
    case QIM_PROTO_GET:
      log_get_query(l, &m->u.get.q);
      break;
    case QIM_PROTO_SET:
      log_set_query(l, &m->u.set.q);
      break;
    case QIM_PROTO_DEL:
      fuzz_log_u64(l, (uint64_t)m->u.del.what | (uint64_t)m->u.del.hard << 8);
      log_ranges(l, &m->u.del.delseq);
      fuzz_log_str(l, m->u.del.user);
      fuzz_log_u64(l, m->u.del.has_cred);
      if (m->u.del.has_cred) log_cred(l, &m->u.del.cred);
      break;
    case QIM_PROTO_NOTE:
      fuzz_log_u64(l, m->u.note.what);
      fuzz_log_u64(l, (uint64_t)m->u.note.seq << 32 | m->u.note.unread);
      fuzz_log_str(l, m->u.note.event);
      log_json(l, m->u.note.payload);
      break;
    case QIM_PROTO_SYNC:
      fuzz_log_str(l, m->u.sync.cursor);
      fuzz_log_u64(l, (uint64_t)m->u.sync.limit << 32 | m->u.sync.max_bytes);
      break;
    default:
      FUZZ_CHECK(!"decoded kind out of range");
  }
}

/* The outcome of one decode: the message, or the error, as bytes. */
static int decode_logged(const char *buf, size_t len, fuzz_log *l) {
  qim_proto_msg m;
  qim_proto_error e;
  int rc = qim_proto_decode(buf, len, 0, &m, &e);
  fuzz_log_u64(l, (uint64_t)(int64_t)rc);
  if (rc == 0) {
    fuzz_log_u64(l, m.kind);
    fuzz_log_str(l, m.id);
    fuzz_log_str(l, m.topic);
    fuzz_log_u64(l, m.extra.present);
    log_json(l, m.extra.attachments);
    fuzz_log_str(l, m.extra.obo);
    fuzz_log_str(l, m.extra.authlevel);
    log_payload(l, &m);
  } else {
    fuzz_log_u64(l, (uint64_t)e.code << 32 | (uint64_t)e.kind << 1 | e.silent);
    fuzz_log_str(l, e.id);
    fuzz_log_str(l, e.topic);
    fuzz_log_str(l, e.field);
    fuzz_log_str(l, e.detail);
  }
  qim_proto_msg_free(&m);
  return rc;
}

/* When the input is JSON, write the same tree again and decode that: same outcome. */
static void check_reserialized(const uint8_t *data, size_t size, fuzz_log *first) {
  json_t *tree = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
  if (!tree) return;
  size_t flags = fuzz_hash(data, size) & 1 ? JSON_COMPACT : JSON_INDENT(2) | JSON_ENSURE_ASCII;
  char *again = json_dumps(tree, flags | JSON_ENCODE_ANY);
  json_decref(tree);
  FUZZ_CHECK(again != NULL);
  fuzz_log second = {0};
  decode_logged(again, strlen(again), &second);
  FUZZ_CHECK(fuzz_log_equal(first, &second));
  fuzz_log_free(&second);
  free(again);
}

/* ---- the encoders on what the decoder produced ---------------------------------------- */

/* The encoder's output must always be one valid JSON object; returns it parsed. */
static json_t *check_frame(char *frame, size_t len) {
  FUZZ_CHECK(frame != NULL);
  FUZZ_CHECK(strlen(frame) == len);
  json_t *j = json_loadb(frame, len, JSON_REJECT_DUPLICATES, NULL);
  FUZZ_CHECK(j != NULL && json_is_object(j));
  qim_free(frame);
  return j;
}

/* What a frame relays (content, payload) arrives unchanged. */
static void check_relayed(json_t *frame, const char *type, const char *key, const json_t *want) {
  json_t *inner = json_object_get(frame, type);
  FUZZ_CHECK(json_is_object(inner));
  if (want) FUZZ_CHECK(json_equal(json_object_get(inner, key), want));
  json_decref(frame);
}

static void check_decoded(const qim_proto_msg *m) {
  FUZZ_CHECK(m->kind > QIM_PROTO_NONE && m->kind <= QIM_PROTO_SYNC);
  FUZZ_CHECK(strlen(m->id) <= QIM_PROTO_NAME_MAX);
  FUZZ_CHECK(!m->topic || strlen(m->topic) <= QIM_PROTO_NAME_MAX);
  size_t len;
  /* The frame is built first, then checked: `len` is set by the builder. */
  char *f = qim_proto_ctrl(m->id, m->topic, 200, "ok", NULL, 0, &len);
  json_decref(check_frame(f, len));
  if (m->kind == QIM_PROTO_PUB) {
    qim_proto_data_frame d = {.topic = m->topic,
                              .from = "usrFuzz",
                              .seq = 1,
                              .head = m->u.pub.head,
                              .content = m->u.pub.content};
    f = qim_proto_data(&d, &len);
    check_relayed(check_frame(f, len), "data", "content", m->u.pub.content);
  }
  if (m->kind == QIM_PROTO_NOTE && m->u.note.payload) {
    qim_proto_info_frame i = {.topic = m->topic,
                              .from = "usrFuzz",
                              .what = "data",
                              .seq = m->u.note.seq,
                              .event = m->u.note.event,
                              .payload = m->u.note.payload};
    f = qim_proto_info(&i, &len);
    check_relayed(check_frame(f, len), "info", "payload", m->u.note.payload);
  }
  if (m->kind == QIM_PROTO_GET && m->u.get.q.data.has_ranges) {
    const qim_proto_ranges *r = &m->u.get.q.data.ranges;
    f = qim_proto_meta_del(m->id, m->topic, 0, 1, r->v, r->n, &len);
    json_decref(check_frame(f, len));
  }
}

static void check_error(const qim_proto_error *e) {
  FUZZ_CHECK(e->code == 400);
  FUZZ_CHECK(strlen(e->id) <= QIM_PROTO_NAME_MAX);
  FUZZ_CHECK(e->detail && e->detail[0]);
  size_t len;
  char *f = qim_proto_ctrl_error(e, 0, &len);
  json_decref(check_frame(f, len));
}

/* The pure helpers must not crash on any bytes, and what they accept round-trips. */
static void fuzz_helpers(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  uint32_t mode;
  char text[QIM_MODE_STR_CAP];
  if (qim_proto_mode_parse(s, size, &mode) == 0) {
    int n = qim_proto_mode_format(mode, text, sizeof text);
    uint32_t back;
    FUZZ_CHECK(n >= 0 && qim_proto_mode_parse(text, (size_t)n, &back) == 0 && back == mode);
  }
  if (qim_proto_mode_apply(s, size, 0x2F, &mode) == 0) FUZZ_CHECK(mode <= QIM_MODE_UNSET);
  uint64_t ms;
  if (qim_proto_ts_parse(s, size, &ms) == 0) {
    char ts[QIM_TIMESTAMP_CAP];
    qim_timestamp_format(ms, ts);
    FUZZ_CHECK(strlen(ts) == 24);
    uint64_t back;
    FUZZ_CHECK(qim_proto_ts_parse(ts, 24, &back) == 0 && back == ms);
  }
  qim_client_message_id cmid;
  if (qim_proto_cmid_parse(s, size, &cmid) == 0) {
    char again[QIM_PROTO_CMID_CAP];
    qim_proto_cmid_format(&cmid, again);
    FUZZ_CHECK(size == QIM_PROTO_CMID_LEN && memcmp(again, s, size) == 0);
  }
  char ver[64];
  size_t n = size < sizeof ver - 1 ? size : sizeof ver - 1;
  memcpy(ver, s, n);
  ver[n] = '\0';
  (void)qim_proto_version_parse(ver);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  qim_proto_msg m;
  qim_proto_error e;
  if (qim_proto_decode((const char *)data, size, 0, &m, &e) == 0)
    check_decoded(&m);
  else
    check_error(&e);
  qim_proto_msg_free(&m);
  fuzz_log first = {0};
  decode_logged((const char *)data, size, &first);
  check_reserialized(data, size, &first);
  fuzz_log_free(&first);
  if (size <= 64) fuzz_helpers(data, size);
  return 0;
}
