/* websocket.c — the Sec-WebSocket-Accept computation of RFC 6455 §4.2.2 (see qim/websocket.h). */
#include "qim/websocket.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

void qim_websocket_accept(const char *key, char out[QIM_WS_ACCEPT_LEN + 1]) {
  static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  char buf[128];
  size_t kl = strnlen(key, sizeof buf - sizeof guid);
  memcpy(buf, key, kl);
  memcpy(buf + kl, guid, sizeof guid - 1);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (!EVP_Digest(buf, kl + sizeof guid - 1, md, &mdlen, EVP_sha1(), NULL)) abort();
  EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen); /* 20 bytes -> 28 chars + NUL */
}
