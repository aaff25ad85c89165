/*
 * proto.c — decoding of client frames (Tinode JSON plus qim's extensions) into typed
 * qim_proto_msg structs. See proto.h for the rules; docs/protocol.md for the fields.
 *
 * Shape of the code: a bracket scan bounds the depth, jansson parses strictly, the
 * envelope picks the one payload key, and one small decoder per message reads its
 * fields through typed getters. Every getter treats JSON null as "absent" and fails
 * with -EINVAL plus a static field name and reason, which end up in qim_proto_error.
 * Decoded strings and json_t pointers borrow from the parsed tree; the few buffers we
 * make (lists, decoded secrets) come from a per-message allocation chain that
 * qim_proto_msg_free() wipes and releases in one go.
 */
#include <errno.h>
#include <stdalign.h>
#include <string.h>

#include "gateway/proto_int.h"
#include "qim/err.h"
#include "qim/mem.h"

/* One allocation owned by a decoded message; `data` is max-aligned. */
struct qim__proto_block {
  qim__proto_block *next;
  size_t size;
  alignas(max_align_t) unsigned char data[];
};

/* Decoder state: the message being filled and the error to report. */
typedef struct dec {
  qim_proto_msg *m;
  qim_proto_error *err;
} dec;

/* Zeroed memory owned by the message. Sizes are bounded by the QIM_PROTO_*_MAX
 * limits (at most a few tens of KB), so this is an ordinary aborting allocation. */
static void *msg_alloc(qim_proto_msg *m, size_t n) {
  qim__proto_block *b = qim_calloc(1, sizeof *b + n);
  b->size = n;
  b->next = m->_blocks;
  m->_blocks = b;
  return b->data;
}

static int fail(dec *d, const char *field, const char *detail) {
  d->err->field = field;
  d->err->detail = detail;
  return -EINVAL;
}

/* A semantic failure of a {note}: Tinode drops those without replying. */
static int fail_silent(dec *d, const char *field, const char *detail) {
  d->err->silent = true;
  return fail(d, field, detail);
}

#define TRY(expr)            \
  do {                       \
    int rc_ = (expr);        \
    if (rc_ < 0) return rc_; \
  } while (0)

/* ---- typed getters --------------------------------------------------------------- */

/* Member `key` of `obj`; NULL when absent or JSON null. */
static json_t *member(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return v && !json_is_null(v) ? v : NULL;
}

static int check_str(dec *d, json_t *v, const char *key, size_t max, const char **out) {
  if (!json_is_string(v)) return fail(d, key, "not a string");
  if (json_string_length(v) > max) return fail(d, key, "string too long");
  *out = json_string_value(v);
  return 0;
}

static int get_str(dec *d, json_t *obj, const char *key, size_t max, const char **out) {
  json_t *v = member(obj, key);
  *out = NULL;
  return v ? check_str(d, v, key, max, out) : 0;
}

static int get_bool(dec *d, json_t *obj, const char *key, bool *out) {
  json_t *v = member(obj, key);
  *out = false;
  if (!v) return 0;
  if (!json_is_boolean(v)) return fail(d, key, "not a boolean");
  *out = json_is_true(v);
  return 0;
}

static int check_uint(dec *d, json_t *v, const char *key, uint32_t *out) {
  if (!json_is_integer(v)) return fail(d, key, "not an integer");
  json_int_t x = json_integer_value(v);
  if (x < 0) return fail(d, key, "negative");
  if (x > QIM_PROTO_INT_MAX) return fail(d, key, "out of range");
  *out = (uint32_t)x;
  return 0;
}

static int get_uint(dec *d, json_t *obj, const char *key, uint32_t *out) {
  json_t *v = member(obj, key);
  *out = 0;
  return v ? check_uint(d, v, key, out) : 0;
}

static int get_object(dec *d, json_t *obj, const char *key, json_t **out) {
  json_t *v = member(obj, key);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_object(v)) return fail(d, key, "not an object");
  *out = v;
  return 0;
}

static int get_array(dec *d, json_t *obj, const char *key, size_t max, json_t **out) {
  json_t *v = member(obj, key);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_array(v)) return fail(d, key, "not an array");
  if (json_array_size(v) > max) return fail(d, key, "too many entries");
  *out = v;
  return 0;
}

