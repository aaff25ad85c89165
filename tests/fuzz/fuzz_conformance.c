/*
 * fuzz_conformance.c — libFuzzer harness for the storage conformance suite's vector reader
 * (tests/conformance/: conf_vector.c, conf_json.c, conf_values.c).
 *
 * The reader has no entry point that parses a vector without running it against a fresh
 * store (conf_run_vector_file opens a SQLite database per vector), so this harness drives
 * the parse step only, with no store: it includes conf_vector.c to reach its static
 * helpers and goes through a vector as run_loaded() does — JSON with duplicate keys
 * refused, document shape, options, then per step the defaults overlay, variable and
 * expression substitution of `in` and `out`, the value decoders on every input value,
 * the matcher and `save`. The interpreter's own ops (vars.echo, vars.check) run for real
 * (run_step); for a store op the step's input stands in for the store's output, and each
 * `save` binds the value at its path in the input (or 1) so later steps still resolve.
 * What must hold:
 *   - every decoder returns 0 or -EINVAL, and -EINVAL always says why (ctx.err);
 *   - what a decoder accepts survives its encoder: decode, encode to JSON, decode again
 *     gives an equal value (u64, ids, bytes, modes, enums, streams, positions, *_json
 *     text, content, coordinates, commit keys, mailbox entries, progress);
 *   - a proposal the reader accepts is a valid CommitIntent: its canonical encoding
 *     (record.h) succeeds and decodes back equal; a mailbox entry's canonical encoding
 *     succeeds exactly when its event id matches its seq and ordinal;
 *   - the matcher is reflexive on values without "$" matchers;
 *   - nothing leaks or crashes whatever the document (LeakSanitizer, ASan, UBSan).
 * Seeds: tests/fuzz/corpus/conformance/ (the suite's vectors and its self-test vectors).
 */
#include "../conformance/conf_vector.c"
#include "fuzz.h"
#include "qim/record.h"

#define MAX_STEPS 64
#define MAX_NODES 2000

static FILE *devnull;

static void fz_reset(conf_ctx *c) {
  conf_seen_reset(c);
  c->err[0] = '\0';
}

/* A decoder's result: 0, or -EINVAL with a reason. */
static int fz_result(conf_ctx *c, int rc) {
  FUZZ_CHECK(rc == 0 || rc == -EINVAL);
  if (rc) FUZZ_CHECK(c->err[0] != '\0');
  return rc;
}

/* ---- scalars ------------------------------------------------------------------------------ */

static void fz_scalars(conf_ctx *c, json_t *v) {
  uint64_t u, u2;
  if (fz_result(c, conf_val_u64(c, v, "u64", &u)) == 0) {
    json_t *j = conf_json_u64(u);
    FUZZ_CHECK(conf_val_u64(c, j, "u64", &u2) == 0 && u2 == u);
    json_decref(j);
  }
  qim_u128 w, w2;
  if (fz_result(c, conf_val_u128(c, v, "u128", &w)) == 0) {
    json_t *j = conf_json_u128(w);
    FUZZ_CHECK(conf_val_u128(c, j, "u128", &w2) == 0 && w2.hi == w.hi && w2.lo == w.lo);
    json_decref(j);
  }
  uint8_t id[16], id2[16];
  if (fz_result(c, conf_val_id16(c, v, "id16", id)) == 0) {
    json_t *j = conf_json_id16(id);
    FUZZ_CHECK(conf_val_id16(c, j, "id16", id2) == 0 && memcmp(id, id2, 16) == 0);
    json_decref(j);
  }
  qim_bytes b, b2;
  if (fz_result(c, conf_val_bytes(c, v, "bytes", &b)) == 0) {
    json_t *j = conf_json_bytes(&b);
    FUZZ_CHECK(conf_val_bytes(c, j, "bytes", &b2) == 0 && qim_bytes_equal(&b, &b2));
    qim_bytes_free(&b2);
    json_decref(j);
  }
  qim_bytes_free(&b);
  qim_log_stream s, s2;
  if (fz_result(c, conf_val_stream(c, v, "stream", &s)) == 0) {
    json_t *j = conf_json_stream(s);
    FUZZ_CHECK(conf_val_stream(c, j, "stream", &s2) == 0 && s2.kind == s.kind &&
               s2.shard == s.shard);
    json_decref(j);
  }
  fz_reset(c);
}

