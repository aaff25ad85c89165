/*
 * proto_enc.c — encoding of server frames: {ctrl}, {data}, {meta}, {pres}, {info} and
 * qim's {sync} reply, as compact JSON written straight into one growing buffer.
 *
 * Why not build a json_t tree and dump it: a {data} frame is serialized once per
 * message and then shared by every receiver, and sync/history pages splice bodies
 * that are already JSON text; writing bytes directly avoids a tree per frame and lets
 * the caller pass stored content through untouched. Application JSON that arrives as
 * json_t (params, head, content, public, private...) is dumped in place by jansson.
 * Key order follows Tinode's Go structs so frames read like Tinode's own.
 */
#include <errno.h>
#include <string.h>

#include "gateway/proto_int.h"
#include "qim/clock.h"
#include "qim/mem.h"

/* ---- the buffer --------------------------------------------------------------------- */

void qim__pbuf_init(qim__pbuf *b, size_t cap_hint) {
  b->len = 0;
  b->cap = cap_hint < 64 ? 64 : cap_hint;
  b->p = qim_trymalloc(b->cap);
  b->oom = !b->p;
  if (b->oom) b->cap = 0;
}

/* Makes room for `extra` more bytes plus the final NUL; false after a failure. */
static bool pbuf_reserve(qim__pbuf *b, size_t extra) {
  if (b->oom) return false;
  if (extra < b->cap - b->len) return true;
  size_t need = b->len + extra + 1, cap = b->cap;
  if (need < b->len) goto oom; /* size_t overflow */
  while (cap < need) {
    if (cap > SIZE_MAX / 2) goto oom;
    cap *= 2;
  }
  char *p = qim_trymalloc(cap);
  if (!p) goto oom;
  memcpy(p, b->p, b->len);
  qim_free(b->p);
  b->p = p;
  b->cap = cap;
  return true;
oom:
  b->oom = true;
  return false;
}