/* An access-mode string parsed as an absolute mode; QIM_MODE_UNSET when absent. */
static int get_mode(dec *d, json_t *obj, const char *key, uint32_t *out) {
  const char *s;
  *out = QIM_MODE_UNSET;
  TRY(get_str(d, obj, key, QIM_PROTO_NAME_MAX, &s));
  if (s && qim_proto_mode_parse(s, strlen(s), out) < 0) return fail(d, key, "bad access mode");
  return 0;
}

/* A standard-base64 byte string (Go []byte), decoded into message-owned memory. */
static int get_secret(dec *d, json_t *obj, const char *key, bool *has, const uint8_t **out,
                      size_t *out_len) {
  const char *s;
  *has = false;
  *out = NULL;
  *out_len = 0;
  TRY(get_str(d, obj, key, QIM_PROTO_SECRET_MAX, &s));
  if (!s) return 0;
  size_t n = strlen(s);
  uint8_t *buf = msg_alloc(d->m, n / 4 * 3 + 1);
  if (qim__proto_b64std_decode(s, n, buf, out_len) < 0) return fail(d, key, "bad base64");
  *has = true;
  *out = buf;
  return 0;
}

/* ---- shared sub-objects ------------------------------------------------------------ */

static int get_ranges(dec *d, json_t *obj, const char *key, bool *has, qim_proto_ranges *out) {
  json_t *arr;
  *has = false;
  TRY(get_array(d, obj, key, QIM_PROTO_RANGES_MAX, &arr));
  if (!arr) return 0;
  qim_proto_range *v = msg_alloc(d->m, (json_array_size(arr) + 1) * sizeof *v);
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    if (!json_is_object(e)) return fail(d, key, "range not an object");
    TRY(get_uint(d, e, "low", &v[i].low));
    TRY(get_uint(d, e, "hi", &v[i].hi));
  }
  *has = true;
  out->v = v;
  out->n = json_array_size(arr);
  return 0;
}

static int get_tags(dec *d, json_t *obj, qim_proto_tags *out) {
  json_t *arr;
  TRY(get_array(d, obj, "tags", QIM_PROTO_TAGS_MAX, &arr));
  if (!arr) return 0;
  const char **v = msg_alloc(d->m, (json_array_size(arr) + 1) * sizeof *v);
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    TRY(check_str(d, e, "tags", QIM_PROTO_STR_MAX, &v[i]));
  }
  out->present = true;
  out->v = v;
  out->n = json_array_size(arr);
  return 0;
}

/* One MsgCredClient object. */
static int dec_cred(dec *d, json_t *o, const char *key, qim_proto_cred *out) {
  if (!json_is_object(o)) return fail(d, key, "not an object");
  TRY(get_str(d, o, "meth", QIM_PROTO_NAME_MAX, &out->meth));
  TRY(get_str(d, o, "val", QIM_PROTO_STR_MAX, &out->val));
  TRY(get_str(d, o, "resp", QIM_PROTO_STR_MAX, &out->resp));
  return get_object(d, o, "params", &out->params);
}

/* `cred` as an array of MsgCredClient (acc, login). */
static int get_creds(dec *d, json_t *obj, qim_proto_creds *out) {
  json_t *arr;
  TRY(get_array(d, obj, "cred", QIM_PROTO_CREDS_MAX, &arr));
  if (!arr) return 0;
  qim_proto_cred *v = msg_alloc(d->m, (json_array_size(arr) + 1) * sizeof *v);
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    TRY(dec_cred(d, e, "cred", &v[i]));
  }
  out->v = v;
  out->n = json_array_size(arr);
  return 0;
}

/* `cred` as a single object (set, del). */
static int get_cred_one(dec *d, json_t *obj, bool *has, qim_proto_cred *out) {
  json_t *v = member(obj, "cred");
  *has = false;
  if (!v) return 0;
  TRY(dec_cred(d, v, "cred", out));
  *has = true;
  return 0;
}

static int get_set_desc(dec *d, json_t *obj, qim_proto_set_desc *out) {
  json_t *o, *defacs;
  out->defacs_auth = out->defacs_anon = QIM_MODE_UNSET;
  TRY(get_object(d, obj, "desc", &o));
  if (!o) return 0;
  out->present = true;
  TRY(get_object(d, o, "defacs", &defacs));
  if (defacs) {
    out->has_defacs = true;
    TRY(get_mode(d, defacs, "auth", &out->defacs_auth));
    TRY(get_mode(d, defacs, "anon", &out->defacs_anon));
  }
  out->public_data = member(o, "public");
  out->trusted_data = member(o, "trusted");
  out->private_data = member(o, "private");
  return 0;
}

