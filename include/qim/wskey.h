/*
 * wskey.h — the one computation both ends of an RFC 6455 opening handshake share: the
 * Sec-WebSocket-Accept value for a Sec-WebSocket-Key. It lives in core so the server's
 * HTTP layer (src/gateway/http.c) and the client runtime's codec (src/client/wsc.c) use
 * one copy without either depending on the other.
 */
#ifndef QIM_WSKEY_H
#define QIM_WSKEY_H

/* Length of the accept value: base64 of a 20-byte SHA-1, 28 characters. */
#define QIM_WSKEY_ACCEPT_LEN 28

/*
 * Writes base64(SHA-1(key || RFC 6455 GUID)) and a NUL into `out`. Keys longer than 90
 * bytes are cut (a valid key is 24 characters). Cannot fail; aborts only if libcrypto
 * cannot compute SHA-1 at all.
 */
void qim_wskey_accept(const char *key, char out[QIM_WSKEY_ACCEPT_LEN + 1]);

#endif /* QIM_WSKEY_H */
