/*
 * check_mailbox.c — the store side of the crash-under-load test (crash_load.js). After qimd
 * stopped, it opens the store read-only in effect (only read calls) and checks the facts the
 * driver collected through the WebSocket against the conversations and mailboxes:
 * Conversations are groups and one-to-one topics alike (the facts' `conv` lines).
 *   - every acknowledged (topic, seq, cmid) is in history with that cmid, and one cmid never
 *     got two seqs; no cmid is stored twice in history;
 *   - each conversation's seqs are unique and gap-free: every seq from the first message to
 *     the conversation's latest is in history or in some member's mailbox (Controls such as
 *     read positions take seqs but have no history row);
 *   - every acknowledged message is exactly once a Message entry in every member's mailbox,
 *     the sender's carrying its cmid;
 *   - each mailbox lists a conversation's entries in conversation order;
 *   - read/recv as observed over the run never went back, the stored ones are at least the
 *     last observed, recv >= read, read <= latest seq.
 * Usage: qim-crash-check --store URL --facts FILE [--tenant N]. Exit 0 when all hold, 1 with
 * one line per violation (at most 50 printed) otherwise, 2 on usage or store errors.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/proto.h"
#include "qim/config.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "qim/record.h"
#include "store/store.h"

#define MAX_USERS 256
#define MAX_CONVS 256
#define MAX_MEMBERS 64

typedef struct conv {
  char name[64]; /* a topic name, or p2p-USR-USR */
  qim_conversation_id id;
  int members[MAX_MEMBERS];
  int n_members;
  qim_conversation_seq latest;
} conv;

typedef struct fact_msg { /* an ack or a history row */
  int conv, sender;
  uint64_t seq;
  char cmid[64];
} fact_msg;

typedef struct fact_rr {
  int user, conv;
  uint64_t read, recv;
} fact_rr;

typedef struct entry {
  int conv; /* -1: a conversation the facts do not name */
  uint64_t seq, mailbox_seq;
  qim_event_type type;
  uint8_t ordinal;
  char cmid[QIM_PROTO_CMID_CAP]; /* "" when none */
} entry;

typedef struct vec {
  void *p;
  size_t n, cap, size;
} vec;

static void *vec_push(vec *v) {
  if (v->n == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 256;
    v->p = realloc(v->p, v->cap * v->size);
    if (!v->p) abort();
  }
  return (char *)v->p + v->size * v->n++;
}

static struct {
  qim_tenant_id tenant;
  char users[MAX_USERS][QIM_TOPIC_NAME_CAP];
  qim_user_id user_ids[MAX_USERS];
  int n_users;
  conv convs[MAX_CONVS];
  int n_convs;
  vec acks, hist, rr;
  vec mail[MAX_USERS];      /* entry, per user, in mailbox order */
  entry *sorted[MAX_USERS]; /* the same, by (conversation, seq, type) */
  int violations;
} W = {.acks = {.size = sizeof(fact_msg)},
       .hist = {.size = sizeof(fact_msg)},
       .rr = {.size = sizeof(fact_rr)}};

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
  if (W.violations++ >= 50) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("violation: ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
}

static int user_index(const char *name) {
  for (int i = 0; i < W.n_users; i++)
    if (!strcmp(W.users[i], name)) return i;
  return -1;
}

static int conv_index(const char *name) {
  for (int i = 0; i < W.n_convs; i++)
    if (!strcmp(W.convs[i].name, name)) return i;
  return -1;
}

static int conv_of_id(qim_conversation_id id) {
  for (int i = 0; i < W.n_convs; i++)
    if (qim_u128_eq(W.convs[i].id.v, id.v)) return i;
  return -1;
}

/* ---- reading the facts ---------------------------------------------------------------- */

static int add_user(const char *name) {
  if (W.n_users == MAX_USERS) return -1;
  int i = W.n_users;
  if (qim_u128_name_parse("usr", name, strlen(name), &W.user_ids[i].v)) return -1;
  snprintf(W.users[i], sizeof W.users[i], "%s", name);
  W.mail[i].size = sizeof(entry);
  W.n_users++;
  return 0;
}

