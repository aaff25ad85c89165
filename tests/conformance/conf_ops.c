/*
 * conf_ops.c — one handler per store call: decode the step's JSON input into the call's
 * request, run it through QIM_STORE_SYNC, encode its outputs as JSON, free them.
 *
 * Op names are "<domain>.<call>" exactly as in the vtable (store.h). Input keys are the
 * request's member names; output keys are the `out_*` member names without the prefix,
 * and a struct output named `out` is flattened into the result (README.md "Operations").
 * Outputs are freed whatever the status, since the free functions accept zeroed values.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "qim/mem.h"
#include "qim/record.h"

#define TRY(x)           \
  do {                   \
    int rc_ = (x);       \
    if (rc_) return rc_; \
  } while (0)
#define SYNC(c, call, r) QIM_STORE_SYNC((c)->store, call, r)

typedef int (*op_fn)(conf_ctx *c, json_t *in, int *status, json_t *out);

static json_t *must(json_t *v) {
  if (!v) abort();
  return v;
}

/* Moves every member of `part` into `out`. */
static void merge(json_t *out, json_t *part) {
  json_object_update(out, part);
  json_decref(part);
}

static void put(json_t *out, const char *key, json_t *v) { json_object_set_new(out, key, must(v)); }

/* A member given with a non-null value (null stands for "absent" in vectors). */
static bool present(conf_ctx *c, json_t *in, const char *key) {
  json_t *v = conf_get(c, in, key);
  return v && !json_is_null(v);
}

static int bad(conf_ctx *c, const char *msg) {
  snprintf(c->err, sizeof c->err, "%s", msg);
  return -EINVAL;
}

/* ---- accounts --------------------------------------------------------------------------- */

static int op_user_create(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_user_create_req r = {0};
  json_t *u = conf_get(c, in, "user");
  if (!json_is_object(u)) return bad(c, "user: expected an object");
  int rc = conf_get_u128(c, u, "tenant_id", &r.user.tenant_id.v);
  if (!rc) rc = conf_get_u128(c, u, "user_id", &r.user.user_id.v);
  if (!rc) rc = conf_get_json_text(c, u, "public_json", &r.user.public_json);
  if (!rc) rc = conf_get_json_text(c, u, "private_json", &r.user.private_json);
  if (!rc) rc = conf_get_u64(c, u, "created_at", &r.user.created_at);
  if (!rc) rc = conf_get_u64(c, u, "updated_at", &r.user.updated_at);
  if (!rc) rc = conf_get_u64(c, u, "token_epoch", &r.user.token_epoch);
  if (!rc) *st = SYNC(c, accounts.user_create, &r);
  free(r.user.public_json);
  free(r.user.private_json);
  return rc;
}

static int op_user_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_user_get_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "user_id", &r.user_id.v));
  *st = SYNC(c, accounts.user_get, &r);
  if (*st == 0) merge(out, conf_enc_user(&r.out));
  qim_store_user_free(&r.out);
  return 0;
}

static int op_user_update(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_user_update_req r = {0};
  char *pub = NULL, *priv = NULL;
  int rc = conf_get_u128(c, in, "tenant_id", &r.tenant_id.v);
  if (!rc) rc = conf_get_u128(c, in, "user_id", &r.user_id.v);
  if (!rc) rc = conf_get_json_text(c, in, "public_json", &pub);
  if (!rc) rc = conf_get_json_text(c, in, "private_json", &priv);
  if (!rc) rc = conf_get_bool(c, in, "bump_token_epoch", &r.bump_token_epoch);
  if (!rc) rc = conf_get_u64(c, in, "now", &r.now);
  if (!rc) {
    r.public_json = pub;
    r.private_json = priv;
    *st = SYNC(c, accounts.user_update, &r);
    if (*st == 0) put(out, "token_epoch", conf_json_u64(r.out_token_epoch));
  }
  free(pub);
  free(priv);
  return rc;
}

static int op_cred_create(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_cred_create_req r = {0};
  json_t *cr = conf_get(c, in, "cred");
  const char *login, *hash;
  if (!json_is_object(cr)) return bad(c, "cred: expected an object");
  TRY(conf_get_u128(c, cr, "tenant_id", &r.cred.tenant_id.v));
  TRY(conf_get_str(c, cr, "login", &login));
  TRY(conf_get_u128(c, cr, "user_id", &r.cred.user_id.v));
  TRY(conf_get_str(c, cr, "secret_hash", &hash));
  r.cred.login = (char *)login;  /* borrowed input; the store never writes it */
  r.cred.secret_hash = (char *)hash;
  *st = SYNC(c, accounts.cred_create, &r);
  return 0;
}

static int op_cred_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_cred_get_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_str(c, in, "login", &r.login));
  *st = SYNC(c, accounts.cred_get, &r);
  if (*st == 0)
    merge(out, must(json_pack("{s:o,s:o,s:o,s:o}", "tenant_id", conf_json_u128(r.out.tenant_id.v),
                              "login", conf_json_str(r.out.login), "user_id",
                              conf_json_u128(r.out.user_id.v), "secret_hash",
                              conf_json_str(r.out.secret_hash))));
  qim_store_credential_free(&r.out);
  return 0;
}

