/*
 * conf_vector.c — the contract-vector interpreter (format: README.md).
 *
 * A vector is a sequence of steps run against one fresh isolated backend. Each step names
 * a store call, gives its input (merged over the vector's per-op defaults, with "$var"
 * references and "$expr" objects evaluated), and states the expected error (default
 * "OK") and a subset of the expected outputs; "save" binds output values to variables
 * for later steps. The first step that disagrees ends the vector with a
 * StorageConformanceError: SemanticMismatch when the backend answered differently,
 * ContractVectorFailed when the vector itself cannot execute.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "qim/err.h"
#include "qim/shard.h"

typedef struct vrun {
  const char *path, *url;
  json_t *doc, *vars, *defaults;
  conf_dep *dep;
  conf_ctx ctx;
  qim_store_options opt;
  conf_report *rep;
  size_t step;
  const char *op, *note;
  int mismatch; /* what a disagreement is: SemanticMismatch, or for vars.echo the vector's fault */
} vrun;

static json_t *must(json_t *v) {
  if (!v) abort();
  return v;
}

static FILE *out_of(conf_report *rep) { return rep && rep->log ? rep->log : stderr; }

/* Reports a failure of the current vector (and step) and returns the raised code. */
static int fail(vrun *v, int code, const char *fmt, ...) {
  FILE *f = out_of(v->rep);
  fprintf(f, "FAIL %s", v->path);
  if (v->step) fprintf(f, " step %zu (%s%s%s)", v->step, v->op ? v->op : "?", v->note ? ": " : "",
                       v->note ? v->note : "");
  fprintf(f, "\n  %s: ", qim_err_name(code));
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  if (v->rep) {
    if (code == QIM_E_CONFORMANCE_SEMANTIC_MISMATCH) v->rep->mismatched++;
    else if (code == QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE) v->rep->unavailable++;
    else v->rep->malformed++;
  }
  return qim_err_raise(code);
}

/* ---- variables and expressions -------------------------------------------------------------- */

