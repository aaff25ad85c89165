/*
 * tframe.c — Tinode JSON frames for qim-bench (see tframe.h).
 */
#include "tframe.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qim/ids.h"

/* ---- a bounded output cursor ------------------------------------------------------------------
 */

typedef struct out {
  char *p;
  size_t cap, len;
  bool full;
} out;

static void put(out *o, const char *s, size_t n) {
  if (o->full || o->len + n + 1 > o->cap) {
    o->full = true;
    return;
  }
  memcpy(o->p + o->len, s, n);
  o->len += n;
  o->p[o->len] = '\0';
}

static void puts_(out *o, const char *s) {
  put(o, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void putf(out *o, const char *f, ...) {
  if (o->full) return;
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(o->p + o->len, o->cap - o->len, f, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= o->cap - o->len) {
    o->full = true;
    return;
  }
  o->len += (size_t)n;
}

/* A JSON string literal of `s`. */
static void put_str(out *o, const char *s) {
  put(o, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      put(o, e, 2);
    } else if (c < 0x20) {
      putf(o, "\\u%04x", c);
    } else {
      put(o, (const char *)&c, 1);
    }
  }
  put(o, "\"", 1);
}

static int done(out *o) {
  return o->full ? -ENOSPC : (int)o->len;
}

static out start(char *p, size_t cap) {
  out o = {p, cap, 0, cap == 0};
  if (cap) p[0] = '\0';
  return o;
}

/* ---- builders ---------------------------------------------------------------------------------
 */

void qim_tframe_cmid(const uint8_t b[16], char out_[QIM_TFRAME_CMID_LEN + 1]) {
  if (qim_b64url_encode(b, 16, out_, QIM_TFRAME_CMID_LEN + 1) < 0) out_[0] = '\0';
}

int qim_tframe_hi(char *p, size_t cap, const char *id) {
  out o = start(p, cap);
  puts_(&o, "{\"hi\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"ver\":\"" QIM_TFRAME_VER "\",\"ua\":\"qim-bench\",\"platf\":\"web\"}}");
  return done(&o);
}

/* "secret": standard base64 of login:password. */
static void put_basic_secret(out *o, const char *login, const char *password) {
  char plain[512], b64[700];
  int n = snprintf(plain, sizeof plain, "%s:%s", login, password);
  if (n < 0 || (size_t)n >= sizeof plain ||
      qim_b64std_encode((const uint8_t *)plain, (size_t)n, b64, sizeof b64) < 0) {
    o->full = true;
    return;
  }
  puts_(o, ",\"secret\":");
  put_str(o, b64);
}

int qim_tframe_acc(char *p, size_t cap, const char *id, const char *login, const char *password) {
  out o = start(p, cap);
  puts_(&o, "{\"acc\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"user\":\"new\",\"scheme\":\"basic\"");
  put_basic_secret(&o, login, password);
  puts_(&o, ",\"login\":true,\"desc\":{\"public\":{\"fn\":");
  put_str(&o, login);
  puts_(&o, "}}}}");
  return done(&o);
}

int qim_tframe_login_basic(char *p, size_t cap, const char *id, const char *login,
                           const char *password) {
  out o = start(p, cap);
  puts_(&o, "{\"login\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"scheme\":\"basic\"");
  put_basic_secret(&o, login, password);
  puts_(&o, "}}");
  return done(&o);
}

int qim_tframe_login_token(char *p, size_t cap, const char *id, const char *token) {
  out o = start(p, cap);
  puts_(&o, "{\"login\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"scheme\":\"token\",\"secret\":");
  put_str(&o, token);
  puts_(&o, "}}");
  return done(&o);
}

int qim_tframe_sub(char *p, size_t cap, const char *id, const char *topic) {
  out o = start(p, cap);
  puts_(&o, "{\"sub\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"topic\":");
  put_str(&o, topic);
  if (strncmp(topic, "new", 3) == 0)
    puts_(&o, ",\"set\":{\"desc\":{\"public\":{\"fn\":\"bench\"}}}");
  puts_(&o, "}}");
  return done(&o);
}

int qim_tframe_get_data(char *p, size_t cap, const char *id, const char *topic, uint64_t before,
                        uint32_t limit) {
  out o = start(p, cap);
  puts_(&o, "{\"get\":{\"id\":");
  put_str(&o, id);
  puts_(&o, ",\"topic\":");
  put_str(&o, topic);
  puts_(&o, ",\"what\":\"data\",\"data\":{");
  if (before) putf(&o, "\"before\":%llu,", (unsigned long long)before);
  putf(&o, "\"limit\":%u}}}", limit);
  return done(&o);
}

int qim_tframe_pub(char *p, size_t cap, const qim_tframe_pub_args *a) {
  out o = start(p, cap);
  puts_(&o, "{\"pub\":{");
  if (a->id) {
    puts_(&o, "\"id\":");
    put_str(&o, a->id);
    puts_(&o, ",");
  }
  puts_(&o, "\"topic\":");
  put_str(&o, a->topic);
  if (a->noecho) puts_(&o, ",\"noecho\":true");
  if (a->cmid) {
    puts_(&o, ",\"cmid\":");
    put_str(&o, a->cmid);
  }
  size_t content_at = o.len + strlen(",\"content\":");
  putf(&o, ",\"content\":{\"qbt\":%llu,\"qbs\":%u,\"qbn\":%llu,\"txt\":\"",
       (unsigned long long)a->due_us, a->sender, (unsigned long long)a->n);
  /* Pad so the content object (up to and including its closing brace) is content_size. */
  size_t have = o.len - content_at + 2;
  size_t pad = a->content_size > have ? a->content_size - have : 0;
  if (!o.full && o.len + pad + 5 <= o.cap) {
    memset(o.p + o.len, 'x', pad);
    o.len += pad;
    o.p[o.len] = '\0';
  } else {
    o.full = true;
  }
  puts_(&o, "\"}}}");
  return done(&o);
}

/* ---- parsing ----------------------------------------------------------------------------------
 */

/* The integer after `"key":` in s[0..len), or -1. */
static int64_t scan_int(const char *s, size_t len, const char *key) {
  size_t klen = strlen(key);
  const char *end = s + len;
  for (const char *p = s; p + klen + 3 <= end; p++) {
    p = memchr(p, '"', (size_t)(end - p));
    if (!p || p + klen + 3 > end) return -1;
    if (memcmp(p + 1, key, klen) != 0 || p[klen + 1] != '"') continue;
    const char *q = p + klen + 2;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    if (q >= end || *q != ':') continue;
    q++;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    int64_t v = 0;
    const char *d = q;
    while (q < end && *q >= '0' && *q <= '9' && v < INT64_MAX / 10) v = v * 10 + (*q++ - '0');
    return q > d ? v : -1;
  }
  return -1;
}

/* True when the frame is an object whose first key is "data". */
static bool starts_data(const char *s, size_t len) {
  size_t i = 0;
  while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  if (i >= len || s[i++] != '{') return false;
  while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
  return len - i >= 6 && memcmp(s + i, "\"data\"", 6) == 0;
}

static void copy_str(char *dst, size_t cap, json_t *v) {
  const char *s = json_is_string(v) ? json_string_value(v) : "";
  snprintf(dst, cap, "%s", s);
}

static void reset(qim_tframe_msg *m) {
  memset(m, 0, sizeof *m);
  m->seq = m->count = m->qbt = m->qbs = m->qbn = -1;
}

static void read_ctrl(json_t *c, qim_tframe_msg *m) {
  m->kind = QIM_TFRAME_CTRL;
  json_t *code = json_object_get(c, "code");
  m->code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
  copy_str(m->id, sizeof m->id, json_object_get(c, "id"));
  copy_str(m->topic, sizeof m->topic, json_object_get(c, "topic"));
  copy_str(m->text, sizeof m->text, json_object_get(c, "text"));
  json_t *params = json_object_get(c, "params");
  if (!json_is_object(params)) return;
  json_t *seq = json_object_get(params, "seq");
  if (json_is_integer(seq)) m->seq = json_integer_value(seq);
  json_t *count = json_object_get(params, "count");
  if (json_is_integer(count)) m->count = json_integer_value(count);
  copy_str(m->user, sizeof m->user, json_object_get(params, "user"));
  copy_str(m->token, sizeof m->token, json_object_get(params, "token"));
}

int qim_tframe_parse(const char *json, size_t len, qim_tframe_msg *m) {
  reset(m);
  if (starts_data(json, len)) {
    /* Fast path: data frames are only counted and timed. */
    m->kind = QIM_TFRAME_DATA;
    m->seq = scan_int(json, len, "seq");
    m->qbt = scan_int(json, len, "qbt");
    m->qbs = scan_int(json, len, "qbs");
    m->qbn = scan_int(json, len, "qbn");
    return 0;
  }
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(root)) {
    json_decref(root);
    return -EINVAL;
  }
  json_t *v;
  if ((v = json_object_get(root, "ctrl")) && json_is_object(v)) {
    read_ctrl(v, m);
  } else if ((v = json_object_get(root, "meta")) && json_is_object(v)) {
    m->kind = QIM_TFRAME_META;
    copy_str(m->id, sizeof m->id, json_object_get(v, "id"));
    copy_str(m->topic, sizeof m->topic, json_object_get(v, "topic"));
  } else if ((v = json_object_get(root, "pres")) && json_is_object(v)) {
    m->kind = QIM_TFRAME_PRES;
    copy_str(m->topic, sizeof m->topic, json_object_get(v, "topic"));
  } else if ((v = json_object_get(root, "info")) && json_is_object(v)) {
    m->kind = QIM_TFRAME_INFO;
    copy_str(m->topic, sizeof m->topic, json_object_get(v, "topic"));
  } else if ((v = json_object_get(root, "data")) && json_is_object(v)) {
    m->kind = QIM_TFRAME_DATA; /* "data" was not the first key: read it the slow way */
    json_t *seq = json_object_get(v, "seq");
    if (json_is_integer(seq)) m->seq = json_integer_value(seq);
    json_t *content = json_object_get(v, "content");
    json_t *t = json_object_get(content, "qbt"), *s = json_object_get(content, "qbs"),
           *n = json_object_get(content, "qbn");
    if (json_is_integer(t)) m->qbt = json_integer_value(t);
    if (json_is_integer(s)) m->qbs = json_integer_value(s);
    if (json_is_integer(n)) m->qbn = json_integer_value(n);
  } else {
    json_decref(root);
    return -EINVAL;
  }
  json_decref(root);
  return 0;
}
