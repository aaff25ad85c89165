/*
 * conf.h — the storage conformance suite's internal API: open a backend by URL inside an
 * isolated dependency, run contract vectors (JSON operation sequences, README.md) against
 * it, and classify every failure as a StorageConformanceError:
 *   QIM_E_CONFORMANCE_SEMANTIC_MISMATCH               a result or error differs from the vector;
 *   QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED          a vector cannot execute (malformed JSON,
 *                                                     unknown op, undefined variable, ...);
 *   QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE the backend could not be created.
 * Every one is produced through qim_err_raise(), so the contract table can see which test
 * produced it. Nothing is ever skipped silently: a run with zero vectors is a failure.
 *
 * Backend URLs:
 *   "sqlite:"            a fresh database file in a fresh temporary directory per vector;
 *   "sqlite:DIR"         the same, with the temporary directories created inside DIR;
 *   "redis:"             a private redis-server per vector (conf_redis.c), the store opened
 *                        on it as "redis://127.0.0.1:PORT/0";
 *   "fault:MODE+URL"     the backend of URL wrapped by the deliberately broken wrapper
 *                        (conf_fault.c), which misbehaves in exactly one way, MODE.
 * Single-threaded: the suite drives the store through QIM_STORE_SYNC.
 */
#ifndef QIM_CONF_H
#define QIM_CONF_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "qim/err.h"
#include "store/store.h"

/* ---- isolated dependencies (conf_dep.c) ------------------------------------------- */

/* One backend instance in its own dependency (temporary directory, later a private Redis). */
typedef struct conf_dep conf_dep;

/*
 * Creates the dependency for `url` and opens a store in it with `opt`. On failure returns
 * QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE (raised) and writes why into `why`.
 * The caller owns *out and frees it with conf_dep_close (which also removes the files).
 */
int conf_dep_open(const char *url, const qim_store_options *opt, conf_dep **out, char *why,
                  size_t why_cap);
qim_store *conf_dep_store(conf_dep *d);
/* The backend URL the store was opened with (e.g. "sqlite:/tmp/qim-conf-x/store.db"). */
const char *conf_dep_backend_url(conf_dep *d);
/* Closes the store (if still open) and removes the dependency; accepts NULL. */
void conf_dep_close(conf_dep *d);
/* Closes the store and opens it again on the same files (restart semantics). */
int conf_dep_reopen(conf_dep *d, char *why, size_t why_cap);

/* A private redis-server (conf_redis.c) for "redis:" URLs: started in `dir` on a free
 * loopback port; 0, or -errno with `why` set. Stopped by its pid (SIGTERM, then SIGKILL). */
int conf_redis_start(const char *dir, int *pid, int *port, char *why, size_t cap);
void conf_redis_stop(int pid);

/* ---- the deliberately broken backend (conf_fault.c) -------------------------------- */

typedef enum conf_fault_mode {
  CONF_FAULT_NONE = 0,              /* transparent: must pass every vector */
  CONF_FAULT_LOG_APPEND_NOT_IDEMPOTENT,
  CONF_FAULT_INTENT_BACKWARD,
  CONF_FAULT_IGNORE_EPOCH_FENCE,
  CONF_FAULT_OTHER_USERS_DELLOG,
  CONF_FAULT_REPLAY_REPORTED_FRESH,
  CONF_FAULT_CMID_REUSE_ACCEPTED,
  CONF_FAULT_READ_BELOW_TRIM,
  CONF_FAULT_MEMBERS_AT_CURRENT,
  CONF_FAULT_RECEIPT_BACKWARD,
  CONF_FAULT_MAILBOX_DUPLICATE,
  CONF_FAULT_COUNT_
} conf_fault_mode;

const char *conf_fault_name(conf_fault_mode m);
/* -1 when `name` is not a mode. */
int conf_fault_parse(const char *name, size_t len);
/* Wraps `inner` (taking ownership: closing the wrapper closes it). */
qim_store *conf_fault_wrap(qim_store *inner, conf_fault_mode mode);

/* ---- vectors (conf_vector.c) ---------------------------------------------------------- */

typedef struct conf_report {
  int vectors, passed, mismatched, malformed, unavailable;
  FILE *log; /* where failures are described; NULL = stderr */
  bool verbose;
} conf_report;

/*
 * Runs one vector file against a fresh dependency of `url`. Returns 0 when it passed,
 * otherwise the (raised) StorageConformanceError code; the report counts it.
 */
int conf_run_vector_file(const char *url, const char *path, conf_report *rep);

/*
 * Runs every *.json file of `dir` (sorted by name), or the single file `dir` names.
 * Returns 0 when all passed; otherwise the first failure's code. Zero vectors found is
 * QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED.
 */
int conf_run_path(const char *url, const char *dir, conf_report *rep);

/* ---- step execution (conf_ops.c) ------------------------------------------------------- */

/* One input member an operation read (see conf_get). */
typedef struct conf_seen {
  const json_t *obj;
  const char *key;
  bool opaque; /* a *_json value: its own members are data, not input keys */
} conf_seen;

/* What an operation needs beyond its JSON input. */
typedef struct conf_ctx {
  qim_store *store;
  qim_shard_config shards;
  char err[512];          /* why the input was malformed */
  conf_seen *seen;        /* members read while decoding the current input */
  size_t nseen, capseen;
} conf_ctx;

/* json_object_get that remembers the member was read: after decoding, every member of
 * the input must have been read, so a misspelt key is a malformed vector, not a silent 0. */
json_t *conf_get(conf_ctx *c, json_t *obj, const char *key);
/* Checks `in` against what was read; -EINVAL with c->err naming the first unread member. */
int conf_check_unread(conf_ctx *c, json_t *in);
void conf_seen_reset(conf_ctx *c);