/* A member read by key: the decoders that take (object, key). */
static void fz_keyed(conf_ctx *c, json_t *obj, const char *key) {
  static const char *const *const tables[] = {
      conf_names_conv_kind,     conf_names_role,         conf_names_member_op,
      conf_names_commit_state,  conf_names_message_type, conf_names_retention,
      conf_names_message_state, conf_names_direction,    conf_names_event_type,
      conf_names_reserve_kind,  conf_names_loaded_kind,  conf_names_audience};
  int e, e2;
  const char *const *names = tables[fuzz_hash((const uint8_t *)key, strlen(key)) % 12];
  if (fz_result(c, conf_get_enum(c, obj, key, names, &e)) == 0) {
    json_t *o = json_pack("{s:o}", key, conf_json_enum(names, conf_names_count(names), e));
    FUZZ_CHECK(conf_get_enum(c, o, key, names, &e2) == 0 && e2 == e);
    json_decref(o);
  }
  uint32_t m, m2;
  if (fz_result(c, conf_get_mode(c, obj, key, &m)) == 0) {
    json_t *o = json_pack("{s:o}", key, conf_json_mode(m));
    FUZZ_CHECK(conf_get_mode(c, o, key, &m2) == 0 && m2 == m);
    json_decref(o);
  }
  char *t, *t2;
  if (fz_result(c, conf_get_json_text(c, obj, key, &t)) == 0 && t) {
    json_t *o = json_pack("{s:o}", key, conf_json_text(t));
    FUZZ_CHECK(conf_get_json_text(c, o, key, &t2) == 0 && t2 && strcmp(t, t2) == 0);
    free(t2);
    json_decref(o);
  }
  free(t);
  qim_log_position p, p2;
  if (fz_result(c, conf_get_position(c, obj, key, &p)) == 0) {
    json_t *o = json_pack("{s:o}", key, conf_json_position(p));
    FUZZ_CHECK(conf_get_position(c, o, key, &p2) == 0 && p2.offset == p.offset &&
               p2.stream.kind == p.stream.kind && p2.stream.shard == p.stream.shard);
    json_decref(o);
  }
  bool flag;
  fz_result(c, conf_get_bool(c, obj, key, &flag));
  const char *str;
  fz_result(c, conf_get_str(c, obj, key, &str));
  fz_reset(c);
}

/* ---- composites ---------------------------------------------------------------------------- */

static void fz_content(conf_ctx *c, json_t *v) {
  qim_message_content m, m2;
  if (fz_result(c, conf_dec_content(c, v, &m)) == 0) {
    json_t *j = conf_enc_content(&m);
    FUZZ_CHECK(conf_dec_content(c, j, &m2) == 0 && qim_message_content_equal(&m, &m2));
    qim_message_content_free(&m2);
    json_decref(j);
    qim_message_content_free(&m);
  }
  qim_message_coordinates k, k2;
  if (fz_result(c, conf_dec_coordinates(c, v, &k)) == 0) {
    json_t *j = conf_enc_coordinates(&k);
    FUZZ_CHECK(conf_dec_coordinates(c, j, &k2) == 0 && qim_message_coordinates_equal(&k, &k2));
    json_decref(j);
  }
  qim_commit_key key, key2;
  if (fz_result(c, conf_dec_key(c, v, &key)) == 0) {
    json_t *j = json_pack("{s:o,s:o,s:o}", "tenant_id", conf_json_u128(key.tenant_id.v),
                          "sender_id", conf_json_u128(key.sender_id.v), "client_message_id",
                          conf_json_id16(key.client_message_id.b));
    FUZZ_CHECK(conf_dec_key(c, j, &key2) == 0 && memcmp(&key, &key2, sizeof key) == 0);
    json_decref(j);
  }
  fz_reset(c);
}

/* A proposal is expanded into a CommitIntent, which must have a canonical encoding. */
static void fz_proposal(conf_ctx *c, json_t *v) {
  qim_commit_intent in, back;
  int rc = fz_result(c, conf_dec_proposal(c, v, &in));
  fz_reset(c);
  if (rc) return;
  qim_bytes b;
  FUZZ_CHECK(qim_commit_intent_encode(&in, &b) == 0);
  FUZZ_CHECK(qim_commit_intent_decode(b.p, b.n, &back) == 0 && qim_commit_intent_equal(&in, &back));
  json_t *j = conf_enc_intent(&in);
  FUZZ_CHECK(json_is_object(j));
  json_decref(j);
  qim_commit_intent_free(&back);
  qim_bytes_free(&b);
  qim_commit_intent_free(&in);
}

static void fz_entry(conf_ctx *c, json_t *v, uint64_t batch_seq) {
  qim_mailbox_entry e, e2;
  int rc = fz_result(c, conf_dec_mailbox_entry(c, v, batch_seq, &e));
  fz_reset(c);
  if (rc == 0) {
    json_t *j = conf_enc_mailbox_entry(&e);
    FUZZ_CHECK(conf_dec_mailbox_entry(c, j, 0, &e2) == 0 && qim_mailbox_entry_equal(&e, &e2));
    json_decref(j);
    qim_mailbox_entry_free(&e2);
    qim_bytes b = {0};
    int enc = qim_mailbox_entry_encode(&e, &b);
    FUZZ_CHECK((enc == 0) == (e.event_id == qim_event_id_make(e.mailbox_seq, e.event_ordinal)));
    if (enc == 0) {
      FUZZ_CHECK(qim_mailbox_entry_decode(b.p, b.n, &e2) == 0 && qim_mailbox_entry_equal(&e, &e2));
      qim_mailbox_entry_free(&e2);
    }
    qim_bytes_free(&b);
  }
  qim_mailbox_entry_free(&e); /* callers free after a failure too (conf_ops.c free_batch) */
  fz_reset(c);
}

