/*
 * ids.c — 128-bit id helpers and the text encodings of ids (ids.h): base64url for
 * Tinode names, standard base64 for secrets, hex for logs, strict decimal for u64s.
 *
 * Every decoder is strict: only the canonical spelling of a value is accepted (no
 * whitespace, no stray padding, unused trailing bits must be zero), so one value has
 * exactly one text form and a name can be used as a map key without normalisation.
 */
#include "qim/ids.h"

#include <blake3.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "qim/err.h"

int qim_u128_cmp(qim_u128 a, qim_u128 b) {
  if (a.hi != b.hi) return a.hi < b.hi ? -1 : 1;
  if (a.lo != b.lo) return a.lo < b.lo ? -1 : 1;
  return 0;
}

static void put_be64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

void qim_u128_to_be(qim_u128 v, uint8_t out[16]) {
  put_be64(out, v.hi);
  put_be64(out + 8, v.lo);
}

qim_u128 qim_u128_from_be(const uint8_t in[16]) { return (qim_u128){get_be64(in), get_be64(in + 8)}; }

/* ---- randomness --------------------------------------------------------------- */

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void sodium_start(void) {
  /* Without a working CSPRNG no id or secret can be made safely: refuse to run. */
  if (sodium_init() < 0) abort();
}

/*
 * Ids are cut from a per-thread buffer filled from the OS CSPRNG (libsodium's
 * randombytes_buf, a getrandom call): one system call per RANDOM_POOL bytes instead of one
 * per id, which on a VM is a measurable share of a message (a TraceId per request). The
 * bytes are as unpredictable as before; a slice is wiped once handed out, so the buffer
 * never holds an id that was already given. qimd never forks, so no two processes share
 * a buffer.
 */
#define RANDOM_POOL 512

static _Thread_local struct {
  uint8_t b[RANDOM_POOL];
  size_t used; /* bytes already handed out */
  bool filled;
} pool;

static void random_bytes(uint8_t *out, size_t n) {
  if (!pool.filled || pool.used + n > RANDOM_POOL) {
    pthread_once(&sodium_once, sodium_start);
    randombytes_buf(pool.b, RANDOM_POOL);
    pool.used = 0;
    pool.filled = true;
  }
  memcpy(out, pool.b + pool.used, n);
  sodium_memzero(pool.b + pool.used, n);
  pool.used += n;
}

/* 16 random bytes, never all zero (a zero id means "absent" in several places). */
static void random16(uint8_t out[16]) {
  static const uint8_t zero[16];
  do random_bytes(out, 16);
  while (memcmp(out, zero, 16) == 0);
}

qim_u128 qim_u128_random(void) {
  uint8_t b[16];
  random16(b);
  return qim_u128_from_be(b);
}

qim_trace_id qim_trace_id_new(void) {
  qim_trace_id t;
  random16(t.b);
  return t;
}

/* ---- base64 ------------------------------------------------------------------- */

static const char B64_URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
static const char B64_STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Length of the text for n bytes, or SIZE_MAX when it would not fit an int result. */
static size_t b64_text_len(size_t n, int pad) {
  if (n > (size_t)INT_MAX / 4 * 3 - 3) return SIZE_MAX;
  size_t rem = n % 3;
  return n / 3 * 4 + (rem ? (pad ? 4 : rem + 1) : 0);
}

static int b64_encode(const char *alpha, int pad, const uint8_t *in, size_t n, char *out, size_t cap) {
  size_t len = b64_text_len(n, pad);
  if (len == SIZE_MAX || len >= cap) return -ENOSPC;
  char *o = out;
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    *o++ = alpha[v >> 18];
    *o++ = alpha[(v >> 12) & 63];
    *o++ = alpha[(v >> 6) & 63];
    *o++ = alpha[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)in[i] << 16;
    *o++ = alpha[v >> 18];
    *o++ = alpha[(v >> 12) & 63];
    if (pad) *o++ = '=', *o++ = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    *o++ = alpha[v >> 18];
    *o++ = alpha[(v >> 12) & 63];
    *o++ = alpha[(v >> 6) & 63];
    if (pad) *o++ = '=';
  }
  *o = '\0';
  return (int)len;
}

/* The 6-bit value of c in the alphabet, or -1. */
static int b64_val(int url, unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == (url ? '-' : '+')) return 62;
  if (c == (url ? '_' : '/')) return 63;
  return -1;
}

/* Decodes `len` alphabet characters (no padding) into exactly `outn` bytes. */
static int b64_decode_body(int url, const char *in, size_t len, uint8_t *out, size_t outn) {
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    int v = b64_val(url, (unsigned char)in[i]);
    if (v < 0) return -EINVAL;
    acc = (acc << 6 | (uint32_t)v) & 0xFFFFFF;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  /* Leftover bits must be zero: "QR==" and "QQ==" would otherwise both mean "A". */
  if (o != outn || (acc & ((1u << bits) - 1)) != 0) return -EINVAL;
  return 0;
}

static int b64_decode(int url, const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len) {
  size_t body = len;
  if (!url) {
    if (len % 4 != 0) return -EINVAL;
    if (body > 0 && in[body - 1] == '=') body--;
    if (body > 0 && in[body - 1] == '=') body--;
  }
  if (body % 4 == 1) return -EINVAL;
  size_t outn = body / 4 * 3 + (body % 4 ? body % 4 - 1 : 0);
  if (outn > cap) return -ENOSPC;
  int rc = b64_decode_body(url, in, body, out, outn);
  if (rc == 0 && out_len) *out_len = outn;
  return rc;
}

