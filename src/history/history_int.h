/*
 * history_int.h — private to the history module (src/history/):
 *   history.c    lifecycle, configuration, the caller's view of a conversation, store errors
 *   control.c    Control messages: JSON, derived ClientMessageIds, commit with retries
 *   content.c    Tinode head/content ↔ MessageContent
 *   query.c      HistoryQuery, get data, {data} frames
 *   dellog.c     get del
 *   deletion.c   del msg: validation, the per-message judgement, applying it
 *   publish.c    pub and edits
 *   receipt.c    notes, unread
 *   retention.c  the sweeper
 */
#ifndef QIM_HISTORY_INT_H
#define QIM_HISTORY_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/periodic.h"
#include "history/history.h"

/* The sweeper's memory per (tenant, class): records created before `before` were all
 * seen by an earlier pass, so later passes start a little below it (slack). */
typedef struct qim__sweep_mark {
  qim_tenant_id tenant;
  qim_retention_class cls;
  qim_timestamp_millis before;
} qim__sweep_mark;

struct qim_history {
  qim_store *store;
  qim_commit *commit;
  const qim_clock *clock;
  qim_history_config cfg; /* tenants / tenant_ages point at the copies below */
  qim_tenant_id *tenants;
  qim_history_tenant_age *ages;
  pthread_mutex_t sweep_mu; /* one sweep at a time; guards marks */
  qim__sweep_mark *marks;
  size_t mark_count;
  qim_periodic task; /* the sweeper task */
};

/* How a caller stands in one conversation. */
typedef struct qim__view {
  qim_store_conversation conv;    /* owned */
  qim_store_member member;        /* owned */
  uint32_t mode;                  /* effective: want & given */
  bool current;                   /* a member now (not left, not banned) */
  qim_conversation_seq low, high; /* the window (low, high] */
} qim__view;

enum { QIM__NEED_READ = 0, QIM__NEED_CURRENT = 1 };

/* Loads conversation and member row and checks access: R always; a current member when
 * `need` is QIM__NEED_CURRENT. HistoryAccessDenied otherwise. On error *v owns nothing. */
int qim__history_view(qim_history *h, const qim_authenticated_actor *actor,
                      qim_conversation_id conv, int need, qim__view *v);
/* The same, with the record query `also` run at the same moment (its req is set here; its
 * outcome is in also->req.status and its outputs, which the caller owns when 0 — also
 * when the view is refused). */
int qim__history_view_and(qim_history *h, const qim_authenticated_actor *actor,
                          qim_conversation_id conv, int need, qim_store_record_query_req *also,
                          qim__view *v);
void qim__view_free(qim__view *v);

/* A store status in this module's vocabulary: -EAGAIN → QIM_AGAIN; domain codes pass;
 * -errno → MESSAGE_STORE_UNAVAILABLE (raised). */
int qim__history_store_error(int rc);

/* Runs a store call synchronously and maps its failure. */
#define QIM__HSYNC(h, call, r) qim__history_store_error(QIM_STORE_SYNC((h)->store, call, r))

/* Milliseconds now, from the injected clock. */
static inline uint64_t qim__history_now(const qim_history *h) {
  return qim_clock_wall_ms(h->clock);
}

/* Frees the records of a query request's output. */
void qim__records_free(qim_message_record *r, size_t n);

/* ---- control.c -------------------------------------------------------------------------- */

/* Distinct ops of the Control messages; part of each derived ClientMessageId. */
typedef enum qim__control_op {
  QIM__CONTROL_EDIT = 1,
  QIM__CONTROL_DEL_HARD = 2,
  QIM__CONTROL_DEL_SOFT = 3,
  QIM__CONTROL_READ = 4,
  QIM__CONTROL_EXPIRE = 5,
} qim__control_op;

/*
 * Commits `payload` (a JSON object, consumed) as a Control message attributed to `actor`;
 * `audience_user` non-NULL: audience Direct{that user} (only its own devices), else the
 * conversation's. The ClientMessageId is derived from (op, conversation, a, b) so a retry
 * of the same change is the same message. Transient failures are retried
 * (control_attempts); COMMIT_RECOVERABLE counts as committed. Returns 0 or the commit's
 * error (logged); never undoes the change.
 */
int qim__history_control(qim_history *h, qim__control_op op, const qim_authenticated_actor *actor,
                         qim_conversation_id conv, const qim_user_id *audience_user, uint64_t a,
                         qim_u128 b, json_t *payload, const qim_trace_id *trace);

/* Tinode delseq form: [{"low":l,"hi":h}], "hi" left out for a single message. New ref. */
json_t *qim__ranges_json(const qim_store_seq_range *r, size_t n);
/* "usr…" string of a user, new ref. */
json_t *qim__user_json(qim_user_id u);

/* ---- ranges (deletion.c) ---------------------------------------------------------------- */

/* Sorts and merges [low, hi) ranges in place (empty ones dropped); returns the count. */
size_t qim__ranges_merge(qim_store_seq_range *r, size_t n);

#endif