static int op_cred_update(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_cred_update_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "user_id", &r.user_id.v));
  TRY(conf_get_str(c, in, "secret_hash", &r.secret_hash));
  *st = SYNC(c, accounts.cred_update, &r);
  return 0;
}

static int op_apikey_put(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_apikey_put_req r = {0};
  TRY(conf_get_str(c, in, "api_key", &r.api_key));
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  *st = SYNC(c, accounts.apikey_put, &r);
  return 0;
}

static int op_apikey_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_apikey_get_req r = {0};
  TRY(conf_get_str(c, in, "api_key", &r.api_key));
  *st = SYNC(c, accounts.apikey_get, &r);
  if (*st == 0) put(out, "tenant_id", conf_json_u128(r.out_tenant_id.v));
  return 0;
}

/* ---- conversations and members ------------------------------------------------------------ */

static int dec_conv(conf_ctx *c, json_t *v, qim_store_conversation *o, char **pub) {
  int kind;
  json_t *du = conf_get(c, v, "direct_users");
  TRY(conf_get_u128(c, v, "tenant_id", &o->tenant_id.v));
  TRY(conf_get_u128(c, v, "conversation_id", &o->conversation_id.v));
  TRY(conf_get_enum(c, v, "kind", conf_names_conv_kind, &kind));
  o->kind = (qim_conversation_kind)kind;
  TRY(conf_get_u128(c, v, "owner_id", &o->owner_id.v));
  if (du && json_array_size(du) != 2) return bad(c, "direct_users: expected two ids");
  for (size_t i = 0; du && i < 2; i++)
    TRY(conf_val_u128(c, json_array_get(du, i), "direct_users[]", &o->direct_users[i].v));
  TRY(conf_get_u64(c, v, "latest_seq", &o->latest_seq));
  TRY(conf_get_u64(c, v, "delid", &o->delid));
  TRY(conf_get_id16(c, v, "last_activity_id", o->last_activity_id.b));
  TRY(conf_get_u64(c, v, "created_at", &o->created_at));
  TRY(conf_get_u64(c, v, "updated_at", &o->updated_at));
  TRY(conf_get_u64(c, v, "touched_at", &o->touched_at));
  TRY(conf_get_mode(c, v, "default_mode_auth", &o->default_mode_auth));
  TRY(conf_get_mode(c, v, "default_mode_anon", &o->default_mode_anon));
  TRY(conf_get_u64(c, v, "membership_version", &o->membership_version));
  TRY(conf_get_json_text(c, v, "public_json", pub));
  o->public_json = *pub;
  return 0;
}

static int op_conv_create(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_conv_create_req r = {0};
  char *pub = NULL;
  json_t *v = conf_get(c, in, "conv");
  if (!json_is_object(v)) return bad(c, "conv: expected an object");
  int rc = dec_conv(c, v, &r.conv, &pub);
  if (!rc) rc = conf_get_u64(c, in, "now", &r.now);
  if (!rc) *st = SYNC(c, conversations.create, &r);
  free(pub);
  return rc;
}

static int op_conv_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_conv_get_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  *st = SYNC(c, conversations.get, &r);
  if (*st == 0) merge(out, conf_enc_conversation(&r.out));
  qim_store_conversation_free(&r.out);
  return 0;
}

static int op_conv_update(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_conv_update_req r = {0};
  char *pub = NULL;
  int rc = conf_get_u128(c, in, "tenant_id", &r.tenant_id.v);
  if (!rc) rc = conf_get_u128(c, in, "conversation_id", &r.conversation_id.v);
  if (!rc) rc = conf_get_json_text(c, in, "public_json", &pub);
  if (!rc) rc = conf_get_bool(c, in, "mark_deleted", &r.mark_deleted);
  if (!rc) rc = conf_get_u64(c, in, "now", &r.now);
  if (!rc) {
    r.public_json = pub;
    *st = SYNC(c, conversations.update, &r);
  }
  free(pub);
  return rc;
}

static int dec_change(conf_ctx *c, json_t *v, qim_store_member_change *ch) {
  int op, role;
  TRY(conf_get_enum(c, v, "op", conf_names_member_op, &op));
  TRY(conf_get_u128(c, v, "user_id", &ch->user_id.v));
  TRY(conf_get_enum(c, v, "role", conf_names_role, &role));
  TRY(conf_get_mode(c, v, "mode_want", &ch->mode_want));
  TRY(conf_get_mode(c, v, "mode_given", &ch->mode_given));
  ch->op = (qim_store_member_op)op;
  ch->role = (qim_group_role)role;
  return 0;
}

static int op_members_change(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_members_change_req r = {0};
  json_t *changes = conf_get(c, in, "changes");
  uint64_t limit;
  if (!json_is_array(changes)) return bad(c, "changes: expected an array");
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u64(c, in, "member_limit", &limit));
  TRY(conf_get_u64(c, in, "now", &r.now));
  size_t n = json_array_size(changes);
  qim_store_member_change *ch = qim_calloc(n ? n : 1, sizeof *ch);
  int rc = 0;
  for (size_t i = 0; !rc && i < n; i++) rc = dec_change(c, json_array_get(changes, i), &ch[i]);
  if (!rc) {
    r.changes = ch;
    r.change_count = n;
    r.member_limit = (uint32_t)limit;
    *st = SYNC(c, conversations.members_change, &r);
    if (*st == 0) {
      put(out, "version", conf_json_u64(r.out_version));
      put(out, "position", conf_json_u64(r.out_position));
    }
  }
  qim_free(ch);
  return rc;
}

