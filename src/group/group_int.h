/*
 * group_int.h — what the files of the group module share and nobody else sees.
 */
#ifndef QIM_GROUP_INT_H
#define QIM_GROUP_INT_H

#include "core/periodic.h"
#include "group/group.h"

struct qim_groups {
  qim_store *store;
  qim_commit *commit;
  const qim_clock *clock;
  qim_group_config cfg;
  qim_periodic pruner; /* the snapshot pruner task (group_prune.c) */
};

/* One member's part of a change, as the Control JSON states it. */
typedef struct qim__group_change {
  qim_user_id user;
  const char *change;   /* "added", "removed", "banned", "left", "role" */
  bool has_role;        /* added / role: the new role */
  qim_group_role role;
} qim__group_change;

/* A change that was applied, to be announced as Control message(s). */
typedef struct qim__group_event {
  const char *op;                           /* "create", "add", "remove", "ban", "leave", "role", "admin" */
  qim_tenant_id tenant;
  qim_conversation_id conversation_id;
  qim_membership_version version;
  qim_conversation_seq position;
  const qim_authenticated_actor *actor;     /* NULL for an admin change */
  bool actor_still_member;                  /* false: the Control is attributed to the owner */
  const qim_internal_principal *principal;  /* admin change only */
  qim_user_id owner;
  const qim__group_change *changes;
  size_t count;
} qim__group_event;

/*
 * Commits the Control message(s) of an applied change (cfg.control_changes changes
 * each; ClientMessageId derived from (conversation, version, part) so a repeat is
 * idempotent) and fills out->control_*. Never fails the change: returns nothing.
 */
void qim__group_announce(qim_groups *g, const qim__group_event *ev, const qim_trace_id *trace,
                         qim_group_change_result *out);

/* The Control JSON of changes [from, to) of `ev` (part `part` of `parts`, 1-based);
 * caller frees with free(). NULL only on allocation failure. */
char *qim__group_control_json(const qim__group_event *ev, size_t from, size_t to, uint32_t part, uint32_t parts);

/* The ClientMessageId of part `part` of the change that made `version`. */
qim_client_message_id qim__group_control_cmid(qim_conversation_id conv, qim_membership_version version, uint32_t part);

/* A store status as a group status (GroupMembershipError codes pass through, -EAGAIN is
 * QIM_AGAIN, anything else GROUP_UNAVAILABLE). */
int qim__group_store_error(int rc);
/* Loads the live group and the acting member's effective modes: NotFound /
 * PermissionDenied (not a current member). On success conv owns its strings. */
int qim__group_load_actor(qim_groups *g, const qim_authenticated_actor *a, qim_group_id group,
                          struct qim_store_conversation *conv, uint32_t *mode);

#endif