/* "$name", "$name+N" or "$name-N": splits into name and delta; false if not that shape. */
static bool parse_ref(const char *s, char *name, size_t cap, int64_t *delta) {
  if (s[0] != '$') return false;
  size_t n = 1;
  while (s[n] == '_' || (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
         (n > 1 && s[n] >= '0' && s[n] <= '9'))
    n++;
  if (n == 1 || n - 1 >= cap) return false;
  memcpy(name, s + 1, n - 1);
  name[n - 1] = 0;
  *delta = 0;
  if (!s[n]) return true;
  if ((s[n] != '+' && s[n] != '-') || !s[n + 1]) return false;
  char *end;
  long long d = strtoll(s + n + 1, &end, 10);
  if (*end || d < 0) return false;
  *delta = s[n] == '-' ? -d : d;
  return true;
}

static int subst(vrun *v, json_t *t, json_t **out, bool matcher);

static int resolve_ref(vrun *v, const char *s, json_t **out) {
  char name[64];
  int64_t delta;
  if (!parse_ref(s, name, sizeof name, &delta)) {
    *out = must(json_string(s));
    return 0;
  }
  json_t *val = json_object_get(v->vars, name);
  if (!val) return snprintf(v->ctx.err, sizeof v->ctx.err, "undefined variable $%s", name), -EINVAL;
  if (delta == 0) return *out = json_deep_copy(val), 0;
  if (!json_is_integer(val))
    return snprintf(v->ctx.err, sizeof v->ctx.err, "$%s is not an integer", name), -EINVAL;
  json_int_t sum; /* "$x+1" on a variable near 2^63 overflowed (UBSan, via tests/fuzz) */
  if (__builtin_add_overflow(json_integer_value(val), delta, &sum))
    return snprintf(v->ctx.err, sizeof v->ctx.err, "$%s: the sum overflows", name), -EINVAL;
  *out = must(json_integer(sum));
  return 0;
}

static int eval_u64(vrun *v, json_t *e, const char *what, uint64_t *out) {
  return conf_val_u64(&v->ctx, e, what, out);
}

/* {"$mseq": [epoch, offset]} → the packed MailboxSeq. */
static int expr_mseq(vrun *v, json_t *a, json_t **out) {
  uint64_t e, off;
  if (json_array_size(a) != 2 || eval_u64(v, json_array_get(a, 0), "$mseq epoch", &e) ||
      eval_u64(v, json_array_get(a, 1), "$mseq offset", &off))
    return snprintf(v->ctx.err, sizeof v->ctx.err, "$mseq: expected [epoch, offset]"), -EINVAL;
  *out = conf_json_u64(qim_mailbox_seq_make((qim_shard_epoch)e, off));
  return 0;
}

/* {"$shards": {"tenant": t, "users": [...]}} → ascending distinct shards of the users;
 * {"$shard"|"$lane": {"tenant": t, "user": u}} → one user's shard or lane. */
static int expr_shard(vrun *v, const char *kind, json_t *a, json_t **out) {
  qim_tenant_id t;
  if (!json_is_object(a) || conf_get_u128(&v->ctx, a, "tenant", &t.v)) return -EINVAL;
  if (strcmp(kind, "$shards") != 0) {
    qim_user_id u;
    if (conf_get_u128(&v->ctx, a, "user", &u.v)) return -EINVAL;
    uint32_t x = !strcmp(kind, "$lane") ? qim_lane_of_user(&v->opt.shards, t, u)
                                        : qim_shard_of_user(&v->opt.shards, t, u);
    return *out = conf_json_u64(x), 0;
  }
  json_t *users = json_object_get(a, "users");
  uint32_t n = v->opt.shards.shard_count;
  bool *hit = calloc(n ? n : 1, 1);
  for (size_t i = 0; i < json_array_size(users); i++) {
    qim_user_id u;
    if (conf_val_u128(&v->ctx, json_array_get(users, i), "$shards users[]", &u.v)) return free(hit), -EINVAL;
    hit[qim_shard_of_user(&v->opt.shards, t, u)] = true;
  }
  *out = must(json_array());
  for (uint32_t s = 0; s < n; s++)
    if (hit[s]) json_array_append_new(*out, conf_json_u64(s));
  free(hit);
  return 0;
}

static int subst_object(vrun *v, json_t *t, json_t **out, bool matcher) {
  if (json_object_size(t) == 1) {
    const char *k = json_object_iter_key(json_object_iter(t));
    json_t *arg, *raw = json_object_get(t, k);
    if (!strcmp(k, "$mseq") || !strcmp(k, "$shards") || !strcmp(k, "$shard") || !strcmp(k, "$lane")) {
      if (subst(v, raw, &arg, false)) return -EINVAL;
      int rc = !strcmp(k, "$mseq") ? expr_mseq(v, arg, out) : expr_shard(v, k, arg, out);
      json_decref(arg);
      if (rc && !v->ctx.err[0]) snprintf(v->ctx.err, sizeof v->ctx.err, "%s: malformed argument", k);
      return rc;
    }
  }
  *out = must(json_object());
  const char *k;
  json_t *x;
  json_object_foreach(t, k, x) {
    json_t *y;
    if (subst(v, x, &y, matcher)) return json_decref(*out), -EINVAL;
    json_object_set_new(*out, k, y);
  }
  return 0;
}

/* Deep copy of template `t` with references resolved and expressions evaluated. In
 * expected outputs (`matcher`), the matcher "$any" stays as it is. */
static int subst(vrun *v, json_t *t, json_t **out, bool matcher) {
  if (json_is_string(t)) {
    if (matcher && !strcmp(json_string_value(t), "$any")) return *out = json_incref(t), 0;
    return resolve_ref(v, json_string_value(t), out);
  }
  if (json_is_array(t)) {
    *out = must(json_array());
    for (size_t i = 0; i < json_array_size(t); i++) {
      json_t *y;
      if (subst(v, json_array_get(t, i), &y, matcher)) return json_decref(*out), -EINVAL;
      json_array_append_new(*out, y);
    }
    return 0;
  }
  if (json_is_object(t)) return subst_object(v, t, out, matcher);
  *out = json_deep_copy(t);
  return 0;
}

/* Recursively overlays `over` onto a copy of `base` (objects merge, anything else replaces). */
static json_t *overlay(json_t *base, json_t *over) {
  if (!json_is_object(base) || !json_is_object(over)) return json_deep_copy(over);
  json_t *r = json_deep_copy(base);
  const char *k;
  json_t *x;
  json_object_foreach(over, k, x) json_object_set_new(r, k, overlay(json_object_get(r, k), x));
  return r;
}

/* ---- matching ---------------------------------------------------------------------------------- */

typedef struct mpath {
  char s[256];
  size_t n;
} mpath;

static void mp_push(mpath *p, const char *key, size_t *saved) {
  *saved = p->n;
  int w = snprintf(p->s + p->n, sizeof p->s - p->n, ".%s", key);
  if (w > 0) p->n += (size_t)w < sizeof p->s - p->n ? (size_t)w : sizeof p->s - p->n - 1;
}

static void mp_pop(mpath *p, size_t saved) {
  p->n = saved;
  p->s[saved] = 0;
}

static bool match(json_t *exp, json_t *act, mpath *p);

static bool match_object(json_t *exp, json_t *act, mpath *p) {
  if (json_object_size(exp) == 1) {
    json_t *alt = json_object_get(exp, "$oneof");
    if (json_is_array(alt)) {
      for (size_t i = 0; i < json_array_size(alt); i++) {
        mpath q = *p;
        if (match(json_array_get(alt, i), act, &q)) return true;
      }
      return false;
    }
    json_t *len = json_object_get(exp, "$len");
    if (len) return json_is_array(act) && json_integer_value(len) == (json_int_t)json_array_size(act);
  }
  if (!json_is_object(act)) return false;
  const char *k;
  json_t *x;
  json_object_foreach(exp, k, x) {
    size_t saved;
    mp_push(p, k, &saved);
    json_t *a = json_object_get(act, k);
    if (!a || !match(x, a, p)) return false;
    mp_pop(p, saved);
  }
  return true;
}

/* True when `act` has everything `exp` states (objects: a subset; arrays: same length,
 * element-wise; scalars: equal). On false, p names the first differing place. */
static bool match(json_t *exp, json_t *act, mpath *p) {
  if (json_is_string(exp) && !strcmp(json_string_value(exp), "$any")) return act != NULL;
  if (json_is_object(exp)) return match_object(exp, act, p);
  if (json_is_array(exp)) {
    if (!json_is_array(act) || json_array_size(exp) != json_array_size(act)) return false;
    for (size_t i = 0; i < json_array_size(exp); i++) {
      char idx[24];
      size_t saved;
      snprintf(idx, sizeof idx, "%zu", i);
      mp_push(p, idx, &saved);
      if (!match(json_array_get(exp, i), json_array_get(act, i), p)) return false;
      mp_pop(p, saved);
    }
    return true;
  }
  return json_equal(exp, act);
}

/* "a.b.0.c" into `root`; NULL when absent. */
static json_t *get_path(json_t *root, const char *path) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *cur = root;
  for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save)) {
    char *end;
    unsigned long i = strtoul(tok, &end, 10);
    cur = json_is_array(cur) && !*end ? json_array_get(cur, i) : json_object_get(cur, tok);
  }
  return cur;
}

