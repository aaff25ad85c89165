/*
 * fuzz_http.c — libFuzzer harness for the HTTP upgrade parser (src/gateway/http.c).
 *
 * The input is the bytes a peer sends before the WebSocket starts. What must hold:
 *   - the parser's answer is one the gateway can send (0 = incomplete, 101, 400, 405, 413,
 *     426, 431) and it consumed at most the input (all of it while incomplete);
 *   - the request seen is the same whether the bytes arrive in one piece, byte by byte or
 *     in pieces of a size derived from the input (method, path, query, every header, the
 *     repeat flags, the API key, the body, the version, the bytes consumed, the status);
 *   - qim_http_parse_buffer (the one-shot entry point) agrees with the incremental parser;
 *   - the limits hold: header block within max_header, body within max_body;
 *   - a 101 really is a valid handshake (GET, HTTP/1.1+, websocket, upgrade, version 13, a
 *     key of 16 base64 bytes), and its accept key and 101 response are well formed;
 *   - the query-string helper never writes past its buffer and returns what it wrote.
 * Two limit pairs run: the gateway's defaults and small ones that make 431/413 likely.
 * Seeds: tests/fuzz/corpus/http/.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "gateway/http.h"
#include "qim/err.h"
#include "qim/websocket.h"

typedef struct limits {
  size_t max_header, max_body;
} limits;

static const limits kLimits[] = {{8192, 65536}, {160, 16}};

static int status_known(int s) {
  return s == 0 || s == 101 || s == 400 || s == 405 || s == 413 || s == 426 || s == 431;
}

/* Everything the gateway reads from a parsed request, into `log`. */
static void log_request(fuzz_log *log, const qim_http_request *r) {
  fuzz_log_str(log, r->method);
  fuzz_log_str(log, r->path);
  fuzz_log_str(log, r->query);
  for (int h = 0; h < QIM_HTTP_H_COUNT; h++) fuzz_log_str(log, r->header[h]);
  fuzz_log_u64(log, r->repeated);
  fuzz_log_str(log, r->apikey);
  fuzz_log_u64(log, r->body_len);
  if (r->body_len) fuzz_log_put(log, r->body, r->body_len);
  fuzz_log_u64(log, r->http_major);
  fuzz_log_u64(log, r->http_minor);
}

/* The handshake rules of qim_http_upgrade_status, restated. */
static void check_upgrade(const qim_http_request *r) {
  FUZZ_CHECK(strcmp(r->method, "GET") == 0);
  FUZZ_CHECK(r->http_major > 1 || (r->http_major == 1 && r->http_minor >= 1));
  FUZZ_CHECK(r->header[QIM_HTTP_H_UPGRADE] && r->header[QIM_HTTP_H_CONNECTION]);
  FUZZ_CHECK(qim_http_has_token(r->header[QIM_HTTP_H_UPGRADE], "websocket"));
  FUZZ_CHECK(qim_http_has_token(r->header[QIM_HTTP_H_CONNECTION], "upgrade"));
  FUZZ_CHECK(r->header[QIM_HTTP_H_WS_VERSION] &&
             strcmp(r->header[QIM_HTTP_H_WS_VERSION], "13") == 0);
  const char *key = r->header[QIM_HTTP_H_WS_KEY];
  FUZZ_CHECK(key && qim_http_ws_key_valid(key) && strlen(key) == 24);
  char accept[QIM_WS_ACCEPT_LEN + 1];
  qim_websocket_accept(key, accept);
  FUZZ_CHECK(strlen(accept) == QIM_WS_ACCEPT_LEN && accept[27] == '=');
  size_t len;
  char *resp = qim_http_format_switching(key, &len);
  FUZZ_CHECK(strlen(resp) == len && strncmp(resp, "HTTP/1.1 101 ", 13) == 0);
  FUZZ_CHECK(strstr(resp, accept) != NULL);
  FUZZ_CHECK(len >= 4 && memcmp(resp + len - 4, "\r\n\r\n", 4) == 0);
  qim_free(resp);
}

