/*
 * ws.h — RFC 6455 WebSocket framing for the server side, free of I/O.
 *
 * Two halves:
 *  - qim_ws_frame: an encoded server frame (header + payload, never masked) in one
 *    reference-counted block. One serialized frame is queued on many connections
 *    without copying (DESIGN.md §1 rule 5); the last unref frees it. Reference
 *    counts are atomic, so a frame may be shared across loop threads.
 *  - qim_ws_parser: an incremental parser of client frames. It enforces masking,
 *    reserved bits, opcodes, control-frame rules, fragmentation, the message size
 *    limit and UTF-8 in text messages and close reasons, and hands out complete
 *    messages. It keeps no buffer while idle: a message that arrives in one read is
 *    delivered straight from the caller's buffer (unmasked in place); only a message
 *    split across reads is copied into a buffer that grows with the bytes actually
 *    received and is freed as soon as the message is delivered (DESIGN.md §6).
 *
 * Nothing here is tied to a connection: qim_ws_parse() works on any byte buffer, so
 * a libFuzzer harness can drive it directly.
 */
#ifndef QIM_GATEWAY_WS_H
#define QIM_GATEWAY_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qim/websocket.h"

/* Largest server frame header: 2 bytes + 64-bit length (servers never mask). */
#define QIM_WS_MAX_HEADER 10
/* Control frames carry at most 125 payload bytes (RFC 6455 §5.5). */
#define QIM_WS_MAX_CONTROL 125

/* ---- shared encoded frames ------------------------------------------------------------------- */

typedef struct qim_ws_frame qim_ws_frame;

/*
 * A new frame (FIN set) with a copy of `payload`; one reference, owned by the caller.
 * Aborts on out of memory (payloads are server-made). Control opcodes require
 * len <= QIM_WS_MAX_CONTROL; a larger control payload is a caller bug and aborts.
 */
qim_ws_frame *qim_ws_frame_new(int opcode, const void *payload, size_t len);

/*
 * Like qim_ws_frame_new, but leaves the payload for the caller to fill: *payload points
 * at `len` writable bytes, valid until the frame is first queued or shared. Lets a
 * serializer write straight into the frame.
 */
qim_ws_frame *qim_ws_frame_alloc(int opcode, size_t len, uint8_t **payload);

/* A close frame: 2-byte `code` plus `reason` (may be NULL) cut to 123 bytes. */
qim_ws_frame *qim_ws_frame_close(uint16_t code, const char *reason);

/* Raw bytes with no WebSocket header (HTTP responses travel the same queue). */
qim_ws_frame *qim_ws_frame_raw(const void *bytes, size_t len);

/* Adds a reference (any thread); returns `f`. */
qim_ws_frame *qim_ws_frame_ref(qim_ws_frame *f);
/* Drops a reference (any thread); frees on the last one. Accepts NULL. */
void qim_ws_frame_unref(qim_ws_frame *f);

/* The encoded bytes (header + payload) and their count. */
const uint8_t *qim_ws_frame_bytes(const qim_ws_frame *f);
size_t qim_ws_frame_size(const qim_ws_frame *f);

/*
 * Writes a server frame header (FIN set, unmasked) for `opcode` and `len` into `out`;
 * returns its length (2, 4 or 10).
 */
size_t qim_ws_header_encode(uint8_t out[QIM_WS_MAX_HEADER], int opcode, uint64_t len);

/* ---- parsing client frames ------------------------------------------------------------------- */

/*
 * Callbacks of qim_ws_parse. `data` is writable and valid only during the call.
 * Returning non-zero stops parsing: qim_ws_parse returns that value at once and the
 * rest of the input is not looked at.
 *  on_message: a complete text or binary message (opcode QIM_WS_OP_TEXT/BINARY;
 *              a text message has been checked to be UTF-8).
 *  on_control: a ping, pong or close frame. A close payload has been checked: empty,
 *              or a valid code followed by a UTF-8 reason. After a close frame the
 *              parser ignores everything that follows.
 */
typedef struct qim_ws_events {
  int (*on_message)(void *ud, int opcode, uint8_t *data, size_t len);
  int (*on_control)(void *ud, int opcode, uint8_t *data, size_t len);
} qim_ws_events;

/* Parser state. Fields are private; the struct is visible so connections embed it. */
typedef struct qim_ws_parser {
  uint8_t *msg_;   /* reassembly buffer of the data message in progress, or NULL */
  size_t msg_len_; /* bytes of it received so far */
  size_t msg_cap_;
  uint8_t *ctl_;       /* a control payload split across reads, or NULL */
  uint64_t remaining_; /* payload bytes of the current frame still to come */
  size_t max_message_; /* limit on a whole (reassembled) message */
  uint32_t utf8_;      /* incremental UTF-8 validator state */
  int err_;            /* sticky error once failed */
  uint8_t hdr_[14];    /* a frame header split across reads */
  uint8_t hdr_len_;
  uint8_t mask_[4];
  uint8_t mask_pos_; /* payload offset of the current frame, mod 4 */
  uint8_t state_;
  uint8_t opcode_;     /* opcode of the current frame */
  uint8_t fin_;        /* FIN bit of the current frame */
  uint8_t msg_opcode_; /* TEXT/BINARY of a fragmented message in progress, 0 if none */
  uint8_t ctl_len_;
} qim_ws_parser;

/* `max_message` bounds a whole message, fragments included (0 is treated as 1). */
void qim_ws_parser_init(qim_ws_parser *p, size_t max_message);

/*
 * Feeds `len` bytes (masked client frames; unmasked in place, hence writable).
 * Returns 0 when all bytes were consumed, or a callback's non-zero return, or a
 * protocol error; the error is sticky (every later call returns it):
 *   -EPROTO    framing violation (unmasked frame, reserved bits, unknown opcode,
 *              fragmented or oversized control frame, continuation without a start,
 *              new message inside a fragmented one, 64-bit length with the top bit,
 *              bad close payload);
 *   -EILSEQ    a text message or close reason that is not UTF-8;
 *   -EMSGSIZE  a message that would exceed max_message (detected from the header,
 *              before its payload is read);
 *   -ENOMEM    no memory for the reassembly buffer.
 */
int qim_ws_parse(qim_ws_parser *p, uint8_t *data, size_t len, const qim_ws_events *ev, void *ud);

/*
 * One-shot parse of a read-only buffer, for fuzz harnesses and tests: copies `data`,
 * feeds it to a fresh parser in pieces of `step` bytes (0 = all at once; other sizes
 * exercise the split-read paths), frees the parser. Returns as qim_ws_parse (the first
 * non-zero result stops it).
 */
int qim_ws_parse_buffer(const uint8_t *data, size_t len, size_t max_message, size_t step,
                        const qim_ws_events *ev, void *ud);

/* The close code that answers a qim_ws_parse error (1002, 1007, 1009, 1011). */
uint16_t qim_ws_error_close_code(int err);

/* Bytes the parser holds in buffers right now (0 whenever no message is split). */
size_t qim_ws_parser_buffered(const qim_ws_parser *p);

/* True when nothing of a frame or message is pending (a clean point to stop). */
bool qim_ws_parser_idle(const qim_ws_parser *p);

/* Frees the parser's buffers (accepts NULL); the parser may be re-initialised afterwards. */
void qim_ws_parser_free(qim_ws_parser *p);

/* True when `s` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF). */
bool qim_ws_utf8_valid(const uint8_t *s, size_t n);

/* True when a close code may appear in a close frame on the wire. */
bool qim_ws_close_code_valid(uint16_t code);

#endif /* QIM_GATEWAY_WS_H */
