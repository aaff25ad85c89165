/*
 * materializer.c — one step of a (shard, lane) task: read the shard's dispatch log from the
 * lane's position, write this lane's event groups, advance the lane watermark, then push.
 *
 * A step:
 *   1. reads up to read_batch records from next_offset (the record after the watermark);
 *   2. plans them: each dispatch is decoded and checked (DispatchCorrupt otherwise), its
 *      MailboxSeq taken from the record — qim_mailbox_seq_make(record.epoch, record.offset),
 *      the epoch the store STAMPED at append, never ours — and its recipients filtered to
 *      this lane, chunk by chunk; fences only move the position; planning stops after
 *      step_entries entries;
 *   3. for records that may carry earlier progress (after a takeover, a crash or a failed
 *      step) reads their DispatchProgress, so chunks already written are not written again
 *      and the progress written next includes what is stored;
 *   4. writes one AppendMailboxBatch per (dispatch, lane, non-empty chunk) in WAVES: the
 *      k-th chunk of every dispatch of the step, all in flight at once (the store group-
 *      commits them), then the (k+1)-th once those are durable. So a dispatch's progress
 *      never claims a chunk that is not written, and a batch's completed_chunks (every
 *      chunk up to it, plus what was stored) always contains what the store holds;
 *   5. advances the watermark over the longest prefix of records that are complete —
 *      fenced by our epoch — and hands that prefix's pushes to the lane's queue (flight.c),
 *      which emits them once the step is durable, after every earlier step's. A ready lane's
 *      step whose last wave carries the advance goes on once that wave has COMMITTED; other
 *      steps wait for their writes to be durable, as the waves before the last always do.
 * A failure advances nothing past the failing record. Transient failures back off and replay
 * (idempotent: the store answers a repeated batch with its original receipt, and a receipt
 * whose seq differs from ours is ProgressConflict); ShardNotOwned fences the lane;
 * DispatchCorrupt and ProgressConflict halt it on that record until the shard is acquired
 * again (a record that cannot be materialized is looked at, never skipped).
 */
#include <errno.h>
#include <string.h>

#include "mailbox/mailbox_int.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define RETRY_MAX_MS 5000

typedef struct mb_batch {
  qim_store_mailbox_append_req req;
  qim_append_mailbox_batch batch;
} mb_batch;

/* This lane's recipients of one chunk of a dispatch. */
typedef struct mb_chunk {
  size_t index;            /* into d.recipient_chunks */
  qim_user_id *users;
  size_t n;
} mb_chunk;

typedef struct mb_rec {
  const qim_store_log_record *log;
  qim_mailbox_seq seq;
  bool dispatch;           /* false: a fence */
  qim_group_dispatch d;    /* content moved into body */
  mb_body *body;
  qim_user_id *mentions;
  size_t mention_count;
  mb_chunk *chunks;
  size_t nchunks;
  qim_store_progress_get_req prog;
  bool has_prog;
  mb_batch *batches;
  size_t nbatches;
  int status;              /* 0, or why this record is not complete */
} mb_rec;

typedef struct mb_step {
  mb_lane *l;
  mb_shard *sh;
  mb_worker *w;
  qim_mailbox *m;
  qim_store_log_read_req read;
  mb_rec *recs;
  size_t n;
  int halt_rc;     /* DispatchCorrupt for the record right after the plan */
  size_t advanced; /* records the watermark covers already (advanced with the last wave) */
  qim_mailbox_seq from_materialized;  /* the lane's watermark when the step began (its
                                         position then is read.from) */
  /* the last wave, when it flies (flight.c): its request lives as long as the step */
  mb_flight *flight;
  qim_store_mailbox_append_req last;
  qim_append_mailbox_batch *last_batches;
  qim_durability_receipt *last_receipts;
} mb_step;

/* ---- planning ---------------------------------------------------------------------------------- */

static int corrupt(const mb_step *s, const qim_store_log_record *r, const char *why) {
  QIM_LOGE(NULL, "mailbox.dispatch_corrupt", "shard=%u lane=%u offset=%llu reason=%s", s->sh->id, s->l->id,
           (unsigned long long)r->offset, why);
  return qim_err_raise(QIM_E_MATERIALIZE_DISPATCH_CORRUPT);
}