static int op_member_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_member_get_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u128(c, in, "user_id", &r.user_id.v));
  *st = SYNC(c, conversations.member_get, &r);
  if (*st == 0) merge(out, conf_enc_member(&r.out));
  qim_store_member_free(&r.out);
  return 0;
}

static int op_member_private(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_member_private_req r = {0};
  char *priv = NULL;
  int rc = conf_get_u128(c, in, "tenant_id", &r.tenant_id.v);
  if (!rc) rc = conf_get_u128(c, in, "conversation_id", &r.conversation_id.v);
  if (!rc) rc = conf_get_u128(c, in, "user_id", &r.user_id.v);
  if (!rc) rc = conf_get_json_text(c, in, "private_json", &priv);
  if (!rc) rc = conf_get_u64(c, in, "now", &r.now);
  if (!rc) {
    r.private_json = priv;
    *st = SYNC(c, conversations.member_private, &r);
  }
  free(priv);
  return rc;
}

static int op_members_at(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_members_at_req r = {0};
  uint64_t limit;
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u64(c, in, "version", &r.version));
  if (present(c, in, "after_user")) {
    r.has_after = true;
    TRY(conf_get_u128(c, in, "after_user", &r.after_user.v));
  }
  TRY(conf_get_u64(c, in, "limit", &limit));
  r.limit = (uint32_t)limit;
  *st = SYNC(c, conversations.members_at, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++)
      json_array_append_new(a, conf_enc_group_member(&r.out_members[i]));
    put(out, "members", a);
    put(out, "has_more", json_boolean(r.out_has_more));
  }
  qim_free(r.out_members);
  return 0;
}

static int op_member_receipt(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_member_receipt_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u128(c, in, "user_id", &r.user_id.v));
  TRY(conf_get_u64(c, in, "read_seq", &r.read_seq));
  TRY(conf_get_u64(c, in, "recv_seq", &r.recv_seq));
  *st = SYNC(c, conversations.member_receipt, &r);
  if (*st == 0) {
    put(out, "read", conf_json_u64(r.out_read));
    put(out, "recv", conf_json_u64(r.out_recv));
  }
  return 0;
}

static int op_subscriptions(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_subscriptions_req r = {0};
  uint64_t limit;
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "user_id", &r.user_id.v));
  TRY(conf_get_u64(c, in, "limit", &limit));
  TRY(conf_get_bytes(c, in, "cursor", &r.cursor.bytes));
  r.limit = (uint32_t)limit;
  *st = SYNC(c, conversations.subscriptions, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++)
      json_array_append_new(a, must(json_pack("{s:o,s:o}", "member", conf_enc_member(&r.out_members[i]),
                                              "conv", conf_enc_conversation(&r.out_convs[i]))));
    put(out, "items", a);
    put(out, "next", conf_json_bytes(&r.out_next.bytes));
  }
  for (size_t i = 0; i < r.out_count; i++) {
    qim_store_member_free(&r.out_members[i]);
    qim_store_conversation_free(&r.out_convs[i]);
  }
  qim_free(r.out_members);
  qim_free(r.out_convs);
  qim_bytes_free(&r.out_next.bytes);
  qim_bytes_free(&r.cursor.bytes);
  return 0;
}

static int op_members_prune(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_members_prune_req r = {0};
  uint64_t keep, limit;
  TRY(conf_get_u64(c, in, "keep_versions", &keep));
  TRY(conf_get_u64(c, in, "limit", &limit));
  if (present(c, in, "after_conversation")) {
    r.has_after = true;
    TRY(conf_get_u128(c, in, "after_tenant", &r.after_tenant.v));
    TRY(conf_get_u128(c, in, "after_conversation", &r.after_conversation.v));
  }
  r.keep_versions = (uint32_t)keep;
  r.limit = (uint32_t)limit;
  *st = SYNC(c, conversations.members_prune, &r);
  if (*st == 0) {
    put(out, "next_tenant", conf_json_u128(r.out_next_tenant.v));
    put(out, "next_conversation", conf_json_u128(r.out_next_conversation.v));
    put(out, "more", json_boolean(r.out_more));
    put(out, "deferred", json_boolean(r.out_deferred));
    put(out, "raised", conf_json_u64(r.out_raised));
    put(out, "held", conf_json_u64(r.out_held));
    put(out, "rows", conf_json_u64(r.out_rows));
  }
  return 0;
}

/* ---- intents ----------------------------------------------------------------------------------- */

static json_t *enc_reserve(const qim_reserve_result *res) {
  json_t *o = must(json_pack("{s:o}", "kind", conf_json_enum(conf_names_reserve_kind, 3, res->kind)));
  if (res->kind == QIM_RESERVE_RESULT_COMMITTED)
    put(o, "committed", conf_enc_committed(&res->committed));
  else
    put(o, "intent", conf_enc_intent(&res->intent));
  return o;
}