/* ---- steps ------------------------------------------------------------------------------------------ */

static char *dump(json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  if (s && strlen(s) > 1500) strcpy(s + 1490, " ...");
  return s;
}

/* Is the actual status one of the expected error names ("OK" for success)? */
static bool status_expected(json_t *err, int status) {
  const char *name = qim_err_name(status);
  if (!err) return status == 0;
  if (json_is_string(err)) return !strcmp(json_string_value(err), name);
  for (size_t i = 0; i < json_array_size(err); i++)
    if (json_is_string(json_array_get(err, i)) &&
        !strcmp(json_string_value(json_array_get(err, i)), name))
      return true;
  return false;
}

static int check_outputs(vrun *v, json_t *step, int status, json_t *out) {
  json_t *err = json_object_get(step, "error"), *exp_t = json_object_get(step, "out"), *exp;
  if (!status_expected(err, status)) {
    char *e = err ? dump(err) : strdup("\"OK\"");
    char *o = dump(out);
    int rc = fail(v, v->mismatch, "expected %s, got %s (outputs %s)", e,
                  qim_err_name(status), o);
    free(e), free(o);
    return rc;
  }
  if (!exp_t || status != 0) return 0;
  if (subst(v, exp_t, &exp, true))
    return fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "out: %s", v->ctx.err);
  mpath p = {{0}, 0};
  int rc = 0;
  if (!match(exp, out, &p)) {
    json_t *want = get_path(exp, p.s[0] ? p.s + 1 : p.s), *got = get_path(out, p.s[0] ? p.s + 1 : p.s);
    char *w = dump(want ? want : exp), *g = got ? dump(got) : strdup("(absent)"), *all = dump(out);
    rc = fail(v, v->mismatch, "at %s: expected %s, got %s\n  outputs: %s",
              p.s[0] ? p.s : "(top)", w, g, all);
    free(w), free(g), free(all);
  }
  json_decref(exp);
  return rc;
}

