/*
 * proto.h — the Tinode JSON frame codec of qim's gateway (PROTOCOL.md §2, §5-§12).
 *
 * Pure functions, no I/O: the WebSocket transport hands in one text frame, the codec
 * turns it into a typed qim_proto_msg; the session logic builds replies with the
 * qim_proto_<frame>() builders, which return one heap buffer of compact JSON each.
 * The wire format is documented for clients in docs/protocol.md.
 *
 * Decoding rules (shared by every message):
 *   - the caller bounds the frame size (max_message_size + envelope) before calling;
 *   - nesting deeper than `max_depth` is refused by a bracket scan BEFORE jansson
 *     parses anything, so a hostile frame cannot make the parser recurse deeply;
 *   - jansson parses strictly: duplicate keys, bad UTF-8, "\u0000" inside strings,
 *     integers beyond int64 and trailing garbage are all "malformed";
 *   - unknown keys are ignored (Tinode does the same); JSON `null` for a field means
 *     "absent", like Go's encoding/json does for Tinode;
 *   - every number is an integer 0 <= n <= QIM_PROTO_INT_MAX (2^31-1): seqs, limits,
 *     ranges, unread counts; a real (1.5, 1e3) or a negative value is malformed;
 *   - strings are bounded in bytes: id and topic-like names QIM_PROTO_NAME_MAX, other
 *     strings QIM_PROTO_STR_MAX; lists are bounded too (QIM_PROTO_*_MAX).
 * A network probe (the text frame "1") is not JSON and must be answered by the
 * transport before this decoder is called.
 *
 * Every function here is reentrant and keeps no global state, so any thread may call
 * it (jansson's own allocator hooks are the process's business, not ours).
 */
#ifndef QIM_GATEWAY_PROTO_H
#define QIM_GATEWAY_PROTO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qim/types.h"

/* ---- limits ---------------------------------------------------------------- */

#define QIM_PROTO_DEPTH_DEFAULT 32 /* nesting of {} and [], the envelope counts as 1 */
#define QIM_PROTO_NAME_MAX 64      /* bytes: id, topic, user, scheme, ver, lang, mode... */
#define QIM_PROTO_NAME_CAP (QIM_PROTO_NAME_MAX + 1)
#define QIM_PROTO_STR_MAX 512        /* bytes: ua, dev, token, cursor, tags, cred values... */
#define QIM_PROTO_SECRET_MAX 4096    /* bytes of base64 text in secret / tmpsecret */
#define QIM_PROTO_INT_MAX 0x7FFFFFFF /* every JSON number we accept is in [0, 2^31) */
#define QIM_PROTO_RANGES_MAX 1024    /* entries of ranges[] / delseq[] */
#define QIM_PROTO_TAGS_MAX 64
#define QIM_PROTO_CREDS_MAX 16
#define QIM_PROTO_ATTACHMENTS_MAX 64

/* ---- access modes (PROTOCOL.md §4, Tinode types.go) ------------------------- */

#define QIM_MODE_NONE 0x00u    /* "N": explicitly nothing */
#define QIM_MODE_JOIN 0x01u    /* J */
#define QIM_MODE_READ 0x02u    /* R */
#define QIM_MODE_WRITE 0x04u   /* W */
#define QIM_MODE_PRES 0x08u    /* P */
#define QIM_MODE_APPROVE 0x10u /* A */
#define QIM_MODE_SHARE 0x20u   /* S */
#define QIM_MODE_DELETE 0x40u  /* D */
#define QIM_MODE_OWNER 0x80u   /* O */
#define QIM_MODE_BITS 0xFFu
/* "" on the wire: "use the default". Outside the letter bits so it differs from N. */
#define QIM_MODE_UNSET 0x100u
/* Longest formatted mode ("JRWPASDO") or delta ("+JRWPASDO" / "+JRWP-ASDO") + NUL. */
#define QIM_MODE_STR_CAP 20

/*
 * Parses an absolute mode string: letters of JRWPASDO in any order and either case
 * (as Tinode's ParseAcs), "N"/"n" alone for QIM_MODE_NONE, "" for QIM_MODE_UNSET.
 * Stricter than Tinode: "N" followed by anything is refused. 0 or -EINVAL.
 */
int qim_proto_mode_parse(const char *s, size_t len, uint32_t *out);

