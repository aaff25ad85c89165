/*
 * proto_util.c — the pure helpers of the proto codec: access-mode strings, RFC 3339
 * timestamps, hi.ver parsing, the `cmid` spelling, standard base64 for secrets, and
 * the small name tables. Nothing here allocates.
 */
#include <errno.h>
#include <string.h>

#include "gateway/proto_int.h"
#include "qim/err.h"
#include "qim/ids.h"

/* ---- access modes ------------------------------------------------------------ */

static const char mode_letters[8] = {'J', 'R', 'W', 'P', 'A', 'S', 'D', 'O'};

/* The bit of one mode letter (either case), 0 when `c` is not one. */
static uint32_t mode_bit(char c) {
  if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
  for (unsigned i = 0; i < 8; i++)
    if (mode_letters[i] == c) return 1u << i;
  return 0;
}

int qim_proto_mode_parse(const char *s, size_t len, uint32_t *out) {
  if (len == 0) {
    *out = QIM_MODE_UNSET;
    return 0;
  }
  if (len == 1 && (s[0] == 'N' || s[0] == 'n')) {
    *out = QIM_MODE_NONE;
    return 0;
  }
  uint32_t m = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t b = mode_bit(s[i]);
    if (!b) return -EINVAL;
    m |= b;
  }
  *out = m;
  return 0;
}

/* Writes the letters of `bits` in canonical order; returns how many. */
static size_t mode_letters_put(uint32_t bits, char *out) {
  size_t n = 0;
  for (unsigned i = 0; i < 8; i++)
    if (bits & (1u << i)) out[n++] = mode_letters[i];
  return n;
}

int qim_proto_mode_format(uint32_t mode, char *out, size_t cap) {
  char tmp[QIM_MODE_STR_CAP];
  size_t n;
  if (mode == QIM_MODE_UNSET)
    n = 0;
  else if (mode & ~QIM_MODE_BITS)
    return -EINVAL;
  else if (mode == QIM_MODE_NONE)
    tmp[0] = 'N', n = 1;
  else
    n = mode_letters_put(mode, tmp);
  if (n + 1 > cap) return -ENOSPC;
  memcpy(out, tmp, n);
  out[n] = '\0';
  return (int)n;
}

int qim_proto_mode_apply(const char *s, size_t len, uint32_t base, uint32_t *out) {
  if (len == 0) {
    *out = base;
    return 0;
  }
  if (!memchr(s, '+', len) && !memchr(s, '-', len)) return qim_proto_mode_parse(s, len, out);
  uint32_t m = base == QIM_MODE_UNSET ? 0 : base & QIM_MODE_BITS;
  size_t i = 0;
  while (i < len) {
    char sign = s[i++];
    if (sign != '+' && sign != '-') return -EINVAL;
    size_t start = i;
    uint32_t bits = 0;
    for (; i < len && s[i] != '+' && s[i] != '-'; i++) {
      uint32_t b = mode_bit(s[i]);
      if (!b) return -EINVAL;
      bits |= b;
    }
    if (i == start) return -EINVAL; /* "+" with no letters */
    m = sign == '+' ? (m | bits) : (m & ~bits);
  }
  *out = m;
  return 0;
}

int qim_proto_mode_delta(uint32_t before, uint32_t after, char *out, size_t cap) {
  uint32_t b = before == QIM_MODE_UNSET ? 0 : before & QIM_MODE_BITS;
  uint32_t a = after == QIM_MODE_UNSET ? 0 : after & QIM_MODE_BITS;
  char tmp[QIM_MODE_STR_CAP];
  size_t n = 0;
  if (a & ~b) {
    tmp[n++] = '+';
    n += mode_letters_put(a & ~b, tmp + n);
  }
  if (b & ~a) {
    tmp[n++] = '-';
    n += mode_letters_put(b & ~a, tmp + n);
  }
  if (n + 1 > cap) return -ENOSPC;
  memcpy(out, tmp, n);
  out[n] = '\0';
  return (int)n;
}

/* ---- timestamps ------------------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date (era arithmetic). */
static int64_t days_from_civil(int y, unsigned m, unsigned d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  unsigned yoe = (unsigned)(y - era * 400);
  unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t)doe - 719468;
}