/* Decodes and checks a dispatch record: 0 or DispatchCorrupt. */
static int decode(const mb_step *s, const qim_store_log_record *r, qim_group_dispatch *d) {
  if (r->offset > QIM_MAILBOX_OFFSET_MAX) return corrupt(s, r, "offset_over_40_bits");
  if (qim_group_dispatch_decode(r->payload.p, r->payload.n, d)) return corrupt(s, r, "undecodable");
  const char *why = NULL;
  qim_dispatch_id want = qim_dispatch_id_make(&d->source_message.message_id, s->sh->id);
  if (d->target_shard != s->sh->id)
    why = "other_shard";
  else if (memcmp(want.b, d->dispatch_id.b, sizeof want.b) != 0)
    why = "dispatch_id_mismatch";
  else if (qim_u128_is_zero(d->sender_id.v))
    why = "no_sender"; /* a version-1 record: it cannot say whose mailbox entries to write */
  if (!why) return 0;
  qim_group_dispatch_free(d);
  return corrupt(s, r, why);
}

/* Keeps this lane's recipients, chunk by chunk; returns how many. */
static size_t filter_lane(mb_step *s, mb_rec *rec) {
  const qim_shard_config *cfg = &s->m->opt.shards;
  size_t total = 0;
  rec->chunks = rec->d.chunk_count ? qim_calloc(rec->d.chunk_count, sizeof *rec->chunks) : NULL;
  for (size_t i = 0; i < rec->d.chunk_count; i++) {
    const qim_recipient_chunk *c = &rec->d.recipient_chunks[i];
    mb_chunk *mc = &rec->chunks[rec->nchunks];
    mc->index = i;
    mc->users = c->recipient_count ? qim_malloc(c->recipient_count * sizeof *mc->users) : NULL;
    for (size_t k = 0; k < c->recipient_count; k++)
      if (qim_lane_of_user(cfg, rec->d.tenant_id, c->recipient_ids[k]) == s->l->id)
        mc->users[mc->n++] = c->recipient_ids[k];
    if (mc->n == 0) {
      qim_free(mc->users);
      *mc = (mb_chunk){0};
      continue;
    }
    total += mc->n;
    rec->nchunks++;
  }
  return total;
}

/* Plans the records read; stops at a corrupt record (halt_rc) or after step_entries. */
static void plan(mb_step *s) {
  s->recs = qim_calloc(s->read.out_count, sizeof *s->recs);
  size_t entries = 0;
  for (size_t i = 0; i < s->read.out_count && (i == 0 || entries < s->m->opt.step_entries); i++) {
    const qim_store_log_record *r = &s->read.out_records[i];
    mb_rec *rec = &s->recs[s->n];
    rec->log = r;
    rec->seq = qim_mailbox_seq_make(r->epoch, r->offset);
    if (!r->fence) {
      int rc = decode(s, r, &rec->d);
      if (rc) {
        s->halt_rc = rc;
        break;
      }
      rec->dispatch = true;
      rec->body = qim__mb_body_new(&rec->d.content);
      qim_mailbox_mentions(&rec->body->content, &rec->mentions, &rec->mention_count);
      entries += filter_lane(s, rec);
    }
    s->n++;
  }
}

/* ---- earlier progress ----------------------------------------------------------------------------- */

/* Reads the stored progress of records in the replay window. */
static void read_progress(mb_step *s) {
  size_t asked = 0;
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    if (!rec->nchunks || rec->log->offset >= s->l->replay_until) continue;
    rec->prog.dispatch_id = rec->d.dispatch_id;
    rec->prog.lane = s->l->id;
    QIM__MB_SUBMIT(s->w, mailboxes.progress_get, &rec->prog);
    rec->has_prog = true;
    asked++;
  }
  if (!asked) return;
  qim__mb_wait(s->w);
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    if (rec->has_prog && rec->prog.req.status) rec->status = rec->prog.req.status;
  }
}

static bool stored_has(const mb_rec *rec, uint32_t chunk_id) {
  if (!rec->has_prog || !rec->prog.out_found) return false;
  for (size_t i = 0; i < rec->prog.out.completed_chunk_count; i++)
    if (rec->prog.out.completed_chunks[i] == chunk_id) return true;
  return false;
}

/* ---- batches ---------------------------------------------------------------------------------------- */

/* completed_chunks of the batch of d.recipient_chunks[upto]: every chunk id up to it (all of
 * them for the dispatch's last batch), plus what the store already holds. */
