/*
 * fanout.c — the materialization benchmark (`make bench-fanout`): mailbox entries
 * materialized per second for a 1,000-member group on SQLite, every batch fsync'd
 * (synchronous=FULL) before the watermark moves over it.
 *
 * The dispatch logs are filled first (what the fanout would have appended: one GroupDispatch
 * per target shard per message, recipients in chunks of 256 as the fanout cuts them), then a
 * mailbox takes the shards over and the clock runs until every lane has materialized every
 * record and advanced its watermark. Two layouts of the same group:
 *   (a) 1 shard × 2 lanes: one dispatch of 1,000 recipients (4 chunks) per message;
 *   (b) 4 shards × 2 lanes: four dispatches of ~250 recipients per message, 8 lane tasks.
 * Baseline, measured in the same run: the same batches written straight through
 * mailboxes.append by a single submitter keeping 64 in flight — the store's own ceiling for
 * this work. The ratio shows what the materializer itself costs (decoding, lane hashing,
 * waves, watermark advances).
 *
 * Usage: qim-bench-fanout [DIR] [MESSAGES]   (DIR on a real disk, default $TMPDIR or /tmp;
 * MESSAGES per layout, default 200 → 200,000 entries)
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mailbox/mailbox.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"

#define MEMBERS 1000
#define CHUNK 256
#define TARGET 50000.0

static const char body[] =
    "{\"txt\":\"a benchmark message of about one hundred bytes, like a short chat line.\"}";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static qim_tenant_id tenant(void) { return (qim_tenant_id){{0xBE, 1}}; }
static qim_user_id member(uint64_t i) { return (qim_user_id){{0xBE00000000000002ull, 1000 + i}}; }

static void remove_db(const char *dir, const char *name) {
  static const char *const suffixes[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    char p[1100];
    snprintf(p, sizeof p, "%s/%s%s", dir, name, suffixes[i]);
    unlink(p);
  }
}

static qim_store *open_store(const char *dir, const char *name, qim_shard_config shards) {
  char path[1024], url[1100];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  remove_db(dir, name); /* a fresh file each run */
  snprintf(url, sizeof url, "sqlite:%s", path);
  qim_store_options o = {.shards = shards};
  qim_store *s = NULL;
  if (qim_store_open(url, &o, &s) != 0) {
    fprintf(stderr, "cannot open %s\n", url);
    exit(1);
  }
  return s;
}

/* The dispatch of message n for one shard, recipients in fanout-sized chunks. */
static void make_dispatch(uint64_t n, qim_mailbox_shard_id shard, const qim_user_id *r, size_t count,
                          qim_group_dispatch *d) {
  memset(d, 0, sizeof *d);
  d->source_message.message_id.b[0] = 0x11;
  for (int i = 0; i < 8; i++) d->source_message.message_id.b[8 + i] = (uint8_t)(n >> (56 - 8 * i));
  d->source_message.conversation_id.v = (qim_u128){0xC0, 1};
  d->source_message.conversation_seq = n + 1;
  d->tenant_id = tenant();
  d->sender_id = member(n % MEMBERS);
  d->client_message_id.b[0] = 0xC1;
  d->client_message_id.b[15] = (uint8_t)n;
  d->target_shard = shard;
  d->dispatch_id = qim_dispatch_id_make(&d->source_message.message_id, shard);
  d->chunk_count = (count + CHUNK - 1) / CHUNK;
  d->recipient_chunks = qim_calloc(d->chunk_count, sizeof *d->recipient_chunks);
  for (size_t c = 0; c < d->chunk_count; c++) {
    size_t from = c * CHUNK, to = from + CHUNK < count ? from + CHUNK : count;
    d->recipient_chunks[c] = (qim_recipient_chunk){(uint32_t)c, qim_memdup(r + from, (to - from) * sizeof *r), to - from};
  }
  d->content.message_type = QIM_MESSAGE_TYPE_TEXT;
  d->content.payload_or_ciphertext = (qim_bytes){qim_memdup(body, sizeof body - 1), sizeof body - 1};
  d->inline_body = true;
  d->created_at = 1700000000000ull + n;
}

/* The group's members of each shard. */
typedef struct layout {
  qim_shard_config shards;
  qim_user_id *of[64];
  size_t count[64];
} layout;

