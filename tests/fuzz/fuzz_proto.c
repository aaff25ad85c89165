/*
 * fuzz_proto.c — libFuzzer harness for the Tinode frame codec (src/gateway/proto.c).
 *
 * Feeds arbitrary bytes to qim_proto_decode() and checks what must hold for every
 * input: a success yields a known kind with bounded id/topic, a failure yields a 400
 * with a bounded id and a static reason; and whatever the decoder produced, the
 * encoder turns it back into valid JSON (the reply to a bad frame, and for a pub the
 * {data} frame built from its head and content). The pure helpers (modes, timestamps,
 * hi.ver, cmid) get the same bytes too. Seeds: tests/fuzz/corpus/proto/.
 * Not registered in CMake yet. By hand, after `make san` (the proto sources are compiled
 * again here so they get coverage instrumentation; the rest comes from libqim):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -std=c17 -Iinclude -Isrc \
 *     tests/fuzz/fuzz_proto.c src/gateway/proto.c src/gateway/proto_enc.c \
 *     src/gateway/proto_util.c build-san/src/libqim.a build-san/libqim_blake3.a \
 *     -ljansson -lsodium -lcrypto -lm -lpthread -o fuzz_proto
 *   ./fuzz_proto -max_len=4096 CORPUS_COPY tests/fuzz/corpus/proto
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/mem.h"

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

/* The encoder's output must always be one valid JSON object. */
static void check_frame(char *frame, size_t len) {
  CHECK(frame != NULL);
  CHECK(strlen(frame) == len);
  json_t *j = json_loadb(frame, len, JSON_REJECT_DUPLICATES, NULL);
  CHECK(j != NULL && json_is_object(j));
  json_decref(j);
  qim_free(frame);
}

static void check_decoded(const qim_proto_msg *m) {
  CHECK(m->kind > QIM_PROTO_NONE && m->kind <= QIM_PROTO_SYNC);
  CHECK(strlen(m->id) <= QIM_PROTO_NAME_MAX);
  CHECK(!m->topic || strlen(m->topic) <= QIM_PROTO_NAME_MAX);
  size_t len;
  check_frame(qim_proto_ctrl(m->id, m->topic, 200, "ok", NULL, 0, &len), len);
  if (m->kind == QIM_PROTO_PUB) {
    qim_proto_data_frame d = {.topic = m->topic,
                              .from = "usrFuzz",
                              .seq = 1,
                              .head = m->u.pub.head,
                              .content = m->u.pub.content};
    check_frame(qim_proto_data(&d, &len), len);
  }
  if (m->kind == QIM_PROTO_GET && m->u.get.q.data.has_ranges) {
    const qim_proto_ranges *r = &m->u.get.q.data.ranges;
    check_frame(qim_proto_meta_del(m->id, m->topic, 0, 1, r->v, r->n, &len), len);
  }
}

static void check_error(const qim_proto_error *e) {
  CHECK(e->code == 400);
  CHECK(strlen(e->id) <= QIM_PROTO_NAME_MAX);
  CHECK(e->detail && e->detail[0]);
  size_t len;
  check_frame(qim_proto_ctrl_error(e, 0, &len), len);
}

/* The pure helpers must not crash on any bytes, and what they accept round-trips. */
static void fuzz_helpers(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  uint32_t mode;
  char text[QIM_MODE_STR_CAP];
  if (qim_proto_mode_parse(s, size, &mode) == 0) {
    int n = qim_proto_mode_format(mode, text, sizeof text);
    uint32_t back;
    CHECK(n >= 0 && qim_proto_mode_parse(text, (size_t)n, &back) == 0 && back == mode);
  }
  if (qim_proto_mode_apply(s, size, 0x2F, &mode) == 0) CHECK(mode <= QIM_MODE_UNSET);
  uint64_t ms;
  if (qim_proto_ts_parse(s, size, &ms) == 0) {
    char ts[QIM_PROTO_TS_CAP];
    qim_proto_ts_format(ms, ts);
    CHECK(strlen(ts) == 24);
  }
  qim_client_message_id cmid;
  if (qim_proto_cmid_parse(s, size, &cmid) == 0) {
    char again[QIM_PROTO_CMID_CAP];
    qim_proto_cmid_format(&cmid, again);
    CHECK(size == QIM_PROTO_CMID_LEN && memcmp(again, s, size) == 0);
  }
  char ver[64];
  size_t n = size < sizeof ver - 1 ? size : sizeof ver - 1;
  memcpy(ver, s, n);
  ver[n] = '\0';
  (void)qim_proto_version_parse(ver);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  qim_proto_msg m;
  qim_proto_error e;
  if (qim_proto_decode((const char *)data, size, 0, &m, &e) == 0)
    check_decoded(&m);
  else
    check_error(&e);
  qim_proto_msg_free(&m);
  if (size <= 64) fuzz_helpers(data, size);
  return 0;
}
