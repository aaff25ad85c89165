/*
 * group.h — groups and membership (seed 004 §4, DESIGN.md §3, docs/groups.md).
 *
 * A group is a conversation of kind GROUP whose GroupId is its ConversationId. Every
 * change of its member set — create, add, remove, ban, leave, role change, and the
 * AdminMembershipChange of an internal service — is one atomic store call
 * (conversations.members_change) that makes a new MembershipVersion and records
 * joined_at / left_at at the conversation's current seq position, serialized with seq
 * allocation; so "who may see seq N" has one answer in history, fanout and push. The
 * change is then committed as a Control message through the commit module
 * (custom_type "qim.membership", JSON in docs/groups.md; its own MessageId, no new seq)
 * so offline devices learn of it through their mailboxes as EventType::Membership.
 *
 * Permissions are enforced by access mode (group_rules.h): roles map to Owner
 * JRWPASDO, Admin JRWPASD, Member JRWPS, Guest JR.
 *
 * Threads: every function blocks on store and commit completions, so call it from a
 * worker thread (uv_queue_work, a pool), never from an event loop. Any thread may call;
 * the store serializes the changes.
 *
 * Errors (all raised through qim_err_raise, by this module or the store):
 *   GROUP_NOT_FOUND            no such group (or a direct conversation, or deleted), or
 *                              the target of remove / ban / role change is not a current member;
 *   GROUP_ALREADY_EXISTS       create of an existing id; add of a current member;
 *   GROUP_PERMISSION_DENIED    the actor is not a current member or its modes do not allow
 *                              the change; add of a banned user;
 *   GROUP_MEMBER_LIMIT_EXCEEDED  the change would put more than member_limit members in the group;
 *   GROUP_INTERNAL_IDENTITY_REQUIRED  an AdminMembershipChange without a valid InternalPrincipal;
 *   GROUP_UNAVAILABLE          the store failed;
 *   QIM_AGAIN                  the store's queue is full (backpressure): try again later;
 *   -EINVAL                    a malformed request (empty change, bad cursor, bad role).
 */
#ifndef QIM_GROUP_H
#define QIM_GROUP_H

#include "commit/commit.h"
#include "group/group_rules.h"
#include "qim/clock.h"
#include "qim/types.h"
#include "store/store.h"

/* custom_type of the Control messages describing membership changes. */
#define QIM_GROUP_CONTROL_TYPE "qim.membership"
/* schema_version of their JSON. */
#define QIM_GROUP_CONTROL_SCHEMA 1

typedef struct qim_group_config {
  uint32_t member_limit;        /* members per group (10,000) → MemberLimitExceeded */
  uint32_t page_default;        /* member page size when a request asks 0 (100) */
  uint32_t page_max;            /* larger requests are clamped to this (1,000) */
  uint32_t control_changes;     /* changes per Control message; bigger changes are split (500) */
  uint32_t control_attempts;    /* tries of a Control commit that failed transiently (3) */
  /* Snapshot retention (docs/groups.md): the newest versions of each group kept readable
   * (1000; 0 = keep every version), conversations per store call of a pass (1000), and
   * the pruner task's period (60 s). */
  uint32_t snapshot_keep_versions;
  uint32_t snapshot_prune_batch;
  uint32_t snapshot_prune_interval_ms;
  /* InternalPrincipal service names allowed to make AdminMembershipChanges; none = any
   * principal with a non-empty service_name and subject. Borrowed. */
  const char *const *internal_services;
  size_t internal_service_count;
} qim_group_config;

void qim_group_config_default(qim_group_config *cfg);

typedef struct qim_groups qim_groups;

/* `store`, `commit` and `clock` are borrowed and must outlive the groups object.
 * `cfg` NULL = defaults. -EINVAL for a zero member_limit or page_max. */
int qim_group_open(qim_store *store, qim_commit *commit, const qim_clock *clock, const qim_group_config *cfg,
                   qim_groups **out);
void qim_group_close(qim_groups *g); /* NULL ok */

/* What one membership change did. */
typedef struct qim_group_change_result {
  qim_membership_version membership_version;  /* the version the change made */
  qim_conversation_seq position;              /* the seq position of joined_at / left_at */
  int control_status;         /* 0 when every Control message of the change committed (or is
                                 durably in flight: COMMIT_RECOVERABLE counts as committed);
                                 otherwise the commit's error — the change itself stands */
  uint32_t control_count;     /* Control messages the change was described in */
  qim_committed_message control;  /* the first one's coordinates */
} qim_group_change_result;