/* "conv NAME MEMBER...": NAME is a group's grp… name, or p2p-USR-USR for the one-to-one
 * conversation of its two members (derived from them, as qimd does: ids.h). */
static int add_conv(char *rest) {
  if (W.n_convs == MAX_CONVS) return -1;
  conv *c = &W.convs[W.n_convs];
  char *tok = strtok(rest, " \n");
  bool direct = tok && !strncmp(tok, "p2p-", 4);
  if (!tok || (!direct && qim_u128_name_parse("grp", tok, strlen(tok), &c->id.v))) return -1;
  snprintf(c->name, sizeof c->name, "%s", tok);
  while ((tok = strtok(NULL, " \n"))) {
    int u = user_index(tok);
    if (u < 0 || c->n_members == MAX_MEMBERS) return -1;
    c->members[c->n_members++] = u;
  }
  if (direct && c->n_members != 2) return -1;
  if (direct)
    c->id = qim_conversation_id_direct(W.tenant, W.user_ids[c->members[0]], W.user_ids[c->members[1]]);
  W.n_convs++;
  return 0;
}

static int parse_line(char *line) {
  char a[64], b[64], d[64], e[64];
  uint64_t x, y;
  if (!strncmp(line, "user ", 5)) return sscanf(line + 5, "%63s", a) == 1 ? add_user(a) : -1;
  if (!strncmp(line, "conv ", 5)) return add_conv(line + 5);
  if (sscanf(line, "ack %63s %" SCNu64 " %63s %63s", a, &x, b, d) == 4) {
    fact_msg *m = vec_push(&W.acks);
    *m = (fact_msg){.conv = conv_index(a), .sender = user_index(d), .seq = x};
    snprintf(m->cmid, sizeof m->cmid, "%s", b);
    return m->conv < 0 || m->sender < 0 ? -1 : 0;
  }
  if (sscanf(line, "hist %63s %" SCNu64 " %63s", a, &x, b) == 3) {
    fact_msg *m = vec_push(&W.hist);
    *m = (fact_msg){.conv = conv_index(a), .sender = -1, .seq = x};
    snprintf(m->cmid, sizeof m->cmid, "%s", strcmp(b, "-") ? b : "");
    return m->conv < 0 ? -1 : 0;
  }
  if (sscanf(line, "rr %63s %63s %" SCNu64 " %" SCNu64 " %63s", a, b, &x, &y, e) == 5) {
    fact_rr *r = vec_push(&W.rr);
    *r = (fact_rr){.user = user_index(a), .conv = conv_index(b), .read = x, .recv = y};
    return r->user < 0 || r->conv < 0 ? -1 : 0;
  }
  return -1;
}

static int read_facts(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int rc = 0, n = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    n++;
    if (line[0] != '\n' && parse_line(line)) {
      fprintf(stderr, "%s:%d: bad fact: %s", path, n, line);
      rc = -1;
    }
  }
  fclose(f);
  return rc;
}

/* ---- reading the store ---------------------------------------------------------------- */

static int load_mailbox(qim_store *s, int u) {
  qim_mailbox_seq after = 0;
  for (;;) {
    qim_store_mailbox_range_req m = {.query = {.tenant_id = W.tenant,
                                               .user_id = W.user_ids[u],
                                               .after_seq = after,
                                               .up_to_seq = INT64_MAX,
                                               .max_items = 512}};
    int rc = QIM_STORE_SYNC(s, mailboxes.range, &m);
    if (rc) return rc;
    for (size_t i = 0; i < m.out_count; i++) {
      const qim_mailbox_entry *x = &m.out_entries[i];
      entry *e = vec_push(&W.mail[u]);
      *e = (entry){.conv = conv_of_id(x->coordinates.conversation_id),
                   .seq = x->coordinates.conversation_seq,
                   .mailbox_seq = x->mailbox_seq,
                   .type = x->event_type,
                   .ordinal = x->event_ordinal};
      if (x->has_client_message_id) qim_proto_cmid_format(&x->client_message_id, e->cmid);
      after = x->mailbox_seq;
      qim_mailbox_entry_free(&m.out_entries[i]);
    }
    qim_free(m.out_entries);
    if (!m.out_has_more || !m.out_count) return 0;
  }
}

