/*
 * config.c — qimd's settings: one table says every key, its type, bounds, default and
 * meaning; the file, environment and flag sources all go through it, so the help text,
 * the defaults and the checks cannot drift apart (see config.h for the rules).
 */
#include "qim/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the table ------------------------------------------------------------ */

typedef enum vtype {
  V_U32,       /* decimal integer */
  V_BYTES,     /* decimal integer with optional k / m suffix (binary) */
  V_MS,        /* duration: integer + ms|s|m|h|d */
  V_LISTEN,    /* HOST:PORT */
  V_PATH,      /* non-empty path */
  V_STORE,     /* sqlite:PATH | redis://HOST:PORT[/DB] */
  V_API_KEY,   /* list of KEY[:TENANT] */
  V_SERVICE,   /* list of SERVICE:TOKEN */
  V_RETENTION, /* list of TENANT:DURATION */
  V_LEVEL,     /* debug|info|warn|error */
} vtype;

typedef struct setting {
  const char *key; /* file key; flag is --key (with - for _), env is QIM_KEY */
  vtype type;
  size_t off;        /* field in qim_config (numbers and paths) */
  uint64_t min, max; /* bounds of numbers */
  const char *def;   /* default in file syntax; NULL = derived or none */
  const char *arg;   /* metavariable for the help text */
  const char *help;
} setting;

#define F(field) offsetof(qim_config, field)
#define DAY (86400000ull)