static int op_reserve(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_intent_reserve_req r = {0};
  qim_commit_intent proposal;
  TRY(conf_dec_proposal(c, conf_get(c, in, "proposal"), &proposal));
  r.proposal = &proposal;
  int rc = 0;
  if (present(c, in, "commit")) rc = conf_get_bool(c, in, "commit", &r.commit);
  if (!rc && present(c, in, "authorize")) rc = conf_get_bool(c, in, "authorize", &r.authorize);
  if (!rc && present(c, in, "sender_read")) rc = conf_get_bool(c, in, "sender_read", &r.sender_read);
  if (!rc && present(c, in, "now")) rc = conf_get_u64(c, in, "now", &r.now);
  if (rc) {
    qim_commit_intent_free(&proposal);
    return rc;
  }
  *st = SYNC(c, intents.reserve, &r);
  if (*st == 0) {
    merge(out, enc_reserve(&r.out));
    put(out, "order", conf_json_u64(r.out_order));
    put(out, "committed_here", json_boolean(r.out_committed_here));
    if (r.out_committed_here) put(out, "position", conf_json_position(r.out_position));
  }
  qim_commit_intent_free(&r.out.intent);
  qim_commit_intent_free(&proposal);
  return 0;
}

static int op_advance(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_intent_advance_req r = {0};
  int to;
  TRY(conf_dec_key(c, conf_get(c, in, "key"), &r.key));
  TRY(conf_get_enum(c, in, "to", conf_names_commit_state, &to));
  TRY(conf_get_u64(c, in, "now", &r.now));
  r.to = (qim_commit_state)to;
  *st = SYNC(c, intents.advance, &r);
  if (*st == 0 && r.to >= QIM_COMMIT_STATE_OUTBOXED) put(out, "position", conf_json_position(r.out_position));
  return 0;
}

static int op_load(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_intent_load_req r = {0};
  TRY(conf_dec_key(c, conf_get(c, in, "key"), &r.key));
  *st = SYNC(c, intents.load, &r);
  if (*st == 0) {
    put(out, "kind", conf_json_enum(conf_names_loaded_kind, 2, r.out.kind));
    if (r.out.kind == QIM_LOADED_COMMIT_IN_FLIGHT)
      put(out, "intent", conf_enc_intent(&r.out.intent));
    else
      put(out, "committed", conf_enc_committed(&r.out.committed));
  }
  qim_commit_intent_free(&r.out.intent);
  return 0;
}

static int op_list_in_flight(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_intent_list_req r = {0};
  uint64_t limit;
  if (present(c, in, "conversation_id")) {
    r.has_conversation = true;
    TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
    TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  }
  TRY(conf_get_u64(c, in, "limit", &limit));
  r.limit = (uint32_t)limit;
  *st = SYNC(c, intents.list_in_flight, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++) json_array_append_new(a, conf_enc_intent(&r.out_intents[i]));
    put(out, "intents", a);
  }
  for (size_t i = 0; i < r.out_count; i++) qim_commit_intent_free(&r.out_intents[i]);
  qim_free(r.out_intents);
  return 0;
}

static int op_forget(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_intent_forget_req r = {0};
  TRY(conf_get_u64(c, in, "before", &r.before));
  *st = SYNC(c, intents.forget, &r);
  if (*st == 0) put(out, "forgotten", conf_json_u64(r.out_forgotten));
  return 0;
}

/* ---- history ------------------------------------------------------------------------------------ */

static int op_record_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_record_get_req r = {0};
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u64(c, in, "seq", &r.seq));
  *st = SYNC(c, history.get, &r);
  if (*st == 0) merge(out, conf_enc_record(&r.out));
  qim_message_record_free(&r.out);
  return 0;
}

/* [[low, hi], ...] → ranges (qim_malloc'd; NULL when empty). */
static int dec_ranges(conf_ctx *c, json_t *in, qim_store_seq_range **out, size_t *n) {
  json_t *a = conf_get(c, in, "ranges");
  *out = NULL;
  *n = json_array_size(a);
  if (a && !json_is_array(a)) return bad(c, "ranges: expected [[low, hi], ...]");
  if (*n) *out = qim_calloc(*n, sizeof **out);
  for (size_t i = 0; i < *n; i++) {
    json_t *p = json_array_get(a, i);
    if (json_array_size(p) != 2 ||
        conf_val_u64(c, json_array_get(p, 0), "ranges[][0]", &(*out)[i].low) ||
        conf_val_u64(c, json_array_get(p, 1), "ranges[][1]", &(*out)[i].hi)) {
      qim_free(*out);
      *out = NULL;
      return bad(c, "ranges: expected [[low, hi], ...]");
    }
  }
  return 0;
}