/*
 * Executes operation `op` with JSON input `in` (variables already substituted).
 * Returns 0 after the call ran (its status in *status, its outputs as JSON in *out,
 * owned by the caller; *out is an empty object when the call failed), or
 * QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED (not raised) when the op is unknown or its
 * input malformed (ctx->err says why).
 */
int conf_op_exec(conf_ctx *ctx, const char *op, json_t *in, int *status, json_t **out);
/* The op names, for the coverage check (every store call is used by some vector). */
size_t conf_op_count(void);
const char *conf_op_name(size_t i);

/* ---- JSON value codecs shared by the ops (conf_json.c) --------------------------------- */

/* Decoders return 0, or -EINVAL with ctx->err set. A NULL or absent value decodes as 0. */
int conf_get_u64(conf_ctx *c, json_t *obj, const char *key, uint64_t *out);
int conf_get_bool(conf_ctx *c, json_t *obj, const char *key, bool *out);
int conf_val_u64(conf_ctx *c, json_t *v, const char *what, uint64_t *out);
int conf_val_u128(conf_ctx *c, json_t *v, const char *what, qim_u128 *out);
int conf_get_u128(conf_ctx *c, json_t *obj, const char *key, qim_u128 *out);
int conf_val_id16(conf_ctx *c, json_t *v, const char *what, uint8_t out[16]);
int conf_get_id16(conf_ctx *c, json_t *obj, const char *key, uint8_t out[16]);
/* Strings are borrowed from the JSON (valid while `obj` lives); NULL when absent/null. */
int conf_get_str(conf_ctx *c, json_t *obj, const char *key, const char **out);
/* A JSON value given for a *_json field: strings pass through, anything else is dumped
 * compactly into a string the caller frees with free(). NULL when absent/null. */
int conf_get_json_text(conf_ctx *c, json_t *obj, const char *key, char **out);
/* Bytes: a string (its UTF-8 bytes) or {"hex": "..."}; allocated with qim_malloc. */
int conf_val_bytes(conf_ctx *c, json_t *v, const char *what, qim_bytes *out);
int conf_get_bytes(conf_ctx *c, json_t *obj, const char *key, qim_bytes *out);
/* Enum by name from a NULL-terminated table (index = value); integers accepted too. */
int conf_get_enum(conf_ctx *c, json_t *obj, const char *key, const char *const *names, int *out);
/* Access mode: letters of "JRWPASDO" or an integer. */
int conf_get_mode(conf_ctx *c, json_t *obj, const char *key, uint32_t *out);
int conf_val_stream(conf_ctx *c, json_t *v, const char *what, qim_log_stream *out);
int conf_get_stream(conf_ctx *c, json_t *obj, const char *key, qim_log_stream *out);
int conf_get_position(conf_ctx *c, json_t *obj, const char *key, qim_log_position *out);

/* Encoders build fresh JSON values (never NULL). */
json_t *conf_json_u64(uint64_t v);
json_t *conf_json_u128(qim_u128 v);
json_t *conf_json_id16(const uint8_t b[16]);
json_t *conf_json_bytes(const qim_bytes *b);
json_t *conf_json_text(const char *s);      /* a *_json string: its canonical value, or the string */
json_t *conf_json_str(const char *s);       /* NULL → null */
json_t *conf_json_mode(uint32_t mode);
json_t *conf_json_stream(qim_log_stream s);
json_t *conf_json_position(qim_log_position p);
json_t *conf_json_enum(const char *const *names, int n_names, int v);

extern const char *const conf_names_conv_kind[];
extern const char *const conf_names_role[];
extern const char *const conf_names_member_op[];
extern const char *const conf_names_commit_state[];
extern const char *const conf_names_message_type[];
extern const char *const conf_names_retention[];
extern const char *const conf_names_message_state[];
extern const char *const conf_names_direction[];
extern const char *const conf_names_event_type[];
extern const char *const conf_names_reserve_kind[];
extern const char *const conf_names_loaded_kind[];
extern const char *const conf_names_audience[];
int conf_names_count(const char *const *names);

/* Composite values shared by several ops (conf_values.c). */
int conf_dec_content(conf_ctx *c, json_t *v, qim_message_content *out);
json_t *conf_enc_content(const qim_message_content *m);
json_t *conf_enc_coordinates(const qim_message_coordinates *m);
int conf_dec_coordinates(conf_ctx *c, json_t *v, qim_message_coordinates *out);
json_t *conf_enc_record(const qim_message_record *r);
json_t *conf_enc_intent(const qim_commit_intent *i);
json_t *conf_enc_committed(const qim_committed_message *m);
int conf_dec_key(conf_ctx *c, json_t *v, qim_commit_key *out);
/* The compact proposal form (README.md "Proposals"); *out owns its memory (free with
 * qim_commit_intent_free). */
int conf_dec_proposal(conf_ctx *c, json_t *v, qim_commit_intent *out);
int conf_dec_mailbox_entry(conf_ctx *c, json_t *v, qim_mailbox_seq batch_seq, qim_mailbox_entry *out);
json_t *conf_enc_mailbox_entry(const qim_mailbox_entry *e);
int conf_dec_progress(conf_ctx *c, json_t *v, qim_dispatch_progress *out);
json_t *conf_enc_progress(const qim_dispatch_progress *p);
json_t *conf_enc_user(const qim_store_user *u);
json_t *conf_enc_conversation(const qim_store_conversation *c);
json_t *conf_enc_member(const qim_store_member *m);
json_t *conf_enc_group_member(const qim_group_member *m);

#endif