static const setting settings[] = {
    {"listen", V_LISTEN, 0, 0, 0, "127.0.0.1:6060", "HOST:PORT",
     "address the gateway listens on (IPv6 as [::1]:6060)"},
    {"data", V_PATH, F(data_dir), 0, 0, "./var", "DIR", "data directory, created at start"},
    {"store", V_STORE, 0, 0, 0, NULL, "URL",
     "message store: sqlite:PATH, sqlite:PATH?memory=DIR (store-memory mode), "
     "sqlite:PATH?from_memory=1 (such a store made a default one again) or "
     "redis://HOST:PORT[/DB]"},
    {"node_id", V_U32, F(node_id), 1, 16777215, "1", "N",
     "this node's id, unique among nodes sharing a store; part of every WriterId"},
    {"io_threads", V_U32, F(io_threads), 1, 64, NULL, "N",
     "gateway I/O threads, one event loop each"},
    {"max_message_size", V_BYTES, F(max_message_size), 1024, 16777216, "131072", "BYTES",
     "largest {pub} content; larger gets {ctrl 413}"},
    {"inline_body_threshold", V_BYTES, F(inline_body_threshold), 0, 16777216, "4096", "BYTES",
     "bodies up to this size are copied into mailboxes; larger ones are fetched from history"},
    {"shard_count", V_U32, F(shard_count), 0, 4096, "0", "N",
     "mailbox shards; fixed when the store is created (0: the store's own, 1 for a new one)"},
    {"lanes_per_shard", V_U32, F(lanes_per_shard), 0, 64, "0", "N",
     "lanes per mailbox shard; fixed when the store is created (0: the store's own, 1 for a "
     "new one)"},
    {"dedupe_window", V_MS, F(dedupe_window_ms), 60000, 365 * DAY, "7d", "DURATION",
     "how long a retried {pub} with the same cmid returns the original seq"},
    {"msg_delete_age", V_MS, F(msg_delete_age_ms), 1000, 365 * DAY, "600s", "DURATION",
     "how long non-owners may hard-delete and senders may recall a message"},
    {"tenant_retention", V_RETENTION, 0, 1000, 36500 * DAY, NULL, "TENANT:DURATION",
     "how long one tenant keeps messages of retention class TenantCustom; repeatable, or "
     "comma-separated"},
    {"member_limit", V_U32, F(member_limit), 2, 1000000, "10000", "N", "most members of one group"},
    {"mailbox_retain_count", V_U32, F(mailbox_retain_count), 1, 4000000000u, "1000000", "N",
     "dispatch records each mailbox lane keeps; older entries are trimmed and cursors behind "
     "them expire"},
    {"mailbox_retention_interval", V_MS, F(mailbox_retention_interval_ms), 1000, 7 * DAY, "60s",
     "DURATION", "how often each mailbox lane trims"},
    {"membership_versions_kept", V_U32, F(membership_versions_kept), 0, 1000000000, "1000", "N",
     "newest membership versions of each group kept readable; older ones are pruned unless a "
     "message not yet fanned out names them; 0 keeps every version"},
    {"commit_linger_us", V_U32, F(commit_linger_us), 0, 100000, "250", "MICROSECONDS",
     "under a steady stream of writes, how long the store keeps a group commit open for "
     "more operations before its fsync (fewer, larger transactions; 0 = never wait)"},
    {"api_key", V_API_KEY, 0, 0, 0, QIM_CONFIG_DEMO_API_KEY ":1", "KEY[:TENANT]",
     "API key clients send (?apikey=) and the tenant it selects (default tenant 1); "
     "repeatable, or comma-separated"},
    {"service_token", V_SERVICE, 0, 0, 0, NULL, "SERVICE:TOKEN",
     "bearer token for the admin API (at least 16 characters); repeatable"},
    {"token_lifetime", V_MS, F(token_lifetime_ms), 60000, 365 * DAY, "14d", "DURATION",
     "lifetime of login tokens"},
    {"login_min_length", V_U32, F(login_min_length), 1, 64, "4", "N", "shortest login name"},
    {"password_min_length", V_U32, F(password_min_length), 1, 128, "6", "N", "shortest password"},
    {"send_rate", V_U32, F(send_rate), 1, 1000000, "50", "N",
     "messages per second one user may send (sustained)"},
    {"send_burst", V_U32, F(send_burst), 1, 1000000, "200", "N",
     "most messages one user may send in a burst (token bucket size)"},
    {"login_rate", V_U32, F(login_rate), 1, 1000000, "20", "N",
     "login and account attempts per second from one remote address (sustained)"},
    {"login_burst", V_U32, F(login_burst), 1, 1000000, "100", "N",
     "most login and account attempts in a burst from one remote address"},
    {"request_rate", V_U32, F(request_rate), 1, 1000000, "100", "N",
     "requests per second one session may send (sustained); beyond: {ctrl 429}, the "
     "connection stays"},
    {"request_burst", V_U32, F(request_burst), 1, 1000000, "200", "N",
     "most requests one session may send in a burst (token bucket size)"},
    {"conns_per_ip", V_U32, F(conns_per_ip), 0, 10000000, "1024", "N",
     "live connections from one remote address; beyond: HTTP 429 before the upgrade (0 = no "
     "limit)"},
    {"presence_interval", V_MS, F(presence_interval_ms), 10, 60000, "250ms", "DURATION",
     "how often online/offline presence is coalesced and sent"},
    {"presence_fanout_max", V_U32, F(presence_fanout_max), 1, 100000000, "8192", "N",
     "most {pres}/{info} deliveries of one presence change or notice per I/O loop; member "
     "changes beyond it wait for the next interval, the rest is dropped and counted"},
    {"typing_interval", V_MS, F(typing_interval_ms), 0, 60000, "1s", "DURATION",
     "shortest time between two typing notices (kp) one session relays to one topic"},
    {"handshake_timeout", V_MS, F(handshake_timeout_ms), 100, 600000, "10s", "DURATION",
     "time a client has to complete the WebSocket upgrade request (slowloris guard)"},
    {"log_level", V_LEVEL, 0, 0, 0, "info", "LEVEL",
     "least severe log level: debug, info, warn, error"},
    {"clock_tolerance", V_MS, F(clock_tolerance_ms), 0, 60000, "1s", "DURATION",
     "how far the wall clock may step back before new messages fail with ClockUnsafe"},
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* ---- small text helpers --------------------------------------------------- */

/* Printf into a fixed buffer, truncating. */
static void fmt(char *out, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(out, cap, f, ap);
  va_end(ap);
}

/* Copies a non-empty string and zeroes the rest of `dst`, so equal configurations are
 * equal byte for byte. */
static int copy_str(char *dst, size_t cap, const char *src, size_t len) {
  if (len == 0 || len >= cap || memchr(src, '\0', len)) return -EINVAL;
  memcpy(dst, src, len);
  memset(dst + len, 0, cap - len);
  return 0;
}

/* Strict unsigned decimal: digits only, no sign, no spaces, no overflow. */
static int parse_u64(const char *s, size_t len, uint64_t *out) {
  uint64_t v = 0;
  if (len == 0) return -EINVAL;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -EINVAL;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -EINVAL;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static const struct {
  const char *suffix;
  uint64_t ms;
} units[] = {{"d", DAY}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};

/* "600s", "7d", "250ms": a unit is required so that no reader has to guess one. */
static int parse_duration(const char *s, uint64_t *out) {
  size_t digits = strspn(s, "0123456789");
  uint64_t n;
  if (parse_u64(s, digits, &n) < 0) return -EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(s + digits, units[i].suffix) != 0) continue;
    if (n > UINT64_MAX / units[i].ms) return -EINVAL;
    *out = n * units[i].ms;
    return 0;
  }
  return -EINVAL;
}

/* The shortest exact spelling of a duration ("7d", "600s" stays "10m"). */
static void format_duration(uint64_t ms, char *out, size_t cap) {
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ms % units[i].ms == 0 && (ms != 0 || units[i].ms == 1)) {
      fmt(out, cap, "%" PRIu64 "%s", ms / units[i].ms, units[i].suffix);
      return;
    }
  }
}

