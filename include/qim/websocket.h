/*
 * websocket.h — what both ends of qim's WebSocket (RFC 6455) share: the opcodes, the close
 * codes, and the opening handshake's Sec-WebSocket-Accept value. It lives in core so the
 * server's gateway (src/gateway/ws.c, http.c) and the client runtime's codec
 * (src/client/wsc.c) use one copy without either depending on the other.
 */
#ifndef QIM_WEBSOCKET_H
#define QIM_WEBSOCKET_H

/* Opcodes (RFC 6455 §5.2). */
enum {
  QIM_WS_OP_CONT = 0x0,
  QIM_WS_OP_TEXT = 0x1,
  QIM_WS_OP_BINARY = 0x2,
  QIM_WS_OP_CLOSE = 0x8,
  QIM_WS_OP_PING = 0x9,
  QIM_WS_OP_PONG = 0xA,
};

/* Close codes (RFC 6455 §7.4.1) that qim sends or reports. */
enum {
  QIM_WS_CLOSE_NORMAL = 1000,
  QIM_WS_CLOSE_GOING_AWAY = 1001,   /* server shutdown, idle timeout */
  QIM_WS_CLOSE_PROTOCOL = 1002,     /* framing violation */
  QIM_WS_CLOSE_NO_STATUS = 1005,    /* reported when the peer's close had no code; never sent */
  QIM_WS_CLOSE_ABNORMAL = 1006,     /* reported when TCP ended without a close; never sent */
  QIM_WS_CLOSE_INVALID_DATA = 1007, /* text that is not UTF-8 */
  QIM_WS_CLOSE_POLICY = 1008,       /* slow consumer */
  QIM_WS_CLOSE_TOO_BIG = 1009,      /* message above the configured limit */
  QIM_WS_CLOSE_INTERNAL = 1011,     /* out of memory while reassembling */
};

/* Length of the accept value: base64 of a 20-byte SHA-1, 28 characters. */
#define QIM_WS_ACCEPT_LEN 28

/*
 * Writes base64(SHA-1(key || RFC 6455 GUID)) and a NUL into `out`. Keys longer than 90
 * bytes are cut (a valid key is 24 characters). Cannot fail; aborts only if libcrypto
 * cannot compute SHA-1 at all.
 */
void qim_websocket_accept(const char *key, char out[QIM_WS_ACCEPT_LEN + 1]);

#endif /* QIM_WEBSOCKET_H */
