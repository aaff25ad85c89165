/*
 * http.c — one HTTP/1.1 request through http_parser, the RFC 6455 opening-handshake
 * checks and response formatting (see http.h).
 *
 * http_parser hands out pointers into whatever buffer it is given. While the header
 * block arrives we append it to one bounded buffer and feed the parser from there, so
 * a header split across reads is still contiguous and is recorded as offsets (which
 * survive the buffer growing). Once the request is complete we copy the few fields of
 * interest into one compact allocation and drop the raw bytes.
 */
#include "gateway/http.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "qim/err.h"
#include "qim/mem.h"
#include "qim/websocket.h"

#define UNSEEN UINT32_MAX

static const char *const header_names[QIM_HTTP_H_COUNT] = {
    [QIM_HTTP_H_HOST] = "Host",
    [QIM_HTTP_H_UPGRADE] = "Upgrade",
    [QIM_HTTP_H_CONNECTION] = "Connection",
    [QIM_HTTP_H_WS_KEY] = "Sec-WebSocket-Key",
    [QIM_HTTP_H_WS_VERSION] = "Sec-WebSocket-Version",
    [QIM_HTTP_H_WS_EXTENSIONS] = "Sec-WebSocket-Extensions",
    [QIM_HTTP_H_WS_PROTOCOL] = "Sec-WebSocket-Protocol",
    [QIM_HTTP_H_APIKEY] = "X-Tinode-APIKey",
    [QIM_HTTP_H_AUTHORIZATION] = "Authorization",
    [QIM_HTTP_H_CONTENT_TYPE] = "Content-Type",
    [QIM_HTTP_H_ORIGIN] = "Origin",
    [QIM_HTTP_H_USER_AGENT] = "User-Agent",
    [QIM_HTTP_H_FORWARDED_FOR] = "X-Forwarded-For",
    [QIM_HTTP_H_SERVICE_TOKEN] = "X-Qim-Service-Token",
};

static qim_http_parser *of(http_parser *hp) {
  return hp->data;
}

static int cb_fail(qim_http_parser *p, int err) {
  p->err_ = err;
  return 1; /* makes http_parser stop with HPE_CB_* */
}

static int on_url(http_parser *hp, const char *at, size_t len) {
  qim_http_parser *p = of(hp);
  uint32_t off = (uint32_t)(at - p->raw_);
  if (p->url_len_ == 0) p->url_off_ = off;
  p->url_len_ = off + (uint32_t)len - p->url_off_;
  return 0;
}

static int lookup_header(const char *name, size_t len) {
  for (int i = 0; i < QIM_HTTP_H_COUNT; i++)
    if (strlen(header_names[i]) == len && strncasecmp(header_names[i], name, len) == 0) return i;
  return -1;
}

static int on_header_field(http_parser *hp, const char *at, size_t len) {
  qim_http_parser *p = of(hp);
  if (p->headers_done_) return 0; /* chunked trailers: not in raw_, and never needed */
  uint32_t off = (uint32_t)(at - p->raw_);
  if (p->in_value_ || p->field_len_ == 0) { /* a new header begins */
    p->in_value_ = false;
    p->field_off_ = off;
    p->field_len_ = (uint32_t)len;
  } else {
    p->field_len_ = off + (uint32_t)len - p->field_off_;
  }
  return 0;
}

static int on_header_value(http_parser *hp, const char *at, size_t len) {
  qim_http_parser *p = of(hp);
  if (p->headers_done_) return 0;
  uint32_t off = (uint32_t)(at - p->raw_);
  if (!p->in_value_) { /* first piece of this header's value */
    p->in_value_ = true;
    int h = lookup_header(p->raw_ + p->field_off_, p->field_len_);
    p->cur_ = -1;
    if (h >= 0 && p->val_off_[h] != UNSEEN) {
      p->req_.repeated |= 1u << h; /* keep the first value, flag the repeat */
    } else if (h >= 0) {
      p->cur_ = h;
      p->val_off_[h] = off;
      p->val_len_[h] = (uint32_t)len;
    }
  } else if (p->cur_ >= 0) {
    p->val_len_[p->cur_] = off + (uint32_t)len - p->val_off_[p->cur_];
  }
  return 0;
}