/*
 * Canonical text of `mode`: letters in JRWPASDO order, "N" for none, "" for
 * QIM_MODE_UNSET. Returns the length, or -ENOSPC / -EINVAL (bits above 0x1FF).
 */
int qim_proto_mode_format(uint32_t mode, char *out, size_t cap);

/*
 * Applies a mutation to `base` (Tinode ApplyMutation): a string containing '+' or
 * '-' is a delta ("+AS-D": add A and S, remove D; chunks in any order), anything
 * else is an absolute mode as for qim_proto_mode_parse. "" leaves base unchanged.
 * 0 or -EINVAL (then *out is untouched).
 */
int qim_proto_mode_apply(const char *s, size_t len, uint32_t base, uint32_t *out);

/*
 * The delta from `before` to `after` as Tinode writes it in dacs: added bits first
 * ("+W"), then removed bits ("-PA"); "" when equal. UNSET counts as no bits.
 * Returns the length or -ENOSPC.
 */
int qim_proto_mode_delta(uint32_t before, uint32_t after, char *out, size_t cap);

/* ---- other pure helpers ------------------------------------------------------ */

/* Timestamps are written by core's qim_timestamp_format (qim/clock.h). This parses RFC
 * 3339 (any number of fraction digits, truncated to milliseconds; "Z" or "+hh:mm" /
 * "-hh:mm"); years 1970-9999 only. 0 or -EINVAL. */
int qim_proto_ts_parse(const char *s, size_t len, uint64_t *out_ms);

/*
 * hi.ver as Tinode's parseVersion: optional "v", then major.minor.patch where each
 * part is read up to its first non-digit ("0.25.3", "0.25", "v0.12.34-rc5"); a part
 * that is missing, unparsable or above 255 reads as 0. Result is
 * major<<16 | minor<<8 | patch; 0 means unparsable (reply 400). Tinode's minimum
 * supported version is 0.20 = 0x1400 (reply 505 below it).
 */
uint32_t qim_proto_version_parse(const char *s);

/* ClientMessageId on the wire (qim extension `cmid`): exactly 22 characters of
 * URL-safe base64 without padding, the canonical encoding of 16 bytes (the unused
 * low 4 bits of the last character must be zero, so every id has one spelling). */
#define QIM_PROTO_CMID_LEN 22
#define QIM_PROTO_CMID_CAP 23
void qim_proto_cmid_format(const qim_client_message_id *id, char out[QIM_PROTO_CMID_CAP]);
/* 0, or QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID (raised) for a bad spelling or all-zero. */
int qim_proto_cmid_parse(const char *s, size_t len, qim_client_message_id *out);

/* The usual {ctrl} text for a code ("ok", "created", "accepted", "malformed", ...);
 * "" for a code we do not know. Codes with several texts (304, 401, 409, ...) give
 * the generic one; pass a specific text to qim_proto_ctrl() where it matters. */
const char *qim_proto_code_text(int code);

/* ---- decoded client messages ---------------------------------------------------- */

typedef enum qim_proto_kind {
  QIM_PROTO_NONE = 0,
  QIM_PROTO_HI,
  QIM_PROTO_ACC,
  QIM_PROTO_LOGIN,
  QIM_PROTO_SUB,
  QIM_PROTO_LEAVE,
  QIM_PROTO_PUB,
  QIM_PROTO_GET,
  QIM_PROTO_SET,
  QIM_PROTO_DEL,
  QIM_PROTO_NOTE,
  QIM_PROTO_SYNC, /* qim extension */
} qim_proto_kind;

/* "hi", "acc", ... "sync"; "" for QIM_PROTO_NONE. */
const char *qim_proto_kind_name(qim_proto_kind kind);

/* get/sub.get `what` bits (Tinode constMsgMeta*). */
#define QIM_PROTO_WHAT_DESC 0x01u
#define QIM_PROTO_WHAT_SUB 0x02u
#define QIM_PROTO_WHAT_DATA 0x04u
#define QIM_PROTO_WHAT_TAGS 0x08u
#define QIM_PROTO_WHAT_DEL 0x10u
#define QIM_PROTO_WHAT_CRED 0x20u
#define QIM_PROTO_WHAT_AUX 0x40u

/*
 * All pointers inside a decoded message borrow from it: strings are NUL-terminated
 * (never containing NUL), valid until qim_proto_msg_free(); json_t pointers are
 * borrowed references into the parsed tree (json_incref() to keep one longer).
 * NULL means "absent" for every pointer.
 */