/* Bytes: a decimal count, optionally with k or m (KiB, MiB). */
static int parse_bytes(const char *s, uint64_t *out) {
  size_t digits = strspn(s, "0123456789");
  uint64_t n, mul = 1;
  if (parse_u64(s, digits, &n) < 0) return -EINVAL;
  const char *suf = s + digits;
  if (strcasecmp(suf, "k") == 0)
    mul = 1024;
  else if (strcasecmp(suf, "m") == 0)
    mul = 1024 * 1024;
  else if (*suf)
    return -EINVAL;
  if (n > UINT64_MAX / mul) return -EINVAL;
  *out = n * mul;
  return 0;
}

/* ---- value parsers: each fills `why` ("expected ..., got '...'") on failure ---- */

/* IPv4, bracket-less IPv6 (from inside [..]) or a DNS name. */
static int valid_host(const char *h, bool v6) {
  unsigned char buf[16];
  if (v6) return inet_pton(AF_INET6, h, buf) == 1;
  if (inet_pton(AF_INET, h, buf) == 1) return 1;
  size_t n = strlen(h);
  if (n == 0 || n > 253 || h[0] == '-' || h[0] == '.') return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.') return 0;
  return 1;
}

/* Splits "HOST:PORT" or "[V6]:PORT"; port 1..65535. */
static int parse_host_port(const char *v, char *host, size_t cap, uint16_t *port,
                           const char **rest) {
  const char *colon;
  bool v6 = v[0] == '[';
  size_t hlen;
  if (v6) {
    const char *close = strchr(v, ']');
    if (!close || close[1] != ':') return -EINVAL;
    hlen = (size_t)(close - v - 1);
    colon = close + 1;
    if (copy_str(host, cap, v + 1, hlen) < 0) return -EINVAL;
  } else {
    colon = strchr(v, ':');
    if (!colon) return -EINVAL;
    hlen = (size_t)(colon - v);
    if (copy_str(host, cap, v, hlen) < 0) return -EINVAL;
  }
  if (!valid_host(host, v6)) return -EINVAL;
  const char *p = colon + 1;
  size_t plen = strspn(p, "0123456789");
  uint64_t n;
  if (parse_u64(p, plen, &n) < 0 || n < 1 || n > 65535) return -EINVAL;
  *port = (uint16_t)n;
  *rest = p + plen;
  return 0;
}

static int set_listen(qim_config *c, const char *v, char *why, size_t cap) {
  char host[QIM_CONFIG_HOST_CAP];
  uint16_t port;
  const char *rest;
  if (parse_host_port(v, host, sizeof host, &port, &rest) < 0 || *rest) {
    fmt(why, cap, "expected HOST:PORT, got '%s'", v);
    return -EINVAL;
  }
  copy_str(c->listen_host, sizeof c->listen_host, host, strlen(host));
  c->listen_port = port;
  return 0;
}

/* Parses a store URL into locals first, so a bad URL leaves `c` untouched. */
static int set_store(qim_config *c, const char *v, char *why, size_t cap) {
  char path[QIM_CONFIG_PATH_CAP] = "", host[QIM_CONFIG_HOST_CAP] = "";
  uint16_t port = 0;
  uint64_t db = 0;
  qim_storage_backend backend = QIM_STORAGE_BACKEND_SQLITE;
  const char *rest;
  int ok = strlen(v) < sizeof c->store_url;
  if (ok && strncmp(v, "sqlite:", 7) == 0) {
    ok = copy_str(path, sizeof path, v + 7, strlen(v + 7)) == 0;
  } else if (ok && strncmp(v, "redis://", 8) == 0) {
    backend = QIM_STORAGE_BACKEND_REDIS;
    ok = parse_host_port(v + 8, host, sizeof host, &port, &rest) == 0 &&
         (*rest == '\0' ||
          (rest[0] == '/' && parse_u64(rest + 1, strlen(rest + 1), &db) == 0 && db <= 15));
  } else {
    ok = 0;
  }
  if (!ok) {
    fmt(why, cap, "expected sqlite:PATH or redis://HOST:PORT[/DB] (DB 0-15), got '%s'", v);
    return -EINVAL;
  }
  copy_str(c->store_url, sizeof c->store_url, v, strlen(v));
  memcpy(c->store_path, path, sizeof path);
  memcpy(c->store_host, host, sizeof host);
  c->store_backend = backend;
  c->store_port = port;
  c->store_db = (uint32_t)db;
  return 0;
}

/* Tenant: decimal (1..2^64-1) or 0x + up to 32 hex digits; never zero. */
static int parse_tenant(const char *s, qim_tenant_id *out) {
  qim_u128 v = {0, 0};
  if (strncmp(s, "0x", 2) == 0) {
    size_t n = strlen(s + 2);
    if (n == 0 || n > 32 || strspn(s + 2, "0123456789abcdefABCDEF") != n) return -EINVAL;
    for (const char *p = s + 2; *p; p++) {
      unsigned d = (unsigned)(isdigit((unsigned char)*p) ? *p - '0'
                                                         : (tolower((unsigned char)*p) - 'a' + 10));
      v.hi = (v.hi << 4) | (v.lo >> 60);
      v.lo = (v.lo << 4) | d;
    }
  } else if (parse_u64(s, strlen(s), &v.lo) < 0) {
    return -EINVAL;
  }
  if (v.hi == 0 && v.lo == 0) return -EINVAL;
  out->v = v;
  return 0;
}