static int on_headers_complete(http_parser *hp) {
  qim_http_parser *p = of(hp);
  p->headers_done_ = true;
  /* Refuse a declared oversized body before reading any of it. */
  if (hp->content_length != UINT64_MAX && hp->content_length > p->max_body_)
    return cb_fail(p, -E2BIG);
  return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len) {
  qim_http_parser *p = of(hp);
  if (len > p->max_body_ - p->body_len_) return cb_fail(p, -E2BIG);
  if (p->body_len_ + len > p->body_cap_) {
    size_t cap = p->body_cap_ ? p->body_cap_ * 2 : 1024;
    if (cap < p->body_len_ + len) cap = p->body_len_ + len;
    if (cap > p->max_body_) cap = p->max_body_;
    p->body_ = qim_realloc(p->body_, cap); /* bounded by max_body, not by the peer */
    p->body_cap_ = cap;
  }
  memcpy(p->body_ + p->body_len_, at, len);
  p->body_len_ += len;
  return 0;
}

static int on_message_complete(http_parser *hp) {
  qim_http_parser *p = of(hp);
  p->complete_ = true;
  /* Stop right after this request: what follows belongs to the next protocol. */
  http_parser_pause(hp, 1);
  return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void qim_http_parser_init(qim_http_parser *p, size_t max_header, size_t max_body) {
  memset(p, 0, sizeof *p);
  http_parser_init(&p->hp_, HTTP_REQUEST);
  p->hp_.data = p;
  p->max_header_ = max_header ? max_header : 1;
  p->max_body_ = max_body;
  p->cur_ = -1;
  for (int i = 0; i < QIM_HTTP_H_COUNT; i++) p->val_off_[i] = UNSEEN;
}

void qim_http_parser_free(qim_http_parser *p) {
  if (!p) return;
  qim_free(p->raw_);
  qim_free(p->body_);
  qim_free(p->arena_);
  p->raw_ = p->arena_ = NULL;
  p->body_ = NULL;
  p->raw_len_ = p->raw_cap_ = p->body_len_ = p->body_cap_ = 0;
}

const qim_http_request *qim_http_parser_request(const qim_http_parser *p) {
  return p->complete_ && !p->err_ ? &p->req_ : NULL;
}

int qim_http_error_status(int err) {
  switch (err) {
    case -EMSGSIZE:
      return 431;
    case -E2BIG:
      return 413;
    default:
      return 400;
  }
}

/* Runs http_parser over n bytes; returns how many it consumed (sets err_ on failure). */
static size_t run(qim_http_parser *p, const char *d, size_t n) {
  size_t parsed = http_parser_execute(&p->hp_, &settings, d, n);
  enum http_errno e = HTTP_PARSER_ERRNO(&p->hp_);
  if (e != HPE_OK && e != HPE_PAUSED && !p->err_) p->err_ = -EBADMSG;
  /* http_parser stops early at an upgrade; stopping before the request completed is not a
   * request we understand. An upgrade whose body is still to come consumed everything and
   * simply waits (found by fuzzing: the answer depended on how the bytes were split). */
  if (e == HPE_OK && p->hp_.upgrade && parsed < n && !p->complete_ && !p->err_) p->err_ = -EBADMSG;
  return parsed;
}

/* Copies [off, off+len) trimmed of trailing blanks into the arena at *w. */
static const char *arena_put(char **w, const char *s, size_t len) {
  while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  char *out = *w;
  memcpy(out, s, len);
  out[len] = '\0';
  *w += len + 1;
  return out;
}

/* Builds the compact request view once the request is complete. */
static int finish(qim_http_parser *p) {
  struct http_parser_url u;
  http_parser_url_init(&u);
  const char *url = p->raw_ + p->url_off_;
  if (p->url_len_ == 0 ||
      http_parser_parse_url(url, p->url_len_, p->hp_.method == HTTP_CONNECT, &u))
    return p->err_ = -EBADMSG;
  size_t plen = (u.field_set & (1 << UF_PATH)) ? u.field_data[UF_PATH].len : 0;
  size_t qlen = (u.field_set & (1 << UF_QUERY)) ? u.field_data[UF_QUERY].len : 0;
  size_t total = plen + 1 + 2 * (qlen + 1);
  for (int i = 0; i < QIM_HTTP_H_COUNT; i++)
    if (p->val_off_[i] != UNSEEN) total += p->val_len_[i] + 1;
  char *w = p->arena_ = qim_malloc(total);
  qim_http_request *r = &p->req_;
  r->path = arena_put(&w, url + u.field_data[UF_PATH].off, plen);
  r->query = arena_put(&w, url + u.field_data[UF_QUERY].off, qlen);
  for (int i = 0; i < QIM_HTTP_H_COUNT; i++)
    if (p->val_off_[i] != UNSEEN)
      r->header[i] = arena_put(&w, p->raw_ + p->val_off_[i], p->val_len_[i]);
  r->apikey = r->header[QIM_HTTP_H_APIKEY];
  if (!r->apikey && qim_http_query_param(r->query, "apikey", w, qlen + 1) >= 0) r->apikey = w;
  r->method = http_method_str(p->hp_.method);
  r->http_major = p->hp_.http_major;
  r->http_minor = p->hp_.http_minor;
  r->body = p->body_len_ ? p->body_ : NULL;
  r->body_len = p->body_len_;
  qim_free(p->raw_); /* everything needed now lives in the arena */
  p->raw_ = NULL;
  p->raw_len_ = p->raw_cap_ = 0;
  return 0;
}

/* Appends header bytes to the raw buffer (the caller has bounded n). */
static char *raw_append(qim_http_parser *p, const char *data, size_t n) {
  if (p->raw_len_ + n > p->raw_cap_) {
    size_t cap = p->raw_cap_ ? p->raw_cap_ * 2 : 1024;
    if (cap < p->raw_len_ + n) cap = p->raw_len_ + n;
    if (cap > p->max_header_) cap = p->max_header_;
    p->raw_ = qim_realloc(p->raw_, cap); /* bounded by max_header */
    p->raw_cap_ = cap;
  }
  char *at = p->raw_ + p->raw_len_;
  memcpy(at, data, n);
  p->raw_len_ += n;
  return at;
}

int qim_http_parser_feed(qim_http_parser *p, const char *data, size_t len, size_t *consumed) {
  *consumed = 0;
  if (p->err_) return p->err_;
  if (p->complete_) return 0;
  size_t used = 0;
  if (!p->headers_done_) {
    size_t n = p->max_header_ - p->raw_len_;
    if (n > len) n = len;
    char *at = raw_append(p, data, n);
    used = run(p, at, n);
    if (p->err_) return p->err_;
    if (!p->complete_ && !p->headers_done_) {
      if (p->raw_len_ == p->max_header_) return p->err_ = -EMSGSIZE;
      *consumed = len;
      return QIM_AGAIN;
    }
  }
  /* Body bytes past the header block: no need to keep them raw. */
  if (!p->complete_ && used < len) used += run(p, data + used, len - used);
  if (p->err_) return p->err_;
  if (!p->complete_) {
    *consumed = len;
    return QIM_AGAIN;
  }
  *consumed = used;
  return finish(p);
}

int qim_http_parse_buffer(const char *data, size_t len, size_t max_header, size_t max_body,
                          size_t step, size_t *consumed) {
  qim_http_parser p;
  qim_http_parser_init(&p, max_header, max_body);
  if (!step || step > len) step = len ? len : 1;
  int rc = QIM_AGAIN;
  size_t total = 0;
  for (size_t o = 0; o < len && rc == QIM_AGAIN; o += step) {
    size_t used;
    rc = qim_http_parser_feed(&p, data + o, len - o < step ? len - o : step, &used);
    total += used;
  }
  int status = rc == QIM_AGAIN ? 0
               : rc < 0        ? qim_http_error_status(rc)
                               : qim_http_upgrade_status(qim_http_parser_request(&p));
  qim_http_parser_free(&p);
  if (consumed) *consumed = total;
  return status;
}

/* ---- handshake checks ------------------------------------------------------------------------ */

bool qim_http_has_token(const char *value, const char *token) {
  size_t tl = strlen(token);
  const char *s = value;
  while (*s) {
    while (*s == ' ' || *s == '\t' || *s == ',') s++;
    const char *e = s;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
    if ((size_t)(t - s) == tl && strncasecmp(s, token, tl) == 0) return true;
    s = e;
  }
  return false;
}

static bool b64_char(char c) {
  return isalnum((unsigned char)c) || c == '+' || c == '/';
}

bool qim_http_ws_key_valid(const char *key) {
  /* 16 bytes encode to 22 base64 characters plus "==". */
  if (strlen(key) != 24 || key[22] != '=' || key[23] != '=') return false;
  for (int i = 0; i < 22; i++)
    if (!b64_char(key[i])) return false;
  /* The last character carries only 2 data bits; the rest must be zero. */
  return strchr("AQgw", key[21]) != NULL;
}

int qim_http_upgrade_status(const qim_http_request *r) {
  if (strcmp(r->method, "GET") != 0) return 405;
  if (r->http_major < 1 || (r->http_major == 1 && r->http_minor < 1)) return 400;
  const char *up = r->header[QIM_HTTP_H_UPGRADE], *conn = r->header[QIM_HTTP_H_CONNECTION];
  if (!up || !qim_http_has_token(up, "websocket")) return 400;
  if (!conn || !qim_http_has_token(conn, "upgrade")) return 400;
  const char *ver = r->header[QIM_HTTP_H_WS_VERSION];
  if (!ver || (r->repeated & (1u << QIM_HTTP_H_WS_VERSION)) || strcmp(ver, "13") != 0) return 426;
  const char *key = r->header[QIM_HTTP_H_WS_KEY];
  if (!key || (r->repeated & (1u << QIM_HTTP_H_WS_KEY)) || !qim_http_ws_key_valid(key)) return 400;
  return 101;
}

/* ---- responses ------------------------------------------------------------------------------- */

const char *qim_http_reason(int status) {
  switch (status) {
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 426:
      return "Upgrade Required";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

char *qim_http_format_response(int status, const char *content_type, const char *extra,
                               const void *body, size_t body_len, size_t *len) {
  char head[512];
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\n%s%s%sContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                   status, qim_http_reason(status), content_type ? "Content-Type: " : "",
                   content_type ? content_type : "", content_type ? "\r\n" : "", body_len,
                   extra ? extra : "");
  if (n < 0 || (size_t)n >= sizeof head) abort(); /* callers pass short, fixed headers */
  char *out = qim_malloc((size_t)n + body_len + 1);
  memcpy(out, head, (size_t)n);
  if (body_len) memcpy(out + n, body, body_len);
  out[n + body_len] = '\0';
  *len = (size_t)n + body_len;
  return out;
}

char *qim_http_format_switching(const char *key, size_t *len) {
  char accept[QIM_WS_ACCEPT_LEN + 1];
  qim_websocket_accept(key, accept);
  static const char fmt[] =
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n";
  size_t cap = sizeof fmt + QIM_WS_ACCEPT_LEN;
  char *out = qim_malloc(cap);
  int n = snprintf(out, cap, fmt, accept);
  *len = (size_t)n;
  return out;
}

/* ---- query strings --------------------------------------------------------------------------- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = (char)tolower((unsigned char)c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes [s, e) into out; see qim_http_query_param for the results. */
static int form_decode(const char *s, const char *e, char *out, size_t cap) {
  size_t n = 0;
  while (s < e) {
    int c = (unsigned char)*s++;
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      if (e - s < 2 || hexval(s[0]) < 0 || hexval(s[1]) < 0) return -EINVAL;
      c = hexval(s[0]) << 4 | hexval(s[1]);
      s += 2;
      if (c == 0) return -EINVAL; /* would cut the C string */
    }
    if (n + 1 >= cap) return -ENOSPC;
    out[n++] = (char)c;
  }
  if (cap == 0) return -ENOSPC;
  out[n] = '\0';
  return (int)n;
}

int qim_http_query_param(const char *query, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  const char *s = query;
  while (*s) {
    const char *e = strchr(s, '&');
    if (!e) e = s + strlen(s);
    const char *eq = memchr(s, '=', (size_t)(e - s));
    const char *kend = eq ? eq : e;
    if ((size_t)(kend - s) == nl && memcmp(s, name, nl) == 0)
      return form_decode(eq ? eq + 1 : e, e, out, cap);
    s = *e ? e + 1 : e;
  }
  return -ENOENT;
}