static int get_set_sub(dec *d, json_t *obj, qim_proto_set_sub *out) {
  json_t *o;
  out->mode = QIM_MODE_UNSET;
  TRY(get_object(d, obj, "sub", &o));
  if (!o) return 0;
  out->present = true;
  TRY(get_str(d, o, "user", QIM_PROTO_NAME_MAX, &out->user));
  return get_mode(d, o, "mode", &out->mode);
}

/* MsgSetQuery read from `o` (the {set} payload itself, or sub.set). */
static int dec_set_query(dec *d, json_t *o, qim_proto_set_query *q) {
  q->present = true;
  TRY(get_set_desc(d, o, &q->desc));
  TRY(get_set_sub(d, o, &q->sub));
  TRY(get_tags(d, o, &q->tags));
  TRY(get_cred_one(d, o, &q->has_cred, &q->cred));
  TRY(get_object(d, o, "aux", &q->aux));
  q->what = (q->desc.present ? QIM_PROTO_WHAT_DESC : 0) |
            (q->sub.present ? QIM_PROTO_WHAT_SUB : 0) |
            (q->tags.present ? QIM_PROTO_WHAT_TAGS : 0) | (q->has_cred ? QIM_PROTO_WHAT_CRED : 0) |
            (q->aux ? QIM_PROTO_WHAT_AUX : 0);
  return 0;
}

static int get_opts(dec *d, json_t *obj, const char *key, qim_proto_get_opts *out) {
  json_t *o;
  const char *ims;
  TRY(get_object(d, obj, key, &o));
  if (!o) return 0;
  out->present = true;
  TRY(get_str(d, o, "user", QIM_PROTO_NAME_MAX, &out->user));
  TRY(get_str(d, o, "topic", QIM_PROTO_NAME_MAX, &out->topic));
  TRY(get_str(d, o, "ims", QIM_PROTO_NAME_MAX, &ims));
  if (ims) {
    if (qim_proto_ts_parse(ims, strlen(ims), &out->ims_ms) < 0)
      return fail(d, "ims", "bad timestamp");
    out->has_ims = true;
  }
  TRY(get_uint(d, o, "since", &out->since));
  TRY(get_uint(d, o, "before", &out->before));
  TRY(get_uint(d, o, "limit", &out->limit));
  TRY(get_str(d, o, "cursor", QIM_PROTO_STR_MAX, &out->cursor));
  return get_ranges(d, o, "ranges", &out->has_ranges, &out->ranges);
}

/* The bits of a space-separated `what` list; unknown words are ignored (Tinode). */
static uint32_t parse_get_what(const char *s) {
  static const char *const words[] = {"desc", "sub", "data", "tags", "del", "cred", "aux"};
  uint32_t bits = 0;
  while (s && *s) {
    size_t n = strcspn(s, " ");
    for (unsigned i = 0; i < sizeof words / sizeof words[0]; i++)
      if (strlen(words[i]) == n && !memcmp(words[i], s, n)) bits |= 1u << i;
    s += n;
    s += strspn(s, " ");
  }
  return bits;
}

/* MsgGetQuery read from `o` (the {get} payload itself, or sub.get). */
static int dec_get_query(dec *d, json_t *o, qim_proto_get_query *q) {
  const char *what;
  q->present = true;
  TRY(get_str(d, o, "what", QIM_PROTO_STR_MAX, &what));
  q->what = parse_get_what(what);
  TRY(get_opts(d, o, "desc", &q->desc));
  TRY(get_opts(d, o, "sub", &q->sub));
  TRY(get_opts(d, o, "data", &q->data));
  return get_opts(d, o, "del", &q->del);
}

/* ---- one decoder per message ------------------------------------------------------- */

static int dec_hi(dec *d, json_t *p) {
  qim_proto_hi *h = &d->m->u.hi;
  TRY(get_str(d, p, "ver", QIM_PROTO_NAME_MAX, &h->ver));
  TRY(get_str(d, p, "ua", QIM_PROTO_STR_MAX, &h->ua));
  TRY(get_str(d, p, "dev", QIM_PROTO_STR_MAX, &h->dev));
  TRY(get_str(d, p, "platf", QIM_PROTO_NAME_MAX, &h->platf));
  TRY(get_str(d, p, "lang", QIM_PROTO_NAME_MAX, &h->lang));
  TRY(get_bool(d, p, "bkg", &h->bkg));
  return get_str(d, p, "device", QIM_PROTO_NAME_MAX, &h->device);
}

