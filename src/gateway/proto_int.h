/*
 * proto_int.h — private helpers shared by the files of the proto module (decoder in
 * proto.c, encoder in proto_enc.c, pure helpers in proto_util.c). Not for other rooms.
 */
#ifndef QIM_GATEWAY_PROTO_INT_H
#define QIM_GATEWAY_PROTO_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/proto.h"

/*
 * Standard base64 with padding (Go's []byte JSON encoding). `len` must be a multiple
 * of 4; '=' only as the last one or two characters; bits left over in the last
 * group are ignored, as Go's non-strict decoder does. `out` needs len/4*3 bytes.
 * 0 or -EINVAL.
 */
int qim__proto_b64std_decode(const char *s, size_t len, uint8_t *out, size_t *out_len);

/*
 * A growing output buffer. Growth goes through qim_trymalloc (the size follows
 * peer-controlled content); after a failed growth `oom` is set and every later append
 * is a no-op, so builders check once at the end.
 */
typedef struct qim__pbuf {
  char *p;
  size_t len, cap;
  bool oom;
} qim__pbuf;

void qim__pbuf_init(qim__pbuf *b, size_t cap_hint);
void qim__pbuf_put(qim__pbuf *b, const char *s, size_t n);
void qim__pbuf_puts(qim__pbuf *b, const char *s);
void qim__pbuf_putc(qim__pbuf *b, char c);
void qim__pbuf_u64(qim__pbuf *b, uint64_t v);
/* A JSON string literal with quotes; invalid UTF-8 becomes \ufffd. */
void qim__pbuf_jstr(qim__pbuf *b, const char *s);
/* Any json_t, compact (jansson keeps object keys in insertion order). */
void qim__pbuf_json(qim__pbuf *b, const json_t *j);
/* NUL-terminates and hands the buffer over (NULL after an OOM, buffer freed). */
char *qim__pbuf_finish(qim__pbuf *b, size_t *len);

#endif /* QIM_GATEWAY_PROTO_INT_H */