static int save_outputs(vrun *v, json_t *step, json_t *out) {
  json_t *save = json_object_get(step, "save");
  const char *name;
  json_t *path;
  json_object_foreach(save, name, path) {
    json_t *val = json_is_string(path) ? get_path(out, json_string_value(path)) : NULL;
    if (!val) {
      char *o = dump(out);
      int rc = fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "save %s: no output at \"%s\" in %s",
                    name, json_is_string(path) ? json_string_value(path) : "?", o);
      free(o);
      return rc;
    }
    json_object_set_new(v->vars, name, json_deep_copy(val));
  }
  return 0;
}

static int reopen(vrun *v) {
  char why[512];
  if (conf_dep_reopen(v->dep, why, sizeof why))
    return fail(v, QIM_E_CONFORMANCE_SEMANTIC_MISMATCH, "the store did not reopen: %s", why);
  v->ctx.store = conf_dep_store(v->dep);
  return 0;
}

static int run_step(vrun *v, json_t *step) {
  v->op = json_string_value(json_object_get(step, "op"));
  v->note = json_string_value(json_object_get(step, "note"));
  if (!json_is_object(step) || !v->op)
    return fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "a step needs an \"op\" string");
  if (!strcmp(v->op, "store.reopen")) return reopen(v);
  json_t *given = json_object_get(step, "in"), *empty = must(json_object());
  json_t *tmpl = overlay(json_object_get(v->defaults, v->op), given ? given : empty);
  json_decref(empty);
  json_t *in, *out;
  int status, rc = subst(v, tmpl, &in, false);
  json_decref(tmpl);
  if (rc) return fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "in: %s", v->ctx.err);
  v->mismatch = QIM_E_CONFORMANCE_SEMANTIC_MISMATCH;
  if (!strcmp(v->op, "vars.echo") || !strcmp(v->op, "vars.check")) {
    /* The input, evaluated, is the output. vars.echo checks the vector's own assumptions
     * (which lane a user hashes to): a mismatch is the vector's fault. vars.check compares
     * values saved from earlier outputs: a mismatch is the backend's. */
    if (!strcmp(v->op, "vars.echo")) v->mismatch = QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED;
    status = 0;
    out = json_incref(in);
  } else {
    rc = conf_op_exec(&v->ctx, v->op, in, &status, &out);
  }
  if (rc) rc = fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "%s", v->ctx.err);
  if (!rc) rc = check_outputs(v, step, status, out);
  if (!rc) rc = save_outputs(v, step, out);
  if (v->rep && v->rep->verbose) {
    char *o = dump(out);
    fprintf(out_of(v->rep), "  step %zu %s -> %s %s\n", v->step, v->op, qim_err_name(status), o);
    free(o);
  }
  json_decref(in);
  json_decref(out);
  return rc;
}

/* ---- vectors ---------------------------------------------------------------------------------------- */

static int load_options(vrun *v) {
  json_t *o = json_object_get(v->doc, "options");
  uint64_t shards = 4, lanes = 2; /* defaults: enough shards and lanes to exercise the hash */
  if (json_object_get(o, "shard_count") && conf_get_u64(&v->ctx, o, "shard_count", &shards)) return -EINVAL;
  if (json_object_get(o, "lanes_per_shard") && conf_get_u64(&v->ctx, o, "lanes_per_shard", &lanes))
    return -EINVAL;
  if (shards < 1 || shards > 4096 || lanes < 1 || lanes > 255)
    return snprintf(v->ctx.err, sizeof v->ctx.err, "options: shard_count 1..4096, lanes 1..255"), -EINVAL;
  v->opt.shards = (qim_shard_config){(uint32_t)shards, (uint32_t)lanes};
  v->ctx.shards = v->opt.shards;
  return 0;
}

