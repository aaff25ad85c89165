/*
 * tframe.h — the Tinode JSON frames qim-bench sends and the parts of server frames it
 * reads. Builders write into a caller's buffer (no allocation on the send path); the
 * parser reads {ctrl} with jansson and takes a fast path for {data}, the frame that
 * arrives at fanout rate, reading only the markers qim-bench itself put in the content.
 *
 * Content of a benchmark message: {"qbt":T,"qbs":S,"qbn":N,"txt":"xxx…"} where T is the
 * sender's CLOCK_MONOTONIC time in µs when the message was due, S the sender's index and N
 * its message number; "txt" pads the content to the requested size. One process (or
 * several on one machine) shares CLOCK_MONOTONIC, so the receiver computes send → delivery
 * latency as now - T.
 */
#ifndef QIM_BENCH_TFRAME_H
#define QIM_BENCH_TFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The client version qim-bench announces in {hi}. */
#define QIM_TFRAME_VER "0.25.3"

/* 22 base64url characters + NUL. */
#define QIM_TFRAME_CMID_LEN 22

/*
 * Spells a ClientMessageId: the canonical 22-character base64url of `b` (16 bytes).
 * The caller keeps `b` non-zero (qim refuses an all-zero cmid).
 */
void qim_tframe_cmid(const uint8_t b[16], char out[QIM_TFRAME_CMID_LEN + 1]);

/*
 * Builders. Each writes one NUL-terminated frame into out[0..cap) and returns its length,
 * or -ENOSPC when it does not fit. Strings are JSON-escaped.
 */
int qim_tframe_hi(char *out, size_t cap, const char *id);
/* {acc} creating a basic account `login`:`password` with login:true. */
int qim_tframe_acc(char *out, size_t cap, const char *id, const char *login, const char *password);
int qim_tframe_login_basic(char *out, size_t cap, const char *id, const char *login,
                           const char *password);
int qim_tframe_login_token(char *out, size_t cap, const char *id, const char *token);
/* {sub} to `topic`; a name starting "new" creates a group, given a public name. */
int qim_tframe_sub(char *out, size_t cap, const char *id, const char *topic);
/* {get what:"data"} on `topic`: data:{before, limit}, before left out when 0. */
int qim_tframe_get_data(char *out, size_t cap, const char *id, const char *topic, uint64_t before,
                        uint32_t limit);

/* The benchmark fields of one {pub}. */
typedef struct qim_tframe_pub_args {
  const char *id; /* request id, or NULL for no ack */
  const char *topic;
  const char *cmid; /* 22 characters, or NULL to leave it out */
  bool noecho;
  uint64_t due_us;     /* "qbt" */
  uint32_t sender;     /* "qbs" */
  uint64_t n;          /* "qbn" */
  size_t content_size; /* pad the content object to about this many bytes */
} qim_tframe_pub_args;

int qim_tframe_pub(char *out, size_t cap, const qim_tframe_pub_args *a);

/* ---- reading server frames --------------------------------------------------------------------
 */

typedef enum qim_tframe_kind {
  QIM_TFRAME_OTHER = 0, /* parsed, but not a kind qim-bench reads */
  QIM_TFRAME_CTRL,
  QIM_TFRAME_DATA,
  QIM_TFRAME_META,
  QIM_TFRAME_PRES,
  QIM_TFRAME_INFO,
} qim_tframe_kind;

/* What qim-bench reads from one server frame. Absent strings are "", absent numbers -1. */
typedef struct qim_tframe_msg {
  qim_tframe_kind kind;
  int code;              /* ctrl.code */
  char id[65];           /* ctrl/meta id */
  char topic[65];        /* ctrl/data topic */
  char text[64];         /* ctrl.text (cut) */
  int64_t seq;           /* ctrl.params.seq or data.seq */
  int64_t count;         /* ctrl.params.count (the end of a get data) */
  char user[65];         /* ctrl.params.user */
  char token[513];       /* ctrl.params.token */
  int64_t qbt, qbs, qbn; /* data.content markers */
} qim_tframe_msg;

/*
 * Reads one server frame. Returns 0, or -EINVAL when it is not a JSON object with a known
 * envelope (the caller counts it as a protocol error). A {data} frame whose content was
 * not made by qim-bench parses with qbt == -1. Over-long strings are cut, not refused.
 */
int qim_tframe_parse(const char *json, size_t len, qim_tframe_msg *out);

#endif /* QIM_BENCH_TFRAME_H */
