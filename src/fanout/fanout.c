/*
 * fanout.c — the outbox consumer (fanout.h): read outbox records from the committed
 * offset, plan each, append the dispatches and the new offset in one store call, and
 * verify every append that found its DispatchId already present.
 *
 * Batching: several outbox records share one logs.append call (bounded by
 * max_call_appends) so the store's group commit pays one fsync for many messages. The
 * call is atomic (dispatches + offset), so a batch is all-or-nothing; a determinism
 * failure found after it committed sets the offset back to the offending record.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "fanout/fanout_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

static const qim_log_stream OUTBOX = {QIM_LOG_STREAM_OUTBOX, 0};

static void options_defaults(qim_fanout_options *o) {
  if (!o->chunk_size) o->chunk_size = 256;
  if (!o->snapshot_page) o->snapshot_page = 1000;
  if (!o->batch) o->batch = 512;
  if (!o->max_call_appends) o->max_call_appends = 512;
  if (!o->idle_poll_ms) o->idle_poll_ms = 1000;
  if (!o->retry_ms) o->retry_ms = 100;
  if (!o->trim_every) o->trim_every = 512;
}

int qim_fanout_new(qim_store *store, const qim_fanout_options *opt, qim_fanout **out) {
  if (!store || !opt || opt->shards.shard_count < 1 || opt->shards.lanes_per_shard < 1 ||
      opt->shards.lanes_per_shard > 255)
    return -EINVAL;
  qim__fanout *f = qim_calloc(1, sizeof *f);
  int rc = qim_cq_new_blocking(&f->cq);
  if (rc) {
    qim_free(f);
    return rc;
  }
  f->store = store;
  f->opt = *opt;
  options_defaults(&f->opt);
  pthread_mutex_init(&f->mu, NULL);
  qim_cond_init_monotonic(&f->cv);
  *out = f;
  return 0;
}

void qim_fanout_free(qim_fanout *f) {
  if (!f) return;
  qim_fanout_stop(f);
  qim__fanout_flights_settle(f, 0);
  qim_cq_free(f->cq);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  qim_free(f);
}

int qim_fanout_plan_envelope(qim_fanout *f, const qim_committed_envelope *env, qim_log_position source,
                             qim_fanout_plan *out) {
  qim__fanout_users u;
  *out = (qim_fanout_plan){.source = source};
  int rc = qim__fanout_recipients(f, env, &u);
  if (rc) return rc;
  rc = qim_fanout_plan_make(env, source, u.ids, u.count, &f->opt.shards, f->opt.chunk_size, out);
  qim__fanout_users_free(&u);
  return rc;
}

/* ---- one batch: planned appends of consecutive outbox records ---------------------------- */

typedef struct batch {
  qim_store_log_append *appends;
  uint64_t *source;        /* outbox offset of each append's record */
  qim_trace_id *trace;     /* and its message's TraceId (for the log lines) */
  size_t count, cap;
  uint64_t first, next;    /* outbox offsets: first record, one past the last */
  uint32_t records;
  /* The (shard, lane)s with recipients in the appends, for the on_dispatched hint: one bit
   * per shard * lanes_per_shard + lane, and the list of those set (made on first use). */
  uint8_t *wake_bits;
  uint32_t *wake, nwake;
} batch;

static void batch_add(batch *b, const qim_group_dispatch *d, qim_bytes payload, uint64_t source) {
  if (b->count == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 16;
    b->appends = qim_realloc(b->appends, b->cap * sizeof *b->appends);
    b->source = qim_realloc(b->source, b->cap * sizeof *b->source);
    b->trace = qim_realloc(b->trace, b->cap * sizeof *b->trace);
  }
  b->trace[b->count] = d->trace_id;
  qim_store_log_append *a = &b->appends[b->count];
  *a = (qim_store_log_append){.stream = {QIM_LOG_STREAM_MAILBOX_DISPATCH, d->target_shard}, .payload = payload};
  /* Keyed by the message id: one dispatch per message and shard, so it is as unique in
   * the shard's stream as the DispatchId derived from it, and time-ordered, so the key
   * index grows at its end instead of dirtying a random page per dispatch. */
  memcpy(a->key, d->source_message.message_id.b, sizeof a->key);
  b->source[b->count++] = source;
}