static void batch_progress(const mb_step *s, const mb_rec *rec, size_t upto, bool last, qim_dispatch_progress *p) {
  size_t n = last ? rec->d.chunk_count : upto + 1;
  size_t stored = rec->has_prog && rec->prog.out_found ? rec->prog.out.completed_chunk_count : 0;
  *p = (qim_dispatch_progress){.dispatch_id = rec->d.dispatch_id, .shard = s->sh->id, .lane = s->l->id};
  p->completed_chunks = qim_malloc((n + stored) * sizeof *p->completed_chunks);
  for (size_t i = 0; i < n; i++) p->completed_chunks[p->completed_chunk_count++] = rec->d.recipient_chunks[i].chunk_id;
  for (size_t i = 0; i < stored; i++)
    p->completed_chunks[p->completed_chunk_count++] = rec->prog.out.completed_chunks[i];
  if (last) {
    p->has_completed_at = true;
    p->completed_at = qim_clock_wall_ms(s->m->clock);
  }
}

static void fill_batch(const mb_step *s, mb_rec *rec, const mb_chunk *c, bool last, mb_batch *b) {
  qim_append_mailbox_batch *ab = &b->batch;
  *ab = (qim_append_mailbox_batch){.shard = s->sh->id, .lane = s->l->id, .dispatch_id = rec->d.dispatch_id,
                                   .chunk_id = rec->d.recipient_chunks[c->index].chunk_id,
                                   .mailbox_seq = rec->seq};
  ab->entries = qim_malloc(2 * c->n * sizeof *ab->entries);
  for (size_t k = 0; k < c->n; k++)
    ab->entry_count += qim__mb_event_group(&rec->d, rec->body, rec->seq, c->users[k], rec->mentions,
                                           rec->mention_count, ab->entries + ab->entry_count);
  batch_progress(s, rec, c->index, last, &ab->progress);
  b->req = (qim_store_mailbox_append_req){.batch = ab, .owner_epoch = s->sh->epoch};
}

/* One batch per chunk of this lane not already stored, in chunk order. */
static void build_batches(mb_step *s) {
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    if (rec->status || !rec->nchunks) continue;
    rec->batches = qim_calloc(rec->nchunks, sizeof *rec->batches);
    size_t todo = 0;
    for (size_t c = 0; c < rec->nchunks; c++)
      if (!stored_has(rec, rec->d.recipient_chunks[rec->chunks[c].index].chunk_id)) todo++;
    for (size_t c = 0; c < rec->nchunks; c++) {
      if (stored_has(rec, rec->d.recipient_chunks[rec->chunks[c].index].chunk_id)) continue;
      fill_batch(s, rec, &rec->chunks[c], rec->nbatches + 1 == todo, &rec->batches[rec->nbatches]);
      rec->nbatches++;
    }
  }
}

/* ---- waves ------------------------------------------------------------------------------------------- */

/* The outcome of one batch: its status, or ProgressConflict when the receipt names another seq
 * (the dispatch was materialized at another log position before). */
static int batch_outcome(const mb_step *s, const mb_rec *rec, const mb_batch *b) {
  if (b->req.req.status) return b->req.req.status;
  if (b->req.out.mailbox_seq == rec->seq) return 0;
  QIM_LOGE(&rec->d.trace_id, "mailbox.progress_conflict", "shard=%u lane=%u offset=%llu seq=%llu stored_seq=%llu",
           s->sh->id, s->l->id, (unsigned long long)rec->log->offset, (unsigned long long)rec->seq,
           (unsigned long long)b->req.out.mailbox_seq);
  return qim_err_raise(QIM_E_MATERIALIZE_PROGRESS_CONFLICT);
}

/* The wave's batches one request each, so a failure names its own record (after a combined
 * request failed: it wrote nothing). */
static void wave_apart(mb_step *s, size_t wave) {
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    if (!rec->status && wave < rec->nbatches)
      QIM__MB_SUBMIT(s->w, mailboxes.append, &rec->batches[wave].req);
  }
  qim__mb_wait(s->w);
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    if (!rec->status && wave < rec->nbatches)
      rec->status = batch_outcome(s, rec, &rec->batches[wave]);
  }
}

/* Is every record fine and `wave` the last one with batches? Then the wave's request also
 * carries the watermark advance over the whole step (one transaction: the watermark never
 * covers a dispatch that is not complete and durable). */
static bool wave_is_last(const mb_step *s, size_t wave) {
  for (size_t i = 0; i < s->n; i++)
    if (s->recs[i].status || s->recs[i].nbatches > wave + 1) return false;
  return true;
}