/* Characters allowed in an API key: URL-safe, since clients send it in a query string. */
static bool key_chars_ok(const char *k, size_t n) {
  static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~";
  return n > 0 && strspn(k, ok) >= n;
}

static int add_api_key(qim_config *c, const char *e, size_t n, char *why, size_t cap) {
  char entry[QIM_CONFIG_API_KEY_CAP + 48];
  if (n >= sizeof entry) {
    fmt(why, cap, "expected KEY[:TENANT] of at most %zu characters", sizeof entry - 1);
    return -EINVAL;
  }
  memcpy(entry, e, n);
  entry[n] = '\0';
  char *colon = strchr(entry, ':');
  size_t klen = colon ? (size_t)(colon - entry) : n;
  qim_config_api_key k = {.tenant = {{0, 1}}};
  if (!key_chars_ok(entry, klen) || klen >= sizeof k.key ||
      (colon && parse_tenant(colon + 1, &k.tenant) < 0)) {
    fmt(why, cap,
        "expected KEY[:TENANT] (KEY of URL-safe characters, TENANT a non-zero number), got '%s'",
        entry);
    return -EINVAL;
  }
  memcpy(k.key, entry, klen);
  for (uint32_t i = 0; i < c->api_key_count; i++)
    if (strcmp(c->api_keys[i].key, k.key) == 0) {
      fmt(why, cap, "key '%s' is listed twice", k.key);
      return -EINVAL;
    }
  if (c->api_key_count == QIM_CONFIG_MAX_API_KEYS) {
    fmt(why, cap, "at most %d keys are allowed", QIM_CONFIG_MAX_API_KEYS);
    return -EINVAL;
  }
  c->api_keys[c->api_key_count++] = k;
  return 0;
}

/* Never echoes the token: error messages end up in logs. */
static int add_service_token(qim_config *c, const char *e, size_t n, char *why, size_t cap) {
  const char *colon = memchr(e, ':', n);
  qim_config_service_token t = {{0}, {0}};
  size_t slen = colon ? (size_t)(colon - e) : n;
  size_t tlen = colon ? n - slen - 1 : 0;
  if (!colon || !key_chars_ok(e, slen) || slen >= sizeof t.service) {
    fmt(why, cap, "expected SERVICE:TOKEN with SERVICE of URL-safe characters (value not shown)");
    return -EINVAL;
  }
  memcpy(t.service, e, slen);
  t.service[slen] = '\0';
  if (tlen < QIM_CONFIG_TOKEN_MIN || tlen >= sizeof t.token || !key_chars_ok(colon + 1, tlen)) {
    fmt(why, cap, "token for '%s' must be %d to %zu URL-safe characters (value not shown)",
        t.service, QIM_CONFIG_TOKEN_MIN, sizeof t.token - 1);
    return -EINVAL;
  }
  memcpy(t.token, colon + 1, tlen);
  t.token[tlen] = '\0';
  for (uint32_t i = 0; i < c->service_token_count; i++)
    if (strcmp(c->service_tokens[i].service, t.service) == 0 ||
        strcmp(c->service_tokens[i].token, t.token) == 0) {
      fmt(why, cap, "service '%s' or its token is listed twice", t.service);
      return -EINVAL;
    }
  if (c->service_token_count == QIM_CONFIG_MAX_SERVICE_TOKENS) {
    fmt(why, cap, "at most %d service tokens are allowed", QIM_CONFIG_MAX_SERVICE_TOKENS);
    return -EINVAL;
  }
  c->service_tokens[c->service_token_count++] = t;
  return 0;
}

static int add_tenant_retention(qim_config *c, const setting *s, const char *e, size_t n, char *why,
                                size_t cap) {
  char entry[96];
  const char *colon = memchr(e, ':', n);
  qim_config_tenant_retention r = {{{0, 0}}, 0};
  bool ok = colon && n < sizeof entry;
  if (ok) {
    memcpy(entry, e, n);
    entry[n] = '\0';
    entry[colon - e] = '\0';
    ok = parse_tenant(entry, &r.tenant) == 0 &&
         parse_duration(entry + (colon - e) + 1, &r.age_ms) == 0 && r.age_ms >= s->min &&
         r.age_ms <= s->max;
  }
  if (!ok) {
    fmt(why, cap,
        "expected TENANT:DURATION (a non-zero tenant, a duration from 1s to 36500d), got '%.*s'",
        (int)n, e);
    return -EINVAL;
  }
  for (uint32_t i = 0; i < c->tenant_retention_count; i++)
    if (c->tenant_retentions[i].tenant.v.hi == r.tenant.v.hi &&
        c->tenant_retentions[i].tenant.v.lo == r.tenant.v.lo) {
      fmt(why, cap, "tenant '%s' is listed twice", entry);
      return -EINVAL;
    }
  if (c->tenant_retention_count == QIM_CONFIG_MAX_TENANT_RETENTIONS) {
    fmt(why, cap, "at most %d tenants are allowed", QIM_CONFIG_MAX_TENANT_RETENTIONS);
    return -EINVAL;
  }
  c->tenant_retentions[c->tenant_retention_count++] = r;
  return 0;
}