static int dec_query(conf_ctx *c, json_t *in, qim_store_record_query_req *r) {
  int dir;
  uint64_t items, bytes;
  TRY(conf_get_u128(c, in, "tenant_id", &r->tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r->conversation_id.v));
  TRY(conf_get_u128(c, in, "viewer", &r->viewer.v));
  TRY(conf_get_u64(c, in, "window_low", &r->window_low));
  TRY(conf_get_u64(c, in, "window_high", &r->window_high));
  TRY(conf_get_enum(c, in, "direction", conf_names_direction, &dir));
  TRY(conf_get_bool(c, in, "skip_deleted", &r->skip_deleted));
  TRY(conf_get_u64(c, in, "max_items", &items));
  TRY(conf_get_u64(c, in, "max_bytes", &bytes));
  r->direction = (qim_history_direction)dir;
  r->max_items = (uint32_t)items;
  r->max_bytes = (uint32_t)bytes;
  return 0;
}

static int op_record_query(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_record_query_req r = {0};
  qim_store_seq_range *ranges;
  TRY(dec_query(c, in, &r));
  TRY(dec_ranges(c, in, &ranges, &r.range_count));
  r.ranges = ranges;
  *st = SYNC(c, history.query, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++) json_array_append_new(a, conf_enc_record(&r.out_records[i]));
    put(out, "records", a);
    put(out, "has_more", json_boolean(r.out_has_more));
  }
  for (size_t i = 0; i < r.out_count; i++) qim_message_record_free(&r.out_records[i]);
  qim_free(r.out_records);
  qim_free(ranges);
  return 0;
}

static int op_set_state(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_record_set_state_req r = {0};
  int state;
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u64(c, in, "seq", &r.seq));
  TRY(conf_get_enum(c, in, "state", conf_names_message_state, &state));
  TRY(conf_get_bool(c, in, "wipe_body", &r.wipe_body));
  TRY(conf_get_u64(c, in, "now", &r.now));
  r.state = (qim_message_state)state;
  *st = SYNC(c, history.set_state, &r);
  return 0;
}

static int op_dellog_add(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_dellog_add_req r = {0};
  qim_store_seq_range *ranges;
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  json_t *fu = conf_get(c, in, "for_user");
  if (fu && !json_is_null(fu)) {
    r.has_for_user = true;
    TRY(conf_val_u128(c, fu, "for_user", &r.for_user.v));
  }
  TRY(dec_ranges(c, in, &ranges, &r.range_count));
  r.ranges = ranges;
  *st = SYNC(c, history.dellog_add, &r);
  if (*st == 0) put(out, "delid", conf_json_u64(r.out_delid));
  qim_free(ranges);
  return 0;
}

static int op_dellog_query(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_dellog_query_req r = {0};
  uint64_t limit;
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  TRY(conf_get_u128(c, in, "conversation_id", &r.conversation_id.v));
  TRY(conf_get_u128(c, in, "viewer", &r.viewer.v));
  TRY(conf_get_u64(c, in, "since_delid", &r.since_delid));
  TRY(conf_get_u64(c, in, "before_delid", &r.before_delid));
  TRY(conf_get_u64(c, in, "limit", &limit));
  r.limit = (uint32_t)limit;
  *st = SYNC(c, history.dellog_query, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++)
      json_array_append_new(a, must(json_pack("[o,o]", conf_json_u64(r.out_ranges[i].low),
                                              conf_json_u64(r.out_ranges[i].hi))));
    put(out, "ranges", a);
    json_t *d = must(json_array());
    for (size_t i = 0; i < r.out_count; i++) json_array_append_new(d, conf_json_u64(r.out_delids[i]));
    put(out, "delids", d);
    put(out, "max_delid", conf_json_u64(r.out_max_delid));
  }
  qim_free(r.out_ranges);
  qim_free(r.out_delids);
  return 0;
}

static int op_expire(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_record_expire_req r = {0};
  int cls;
  TRY(conf_get_enum(c, in, "retention_class", conf_names_retention, &cls));
  TRY(conf_get_u128(c, in, "tenant_id", &r.tenant_id.v));
  uint64_t limit;
  TRY(conf_get_u64(c, in, "after", &r.after));
  TRY(conf_get_u64(c, in, "before", &r.before));
  TRY(conf_get_u64(c, in, "now", &r.now));
  TRY(conf_get_u64(c, in, "limit", &limit));
  r.limit = (uint32_t)limit;
  r.retention_class = (qim_retention_class)cls;
  *st = SYNC(c, history.expire, &r);
  if (*st == 0) {
    put(out, "count", conf_json_u64(r.out_count));
    put(out, "more", json_boolean(r.out_more));
    json_t *f = must(json_array());
    for (size_t i = 0; i < r.out_floor_count; i++)
      json_array_append_new(f, must(json_pack("{s:o,s:o,s:o}", "conversation_id",
                                              conf_json_u128(r.out_floors[i].conversation_id.v),
                                              "previous", conf_json_u64(r.out_floors[i].previous),
                                              "floor", conf_json_u64(r.out_floors[i].floor))));
    put(out, "floors", f);
  }
  qim_free(r.out_floors);
  return 0;
}

/* ---- logs ------------------------------------------------------------------------------------------- */

static void free_appends(qim_store_log_append *a, size_t n) {
  for (size_t i = 0; i < n; i++) qim_bytes_free(&a[i].payload);
  qim_free(a);
}