/* A seq range [low, hi): hi == 0 means just `low` (Tinode MsgRange). */
typedef struct qim_proto_range {
  uint32_t low, hi;
} qim_proto_range;

typedef struct qim_proto_ranges {
  const qim_proto_range *v;
  size_t n;
} qim_proto_ranges;

typedef struct qim_proto_tags {
  bool present; /* "tags" was sent (possibly as []) */
  const char *const *v;
  size_t n;
} qim_proto_tags;

/* MsgCredClient. */
typedef struct qim_proto_cred {
  const char *meth, *val, *resp;
  json_t *params; /* object */
} qim_proto_cred;

typedef struct qim_proto_creds {
  const qim_proto_cred *v;
  size_t n;
} qim_proto_creds;

/* MsgSetDesc (acc.desc, sub.set.desc, set.desc). Modes are QIM_MODE_UNSET when absent. */
typedef struct qim_proto_set_desc {
  bool present;
  bool has_defacs;
  uint32_t defacs_auth, defacs_anon;
  json_t *public_data, *trusted_data, *private_data; /* any JSON */
} qim_proto_set_desc;

/* MsgSetSub: user (NULL = self) and an absolute mode (QIM_MODE_UNSET when absent). */
typedef struct qim_proto_set_sub {
  bool present;
  const char *user;
  uint32_t mode;
} qim_proto_set_sub;

/* MsgGetOpts. Numbers are 0 when absent (the SDK never sends 0). */
typedef struct qim_proto_get_opts {
  bool present;
  const char *user, *topic;
  bool has_ims;
  uint64_t ims_ms; /* if-modified-since, ms since the epoch */
  uint32_t since, before, limit;
  bool has_ranges;
  qim_proto_ranges ranges;
  const char *cursor; /* qim extension (get sub of `me` or a group): the page after this cursor */
} qim_proto_get_opts;

/* MsgGetQuery (get, sub.get). */
typedef struct qim_proto_get_query {
  bool present;
  uint32_t what; /* QIM_PROTO_WHAT_* bits; unknown words are ignored as in Tinode */
  qim_proto_get_opts desc, sub, data, del;
} qim_proto_get_query;

/* MsgSetQuery (set, sub.set). `what` says which parts were present. */
typedef struct qim_proto_set_query {
  bool present;
  uint32_t what; /* QIM_PROTO_WHAT_DESC | _SUB | _TAGS | _CRED | _AUX */
  qim_proto_set_desc desc;
  qim_proto_set_sub sub;
  qim_proto_tags tags;
  bool has_cred;
  qim_proto_cred cred;
  json_t *aux; /* object */
} qim_proto_set_query;

typedef struct qim_proto_hi {
  const char *ver, *ua, *dev, *platf, *lang;
  bool bkg;
  const char *device; /* qim extension: the client's stable device id (≤ NAME_MAX) */
} qim_proto_hi;

typedef struct qim_proto_acc {
  const char *user, *scheme, *token, *tmpscheme, *status, *authlevel;
  bool has_secret; /* secret bytes are standard base64 (with padding) on the wire */
  const uint8_t *secret;
  size_t secret_len;
  bool has_tmpsecret;
  const uint8_t *tmpsecret;
  size_t tmpsecret_len;
  bool login;
  qim_proto_set_desc desc;
  qim_proto_tags tags;
  qim_proto_creds cred;
} qim_proto_acc;

typedef struct qim_proto_login {
  const char *scheme;
  bool has_secret;
  const uint8_t *secret;
  size_t secret_len;
  qim_proto_creds cred;
} qim_proto_login;

typedef struct qim_proto_sub {
  bool bkg;
  qim_proto_set_query set;
  qim_proto_get_query get;
} qim_proto_sub;

typedef struct qim_proto_leave {
  bool unsub;
} qim_proto_leave;

typedef struct qim_proto_pub {
  bool noecho;
  json_t *head;    /* object */
  json_t *content; /* any JSON; NULL when absent or null */
  bool has_cmid;   /* qim extension, see qim_proto_cmid_parse */
  qim_client_message_id cmid;
} qim_proto_pub;

typedef struct qim_proto_get {
  qim_proto_get_query q; /* q.what != 0 is guaranteed */
} qim_proto_get;