static void fz_progress(conf_ctx *c, json_t *v) {
  qim_dispatch_progress p, p2;
  if (fz_result(c, conf_dec_progress(c, v, &p)) == 0) {
    json_t *j = conf_enc_progress(&p);
    FUZZ_CHECK(conf_dec_progress(c, j, &p2) == 0);
    json_t *j2 = conf_enc_progress(&p2);
    FUZZ_CHECK(json_equal(j, j2));
    json_decref(j2);
    json_decref(j);
    qim_free(p2.completed_chunks);
  }
  qim_free(p.completed_chunks);
  fz_reset(c);
}

/* Every value of an evaluated input goes through the decoders that can read it. */
static void fz_walk(conf_ctx *c, json_t *v, size_t *budget) {
  if (!v || (*budget)-- == 0) return;
  if (json_is_object(v)) {
    fz_content(c, v);
    fz_proposal(c, v);
    fz_entry(c, v, 0);
    fz_progress(c, v);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
      fz_keyed(c, v, k);
      fz_walk(c, x, budget);
    }
  } else if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++) fz_walk(c, json_array_get(v, i), budget);
  } else {
    fz_scalars(c, v);
  }
  FUZZ_CHECK(conf_check_unread(c, v) == 0 || c->err[0]);
  fz_reset(c);
}

/* ---- the vector, step by step ------------------------------------------------------------------
 */

/* True when a value holds no "$" string or key (so no matcher or reference). */
static bool fz_plain(json_t *v) {
  if (json_is_string(v)) return json_string_value(v)[0] != '$';
  const char *k;
  json_t *x;
  if (json_is_object(v)) {
    json_object_foreach(v, k, x) if (k[0] == '$' || !fz_plain(x)) return false;
  }
  for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
    if (!fz_plain(json_array_get(v, i))) return false;
  return true;
}

/* A store step without a store: its evaluated input stands in for the output. */
static void fz_store_step(vrun *v, json_t *step, size_t *budget) {
  json_t *given = json_object_get(step, "in"), *empty = must(json_object());
  json_t *tmpl = overlay(json_object_get(v->defaults, v->op), given ? given : empty);
  json_decref(empty);
  json_t *in = NULL;
  int rc = subst(v, tmpl, &in, false);
  json_decref(tmpl);
  if (rc) {
    FUZZ_CHECK(v->ctx.err[0] != '\0');
    v->ctx.err[0] = '\0';
    return;
  }
  fz_walk(&v->ctx, in, budget);
  json_t *exp; /* left dangling by a failed subst: only a success hands over a value */
  if (json_object_get(step, "out") && subst(v, json_object_get(step, "out"), &exp, true) == 0) {
    mpath p = {{0}, 0};
    if (fz_plain(exp)) FUZZ_CHECK(match(exp, exp, &p));
    (void)match(exp, in, &p);
    json_decref(exp);
  }
  v->ctx.err[0] = '\0';
  v->mismatch = QIM_E_CONFORMANCE_SEMANTIC_MISMATCH;
  (void)check_outputs(v, step, 0, in);
  const char *name;
  json_t *path;
  json_object_foreach(json_object_get(step, "save"), name, path) {
    json_t *val = json_is_string(path) ? get_path(in, json_string_value(path)) : NULL;
    json_object_set_new(v->vars, name, val ? json_deep_copy(val) : json_integer(1));
  }
  json_decref(in);
}

static void fz_vector(vrun *v) {
  json_t *steps = json_object_get(v->doc, "steps"), *vars = json_object_get(v->doc, "vars");
  json_t *defs = json_object_get(v->doc, "defaults");
  if (!json_is_array(steps) || json_array_size(steps) == 0 || (vars && !json_is_object(vars)) ||
      (defs && !json_is_object(defs)))
    return;
  if (fz_result(&v->ctx, load_options(v))) return;
  v->vars = vars ? json_deep_copy(vars) : must(json_object());
  v->defaults = defs;
  size_t budget = MAX_NODES;
  for (size_t i = 0; i < json_array_size(steps) && i < MAX_STEPS; i++) {
    json_t *step = json_array_get(steps, i);
    v->step = i + 1;
    v->op = json_string_value(json_object_get(step, "op"));
    v->note = json_string_value(json_object_get(step, "note"));
    if (!json_is_object(step) || !v->op || !strcmp(v->op, "store.reopen")) continue;
    if (!strcmp(v->op, "vars.echo") || !strcmp(v->op, "vars.check")) {
      (void)run_step(v, step); /* needs no store */
      v->ctx.err[0] = '\0';
    } else {
      fz_store_step(v, step, &budget);
    }
  }
  conf_seen_reset(&v->ctx);
  json_decref(v->vars);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_init();
  devnull = fopen("/dev/null", "w");
  FUZZ_CHECK(devnull != NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  conf_report rep = {.log = devnull};
  vrun v = {.path = "fuzz", .url = "none:", .rep = &rep};
  json_error_t jerr;
  v.doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
  if (v.doc) fz_vector(&v);
  json_decref(v.doc);
  conf_seen_reset(&v.ctx);
  return 0;
}