/* May the wave go on once its request has committed (flight.c)? When it is the step's last
 * and carries the watermark over every record, and the lane is past its replay. */
static bool wave_flies(const mb_step *s, size_t wave) {
  return wave_is_last(s, wave) && s->halt_rc == 0 && atomic_load(&s->l->ready);
}

/* Submits the wave's request and waits until it committed (it flies) or completed. */
static int wave_call(mb_step *s, size_t wave, qim_store_mailbox_append_req *r) {
  if (!wave_flies(s, wave)) {
    int rc;
    QIM__MB_CALL(rc, s->w, mailboxes.append, r);
    return rc;
  }
  qim__mb_flight_room(s->l);
  s->flight = qim__mb_flight_new(s->l);
  int rc = qim__mb_flight_submit(s->flight, r);
  if (rc) { /* never committed: the step goes on as one that waited */
    qim__mb_flight_free(s->flight);
    s->flight = NULL;
  }
  return rc;
}

/* The wave's batches in ONE request (one transaction); returns false when nothing was due. */
static bool wave_together(mb_step *s, size_t wave) {
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++) k += !s->recs[i].status && wave < s->recs[i].nbatches;
  if (!k) return false;
  qim_free(s->last_batches);
  qim_free(s->last_receipts);
  qim_append_mailbox_batch *v = s->last_batches = qim_malloc(k * sizeof *v);
  qim_durability_receipt *out = s->last_receipts = qim_calloc(k, sizeof *out);
  k = 0;
  for (size_t i = 0; i < s->n; i++)
    if (!s->recs[i].status && wave < s->recs[i].nbatches) v[k++] = s->recs[i].batches[wave].batch;
  qim_store_mailbox_append_req *r = &s->last;
  *r = (qim_store_mailbox_append_req){
      .batch = v, .batch_count = k, .out_receipts = out, .owner_epoch = s->sh->epoch};
  if (wave_is_last(s, wave)) r->advance_to = s->recs[s->n - 1].seq;
  int rc = wave_call(s, wave, r);
  if (rc == 0 && r->advance_to) s->advanced = s->n;
  k = 0;
  for (size_t i = 0; i < s->n && rc != QIM_E_MATERIALIZE_SHARD_NOT_OWNED; i++) {
    mb_rec *rec = &s->recs[i];
    if (rec->status || wave >= rec->nbatches) continue;
    mb_batch *b = &rec->batches[wave];
    b->req.req.status = rc;
    b->req.out = out[k++];
    if (rc == 0) rec->status = batch_outcome(s, rec, b);
  }
  if (rc == QIM_E_MATERIALIZE_SHARD_NOT_OWNED) /* every record of the wave: the lane is fenced */
    for (size_t i = 0; i < s->n; i++)
      if (!s->recs[i].status && wave < s->recs[i].nbatches) s->recs[i].status = rc;
  if (rc && rc != QIM_E_MATERIALIZE_SHARD_NOT_OWNED) wave_apart(s, wave);
  return true;
}

static void run_waves(mb_step *s) {
  size_t wave = 0;
  while (wave_together(s, wave)) wave++;
}

/* ---- finishing a step ---------------------------------------------------------------------------------- */

/* The pushes of records [0, done), in order. */
static mb_held *build_pushes(mb_step *s, size_t done, uint64_t *count) {
  mb_held *head = NULL, **tail = &head;
  for (size_t i = 0; i < done; i++) {
    mb_rec *rec = &s->recs[i];
    if (!rec->nbatches || !qim__mb_push_has_routes(s->m->push)) continue;
    mb_push_builder b;
    qim__mb_push_begin(&b, s->m->push, rec->body, &rec->d.trace_id);
    for (size_t k = 0; k < rec->nbatches; k++)
      qim__mb_push_add(&b, rec->batches[k].batch.entries, rec->batches[k].batch.entry_count);
    *count += qim__mb_push_finish(&b, &tail);
  }
  return head;
}

/* Moves the watermark over records [0, done), unless the last wave's request did: 0 or the
 * store's error. */