static unsigned days_in_month(int y, unsigned m) {
  static const unsigned dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : dim[m - 1];
}

/* Reads exactly `n` digits at s[*i]; -1 if any is not a digit. */
static int read_num(const char *s, size_t len, size_t *i, unsigned n) {
  int v = 0;
  if (*i + n > len) return -1;
  for (unsigned k = 0; k < n; k++) {
    char c = s[(*i)++];
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

static bool expect(const char *s, size_t len, size_t *i, char a, char b) {
  if (*i >= len || (s[*i] != a && s[*i] != b)) return false;
  (*i)++;
  return true;
}

/* The zone suffix: "Z" → 0, "+hh:mm"/"-hh:mm" → signed seconds east of UTC. */
static int parse_zone(const char *s, size_t len, size_t i, int64_t *offset) {
  if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
    *offset = 0;
    return i + 1 == len ? 0 : -EINVAL;
  }
  if (i >= len || (s[i] != '+' && s[i] != '-')) return -EINVAL;
  int sign = s[i++] == '-' ? -1 : 1;
  int hh = read_num(s, len, &i, 2);
  if (hh < 0 || hh > 23 || !expect(s, len, &i, ':', ':')) return -EINVAL;
  int mm = read_num(s, len, &i, 2);
  if (mm < 0 || mm > 59 || i != len) return -EINVAL;
  *offset = sign * (int64_t)(hh * 3600 + mm * 60);
  return 0;
}

int qim_proto_ts_parse(const char *s, size_t len, uint64_t *out_ms) {
  size_t i = 0;
  int y = read_num(s, len, &i, 4);
  if (y < 1970 || !expect(s, len, &i, '-', '-')) return -EINVAL;
  int mo = read_num(s, len, &i, 2);
  if (mo < 1 || mo > 12 || !expect(s, len, &i, '-', '-')) return -EINVAL;
  int d = read_num(s, len, &i, 2);
  if (d < 1 || (unsigned)d > days_in_month(y, (unsigned)mo) || !expect(s, len, &i, 'T', 't'))
    return -EINVAL;
  int h = read_num(s, len, &i, 2);
  if (h < 0 || h > 23 || !expect(s, len, &i, ':', ':')) return -EINVAL;
  int mi = read_num(s, len, &i, 2);
  if (mi < 0 || mi > 59 || !expect(s, len, &i, ':', ':')) return -EINVAL;
  int sec = read_num(s, len, &i, 2);
  if (sec < 0 || sec > 59) return -EINVAL;
  unsigned frac = 0, digits = 0;
  if (i < len && s[i] == '.') {
    for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++)
      if (digits < 3) frac = frac * 10 + (unsigned)(s[i] - '0');
    if (digits == 0 || digits > 9) return -EINVAL;
    for (unsigned k = digits; k < 3; k++) frac *= 10;
  }
  int64_t offset;
  if (parse_zone(s, len, i, &offset) < 0) return -EINVAL;
  int64_t secs =
      days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec - offset;
  if (secs < 0) return -EINVAL;
  *out_ms = (uint64_t)secs * 1000 + frac;
  return 0;
}

/* ---- hi.ver ------------------------------------------------------------------------ */

/* Leading digits of [s, end) as a number in 1..255; 0 otherwise (Tinode parseVersionPart). */
static uint32_t version_part(const char *s, const char *end) {
  uint32_t v = 0;
  for (; s < end && *s >= '0' && *s <= '9'; s++) {
    v = v * 10 + (uint32_t)(*s - '0');
    if (v > 255) return 0;
  }
  return v;
}

uint32_t qim_proto_version_parse(const char *s) {
  if (!s) return 0;
  if (*s == 'v') s++;
  uint32_t parts[3] = {0, 0, 0};
  for (unsigned k = 0; k < 3; k++) {
    /* The third part runs to the end of the string, like Go's SplitN(.., 3). */
    const char *dot = k < 2 ? strchr(s, '.') : NULL;
    const char *end = dot ? dot : s + strlen(s);
    parts[k] = version_part(s, end);
    if (!dot) break;
    s = dot + 1;
  }
  return parts[0] << 16 | parts[1] << 8 | parts[2];
}