/* A list value holds one or more comma-separated entries; each is added in order. */
static int add_list(qim_config *c, const setting *s, const char *v, char *why, size_t cap) {
  const char *p = v;
  for (;;) {
    size_t n = strcspn(p, ",");
    while (n && isspace((unsigned char)*p)) p++, n--;
    while (n && isspace((unsigned char)p[n - 1])) n--;
    if (n == 0) {
      fmt(why, cap, "expected %s, got an empty entry in '%s'", s->arg,
          s->type == V_SERVICE ? "(value not shown)" : v);
      return -EINVAL;
    }
    int rc = s->type == V_API_KEY     ? add_api_key(c, p, n, why, cap)
             : s->type == V_RETENTION ? add_tenant_retention(c, s, p, n, why, cap)
                                      : add_service_token(c, p, n, why, cap);
    if (rc < 0) return rc;
    p += strcspn(p, ",");
    if (*p == '\0') return 0;
    p++;
  }
}

static const char *level_names[] = {"debug", "info", "warn", "error"};

static int set_level(qim_config *c, const char *v, char *why, size_t cap) {
  for (int i = 0; i < 4; i++)
    if (strcmp(v, level_names[i]) == 0) {
      c->log_level = (qim_log_level)i;
      return 0;
    }
  fmt(why, cap, "expected one of debug, info, warn, error, got '%s'", v);
  return -EINVAL;
}

static int set_number(qim_config *c, const setting *s, const char *v, char *why, size_t cap) {
  uint64_t n;
  int rc = s->type == V_MS      ? parse_duration(v, &n)
           : s->type == V_BYTES ? parse_bytes(v, &n)
                                : parse_u64(v, strlen(v), &n);
  if (rc == 0 && n >= s->min && n <= s->max) {
    if (s->type == V_MS)
      *(uint64_t *)((char *)c + s->off) = n;
    else
      *(uint32_t *)((char *)c + s->off) = (uint32_t)n;
    return 0;
  }
  if (s->type == V_MS) {
    char lo[32], hi[32];
    format_duration(s->min, lo, sizeof lo);
    format_duration(s->max, hi, sizeof hi);
    fmt(why, cap, "expected a duration from %s to %s (a number with ms, s, m, h or d), got '%s'",
        lo, hi, v);
  } else {
    fmt(why, cap, "expected %s from %" PRIu64 " to %" PRIu64 ", got '%s'",
        s->type == V_BYTES ? "a size in bytes (k or m suffix allowed)" : "an integer", s->min,
        s->max, v);
  }
  return -EINVAL;
}

/* Parses `v` for setting `s` into `c`. Lists are appended to (the caller clears them). */
static int set_value(qim_config *c, const setting *s, const char *v, char *why, size_t cap) {
  switch (s->type) {
    case V_U32:
    case V_BYTES:
    case V_MS:
      return set_number(c, s, v, why, cap);
    case V_LISTEN:
      return set_listen(c, v, why, cap);
    case V_STORE:
      return set_store(c, v, why, cap);
    case V_API_KEY:
    case V_SERVICE:
    case V_RETENTION:
      return add_list(c, s, v, why, cap);
    case V_LEVEL:
      return set_level(c, v, why, cap);
    case V_PATH:
      if (copy_str((char *)c + s->off, QIM_CONFIG_PATH_CAP, v, strlen(v)) == 0) return 0;
      fmt(why, cap, "expected a path of 1 to %d bytes, got '%s'", QIM_CONFIG_PATH_CAP - 1, v);
      return -EINVAL;
  }
  return -EINVAL;
}

/* ---- sources and precedence ----------------------------------------------- */

typedef enum layer { L_DEFAULT, L_FILE, L_ENV, L_FLAG } layer;

typedef struct origin {
  layer layer;
  unsigned line; /* L_FILE */
} origin;

/* State of one qim_config_load call. */
typedef struct loader {
  qim_config *c;
  qim_config_error *err;
  origin from[NSETTINGS]; /* where each setting's current value came from */
  bool seen[NSETTINGS];   /* set by the source being applied: lists replace, scalars once */
  bool store_given;
} loader;

static void flag_name(const setting *s, char *out, size_t cap) {
  fmt(out, cap, "--%s", s->key);
  for (char *p = out; *p; p++)
    if (*p == '_') *p = '-';
}

static void env_name(const setting *s, char *out, size_t cap) {
  fmt(out, cap, "QIM_%s", s->key);
  for (char *p = out; *p; p++) *p = (char)toupper((unsigned char)*p);
}

