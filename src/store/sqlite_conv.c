/*
 * sqlite_conv.c — conversations and members in the SQLite backend.
 *
 * `members` holds each (conversation, user)'s latest state, including the receipts and
 * private data that change without a membership version. `member_versions` is the
 * history the fanout reads: one row per stretch of membership with a constant role,
 * valid for versions [from_version, to_version), so the member set at any exact version
 * is one range scan and a change writes only the rows of the members it touches.
 * `conv_shards` counts current members per mailbox shard, which gives a group message's
 * target shards at reserve without hashing every member.
 */
#include <errno.h>
#include <string.h>

#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "store/sqlite_int.h"

#define GROUP_ERRORS QIM_E_GROUP_UNAVAILABLE, QIM_E_GROUP_UNAVAILABLE, QIM_E_GROUP_UNAVAILABLE
#define FANOUT_ERRORS QIM_E_FANOUT_UNAVAILABLE, QIM_E_FANOUT_UNAVAILABLE, QIM_E_FANOUT_UNAVAILABLE

#define MODE_OWNER 0xFFu /* JRWPASDO */
#define MODE_DIRECT (QIM_MODE_J | QIM_MODE_R | QIM_MODE_W | QIM_MODE_P | QIM_MODE_A)

/* ---- reading rows ---------------------------------------------------------------------- */

#define CONV_COLUMNS                                                                \
  "c.tenant, c.conv, c.kind, c.owner, c.direct0, c.direct1, c.latest_seq, c.delid," \
  " c.last_activity, c.created_at, c.updated_at, c.touched_at, c.public_json,"      \
  " c.mode_auth, c.mode_anon, c.membership_version, c.member_count, c.deleted,"     \
  " c.retention_floor"
#define CONV_COLUMN_COUNT 19

static void conv_from_row(sqlite3_stmt *st, int i, qim_store_conversation *out) {
  *out = (qim_store_conversation){0};
  out->tenant_id.v = sq_col_u128(st, i);
  out->conversation_id.v = sq_col_u128(st, i + 1);
  out->kind = (qim_conversation_kind)sqlite3_column_int(st, i + 2);
  out->owner_id.v = sq_col_u128(st, i + 3);
  out->direct_users[0].v = sq_col_u128(st, i + 4);
  out->direct_users[1].v = sq_col_u128(st, i + 5);
  out->latest_seq = sq_col_u64(st, i + 6);
  out->delid = sq_col_u64(st, i + 7);
  sq_col_id16(st, i + 8, out->last_activity_id.b);
  out->created_at = sq_col_u64(st, i + 9);
  out->updated_at = sq_col_u64(st, i + 10);
  out->touched_at = sq_col_u64(st, i + 11);
  out->public_json = sq_col_text(st, i + 12);
  out->default_mode_auth = (uint32_t)sq_col_u64(st, i + 13);
  out->default_mode_anon = (uint32_t)sq_col_u64(st, i + 14);
  out->membership_version = sq_col_u64(st, i + 15);
  out->member_count = (uint32_t)sq_col_u64(st, i + 16);
  out->deleted = sqlite3_column_int(st, i + 17) != 0;
  out->retention_floor = sq_col_u64(st, i + 18);
}

#define MEMBER_COLUMNS                                                                   \
  "m.conv, m.user, m.role, m.mode_want, m.mode_given, m.joined_at, m.left_at, m.banned," \
  " m.read_seq, m.recv_seq, m.clear_delid, m.private_json, m.updated_at"

