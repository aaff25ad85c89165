/*
 * receipt.c — read and recv positions ({note what:"read"|"recv"}, PROTOCOL.md §10).
 *
 * The store keeps them forward-only (stale values are ignored, read implies recv), so a
 * note sent twice is harmless. Receipts are ephemeral for the other members (the gateway
 * relays {info} to online sessions, as Tinode does); the reader's own devices must agree
 * on its read position even when offline, so a read that moved is committed as a Control
 * whose audience is Direct{reader}: it reaches only that user's mailbox.
 */
#include <errno.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/err.h"
#include "qim/log.h"

static int announce_read(qim_history *h, const qim_history_note_req *n, qim_conversation_seq read,
                         qim_conversation_seq recv) {
  json_t *p = json_pack("{sssosIsI}", "op", "read", "user", qim__user_json(n->actor.user_id),
                        "read", (json_int_t)read, "recv", (json_int_t)recv);
  return qim__history_control(h, QIM__CONTROL_READ, &n->actor, n->conversation_id,
                              &n->actor.user_id, read, n->actor.user_id.v, p, &n->trace_id);
}

int qim_history_note(qim_history *h, const qim_history_note_req *n, qim_history_note_result *out) {
  if (!h || !n || !out || n->what > QIM_HISTORY_NOTE_READ) return -EINVAL;
  memset(out, 0, sizeof *out);
  qim__view v;
  int rc = qim__history_view(h, &n->actor, n->conversation_id, QIM__NEED_CURRENT, &v);
  if (rc) return rc;
  if (n->seq == 0 || n->seq > v.conv.latest_seq) {
    qim__view_free(&v);
    return qim_err_raise(QIM_E_MESSAGE_STORE_INVALID_RANGE);
  }
  qim_store_member_receipt_req q = {.tenant_id = n->actor.tenant_id,
                                    .conversation_id = n->conversation_id,
                                    .user_id = n->actor.user_id,
                                    .recv_seq = n->seq,
                                    .read_seq = n->what == QIM_HISTORY_NOTE_READ ? n->seq : 0};
  rc = QIM__HSYNC(h, conversations.member_receipt, &q);
  if (rc == -ENOENT)
    rc = qim_err_raise(QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED); /* left meanwhile */
  if (rc == 0) {
    bool read_moved = q.out_read > v.member.read_seq;
    out->changed = read_moved || q.out_recv > v.member.recv_seq;
    out->read = q.out_read;
    out->recv = q.out_recv;
    v.member.read_seq = q.out_read;
    out->unread = qim_history_unread(&v.conv, &v.member);
    if (read_moved) out->control_status = announce_read(h, n, q.out_read, q.out_recv);
  }
  qim__view_free(&v);
  return rc;
}
