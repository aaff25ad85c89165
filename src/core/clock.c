/*
 * clock.c — the real and the manual clock behind qim_clock, and RFC 3339 timestamps
 * (clock.h). Timestamps are computed with integer civil-calendar arithmetic instead of
 * gmtime_r()/timegm(): no time_t range limits, no locale or TZ dependence, and the
 * parser can validate every field itself.
 */
#include "qim/clock.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* ---- system clock --------------------------------------------------------------- */

struct timespec qim_deadline_after_ms(clockid_t clock_id, int64_t ms) {
  struct timespec ts;
  clock_gettime(clock_id, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

void qim_cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

static uint64_t system_wall_ms(void *ctx) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* Before 1970 cannot be represented; report the epoch rather than wrap around. */
  if (ts.tv_sec < 0) return 0;
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t system_mono_ns(void *ctx) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const qim_clock system_clock = {system_wall_ms, system_mono_ns, NULL};

const qim_clock *qim_clock_system(void) { return &system_clock; }

/* ---- manual clock --------------------------------------------------------------- */

static uint64_t manual_wall_ms(void *ctx) {
  qim_manual_clock *c = ctx;
  return atomic_load(&c->wall);
}

static uint64_t manual_mono_ns(void *ctx) {
  qim_manual_clock *c = ctx;
  return atomic_load(&c->mono);
}

void qim_manual_clock_init(qim_manual_clock *c, uint64_t wall_ms) {
  c->clock = (qim_clock){manual_wall_ms, manual_mono_ns, c};
  atomic_init(&c->wall, wall_ms);
  atomic_init(&c->mono, 0);
}

void qim_manual_clock_set_wall(qim_manual_clock *c, uint64_t wall_ms) { atomic_store(&c->wall, wall_ms); }

void qim_manual_clock_advance(qim_manual_clock *c, uint64_t ms) {
  atomic_fetch_add(&c->wall, ms);
  atomic_fetch_add(&c->mono, ms * 1000000u);
}

/* ---- civil calendar ------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (y >= 1970, valid m/d). Counts in
 * 400-year eras starting on March 1st, so the leap day is the last day of a year. */
static uint64_t days_from_civil(uint64_t y, unsigned m, unsigned d) {
  if (m <= 2) y--;
  uint64_t era = y / 400;
  unsigned yoe = (unsigned)(y - era * 400);                /* [0, 399] */
  unsigned mp = (m + 9) % 12;                               /* March = 0 */
  unsigned doy = (153 * mp + 2) / 5 + d - 1;                /* [0, 365] */
  unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;     /* [0, 146096] */
  return era * 146097 + doe - 719468;                       /* 719468: 0000-03-01 → 1970-01-01 */
}

static void civil_from_days(uint64_t z, unsigned *y, unsigned *m, unsigned *d) {
  z += 719468;
  uint64_t era = z / 146097;
  unsigned doe = (unsigned)(z - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (unsigned)(era * 400 + yoe) + (*m <= 2);
}

static int is_leap(unsigned y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static unsigned days_in_month(unsigned y, unsigned m) {
  static const unsigned char dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

/* ---- RFC 3339 ------------------------------------------------------------------- */

/* 9999-12-31T23:59:59.999Z: the last instant with a four-digit year. */
#define TIMESTAMP_MAX_MS UINT64_C(253402300799999)

/* Writes v as exactly `width` decimal digits (v < 10^width). */
static char *put_digits(char *p, unsigned v, int width) {
  for (int i = width - 1; i >= 0; i--, v /= 10) p[i] = (char)('0' + v % 10);
  return p + width;
}

void qim_timestamp_format(qim_timestamp_millis ms, char out[QIM_TIMESTAMP_CAP]) {
  if (ms > TIMESTAMP_MAX_MS) ms = TIMESTAMP_MAX_MS; /* keep the fixed 24-char width */
  uint64_t secs = ms / 1000, days = secs / 86400;
  unsigned sod = (unsigned)(secs % 86400), y, mo, d;
  civil_from_days(days, &y, &mo, &d);
  char *p = put_digits(out, y, 4);
  *p++ = '-';
  p = put_digits(p, mo, 2);
  *p++ = '-';
  p = put_digits(p, d, 2);
  *p++ = 'T';
  p = put_digits(p, sod / 3600, 2);
  *p++ = ':';
  p = put_digits(p, sod / 60 % 60, 2);
  *p++ = ':';
  p = put_digits(p, sod % 60, 2);
  *p++ = '.';
  p = put_digits(p, (unsigned)(ms % 1000), 3);
  *p++ = 'Z';
  *p = '\0';
}

/* Reads exactly n decimal digits at p; -1 if any is not a digit. */
static int digits(const char *p, int n) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

/* Milliseconds of the optional fraction between the seconds and the 'Z':
 * "" (20-char form) or "." followed by 1..3 digits (Go trims trailing zeros). */
static int parse_fraction(const char *p, size_t n) {
  if (n == 0) return 0;
  if (n < 2 || n > 4 || p[0] != '.') return -1;
  int v = digits(p + 1, (int)n - 1);
  if (v < 0) return -1;
  for (size_t i = n - 1; i < 3; i++) v *= 10;
  return v;
}

int qim_timestamp_parse(const char *in, size_t len, qim_timestamp_millis *out) {
  if (len < 20 || len > 24 || in[len - 1] != 'Z') return -EINVAL;
  if (in[4] != '-' || in[7] != '-' || in[10] != 'T' || in[13] != ':' || in[16] != ':') return -EINVAL;
  int y = digits(in, 4), mo = digits(in + 5, 2), d = digits(in + 8, 2);
  int h = digits(in + 11, 2), mi = digits(in + 14, 2), s = digits(in + 17, 2);
  int frac = parse_fraction(in + 19, len - 20);
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 ||
      s > 59 || frac < 0)
    return -EINVAL;
  if ((unsigned)d > days_in_month((unsigned)y, (unsigned)mo)) return -EINVAL;
  uint64_t days = days_from_civil((uint64_t)y, (unsigned)mo, (unsigned)d);
  *out = ((days * 86400 + (uint64_t)h * 3600 + (uint64_t)mi * 60 + (uint64_t)s) * 1000) + (uint64_t)frac;
  return 0;
}