static void member_from_row(sqlite3_stmt *st, int i, qim_store_member *out) {
  *out = (qim_store_member){0};
  out->conversation_id.v = sq_col_u128(st, i);
  out->user_id.v = sq_col_u128(st, i + 1);
  out->role = (qim_group_role)sqlite3_column_int(st, i + 2);
  out->mode_want = (uint32_t)sq_col_u64(st, i + 3);
  out->mode_given = (uint32_t)sq_col_u64(st, i + 4);
  out->joined_at = sq_col_u64(st, i + 5);
  out->has_left_at = sqlite3_column_type(st, i + 6) != SQLITE_NULL;
  out->left_at = out->has_left_at ? sq_col_u64(st, i + 6) : 0;
  out->banned = sqlite3_column_int(st, i + 7) != 0;
  out->read_seq = sq_col_u64(st, i + 8);
  out->recv_seq = sq_col_u64(st, i + 9);
  out->clear_delid = sq_col_u64(st, i + 10);
  out->private_json = sq_col_text(st, i + 11);
  out->updated_at = sq_col_u64(st, i + 12);
}

/* ---- helpers shared with other domains ------------------------------------------------------ */

int sq_conv_target_shards(sq_conn *c, qim_tenant_id t, qim_conversation_id conv,
                          qim_mailbox_shard_id **out, size_t *count) {
  *out = NULL;
  *count = 0;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT shard FROM conv_shards WHERE tenant=? AND conv=?"
                             " AND members > 0 ORDER BY shard");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, t, conv);
  size_t cap = 0;
  int rc;
  while ((rc = sq_step(c, st)) == 1) {
    if (*count == cap) {
      cap = cap ? cap * 2 : 8;
      *out = qim_realloc(*out, cap * sizeof **out);
    }
    (*out)[(*count)++] = (qim_mailbox_shard_id)sq_col_u64(st, 0);
  }
  return rc;
}

int sq_member_may_send(sq_conn *c, qim_tenant_id t, qim_conversation_id conv, qim_user_id user,
                       bool writer, bool *out) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT banned, mode_want & mode_given FROM members"
                             " WHERE tenant=? AND conv=? AND user=? AND left_at IS NULL");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, t, conv);
  sq_bind_u128(st, 3, user.v);
  int rc = sq_step(c, st);
  *out = rc == 1 && (!writer || (!sqlite3_column_int(st, 0) &&
                                 (sqlite3_column_int64(st, 1) & QIM_MODE_W)));
  return rc < 0 ? rc : 0;
}

int sq_member_read_up_to(sq_conn *c, qim_tenant_id t, qim_conversation_id conv, qim_user_id user,
                         qim_conversation_seq seq) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE members SET read_seq=max(read_seq, ?4),"
                             " recv_seq=max(recv_seq, ?4) WHERE tenant=?1 AND conv=?2 AND user=?3");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, t, conv);
  sq_bind_u128(st, 3, user.v);
  sq_bind_u64(st, 4, seq);
  return sq_run(c, st);
}

/* ---- membership rows --------------------------------------------------------------------- */

typedef struct member_ref {
  qim_tenant_id t;
  qim_conversation_id conv;
  qim_user_id user;
} member_ref;

/* Binds a member's key as ?1 (tenant), ?2 (conversation), ?3 (user). */
static void bind_member(sqlite3_stmt *st, const member_ref *m) {
  sq_bind_conv(st, 1, m->t, m->conv);
  sq_bind_u128(st, 3, m->user.v);
}

static int shard_count_add(sq_conn *c, const member_ref *m, int delta) {
  qim_mailbox_shard_id shard = qim_shard_of_user(&c->st->opt.shards, m->t, m->user);
  sqlite3_stmt *st =
      sq_prep(c,
              "INSERT INTO conv_shards(tenant, conv, shard, members) VALUES(?, ?, ?, ?)"
              " ON CONFLICT(tenant, conv, shard) DO UPDATE SET"
              " members = members + excluded.members");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, m->t, m->conv);
  sqlite3_bind_int64(st, 3, shard);
  sqlite3_bind_int(st, 4, delta);
  return sq_run(c, st);
}

/* Opens a membership stretch at version v. */
static int version_open(sq_conn *c, const member_ref *m, uint64_t v, qim_group_role role,
                        qim_conversation_seq joined_at) {
  sqlite3_stmt *st = sq_prep(c,
                             "INSERT INTO member_versions(tenant, conv, user, from_version,"
                             " to_version, role, joined_at) VALUES(?, ?, ?, ?, ?, ?, ?)");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  sq_bind_u64(st, 4, v);
  sqlite3_bind_int64(st, 5, SQ_VERSION_OPEN);
  sqlite3_bind_int(st, 6, (int)role);
  sq_bind_u64(st, 7, joined_at);
  return sq_run(c, st);
}