static int advance(mb_step *s, size_t done) {
  mb_lane *l = s->l;
  qim_mailbox_seq to = s->recs[done - 1].seq;
  if (s->advanced != done) { /* fences, records without batches, a partial step, a replay */
    qim_store_watermark_advance_req r = {.advance = {s->sh->id, l->id, to, l->wm.floor},
                                         .owner_epoch = s->sh->epoch};
    int rc;
    QIM__MB_CALL(rc, s->w, mailboxes.watermark_advance, &r);
    if (rc) return rc;
  }
  if (to > l->wm.materialized) l->wm.materialized = to;
  l->next_offset = s->recs[done - 1].log->offset + 1;
  if (!atomic_load(&l->ready) && l->next_offset > s->sh->fence_offset) {
    atomic_store(&l->ready, true);
    QIM_LOGI(NULL, "mailbox.lane_ready", "shard=%u lane=%u epoch=%u next_offset=%llu", s->sh->id, l->id,
             s->sh->epoch, (unsigned long long)l->next_offset);
  }
  return 0;
}

static void step_destroy(void *step);

/* Hands the completed prefix's pushes, watermark and figures to the lane's queue (flight.c):
 * they leave once the step is durable, after every earlier step's. A step whose last wave
 * flies goes with them (its request lives in it) and is not the caller's any more. */
static void complete(mb_step *s, size_t done) {
  mb_flight *f = s->flight ? s->flight : qim__mb_flight_new(s->l);
  for (size_t i = 0; i < done; i++) {
    f->dispatches += s->recs[i].dispatch;
    f->batches += s->recs[i].nbatches;
    for (size_t k = 0; k < s->recs[i].nbatches; k++) f->entries += s->recs[i].batches[k].batch.entry_count;
  }
  f->pushes = build_pushes(s, done, &f->npushes);
  f->wm = s->l->wm;
  f->next_offset = s->l->next_offset;
  f->from_offset = s->read.from;
  f->from_materialized = s->from_materialized;
  if (s->flight) {
    f->owner = s;
    f->owner_free = step_destroy;
  } else {
    f->completed = true; /* waited for: durable already */
  }
  qim__mb_flight_queue(f);
}

/* ---- outcomes --------------------------------------------------------------------------------------------- */

static int halt(mb_lane *l, int state, int rc) {
  atomic_store(&l->state, state);
  qim__mb_lane_set_error(l, rc);
  QIM_LOGE(NULL, "mailbox.lane_stopped", "shard=%u lane=%u next_offset=%llu state=%d error=%s", l->sh->id, l->id,
           (unsigned long long)l->next_offset, state, qim_err_name(rc));
  qim__mb_drain_signal(l->sh->m);
  return -1;
}

/* Backs off after a transient failure; returns the delay. */
static int backoff(mb_lane *l, int rc) {
  l->backoff_ms = l->backoff_ms ? (l->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : l->backoff_ms * 2)
                                : l->sh->m->opt.retry_ms;
  QIM_LOGW(NULL, "mailbox.step_retry", "shard=%u lane=%u next_offset=%llu error=%s backoff_ms=%u", l->sh->id, l->id,
           (unsigned long long)l->next_offset, qim_err_name(rc), l->backoff_ms);
  qim__mb_lane_set_error(l, qim_err_raise(QIM_E_MATERIALIZE_UNAVAILABLE));
  pthread_mutex_lock(&l->mu);
  l->retries++;
  pthread_mutex_unlock(&l->mu);
  return (int)l->backoff_ms;
}

/* A transient failure: back off, and replay the step's records with their stored progress. */
static int retry(mb_step *s, int rc) {
  mb_lane *l = s->l;
  uint64_t end = s->read.out_count ? s->read.out_records[s->read.out_count - 1].offset + 1 : l->next_offset;
  if (end > l->replay_until) l->replay_until = end;
  return backoff(l, rc);
}

static int outcome(mb_step *s, int rc) {
  if (rc == 0) {
    s->l->backoff_ms = 0;
    return 0;
  }
  if (rc == QIM_E_MATERIALIZE_SHARD_NOT_OWNED) {
    atomic_store(&s->sh->fenced, true);
    return halt(s->l, QIM_MAILBOX_LANE_FENCED, rc);
  }
  if (rc == QIM_E_MATERIALIZE_DISPATCH_CORRUPT || rc == QIM_E_MATERIALIZE_PROGRESS_CONFLICT)
    return halt(s->l, QIM_MAILBOX_LANE_HALTED, rc);
  return retry(s, rc);
}

