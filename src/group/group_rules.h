/*
 * group_rules.h — the pure part of groups: roles ↔ access modes, the permission rules
 * of every membership change, and the opaque member-page cursor. No I/O here, so every
 * rule is unit-tested on its own (tests/unit/group/test_group_rules.c) and the same
 * functions decide in production (group.c). The rules are documented in docs/groups.md.
 */
#ifndef QIM_GROUP_RULES_H
#define QIM_GROUP_RULES_H

#include "qim/types.h"

/* Tinode's access-mode letters in bit order: J R W P A S D O (store.h QIM_MODE_*). */
#define QIM_GROUP_MODE_LETTERS "JRWPASDO"
/* "JRWPASDO" + NUL; "N" (no access) for 0. */
#define QIM_GROUP_MODE_CAP 9

/* The mode set of a role (DESIGN.md §3): Owner JRWPASDO, Admin JRWPASD, Member JRWPS,
 * Guest JR. 0 for a value outside the enum. */
uint32_t qim_group_role_mode(qim_group_role role);

/* The role whose mode set equals `mode` exactly; -EINVAL when no role has it. */
int qim_group_role_from_mode(uint32_t mode, qim_group_role *out);

/* "owner" / "admin" / "member" / "guest" (the names used in Control-message JSON);
 * NULL outside the enum. parse: -EINVAL for any other string. */
const char *qim_group_role_name(qim_group_role role);
int qim_group_role_parse(const char *name, qim_group_role *out);

/* Mode bits as letters in JRWPASDO order ("N" for none); returns the length. */
int qim_group_mode_format(uint32_t mode, char out[QIM_GROUP_MODE_CAP]);

/*
 * Permission rules. Each takes the EFFECTIVE modes (want & given) of the acting
 * member and, where there is one, of the target member, and returns 0 when allowed or
 * QIM_E_GROUP_PERMISSION_DENIED (raised). Enforcement is by mode, never by role name,
 * so a member whose modes were narrowed loses the matching rights.
 */
/* Adding a user with `role`: Member/Guest need S; Admin needs O; Owner never. */
int qim_group_rule_add(uint32_t actor_mode, qim_group_role role);
/* Removing or banning another member: actor needs A; a target holding O is never
 * removable; a target holding A needs an actor holding O. Not for oneself (leave). */
int qim_group_rule_remove(uint32_t actor_mode, uint32_t target_mode);
/* Leaving: anyone but a member holding O (the owner cannot leave its group). */
int qim_group_rule_leave(uint32_t actor_mode);
/* Deleting the group: the actor needs O (only the owner ends its group). */
int qim_group_rule_delete(uint32_t actor_mode);
/* Changing another member's role to `role`: never to Owner, never of a target holding
 * O; to or from Admin (a target holding A) needs O; Member <-> Guest needs A. */
int qim_group_rule_set_role(uint32_t actor_mode, uint32_t target_mode, qim_group_role role);
/* Reading member pages: the actor needs R. */
int qim_group_rule_list(uint32_t actor_mode);

/*
 * PageCursor of member pages: where the next page starts, frozen to the membership
 * version of the first page so paging is stable under concurrent changes.
 *   byte 0      format (1)
 *   bytes 1-16  conversation id, big-endian (a cursor is valid for its group only)
 *   bytes 17-24 membership version, big-endian
 *   bytes 25-40 last user id returned, big-endian
 * decode: -EINVAL for any other length, format or a different conversation.
 */
#define QIM_GROUP_CURSOR_SIZE 41
typedef struct qim_group_cursor {
  qim_conversation_id conversation_id;
  qim_membership_version version;
  qim_user_id last_user;
} qim_group_cursor;

void qim_group_cursor_encode(const qim_group_cursor *c, qim_page_cursor *out); /* out owns bytes */
int qim_group_cursor_decode(const qim_page_cursor *in, qim_conversation_id expect, qim_group_cursor *out);

#endif