static void batch_reset(batch *b) {
  for (size_t i = 0; i < b->count; i++) qim_bytes_free(&b->appends[i].payload);
  b->count = 0;
  b->records = 0;
  for (uint32_t i = 0; i < b->nwake; i++) b->wake_bits[b->wake[i] / 8] = 0;
  b->nwake = 0;
}

static void batch_free(batch *b) {
  batch_reset(b);
  qim_free(b->appends);
  qim_free(b->source);
  qim_free(b->trace);
  qim_free(b->wake_bits);
  qim_free(b->wake);
}

static bool bit_test(const uint8_t *bits, uint32_t bit) {
  return bits[bit / 8] & (1u << (bit % 8));
}

/* Notes the lanes a dispatch has recipients in, for the hint after the append. */
static void batch_lanes(const qim__fanout *f, batch *b, const qim_group_dispatch *d) {
  const qim_shard_config *sc = &f->opt.shards;
  uint32_t slots = sc->shard_count * sc->lanes_per_shard;
  if (!b->wake_bits) {
    b->wake_bits = qim_calloc((slots + 7) / 8, 1);
    b->wake = qim_malloc(slots * sizeof *b->wake);
  }
  uint32_t base = d->target_shard * sc->lanes_per_shard, marked = 0;
  for (uint32_t l = 0; l < sc->lanes_per_shard; l++) marked += bit_test(b->wake_bits, base + l);
  for (size_t c = 0; c < d->chunk_count; c++)
    for (size_t k = 0; k < d->recipient_chunks[c].recipient_count; k++) {
      if (marked == sc->lanes_per_shard) return; /* a large group reaches every lane soon */
      uint32_t bit =
          base + qim_lane_of_user(sc, d->tenant_id, d->recipient_chunks[c].recipient_ids[k]);
      if (bit_test(b->wake_bits, bit)) continue;
      b->wake_bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
      b->wake[b->nwake++] = bit;
      marked++;
    }
}

/* Encodes a plan's dispatches into the batch. */
static int batch_plan(qim__fanout *f, batch *b, const qim_fanout_plan *p) {
  for (size_t i = 0; i < p->dispatch_count; i++) {
    qim_bytes payload;
    int rc = qim_group_dispatch_encode(&p->dispatches[i], &payload);
    if (rc) return rc;
    batch_add(b, &p->dispatches[i], payload, p->source.offset);
    if (f->opt.on_dispatched) batch_lanes(f, b, &p->dispatches[i]);
  }
  return 0;
}

/* ---- writes in flight ----------------------------------------------------------------------
 * The fanout goes on once a write (an append call, an outbox trim) has COMMITTED (store.h,
 * "Committed"), not once it is durable: the lanes read the dispatches unconfirmed and push
 * nothing before their own later writes are durable, which the store makes durable only
 * after these. Waiting out each sync here made a message wait for up to two syncs before the
 * fanout even read it. The write's completion arrives later on f->cq; at most FLIGHTS_MAX
 * are outstanding. A completion that could not confirm a committed write is logged and
 * becomes the next run's error (the store has failed; the consumer offset a restart replays
 * from is in the store). */

#define FLIGHTS_MAX 8

typedef struct flight {
  union { /* each request starts with its qim_store_req */
    qim_store_req req;
    qim_store_log_append_req append;
    qim_store_log_trim_req trim;
  } u;
  batch b;                 /* an append's, moved from the caller: the request points into it */
  qim__fanout *f;
  qim_cq_item committed_item;
  bool committed, done, released;
} flight;