/* ---- base64 ------------------------------------------------------------------------- */

/* Value of a character of the standard base64 alphabet, or -1. The lenient decoder below
 * stays here (core's is strict about leftover bits) because Go's decoder, which Tinode
 * clients are written against, ignores them. */
static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

int qim__proto_b64std_decode(const char *s, size_t len, uint8_t *out, size_t *out_len) {
  if (len % 4) return -EINVAL;
  size_t pad = 0;
  if (len >= 1 && s[len - 1] == '=') pad++;
  if (pad && len >= 2 && s[len - 2] == '=') pad++;
  size_t n = 0;
  for (size_t i = 0; i < len; i += 4) {
    uint32_t acc = 0;
    size_t valid = (i + 4 == len) ? 4 - pad : 4;
    for (size_t k = 0; k < 4; k++) {
      int v = k < valid ? b64_value(s[i + k]) : 0;
      if (v < 0) return -EINVAL;
      acc = acc << 6 | (uint32_t)v;
    }
    out[n++] = (uint8_t)(acc >> 16);
    if (valid > 2) out[n++] = (uint8_t)(acc >> 8);
    if (valid > 3) out[n++] = (uint8_t)acc;
  }
  *out_len = n;
  return 0;
}

void qim_proto_cmid_format(const qim_client_message_id *id, char out[QIM_PROTO_CMID_CAP]) {
  /* 16 bytes always fit the 23-byte buffer, so the encoder cannot fail here. */
  (void)qim_b64url_encode(id->b, sizeof id->b, out, QIM_PROTO_CMID_CAP);
}

/* The canonical 22-character base64url spelling of 16 non-zero bytes, and nothing else. */
int qim_proto_cmid_parse(const char *s, size_t len, qim_client_message_id *out) {
  uint8_t b[16];
  size_t n = 0;
  if (len != QIM_PROTO_CMID_LEN || qim_b64url_decode(s, len, b, sizeof b, &n) < 0 || n != sizeof b)
    return qim_err_raise(QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID);
  return qim_client_message_id_make(b, out);
}

/* ---- name tables ------------------------------------------------------------------ */

/* Tinode's texts (PROTOCOL.md §7, server/datamodel.go); the generic one where a code
 * has several. */
static const struct code_text {
  int code;
  const char *text;
} code_texts[] = {
    {200, "ok"},
    {201, "created"},
    {202, "accepted"},
    {204, "no content"},
    {205, "evicted"},
    {208, "delivered"},
    {300, "validate credentials"},
    {301, "auth reset"},
    {303, "use other"},
    {304, "no action"},
    {307, "found"},
    {400, "malformed"},
    {401, "authentication required"},
    {403, "permission denied"},
    {404, "not found"},
    {405, "operation or method not allowed"},
    {406, "invalid response"},
    {408, "disconnected"},
    {409, "command out of sequence"},
    {410, "gone"},
    {413, "too large"},
    {422, "policy violation"},
    {429, "too many requests"},
    {486, "busy here"},
    {500, "internal error"},
    {501, "not implemented"},
    {502, "cluster unreachable"},
    {503, "service unavailable"},
    {505, "version not supported"},
};

const char *qim_proto_code_text(int code) {
  for (size_t i = 0; i < sizeof code_texts / sizeof code_texts[0]; i++)
    if (code_texts[i].code == code) return code_texts[i].text;
  return "";
}

const char *qim_proto_kind_name(qim_proto_kind kind) {
  static const char *const names[] = {"",    "hi",  "acc", "login", "sub",  "leave",
                                      "pub", "get", "set", "del",   "note", "sync"};
  if ((unsigned)kind >= sizeof names / sizeof names[0]) return "";
  return names[kind];
}

const char *qim_proto_event_type_name(qim_event_type t) {
  /* Indexed by the enum value: types.h numbers the event types 0-3 in this order. */
  static const char *const names[] = {"message", "mention", "membership", "control"};
  if ((unsigned)t >= sizeof names / sizeof names[0]) return "";
  return names[t];
}
