/*
 * retention.c — how mailboxes forget: a lane's trim floor, and the shard's dispatch log below
 * the floors of all its lanes.
 *
 * Retention is by count and by age, counted in dispatch-log records (the shard's log is the
 * lane's history): a lane keeps at most retain_count records behind its watermark and none
 * created more than retain_age_ms ago. A pass scans the log forward from the current floor and
 * trims every record that breaks either rule, stopping at the first one that must be kept and
 * never reaching the last materialized record (the store requires floor <= materialized).
 *
 * LaneWatermark.floor is "the last trimmed seq + 1": the store deletes the lane's entries below
 * it, so a cursor whose last_applied_seq is at least floor - 1 has lost nothing, and one below
 * that has (CursorExpired, pull.c). Each pass scans a bounded number of records; a long backlog
 * is trimmed over several passes.
 *
 * The dispatch log itself is trimmed below the lowest floor of the shard's lanes (and never
 * past the slowest lane's read position), so a body that left every mailbox leaves the log too
 * (DESIGN.md §1 rule 7).
 */
#include <errno.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define SCAN_PAGE 256
#define SCAN_MAX 4096

typedef struct scan {
  mb_lane *l;
  mb_worker *w;
  uint64_t stop_offset;      /* the last materialized record: never trimmed */
  uint64_t now_ms;
  qim_mailbox_seq last_trimmed;
  size_t scanned;
  bool done;
} scan;

/* May record r go? */
static bool expendable(const scan *sc, const qim_store_log_record *r) {
  const qim_mailbox_options *o = &sc->l->sh->m->opt;
  if (o->retain_count != QIM_MAILBOX_KEEP_ALL && sc->stop_offset - r->offset >= o->retain_count) return true;
  if (o->retain_age_ms == QIM_MAILBOX_KEEP_FOREVER) return false;
  if (r->fence) return true; /* no age of its own; the next dispatch decides where we stop */
  qim_group_dispatch d;
  if (qim_group_dispatch_decode(r->payload.p, r->payload.n, &d)) return true; /* never materialized */
  bool old = sc->now_ms > d.created_at && sc->now_ms - d.created_at > o->retain_age_ms;
  qim_group_dispatch_free(&d);
  return old;
}

/* Scans one page from `from`; advances sc. 0 or an error. */
static int scan_page(scan *sc, uint64_t *from) {
  qim_store_log_read_req r = {
      .stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, sc->l->sh->id}, .from = *from, .max = SCAN_PAGE};
  int rc;
  QIM__MB_CALL(rc, sc->w, logs.read, &r);
  if (rc == QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE && r.out_trim > *from) {
    *from = r.out_trim; /* trimmed before us (another pass, or by hand): continue there */
    return 0;
  }
  if (rc) return rc;
  size_t i = 0;
  for (; i < r.out_count && !sc->done; i++) {
    const qim_store_log_record *rec = &r.out_records[i];
    if (rec->offset >= sc->stop_offset || !expendable(sc, rec)) {
      sc->done = true;
      break;
    }
    sc->last_trimmed = qim_mailbox_seq_make(rec->epoch, rec->offset);
    *from = rec->offset + 1;
    sc->scanned++;
  }
  if (r.out_count == 0) sc->done = true;
  qim_store_log_read_free(&r);
  return 0;
}

/* The lowest floor offset and read position over the shard's lanes (0 when a lane has no
 * floor yet: nothing can be trimmed). */
static void shard_bounds(const mb_shard *sh, uint32_t lanes, uint64_t *below, uint64_t *protect) {
  *below = UINT64_MAX, *protect = UINT64_MAX;
  for (uint32_t i = 0; i < lanes; i++) {
    uint64_t floor = atomic_load(&sh->lanes[i].floor);
    uint64_t f = floor ? qim_mailbox_seq_offset(floor) : 0;
    uint64_t n = atomic_load(&sh->lanes[i].next_offset_pub);
    if (f < *below) *below = f;
    if (n < *protect) *protect = n;
  }
}

static void trim_log(mb_lane *l, mb_worker *w) {
  const mb_shard *sh = l->sh;
  uint64_t below, protect;
  shard_bounds(sh, sh->m->opt.shards.lanes_per_shard, &below, &protect);
  if (below == 0 || protect == 0) return;
  qim_store_log_trim_req t = {
      .stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, sh->id}, .below = below, .protect = protect};
  int rc;
  QIM__MB_CALL(rc, w, logs.trim, &t);
  if (rc) QIM_LOGW(NULL, "mailbox.log_trim_failed", "shard=%u error=%s", sh->id, qim_err_name(rc));
}

int qim__mb_retention_pass(mb_lane *l, mb_worker *w) {
  qim_mailbox *m = l->sh->m;
  if (m->opt.retain_count == QIM_MAILBOX_KEEP_ALL && m->opt.retain_age_ms == QIM_MAILBOX_KEEP_FOREVER) return 0;
  if (l->wm.materialized == 0) return 0;
  scan sc = {.l = l, .w = w, .stop_offset = qim_mailbox_seq_offset(l->wm.materialized),
             .now_ms = qim_clock_wall_ms(m->clock)};
  uint64_t from = l->wm.floor ? qim_mailbox_seq_offset(l->wm.floor) : 0;
  while (!sc.done && sc.scanned < SCAN_MAX) {
    int rc = scan_page(&sc, &from);
    if (rc) {
      QIM_LOGW(NULL, "mailbox.retention_failed", "shard=%u lane=%u error=%s", l->sh->id, l->id, qim_err_name(rc));
      return rc;
    }
  }
  qim_mailbox_seq floor = sc.last_trimmed ? sc.last_trimmed + 1 : 0;
  if (floor > l->wm.floor) {
    qim_store_watermark_advance_req r = {.advance = {l->sh->id, l->id, l->wm.materialized, floor},
                                         .owner_epoch = l->sh->epoch};
    int rc;
  QIM__MB_CALL(rc, w, mailboxes.watermark_advance, &r);
    if (rc) return rc;
    l->wm.floor = floor;
    atomic_store(&l->floor, floor);
    pthread_mutex_lock(&l->mu);
    l->wm_pub = l->wm;
    l->trimmed += sc.scanned;
    pthread_mutex_unlock(&l->mu);
    QIM_LOGI(NULL, "mailbox.lane_trimmed", "shard=%u lane=%u floor=%llu records=%zu", l->sh->id, l->id,
             (unsigned long long)floor, sc.scanned);
  }
  trim_log(l, w);
  return 0;
}