/* Strings of a complete request are bounded by what arrived, and the limits held. */
static void check_request(const qim_http_request *r, size_t consumed, const limits *lim) {
  FUZZ_CHECK(r->method && r->path && r->query);
  FUZZ_CHECK(r->body_len <= lim->max_body && (r->body_len == 0) == (r->body == NULL));
  FUZZ_CHECK(r->body_len <= consumed);
  for (int h = 0; h < QIM_HTTP_H_COUNT; h++)
    FUZZ_CHECK(!r->header[h] || strlen(r->header[h]) < lim->max_header);
  char out[32];
  int n = qim_http_query_param(r->query, "apikey", out, sizeof out);
  FUZZ_CHECK(n == -ENOENT || n == -EINVAL || n == -ENOSPC || (n >= 0 && (size_t)n < sizeof out));
  if (n >= 0) FUZZ_CHECK(strlen(out) == (size_t)n);
  /* The API key comes from the header first, else from the query. */
  if (r->header[QIM_HTTP_H_APIKEY]) FUZZ_CHECK(r->apikey == r->header[QIM_HTTP_H_APIKEY]);
  if (!r->header[QIM_HTTP_H_APIKEY] && n >= 0) FUZZ_CHECK(r->apikey && strcmp(r->apikey, out) == 0);
}

/* Feeds `data` in pieces of `step` (0 = one piece); logs the outcome and the request. */
static int run(const uint8_t *data, size_t size, const limits *lim, size_t step, fuzz_log *log) {
  qim_http_parser p;
  qim_http_parser_init(&p, lim->max_header, lim->max_body);
  if (!step || step > size) step = size ? size : 1;
  int rc = QIM_AGAIN;
  size_t consumed = 0;
  for (size_t o = 0; o < size && rc == QIM_AGAIN; o += step) {
    size_t piece = size - o < step ? size - o : step, used = 0;
    rc = qim_http_parser_feed(&p, (const char *)data + o, piece, &used);
    FUZZ_CHECK(used <= piece);
    FUZZ_CHECK(rc == 0 || rc == QIM_AGAIN || rc == -EMSGSIZE || rc == -E2BIG || rc == -EBADMSG);
    if (rc == QIM_AGAIN) FUZZ_CHECK(used == piece);
    consumed += used;
  }
  const qim_http_request *r = qim_http_parser_request(&p);
  FUZZ_CHECK((rc == 0) == (r != NULL));
  int status = rc == QIM_AGAIN ? 0
               : rc < 0        ? qim_http_error_status(rc)
                               : qim_http_upgrade_status(r);
  FUZZ_CHECK(status_known(status));
  fuzz_log_u64(log, (uint64_t)(int64_t)rc);
  fuzz_log_u64(log, (uint64_t)status);
  if (r) {
    FUZZ_CHECK(consumed <= size);
    check_request(r, consumed, lim);
    if (status == 101) check_upgrade(r);
    fuzz_log_u64(log, consumed);
    log_request(log, r);
  }
  qim_http_parser_free(&p);
  return status;
}

static void fuzz_limits(const uint8_t *data, size_t size, const limits *lim) {
  size_t steps[3] = {0, 1, 2 + fuzz_hash(data, size) % 61};
  fuzz_log first = {0};
  int status = run(data, size, lim, steps[0], &first);
  for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
    fuzz_log again = {0};
    FUZZ_CHECK(run(data, size, lim, steps[i], &again) == status);
    FUZZ_CHECK(fuzz_log_equal(&first, &again));
    fuzz_log_free(&again);
  }
  fuzz_log_free(&first);
  size_t consumed = 0;
  FUZZ_CHECK(qim_http_parse_buffer((const char *)data, size, lim->max_header, lim->max_body, 0,
                                   &consumed) == status);
  FUZZ_CHECK(consumed <= size);
  if (status == 0) FUZZ_CHECK(consumed == size);
}

/* The helpers get the raw bytes as a C string too (the parser only gives them header
 * values and queries, which cannot contain some bytes). */
static void fuzz_helpers(const uint8_t *data, size_t size) {
  char s[256];
  size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
  memcpy(s, data, n);
  s[n] = '\0';
  if (qim_http_ws_key_valid(s)) FUZZ_CHECK(strlen(s) == 24 && s[22] == '=' && s[23] == '=');
  char out[8];
  int rc = qim_http_query_param(s, "a", out, sizeof out);
  FUZZ_CHECK(rc == -ENOENT || rc == -EINVAL || rc == -ENOSPC ||
             (rc >= 0 && (size_t)rc < sizeof out));
  (void)qim_http_has_token(s, "upgrade");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (size_t i = 0; i < sizeof kLimits / sizeof kLimits[0]; i++)
    fuzz_limits(data, size, &kLimits[i]);
  fuzz_helpers(data, size);
  return 0;
}
