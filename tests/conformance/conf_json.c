/*
 * conf_json.c — how contract vectors spell store values in JSON, both ways.
 *
 * Inputs are forgiving where it keeps vectors short (a small id is an integer, an access
 * mode is its letters); outputs are canonical (one spelling per value) so that an
 * expected value written the short way compares equal to what the backend returned.
 * Spellings (README.md "Values"):
 *   u64            integer; above INT64_MAX a decimal string; "max" = UINT64_MAX
 *   u128 ids       integer when it fits in 63 bits, else "0x" + 32 hex digits
 *   16-byte ids    the same, reading the 16 bytes as a big-endian u128
 *   bytes          a string (its UTF-8 bytes), or {"hex": "..."} (outputs use the
 *                  string form when the bytes are printable UTF-8 without NUL)
 *   *_json fields  any JSON value (compared structurally)
 *   modes          letters of "JRWPASDO" in that order ("" = none)
 *   log streams    "outbox" or "dispatch:<shard>"
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "qim/ids.h"
#include "qim/mem.h"

const char *const conf_names_conv_kind[] = {"direct", "group", NULL};
const char *const conf_names_role[] = {"owner", "admin", "member", "guest", NULL};
const char *const conf_names_member_op[] = {"add", "remove", "ban", "update", NULL};
const char *const conf_names_commit_state[] = {"reserved", "recorded", "outboxed", "committed", NULL};
const char *const conf_names_message_type[] = {"text", "custom", "media", "control", NULL};
const char *const conf_names_retention[] = {"default", "ephemeral_24h", "compliance_hold",
                                            "tenant_custom", NULL};
const char *const conf_names_message_state[] = {"normal", "recalled", "edited", "deleted", NULL};
const char *const conf_names_direction[] = {"older", "newer", NULL};
const char *const conf_names_event_type[] = {"message", "mention", "membership", "control", NULL};
const char *const conf_names_reserve_kind[] = {"fresh", "existing", "committed", NULL};
const char *const conf_names_loaded_kind[] = {"in_flight", "committed", NULL};
const char *const conf_names_audience[] = {"direct", "group", NULL};

static const char mode_letters[] = "JRWPASDO";

int conf_names_count(const char *const *names) {
  int n = 0;
  while (names[n]) n++;
  return n;
}

static int bad(conf_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return -EINVAL;
}

/* ---- which input members were read ---------------------------------------------------- */

static conf_seen *seen_find(conf_ctx *c, const json_t *obj, const char *key) {
  for (size_t i = 0; i < c->nseen; i++)
    if (c->seen[i].obj == obj && !strcmp(c->seen[i].key, key)) return &c->seen[i];
  return NULL;
}

json_t *conf_get(conf_ctx *c, json_t *obj, const char *key) {
  if (!json_is_object(obj)) return NULL;
  if (!seen_find(c, obj, key)) {
    if (c->nseen == c->capseen) {
      c->capseen = c->capseen ? c->capseen * 2 : 64;
      c->seen = qim_realloc(c->seen, c->capseen * sizeof *c->seen);
    }
    c->seen[c->nseen++] = (conf_seen){obj, key, false};
  }
  return json_object_get(obj, key);
}

void conf_seen_reset(conf_ctx *c) {
  qim_free(c->seen);
  c->seen = NULL;
  c->nseen = c->capseen = 0;
}

static int check_value(conf_ctx *c, json_t *v, const char *path);

static int check_object(conf_ctx *c, json_t *obj, const char *path) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    if (json_is_null(v)) continue; /* null is how vectors spell "absent" */
    const conf_seen *s = seen_find(c, obj, k);
    if (!s) return bad(c, "input member %s.%s is not an input of this op (misspelt?)", path, k);
    char sub[256];
    snprintf(sub, sizeof sub, "%s.%s", path, k);
    if (!s->opaque && check_value(c, v, sub)) return -EINVAL;
  }
  return 0;
}

static int check_value(conf_ctx *c, json_t *v, const char *path) {
  if (json_is_object(v)) return check_object(c, v, path);
  for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
    if (check_value(c, json_array_get(v, i), path)) return -EINVAL;
  return 0;
}

int conf_check_unread(conf_ctx *c, json_t *in) { return check_value(c, in, "in"); }

/* ---- scalars --------------------------------------------------------------------------- */

int conf_val_u64(conf_ctx *c, json_t *v, const char *what, uint64_t *out) {
  if (!v || json_is_null(v)) return *out = 0, 0;
  if (json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    if (i < 0) return bad(c, "%s: negative integer", what);
    return *out = (uint64_t)i, 0;
  }
  if (json_is_true(v)) return *out = 1, 0;
  if (json_is_false(v)) return *out = 0, 0;
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (!strcmp(s, "max")) return *out = UINT64_MAX, 0;
    if (qim_u64_parse(s, strlen(s), out) == 0) return 0;
  }
  return bad(c, "%s: expected an unsigned integer", what);
}