/* Ends the open stretch at version v (one opened at v itself never existed: deleted). */
static int version_close(sq_conn *c, const member_ref *m, uint64_t v) {
  static const char *const sql[] = {
      "DELETE FROM member_versions WHERE tenant=?1 AND conv=?2 AND user=?3"
      " AND from_version=?4 AND to_version=?5",
      "UPDATE member_versions SET to_version=?4 WHERE tenant=?1 AND conv=?2 AND user=?3"
      " AND to_version=?5",
  };
  for (int i = 0; i < 2; i++) {
    sqlite3_stmt *st = sq_prep(c, sql[i]);
    if (!st) return sq_last_error(c);
    bind_member(st, m);
    sq_bind_u64(st, 4, v);
    sqlite3_bind_int64(st, 5, SQ_VERSION_OPEN);
    int rc = sq_run(c, st);
    if (rc) return rc;
  }
  return 0;
}

/* A new or returning member: latest row, version stretch, shard count. */
static int member_join(sq_conn *c, const member_ref *m, const qim_store_member_change *ch,
                       uint64_t v, qim_conversation_seq pos, uint64_t now) {
  sqlite3_stmt *st =
      sq_prep(c,
              "INSERT INTO members(tenant, conv, user, role, mode_want, mode_given,"
              " joined_at, left_at, banned, read_seq, recv_seq, clear_delid,"
              " updated_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, 0, ?7, ?7, 0, ?8)"
              " ON CONFLICT(tenant, conv, user) DO UPDATE SET role=?4, mode_want=?5,"
              " mode_given=?6, joined_at=?7, left_at=NULL, banned=0, read_seq=?7,"
              " recv_seq=?7, updated_at=?8");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  sqlite3_bind_int(st, 4, (int)ch->role);
  sq_bind_u64(st, 5, ch->mode_want);
  sq_bind_u64(st, 6, ch->mode_given);
  sq_bind_u64(st, 7, pos);
  sq_bind_u64(st, 8, now);
  int rc = sq_run(c, st);
  if (rc == 0) rc = version_open(c, m, v, ch->role, pos);
  if (rc == 0) rc = shard_count_add(c, m, 1);
  return rc;
}

/* ---- create / get / update ------------------------------------------------------------------ */

static int conv_create_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_conv_create_req *r = (void *)base;
  const qim_store_conversation *cv = &r->conv;
  if (cv->kind == QIM_CONVERSATION_GROUP) return 0;
  if (cv->kind != QIM_CONVERSATION_DIRECT) return -EINVAL;
  /* lower id first, two distinct users */
  return qim_u128_cmp(cv->direct_users[0].v, cv->direct_users[1].v) < 0 ? 0 : -EINVAL;
}

static int insert_conv(sq_conn *c, const qim_store_conv_create_req *r, uint32_t count) {
  const qim_store_conversation *cv = &r->conv;
  bool group = cv->kind == QIM_CONVERSATION_GROUP;
  qim_u128 zero = {0, 0};
  sqlite3_stmt *st =
      sq_prep(c,
              "INSERT INTO conversations(tenant, conv, kind, owner, direct0, direct1,"
              " latest_seq, next_order, delid, last_activity, created_at, updated_at,"
              " touched_at, public_json, mode_auth, mode_anon, membership_version,"
              " member_count, deleted)"
              " VALUES(?1, ?2, ?3, ?4, ?5, ?6, 0, 0, 0, ?7, ?8, ?8, ?8, ?9, ?10, ?11,"
              " 1, ?12, 0)");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, cv->tenant_id, cv->conversation_id);
  sqlite3_bind_int(st, 3, (int)cv->kind);
  sq_bind_u128(st, 4, group ? cv->owner_id.v : zero);
  sq_bind_u128(st, 5, group ? zero : cv->direct_users[0].v);
  sq_bind_u128(st, 6, group ? zero : cv->direct_users[1].v);
  sq_bind_id16(st, 7, cv->last_activity_id.b);
  sq_bind_u64(st, 8, r->now);
  sq_bind_text(st, 9, cv->public_json);
  sq_bind_u64(st, 10, cv->default_mode_auth);
  sq_bind_u64(st, 11, cv->default_mode_anon);
  sqlite3_bind_int(st, 12, (int)count);
  return sq_run(c, st); /* -EEXIST when the id is taken */
}