static int dec_acc(dec *d, json_t *p) {
  qim_proto_acc *a = &d->m->u.acc;
  TRY(get_str(d, p, "user", QIM_PROTO_NAME_MAX, &a->user));
  TRY(get_str(d, p, "scheme", QIM_PROTO_NAME_MAX, &a->scheme));
  TRY(get_secret(d, p, "secret", &a->has_secret, &a->secret, &a->secret_len));
  TRY(get_str(d, p, "token", QIM_PROTO_STR_MAX, &a->token));
  TRY(get_str(d, p, "tmpscheme", QIM_PROTO_NAME_MAX, &a->tmpscheme));
  TRY(get_secret(d, p, "tmpsecret", &a->has_tmpsecret, &a->tmpsecret, &a->tmpsecret_len));
  TRY(get_str(d, p, "status", QIM_PROTO_NAME_MAX, &a->status));
  TRY(get_str(d, p, "authlevel", QIM_PROTO_NAME_MAX, &a->authlevel));
  TRY(get_bool(d, p, "login", &a->login));
  TRY(get_set_desc(d, p, &a->desc));
  TRY(get_tags(d, p, &a->tags));
  return get_creds(d, p, &a->cred);
}

static int dec_login(dec *d, json_t *p) {
  qim_proto_login *l = &d->m->u.login;
  TRY(get_str(d, p, "scheme", QIM_PROTO_NAME_MAX, &l->scheme));
  TRY(get_secret(d, p, "secret", &l->has_secret, &l->secret, &l->secret_len));
  return get_creds(d, p, &l->cred);
}

static int dec_sub(dec *d, json_t *p) {
  qim_proto_sub *s = &d->m->u.sub;
  json_t *set, *get;
  s->set.desc.defacs_auth = s->set.desc.defacs_anon = QIM_MODE_UNSET;
  s->set.sub.mode = QIM_MODE_UNSET;
  TRY(get_bool(d, p, "bkg", &s->bkg));
  TRY(get_object(d, p, "set", &set));
  if (set) TRY(dec_set_query(d, set, &s->set));
  TRY(get_object(d, p, "get", &get));
  if (get) TRY(dec_get_query(d, get, &s->get));
  return 0;
}

static int dec_leave(dec *d, json_t *p) {
  return get_bool(d, p, "unsub", &d->m->u.leave.unsub);
}

static int dec_pub(dec *d, json_t *p) {
  qim_proto_pub *u = &d->m->u.pub;
  const char *cmid;
  TRY(get_bool(d, p, "noecho", &u->noecho));
  TRY(get_object(d, p, "head", &u->head));
  u->content = member(p, "content");
  TRY(get_str(d, p, "cmid", QIM_PROTO_NAME_MAX, &cmid));
  if (cmid) {
    int rc = qim_proto_cmid_parse(cmid, strlen(cmid), &u->cmid);
    if (rc < 0) {
      fail(d, "cmid", "bad client message id");
      return rc;
    }
    u->has_cmid = true;
  }
  return 0;
}

static int dec_get(dec *d, json_t *p) {
  TRY(dec_get_query(d, p, &d->m->u.get.q));
  return d->m->u.get.q.what ? 0 : fail(d, "what", "nothing to get");
}

static int dec_set(dec *d, json_t *p) {
  qim_proto_set_query *q = &d->m->u.set.q;
  q->desc.defacs_auth = q->desc.defacs_anon = QIM_MODE_UNSET;
  q->sub.mode = QIM_MODE_UNSET;
  TRY(dec_set_query(d, p, q));
  return q->what ? 0 : fail(d, "", "nothing to set");
}

static int dec_del(dec *d, json_t *p) {
  static const char *const whats[] = {"msg", "topic", "sub", "user", "cred"};
  qim_proto_del *x = &d->m->u.del;
  const char *what;
  bool has_delseq;
  TRY(get_str(d, p, "what", QIM_PROTO_NAME_MAX, &what));
  x->what = what && *what ? 0 : QIM_PROTO_DEL_MSG;
  for (unsigned i = 0; !x->what && i < sizeof whats / sizeof whats[0]; i++)
    if (!strcmp(what, whats[i])) x->what = (qim_proto_del_what)(QIM_PROTO_DEL_MSG + i);
  if (!x->what) return fail(d, "what", "unknown del target");
  TRY(get_bool(d, p, "hard", &x->hard));
  TRY(get_ranges(d, p, "delseq", &has_delseq, &x->delseq));
  TRY(get_str(d, p, "user", QIM_PROTO_NAME_MAX, &x->user));
  TRY(get_cred_one(d, p, &x->has_cred, &x->cred));
  bool needs_topic = x->what != QIM_PROTO_DEL_USER && x->what != QIM_PROTO_DEL_CRED;
  return needs_topic && !d->m->topic ? fail(d, "topic", "missing") : 0;
}

