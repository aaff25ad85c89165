/*
 * payload.c — finding the content and head of a stored Tinode payload (payload.h).
 *
 * The payload was written by jansson in compact form, so the scan needs no whitespace
 * handling; anything unexpected makes it give up (-EINVAL) and the caller falls back to a
 * real parser. The scan is iterative, its nesting bounded (SKIP_MAX_DEPTH).
 */
#include "qim/payload.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Past the closing quote of the string whose opening quote is at p, or NULL. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\') {
      if (++p == end) return NULL;
    } else if (*p == '"') {
      return p + 1;
    } else if ((unsigned char)*p < 0x20) {
      return NULL; /* a raw control character: not JSON */
    }
  }
  return NULL;
}

static bool scalar_char(char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || ch == '-' || ch == '+' ||
         ch == '.' || ch == 'E';
}

/* Past the number or literal at p, or NULL when there is none. */
static const char *skip_scalar(const char *p, const char *end) {
  const char *s = p;
  while (p < end && scalar_char(*p)) p++;
  return p > s ? p : NULL;
}

/* Past the `"key":` of an object member at p, or NULL. */
static const char *skip_key(const char *p, const char *end) {
  if (p >= end || *p != '"' || !(p = skip_string(p, end)) || p >= end || *p != ':') return NULL;
  return p + 1;
}

/* The end of the JSON value at p (just past it), or NULL when the text up to end is not one
 * value in compact form (no whitespace between tokens). Strings are skipped with their
 * escapes, numbers and literals by their characters; containers are walked to their
 * matching close, checking that brackets pair up and that every member of an object is a
 * string key, a colon and a value. It checks the structure it walks, not every rule of JSON
 * (a number's digits, an escape's hex), which is enough for text our own encoder wrote. The
 * kinds of the open containers are a stack of SKIP_MAX_DEPTH bits (1 = object); deeper text
 * is refused, and then parsed by the caller as before. */
#define SKIP_MAX_DEPTH 512

static const char *skip_value(const char *p, const char *end) {
  uint64_t kinds[SKIP_MAX_DEPTH / 64] = {0};
  size_t depth = 0;
  while (p < end) { /* at the start of a value */
    if (*p == '{' || *p == '[') {
      bool object = *p++ == '{';
      if (depth == SKIP_MAX_DEPTH) return NULL;
      if (object) kinds[depth / 64] |= 1ull << (depth % 64);
      else kinds[depth / 64] &= ~(1ull << (depth % 64));
      depth++;
      if (p < end && *p == (object ? '}' : ']')) {
        p++, depth--; /* empty: a whole value */
      } else {
        if (object && !(p = skip_key(p, end))) return NULL;
        continue; /* its first value */
      }
    } else if (!(p = *p == '"' ? skip_string(p, end) : skip_scalar(p, end))) {
      return NULL;
    }
    /* after a value: the commas and closes that follow it */
    for (; depth; p++, depth--) {
      if (p >= end) return NULL;
      bool object = kinds[(depth - 1) / 64] >> ((depth - 1) % 64) & 1;
      if (*p == ',') break;
      if (*p != (object ? '}' : ']')) return NULL;
    }
    if (!depth) return p;
    bool object = kinds[(depth - 1) / 64] >> ((depth - 1) % 64) & 1;
    p++; /* the comma */
    if (object && !(p = skip_key(p, end))) return NULL;
  }
  return NULL;
}

static bool take(const char **p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0) return false;
  *p += n;
  return true;
}

int qim_payload_split_tinode(const qim_message_content *c, qim_json_span *content,
                             qim_json_span *head) {
  *content = (qim_json_span){0};
  *head = (qim_json_span){0};
  if (c->schema_version != QIM_PAYLOAD_SCHEMA_TINODE || !c->payload_or_ciphertext.n) return -EINVAL;
  const char *p = (const char *)c->payload_or_ciphertext.p;
  const char *end = p + c->payload_or_ciphertext.n;
  if (!take(&p, end, "{\"content\":")) return -EINVAL;
  const char *v = p;
  if (!(p = skip_value(v, end))) return -EINVAL;
  qim_json_span body = {v, (size_t)(p - v)};
  qim_json_span h = {0};
  if (take(&p, end, ",\"head\":")) {
    v = p;
    if (p >= end || *p != '{' || !(p = skip_value(v, end))) return -EINVAL;
    h = (qim_json_span){v, (size_t)(p - v)};
  }
  if (!take(&p, end, "}") || p != end) return -EINVAL;
  *content = body;
  *head = h;
  return 0;
}