void qim__pbuf_put(qim__pbuf *b, const char *s, size_t n) {
  if (!n || !pbuf_reserve(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

void qim__pbuf_puts(qim__pbuf *b, const char *s) {
  qim__pbuf_put(b, s, strlen(s));
}

void qim__pbuf_putc(qim__pbuf *b, char c) {
  qim__pbuf_put(b, &c, 1);
}

void qim__pbuf_u64(qim__pbuf *b, uint64_t v) {
  char tmp[20];
  size_t n = sizeof tmp;
  do tmp[--n] = (char)('0' + v % 10);
  while (v /= 10);
  qim__pbuf_put(b, tmp + n, sizeof tmp - n);
}

/*
 * Length of the well-formed UTF-8 sequence at `p` (2-4), or 0 when it is not one
 * (overlong forms, surrogates and values above U+10FFFF included). Stops at the
 * first bad byte, so it never reads past a NUL terminator.
 */
static size_t utf8_seq_len(const unsigned char *p) {
  unsigned c = p[0];
  size_t n;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else
    return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return n;
}

/* Writes the escape for an ASCII byte that cannot appear raw in a JSON string. */
static void put_escape(qim__pbuf *b, unsigned char c) {
  /* Pairs of (byte, letter) for the two-character escapes JSON has. */
  static const char pairs[] = "\"\"\\\\\bb\ff\nn\rr\tt";
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i + 1 < sizeof pairs; i += 2) {
    if ((unsigned char)pairs[i] == c) {
      char esc[2] = {'\\', pairs[i + 1]};
      qim__pbuf_put(b, esc, 2);
      return;
    }
  }
  char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
  qim__pbuf_put(b, esc, 6);
}

void qim__pbuf_jstr(qim__pbuf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s, *run = p;
  qim__pbuf_putc(b, '"');
  while (*p) {
    if (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') {
      p++;
      continue;
    }
    qim__pbuf_put(b, (const char *)run, (size_t)(p - run));
    size_t n = *p < 0x80 ? 0 : utf8_seq_len(p);
    if (*p < 0x80)
      put_escape(b, *p++);
    else if (n)
      qim__pbuf_put(b, (const char *)p, n), p += n;
    else
      qim__pbuf_put(b, "\\ufffd", 6), p++;
    run = p;
  }
  qim__pbuf_put(b, (const char *)run, (size_t)(p - run));
  qim__pbuf_putc(b, '"');
}

static int dump_cb(const char *buffer, size_t size, void *data) {
  qim__pbuf *b = data;
  qim__pbuf_put(b, buffer, size);
  return b->oom ? -1 : 0;
}

void qim__pbuf_json(qim__pbuf *b, const json_t *j) {
  if (b->oom) return;
  if (json_dump_callback(j, dump_cb, b, JSON_COMPACT | JSON_ENCODE_ANY) != 0) b->oom = true;
}

char *qim__pbuf_finish(qim__pbuf *b, size_t *len) {
  if (b->oom || !pbuf_reserve(b, 0)) {
    qim_free(b->p);
    b->p = NULL;
    return NULL;
  }
  b->p[b->len] = '\0';
  if (len) *len = b->len;
  char *out = b->p;
  b->p = NULL;
  return out;
}

/* ---- field writers ------------------------------------------------------------------ */

/* `"k":`, preceded by a comma unless it opens an object. */
static void key(qim__pbuf *b, const char *k) {
  if (b->oom) return;
  if (b->len && b->p[b->len - 1] != '{') qim__pbuf_putc(b, ',');
  qim__pbuf_putc(b, '"');
  qim__pbuf_puts(b, k);
  qim__pbuf_put(b, "\":", 2);
}

/* Opens `{"name":{` for a frame. */
static void frame_open(qim__pbuf *b, const char *name) {
  qim__pbuf_put(b, "{\"", 2);
  qim__pbuf_puts(b, name);
  qim__pbuf_put(b, "\":{", 3);
}

static char *frame_close(qim__pbuf *b, size_t *len) {
  qim__pbuf_put(b, "}}", 2);
  return qim__pbuf_finish(b, len);
}

static void f_str_always(qim__pbuf *b, const char *k, const char *s) {
  key(b, k);
  qim__pbuf_jstr(b, s ? s : "");
}

static void f_str(qim__pbuf *b, const char *k, const char *s) {
  if (s && *s) f_str_always(b, k, s);
}

static void f_u64_always(qim__pbuf *b, const char *k, uint64_t v) {
  key(b, k);
  qim__pbuf_u64(b, v);
}

static void f_u64(qim__pbuf *b, const char *k, uint64_t v) {
  if (v) f_u64_always(b, k, v);
}

/* A 64-bit value as a decimal string: JavaScript numbers cannot hold it exactly. */
static void f_u64_str(qim__pbuf *b, const char *k, uint64_t v) {
  key(b, k);
  qim__pbuf_putc(b, '"');
  qim__pbuf_u64(b, v);
  qim__pbuf_putc(b, '"');
}

static void f_true(qim__pbuf *b, const char *k, bool v) {
  if (!v) return;
  key(b, k);
  qim__pbuf_put(b, "true", 4);
}

static void f_ts_always(qim__pbuf *b, const char *k, uint64_t ms) {
  char ts[QIM_TIMESTAMP_CAP];
  qim_timestamp_format(ms, ts);
  key(b, k);
  qim__pbuf_putc(b, '"');
  qim__pbuf_put(b, ts, QIM_TIMESTAMP_CAP - 1);
  qim__pbuf_putc(b, '"');
}

static void f_ts(qim__pbuf *b, const char *k, uint64_t ms) {
  if (ms) f_ts_always(b, k, ms);
}

/* Any JSON value; NULL is omitted (Go omits only nil interfaces). */
static void f_json(qim__pbuf *b, const char *k, const json_t *j) {
  if (!j) return;
  key(b, k);
  qim__pbuf_json(b, j);
}

/* Like f_json but an empty object is omitted too (params, head). */
static void f_json_nonempty(qim__pbuf *b, const char *k, const json_t *j) {
  if (j && !(json_is_object(j) && json_object_size(j) == 0)) f_json(b, k, j);
}

static void f_mode(qim__pbuf *b, const char *k, uint32_t mode) {
  char s[QIM_MODE_STR_CAP];
  if (mode == QIM_MODE_UNSET) return;
  qim_proto_mode_format(mode & QIM_MODE_BITS, s, sizeof s);
  f_str_always(b, k, s);
}

static void f_acs(qim__pbuf *b, const char *k, const qim_proto_acs *acs) {
  if (!acs) return;
  key(b, k);
  qim__pbuf_putc(b, '{');
  f_mode(b, "want", acs->want);
  f_mode(b, "given", acs->given);
  f_mode(b, "mode", acs->mode);
  qim__pbuf_putc(b, '}');
}

static void f_defacs(qim__pbuf *b, const qim_proto_defacs *d) {
  if (!d) return;
  key(b, "defacs");
  qim__pbuf_putc(b, '{');
  f_mode(b, "auth", d->auth);
  f_mode(b, "anon", d->anon);
  qim__pbuf_putc(b, '}');
}

static void f_seen(qim__pbuf *b, uint64_t when_ms, const char *ua) {
  if (!when_ms && !(ua && *ua)) return;
  key(b, "seen");
  qim__pbuf_putc(b, '{');
  f_ts(b, "when", when_ms);
  f_str(b, "ua", ua);
  qim__pbuf_putc(b, '}');
}

/* [{low,hi}...]; hi 0 is omitted; nothing at all when n is 0. */
static void f_ranges(qim__pbuf *b, const char *k, const qim_proto_range *v, size_t n) {
  if (!n) return;
  key(b, k);
  qim__pbuf_putc(b, '[');
  for (size_t i = 0; i < n; i++) {
    if (i) qim__pbuf_putc(b, ',');
    qim__pbuf_putc(b, '{');
    f_u64_always(b, "low", v[i].low);
    f_u64(b, "hi", v[i].hi);
    qim__pbuf_putc(b, '}');
  }
  qim__pbuf_putc(b, ']');
}

/* A value given as a tree or as serialized text (trusted; see qim_proto_data_frame). */
static void f_json_or_raw(qim__pbuf *b, const char *k, const json_t *j, const char *raw, size_t raw_len) {
  if (j) {
    f_json(b, k, j);
  } else if (raw && raw_len) {
    key(b, k);
    qim__pbuf_put(b, raw, raw_len);
  }
}

static void f_head(qim__pbuf *b, const json_t *j, const char *raw, size_t raw_len) {
  if (j) f_json_nonempty(b, "head", j);
  else if (!(raw_len == 2 && memcmp(raw, "{}", 2) == 0)) f_json_or_raw(b, "head", NULL, raw, raw_len);
}

/* ---- frames ---------------------------------------------------------------------------- */

char *qim_proto_ctrl(const char *id, const char *topic, int code, const char *text,
                     const json_t *params, uint64_t ts_ms, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160);
  frame_open(&b, "ctrl");
  f_str(&b, "id", id);
  f_str(&b, "topic", topic);
  key(&b, "code");
  int64_t c = code; /* a negative code is never valid, but the frame stays well-formed */
  if (c < 0) qim__pbuf_putc(&b, '-');
  qim__pbuf_u64(&b, (uint64_t)(c < 0 ? -c : c));
  f_str(&b, "text", text);
  f_json_nonempty(&b, "params", params);
  f_ts_always(&b, "ts", ts_ms);
  return frame_close(&b, len);
}

char *qim_proto_ctrl_error(const qim_proto_error *e, uint64_t ts_ms, size_t *len) {
  return qim_proto_ctrl(e->id, e->topic, e->code, e->text, NULL, ts_ms, len);
}

char *qim_proto_data(const qim_proto_data_frame *d, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160 + d->content_raw_len);
  frame_open(&b, "data");
  f_str_always(&b, "topic", d->topic);
  f_str(&b, "from", d->from);
  f_ts_always(&b, "ts", d->ts_ms);
  f_u64_always(&b, "seq", d->seq);
  f_head(&b, d->head, d->head_raw, d->head_raw_len);
  f_json_or_raw(&b, "content", d->content, d->content_raw, d->content_raw_len);
  return frame_close(&b, len);
}