/* The gates of PROTOCOL.md §10 that need no server state. */
static int note_gates(dec *d, const qim_proto_note *n) {
  switch (n->what) {
    case QIM_PROTO_NOTE_KP:
    case QIM_PROTO_NOTE_KPA:
    case QIM_PROTO_NOTE_KPV:
      return n->seq ? fail_silent(d, "seq", "typing notice with a seq") : 0;
    case QIM_PROTO_NOTE_READ:
    case QIM_PROTO_NOTE_RECV:
      return n->seq ? 0 : fail_silent(d, "seq", "receipt without a seq");
    case QIM_PROTO_NOTE_DATA:
      return n->payload ? 0 : fail_silent(d, "payload", "data note without a payload");
    default:
      return 0;
  }
}

static int dec_note(dec *d, json_t *p) {
  static const char *const whats[] = {"kp", "kpa", "kpv", "read", "recv", "call", "data"};
  qim_proto_note *n = &d->m->u.note;
  const char *what;
  TRY(get_str(d, p, "what", QIM_PROTO_NAME_MAX, &what));
  TRY(get_uint(d, p, "seq", &n->seq));
  TRY(get_uint(d, p, "unread", &n->unread));
  TRY(get_str(d, p, "event", QIM_PROTO_NAME_MAX, &n->event));
  n->payload = member(p, "payload");
  for (unsigned i = 0; what && i < sizeof whats / sizeof whats[0]; i++)
    if (!strcmp(what, whats[i])) n->what = (qim_proto_note_what)(QIM_PROTO_NOTE_KP + i);
  if (!n->what) return fail_silent(d, "what", "unknown note");
  if (!d->m->topic) return fail_silent(d, "topic", "missing");
  return note_gates(d, n);
}

static int dec_sync(dec *d, json_t *p) {
  qim_proto_sync *s = &d->m->u.sync;
  TRY(get_str(d, p, "cursor", QIM_PROTO_STR_MAX, &s->cursor));
  TRY(get_uint(d, p, "limit", &s->limit));
  return get_uint(d, p, "max_bytes", &s->max_bytes);
}

/* ---- envelope --------------------------------------------------------------------- */

typedef int (*dec_fn)(dec *d, json_t *payload);

static const struct payload_kind {
  const char *key;
  qim_proto_kind kind;
  dec_fn fn;
  bool needs_topic; /* missing topic → 400 (del checks its own; note's is silent) */
} payload_kinds[] = {
    {"hi", QIM_PROTO_HI, dec_hi, false},          {"acc", QIM_PROTO_ACC, dec_acc, false},
    {"login", QIM_PROTO_LOGIN, dec_login, false}, {"sub", QIM_PROTO_SUB, dec_sub, true},
    {"leave", QIM_PROTO_LEAVE, dec_leave, true},  {"pub", QIM_PROTO_PUB, dec_pub, true},
    {"get", QIM_PROTO_GET, dec_get, true},        {"set", QIM_PROTO_SET, dec_set, true},
    {"del", QIM_PROTO_DEL, dec_del, false},       {"note", QIM_PROTO_NOTE, dec_note, false},
    {"sync", QIM_PROTO_SYNC, dec_sync, false},
};
#define N_PAYLOAD_KINDS (sizeof payload_kinds / sizeof payload_kinds[0])

/*
 * True when no {} / [] nesting in `p` goes deeper than `max`. Brackets inside strings
 * do not count; the scan is linear and never fails on malformed input (jansson
 * rejects that afterwards).
 */
static bool depth_ok(const char *p, size_t n, unsigned max) {
  unsigned depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max) return false;
    } else if ((c == '}' || c == ']') && depth > 0) {
      depth--;
    }
  }
  return true;
}

/* Copies a bounded string member into `out` when it is one; used for error replies. */
static void copy_name(json_t *obj, const char *key, char out[QIM_PROTO_NAME_CAP]) {
  json_t *v = json_object_get(obj, key);
  if (json_is_string(v) && json_string_length(v) <= QIM_PROTO_NAME_MAX)
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
}