int qim_b64url_encode(const uint8_t *in, size_t n, char *out, size_t cap) {
  return b64_encode(B64_URL, 0, in, n, out, cap);
}

int qim_b64url_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len) {
  return b64_decode(1, in, len, out, cap, out_len);
}

int qim_b64std_encode(const uint8_t *in, size_t n, char *out, size_t cap) {
  return b64_encode(B64_STD, 1, in, n, out, cap);
}

int qim_b64std_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len) {
  return b64_decode(0, in, len, out, cap, out_len);
}

/* ---- hex ---------------------------------------------------------------------- */

int qim_hex_encode(const uint8_t *in, size_t n, char *out, size_t cap) {
  static const char digits[] = "0123456789abcdef";
  if (n > (size_t)INT_MAX / 2 || 2 * n >= cap) return -ENOSPC;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
  return (int)(2 * n);
}

static int hex_val(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int qim_hex_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *out_len) {
  if (len % 2 != 0) return -EINVAL;
  if (len / 2 > cap) return -ENOSPC;
  for (size_t i = 0; i < len; i += 2) {
    int h = hex_val((unsigned char)in[i]), l = hex_val((unsigned char)in[i + 1]);
    if (h < 0 || l < 0) return -EINVAL;
    out[i / 2] = (uint8_t)(h << 4 | l);
  }
  if (out_len) *out_len = len / 2;
  return 0;
}

/* ---- decimal u64 -------------------------------------------------------------- */

int qim_u64_format(uint64_t v, char *out, size_t cap) {
  char tmp[21];
  size_t n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  if (n >= cap) return -ENOSPC;
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  out[n] = '\0';
  return (int)n;
}

int qim_u64_parse(const char *in, size_t len, uint64_t *out) {
  if (len == 0 || len > 20 || (len > 1 && in[0] == '0')) return -EINVAL;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (in[i] < '0' || in[i] > '9') return -EINVAL;
    unsigned d = (unsigned)(in[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -EINVAL;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* ---- Tinode names ------------------------------------------------------------- */

int qim_u128_name_format(const char prefix[3], qim_u128 v, char *out, size_t cap) {
  uint8_t be[16];
  if (cap < QIM_TOPIC_NAME_LEN + 1) return -ENOSPC;
  qim_u128_to_be(v, be);
  memcpy(out, prefix, 3);
  int n = qim_b64url_encode(be, sizeof be, out + 3, cap - 3);
  return n < 0 ? n : n + 3;
}

int qim_u128_name_parse(const char prefix[3], const char *in, size_t len, qim_u128 *out) {
  uint8_t be[16];
  size_t n = 0;
  if (len != QIM_TOPIC_NAME_LEN || memcmp(in, prefix, 3) != 0) return -EINVAL;
  if (qim_b64url_decode(in + 3, len - 3, be, sizeof be, &n) != 0 || n != 16) return -EINVAL;
  *out = qim_u128_from_be(be);
  return 0;
}

int qim_user_id_format(qim_user_id id, char *out, size_t cap) {
  return qim_u128_name_format("usr", id.v, out, cap);
}

int qim_user_id_parse(const char *in, size_t len, qim_user_id *out) {
  return qim_u128_name_parse("usr", in, len, &out->v);
}

int qim_group_id_format(qim_group_id id, char *out, size_t cap) {
  return qim_u128_name_format("grp", id.v, out, cap);
}

int qim_group_id_parse(const char *in, size_t len, qim_group_id *out) {
  return qim_u128_name_parse("grp", in, len, &out->v);
}

/* ---- conversations and client message ids --------------------------------------- */

qim_conversation_id qim_conversation_id_direct(qim_tenant_id t, qim_user_id a, qim_user_id b) {
  static const char domain[] = "qim.direct-conversation.v1"; /* hashed with its NUL */
  uint8_t buf[16], out[16];
  qim_user_id lo = qim_u128_cmp(a.v, b.v) <= 0 ? a : b;
  qim_user_id hi = qim_u128_cmp(a.v, b.v) <= 0 ? b : a;
  blake3_hasher h;
  blake3_hasher_init(&h);
  blake3_hasher_update(&h, domain, sizeof domain);
  qim_u128_to_be(t.v, buf);
  blake3_hasher_update(&h, buf, 16);
  qim_u128_to_be(lo.v, buf);
  blake3_hasher_update(&h, buf, 16);
  qim_u128_to_be(hi.v, buf);
  blake3_hasher_update(&h, buf, 16);
  blake3_hasher_finalize(&h, out, sizeof out);
  return (qim_conversation_id){qim_u128_from_be(out)};
}

int qim_client_message_id_is_valid(const qim_client_message_id *id) {
  for (size_t i = 0; i < sizeof id->b; i++)
    if (id->b[i]) return 1;
  return 0;
}

int qim_client_message_id_make(const uint8_t bytes[16], qim_client_message_id *out) {
  qim_client_message_id id;
  memcpy(id.b, bytes, sizeof id.b);
  if (!qim_client_message_id_is_valid(&id)) return qim_err_raise(QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  *out = id;
  return 0;
}