typedef struct qim_proto_set {
  qim_proto_set_query q; /* q.what != 0 is guaranteed */
} qim_proto_set;

typedef enum qim_proto_del_what {
  QIM_PROTO_DEL_MSG = 1, /* default when `what` is absent or "" */
  QIM_PROTO_DEL_TOPIC,
  QIM_PROTO_DEL_SUB,
  QIM_PROTO_DEL_USER,
  QIM_PROTO_DEL_CRED,
} qim_proto_del_what;

typedef struct qim_proto_del {
  qim_proto_del_what what;
  bool hard;
  qim_proto_ranges delseq;
  const char *user;
  bool has_cred;
  qim_proto_cred cred;
} qim_proto_del;

typedef enum qim_proto_note_what {
  QIM_PROTO_NOTE_KP = 1,
  QIM_PROTO_NOTE_KPA,
  QIM_PROTO_NOTE_KPV,
  QIM_PROTO_NOTE_READ,
  QIM_PROTO_NOTE_RECV,
  QIM_PROTO_NOTE_CALL,
  QIM_PROTO_NOTE_DATA,
} qim_proto_note_what;

/* A decoded note already passed the gates that need no server state (§10): topic
 * present, `what` known, kp/kpa/kpv without seq, read/recv with seq > 0, data with
 * a payload. Checks against lastSeq, attachment and permissions are the session's. */
typedef struct qim_proto_note {
  qim_proto_note_what what;
  uint32_t seq, unread;
  const char *event;
  json_t *payload; /* any JSON */
} qim_proto_note;

/* qim extension {sync}: pull the caller's mailbox (docs/protocol.md). */
typedef struct qim_proto_sync {
  const char *cursor;        /* opaque signed token; NULL = from the start */
  uint32_t limit, max_bytes; /* 0 = server default */
} qim_proto_sync;

/* Top-level `extra` (attachments, obo, authlevel; the last two are root only). */
typedef struct qim_proto_extra {
  bool present;
  json_t *attachments; /* array of strings */
  const char *obo, *authlevel;
} qim_proto_extra;

typedef struct qim__proto_block qim__proto_block; /* private allocation chain */

typedef struct qim_proto_msg {
  qim_proto_kind kind;
  char id[QIM_PROTO_NAME_CAP]; /* the request id exactly as received; "" = none */
  const char *topic;           /* sub, leave, pub, get, set, note: always set; del: set unless
                                  what is user/cred; NULL otherwise */
  qim_proto_extra extra;
  union {
    qim_proto_hi hi;
    qim_proto_acc acc;
    qim_proto_login login;
    qim_proto_sub sub;
    qim_proto_leave leave;
    qim_proto_pub pub;
    qim_proto_get get;
    qim_proto_set set;
    qim_proto_del del;
    qim_proto_note note;
    qim_proto_sync sync;
  } u;
  /* private */
  json_t *_root;
  qim__proto_block *_blocks;
} qim_proto_msg;

/* Why a frame was refused; filled by qim_proto_decode() on failure. */
typedef struct qim_proto_error {
  int code;                       /* {ctrl} code to answer with: 400 */
  const char *text;               /* {ctrl} text: "malformed" (static) */
  char id[QIM_PROTO_NAME_CAP];    /* the request id when one could be found, else "" */
  char topic[QIM_PROTO_NAME_CAP]; /* the request topic when one could be found, else "" */
  qim_proto_kind kind;            /* the payload key when it was identified, else NONE */
  /* True when Tinode drops this frame without any reply: a {note} that parsed but
   * fails a semantic gate (unknown what, missing topic, seq where none belongs...). */
  bool silent;
  const char *field;  /* static: the offending key, innermost ("seq", "low", "id"...), or "" */
  const char *detail; /* static, for logs: "not an integer", "too deep", ... */
} qim_proto_error;

/*
 * Decodes one client frame of `len` bytes (no NUL needed). `max_depth` 0 means
 * QIM_PROTO_DEPTH_DEFAULT. On success returns 0 and `out` owns the parsed tree: call
 * qim_proto_msg_free(out) when done. On failure `out` holds nothing (freeing it is
 * still allowed), `err` says what to answer, and the return is:
 *   -EINVAL   malformed frame (every structural or type error);
 *   -ENOMEM   jansson ran out of memory;
 *   QIM_E_COMMIT_INVALID_CLIENT_MESSAGE_ID (raised)  a pub whose `cmid` is not a valid
 *             ClientMessageId; err->code is still 400 "malformed".
 * Errors before the payload object was found (unparsable, too deep, not an object, no
 * known key, payload not an object) carry no id; later ones carry the id (and topic)
 * when the payload has them as bounded strings.
 */