static int conv_create_exec(sq_conn *c, qim_store_req *base) {
  qim_store_conv_create_req *r = (void *)base;
  const qim_store_conversation *cv = &r->conv;
  bool group = cv->kind == QIM_CONVERSATION_GROUP;
  int rc = insert_conv(c, r, group ? 1 : 2);
  if (rc) return rc;
  qim_store_member_change ch = {QIM_STORE_MEMBER_ADD, cv->owner_id, QIM_GROUP_ROLE_OWNER,
                                MODE_OWNER, MODE_OWNER};
  if (group) {
    member_ref m = {cv->tenant_id, cv->conversation_id, cv->owner_id};
    return member_join(c, &m, &ch, 1, 0, r->now);
  }
  ch.role = QIM_GROUP_ROLE_MEMBER;
  ch.mode_want = ch.mode_given = MODE_DIRECT;
  for (int i = 0; rc == 0 && i < 2; i++) {
    member_ref m = {cv->tenant_id, cv->conversation_id, cv->direct_users[i]};
    ch.user_id = cv->direct_users[i];
    rc = member_join(c, &m, &ch, 1, 0, r->now);
  }
  return rc;
}

const sq_op sq_op_conv_create = {"conversations.create", true, conv_create_prepare,
                                 conv_create_exec,       NULL, GROUP_ERRORS};

static int conv_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_conv_get_req *r = (void *)base;
  r->out = (qim_store_conversation){0};
  return 0;
}

static void conv_get_discard(qim_store_req *base) {
  qim_store_conv_get_req *r = (void *)base;
  qim_store_conversation_free(&r->out);
}

static int conv_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_conv_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "SELECT " CONV_COLUMNS
                                " FROM conversations c"
                                " WHERE c.tenant=? AND c.conv=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  conv_from_row(st, 0, &r->out);
  return 0;
}

const sq_op sq_op_conv_get = {"conversations.get", false,       conv_get_prepare, conv_get_exec,
                              conv_get_discard,    GROUP_ERRORS};

static int conv_update_exec(sq_conn *c, qim_store_req *base) {
  qim_store_conv_update_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE conversations SET public_json=coalesce(?3, public_json),"
                             " deleted=(deleted OR ?4), updated_at=?5 WHERE tenant=?1 AND conv=?2");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_text(st, 3, r->public_json);
  sqlite3_bind_int(st, 4, r->mark_deleted);
  sq_bind_u64(st, 5, r->now);
  return sq_run_matched(c, st);
}

const sq_op sq_op_conv_update = {"conversations.update", true, NULL,
                                 conv_update_exec,       NULL, GROUP_ERRORS};

/* ---- members_change ------------------------------------------------------------------------- */

typedef struct member_state {
  bool exists, current, banned;
  qim_group_role role;
  qim_conversation_seq joined_at;
} member_state;

static int member_state_get(sq_conn *c, const member_ref *m, member_state *out) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT role, joined_at, left_at IS NULL, banned FROM members"
                             " WHERE tenant=? AND conv=? AND user=?");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  *out = (member_state){0};
  if (rc == 0) return 0;
  out->exists = true;
  out->role = (qim_group_role)sqlite3_column_int(st, 0);
  out->joined_at = sq_col_u64(st, 1);
  out->current = sqlite3_column_int(st, 2) != 0;
  out->banned = sqlite3_column_int(st, 3) != 0;
  return 0;
}

