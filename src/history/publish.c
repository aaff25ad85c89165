/*
 * publish.c — a Tinode {pub} into the commit, and what Tinode does around it: the sender
 * has read and received its own message (store.go Messages.Save), and a pub whose
 * head.replace names ":N" is an edit — the new text is a new seq, N is marked Edited and a
 * Control tells every member's devices (the Tinode SDK itself only links the two by
 * head.replace, PROTOCOL.md §9).
 */
#include <errno.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

/* The record N the sender wants to replace: it must see it (window, not deleted, not
 * soft-deleted by itself) and have sent it. */
static int edit_check(qim_history *h, const qim_history_pub *p, qim_conversation_seq n) {
  qim__view v;
  int rc = qim__history_view(h, &p->actor, p->conversation_id, QIM__NEED_CURRENT, &v);
  if (rc) return rc;
  qim_store_seq_range one = {n, n + 1};
  qim_store_record_query_req q = {.tenant_id = p->actor.tenant_id,
                                  .conversation_id = p->conversation_id,
                                  .viewer = p->actor.user_id,
                                  .window_low = v.low,
                                  .window_high = v.high,
                                  .ranges = &one,
                                  .range_count = 1,
                                  .direction = QIM_HISTORY_DIRECTION_NEWER,
                                  .skip_deleted = true,
                                  .max_items = 1};
  rc = QIM__HSYNC(h, history.query, &q);
  qim__view_free(&v);
  if (rc) return rc;
  bool found = q.out_count == 1;
  bool own = found && qim_u128_eq(q.out_records[0].sender.user_id.v, p->actor.user_id.v);
  qim__records_free(q.out_records, q.out_count);
  if (!found) return qim_err_raise(QIM_E_COMMIT_INVALID_REFERENCE);
  return own ? 0 : qim_err_raise(QIM_E_MESSAGE_STORE_EDIT_NOT_PERMITTED);
}

/* Mentions of users who are not in the conversation are text, not references: they are
 * dropped rather than failing the message (the commit would refuse them). */
static int mentions_filter(qim_history *h, const qim_history_pub *p, qim_history_tinode_msg *m) {
  if (m->mention_count == 0) return 0;
  qim_store_conv_get_req cg = {.tenant_id = p->actor.tenant_id,
                               .conversation_id = p->conversation_id};
  int rc = QIM__HSYNC(h, conversations.get, &cg);
  if (rc) return rc == -ENOENT ? 0 : rc; /* the commit reports the missing conversation */
  size_t k = 0;
  for (size_t i = 0; rc == 0 && i < m->mention_count; i++) {
    qim_user_id u = m->mentions[i];
    bool keep;
    if (cg.out.kind == QIM_CONVERSATION_DIRECT) {
      keep =
          qim_u128_eq(u.v, cg.out.direct_users[0].v) || qim_u128_eq(u.v, cg.out.direct_users[1].v);
    } else {
      qim_store_member_get_req mg = {
          .tenant_id = p->actor.tenant_id, .conversation_id = p->conversation_id, .user_id = u};
      int s = QIM_STORE_SYNC(h->store, conversations.member_get, &mg);
      keep = s == 0 && !mg.out.has_left_at && !mg.out.banned;
      if (s == 0) qim_store_member_free(&mg.out);
      if (s && s != -ENOENT) rc = qim__history_store_error(s);
    }
    if (keep) m->mentions[k++] = u;
  }
  m->mention_count = k;
  qim_store_conversation_free(&cg.out);
  return rc;
}

