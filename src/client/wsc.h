/*
 * wsc.h — the client side of RFC 6455, free of I/O: the opening handshake (request
 * text, checking the server's 101 answer), encoding masked client frames, and an
 * incremental parser of server frames (which are never masked). It is the client
 * runtime's own WebSocket codec (src/client/) and qim-bench links it from here too.
 *
 * src/gateway/ws.h is the server side: its parser insists on masked frames, so clients
 * need this small mirror image. Only the Sec-WebSocket-Accept computation is shared
 * (qim_websocket_accept from core), so the client does not depend on the gateway.
 */
#ifndef QIM_CLIENT_WSC_H
#define QIM_CLIENT_WSC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qim/websocket.h"

/* Largest client frame header: 2 bytes + 64-bit length + 4-byte mask. */
#define QIM_WSC_MAX_HEADER 14

/* ---- handshake --------------------------------------------------------------------------------
 */

/* Sec-WebSocket-Key text: base64 of 16 bytes, 24 characters + NUL. */
#define QIM_WSC_KEY_LEN 24

/* Writes the base64 key for the 16 bytes `nonce` into `out`. */
void qim_wsc_key(const uint8_t nonce[16], char out[QIM_WSC_KEY_LEN + 1]);

/*
 * Formats the upgrade request for GET `path` (e.g. "/v0/channels?apikey=K") on `host`
 * ("127.0.0.1:6060") with `key`. Returns the length written (without the NUL), or
 * -ENOSPC when `cap` is too small (out is then unspecified).
 */
int qim_wsc_request(char *out, size_t cap, const char *host, const char *path, const char *key);

/*
 * Looks at the bytes received so far after sending the request with `key`.
 * Returns QIM_AGAIN (1) while the header block is incomplete (up to 8 KB); 0 when it is
 * a valid 101 answer with the right Sec-WebSocket-Accept, with *head_len set to the size
 * of the header block (bytes after it are already WebSocket frames); otherwise a
 * negative error: -EPROTO (not HTTP, or 101 without the upgrade headers or with a wrong
 * accept value), -ECONNREFUSED (an HTTP status other than 101; *status holds it),
 * -EMSGSIZE (no header end within 8 KB).
 */
int qim_wsc_response(const char *buf, size_t len, const char *key, size_t *head_len, int *status);

/* ---- client frames ----------------------------------------------------------------------------
 */

/*
 * Encodes one complete (FIN) client frame with masking key `mask` into `out`, which must
 * hold len + QIM_WSC_MAX_HEADER bytes. Returns the frame size. `payload` and `out` must
 * not overlap.
 */
size_t qim_wsc_encode(uint8_t *out, int opcode, const void *payload, size_t len, uint32_t mask);

/* ---- parsing server frames --------------------------------------------------------------------
 */

/*
 * Callbacks of qim_wsc_parse; `data` is valid only during the call. Returning non-zero
 * stops parsing, and qim_wsc_parse returns that value.
 *  on_message: a complete text or binary message (fragments reassembled).
 *  on_control: ping, pong or close (payload at most 125 bytes).
 */
typedef struct qim_wsc_events {
  int (*on_message)(void *ud, int opcode, const uint8_t *data, size_t len);
  int (*on_control)(void *ud, int opcode, const uint8_t *data, size_t len);
} qim_wsc_events;

/* Parser state; fields are private (the struct is visible so connections embed it). */
typedef struct qim_wsc_parser {
  uint8_t *buf_; /* bytes of an incomplete frame carried over between reads, or NULL */
  size_t len_, cap_;
  uint8_t *msg_; /* fragments of a message in progress, or NULL */
  size_t msg_len_, msg_cap_;
  size_t max_message_;
  int msg_op_; /* opcode of the fragmented message in progress, 0 if none */
  int err_;    /* sticky */
} qim_wsc_parser;

/* `max_message` bounds one message, fragments included (what a peer can make us hold). */
void qim_wsc_parser_init(qim_wsc_parser *p, size_t max_message);

/*
 * Feeds `len` received bytes. Complete frames are handled from `data` directly; an
 * incomplete tail is copied and completed by later calls. Returns 0 when everything was
 * consumed, a callback's non-zero value, or a sticky error: -EPROTO (masked server frame,
 * reserved bits, unknown opcode, bad control frame, bad fragment sequence), -EMSGSIZE
 * (a message above max_message), -ENOMEM (no memory for the carried-over bytes).
 */
int qim_wsc_parse(qim_wsc_parser *p, const uint8_t *data, size_t len, const qim_wsc_events *ev,
                  void *ud);

/* Bytes held between calls (0 when every frame so far was complete in its read). */
size_t qim_wsc_parser_buffered(const qim_wsc_parser *p);

/* Frees the buffers (accepts NULL); the parser may be initialised again. */
void qim_wsc_parser_free(qim_wsc_parser *p);

#endif /* QIM_CLIENT_WSC_H */