qim_proto_acs qim_proto_acs_unset(void) {
  return (qim_proto_acs){QIM_MODE_UNSET, QIM_MODE_UNSET, QIM_MODE_UNSET};
}

/* {"meta":{"id":..,"topic":..,"ts":..  — the caller adds its part and closes. */
static void meta_open(qim__pbuf *b, const char *id, const char *topic, uint64_t ts_ms) {
  frame_open(b, "meta");
  f_str(b, "id", id);
  f_str_always(b, "topic", topic);
  f_ts(b, "ts", ts_ms);
}

static void put_desc(qim__pbuf *b, const qim_proto_topic_desc *d) {
  qim__pbuf_putc(b, '{');
  f_ts(b, "created", d->created_ms);
  f_ts(b, "updated", d->updated_ms);
  f_ts(b, "touched", d->touched_ms);
  f_str(b, "state", d->state);
  f_true(b, "online", d->online);
  f_true(b, "chan", d->chan);
  f_seen(b, d->seen_when_ms, d->seen_ua);
  f_defacs(b, d->defacs);
  f_acs(b, "acs", d->acs);
  f_u64(b, "seq", d->seq);
  f_u64(b, "read", d->read);
  f_u64(b, "recv", d->recv);
  f_u64(b, "clear", d->clear);
  f_u64(b, "subcnt", d->subcnt);
  f_json(b, "public", d->public_data);
  f_json(b, "trusted", d->trusted_data);
  f_json(b, "private", d->private_data);
  qim__pbuf_putc(b, '}');
}