int conf_get_u64(conf_ctx *c, json_t *obj, const char *key, uint64_t *out) {
  return conf_val_u64(c, obj ? conf_get(c, obj, key) : NULL, key, out);
}

int conf_get_bool(conf_ctx *c, json_t *obj, const char *key, bool *out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  if (!v || json_is_null(v)) return *out = false, 0;
  if (!json_is_boolean(v)) return bad(c, "%s: expected true/false", key);
  return *out = json_is_true(v), 0;
}

static int hex_nibble(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* "0x" + up to 32 hex digits → u128. */
static int parse_hex128(const char *s, qim_u128 *out) {
  if (strncmp(s, "0x", 2) != 0) return -EINVAL;
  s += 2;
  size_t n = strlen(s);
  if (n == 0 || n > 32) return -EINVAL;
  qim_u128 v = {0, 0};
  for (size_t i = 0; i < n; i++) {
    int d = hex_nibble(s[i]);
    if (d < 0) return -EINVAL;
    v.hi = (v.hi << 4) | (v.lo >> 60);
    v.lo = (v.lo << 4) | (uint64_t)d;
  }
  *out = v;
  return 0;
}

int conf_val_u128(conf_ctx *c, json_t *v, const char *what, qim_u128 *out) {
  *out = (qim_u128){0, 0};
  if (!v || json_is_null(v)) return 0;
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    out->lo = (uint64_t)json_integer_value(v);
    return 0;
  }
  if (json_is_string(v) && parse_hex128(json_string_value(v), out) == 0) return 0;
  return bad(c, "%s: expected an id (integer or \"0x\" hex)", what);
}

int conf_get_u128(conf_ctx *c, json_t *obj, const char *key, qim_u128 *out) {
  return conf_val_u128(c, obj ? conf_get(c, obj, key) : NULL, key, out);
}

int conf_val_id16(conf_ctx *c, json_t *v, const char *what, uint8_t out[16]) {
  qim_u128 u;
  int rc = conf_val_u128(c, v, what, &u);
  if (rc == 0) qim_u128_to_be(u, out);
  return rc;
}

int conf_get_id16(conf_ctx *c, json_t *obj, const char *key, uint8_t out[16]) {
  return conf_val_id16(c, obj ? conf_get(c, obj, key) : NULL, key, out);
}

int conf_get_str(conf_ctx *c, json_t *obj, const char *key, const char **out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  *out = NULL;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) return bad(c, "%s: expected a string", key);
  *out = json_string_value(v);
  return 0;
}

int conf_get_json_text(conf_ctx *c, json_t *obj, const char *key, char **out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  conf_seen *s = obj ? seen_find(c, obj, key) : NULL;
  if (s) s->opaque = true;
  *out = NULL;
  if (!v || json_is_null(v)) return 0;
  if (json_is_string(v)) {
    *out = strdup(json_string_value(v));
  } else {
    *out = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  }
  if (!*out) abort();
  return 0;
}

int conf_val_bytes(conf_ctx *c, json_t *v, const char *what, qim_bytes *out) {
  *out = (qim_bytes){NULL, 0};
  if (!v || json_is_null(v)) return 0;
  if (json_is_string(v)) {
    size_t n = json_string_length(v);
    if (n) out->p = qim_memdup(json_string_value(v), n);
    out->n = n;
    return 0;
  }
  const char *hex = json_is_object(v) ? json_string_value(conf_get(c, v, "hex")) : NULL;
  if (!hex || strlen(hex) % 2) return bad(c, "%s: expected a string or {\"hex\": ...}", what);
  size_t n = strlen(hex) / 2;
  out->p = n ? qim_malloc(n) : NULL;
  out->n = n;
  for (size_t i = 0; i < n; i++) {
    int h = hex_nibble(hex[2 * i]), l = hex_nibble(hex[2 * i + 1]);
    if (h < 0 || l < 0) {
      qim_free(out->p);
      *out = (qim_bytes){NULL, 0};
      return bad(c, "%s: bad hex", what);
    }
    out->p[i] = (uint8_t)(h << 4 | l);
  }
  return 0;
}

int conf_get_bytes(conf_ctx *c, json_t *obj, const char *key, qim_bytes *out) {
  return conf_val_bytes(c, obj ? conf_get(c, obj, key) : NULL, key, out);
}

int conf_get_enum(conf_ctx *c, json_t *obj, const char *key, const char *const *names, int *out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  *out = 0;
  if (!v || json_is_null(v)) return 0;
  int n = conf_names_count(names);
  if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < n)
    return *out = (int)json_integer_value(v), 0;
  if (json_is_string(v))
    for (int i = 0; i < n; i++)
      if (!strcmp(names[i], json_string_value(v))) return *out = i, 0;
  return bad(c, "%s: unknown value (expected one of %s, ...)", key, names[0]);
}

