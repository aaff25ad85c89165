/*
 * http.h — the HTTP/1.1 side of the gateway: parsing one request (the WebSocket
 * upgrade or a plain request for a registered route) with http_parser, checking an
 * upgrade against RFC 6455 §4.2.1, computing Sec-WebSocket-Accept and formatting
 * responses. Free of I/O: qim_http_parser_feed() works on any byte buffer, so a
 * fuzz harness can drive it.
 *
 * Bounds: the request line plus headers may not exceed max_header bytes (431), a body
 * may not exceed max_body bytes (413). The parser keeps the raw header bytes only
 * while they arrive; once a request is complete it holds a compact copy of the
 * fields of interest and the body.
 */
#ifndef QIM_GATEWAY_HTTP_H
#define QIM_GATEWAY_HTTP_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Headers the gateway looks at; everything else is skipped while parsing. */
typedef enum qim_http_header {
  QIM_HTTP_H_HOST = 0,
  QIM_HTTP_H_UPGRADE,
  QIM_HTTP_H_CONNECTION,
  QIM_HTTP_H_WS_KEY,        /* Sec-WebSocket-Key */
  QIM_HTTP_H_WS_VERSION,    /* Sec-WebSocket-Version */
  QIM_HTTP_H_WS_EXTENSIONS, /* Sec-WebSocket-Extensions (read, never accepted) */
  QIM_HTTP_H_WS_PROTOCOL,   /* Sec-WebSocket-Protocol */
  QIM_HTTP_H_APIKEY,        /* X-Tinode-APIKey */
  QIM_HTTP_H_AUTHORIZATION,
  QIM_HTTP_H_CONTENT_TYPE,
  QIM_HTTP_H_ORIGIN,
  QIM_HTTP_H_USER_AGENT,
  QIM_HTTP_H_FORWARDED_FOR, /* X-Forwarded-For */
  QIM_HTTP_H_SERVICE_TOKEN, /* X-Qim-Service-Token (admin API) */
  QIM_HTTP_H_COUNT
} qim_http_header;

/* A parsed request. Strings are NUL-terminated and owned by the parser. */
typedef struct qim_http_request {
  const char *method;                   /* "GET", "POST", ... */
  const char *path;                     /* as sent, not percent-decoded */
  const char *query;                    /* after '?', "" when none */
  const char *header[QIM_HTTP_H_COUNT]; /* values (trimmed), NULL when absent */
  uint32_t repeated;                    /* bit (1u << h) when header h came more than once */
  const char *apikey;  /* X-Tinode-APIKey, else the decoded `apikey` query value, else NULL */
  const uint8_t *body; /* NULL when there is none */
  size_t body_len;
  unsigned http_major, http_minor;
} qim_http_request;

/* Parser state; fields are private. */
typedef struct qim_http_parser {
  http_parser hp_;
  char *raw_; /* request line + headers as received (bounded) */
  size_t raw_len_, raw_cap_;
  uint8_t *body_; /* body bytes (bounded) */
  size_t body_len_, body_cap_;
  size_t max_header_, max_body_;
  uint32_t url_off_, url_len_;
  uint32_t field_off_, field_len_;
  uint32_t val_off_[QIM_HTTP_H_COUNT];
  uint32_t val_len_[QIM_HTTP_H_COUNT];
  int cur_; /* header whose value is being read, -1 for others */
  int err_;
  bool in_value_, headers_done_, complete_;
  char *arena_; /* strings of `req_` */
  qim_http_request req_;
} qim_http_parser;

void qim_http_parser_init(qim_http_parser *p, size_t max_header, size_t max_body);

/*
 * Feeds received bytes. Returns:
 *   0          the request is complete; *consumed says how many of these bytes
 *              belonged to it (the rest is the next protocol, e.g. WebSocket frames);
 *   QIM_AGAIN  all bytes consumed, more are needed;
 *   -EMSGSIZE  request line + headers exceed max_header (answer 431);
 *   -E2BIG     the body exceeds max_body (answer 413);
 *   -EBADMSG   not a valid HTTP/1.x request (answer 400).
 * After 0 or an error the parser accepts no more input (it returns the same value).
 */
int qim_http_parser_feed(qim_http_parser *p, const char *data, size_t len, size_t *consumed);

/* The parsed request; valid after feed returned 0, until qim_http_parser_free. */
const qim_http_request *qim_http_parser_request(const qim_http_parser *p);

/* Frees everything the parser holds (not `p` itself). Accepts NULL and a zeroed parser. */
void qim_http_parser_free(qim_http_parser *p);

/*
 * One-shot parse of a buffer, for fuzz harnesses and tests: feeds `data` to a fresh
 * parser in pieces of `step` bytes (0 = at once) and returns the HTTP status the
 * gateway would answer on the WebSocket path — 101 for a valid upgrade, the refusal
 * from qim_http_upgrade_status, or qim_http_error_status of a parse error — or 0 when
 * the request is incomplete. *consumed (may be NULL) gets the bytes the request used.
 */
int qim_http_parse_buffer(const char *data, size_t len, size_t max_header, size_t max_body,
                          size_t step, size_t *consumed);

/* The HTTP status that answers a feed error (431, 413, 400). */
int qim_http_error_status(int err);

/*
 * Checks a request as a WebSocket opening handshake (not its path). Returns 101 when
 * it is one, else the status to answer: 405 for a method other than GET; 400 when
 * HTTP/1.1+, `Upgrade: websocket`, `Connection: upgrade` or a single valid
 * Sec-WebSocket-Key is missing; 426 when Sec-WebSocket-Version is missing or not 13
 * (the answer must then carry `Sec-WebSocket-Version: 13`).
 */
int qim_http_upgrade_status(const qim_http_request *r);

/* True when `key` is base64 of exactly 16 bytes (RFC 6455 §4.1). */
bool qim_http_ws_key_valid(const char *key);

/* The Sec-WebSocket-Accept for a client key is qim_websocket_accept (qim/websocket.h). */

/* Standard reason phrase ("Not Found"); "Unknown" for codes qim never sends. */
const char *qim_http_reason(int status);

/*
 * Formats a complete response that closes the connection: status line, optional
 * Content-Type, Content-Length, `extra` header lines (each ending in CRLF, may be
 * NULL), then the body. Returns a qim_malloc'ed buffer the caller frees; *len gets
 * its size.
 */
char *qim_http_format_response(int status, const char *content_type, const char *extra,
                               const void *body, size_t body_len, size_t *len);

/* The 101 answer that completes a WebSocket handshake for `key`. Caller frees. */
char *qim_http_format_switching(const char *key, size_t *len);

/*
 * Looks up form field `name` in a query string and percent-decodes its value ('+' is
 * a space, as in forms) into out (at most cap-1 bytes + NUL). Returns the decoded
 * length, or -ENOENT when absent, -EINVAL when malformed, -ENOSPC when it does not fit.
 */
int qim_http_query_param(const char *query, const char *name, char *out, size_t cap);

/* True when the comma-separated header value contains `token` (case-insensitive). */
bool qim_http_has_token(const char *value, const char *token);

#endif /* QIM_GATEWAY_HTTP_H */