static void place(layout *l) {
  for (uint32_t s = 0; s < l->shards.shard_count; s++) l->of[s] = qim_malloc(MEMBERS * sizeof(qim_user_id));
  for (uint64_t i = 0; i < MEMBERS; i++) {
    qim_mailbox_shard_id s = qim_shard_of_user(&l->shards, tenant(), member(i));
    l->of[s][l->count[s]++] = member(i);
  }
}

/* Appends `messages` messages' dispatches, 64 records per store call. */
static void fill_logs(qim_store *st, const layout *l, uint64_t messages) {
  size_t per = l->shards.shard_count, batch = 64, n = 0;
  qim_store_log_append *a = qim_calloc(batch, sizeof *a);
  for (uint64_t m = 0; m < messages; m++)
    for (uint32_t s = 0; s < per; s++) {
      qim_group_dispatch d;
      make_dispatch(m, s, l->of[s], l->count[s], &d);
      a[n].stream = (qim_log_stream){QIM_LOG_STREAM_MAILBOX_DISPATCH, s};
      memcpy(a[n].key, d.dispatch_id.b, 16);
      if (qim_group_dispatch_encode(&d, &a[n].payload)) abort();
      qim_group_dispatch_free(&d);
      if (++n == batch || (m + 1 == messages && s + 1 == per)) {
        qim_store_log_append_req r = {.appends = a, .append_count = n};
        if (QIM_STORE_SYNC(st, logs.append, &r)) abort();
        for (size_t i = 0; i < n; i++) qim_bytes_free(&a[i].payload);
        memset(a, 0, batch * sizeof *a);
        n = 0;
      }
    }
  qim_free(a);
}

typedef struct result {
  double seconds, cpu_seconds, busiest_seconds, entries_per_s;
  uint64_t entries, transactions, fsyncs;
} result;

/* CPU time of the whole process (all threads): on a shared machine the wall clock also
 * measures the neighbours, the CPU time only us. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint32_t opt_step_entries, opt_read_batch;

/* Per-thread CPU (utime + stime, in clock ticks) from /proc, to find the busiest thread: the
 * store's single writer is the serial part of this work. */
#define MAX_TASKS 256
typedef struct tasks {
  int n;
  long tid[MAX_TASKS];
  unsigned long long ticks[MAX_TASKS];
} tasks;

static void tasks_read(tasks *t) {
  t->n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)) && t->n < MAX_TASKS) {
    if (e->d_name[0] == '.') continue;
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char *p = strrchr(buf, ')'); /* fields after the command name */
    unsigned long long ut = 0, st = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2) {
      t->tid[t->n] = atol(e->d_name);
      t->ticks[t->n++] = ut + st;
    }
  }
  if (d) closedir(d);
}

/* CPU seconds of the thread that used most between the two snapshots. */
static double busiest_s(const tasks *a, const tasks *b) {
  unsigned long long best = 0;
  for (int i = 0; i < b->n; i++) {
    unsigned long long before = 0;
    for (int j = 0; j < a->n; j++)
      if (a->tid[j] == b->tid[i]) before = a->ticks[j];
    if (b->ticks[i] - before > best) best = b->ticks[i] - before;
  }
  return (double)best / (double)sysconf(_SC_CLK_TCK);
}