char *qim_proto_meta_desc(const char *id, const char *topic, uint64_t ts_ms,
                          const qim_proto_topic_desc *desc, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 512);
  meta_open(&b, id, topic, ts_ms);
  key(&b, "desc");
  put_desc(&b, desc);
  return frame_close(&b, len);
}

static void put_sub(qim__pbuf *b, const qim_proto_topic_sub *s) {
  qim__pbuf_putc(b, '{');
  f_ts(b, "updated", s->updated_ms);
  f_ts(b, "deleted", s->deleted_ms);
  f_true(b, "online", s->online);
  f_acs(b, "acs", s->acs);
  f_u64(b, "read", s->read);
  f_u64(b, "recv", s->recv);
  f_json(b, "public", s->public_data);
  f_json(b, "trusted", s->trusted_data);
  f_json(b, "private", s->private_data);
  f_str(b, "user", s->user);
  f_str(b, "topic", s->topic);
  f_ts(b, "touched", s->touched_ms);
  f_u64(b, "seq", s->seq);
  f_u64(b, "clear", s->clear);
  f_u64(b, "subcnt", s->subcnt);
  f_seen(b, s->seen_when_ms, s->seen_ua);
  qim__pbuf_putc(b, '}');
}

char *qim_proto_meta_sub(const char *id, const char *topic, uint64_t ts_ms,
                         const qim_proto_topic_sub *subs, size_t n, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 256 + n * 256);
  meta_open(&b, id, topic, ts_ms);
  key(&b, "sub");
  qim__pbuf_putc(&b, '[');
  for (size_t i = 0; i < n; i++) {
    if (i) qim__pbuf_putc(&b, ',');
    put_sub(&b, &subs[i]);
  }
  qim__pbuf_putc(&b, ']');
  return frame_close(&b, len);
}

char *qim_proto_meta_del(const char *id, const char *topic, uint64_t ts_ms, uint32_t clear,
                         const qim_proto_range *delseq, size_t n, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160 + n * 24);
  meta_open(&b, id, topic, ts_ms);
  key(&b, "del");
  qim__pbuf_putc(&b, '{');
  f_u64(&b, "clear", clear);
  f_ranges(&b, "delseq", delseq, n);
  qim__pbuf_putc(&b, '}');
  return frame_close(&b, len);
}

char *qim_proto_meta_tags(const char *id, const char *topic, uint64_t ts_ms,
                          const char *const *tags, size_t n, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160 + n * 32);
  meta_open(&b, id, topic, ts_ms);
  key(&b, "tags");
  qim__pbuf_putc(&b, '[');
  for (size_t i = 0; i < n; i++) {
    if (i) qim__pbuf_putc(&b, ',');
    qim__pbuf_jstr(&b, tags[i] ? tags[i] : "");
  }
  qim__pbuf_putc(&b, ']');
  return frame_close(&b, len);
}