static void describe(const loader *L, size_t i, char *out, size_t cap) {
  char name[64];
  switch (L->from[i].layer) {
    case L_DEFAULT:
      fmt(out, cap, "default");
      break;
    case L_FILE:
      fmt(out, cap, "from %s:%u", L->c->config_file, L->from[i].line);
      break;
    case L_ENV:
      env_name(&settings[i], name, sizeof name), fmt(out, cap, "from %s", name);
      break;
    case L_FLAG:
      flag_name(&settings[i], name, sizeof name), fmt(out, cap, "from %s", name);
      break;
  }
}

/* Records an error that is not about one setting's value. */
static int fail(loader *L, int rc, const char *key, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(loader *L, int rc, const char *key, const char *f, ...) {
  char text[sizeof L->err->message - 8];
  va_list ap;
  va_start(ap, f);
  vsnprintf(text, sizeof text, f, ap);
  va_end(ap);
  fmt(L->err->key, sizeof L->err->key, "%s", key);
  fmt(L->err->message, sizeof L->err->message, "config: %s", text);
  return rc;
}

/* Records a bad value of setting i: "config: KEY: WHY (from SOURCE)". */
static int fail_value(loader *L, size_t i, const char *why) {
  char where[QIM_CONFIG_PATH_CAP + 32];
  describe(L, i, where, sizeof where);
  return fail(L, -EINVAL, settings[i].key, "%s: %s (%s)", settings[i].key, why, where);
}

static int find_setting(const char *key, size_t len, size_t *idx) {
  for (size_t i = 0; i < NSETTINGS; i++)
    if (strlen(settings[i].key) == len && memcmp(settings[i].key, key, len) == 0) {
      *idx = i;
      return 0;
    }
  return -ENOENT;
}

static bool is_list(const setting *s) {
  return s->type == V_API_KEY || s->type == V_SERVICE || s->type == V_RETENTION;
}

static void begin_source(loader *L) {
  memset(L->seen, 0, sizeof L->seen);
}

/* Applies one value of one source; the source's precedence is its order of application. */
static int apply(loader *L, size_t i, const char *v, layer ly, unsigned line) {
  const setting *s = &settings[i];
  origin prev = L->from[i];
  char why[400];
  L->from[i] = (origin){ly, line};
  if (L->seen[i] && !is_list(s)) {
    if (ly == L_FILE)
      fmt(why, sizeof why, "set twice (lines %u and %u)", prev.line, line);
    else
      fmt(why, sizeof why, "given twice");
    return fail_value(L, i, why);
  }
  if (!L->seen[i] && s->type == V_API_KEY) L->c->api_key_count = 0;
  if (!L->seen[i] && s->type == V_SERVICE) L->c->service_token_count = 0;
  if (!L->seen[i] && s->type == V_RETENTION) L->c->tenant_retention_count = 0;
  L->seen[i] = true;
  if (set_value(L->c, s, v, why, sizeof why) < 0) return fail_value(L, i, why);
  if (s->type == V_STORE) L->store_given = true;
  return 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* One line of the file: blank, comment, or `key = value` (a '#' after whitespace ends it). */
static int file_line(loader *L, char *line, unsigned n) {
  const char *path = L->c->config_file;
  for (char *p = line; *p; p++)
    if (*p == '#' && (p == line || isspace((unsigned char)p[-1]))) {
      *p = '\0';
      break;
    }
  char *t = trim(line);
  if (*t == '\0') return 0;
  char *eq = strchr(t, '=');
  if (!eq) return fail(L, -EINVAL, "", "%s:%u: expected 'key = value', got '%.200s'", path, n, t);
  *eq = '\0';
  char *key = trim(t), *value = trim(eq + 1);
  size_t i;
  if (find_setting(key, strlen(key), &i) < 0)
    return fail(L, -EINVAL, key, "%s:%u: unknown key '%.100s'", path, n, key);
  return apply(L, i, value, L_FILE, n);
}

static int load_file(loader *L) {
  const char *path = L->c->config_file;
  FILE *f = fopen(path, "re");
  if (!f) {
    int e = errno;
    return fail(L, -e, "config", "config: cannot read '%s': %s", path, strerror(e));
  }
  char line[4096];
  unsigned n = 0;
  int rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    n++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f))
      rc = fail(L, -EINVAL, "", "%s:%u: line longer than %zu characters", path, n, sizeof line - 2);
    else
      rc = file_line(L, line, n);
  }
  if (rc == 0 && ferror(f)) rc = fail(L, -EIO, "config", "config: error reading '%s'", path);
  fclose(f);
  return rc;
}

static const char *env_get(char *const envp[], const char *name) {
  size_t n = strlen(name);
  for (; envp && *envp; envp++)
    if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=') return *envp + n + 1;
  return NULL;
}

static int load_env(loader *L, char *const envp[]) {
  char name[64];
  begin_source(L);
  for (size_t i = 0; i < NSETTINGS; i++) {
    env_name(&settings[i], name, sizeof name);
    const char *v = env_get(envp, name);
    int rc = v ? apply(L, i, v, L_ENV, 0) : 0;
    if (rc < 0) return rc;
  }
  return 0;
}