typedef struct change_ctx {
  uint64_t version;              /* the new membership version */
  qim_conversation_seq position; /* latest_seq: joined_at / left_at */
  uint64_t now;
  int64_t count; /* current members, as changes apply */
} change_ctx;

static int member_leave(sq_conn *c, const member_ref *m, bool ban, change_ctx *x) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE members SET left_at=?4, banned=?5, updated_at=?6"
                             " WHERE tenant=?1 AND conv=?2 AND user=?3");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  sq_bind_u64(st, 4, x->position);
  sqlite3_bind_int(st, 5, ban);
  sq_bind_u64(st, 6, x->now);
  int rc = sq_run(c, st);
  if (rc == 0) rc = version_close(c, m, x->version);
  if (rc == 0) rc = shard_count_add(c, m, -1);
  x->count--;
  return rc;
}

/* BAN of someone who already left: only the flag (there is no stretch to close). */
static int member_ban_former(sq_conn *c, const member_ref *m, uint64_t now) {
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE members SET banned=1, updated_at=?4"
                             " WHERE tenant=?1 AND conv=?2 AND user=?3");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  sq_bind_u64(st, 4, now);
  return sq_run(c, st);
}

static int member_modify(sq_conn *c, const member_ref *m, const qim_store_member_change *ch,
                         const member_state *ms, change_ctx *x) {
  sqlite3_stmt *st =
      sq_prep(c,
              "UPDATE members SET role=?4, mode_want=?5, mode_given=?6, updated_at=?7"
              " WHERE tenant=?1 AND conv=?2 AND user=?3");
  if (!st) return sq_last_error(c);
  bind_member(st, m);
  sqlite3_bind_int(st, 4, (int)ch->role);
  sq_bind_u64(st, 5, ch->mode_want);
  sq_bind_u64(st, 6, ch->mode_given);
  sq_bind_u64(st, 7, x->now);
  int rc = sq_run(c, st);
  if (rc || ch->role == ms->role) return rc;
  /* A role change is a new stretch: snapshots before this version keep the old role. */
  rc = version_close(c, m, x->version);
  return rc ? rc : version_open(c, m, x->version, ch->role, ms->joined_at);
}

static int apply_change(sq_conn *c, const member_ref *m, const qim_store_member_change *ch,
                        change_ctx *x) {
  member_state ms = {0};
  int rc = member_state_get(c, m, &ms);
  if (rc) return rc;
  switch (ch->op) {
    case QIM_STORE_MEMBER_ADD:
      if (ms.current) return qim_err_raise(QIM_E_GROUP_ALREADY_EXISTS);
      if (ms.banned) return qim_err_raise(QIM_E_GROUP_PERMISSION_DENIED);
      x->count++;
      return member_join(c, m, ch, x->version, x->position, x->now);
    case QIM_STORE_MEMBER_REMOVE:
    case QIM_STORE_MEMBER_BAN:
      if (ms.current) return member_leave(c, m, ch->op == QIM_STORE_MEMBER_BAN, x);
      if (ch->op == QIM_STORE_MEMBER_BAN && ms.exists) return member_ban_former(c, m, x->now);
      return qim_err_raise(QIM_E_GROUP_NOT_FOUND);
    case QIM_STORE_MEMBER_UPDATE:
      if (!ms.current) return qim_err_raise(QIM_E_GROUP_NOT_FOUND);
      return member_modify(c, m, ch, &ms, x);
  }
  return -EINVAL;
}

static int members_change_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_members_change_req *r = (void *)base;
  if (!r->change_count || !r->changes) return -EINVAL;
  for (size_t i = 0; i < r->change_count; i++)
    if ((unsigned)r->changes[i].op > QIM_STORE_MEMBER_UPDATE) return -EINVAL;
  return 0;
}

