/*
 * payload.h — a stored Tinode message payload read in place, without a JSON parser.
 *
 * History stores a Tinode {pub}'s head and content as one canonical JSON object (jansson,
 * compact, keys sorted, "head" left out when empty; src/history/content.c):
 *
 *     {"content":<content>}   or   {"content":<content>,"head":<head>}
 *
 * and marks it with schema_version QIM_PAYLOAD_SCHEMA_TINODE. Every live delivery, history
 * page and {sync} entry turns it back into Tinode's head and content. Parsing the whole object into
 * a tree and printing it again for each was a tenth of an I/O loop's time in one-to-one
 * chat; the spans of the two values are all they need, found by skipping over JSON text.
 */
#ifndef QIM_PAYLOAD_H
#define QIM_PAYLOAD_H

#include <stddef.h>

#include "qim/types.h"

/* MessageContent.schema_version of a payload in the form above. */
#define QIM_PAYLOAD_SCHEMA_TINODE 1

/* A JSON value inside a payload: n bytes at p; n == 0 means absent. */
typedef struct qim_json_span {
  const char *p;
  size_t n;
} qim_json_span;

/* Splits a QIM_PAYLOAD_SCHEMA_TINODE payload into its content and head (head->n == 0 when
 * it has none); the spans point into c. Returns 0, or -EINVAL when c has another schema,
 * no payload (a wiped body), or bytes that are not exactly that canonical form: the caller
 * then parses them as before and reports what it finds. Never reads past the payload. */
int qim_payload_split_tinode(const qim_message_content *c, qim_json_span *content,
                             qim_json_span *head);

#endif