static int load_store(qim_store *s) {
  for (int i = 0; i < W.n_convs; i++) {
    qim_store_conv_get_req g = {.tenant_id = W.tenant, .conversation_id = W.convs[i].id};
    int rc = QIM_STORE_SYNC(s, conversations.get, &g);
    if (rc) return rc;
    W.convs[i].latest = g.out.latest_seq;
    qim_store_conversation_free(&g.out);
  }
  for (int u = 0; u < W.n_users; u++) {
    int rc = load_mailbox(s, u);
    if (rc) return rc;
  }
  return 0;
}

/* ---- the checks ----------------------------------------------------------------------- */

static int by_conv_seq(const void *a, const void *b) {
  const fact_msg *x = a, *y = b;
  if (x->conv != y->conv) return x->conv < y->conv ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_cmid(const void *a, const void *b) {
  return strcmp(((const fact_msg *)a)->cmid, ((const fact_msg *)b)->cmid);
}

static const fact_msg *hist_find(int c, uint64_t seq) {
  fact_msg key = {.conv = c, .seq = seq};
  return bsearch(&key, W.hist.p, W.hist.n, sizeof key, by_conv_seq);
}

/* Acks agree with each other and with history; history holds no cmid twice. */
static void check_acks_and_history(void) {
  fact_msg *a = W.acks.p, *h = W.hist.p;
  qsort(a, W.acks.n, sizeof *a, by_cmid);
  for (size_t i = 1; i < W.acks.n; i++)
    if (!strcmp(a[i].cmid, a[i - 1].cmid) &&
        (a[i].seq != a[i - 1].seq || a[i].conv != a[i - 1].conv))
      violation("cmid %s acknowledged as %s:%" PRIu64 " and %s:%" PRIu64, a[i].cmid,
                W.convs[a[i - 1].conv].name, a[i - 1].seq, W.convs[a[i].conv].name, a[i].seq);
  qsort(h, W.hist.n, sizeof *h, by_cmid);
  for (size_t i = 1; i < W.hist.n; i++)
    if (h[i].cmid[0] && !strcmp(h[i].cmid, h[i - 1].cmid))
      violation("cmid %s stored twice: %s seqs %" PRIu64 " and %" PRIu64, h[i].cmid,
                W.convs[h[i].conv].name, h[i - 1].seq, h[i].seq);
  qsort(h, W.hist.n, sizeof *h, by_conv_seq);
  for (size_t i = 1; i < W.hist.n; i++)
    if (h[i].conv == h[i - 1].conv && h[i].seq == h[i - 1].seq)
      violation("%s: seq %" PRIu64 " twice in history", W.convs[h[i].conv].name, h[i].seq);
  for (size_t i = 0; i < W.acks.n; i++) {
    const fact_msg *x = hist_find(a[i].conv, a[i].seq);
    if (!x || strcmp(x->cmid, a[i].cmid))
      violation("acknowledged %s:%" PRIu64 " (cmid %s) is %s in history", W.convs[a[i].conv].name,
                a[i].seq, a[i].cmid, x ? "another message" : "missing");
  }
}

static int by_entry(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->conv != y->conv) return x->conv < y->conv ? -1 : 1;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return (int)x->type - (int)y->type;
}

static void sort_mailboxes(void) {
  for (int u = 0; u < W.n_users; u++) {
    W.sorted[u] = malloc((W.mail[u].n + 1) * sizeof(entry));
    if (!W.sorted[u]) abort();
    memcpy(W.sorted[u], W.mail[u].p, W.mail[u].n * sizeof(entry));
    qsort(W.sorted[u], W.mail[u].n, sizeof(entry), by_entry);
  }
}