int qim_proto_decode(const char *buf, size_t len, unsigned max_depth, qim_proto_msg *out,
                     qim_proto_error *err);

/* Releases everything a decoded message owns; wipes decoded secrets. Accepts NULL
 * and a zeroed or already freed message. */
void qim_proto_msg_free(qim_proto_msg *m);

/* ---- server frames -------------------------------------------------------------- */

/*
 * Every builder returns one heap buffer (free with qim_free) holding compact JSON with
 * a trailing NUL that is not counted in *len (len may be NULL). Empty/zero fields are
 * left out Go-omitempty style, except the ones the SDK needs (ctrl.code, ctrl.ts,
 * data.topic, data.seq, data.ts, pres.topic, pres.what, info.topic, info.what).
 * Strings are escaped as JSON; bytes that are not valid UTF-8 become U+FFFD, so the
 * output is always valid JSON. Timestamps are milliseconds since the epoch, written as
 * qim_timestamp_format(); a timestamp argument of 0 means "absent" where it is optional.
 * A json_t argument may be NULL; an empty object passed as params/head is left out.
 * Returns NULL only when memory runs out (buffers grow with qim_trymalloc because
 * their size follows peer-controlled content).
 */

/* {ctrl id topic code text params ts}. `ts_ms` is always written. */
char *qim_proto_ctrl(const char *id, const char *topic, int code, const char *text,
                     const json_t *params, uint64_t ts_ms, size_t *len);

/* The 400 reply for a decode failure: {ctrl id topic code text ts} from `e`. */
char *qim_proto_ctrl_error(const qim_proto_error *e, uint64_t ts_ms, size_t *len);

/* {data}: built once per message and shared by every receiver that sees the same
 * topic name (P2P receivers see different names and need one frame each). The
 * content is `content` when non-NULL, else `content_raw` (already-serialized JSON
 * text, trusted: it must come from our own encoder or store), else omitted; the head
 * likewise (`head`, else `head_raw`), and left out when it is an empty object. */
typedef struct qim_proto_data_frame {
  const char *topic; /* required */
  const char *from;
  uint64_t ts_ms; /* always written */
  uint32_t seq;   /* always written */
  const json_t *head;
  const char *head_raw;
  size_t head_raw_len;
  const json_t *content;
  const char *content_raw;
  size_t content_raw_len;
} qim_proto_data_frame;
char *qim_proto_data(const qim_proto_data_frame *d, size_t *len);

/* acs{want,given,mode}: each member is omitted when QIM_MODE_UNSET. */
typedef struct qim_proto_acs {
  uint32_t want, given, mode;
} qim_proto_acs;
/* An acs with all three members QIM_MODE_UNSET. */
qim_proto_acs qim_proto_acs_unset(void);

/* defacs{auth,anon}: each member is omitted when QIM_MODE_UNSET. */
typedef struct qim_proto_defacs {
  uint32_t auth, anon;
} qim_proto_defacs;

/* meta.desc (Tinode MsgTopicDesc, PROTOCOL.md §6). 0/NULL/false fields are omitted. */
typedef struct qim_proto_topic_desc {
  uint64_t created_ms, updated_ms, touched_ms;
  const char *state;
  bool online, chan;
  uint64_t seen_when_ms; /* seen{when,ua}: P2P only */
  const char *seen_ua;
  const qim_proto_defacs *defacs;
  const qim_proto_acs *acs;
  uint32_t seq, read, recv, clear, subcnt;
  const json_t *public_data, *trusted_data, *private_data;
} qim_proto_topic_desc;

/* meta.sub[] entry (Tinode MsgTopicSub, PROTOCOL.md §6, §11.1). */
typedef struct qim_proto_topic_sub {
  uint64_t updated_ms, deleted_ms;
  bool online;
  const qim_proto_acs *acs;
  uint32_t read, recv;
  const json_t *public_data, *trusted_data, *private_data;
  const char *user;  /* non-me topics */
  const char *topic; /* me listings */
  uint64_t touched_ms;
  uint32_t seq, clear, subcnt;
  uint64_t seen_when_ms;
  const char *seen_ua;
} qim_proto_topic_sub;

