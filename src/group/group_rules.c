/*
 * group_rules.c — roles, access modes, permission rules and the member-page cursor
 * (group_rules.h). Pure functions: the decisions of group.c live here so they can be
 * tested exhaustively without a store.
 */
#include "group/group_rules.h"

#include <errno.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "store/store.h"

#define MODE_GUEST (QIM_MODE_J | QIM_MODE_R)
#define MODE_MEMBER (MODE_GUEST | QIM_MODE_W | QIM_MODE_P | QIM_MODE_S)
#define MODE_ADMIN (MODE_MEMBER | QIM_MODE_A | QIM_MODE_D)
#define MODE_OWNER (MODE_ADMIN | QIM_MODE_O)

static const struct {
  qim_group_role role;
  uint32_t mode;
  const char *name;
} roles[] = {
    {QIM_GROUP_ROLE_OWNER, MODE_OWNER, "owner"},
    {QIM_GROUP_ROLE_ADMIN, MODE_ADMIN, "admin"},
    {QIM_GROUP_ROLE_MEMBER, MODE_MEMBER, "member"},
    {QIM_GROUP_ROLE_GUEST, MODE_GUEST, "guest"},
};
#define ROLE_COUNT (sizeof roles / sizeof roles[0])

uint32_t qim_group_role_mode(qim_group_role role) {
  for (size_t i = 0; i < ROLE_COUNT; i++)
    if (roles[i].role == role) return roles[i].mode;
  return 0;
}

int qim_group_role_from_mode(uint32_t mode, qim_group_role *out) {
  for (size_t i = 0; i < ROLE_COUNT; i++)
    if (roles[i].mode == mode) {
      *out = roles[i].role;
      return 0;
    }
  return -EINVAL;
}

const char *qim_group_role_name(qim_group_role role) {
  for (size_t i = 0; i < ROLE_COUNT; i++)
    if (roles[i].role == role) return roles[i].name;
  return NULL;
}

int qim_group_role_parse(const char *name, qim_group_role *out) {
  for (size_t i = 0; name && i < ROLE_COUNT; i++)
    if (strcmp(roles[i].name, name) == 0) {
      *out = roles[i].role;
      return 0;
    }
  return -EINVAL;
}

int qim_group_mode_format(uint32_t mode, char out[QIM_GROUP_MODE_CAP]) {
  int n = 0;
  for (int bit = 0; bit < 8; bit++)
    if (mode & (1u << bit)) out[n++] = QIM_GROUP_MODE_LETTERS[bit];
  if (n == 0) out[n++] = 'N';
  out[n] = '\0';
  return n;
}

/* ---- permission rules ----------------------------------------------------------------- */

static int has(uint32_t mode, uint32_t bits) { return (mode & bits) == bits; }

int qim_group_rule_add(uint32_t actor_mode, qim_group_role role) {
  switch (role) {
  case QIM_GROUP_ROLE_MEMBER:
  case QIM_GROUP_ROLE_GUEST:
    if (has(actor_mode, QIM_MODE_S)) return 0;
    break;
  case QIM_GROUP_ROLE_ADMIN:
    if (has(actor_mode, QIM_MODE_O)) return 0;
    break;
  case QIM_GROUP_ROLE_OWNER: /* one owner per group, fixed at creation */
    break;
  }
  return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
}

int qim_group_rule_remove(uint32_t actor_mode, uint32_t target_mode) {
  if (!has(actor_mode, QIM_MODE_A) || has(target_mode, QIM_MODE_O))
    return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  if (has(target_mode, QIM_MODE_A) && !has(actor_mode, QIM_MODE_O))
    return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return 0;
}

int qim_group_rule_leave(uint32_t actor_mode) {
  if (has(actor_mode, QIM_MODE_O)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return 0;
}

int qim_group_rule_delete(uint32_t actor_mode) {
  if (!has(actor_mode, QIM_MODE_O)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return 0;
}

int qim_group_rule_set_role(uint32_t actor_mode, uint32_t target_mode, qim_group_role role) {
  if (role == QIM_GROUP_ROLE_OWNER || has(target_mode, QIM_MODE_O) || qim_group_role_mode(role) == 0)
    return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  uint32_t need = (role == QIM_GROUP_ROLE_ADMIN || has(target_mode, QIM_MODE_A)) ? QIM_MODE_O : QIM_MODE_A;
  if (!has(actor_mode, need)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return 0;
}

int qim_group_rule_list(uint32_t actor_mode) {
  if (!has(actor_mode, QIM_MODE_R)) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
  return 0;
}

/* ---- member-page cursor ------------------------------------------------------------------ */

void qim_group_cursor_encode(const qim_group_cursor *c, qim_page_cursor *out) {
  uint8_t *p = qim_malloc(QIM_GROUP_CURSOR_SIZE);
  p[0] = 1;
  qim_u128_to_be(c->conversation_id.v, p + 1);
  for (int i = 0; i < 8; i++) p[17 + i] = (uint8_t)(c->version >> (56 - 8 * i));
  qim_u128_to_be(c->last_user.v, p + 25);
  out->bytes.p = p;
  out->bytes.n = QIM_GROUP_CURSOR_SIZE;
}

int qim_group_cursor_decode(const qim_page_cursor *in, qim_conversation_id expect, qim_group_cursor *out) {
  const uint8_t *p = in->bytes.p;
  if (in->bytes.n != QIM_GROUP_CURSOR_SIZE || !p || p[0] != 1) return -EINVAL;
  qim_group_cursor c;
  c.conversation_id.v = qim_u128_from_be(p + 1);
  if (!qim_u128_eq(c.conversation_id.v, expect.v)) return -EINVAL;
  c.version = 0;
  for (int i = 0; i < 8; i++) c.version = c.version << 8 | p[17 + i];
  if (c.version == 0) return -EINVAL;
  c.last_user.v = qim_u128_from_be(p + 25);
  *out = c;
  return 0;
}