/* The materializer: take every shard over, wait until all lanes are drained. */
static result run_mailbox(qim_store *st, const layout *l, uint64_t messages) {
  qim_mailbox_options o = {.shards = l->shards, .node_id = 1, .step_entries = opt_step_entries,
                           .read_batch = opt_read_batch};
  memset(o.cursor_key, 0x5A, sizeof o.cursor_key);
  qim_mailbox *m;
  if (qim_mailbox_new(st, &o, &m)) abort();
  qim_store_stats before, after;
  qim_store_get_stats(st, &before);
  tasks ta, tb;
  tasks_read(&ta);
  double t0 = now_s(), c0 = cpu_s();
  for (uint32_t s = 0; s < l->shards.shard_count; s++)
    if (qim_mailbox_shard_acquire_sync(m, s, NULL)) abort();
  if (qim_mailbox_drain(m, 600000)) abort();
  double t1 = now_s(), c1 = cpu_s();
  tasks_read(&tb);
  qim_store_get_stats(st, &after);
  result r = {.seconds = t1 - t0, .cpu_seconds = c1 - c0, .busiest_seconds = busiest_s(&ta, &tb)};
  for (uint32_t s = 0; s < l->shards.shard_count; s++)
    for (uint32_t lane = 0; lane < l->shards.lanes_per_shard; lane++) {
      qim_mailbox_lane_status ls;
      qim_mailbox_lane_status_get(m, s, (qim_lane_id)lane, &ls);
      r.entries += ls.entries;
    }
  if (r.entries != messages * MEMBERS) {
    fprintf(stderr, "materialized %llu entries, expected %llu\n", (unsigned long long)r.entries,
            (unsigned long long)(messages * MEMBERS));
    exit(1);
  }
  r.entries_per_s = (double)r.entries / r.seconds;
  r.transactions = after.transactions - before.transactions;
  r.fsyncs = after.fsyncs - before.fsyncs;
  qim_mailbox_free(m);
  return r;
}

/* ---- the baseline: the same batches straight into the store ------------------------------------- */

typedef struct raw_batch {
  qim_store_mailbox_append_req req;
  qim_append_mailbox_batch b;
  uint32_t chunks[MEMBERS / CHUNK + 1]; /* progress: every chunk up to this one */
  bool busy;
} raw_batch;

static void raw_done(qim_store_req *r) {
  raw_batch *rb = (raw_batch *)r;
  if (r->status) abort();
  rb->busy = false;
  (*(int *)rb->req.req.data)--;
}

/* One lane's entries of chunk c of dispatch d. */
static void raw_fill(raw_batch *rb, const qim_group_dispatch *d, size_t c, qim_lane_id lane, qim_mailbox_seq seq,
                     const qim_shard_config *cfg) {
  const qim_recipient_chunk *ch = &d->recipient_chunks[c];
  qim_append_mailbox_batch *b = &rb->b;
  qim_free(b->entries);
  *b = (qim_append_mailbox_batch){.shard = d->target_shard, .lane = lane, .dispatch_id = d->dispatch_id,
                                  .chunk_id = ch->chunk_id, .mailbox_seq = seq};
  b->entries = qim_malloc(ch->recipient_count * sizeof *b->entries);
  for (size_t i = 0; i < ch->recipient_count; i++) {
    if (qim_lane_of_user(cfg, d->tenant_id, ch->recipient_ids[i]) != lane) continue;
    b->entries[b->entry_count++] = (qim_mailbox_entry){
        .tenant_id = d->tenant_id, .user_id = ch->recipient_ids[i], .mailbox_seq = seq,
        .event_id = qim_event_id_make(seq, 0), .coordinates = d->source_message, .sender_id = d->sender_id,
        .has_content = true, .content = d->content, .body_included = true, .created_at = d->created_at};
  }
  for (size_t i = 0; i <= c; i++) rb->chunks[i] = d->recipient_chunks[i].chunk_id;
  b->progress = (qim_dispatch_progress){.dispatch_id = d->dispatch_id, .shard = d->target_shard, .lane = lane,
                                        .completed_chunks = rb->chunks, .completed_chunk_count = c + 1};
}