/* MsgCredServer for meta.cred[]. */
typedef struct qim_proto_cred_info {
  const char *meth, *val;
  bool done;
} qim_proto_cred_info;

/* {meta id topic ts desc}; ts_ms 0 = no ts. */
char *qim_proto_meta_desc(const char *id, const char *topic, uint64_t ts_ms,
                          const qim_proto_topic_desc *desc, size_t *len);
/* {meta id topic ts sub:[...]}; n may be 0 (writes "sub":[]; Tinode answers an empty
 * list with ctrl 204 instead, which is the session's choice). */
char *qim_proto_meta_sub(const char *id, const char *topic, uint64_t ts_ms,
                         const qim_proto_topic_sub *subs, size_t n, size_t *len);
/* {meta id topic ts del:{clear, delseq:[{low,hi}]}}; hi 0 is omitted. */
char *qim_proto_meta_del(const char *id, const char *topic, uint64_t ts_ms, uint32_t clear,
                         const qim_proto_range *delseq, size_t n, size_t *len);
/* {meta id topic ts tags:[...]}. */
char *qim_proto_meta_tags(const char *id, const char *topic, uint64_t ts_ms,
                          const char *const *tags, size_t n, size_t *len);
/* {meta id topic ts cred:[{meth,val,done}]}. */
char *qim_proto_meta_cred(const char *id, const char *topic, uint64_t ts_ms,
                          const qim_proto_cred_info *creds, size_t n, size_t *len);
/* {meta id topic ts aux:{...}}. */
char *qim_proto_meta_aux(const char *id, const char *topic, uint64_t ts_ms, const json_t *aux,
                         size_t *len);

/* {pres topic src what ua seq clear delseq tgt act dacs{want,given}}. dacs is written
 * when either string is non-empty: deltas ("+AS-D", see qim_proto_mode_delta) or
 * absolute modes. Presence notices carry no timestamp. */
typedef struct qim_proto_pres_frame {
  const char *topic; /* required */
  const char *src;
  const char *what; /* required: on off ua upd tags aux acs gone term msg read recv del */
  const char *ua;
  uint32_t seq, clear;
  const qim_proto_range *delseq;
  size_t delseq_n;
  const char *tgt, *act;
  const char *dacs_want, *dacs_given;
} qim_proto_pres_frame;
char *qim_proto_pres(const qim_proto_pres_frame *p, size_t *len);

/* {info topic src from what seq event payload}: a relayed note. */
typedef struct qim_proto_info_frame {
  const char *topic; /* required */
  const char *src;   /* only when topic is "me" */
  const char *from;
  const char *what; /* required */
  uint32_t seq;
  const char *event;
  const json_t *payload;
} qim_proto_info_frame;
char *qim_proto_info(const qim_proto_info_frame *i, size_t *len);

/* qim extension: one entry of a {sync} reply (a mailbox event). 64-bit values travel
 * as decimal strings. The body (head/content) is written only when included. */
typedef struct qim_proto_sync_entry {
  uint64_t event_id;
  qim_event_type type; /* "message" | "mention" | "membership" | "control" */
  const char *topic;   /* as this user sees it */
  uint32_t seq;        /* conversation seq; 0 = omitted */
  const char *from;
  uint64_t ts_ms;
  const qim_client_message_id *cmid; /* NULL = omitted */
  bool body_included;
  const json_t *head; /* or head_raw, as in qim_proto_data_frame */
  const char *head_raw;
  size_t head_raw_len;
  const json_t *content; /* or content_raw */
  const char *content_raw;
  size_t content_raw_len;
} qim_proto_sync_entry;

/* {sync id entries:[...] covered watermark more cursor}: entries, covered and watermark
 * are always written; more only when true; cursor when non-NULL. */
typedef struct qim_proto_sync_frame {
  const char *id;
  const qim_proto_sync_entry *entries;
  size_t n;
  uint64_t covered;   /* covered_through_seq */
  uint64_t watermark; /* lane watermark */
  bool more;
  const char *cursor; /* the next signed cursor token */
} qim_proto_sync_frame;
char *qim_proto_sync_reply(const qim_proto_sync_frame *s, size_t *len);

/* "message", "mention", "membership", "control"; "" for anything else. */
const char *qim_proto_event_type_name(qim_event_type t);

#endif /* QIM_GATEWAY_PROTO_H */