static int dec_appends(conf_ctx *c, json_t *arr, qim_store_log_append **out, size_t *n) {
  if (!json_is_array(arr)) return bad(c, "appends: expected an array");
  *n = json_array_size(arr);
  *out = qim_calloc(*n ? *n : 1, sizeof **out);
  for (size_t i = 0; i < *n; i++) {
    json_t *e = json_array_get(arr, i);
    int rc = conf_get_stream(c, e, "stream", &(*out)[i].stream);
    if (!rc) rc = conf_get_id16(c, e, "key", (*out)[i].key);
    if (!rc) rc = conf_get_bytes(c, e, "payload", &(*out)[i].payload);
    if (rc) {
      free_appends(*out, *n);
      return rc;
    }
  }
  return 0;
}

static int op_log_append(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_log_append_req r = {0};
  qim_store_log_append *a;
  TRY(dec_appends(c, conf_get(c, in, "appends"), &a, &r.append_count));
  json_t *cons = conf_get(c, in, "consumer");
  int rc = 0;
  if (present(c, in, "consumer")) {
    r.has_consumer = true;
    rc = conf_get_str(c, cons, "name", &r.consumer);
    if (!rc) rc = conf_get_stream(c, cons, "stream", &r.consumer_stream);
    if (!rc) rc = conf_get_u64(c, cons, "offset", &r.consumer_offset);
  }
  if (!rc) {
    r.appends = a;
    *st = SYNC(c, logs.append, &r);
  }
  if (!rc && *st == 0) {
    json_t *res = must(json_array());
    for (size_t i = 0; i < r.append_count; i++)
      json_array_append_new(res, must(json_pack("{s:o,s:o,s:b}", "position",
                                                conf_json_position(a[i].out_position), "epoch",
                                                conf_json_u64(a[i].out_epoch), "existed",
                                                a[i].out_existed)));
    put(out, "appends", res);
  }
  free_appends(a, r.append_count);
  return rc;
}

static json_t *enc_log_record(const qim_store_log_record *r) {
  return must(json_pack("{s:o,s:o,s:b,s:o,s:o}", "offset", conf_json_u64(r->offset), "epoch",
                        conf_json_u64(r->epoch), "fence", r->fence, "key", conf_json_id16(r->key),
                        "payload", conf_json_bytes(&r->payload)));
}

static int op_log_read(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_log_read_req r = {0};
  uint64_t max;
  TRY(conf_get_stream(c, in, "stream", &r.stream));
  TRY(conf_get_u64(c, in, "from", &r.from));
  TRY(conf_get_u64(c, in, "max", &max));
  r.max = (uint32_t)max;
  *st = SYNC(c, logs.read, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++) json_array_append_new(a, enc_log_record(&r.out_records[i]));
    put(out, "records", a);
    put(out, "end", conf_json_u64(r.out_end));
    put(out, "trim", conf_json_u64(r.out_trim));
  }
  qim_store_log_read_free(&r);
  return 0;
}

static int op_consumer_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_log_consumer_get_req r = {0};
  TRY(conf_get_str(c, in, "consumer", &r.consumer));
  TRY(conf_get_stream(c, in, "stream", &r.stream));
  *st = SYNC(c, logs.consumer_get, &r);
  if (*st == 0) put(out, "offset", conf_json_u64(r.out_offset));
  return 0;
}

static int op_consumer_set(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_log_consumer_set_req r = {0};
  TRY(conf_get_str(c, in, "consumer", &r.consumer));
  TRY(conf_get_stream(c, in, "stream", &r.stream));
  TRY(conf_get_u64(c, in, "offset", &r.offset));
  *st = SYNC(c, logs.consumer_set, &r);
  return 0;
}

static int op_log_trim(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_log_trim_req r = {0};
  TRY(conf_get_stream(c, in, "stream", &r.stream));
  TRY(conf_get_u64(c, in, "below", &r.below));
  TRY(conf_get_u64(c, in, "protect", &r.protect));
  *st = SYNC(c, logs.trim, &r);
  if (*st == 0) put(out, "trim", conf_json_u64(r.out_trim));
  return 0;
}

static int op_log_redact(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_log_redact_req r = {0};
  TRY(conf_get_position(c, in, "position", &r.position));
  TRY(conf_get_bytes(c, in, "payload", &r.payload));
  *st = SYNC(c, logs.redact, &r);
  qim_bytes_free(&r.payload);
  return 0;
}

/* ---- mailboxes ------------------------------------------------------------------------------------------ */

static int op_takeover(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_shard_takeover_req r = {0};
  uint64_t shard;
  TRY(conf_get_u64(c, in, "shard", &shard));
  TRY(conf_get_u64(c, in, "owner", &r.owner));
  r.shard = (qim_mailbox_shard_id)shard;
  *st = SYNC(c, mailboxes.shard_takeover, &r);
  if (*st == 0) {
    put(out, "epoch", conf_json_u64(r.out_epoch));
    put(out, "fence", conf_json_position(r.out_fence));
  }
  return 0;
}

static int op_shard_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_shard_get_req r = {0};
  uint64_t shard;
  TRY(conf_get_u64(c, in, "shard", &shard));
  r.shard = (qim_mailbox_shard_id)shard;
  *st = SYNC(c, mailboxes.shard_get, &r);
  if (*st == 0) {
    put(out, "epoch", conf_json_u64(r.out_epoch));
    put(out, "owner", conf_json_u64(r.out_owner));
  }
  return 0;
}