int conf_get_mode(conf_ctx *c, json_t *obj, const char *key, uint32_t *out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  *out = 0;
  if (!v || json_is_null(v)) return 0;
  if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 255)
    return *out = (uint32_t)json_integer_value(v), 0;
  if (!json_is_string(v)) return bad(c, "%s: expected mode letters", key);
  for (const char *s = json_string_value(v); *s; s++) {
    const char *p = strchr(mode_letters, *s);
    if (!p) return bad(c, "%s: '%c' is not one of JRWPASDO", key, *s);
    *out |= 1u << (p - mode_letters);
  }
  return 0;
}

int conf_val_stream(conf_ctx *c, json_t *v, const char *what, qim_log_stream *out) {
  *out = (qim_log_stream){QIM_LOG_STREAM_OUTBOX, 0};
  const char *s = json_string_value(v);
  if (s && !strcmp(s, "outbox")) return 0;
  uint64_t shard;
  if (s && !strncmp(s, "dispatch:", 9) && qim_u64_parse(s + 9, strlen(s + 9), &shard) == 0 &&
      shard <= UINT32_MAX) {
    *out = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, (uint32_t)shard};
    return 0;
  }
  return bad(c, "%s: expected \"outbox\" or \"dispatch:<shard>\"", what);
}

int conf_get_stream(conf_ctx *c, json_t *obj, const char *key, qim_log_stream *out) {
  return conf_val_stream(c, obj ? conf_get(c, obj, key) : NULL, key, out);
}

int conf_get_position(conf_ctx *c, json_t *obj, const char *key, qim_log_position *out) {
  json_t *v = obj ? conf_get(c, obj, key) : NULL;
  if (!json_is_object(v)) return bad(c, "%s: expected {\"stream\", \"offset\"}", key);
  int rc = conf_get_stream(c, v, "stream", &out->stream);
  return rc ? rc : conf_get_u64(c, v, "offset", &out->offset);
}

/* ---- encoders ---------------------------------------------------------------------------- */

static json_t *must(json_t *v) {
  if (!v) abort(); /* jansson allocation failure: treat like qim_malloc */
  return v;
}

json_t *conf_json_u64(uint64_t v) {
  if (v <= INT64_MAX) return must(json_integer((json_int_t)v));
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  return must(json_string(buf));
}

json_t *conf_json_u128(qim_u128 v) {
  if (v.hi == 0 && v.lo <= INT64_MAX) return must(json_integer((json_int_t)v.lo));
  char buf[40];
  snprintf(buf, sizeof buf, "0x%016" PRIx64 "%016" PRIx64, v.hi, v.lo);
  return must(json_string(buf));
}

json_t *conf_json_id16(const uint8_t b[16]) { return conf_json_u128(qim_u128_from_be(b)); }

json_t *conf_json_bytes(const qim_bytes *b) {
  bool text = true;
  for (size_t i = 0; i < b->n; i++)
    if (b->p[i] == 0 || b->p[i] == 0x7f || (b->p[i] < 0x20 && b->p[i] != '\n')) text = false;
  if (text) {
    json_t *s = json_stringn(b->n ? (const char *)b->p : "", b->n);
    if (s) return s; /* NULL here means invalid UTF-8: fall through to hex */
  }
  char *hex = qim_malloc(b->n * 2 + 1);
  for (size_t i = 0; i < b->n; i++) snprintf(hex + 2 * i, 3, "%02x", b->p[i]);
  hex[b->n * 2] = 0;
  json_t *o = must(json_pack("{s:s}", "hex", hex));
  qim_free(hex);
  return o;
}

/* The parsed value only when conf_get_json_text would give the same text back (a
 * value other than a string or null, in its canonical form); any other text (a JSON
 * string literal, "null", other spacing) stays the exact string: decode(encode(t)) is t. */
json_t *conf_json_text(const char *s) {
  if (!s) return must(json_null());
  json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
  if (v && !json_is_string(v) && !json_is_null(v)) {
    char *canon = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    bool same = canon && strcmp(canon, s) == 0;
    free(canon);
    if (same) return v;
  }
  json_decref(v);
  return must(json_string(s));
}

json_t *conf_json_str(const char *s) { return s ? must(json_string(s)) : must(json_null()); }

json_t *conf_json_mode(uint32_t mode) {
  char buf[9];
  size_t n = 0;
  for (int i = 0; i < 8; i++)
    if (mode & (1u << i)) buf[n++] = mode_letters[i];
  buf[n] = 0;
  return must(json_string(buf));
}

json_t *conf_json_stream(qim_log_stream s) {
  if (s.kind == QIM_LOG_STREAM_OUTBOX) return must(json_string("outbox"));
  char buf[32];
  snprintf(buf, sizeof buf, "dispatch:%" PRIu32, s.shard);
  return must(json_string(buf));
}

json_t *conf_json_position(qim_log_position p) {
  return must(json_pack("{s:o,s:o}", "stream", conf_json_stream(p.stream), "offset",
                        conf_json_u64(p.offset)));
}

json_t *conf_json_enum(const char *const *names, int n_names, int v) {
  if (v >= 0 && v < n_names) return must(json_string(names[v]));
  return must(json_integer(v)); /* out of range: shows up as a mismatch, not a crash */
}