/* The first entry of user u at (c, seq) in the sorted copy, or the index past them. */
static size_t first_at(int u, int c, uint64_t seq) {
  size_t lo = 0, hi = W.mail[u].n;
  const entry key = {.conv = c, .seq = seq, .type = 0};
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (by_entry(&W.sorted[u][mid], &key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static bool in_any_mailbox(int c, uint64_t seq) {
  for (int k = 0; k < W.convs[c].n_members; k++) {
    int u = W.convs[c].members[k];
    for (size_t i = first_at(u, c, seq);
         i < W.mail[u].n && W.sorted[u][i].conv == c && W.sorted[u][i].seq == seq; i++)
      if (W.sorted[u][i].type != QIM_EVENT_TYPE_CONTROL) return true; /* Controls reuse seqs */
  }
  return false;
}

/* Every seq from the first message on is accounted for, and none beyond the latest. */
static void check_gaps(void) {
  const fact_msg *h = W.hist.p;
  for (int c = 0; c < W.n_convs; c++) {
    uint64_t first = 0, last = 0;
    for (size_t i = 0; i < W.hist.n; i++)
      if (h[i].conv == c) {
        if (!first) first = h[i].seq;
        last = h[i].seq;
      }
    if (!first) continue;
    if (last > W.convs[c].latest)
      violation("%s: history has seq %" PRIu64 " beyond the latest %" PRIu64, W.convs[c].name, last,
                W.convs[c].latest);
    for (uint64_t s = first; s <= W.convs[c].latest; s++)
      if (!hist_find(c, s) && !in_any_mailbox(c, s))
        violation("%s: seq %" PRIu64 " is a gap (neither in history nor in a mailbox)",
                  W.convs[c].name, s);
  }
}

/* Each acknowledged message is once a Message entry of every member; the sender's has its
 * cmid. */
static void check_delivery(void) {
  const fact_msg *a = W.acks.p;
  for (size_t i = 0; i < W.acks.n; i++) {
    if (i && !strcmp(a[i].cmid, a[i - 1].cmid)) continue; /* a retried ack: same message */
    const conv *c = &W.convs[a[i].conv];
    for (int k = 0; k < c->n_members; k++) {
      int u = c->members[k], found = 0;
      const entry *e = W.sorted[u];
      for (size_t j = first_at(u, a[i].conv, a[i].seq);
           j < W.mail[u].n && e[j].conv == a[i].conv && e[j].seq == a[i].seq; j++) {
        if (e[j].type != QIM_EVENT_TYPE_MESSAGE) continue;
        found++;
        if (u == a[i].sender && strcmp(e[j].cmid, a[i].cmid))
          violation("%s:%" PRIu64 " in its sender's mailbox with cmid '%s', sent as %s", c->name,
                    a[i].seq, e[j].cmid, a[i].cmid);
      }
      if (found != 1)
        violation("%s:%" PRIu64 " is %d times in the mailbox of %s", c->name, a[i].seq, found,
                  W.users[u]);
    }
  }
}

/* Mailbox order follows conversation order, and mailbox seqs only grow. */
static void check_order(void) {
  for (int u = 0; u < W.n_users; u++) {
    const entry *e = W.mail[u].p;
    uint64_t last[MAX_CONVS] = {0}, prev_mseq = 0;
    uint8_t prev_ord = 0;
    for (size_t j = 0; j < W.mail[u].n; j++) {
      if (j && (e[j].mailbox_seq < prev_mseq ||
                (e[j].mailbox_seq == prev_mseq && e[j].ordinal <= prev_ord)))
        violation("mailbox of %s goes back at %" PRIu64, W.users[u], e[j].mailbox_seq);
      prev_mseq = e[j].mailbox_seq;
      prev_ord = e[j].ordinal;
      /* Controls (read positions, edits) carry the seq they refer to, not one of their own. */
      if (e[j].conv < 0 || e[j].type != QIM_EVENT_TYPE_MESSAGE) continue;
      if (e[j].seq <= last[e[j].conv])
        violation("mailbox of %s: %s seq %" PRIu64 " (event type %d, mailbox seq %" PRIu64
                  ") after seq %" PRIu64,
                  W.users[u], W.convs[e[j].conv].name, e[j].seq, (int)e[j].type, e[j].mailbox_seq,
                  last[e[j].conv]);
      last[e[j].conv] = e[j].seq;
    }
  }
}

/* Observed read/recv never go back, and the stored ones are at least the last seen. */
static int check_receipts(qim_store *s) {
  const fact_rr *r = W.rr.p;
  for (int c = 0; c < W.n_convs; c++)
    for (int k = 0; k < W.convs[c].n_members; k++) {
      int u = W.convs[c].members[k];
      uint64_t read = 0, recv = 0;
      for (size_t i = 0; i < W.rr.n; i++) {
        if (r[i].user != u || r[i].conv != c) continue;
        if (r[i].read < read || r[i].recv < recv)
          violation("%s on %s: read/recv went from %" PRIu64 "/%" PRIu64 " to %" PRIu64 "/%" PRIu64,
                    W.users[u], W.convs[c].name, read, recv, r[i].read, r[i].recv);
        read = r[i].read;
        recv = r[i].recv;
      }
      qim_store_member_get_req g = {
          .tenant_id = W.tenant, .conversation_id = W.convs[c].id, .user_id = W.user_ids[u]};
      int rc = QIM_STORE_SYNC(s, conversations.member_get, &g);
      if (rc) return rc;
      if (g.out.read_seq < read || g.out.recv_seq < recv || g.out.recv_seq < g.out.read_seq ||
          g.out.read_seq > W.convs[c].latest)
        violation("%s on %s: stored read/recv %" PRIu64 "/%" PRIu64 ", last seen %" PRIu64
                  "/%" PRIu64 ", latest %" PRIu64,
                  W.users[u], W.convs[c].name, g.out.read_seq, g.out.recv_seq, read, recv,
                  W.convs[c].latest);
      qim_store_member_free(&g.out);
    }
  return 0;
}

int main(int argc, char **argv) {
  const char *url = NULL, *facts = NULL;
  uint64_t tenant = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--store"))
      url = argv[i + 1];
    else if (!strcmp(argv[i], "--facts"))
      facts = argv[i + 1];
    else if (!strcmp(argv[i], "--tenant"))
      tenant = strtoull(argv[i + 1], NULL, 10);
  }
  if (!url || !facts) {
    fprintf(stderr, "usage: qim-crash-check --store URL --facts FILE [--tenant N]\n");
    return 2;
  }
  W.tenant.v = (qim_u128){0, tenant};
  if (read_facts(facts)) return 2;
  qim_config cfg;
  qim_config_defaults(&cfg);
  qim_store_options so = {
      .shards = {.shard_count = cfg.shard_count, .lanes_per_shard = cfg.lanes_per_shard}};
  qim_store *s = NULL;
  int rc = qim_store_open(url, &so, &s);
  if (!rc) rc = load_store(s);
  if (!rc) {
    sort_mailboxes();
    check_acks_and_history();
    check_gaps();
    check_delivery();
    check_order();
    rc = check_receipts(s);
  }
  qim_store_close(s);
  if (rc) {
    fprintf(stderr, "store error: %s\n", qim_err_name(rc));
    return 2;
  }
  size_t entries = 0;
  for (int u = 0; u < W.n_users; u++) entries += W.mail[u].n, free(W.mail[u].p), free(W.sorted[u]);
  printf(
      "# checked %zu acks, %zu history rows, %zu mailbox entries, %zu read/recv observations: "
      "%d violations\n",
      W.acks.n, W.hist.n, entries, W.rr.n, W.violations);
  free(W.acks.p);
  free(W.hist.p);
  free(W.rr.p);
  return W.violations ? 1 : 0;
}