static void free_batch(qim_append_mailbox_batch *b) {
  for (size_t i = 0; i < b->entry_count; i++) qim_mailbox_entry_free(&b->entries[i]);
  qim_free(b->entries);
  qim_free(b->progress.completed_chunks);
}

static int dec_batch(conf_ctx *c, json_t *v, qim_append_mailbox_batch *b) {
  uint64_t shard, lane, chunk;
  if (!json_is_object(v)) return bad(c, "batch: expected an object");
  TRY(conf_get_u64(c, v, "shard", &shard));
  TRY(conf_get_u64(c, v, "lane", &lane));
  TRY(conf_get_id16(c, v, "dispatch_id", b->dispatch_id.b));
  TRY(conf_get_u64(c, v, "chunk_id", &chunk));
  TRY(conf_get_u64(c, v, "mailbox_seq", &b->mailbox_seq));
  b->shard = (qim_mailbox_shard_id)shard;
  b->lane = (qim_lane_id)lane;
  b->chunk_id = (uint32_t)chunk;
  json_t *entries = conf_get(c, v, "entries");
  b->entry_count = json_array_size(entries);
  b->entries = qim_calloc(b->entry_count ? b->entry_count : 1, sizeof *b->entries);
  for (size_t i = 0; i < b->entry_count; i++)
    TRY(conf_dec_mailbox_entry(c, json_array_get(entries, i), b->mailbox_seq, &b->entries[i]));
  return conf_dec_progress(c, conf_get(c, v, "progress"), &b->progress);
}

static json_t *receipt_json(const qim_durability_receipt *r) {
  json_t *o = json_object();
  put(o, "dispatch_id", conf_json_id16(r->dispatch_id.b));
  put(o, "lane", conf_json_u64(r->lane));
  put(o, "mailbox_seq", conf_json_u64(r->mailbox_seq));
  return o;
}

/* "batch" (one) or "batches" (several in one request, out "receipts"), optional "advance_to". */
static int op_mailbox_append(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_mailbox_append_req r = {0};
  json_t *many = conf_get(c, in, "batches");
  size_t n = many ? json_array_size(many) : 1;
  qim_append_mailbox_batch *b = qim_calloc(n ? n : 1, sizeof *b);
  qim_durability_receipt *receipts = qim_calloc(n ? n : 1, sizeof *receipts);
  uint64_t epoch, advance_to = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = dec_batch(c, many ? json_array_get(many, i) : conf_get(c, in, "batch"), &b[i]);
  if (!rc) rc = conf_get_u64(c, in, "owner_epoch", &epoch);
  if (!rc && conf_get(c, in, "advance_to")) rc = conf_get_u64(c, in, "advance_to", &advance_to);
  if (!rc) {
    r.batch = b;
    r.batch_count = many ? n : 0;
    r.out_receipts = many ? receipts : NULL;
    r.advance_to = advance_to;
    r.owner_epoch = (qim_shard_epoch)epoch;
    *st = SYNC(c, mailboxes.append, &r);
    if (*st == 0 && many) {
      json_t *a = json_array();
      for (size_t i = 0; i < n; i++) json_array_append_new(a, receipt_json(&receipts[i]));
      put(out, "receipts", a);
    } else if (*st == 0) {
      merge(out, receipt_json(&r.out));
    }
  }
  for (size_t i = 0; i < n; i++) free_batch(&b[i]);
  qim_free(b);
  qim_free(receipts);
  return rc;
}

static int op_progress_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_progress_get_req r = {0};
  uint64_t lane;
  TRY(conf_get_id16(c, in, "dispatch_id", r.dispatch_id.b));
  TRY(conf_get_u64(c, in, "lane", &lane));
  r.lane = (qim_lane_id)lane;
  *st = SYNC(c, mailboxes.progress_get, &r);
  if (*st == 0) {
    put(out, "found", json_boolean(r.out_found));
    if (r.out_found) merge(out, conf_enc_progress(&r.out));
  }
  qim_free(r.out.completed_chunks);
  return 0;
}

static int op_mailbox_range(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_mailbox_range_req r = {0};
  json_t *q = conf_get(c, in, "query");
  uint64_t items, bytes;
  if (!json_is_object(q)) return bad(c, "query: expected an object");
  TRY(conf_get_u128(c, q, "tenant_id", &r.query.tenant_id.v));
  TRY(conf_get_u128(c, q, "user_id", &r.query.user_id.v));
  TRY(conf_get_u64(c, q, "after_seq", &r.query.after_seq));
  TRY(conf_get_u64(c, q, "up_to_seq", &r.query.up_to_seq));
  TRY(conf_get_u64(c, q, "max_items", &items));
  TRY(conf_get_u64(c, q, "max_bytes", &bytes));
  r.query.max_items = (uint32_t)items;
  r.query.max_bytes = (uint32_t)bytes;
  *st = SYNC(c, mailboxes.range, &r);
  if (*st == 0) {
    json_t *a = must(json_array());
    for (size_t i = 0; i < r.out_count; i++) json_array_append_new(a, conf_enc_mailbox_entry(&r.out_entries[i]));
    put(out, "entries", a);
    put(out, "has_more", json_boolean(r.out_has_more));
  }
  for (size_t i = 0; i < r.out_count; i++) qim_mailbox_entry_free(&r.out_entries[i]);
  qim_free(r.out_entries);
  return 0;
}

