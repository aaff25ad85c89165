/*
 * group_delete.c — the owner deletes its group (group.h qim_group_delete). Deleting a
 * conversation means: every current member leaves in one membership version (so fanout,
 * history and push agree on who saw what, as for any change), a Control message with op
 * "delete" names them all (so every member's devices learn it, offline ones through the
 * mailbox), and only then the conversation is marked deleted — after the mark the store
 * refuses reserves, and the Control must still be committed.
 */
#include <errno.h>

#include "group/group_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"

/* Every member at the current version (paged through the store); *n of them. */
static int current_members(qim_groups *g, const qim_store_conversation *conv, qim_user_id **out,
                           size_t *n) {
  qim_store_members_at_req r = {.tenant_id = conv->tenant_id,
                                .conversation_id = conv->conversation_id,
                                .version = conv->membership_version,
                                .limit = g->cfg.page_max};
  qim_user_id *u = NULL;
  size_t k = 0, cap = 0;
  for (;;) {
    int rc = QIM_STORE_SYNC(g->store, conversations.members_at, &r);
    if (rc) {
      qim_free(u);
      return qim__group_store_error(rc);
    }
    if (k + r.out_count > cap) {
      cap = (k + r.out_count) * 2 + 16;
      u = qim_realloc(u, cap * sizeof *u);
    }
    for (size_t i = 0; i < r.out_count; i++) u[k++] = r.out_members[i].user_id;
    bool more = r.out_has_more && r.out_count > 0;
    if (r.out_count) r.after_user = r.out_members[r.out_count - 1].user_id;
    r.has_after = true;
    qim_free(r.out_members);
    r.out_members = NULL;
    if (!more) break;
  }
  *out = u;
  *n = k;
  return 0;
}

/* Removes every member in one version and announces it as op "delete". */
static int remove_all(qim_groups *g, const qim_authenticated_actor *a,
                      const qim_store_conversation *conv, const qim_trace_id *trace,
                      qim_group_change_result *out) {
  qim_user_id *u = NULL;
  size_t n = 0;
  int rc = current_members(g, conv, &u, &n);
  if (rc) return rc;
  qim_store_member_change *ch = qim_calloc(n ? n : 1, sizeof *ch);
  qim__group_change *ann = qim_calloc(n ? n : 1, sizeof *ann);
  for (size_t i = 0; i < n; i++) {
    ch[i] = (qim_store_member_change){.op = QIM_STORE_MEMBER_REMOVE, .user_id = u[i]};
    ann[i] = (qim__group_change){u[i], "removed", false, 0};
  }
  qim_store_members_change_req r = {.tenant_id = conv->tenant_id,
                                    .conversation_id = conv->conversation_id,
                                    .changes = ch,
                                    .change_count = n,
                                    .now = qim_clock_wall_ms(g->clock)};
  rc = QIM_STORE_SYNC(g->store, conversations.members_change, &r);
  if (rc) {
    rc = qim__group_store_error(rc);
  } else {
    *out =
        (qim_group_change_result){.membership_version = r.out_version, .position = r.out_position};
    qim__group_event ev = {.op = "delete",
                           .tenant = a->tenant_id,
                           .conversation_id = conv->conversation_id,
                           .version = r.out_version,
                           .position = r.out_position,
                           .actor = a,
                           .actor_still_member = false,
                           .owner = conv->owner_id,
                           .changes = ann,
                           .count = n};
    qim__group_announce(g, &ev, trace, out);
  }
  qim_free(ann);
  qim_free(ch);
  qim_free(u);
  return rc;
}

int qim_group_delete(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group,
                     const qim_trace_id *trace, qim_group_change_result *out) {
  qim_store_conversation conv;
  uint32_t mode;
  int rc = qim__group_load_actor(g, actor, group, &conv, &mode);
  if (rc) return rc;
  rc = qim_group_rule_delete(mode);
  if (!rc) rc = remove_all(g, actor, &conv, trace, out);
  if (!rc) {
    qim_store_conv_update_req u = {.tenant_id = conv.tenant_id,
                                   .conversation_id = conv.conversation_id,
                                   .mark_deleted = true,
                                   .now = qim_clock_wall_ms(g->clock)};
    int urc = QIM_STORE_SYNC(g->store, conversations.update, &u);
    /* The members are gone already (the group is empty and nobody can rejoin it through
     * an owner); a failed mark is reported so the caller may retry the delete. */
    if (urc) rc = qim__group_store_error(urc);
    QIM_LOGI(trace, "group.deleted", "version=%llu mark=%s",
             (unsigned long long)out->membership_version, urc ? qim_err_name(urc) : "ok");
  }
  qim_store_conversation_free(&conv);
  return rc;
}