/* Reads the flag at argv[*i] (`--name value` or `--name=value`) and advances *i past it.
 * *idx is a settings index, or NSETTINGS for --config. */
static int next_flag(loader *L, int argc, char *const argv[], int *i, size_t *idx,
                     const char **val) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0)
    return fail(L, -EINVAL, "", "unexpected argument '%.200s' (settings are given as --name VALUE)",
                a);
  const char *name = a + 2;
  size_t len = strcspn(name, "=");
  char key[64];
  bool known = len < sizeof key && !memchr(name, '_', len);
  if (known) {
    memcpy(key, name, len);
    key[len] = '\0';
    for (char *p = key; *p; p++)
      if (*p == '-') *p = '_';
    if (strcmp(key, "config") == 0)
      *idx = NSETTINGS;
    else
      known = find_setting(key, len, idx) == 0;
  }
  if (!known)
    return fail(L, -EINVAL, "", "unknown flag '%.*s' (qimd --help lists them)", (int)(len + 2), a);
  if (name[len] == '=') {
    *val = name + len + 1;
  } else if (*i + 1 < argc) {
    *val = argv[++*i];
  } else {
    return fail(L, -EINVAL, *idx == NSETTINGS ? "config" : settings[*idx].key,
                "%s: missing value after %s", *idx == NSETTINGS ? "config" : settings[*idx].key, a);
  }
  (*i)++;
  return 0;
}

/* The file comes from --config, else QIM_CONFIG; it must be named before it is read. */
static int find_config_file(loader *L, int argc, char *const argv[], char *const envp[]) {
  const char *path = NULL, *from = "QIM_CONFIG";
  size_t idx;
  const char *val;
  for (int i = 0; i < argc;) {
    int rc = next_flag(L, argc, argv, &i, &idx, &val);
    if (rc < 0) return rc;
    if (idx != NSETTINGS) continue;
    if (path) return fail(L, -EINVAL, "config", "config: given twice (from --config)");
    path = val;
    from = "--config";
  }
  if (!path) path = env_get(envp, "QIM_CONFIG");
  if (!path) return 0;
  if (copy_str(L->c->config_file, sizeof L->c->config_file, path, strlen(path)) < 0)
    return fail(L, -EINVAL, "config", "config: expected a file path, got '%.200s' (from %s)", path,
                from);
  return 1;
}

static int load_flags(loader *L, int argc, char *const argv[]) {
  size_t idx;
  const char *val;
  begin_source(L);
  for (int i = 0; i < argc;) {
    int rc = next_flag(L, argc, argv, &i, &idx, &val);
    if (rc == 0 && idx != NSETTINGS) rc = apply(L, idx, val, L_FLAG, 0);
    if (rc < 0) return rc;
  }
  return 0;
}

static int derive_store(qim_config *c) {
  char url[QIM_CONFIG_PATH_CAP + 16], why[8];
  fmt(url, sizeof url, "sqlite:%s/qim.db", c->data_dir);
  if (strlen(url) >= sizeof c->store_url) return -EINVAL;
  return set_store(c, url, why, sizeof why);
}

/* Index of a key the code names; a missing one is a bug in the table. */
static size_t index_of(const char *key) {
  size_t i = 0;
  if (find_setting(key, strlen(key), &i) < 0) abort();
  return i;
}

/* Checks that involve more than one setting, after every source is applied. */
static int finish(loader *L) {
  if (!L->store_given && derive_store(L->c) < 0)
    return fail_value(L, index_of("data"), "too long to derive the store path <data>/qim.db");
  if (L->c->inline_body_threshold > L->c->max_message_size) {
    char why[128];
    size_t i = index_of("inline_body_threshold");
    fmt(why, sizeof why, "must not exceed max_message_size (%" PRIu32 "), got %" PRIu32,
        L->c->max_message_size, L->c->inline_body_threshold);
    return fail_value(L, i, why);
  }
  return 0;
}

int qim_config_load(qim_config *out, int argc, char *const argv[], char *const envp[],
                    qim_config_error *err) {
  loader L = {.c = out, .err = err};
  memset(err, 0, sizeof *err);
  qim_config_defaults(out);
  int rc = find_config_file(&L, argc, argv, envp);
  if (rc > 0) begin_source(&L), rc = load_file(&L);
  if (rc == 0) rc = load_env(&L, envp);
  if (rc == 0) rc = load_flags(&L, argc, argv);
  if (rc == 0) rc = finish(&L);
  return rc;
}

/* ---- defaults, lookups and printing ---------------------------------------- */

static uint32_t cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (uint32_t)n;
}

void qim_config_defaults(qim_config *c) {
  char why[400];
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NSETTINGS; i++) {
    if (settings[i].def && set_value(c, &settings[i], settings[i].def, why, sizeof why) < 0) {
      /* The table is code: a default it cannot parse is a bug caught by every test. */
      fprintf(stderr, "config: bad built-in default for %s: %s\n", settings[i].key, why);
      abort();
    }
  }
  c->io_threads = cores();
  if (derive_store(c) < 0) abort();
}