/* On the store's writer thread: wake the lanes that have work in the appends, which read
 * the dispatch logs unconfirmed while the sync runs, and the fanout thread. */
static void flight_committed_hint(qim_store_req *req) {
  flight *fl = req->committed_ctx;
  const qim__fanout *f = fl->f;
  uint32_t lanes = f->opt.shards.lanes_per_shard;
  if (f->opt.on_dispatched)
    for (uint32_t i = 0; i < fl->b.nwake; i++)
      f->opt.on_dispatched(f->opt.hook_ctx, fl->b.wake[i] / lanes, (qim_lane_id)(fl->b.wake[i] % lanes));
  qim_cq_post(f->cq, &fl->committed_item);
}

static void flight_free(flight *fl) {
  batch_free(&fl->b);
  qim_free(fl);
}

static void flight_committed(qim_cq_item *it) {
  flight *fl = (flight *)((char *)it - offsetof(flight, committed_item));
  fl->committed = true;
}

static void flight_done(qim_store_req *req) {
  flight *fl = req->data;
  qim__fanout *f = fl->f;
  fl->done = true;
  f->inflight--;
  if (fl->committed && req->status) {
    QIM_LOGE(NULL, "fanout.write_unconfirmed", "op=%s outbox_offset=%llu appends=%zu rc=%s",
             fl->b.count ? "append" : "trim", (unsigned long long)fl->b.first, fl->b.count,
             qim_err_name(req->status));
    f->unconfirmed = true;
  }
  if (fl->released) flight_free(fl);
}

void qim__fanout_flights_settle(qim__fanout *f, uint32_t max) {
  qim_cq_drain(f->cq);
  while (f->inflight > max) qim_cq_wait(f->cq, -1);
}

/* A flight for one write, once there is room for it. */
static flight *flight_new(qim__fanout *f) {
  qim__fanout_flights_settle(f, FLIGHTS_MAX - 1);
  flight *fl = qim_calloc(1, sizeof *fl);
  fl->f = f;
  fl->committed_item.run = flight_committed;
  fl->u.req = (qim_store_req){.cq = f->cq, .done = flight_done, .data = fl, .committed = flight_committed_hint,
                              .committed_ctx = fl};
  return fl;
}

/* After the submission returned `rc`: waits until the write COMMITTED (0) or failed. */
static int flight_wait(flight *fl, int rc) {
  if (rc) { /* refused: no completion will come */
    fl->done = true;
    return rc;
  }
  fl->f->inflight++;
  while (!fl->committed && !fl->done) qim_cq_wait(fl->f->cq, -1);
  return fl->committed ? 0 : fl->u.req.status;
}

static void flight_release(flight *fl) {
  fl->released = true;
  if (fl->done) flight_free(fl);
}

/* Submits the batch's appends with the new offset; returns once they COMMITTED (0) or
 * failed, with the flight in *out (the caller releases it). */
static int flight_append(qim__fanout *f, batch *b, flight **out) {
  flight *fl = *out = flight_new(f);
  fl->b = *b;
  *b = (batch){0};
  qim_store_log_append_req *r = &fl->u.append;
  r->appends = fl->b.appends, r->append_count = fl->b.count, r->has_consumer = true;
  r->consumer = QIM_FANOUT_CONSUMER, r->consumer_stream = OUTBOX, r->consumer_offset = fl->b.next;
  return flight_wait(fl, f->store->vt->logs.append(f->store, r));
}

/* Sets the committed offset (used for a batch without appends and for a rewind). */
static int offset_set(qim__fanout *f, uint64_t offset) {
  qim_store_log_consumer_set_req r = {.consumer = QIM_FANOUT_CONSUMER, .stream = OUTBOX, .offset = offset};
  return QIM_STORE_SYNC(f->store, logs.consumer_set, &r);
}