static int run_loaded(vrun *v) {
  json_t *steps = json_object_get(v->doc, "steps"), *vars = json_object_get(v->doc, "vars");
  json_t *defs = json_object_get(v->doc, "defaults");
  if (!json_is_array(steps) || json_array_size(steps) == 0 || (vars && !json_is_object(vars)) ||
      (defs && !json_is_object(defs)))
    return fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED,
                "a vector is an object with a non-empty \"steps\" array (\"vars\", \"defaults\": objects)");
  if (load_options(v)) return fail(v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "%s", v->ctx.err);
  v->vars = vars ? json_deep_copy(vars) : must(json_object());
  v->defaults = defs;
  char why[512];
  if (conf_dep_open(v->url, &v->opt, &v->dep, why, sizeof why)) {
    json_decref(v->vars);
    return fail(v, QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE, "%s", why);
  }
  v->ctx.store = conf_dep_store(v->dep);
  int rc = 0;
  for (size_t i = 0; !rc && i < json_array_size(steps); i++) {
    v->step = i + 1;
    rc = run_step(v, json_array_get(steps, i));
  }
  v->step = 0;
  conf_seen_reset(&v->ctx);
  conf_dep_close(v->dep);
  json_decref(v->vars);
  return rc;
}

int conf_run_vector_file(const char *url, const char *path, conf_report *rep) {
  vrun v = {.path = path, .url = url, .rep = rep};
  json_error_t jerr;
  if (rep) rep->vectors++;
  v.doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  int rc = v.doc ? run_loaded(&v)
                 : fail(&v, QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED, "line %d: %s", jerr.line, jerr.text);
  json_decref(v.doc);
  conf_seen_reset(&v.ctx);
  if (!rc && rep) rep->passed++;
  if (!rc && rep && rep->verbose) fprintf(out_of(rep), "ok   %s\n", path);
  return rc;
}

/* ---- directories and coverage ------------------------------------------------------------------------ */

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Collects the *.json files of `dir` (sorted); a single file stands for itself. */
static char **list_vectors(const char *dir, size_t *n) {
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    char **one = calloc(2, sizeof *one);
    one[0] = strdup(dir);
    *n = 1;
    return one;
  }
  char **names = NULL;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
    names = realloc(names, (*n + 1) * sizeof *names);
    if (!names || asprintf(&names[*n], "%s/%s", dir, e->d_name) < 0) abort();
    (*n)++;
  }
  closedir(d);
  if (*n) qsort(names, *n, sizeof *names, by_name);
  return names;
}

/* Every store call must appear in some vector of the set: the suite covers the interface. */
static int check_coverage(char **files, size_t n, conf_report *rep) {
  int rc = 0;
  for (size_t i = 0; i < conf_op_count(); i++) {
    char needle[96];
    snprintf(needle, sizeof needle, "\"%s\"", conf_op_name(i));
    bool used = false;
    for (size_t f = 0; f < n && !used; f++) {
      FILE *fp = fopen(files[f], "r");
      char *text = NULL;
      size_t cap = 0;
      if (fp && getdelim(&text, &cap, 0, fp) > 0) used = strstr(text, needle) != NULL;
      free(text);
      if (fp) fclose(fp);
    }
    if (!used) {
      fprintf(out_of(rep), "FAIL coverage: no vector calls %s\n  %s\n", conf_op_name(i),
              qim_err_name(QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED));
      if (rep) rep->malformed++;
      rc = qim_err_raise(QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED);
    }
  }
  return rc;
}

int conf_run_path(const char *url, const char *dir, conf_report *rep) {
  size_t n;
  char **files = list_vectors(dir, &n);
  int first = 0;
  if (n == 0) {
    fprintf(out_of(rep), "FAIL %s: no vectors found\n", dir);
    if (rep) rep->malformed++;
    first = qim_err_raise(QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED);
  } else if (n > 1) {
    first = check_coverage(files, n, rep);
  }
  for (size_t i = 0; i < n; i++) {
    int rc = conf_run_vector_file(url, files[i], rep);
    if (rc && !first) first = rc;
    free(files[i]);
  }
  free(files);
  return first;
}