/*
 * GroupCreateRequest → GroupCreated. The actor becomes the Owner (version 1); the
 * invitees (duplicates and the owner ignored) join as Members in one more version, which
 * GroupCreated.membership_version reports. The two steps are separate store calls: a
 * failure between them leaves the group with its owner alone (the error is returned).
 * MemberLimitExceeded when 1 + invitees > member_limit (checked first); AlreadyExists
 * when the id is taken. `change` may be NULL.
 */
int qim_group_create(qim_groups *g, const qim_authenticated_actor *actor, const qim_group_create_request *req,
                     const qim_trace_id *trace, qim_group_created *out, qim_group_change_result *change);

/* Adds `users` (duplicates ignored) with `role`; one version for all. */
int qim_group_add(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, const qim_user_id *users,
                  size_t count, qim_group_role role, const qim_trace_id *trace, qim_group_change_result *out);
/* Removes another member (removing oneself is qim_group_leave). */
int qim_group_remove(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                     const qim_trace_id *trace, qim_group_change_result *out);
/* Removes another member and bans it: a later add of it is PermissionDenied. */
int qim_group_ban(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                  const qim_trace_id *trace, qim_group_change_result *out);
/* The actor leaves (the owner cannot). */
int qim_group_leave(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group,
                    const qim_trace_id *trace, qim_group_change_result *out);
/* Gives another member `role` (and that role's modes). */
int qim_group_set_role(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group, qim_user_id user,
                       qim_group_role role, const qim_trace_id *trace, qim_group_change_result *out);

/*
 * Deletes the group (Tinode {del what:"topic"}); only a member holding O (the owner).
 * What deleting a conversation means (docs/groups.md, "Deleting a group"): every current
 * member, the owner included, leaves in ONE membership version, announced by Control
 * message(s) with op "delete" naming each of them ("removed"), so every member's mailbox
 * learns the group is gone; then the conversation is marked deleted in the store: it
 * takes no more reserves nor membership changes, the group module answers NotFound for
 * it, and history reads are refused. Stored bodies are not wiped here (retention or a
 * later purge does that). out->membership_version is the version of the removal.
 */
int qim_group_delete(qim_groups *g, const qim_authenticated_actor *actor, qim_group_id group,
                     const qim_trace_id *trace, qim_group_change_result *out);

/*
 * AdminMembershipChange by an internal service: adds (as Members) and removes without
 * role checks, in one version. `principal` NULL, with an empty service_name or
 * subject, or a service not in cfg.internal_services → InternalIdentityRequired. The
 * owner cannot be removed (PermissionDenied); a user in both lists or an empty change
 * is -EINVAL. The group belongs to `tenant`.
 */
int qim_group_admin_change(qim_groups *g, const qim_internal_principal *principal, qim_tenant_id tenant,
                           const qim_admin_membership_change *change, const qim_trace_id *trace,
                           qim_group_change_result *out);

/*
 * MemberPageRequest → MemberPage, members ordered by user id. The first page (no
 * cursor) pages the membership version current at that moment; its next_cursor
 * (present when has_more) freezes that version and the last user returned, so the
 * pages of one listing are consistent under concurrent changes: no member twice, none
 * skipped. The actor must be a current member holding R (PermissionDenied). A cursor
 * of another group or malformed: -EINVAL. A cursor naming a version above the current
 * one or pruned by retention: FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE from the store
 * (docs/groups.md "Snapshot retention"). limit 0 = page_default,
 * above page_max = page_max. out owns its arrays (qim_member_page_free).
 */
int qim_group_member_page(qim_groups *g, const qim_member_page_request *req, qim_member_page *out);

/* What one snapshot-retention pass did. */
typedef struct qim_group_prune_result {
  uint64_t conversations; /* conversations whose membership floor rose */
  uint64_t held;          /* held below the count rule by a message not yet fanned out */
  uint64_t rows;          /* versioned member rows deleted */
  bool deferred;          /* the fanout backlog was too long to scan: nothing pruned */
} qim_group_prune_result;

/*
 * One snapshot-retention pass over every conversation of the store
 * (conversations.members_prune, snapshot_prune_batch at a time): versions older than the
 * newest snapshot_keep_versions become MembershipSnapshotUnavailable, except those a
 * message not yet fanned out names. snapshot_keep_versions 0: does nothing. out may be
 * NULL. GROUP_UNAVAILABLE / QIM_AGAIN from the store.
 */
int qim_group_prune_snapshots(qim_groups *g, qim_group_prune_result *out);
/* Runs qim_group_prune_snapshots every snapshot_prune_interval_ms on a thread of its own
 * until qim_group_pruner_stop or close. -EALREADY when running. */
int qim_group_pruner_start(qim_groups *g);
void qim_group_pruner_stop(qim_groups *g); /* NULL ok */

#endif
