/*
 * fuzz_ids.c — libFuzzer harness for the wire encodings of include/qim/ids.h that tokens and
 * names travel in: standard base64 (a login token is the `secret` of {login scheme:"token"}),
 * base64url (cursors, topic names), hex, decimal u64 (seqs, event ids) and usr/grp names.
 *
 * ids.h promises one spelling per value, so for every decoder: what it accepts encodes back
 * to exactly the input (hex: up to case); it never writes past `cap` (the output buffer is exactly
 * as large as asked, so ASan sees any overrun) and answers -ENOSPC when the value does not fit;
 * anything else is -EINVAL. The login token's own check (`qim__gw_token_check`) is internal
 * to the gateway and is not reached from here.
 * Seeds: tests/fuzz/corpus/ids/.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "qim/ids.h"

typedef int (*decode_fn)(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len);
typedef int (*encode_fn)(const uint8_t *in, size_t n, char *out, size_t cap);

/* Decodes into a buffer of exactly `cap` bytes; a success must re-encode to the input
 * (ignoring case for hex, whose decoder accepts either case: ids.h). */
static void check_codec(const char *s, size_t n, decode_fn dec, encode_fn enc, size_t cap,
                        bool any_case) {
  uint8_t *out = qim_malloc(cap ? cap : 1);
  size_t got = (size_t)-1;
  int rc = dec(s, n, out, cap, &got);
  FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOSPC);
  if (rc == 0) {
    FUZZ_CHECK(got <= cap);
    char *text = qim_malloc(n + 1);
    FUZZ_CHECK(enc(out, got, text, n + 1) == (int)n);
    FUZZ_CHECK((any_case ? strncasecmp(text, s, n) : memcmp(text, s, n)) == 0 && text[n] == '\0');
    qim_free(text);
  }
  qim_free(out);
}

static void fuzz_codecs(const char *s, size_t n) {
  static const struct {
    decode_fn dec;
    encode_fn enc;
    bool any_case;
  } codecs[] = {{qim_b64std_decode, qim_b64std_encode, false},
                {qim_b64url_decode, qim_b64url_encode, false},
                {qim_hex_decode, qim_hex_encode, true}};
  for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
    /* A buffer always large enough, then one often too small. */
    check_codec(s, n, codecs[i].dec, codecs[i].enc, n, codecs[i].any_case);
    check_codec(s, n, codecs[i].dec, codecs[i].enc, n / 2, codecs[i].any_case);
  }
}

static void fuzz_numbers_and_names(const char *s, size_t n) {
  uint64_t v;
  if (qim_u64_parse(s, n, &v) == 0) {
    char text[24];
    FUZZ_CHECK(qim_u64_format(v, text, sizeof text) == (int)n && memcmp(text, s, n) == 0);
  }
  qim_user_id u;
  if (qim_user_id_parse(s, n, &u) == 0) {
    char text[QIM_TOPIC_NAME_CAP];
    FUZZ_CHECK(qim_user_id_format(u, text, sizeof text) == (int)n && memcmp(text, s, n) == 0);
  }
  qim_group_id g;
  if (qim_group_id_parse(s, n, &g) == 0) {
    char text[QIM_TOPIC_NAME_CAP];
    FUZZ_CHECK(qim_group_id_format(g, text, sizeof text) == (int)n && memcmp(text, s, n) == 0);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly `size` bytes with no terminator: the decoders must not need one. */
  char *s = qim_malloc(size ? size : 1);
  memcpy(s, data, size);
  fuzz_codecs(s, size);
  fuzz_numbers_and_names(s, size);
  qim_free(s);
  return 0;
}