/* Compares one existing record with the planned bytes. */
static int verify_append(qim__fanout *f, const qim_store_log_append *a) {
  qim_store_log_read_req r = {.stream = a->out_position.stream, .from = a->out_position.offset, .max = 1};
  int rc = QIM_STORE_SYNC(f->store, logs.read, &r);
  if (rc == QIM_E_COMMIT_LOG_POSITION_UNAVAILABLE) return 0; /* trimmed: consumed long ago */
  if (rc) return qim__fanout_store_error(rc);
  if (r.out_count == 1 && r.out_records[0].offset == a->out_position.offset)
    rc = qim_fanout_dispatch_check(&r.out_records[0].payload, &a->payload);
  else
    rc = qim_err_raise(QIM_E_FANOUT_DETERMINISM_VIOLATION);
  qim_store_log_read_free(&r);
  return rc;
}

/* A violation at outbox offset `at`: logged, and the consumer set back onto it. */
static int violation(qim__fanout *f, const qim_store_log_append *a, uint64_t at, const qim_trace_id *trace) {
  char id[33];
  qim_hex_encode(a->key, sizeof a->key, id, sizeof id);
  QIM_LOGE(trace, "fanout.determinism_violation", "outbox_offset=%llu message=%s shard=%u dispatch_offset=%llu",
           (unsigned long long)at, id, a->stream.shard, (unsigned long long)a->out_position.offset);
  int rc = offset_set(f, at);
  if (rc) QIM_LOGE(trace, "fanout.rewind_failed", "outbox_offset=%llu rc=%s", (unsigned long long)at, qim_err_name(rc));
  return QIM_E_FANOUT_DETERMINISM_VIOLATION;
}

/* Writes the batch: dispatches + offset in one call, then checks the replayed appends.
 * *done counts records whose offset is committed. */
static int batch_flush(qim__fanout *f, batch *b, uint32_t *done) {
  if (b->records == 0) return 0;
  flight *fl = NULL;
  int rc;
  if (b->count == 0) {
    rc = offset_set(f, b->next);
  } else {
    rc = flight_append(f, b, &fl);
    b = &fl->b;
  }
  if (rc) {
    if (rc != -EAGAIN)
      QIM_LOGW(NULL, "fanout.append_failed", "outbox_offset=%llu appends=%zu rc=%s", (unsigned long long)b->first,
               b->count, qim_err_name(rc));
    if (fl) flight_release(fl);
    return rc == -EAGAIN ? QIM_AGAIN : qim_err_raise(QIM_E_FANOUT_TRANSACTION_FAILED);
  }
  size_t fresh = 0, verified = 0;
  for (size_t i = 0; i < b->count && rc == 0; i++) {
    if (!b->appends[i].out_existed) {
      fresh++;
      continue;
    }
    rc = verify_append(f, &b->appends[i]);
    if (rc == QIM_E_FANOUT_DETERMINISM_VIOLATION) rc = violation(f, &b->appends[i], b->source[i], &b->trace[i]);
    if (rc)
      *done += (uint32_t)(b->source[i] - b->first);
    else
      verified++;
  }
  if (rc == 0) {
    pthread_mutex_lock(&f->mu);
    f->status.dispatches += fresh;
    f->status.verified += verified;
    f->status.records += b->records;
    pthread_mutex_unlock(&f->mu);
    *done += b->records;
  }
  if (fl) flight_release(fl);
  return rc;
}

/* Plans one outbox record into the batch. */
static int plan_record(qim__fanout *f, const qim_store_log_record *rec, batch *b) {
  qim_committed_envelope env;
  if (qim_committed_envelope_decode(rec->payload.p, rec->payload.n, &env)) {
    QIM_LOGE(NULL, "fanout.bad_record", "outbox_offset=%llu bytes=%zu", (unsigned long long)rec->offset, rec->payload.n);
    return -EBADMSG;
  }
  qim_fanout_plan plan;
  int rc = qim_fanout_plan_envelope(f, &env, (qim_log_position){OUTBOX, rec->offset}, &plan);
  if (rc == 0) rc = batch_plan(f, b, &plan);
  if (rc == 0)
    QIM_LOGD(&env.intent.trace_id, "fanout.planned", "outbox_offset=%llu dispatches=%zu",
             (unsigned long long)rec->offset, plan.dispatch_count);
  else if (rc != QIM_AGAIN)
    QIM_LOGE(&env.intent.trace_id, "fanout.plan_failed", "outbox_offset=%llu rc=%s", (unsigned long long)rec->offset,
             qim_err_name(rc));
  qim_fanout_plan_free(&plan);
  qim_committed_envelope_free(&env);
  return rc;
}