static int members_change_exec(sq_conn *c, qim_store_req *base) {
  qim_store_members_change_req *r = (void *)base;
  sqlite3_stmt *st =
      sq_prep(c,
              "SELECT latest_seq, membership_version, member_count FROM conversations"
              " WHERE tenant=? AND conv=? AND NOT deleted");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  int rc = sq_step(c, st);
  if (rc < 0) return rc;
  if (rc == 0) return qim_err_raise(QIM_E_GROUP_NOT_FOUND);
  int64_t before = (int64_t)sq_col_u64(st, 2);
  change_ctx x = {sq_col_u64(st, 1) + 1, sq_col_u64(st, 0), r->now, before};
  for (size_t i = 0; i < r->change_count; i++) {
    member_ref m = {r->tenant_id, r->conversation_id, r->changes[i].user_id};
    if ((rc = apply_change(c, &m, &r->changes[i], &x))) return rc;
  }
  /* Only growth is refused: a group already above a lowered limit can still shrink. */
  if (r->member_limit && x.count > (int64_t)r->member_limit && x.count > before)
    return qim_err_raise(QIM_E_GROUP_MEMBER_LIMIT_EXCEEDED);
  st = sq_prep(c,
               "UPDATE conversations SET membership_version=?3, member_count=?4, updated_at=?5"
               " WHERE tenant=?1 AND conv=?2");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u64(st, 3, x.version);
  sqlite3_bind_int64(st, 4, x.count);
  sq_bind_u64(st, 5, r->now);
  if ((rc = sq_run(c, st))) return rc;
  r->out_version = x.version;
  r->out_position = x.position;
  return 0;
}

const sq_op sq_op_members_change = {"conversations.members_change",
                                    true,
                                    members_change_prepare,
                                    members_change_exec,
                                    NULL,
                                    GROUP_ERRORS};

/* ---- member reads ---------------------------------------------------------------------------- */

static int member_get_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_member_get_req *r = (void *)base;
  r->out = (qim_store_member){0};
  return 0;
}

static void member_get_discard(qim_store_req *base) {
  qim_store_member_get_req *r = (void *)base;
  qim_store_member_free(&r->out);
}

static int member_get_exec(sq_conn *c, qim_store_req *base) {
  qim_store_member_get_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c, "SELECT " MEMBER_COLUMNS
                                " FROM members m"
                                " WHERE m.tenant=? AND m.conv=? AND m.user=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->user_id.v);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  member_from_row(st, 0, &r->out);
  return 0;
}

const sq_op sq_op_member_get = {"conversations.member_get", false,
                                member_get_prepare,         member_get_exec,
                                member_get_discard,         GROUP_ERRORS};

static int members_at_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_members_at_req *r = (void *)base;
  r->out_members = NULL;
  r->out_count = 0;
  r->out_has_more = false;
  return r->limit > 0 ? 0 : -EINVAL;
}

static void members_at_discard(qim_store_req *base) {
  qim_store_members_at_req *r = (void *)base;
  qim_free(r->out_members);
  r->out_members = NULL;
  r->out_count = 0;
  r->out_has_more = false;
}

/* The readable versions of a conversation: [floor, current] (floor 0 = nothing pruned). */
static int version_bounds(sq_conn *c, qim_tenant_id t, qim_conversation_id conv, uint64_t *floor,
                          uint64_t *current) {
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT membership_floor, membership_version FROM conversations"
                             " WHERE tenant=? AND conv=?");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, t, conv);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  *floor = sq_col_u64(st, 0);
  *current = sq_col_u64(st, 1);
  return 0;
}

