/*
 * group_page.c — member pages (MemberPageRequest → MemberPage). A listing reads one
 * immutable membership version from start to end: the first page fixes the version
 * current at that moment, and the cursor carries it with the last user returned, so
 * joins and leaves during paging change nothing in the listing (no member twice, none
 * skipped); a new listing sees them.
 */
#include <errno.h>

#include "group/group_int.h"
#include "qim/err.h"
#include "qim/mem.h"
#include "qim/record.h"

/* Where the page starts: from the cursor, or the first page of the current version. */
static int page_start(const qim_member_page_request *req, const qim_store_conversation *conv,
                      qim_store_members_at_req *r) {
  r->version = conv->membership_version;
  if (!req->has_cursor) return 0;
  qim_group_cursor c;
  int rc = qim_group_cursor_decode(&req->cursor, conv->conversation_id, &c);
  if (rc) return rc;
  r->version = c.version; /* above the current one or pruned: the store says Unavailable */
  r->has_after = true;
  r->after_user = c.last_user;
  return 0;
}

int qim_group_member_page(qim_groups *g, const qim_member_page_request *req, qim_member_page *out) {
  *out = (qim_member_page){0};
  qim_store_conversation conv;
  uint32_t mode;
  int rc = qim__group_load_actor(g, &req->actor, req->group_id, &conv, &mode);
  if (rc) return rc;
  qim_store_members_at_req r = {.tenant_id = req->actor.tenant_id, .conversation_id = conv.conversation_id};
  r.limit = req->limit == 0 ? g->cfg.page_default : req->limit > g->cfg.page_max ? g->cfg.page_max : req->limit;
  rc = qim_group_rule_list(mode);
  if (!rc) rc = page_start(req, &conv, &r);
  if (!rc) {
    rc = QIM_STORE_SYNC(g->store, conversations.members_at, &r);
    if (rc) rc = qim__group_store_error(rc);
  }
  qim_store_conversation_free(&conv);
  if (rc) return rc;
  out->members = r.out_members;
  out->member_count = r.out_count;
  out->has_more = r.out_has_more && r.out_count > 0;
  if (out->has_more) {
    qim_group_cursor next = {r.conversation_id, r.version, r.out_members[r.out_count - 1].user_id};
    qim_group_cursor_encode(&next, &out->next_cursor);
    out->has_next_cursor = true;
  }
  return 0;
}