/* Finds the payload key; *count says how many known keys were present (non-null). */
static const struct payload_kind *find_payload(json_t *root, json_t **payload, size_t *count) {
  const struct payload_kind *found = NULL;
  *count = 0;
  for (size_t i = 0; i < N_PAYLOAD_KINDS; i++) {
    json_t *v = member(root, payload_kinds[i].key);
    if (!v) continue;
    if (!found) found = &payload_kinds[i], *payload = v;
    (*count)++;
  }
  return found;
}

static int dec_extra(dec *d, json_t *root) {
  qim_proto_extra *x = &d->m->extra;
  json_t *o;
  TRY(get_object(d, root, "extra", &o));
  if (!o) return 0;
  x->present = true;
  TRY(get_array(d, o, "attachments", QIM_PROTO_ATTACHMENTS_MAX, &x->attachments));
  size_t i;
  json_t *e;
  const char *s;
  if (x->attachments) {
    json_array_foreach(x->attachments, i, e) {
      TRY(check_str(d, e, "attachments", QIM_PROTO_STR_MAX, &s));
    }
  }
  TRY(get_str(d, o, "obo", QIM_PROTO_NAME_MAX, &x->obo));
  return get_str(d, o, "authlevel", QIM_PROTO_NAME_MAX, &x->authlevel);
}

/* id and topic of the payload. A note has no id and never gets one back. */
static int dec_id_topic(dec *d, const struct payload_kind *pk, json_t *p) {
  const char *id = NULL;
  if (pk->kind != QIM_PROTO_NOTE) {
    TRY(get_str(d, p, "id", QIM_PROTO_NAME_MAX, &id));
    if (id) memcpy(d->m->id, id, strlen(id) + 1);
  }
  TRY(get_str(d, p, "topic", QIM_PROTO_NAME_MAX, &d->m->topic));
  if (d->m->topic && !*d->m->topic) d->m->topic = NULL;
  if (pk->needs_topic && !d->m->topic) return fail(d, "topic", "missing");
  return 0;
}

/* Everything after jansson parsed the frame into `root`. */
static int dec_envelope(dec *d, json_t *root) {
  json_t *payload = NULL;
  size_t count;
  if (!json_is_object(root)) return fail(d, "", "not an object");
  const struct payload_kind *pk = find_payload(root, &payload, &count);
  if (!pk) return fail(d, "", "no known payload key");
  if (!json_is_object(payload)) return fail(d, pk->key, "payload not an object");
  /* From here on the reply can name the request: copy its id and topic first. */
  d->err->kind = pk->kind;
  if (pk->kind != QIM_PROTO_NOTE) copy_name(payload, "id", d->err->id);
  copy_name(payload, "topic", d->err->topic);
  if (count > 1) return fail(d, "", "several payload keys");
  TRY(dec_id_topic(d, pk, payload));
  TRY(dec_extra(d, root));
  d->m->kind = pk->kind;
  return pk->fn(d, payload);
}

static void error_init(qim_proto_error *err) {
  memset(err, 0, sizeof *err);
  err->code = 400;
  err->text = "malformed";
  err->field = "";
  err->detail = "";
}

int qim_proto_decode(const char *buf, size_t len, unsigned max_depth, qim_proto_msg *out,
                     qim_proto_error *err) {
  dec d = {out, err};
  memset(out, 0, sizeof *out);
  error_init(err);
  if (!depth_ok(buf, len, max_depth ? max_depth : QIM_PROTO_DEPTH_DEFAULT))
    return fail(&d, "", "too deep");
  json_error_t jerr;
  memset(&jerr, 0, sizeof jerr); /* some early jansson failures leave it unset */
  out->_root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  if (!out->_root) {
    /* jansson rarely says "out of memory": most failed allocations return with no
     * error text at all, which a real syntax error never does. Some still surface as
     * syntax errors; those frames get a 400 instead, which is acceptable under OOM. */
    if (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0]) {
      err->detail = "out of memory";
      return -ENOMEM;
    }
    bool dup = json_error_code(&jerr) == json_error_duplicate_key;
    return fail(&d, "", dup ? "duplicate key" : "unparsable");
  }
  int rc = dec_envelope(&d, out->_root);
  if (rc < 0) qim_proto_msg_free(out);
  return rc;
}

void qim_proto_msg_free(qim_proto_msg *m) {
  if (!m) return;
  for (qim__proto_block *b = m->_blocks, *next; b; b = next) {
    next = b->next;
    explicit_bzero(b->data, b->size); /* decoded secrets live here */
    qim_free(b);
  }
  if (m->_root) json_decref(m->_root);
  memset(m, 0, sizeof *m);
}
