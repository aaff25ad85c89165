/*
 * fuzz_record.c — libFuzzer harness for the canonical record decoders (include/qim/record.h):
 * message record, commit intent, committed envelope (the outbox payload), group dispatch
 * (the dispatch log payload) and mailbox entry.
 *
 * Every input goes to all five decoders; the tag byte lets at most one accept it. What
 * must hold for each:
 *   - a failure is -EINVAL and leaves the value equal to a zeroed one (nothing to free,
 *     nothing leaked: LeakSanitizer runs in the sanitizer build);
 *   - a success re-encodes to exactly the input bytes (the encoding is canonical: replays
 *     compare bytes, FanoutError::DeterminismViolation) — unless the input is an older
 *     layout version that still decodes, whose re-encoding at the current version must
 *     then be a fixed point — decodes again to an equal value, and survives copy + equal
 *     + free;
 *   - no strict prefix of an accepted input is accepted (decoding never stops early).
 * Seeds: tests/fuzz/corpus/record/, written once by gen_record_corpus.c.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "qim/record.h"

/* One decoder with its companions, behind a uniform interface. */
#define CODEC(T, name)                                                                 \
  static int name##_dec(const uint8_t *p, size_t n, void *v) {                         \
    return qim_##name##_decode(p, n, v);                                               \
  }                                                                                    \
  static int name##_enc(const void *v, qim_bytes *o) {                                 \
    return qim_##name##_encode(v, o);                                                  \
  }                                                                                    \
  static void name##_free(void *v) {                                                   \
    qim_##name##_free(v);                                                              \
  }                                                                                    \
  static void name##_copy(void *d, const void *s) {                                    \
    qim_##name##_copy(d, s);                                                           \
  }                                                                                    \
  static int name##_eq(const void *a, const void *b) {                                 \
    return qim_##name##_equal(a, b);                                                   \
  }                                                                                    \
  static const codec name##_codec = {#name,       sizeof(T),   name##_dec, name##_enc, \
                                     name##_free, name##_copy, name##_eq};

typedef struct codec {
  const char *name;
  size_t size;
  int (*dec)(const uint8_t *p, size_t n, void *v);
  int (*enc)(const void *v, qim_bytes *out);
  void (*free)(void *v);
  void (*copy)(void *dst, const void *src);
  int (*equal)(const void *a, const void *b);
} codec;

CODEC(qim_message_record, message_record)
CODEC(qim_commit_intent, commit_intent)
CODEC(qim_committed_envelope, committed_envelope)
CODEC(qim_group_dispatch, group_dispatch)
CODEC(qim_mailbox_entry, mailbox_entry)

static const codec *const kCodecs[] = {&message_record_codec, &commit_intent_codec,
                                       &committed_envelope_codec, &group_dispatch_codec,
                                       &mailbox_entry_codec};

/* Big enough for any of the five value types. */
typedef union value {
  qim_message_record record;
  qim_commit_intent intent;
  qim_committed_envelope envelope;
  qim_group_dispatch dispatch;
  qim_mailbox_entry entry;
} value;

static void check_accepted(const codec *c, const uint8_t *data, size_t size, value *v) {
  qim_bytes out = {0};
  FUZZ_CHECK(c->enc(v, &out) == 0);
  value again, copy;
  FUZZ_CHECK(c->dec(out.p, out.n, &again) == 0 && c->equal(&again, v));
  if (out.n != size || memcmp(out.p, data, size) != 0) {
    /* Only an older layout may differ: it is read, and written again at the current
     * version (e.g. dispatch v1 -> v2), which is then a fixed point. */
    FUZZ_CHECK(size >= 2 && out.n >= 2 && data[0] != out.p[0] && data[1] == out.p[1]);
    qim_bytes twice = {0};
    FUZZ_CHECK(c->enc(&again, &twice) == 0 && qim_bytes_equal(&twice, &out));
    qim_bytes_free(&twice);
  }
  c->copy(&copy, v);
  FUZZ_CHECK(c->equal(&copy, v) && c->equal(v, &copy));
  c->free(&copy);
  c->free(&again);
  qim_bytes_free(&out);
  if (size > 0) { /* the input without its last byte */
    value prefix;
    FUZZ_CHECK(c->dec(data, size - 1, &prefix) == -EINVAL);
    c->free(&prefix);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int accepted = 0;
  for (size_t i = 0; i < sizeof kCodecs / sizeof kCodecs[0]; i++) {
    const codec *c = kCodecs[i];
    value v;
    memset(&v, 0xA5, sizeof v); /* decode must overwrite whatever was there */
    int rc = c->dec(data, size, &v);
    if (rc == 0) {
      accepted++;
      check_accepted(c, data, size, &v);
      c->free(&v);
    } else {
      FUZZ_CHECK(rc == -EINVAL);
      value zero;
      memset(&zero, 0, sizeof zero); /* field by field: padding may keep the 0xA5 */
      FUZZ_CHECK(c->equal(&v, &zero));
    }
  }
  FUZZ_CHECK(accepted <= 1);
  return 0;
}
