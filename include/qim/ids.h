/*
 * ids.h — identity helpers: 128-bit ids, the wire encodings (URL-safe base64 without
 * padding for Tinode names, standard base64 for secrets, hex for logs, decimal strings
 * for 64-bit values) and constructors that validate (ClientMessageId is never zero).
 * All encoders write a NUL-terminated string and return its length, or -ENOSPC when
 * `cap` is too small. Decoders reject malformed input with -EINVAL and never write
 * past `cap` (-ENOSPC when the decoded value would not fit); they take (pointer, length),
 * need no NUL terminator, and accept only the canonical spelling: no whitespace, no
 * missing or stray padding, unused trailing bits zero. `*out_len` may be NULL.
 */
#ifndef QIM_IDS_H
#define QIM_IDS_H

#include "qim/types.h"

#define QIM_U128_ZERO ((qim_u128){0, 0})
/* "usr"/"grp"/"p2p" + 22 base64url characters + NUL. */
#define QIM_TOPIC_NAME_CAP 32
/* Length of such a name: 3 + 22. */
#define QIM_TOPIC_NAME_LEN 25

int qim_u128_cmp(qim_u128 a, qim_u128 b);
static inline int qim_u128_eq(qim_u128 a, qim_u128 b) { return a.hi == b.hi && a.lo == b.lo; }
static inline int qim_u128_is_zero(qim_u128 a) { return a.hi == 0 && a.lo == 0; }
/* A 64-bit finalizer (murmur3's fmix64): spreads every input bit over the result, for
 * in-memory hash tables keyed by ids. Not for anything an attacker must not predict. */
static inline uint64_t qim_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
void qim_u128_to_be(qim_u128 v, uint8_t out[16]);
qim_u128 qim_u128_from_be(const uint8_t in[16]);
/* A random non-zero value from libsodium's CSPRNG. */
qim_u128 qim_u128_random(void);

/* base64url, no padding. */
int qim_b64url_encode(const uint8_t *in, size_t n, char *out, size_t cap);
int qim_b64url_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len);
/* Standard base64 with padding (Tinode `secret`). */
int qim_b64std_encode(const uint8_t *in, size_t n, char *out, size_t cap);
int qim_b64std_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len);
/* Hex: encode writes lower case; decode accepts either case, even length only. */
int qim_hex_encode(const uint8_t *in, size_t n, char *out, size_t cap);
int qim_hex_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len);

/* Decimal u64 (wire form of mailbox seqs, event ids). Parse is strict: digits only,
 * no sign, no leading zeros except "0", no overflow. */
int qim_u64_format(uint64_t v, char *out, size_t cap);
int qim_u64_parse(const char *in, size_t len, uint64_t *out);

/* Tinode names: "usr"+b64url(16 bytes), "grp"+b64url(16 bytes). Parse checks the prefix
 * and exact length; -EINVAL otherwise. */
/* The general form: a 3-letter prefix (e.g. "p2p") + the 22-char base64url of the value
 * big-endian. Format needs cap >= QIM_TOPIC_NAME_LEN + 1. */
int qim_u128_name_format(const char prefix[3], qim_u128 v, char *out, size_t cap);
int qim_u128_name_parse(const char prefix[3], const char *in, size_t len, qim_u128 *out);
int qim_user_id_format(qim_user_id id, char *out, size_t cap);
int qim_user_id_parse(const char *in, size_t len, qim_user_id *out);
int qim_group_id_format(qim_group_id id, char *out, size_t cap);
int qim_group_id_parse(const char *in, size_t len, qim_group_id *out);

static inline qim_conversation_id qim_group_conversation(qim_group_id g) {
  return (qim_conversation_id){g.v};
}
/*
 * The direct conversation of two users: a pure function of the tenant and the unordered
 * pair (a, b) == (b, a). Derivation (version 1, stable — changing it is a migration):
 *   lo, hi = the two user ids ordered by qim_u128_cmp
 *   id = first 16 bytes of blake3("qim.direct-conversation.v1\0" || tenant_be16 || lo_be16 || hi_be16),
 *        read as a big-endian u128
 * ("\0" is one NUL byte: the domain string is hashed with its terminator; *_be16 are the
 * 16-byte big-endian encodings).
 */
qim_conversation_id qim_conversation_id_direct(qim_tenant_id t, qim_user_id a, qim_user_id b);

/* Returns QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID (raised) when all 16 bytes are zero. */
int qim_client_message_id_make(const uint8_t bytes[16], qim_client_message_id *out);
int qim_client_message_id_is_valid(const qim_client_message_id *id);

/* A fresh random TraceId (never all-zero). */
qim_trace_id qim_trace_id_new(void);

#endif