static int members_at_exec(sq_conn *c, qim_store_req *base) {
  qim_store_members_at_req *r = (void *)base;
  uint64_t floor = 0, current = 0;
  int rc = version_bounds(c, r->tenant_id, r->conversation_id, &floor, &current);
  if (rc) return rc;
  if (r->version == 0 || r->version < floor || r->version > current)
    return qim_err_raise(QIM_E_FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE);
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT user, role, joined_at FROM member_versions"
                             " WHERE tenant=?1 AND conv=?2 AND user > ?3 AND from_version <= ?4"
                             " AND to_version > ?4 ORDER BY user LIMIT ?5");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  if (r->has_after)
    sq_bind_u128(st, 3, r->after_user.v);
  else
    sq_bind_blob(st, 3, NULL, 0); /* the empty blob sorts before every id */
  sq_bind_u64(st, 4, r->version);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)r->limit + 1);
  r->out_members = qim_malloc(((size_t)(r->limit < 256 ? r->limit : 256)) * sizeof *r->out_members);
  size_t cap = r->limit < 256 ? r->limit : 256;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->out_count == r->limit) {
      r->out_has_more = true;
      break;
    }
    if (r->out_count == cap) {
      cap *= 2;
      r->out_members = qim_realloc(r->out_members, cap * sizeof *r->out_members);
    }
    qim_group_member *g = &r->out_members[r->out_count++];
    *g = (qim_group_member){0};
    g->user_id.v = sq_col_u128(st, 0);
    g->role = (qim_group_role)sqlite3_column_int(st, 1);
    g->joined_at = sq_col_u64(st, 2);
  }
  return rc < 0 ? rc : 0;
}

const sq_op sq_op_members_at = {"conversations.members_at", false,
                                members_at_prepare,         members_at_exec,
                                members_at_discard,         FANOUT_ERRORS};

/* ---- receipts
 * ------------------------------------------------------------------------------------ */

static int member_receipt_exec(sq_conn *c, qim_store_req *base) {
  qim_store_member_receipt_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "SELECT m.read_seq, m.recv_seq, c.latest_seq FROM members m"
                             " JOIN conversations c ON c.tenant=m.tenant AND c.conv=m.conv"
                             " WHERE m.tenant=? AND m.conv=? AND m.user=? AND m.left_at IS NULL");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->user_id.v);
  int rc = sq_step_row(c, st);
  if (rc) return rc;
  uint64_t read = sq_col_u64(st, 0), recv = sq_col_u64(st, 1), latest = sq_col_u64(st, 2);
  /* Nobody reads what does not exist yet: values clamp to latest_seq. */
  uint64_t want_read = r->read_seq < latest ? r->read_seq : latest;
  uint64_t want_recv = r->recv_seq > r->read_seq ? r->recv_seq : r->read_seq;
  if (want_recv > latest) want_recv = latest;
  r->out_read = want_read > read ? want_read : read;
  r->out_recv = want_recv > recv ? want_recv : recv;
  if (r->out_read == read && r->out_recv == recv) return 0;
  st = sq_prep(c,
               "UPDATE members SET read_seq=?4, recv_seq=?5 WHERE tenant=?1 AND conv=?2"
               " AND user=?3");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->user_id.v);
  sq_bind_u64(st, 4, r->out_read);
  sq_bind_u64(st, 5, r->out_recv);
  return sq_run(c, st);
}

const sq_op sq_op_member_receipt = {
    "conversations.member_receipt", true, NULL, member_receipt_exec, NULL, GROUP_ERRORS};

/* ---- a member's own private ----------------------------------------------------------------- */

static int member_private_exec(sq_conn *c, qim_store_req *base) {
  qim_store_member_private_req *r = (void *)base;
  sqlite3_stmt *st = sq_prep(c,
                             "UPDATE members SET private_json=?4, updated_at=?5 WHERE tenant=?1 AND conv=?2"
                             " AND user=?3 AND left_at IS NULL AND NOT banned AND EXISTS (SELECT 1 FROM"
                             " conversations WHERE tenant=?1 AND conv=?2 AND NOT deleted)");
  if (!st) return sq_last_error(c);
  sq_bind_conv(st, 1, r->tenant_id, r->conversation_id);
  sq_bind_u128(st, 3, r->user_id.v);
  sq_bind_text(st, 4, r->private_json);
  sq_bind_u64(st, 5, r->now);
  int rc = sq_run(c, st);
  if (rc == 0 && sqlite3_changes(c->db) == 0) rc = -ENOENT;
  return rc;
}