static void step_destroy(void *step) {
  mb_step *s = step;
  for (size_t i = 0; i < s->n; i++) {
    mb_rec *rec = &s->recs[i];
    for (size_t k = 0; k < rec->nbatches; k++) {
      qim_free(rec->batches[k].batch.entries);
      qim_free(rec->batches[k].batch.progress.completed_chunks);
    }
    qim_free(rec->batches);
    for (size_t c = 0; c < rec->nchunks; c++) qim_free(rec->chunks[c].users);
    qim_free(rec->chunks);
    qim_free(rec->mentions);
    if (rec->has_prog) qim_free(rec->prog.out.completed_chunks);
    qim_group_dispatch_free(&rec->d);
    qim__mb_body_unref(rec->body);
  }
  qim_free(s->recs);
  qim_free(s->last_batches);
  qim_free(s->last_receipts);
  qim_store_log_read_free(&s->read);
  qim_free(s);
}

/* ---- the step ---------------------------------------------------------------------------------------------- */

/* Reads, plans and writes; returns the step's delay. *flown: the step went with its outcome
 * (complete) and is not ours to free. */
static int materialize(mb_step *s, uint64_t gen, bool *flown) {
  mb_lane *l = s->l;
  s->from_materialized = l->wm.materialized;
  s->read.stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, s->sh->id};
  s->read.from = l->next_offset;
  s->read.max = s->m->opt.read_batch;
  /* Unconfirmed (store.h): the records become mailbox entries, durable only after them,
   * and nothing is pushed before those are. */
  s->read.req.unconfirmed = true;
  int rc;
  QIM__MB_CALL(rc, s->w, logs.read, &s->read);
  if (rc == QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE) /* trimmed past us: the replay cannot complete */
    return halt(l, QIM_MAILBOX_LANE_FAILED, qim_err_raise(QIM_E_MATERIALIZE_READINESS_FAILED));
  if (rc) return retry(s, rc);
  if (s->read.out_count == 0) {
    if (!qim__mb_flight_idle(l)) return -1; /* idle once its queue empties, which kicks it */
    atomic_store(&l->idle_gen, gen);
    qim__mb_drain_signal(s->m);
    return (int)s->m->opt.idle_poll_ms;
  }
  plan(s);
  read_progress(s);
  build_batches(s);
  run_waves(s);
  size_t done = 0;
  while (done < s->n && s->recs[done].status == 0) done++;
  rc = done < s->n ? s->recs[done].status : s->halt_rc;
  if (done == 0) return outcome(s, rc);
  int arc = advance(s, done);
  if (arc) return outcome(s, arc);
  if (!s->flight) {
    complete(s, done);
    return outcome(s, rc);
  }
  int delay = outcome(s, rc);
  *flown = true;
  complete(s, done); /* last: s may be gone once it is queued */
  return delay;
}

static bool runnable(const mb_lane *l) {
  const mb_shard *sh = l->sh;
  return atomic_load(&l->state) == QIM_MAILBOX_LANE_RUNNING && atomic_load(&sh->owned) && !atomic_load(&sh->fenced) &&
         !atomic_load(&l->paused) && !atomic_load(&sh->m->paused_materialize);
}

int qim__mb_lane_step(mb_task *t, mb_worker *w) {
  mb_lane *l = (mb_lane *)t;
  qim_mailbox *m = w->m;
  if (qim__mb_flight_held(l)) return -1; /* confirmed pushes wait for the push stage */
  if (!runnable(l)) return -1;
  if (qim__mb_flight_rewound(l)) return backoff(l, qim_err_raise(QIM_E_MATERIALIZE_UNAVAILABLE));
  uint64_t gen = atomic_load(&m->drain_gen);
  uint64_t now = qim__mb_now_ns();
  if (atomic_exchange(&l->retention_kick, false) || now >= l->next_retention_ns) {
    l->next_retention_ns = now + (uint64_t)m->opt.retention_interval_ms * 1000000u;
    qim__mb_flight_wait_empty(l); /* it publishes the watermark it moves */
    int rc = qim__mb_retention_pass(l, w);
    if (rc == QIM_E_MATERIALIZE_SHARD_NOT_OWNED) {
      atomic_store(&l->sh->fenced, true);
      return halt(l, QIM_MAILBOX_LANE_FENCED, rc);
    }
  }
  mb_step *s = qim_malloc(sizeof *s);
  *s = (mb_step){.l = l, .sh = l->sh, .w = w, .m = m};
  bool flown = false;
  int delay = materialize(s, gen, &flown);
  if (!flown) step_destroy(s);
  return delay;
}