char *qim_proto_meta_cred(const char *id, const char *topic, uint64_t ts_ms,
                          const qim_proto_cred_info *creds, size_t n, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160 + n * 64);
  meta_open(&b, id, topic, ts_ms);
  key(&b, "cred");
  qim__pbuf_putc(&b, '[');
  for (size_t i = 0; i < n; i++) {
    if (i) qim__pbuf_putc(&b, ',');
    qim__pbuf_putc(&b, '{');
    f_str(&b, "meth", creds[i].meth);
    f_str(&b, "val", creds[i].val);
    f_true(&b, "done", creds[i].done);
    qim__pbuf_putc(&b, '}');
  }
  qim__pbuf_putc(&b, ']');
  return frame_close(&b, len);
}

char *qim_proto_meta_aux(const char *id, const char *topic, uint64_t ts_ms, const json_t *aux,
                         size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 256);
  meta_open(&b, id, topic, ts_ms);
  f_json(&b, "aux", aux);
  return frame_close(&b, len);
}

char *qim_proto_pres(const qim_proto_pres_frame *p, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160 + p->delseq_n * 24);
  frame_open(&b, "pres");
  f_str_always(&b, "topic", p->topic);
  f_str(&b, "src", p->src);
  f_str_always(&b, "what", p->what);
  f_str(&b, "ua", p->ua);
  f_u64(&b, "seq", p->seq);
  f_u64(&b, "clear", p->clear);
  f_ranges(&b, "delseq", p->delseq, p->delseq_n);
  f_str(&b, "tgt", p->tgt);
  f_str(&b, "act", p->act);
  if ((p->dacs_want && *p->dacs_want) || (p->dacs_given && *p->dacs_given)) {
    key(&b, "dacs");
    qim__pbuf_putc(&b, '{');
    f_str(&b, "want", p->dacs_want);
    f_str(&b, "given", p->dacs_given);
    qim__pbuf_putc(&b, '}');
  }
  return frame_close(&b, len);
}

char *qim_proto_info(const qim_proto_info_frame *i, size_t *len) {
  qim__pbuf b;
  qim__pbuf_init(&b, 160);
  frame_open(&b, "info");
  f_str_always(&b, "topic", i->topic);
  f_str(&b, "src", i->src);
  f_str(&b, "from", i->from);
  f_str_always(&b, "what", i->what);
  f_u64(&b, "seq", i->seq);
  f_str(&b, "event", i->event);
  f_json(&b, "payload", i->payload);
  return frame_close(&b, len);
}

static void put_sync_entry(qim__pbuf *b, const qim_proto_sync_entry *e) {
  qim__pbuf_putc(b, '{');
  f_u64_str(b, "event_id", e->event_id);
  f_str_always(b, "type", qim_proto_event_type_name(e->type));
  f_str(b, "topic", e->topic);
  f_u64(b, "seq", e->seq);
  f_str(b, "from", e->from);
  f_ts(b, "ts", e->ts_ms);
  if (e->cmid) {
    char cmid[QIM_PROTO_CMID_CAP];
    qim_proto_cmid_format(e->cmid, cmid);
    f_str_always(b, "cmid", cmid);
  }
  if (e->body_included) {
    f_head(b, e->head, e->head_raw, e->head_raw_len);
    f_json_or_raw(b, "content", e->content, e->content_raw, e->content_raw_len);
  }
  qim__pbuf_putc(b, '}');
}

char *qim_proto_sync_reply(const qim_proto_sync_frame *s, size_t *len) {
  qim__pbuf b;
  size_t hint = 256;
  for (size_t i = 0; i < s->n; i++) hint += 192 + s->entries[i].content_raw_len + s->entries[i].head_raw_len;
  qim__pbuf_init(&b, hint);
  frame_open(&b, "sync");
  f_str(&b, "id", s->id);
  key(&b, "entries");
  qim__pbuf_putc(&b, '[');
  for (size_t i = 0; i < s->n; i++) {
    if (i) qim__pbuf_putc(&b, ',');
    put_sync_entry(&b, &s->entries[i]);
  }
  qim__pbuf_putc(&b, ']');
  f_u64_str(&b, "covered", s->covered);
  f_u64_str(&b, "watermark", s->watermark);
  f_true(&b, "more", s->more);
  f_str(&b, "cursor", s->cursor);
  return frame_close(&b, len);
}