static int op_watermark_get(conf_ctx *c, json_t *in, int *st, json_t *out) {
  qim_store_watermark_get_req r = {0};
  uint64_t shard, lane;
  TRY(conf_get_u64(c, in, "shard", &shard));
  TRY(conf_get_u64(c, in, "lane", &lane));
  r.shard = (qim_mailbox_shard_id)shard;
  r.lane = (qim_lane_id)lane;
  *st = SYNC(c, mailboxes.watermark_get, &r);
  if (*st == 0)
    merge(out, must(json_pack("{s:o,s:o,s:o,s:o}", "shard", conf_json_u64(r.out.shard), "lane",
                              conf_json_u64(r.out.lane), "materialized",
                              conf_json_u64(r.out.materialized), "floor", conf_json_u64(r.out.floor))));
  return 0;
}

static int op_watermark_advance(conf_ctx *c, json_t *in, int *st, json_t *out) {
  (void)out;
  qim_store_watermark_advance_req r = {0};
  json_t *a = conf_get(c, in, "advance");
  uint64_t shard, lane, epoch;
  if (!json_is_object(a)) return bad(c, "advance: expected an object");
  TRY(conf_get_u64(c, a, "shard", &shard));
  TRY(conf_get_u64(c, a, "lane", &lane));
  TRY(conf_get_u64(c, a, "materialized", &r.advance.materialized));
  TRY(conf_get_u64(c, a, "floor", &r.advance.floor));
  TRY(conf_get_u64(c, in, "owner_epoch", &epoch));
  r.advance.shard = (qim_mailbox_shard_id)shard;
  r.advance.lane = (qim_lane_id)lane;
  r.owner_epoch = (qim_shard_epoch)epoch;
  *st = SYNC(c, mailboxes.watermark_advance, &r);
  return 0;
}

/* ---- the table ------------------------------------------------------------------------------------------ */

static const struct {
  const char *name;
  op_fn fn;
} ops[] = {
    {"accounts.user_create", op_user_create},
    {"accounts.user_get", op_user_get},
    {"accounts.user_update", op_user_update},
    {"accounts.cred_create", op_cred_create},
    {"accounts.cred_get", op_cred_get},
    {"accounts.cred_update", op_cred_update},
    {"accounts.apikey_put", op_apikey_put},
    {"accounts.apikey_get", op_apikey_get},
    {"conversations.create", op_conv_create},
    {"conversations.get", op_conv_get},
    {"conversations.update", op_conv_update},
    {"conversations.members_change", op_members_change},
    {"conversations.member_get", op_member_get},
    {"conversations.members_at", op_members_at},
    {"conversations.member_receipt", op_member_receipt},
    {"conversations.member_private", op_member_private},
    {"conversations.subscriptions", op_subscriptions},
    {"conversations.members_prune", op_members_prune},
    {"intents.reserve", op_reserve},
    {"intents.advance", op_advance},
    {"intents.load", op_load},
    {"intents.list_in_flight", op_list_in_flight},
    {"intents.forget", op_forget},
    {"history.get", op_record_get},
    {"history.query", op_record_query},
    {"history.set_state", op_set_state},
    {"history.dellog_add", op_dellog_add},
    {"history.dellog_query", op_dellog_query},
    {"history.expire", op_expire},
    {"logs.append", op_log_append},
    {"logs.read", op_log_read},
    {"logs.consumer_get", op_consumer_get},
    {"logs.consumer_set", op_consumer_set},
    {"logs.trim", op_log_trim},
    {"logs.redact", op_log_redact},
    {"mailboxes.shard_takeover", op_takeover},
    {"mailboxes.shard_get", op_shard_get},
    {"mailboxes.append", op_mailbox_append},
    {"mailboxes.progress_get", op_progress_get},
    {"mailboxes.range", op_mailbox_range},
    {"mailboxes.watermark_get", op_watermark_get},
    {"mailboxes.watermark_advance", op_watermark_advance},
};

int conf_op_exec(conf_ctx *ctx, const char *op, json_t *in, int *status, json_t **out) {
  *out = must(json_object());
  *status = 0;
  ctx->err[0] = 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (strcmp(ops[i].name, op) != 0) continue;
    conf_seen_reset(ctx);
    int rc = ops[i].fn(ctx, in, status, *out);
    if (rc == 0) rc = conf_check_unread(ctx, in);
    conf_seen_reset(ctx);
    return rc == 0 ? 0 : QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED;
  }
  snprintf(ctx->err, sizeof ctx->err, "unknown op \"%s\"", op);
  return QIM_E_CONFORMANCE_CONTRACT_VECTOR_FAILED;
}

/* Every op name, for coverage reporting: the runner checks each one is used by a vector. */
size_t conf_op_count(void) { return sizeof ops / sizeof ops[0]; }
const char *conf_op_name(size_t i) { return i < conf_op_count() ? ops[i].name : NULL; }