/* N becomes Edited unless it went meanwhile (a delete wins over an edit). */
static int mark_edited(qim_history *h, const qim_history_pub *p, qim_conversation_seq n) {
  qim_store_record_get_req g = {
      .tenant_id = p->actor.tenant_id, .conversation_id = p->conversation_id, .seq = n};
  int rc = QIM__HSYNC(h, history.get, &g);
  if (rc) return rc;
  qim_message_state s = g.out.state;
  qim_message_record_free(&g.out);
  if (s == QIM_MESSAGE_STATE_DELETED || s == QIM_MESSAGE_STATE_RECALLED) return 0;
  qim_store_record_set_state_req q = {.tenant_id = p->actor.tenant_id,
                                      .conversation_id = p->conversation_id,
                                      .seq = n,
                                      .state = QIM_MESSAGE_STATE_EDITED,
                                      .now = qim__history_now(h)};
  return QIM__HSYNC(h, history.set_state, &q);
}

static int announce_edit(qim_history *h, const qim_history_pub *p, qim_conversation_seq n,
                         qim_conversation_seq by) {
  json_t *j = json_pack("{sssIsIso}", "op", "edit", "seq", (json_int_t)n, "replacement",
                        (json_int_t)by, "actor", qim__user_json(p->actor.user_id));
  return qim__history_control(h, QIM__CONTROL_EDIT, &p->actor, p->conversation_id, NULL, by,
                              (qim_u128){0, 0}, j, &p->trace_id);
}

/* After the commit: the sender's receipts, and an edit's marking and Control. Failures
 * here do not unsend the message; they are logged and reported. */
static void after_commit(qim_history *h, const qim_history_pub *p, const qim_history_tinode_msg *m,
                         qim_history_pub_result *out) {
  qim_conversation_seq seq = out->commit.ack.coordinates.conversation_seq;
  qim_store_member_receipt_req q = {.tenant_id = p->actor.tenant_id,
                                    .conversation_id = p->conversation_id,
                                    .user_id = p->actor.user_id,
                                    .read_seq = seq,
                                    .recv_seq = seq};
  int rc = QIM__HSYNC(h, conversations.member_receipt, &q);
  if (rc == 0) {
    out->read = q.out_read;
    out->recv = q.out_recv;
  } else {
    QIM_LOGW(&p->trace_id, "history.sender_receipt_failed", "seq=%llu err=%s",
             (unsigned long long)seq, qim_err_name(rc));
  }
  if (!m->has_replace) return;
  out->edit = true;
  out->replaced = m->replace;
  rc = mark_edited(h, p, m->replace);
  if (rc)
    QIM_LOGW(&p->trace_id, "history.mark_edited_failed", "seq=%llu err=%s",
             (unsigned long long)m->replace, qim_err_name(rc));
  out->control_status = announce_edit(h, p, m->replace, seq);
}

static int prepare(qim_history *h, const qim_history_pub *p, qim_history_tinode_msg *m) {
  int rc = qim_history_content_from_tinode(p->head, p->content, h->cfg.max_message_size,
                                           h->cfg.max_mentions, m);
  if (rc == 0 && m->has_replace) rc = edit_check(h, p, m->replace);
  if (rc == 0) rc = mentions_filter(h, p, m);
  return rc;
}

int qim_history_publish(qim_history *h, const qim_history_pub *p, qim_history_pub_result *out) {
  if (!h || !p || !out) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim_history_tinode_msg m;
  int rc = prepare(h, p, &m);
  if (rc) {
    qim_history_tinode_msg_free(&m);
    return out->commit.status = out->commit.error.code = rc;
  }
  qim_authenticated_send s = {
      .actor = p->actor,
      .request = {.request_id = p->request_id,
                  .client_message_id = p->client_message_id,
                  .conversation_id = p->conversation_id,
                  .content = m.content,
                  .mention_targets = m.mentions,
                  .mention_count = m.mention_count,
                  .has_reply_to = m.has_reply_to,
                  .reply_to_conversation_seq = m.reply_to},
      .trace_id = p->trace_id,
  };
  rc = qim_commit_send_sync(h->commit, &s, &out->commit);
  if (rc == 0) after_commit(h, p, &m, out);
  qim_history_tinode_msg_free(&m);
  return rc;
}