const sq_op sq_op_member_private = {
    "conversations.member_private", true, NULL, member_private_exec, NULL, GROUP_ERRORS};

/* ---- subscriptions
 * -------------------------------------------------------------------------------- */

/* The cursor is the (last_activity_id, conversation_id) of the page's last row. */
#define SUB_CURSOR_LEN 32

static int subscriptions_prepare(const sq_store *st, qim_store_req *base) {
  (void)st;
  qim_store_subscriptions_req *r = (void *)base;
  r->out_members = NULL;
  r->out_convs = NULL;
  r->out_count = 0;
  r->out_next = (qim_page_cursor){{NULL, 0}};
  size_t n = r->cursor.bytes.n;
  if (r->limit == 0 || (n != 0 && n != SUB_CURSOR_LEN) || (n && !r->cursor.bytes.p)) return -EINVAL;
  return 0;
}

static void subscriptions_discard(qim_store_req *base) {
  qim_store_subscriptions_req *r = (void *)base;
  for (size_t i = 0; i < r->out_count; i++) {
    qim_store_member_free(&r->out_members[i]);
    qim_store_conversation_free(&r->out_convs[i]);
  }
  qim_free(r->out_members);
  qim_free(r->out_convs);
  qim_free(r->out_next.bytes.p);
  r->out_members = NULL;
  r->out_convs = NULL;
  r->out_count = 0;
  r->out_next = (qim_page_cursor){{NULL, 0}};
}

static void make_cursor(qim_store_subscriptions_req *r) {
  const qim_store_conversation *last = &r->out_convs[r->out_count - 1];
  uint8_t *p = qim_malloc(SUB_CURSOR_LEN);
  memcpy(p, last->last_activity_id.b, 16);
  qim_u128_to_be(last->conversation_id.v, p + 16);
  r->out_next.bytes = (qim_bytes){p, SUB_CURSOR_LEN};
}

static int subscriptions_exec(sq_conn *c, qim_store_req *base) {
  qim_store_subscriptions_req *r = (void *)base;
  bool first = r->cursor.bytes.n == 0;
  sqlite3_stmt *st = sq_prep(c, "SELECT " MEMBER_COLUMNS ", " CONV_COLUMNS
                                " FROM members m"
                                " JOIN conversations c ON c.tenant=m.tenant AND c.conv=m.conv"
                                " WHERE m.tenant=?1 AND m.user=?2"
                                " AND (?3 OR (c.last_activity, c.conv) < (?4, ?5))"
                                " ORDER BY c.last_activity DESC, c.conv DESC LIMIT ?6");
  if (!st) return sq_last_error(c);
  sq_bind_u128(st, 1, r->tenant_id.v);
  sq_bind_u128(st, 2, r->user_id.v);
  sqlite3_bind_int(st, 3, first);
  sq_bind_blob(st, 4, first ? NULL : r->cursor.bytes.p, first ? 0 : 16);
  sq_bind_blob(st, 5, first ? NULL : r->cursor.bytes.p + 16, first ? 0 : 16);
  sqlite3_bind_int64(st, 6, (sqlite3_int64)r->limit + 1);
  size_t cap = 0;
  int rc;
  bool more = false;
  while ((rc = sq_step(c, st)) == 1) {
    if (r->out_count == r->limit) {
      more = true;
      break;
    }
    if (r->out_count == cap) {
      cap = cap ? cap * 2 : 16;
      r->out_members = qim_realloc(r->out_members, cap * sizeof *r->out_members);
      r->out_convs = qim_realloc(r->out_convs, cap * sizeof *r->out_convs);
    }
    member_from_row(st, 0, &r->out_members[r->out_count]);
    conv_from_row(st, 13, &r->out_convs[r->out_count]);
    r->out_count++;
  }
  if (rc < 0) return rc;
  if (more) make_cursor(r);
  return 0;
}

const sq_op sq_op_subscriptions = {"conversations.subscriptions", false,
                                   subscriptions_prepare,         subscriptions_exec,
                                   subscriptions_discard,         GROUP_ERRORS};