/* Plans and writes the records r[0..n) in batches. */
static int run_records(qim__fanout *f, const qim_store_log_record *r, size_t n, uint32_t *done) {
  batch b = {0};
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (b.records == 0) b.first = r[i].offset;
    size_t before = b.count;
    rc = r[i].fence ? 0 : plan_record(f, &r[i], &b);
    if (rc) {
      for (size_t k = before; k < b.count; k++) qim_bytes_free(&b.appends[k].payload);
      b.count = before;
      int frc = batch_flush(f, &b, done);
      if (frc) rc = frc;
      break;
    }
    b.records++;
    b.next = r[i].offset + 1;
    if (b.count >= f->opt.max_call_appends || i + 1 == n) {
      rc = batch_flush(f, &b, done);
      batch_reset(&b);
    }
  }
  batch_free(&b);
  return rc;
}

/* Every trim_every records, the outbox below the committed offset `next` goes: the log
 * would otherwise keep every message ever sent. The store keeps what an unfinished commit
 * still reads back, so this may trim less. A failure only leaves the log longer until the
 * next attempt. */
static void outbox_trim(qim__fanout *f, uint32_t done, uint64_t next) {
  f->since_trim += done;
  if (f->since_trim < f->opt.trim_every) return;
  f->since_trim = 0;
  flight *fl = flight_new(f);
  qim_store_log_trim_req *t = &fl->u.trim;
  t->stream = OUTBOX, t->below = next;
  int rc = flight_wait(fl, f->store->vt->logs.trim(f->store, t));
  if (rc) {
    QIM_LOGW(NULL, "fanout.outbox_trim_failed", "below=%llu rc=%s", (unsigned long long)next, qim_err_name(rc));
  } else {
    pthread_mutex_lock(&f->mu);
    f->status.outbox_trim = t->out_trim;
    pthread_mutex_unlock(&f->mu);
  }
  flight_release(fl);
}

int qim_fanout_run_once(qim_fanout *f, uint32_t max, uint32_t *processed) {
  uint32_t done = 0;
  if (processed) *processed = 0;
  qim__fanout_flights_settle(f, FLIGHTS_MAX);
  if (f->unconfirmed) { /* an earlier run's write was committed but never confirmed */
    f->unconfirmed = false;
    return qim_err_raise(QIM_E_FANOUT_TRANSACTION_FAILED);
  }
  /* Both reads are unconfirmed (store.h): what they return only becomes dispatch appends,
   * which the store makes durable after it, so neither waits for a sync. */
  qim_store_log_consumer_get_req cg = {
      .req.unconfirmed = true, .consumer = QIM_FANOUT_CONSUMER, .stream = OUTBOX};
  int rc = QIM_STORE_SYNC(f->store, logs.consumer_get, &cg);
  if (rc) return qim__fanout_store_error(rc);
  qim_store_log_read_req rd = {
      .req.unconfirmed = true, .stream = OUTBOX, .from = cg.out_offset, .max = max ? max : 1};
  rc = QIM_STORE_SYNC(f->store, logs.read, &rd);
  if (rc) return qim__fanout_store_error(rc);
  rc = run_records(f, rd.out_records, rd.out_count, &done);
  if (rc == 0 && done) outbox_trim(f, done, rd.out_records[done - 1].offset + 1);
  qim_store_log_read_free(&rd);
  if (processed) *processed = done;
  return rc;
}