static result run_raw(qim_store *st, const layout *l, uint64_t messages) {
  enum { WINDOW = 64 };
  raw_batch *win = qim_calloc(WINDOW, sizeof *win);
  qim_cq *cq;
  qim_cq_new_blocking(&cq);
  int inflight = 0;
  result r = {0};
  qim_store_stats before, after;
  qim_store_get_stats(st, &before);
  tasks ta, tb;
  tasks_read(&ta);
  double t0 = now_s(), c0 = cpu_s();
  for (uint64_t m = 0; m < messages; m++)
    for (uint32_t s = 0; s < l->shards.shard_count; s++) {
      qim_group_dispatch d;
      make_dispatch(m, s, l->of[s], l->count[s], &d);
      qim_mailbox_seq seq = qim_mailbox_seq_make(0, m + 1);
      for (size_t c = 0; c < d.chunk_count; c++)
        for (uint32_t lane = 0; lane < l->shards.lanes_per_shard; lane++) {
          int k = 0;
          while (inflight == WINDOW || (win[k].busy && ++k < WINDOW)) {
            if (k == WINDOW || inflight == WINDOW) qim_cq_wait(cq, -1), k = 0;
          }
          raw_batch *rb = &win[k];
          raw_fill(rb, &d, c, (qim_lane_id)lane, seq, &l->shards);
          r.entries += rb->b.entry_count;
          rb->req = (qim_store_mailbox_append_req){.req = {.cq = cq, .done = raw_done, .data = &inflight},
                                                   .batch = &rb->b};
          rb->busy = true;
          inflight++;
          int rc;
          while ((rc = st->vt->mailboxes.append(st, &rb->req)) == -EAGAIN) qim_cq_wait(cq, 1);
          if (rc) abort();
        }
      while (inflight == WINDOW) qim_cq_wait(cq, -1);
      /* the dispatch's entries borrow its content: wait for its batches before freeing it */
      while (inflight > 0) qim_cq_wait(cq, -1);
      qim_group_dispatch_free(&d);
    }
  double t1 = now_s(), c1 = cpu_s();
  tasks_read(&tb);
  r.busiest_seconds = busiest_s(&ta, &tb);
  qim_store_get_stats(st, &after);
  for (int i = 0; i < WINDOW; i++) qim_free(win[i].b.entries);
  qim_free(win);
  qim_cq_free(cq);
  r.seconds = t1 - t0;
  r.cpu_seconds = c1 - c0;
  r.entries_per_s = (double)r.entries / r.seconds;
  r.transactions = after.transactions - before.transactions;
  r.fsyncs = after.fsyncs - before.fsyncs;
  return r;
}

static void print(const char *what, const result *r) {
  printf("  %-42s %7.0f entries/s wall; %7.0f if the busiest thread had a core (%llu entries in %.2f s; CPU %.2f s,"
         " busiest thread %.2f s; %llu fsyncs, %.0f entries/fsync)\n",
         what, r->entries_per_s, r->busiest_seconds > 0 ? (double)r->entries / r->busiest_seconds : 0.0,
         (unsigned long long)r->entries, r->seconds, r->cpu_seconds, r->busiest_seconds, (unsigned long long)r->fsyncs,
         r->fsyncs ? (double)r->entries / (double)r->fsyncs : 0.0);
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  const char *dir = argc > 1 ? argv[1] : (tmp && *tmp ? tmp : "/tmp");
  uint64_t messages = argc > 2 ? strtoull(argv[2], NULL, 10) : 200;
  opt_step_entries = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 0;
  opt_read_batch = argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
  qim_log_set_level(QIM_LOG_WARN);
  printf("qim-bench-fanout: %d-member group, %llu messages per layout, sqlite in %s\n", MEMBERS,
         (unsigned long long)messages, dir);
  qim_shard_config layouts[] = {{1, 2}, {4, 2}};
  const char *names[] = {"(a) 1 shard x 2 lanes, 4 chunks/dispatch", "(b) 4 shards x 2 lanes, 1 chunk/dispatch"};
  double worst = 0;
  for (int i = 0; i < 2; i++) {
    layout l = {.shards = layouts[i]};
    place(&l);
    char file[64];
    snprintf(file, sizeof file, "qim-bench-fanout-%d.db", i);
    qim_store *st = open_store(dir, file, l.shards);
    fill_logs(st, &l, messages);
    result r = run_mailbox(st, &l, messages);
    print(names[i], &r);
    qim_store_close(st);
    remove_db(dir, file);
    worst = i == 0 || r.entries_per_s < worst ? r.entries_per_s : worst;
    snprintf(file, sizeof file, "qim-bench-fanout-raw-%d.db", i);
    st = open_store(dir, file, l.shards);
    result raw = run_raw(st, &l, messages);
    print("    baseline: the same batches, raw store", &raw);
    printf("    materializer / raw store: %.2f\n", r.entries_per_s / raw.entries_per_s);
    qim_store_close(st);
    remove_db(dir, file);
    for (uint32_t s = 0; s < l.shards.shard_count; s++) qim_free(l.of[s]);
  }
  printf("  target >= %.0f entries/s: %s (slowest layout %.0f)\n", TARGET, worst >= TARGET ? "met" : "NOT met", worst);
  return 0;
}