int qim_config_tenant_for_api_key(const qim_config *c, const char *key, size_t len,
                                  qim_tenant_id *out) {
  for (uint32_t i = 0; i < c->api_key_count; i++)
    if (strlen(c->api_keys[i].key) == len && memcmp(c->api_keys[i].key, key, len) == 0) {
      *out = c->api_keys[i].tenant;
      return 0;
    }
  return -ENOENT;
}

/* Compares every byte so the time taken does not reveal how much of a token matched. */
static bool same_secret(const char *a, const char *b, size_t len) {
  unsigned char d = 0;
  for (size_t i = 0; i < len; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

int qim_config_service_for_token(const qim_config *c, const char *token, size_t len,
                                 const char **service) {
  int found = -ENOENT;
  for (uint32_t i = 0; i < c->service_token_count; i++)
    if (strlen(c->service_tokens[i].token) == len &&
        same_secret(c->service_tokens[i].token, token, len) && found < 0) {
      *service = c->service_tokens[i].service;
      found = 0;
    }
  return found;
}

const char *qim_config_log_level_name(qim_log_level level) {
  return (unsigned)level < 4 ? level_names[level] : "unknown";
}

/* The defaults the table cannot spell as a constant. */
static const char *default_text(const setting *s) {
  if (s->def) return s->def;
  if (s->type == V_STORE) return "sqlite:<data>/qim.db";
  if (s->type == V_SERVICE || s->type == V_RETENTION) return "none";
  return "number of cores";
}

void qim_config_write_help(FILE *out) {
  char flag[64], env[64];
  fprintf(out,
          "  --config FILE  (QIM_CONFIG)\n"
          "      read settings from FILE: `key = value` lines, `#` comments; keys are the\n"
          "      names below without the leading -- and with _ for -\n");
  for (size_t i = 0; i < NSETTINGS; i++) {
    const setting *s = &settings[i];
    flag_name(s, flag, sizeof flag);
    env_name(s, env, sizeof env);
    fprintf(out, "  %s %s  (%s; default %s)\n      %s\n", flag, s->arg, env, default_text(s),
            s->help);
  }
  fprintf(out,
          "Precedence: flags > environment > file > defaults. Durations take a unit\n"
          "(ms, s, m, h, d); sizes are bytes, or k / m for KiB / MiB.\n");
}

static void write_value(const qim_config *c, const setting *s, FILE *out) {
  char buf[64];
  const void *field = (const char *)c + s->off;
  switch (s->type) {
    case V_U32:
    case V_BYTES:
      fprintf(out, "%s = %" PRIu32 "\n", s->key, *(const uint32_t *)field);
      break;
    case V_MS:
      format_duration(*(const uint64_t *)field, buf, sizeof buf),
          fprintf(out, "%s = %s\n", s->key, buf);
      break;
    case V_PATH:
      fprintf(out, "%s = %s\n", s->key, (const char *)field);
      break;
    case V_STORE:
      fprintf(out, "%s = %s\n", s->key, c->store_url);
      break;
    case V_LEVEL:
      fprintf(out, "%s = %s\n", s->key, qim_config_log_level_name(c->log_level));
      break;
    case V_LISTEN:
      fprintf(out, strchr(c->listen_host, ':') ? "%s = [%s]:%u\n" : "%s = %s:%u\n", s->key,
              c->listen_host, c->listen_port);
      break;
    case V_API_KEY:
      for (uint32_t i = 0; i < c->api_key_count; i++) {
        const qim_u128 t = c->api_keys[i].tenant.v;
        if (t.hi)
          fprintf(out, "%s = %s:0x%" PRIx64 "%016" PRIx64 "\n", s->key, c->api_keys[i].key, t.hi,
                  t.lo);
        else
          fprintf(out, "%s = %s:%" PRIu64 "\n", s->key, c->api_keys[i].key, t.lo);
      }
      break;
    case V_RETENTION:
      for (uint32_t i = 0; i < c->tenant_retention_count; i++) {
        const qim_u128 t = c->tenant_retentions[i].tenant.v;
        format_duration(c->tenant_retentions[i].age_ms, buf, sizeof buf);
        if (t.hi)
          fprintf(out, "%s = 0x%" PRIx64 "%016" PRIx64 ":%s\n", s->key, t.hi, t.lo, buf);
        else
          fprintf(out, "%s = %" PRIu64 ":%s\n", s->key, t.lo, buf);
      }
      break;
    case V_SERVICE:
      for (uint32_t i = 0; i < c->service_token_count; i++)
        fprintf(out, "# %s = %s:(token not shown)\n", s->key, c->service_tokens[i].service);
      break;
  }
}

void qim_config_write(const qim_config *c, FILE *out) {
  for (size_t i = 0; i < NSETTINGS; i++) write_value(c, &settings[i], out);
}
