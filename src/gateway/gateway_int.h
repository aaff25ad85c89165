/*
 * gateway_int.h — what the gateway's files share: the gateway and loop structs, sessions
 * and their request queue, the per-loop session indexes, worker jobs and reply helpers.
 * Internal to src/gateway/ (names qim__gw_*; types gw_*).
 *
 * Ownership in one paragraph: a gw_session belongs to its loop and lives from on_open
 * until its last reference goes (the connection holds one until on_close; every request
 * and asynchronous operation in flight holds one). After on_close `conn` is NULL, so
 * late completions find a closed session and drop their replies. Everything here is
 * touched only on the session's loop thread, except what gw_loop says is locked.
 */
#ifndef QIM_GATEWAY_INT_H
#define QIM_GATEWAY_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "gateway/gateway.h"
#include "gateway/net.h"
#include "gateway/proto.h"
#include "qim/ids.h"

typedef struct gw_loop gw_loop;
typedef struct gw_session gw_session;

/* ---- indexes: (tenant, id) → sessions of one loop (index.c) ---------------------------------- */

typedef struct gw_key {
  qim_u128 tenant, id;
} gw_key;

typedef struct gw_bucket {
  struct gw_bucket *next;
  gw_key key;
  gw_session **v;
  size_t n, cap;
} gw_bucket;

typedef struct gw_index {
  gw_bucket **b;
  size_t nb, count;
} gw_index;

void qim__gw_index_init(gw_index *x);
void qim__gw_index_free(gw_index *x);
void qim__gw_index_add(gw_index *x, gw_key k, gw_session *s);
void qim__gw_index_remove(gw_index *x, gw_key k, gw_session *s);
/* The sessions under k (valid until the index changes); *n = 0 and NULL when none. */
gw_session *const *qim__gw_index_find(const gw_index *x, gw_key k, size_t *n);

/* ---- sessions (session.c) -------------------------------------------------------------------- */

typedef enum gw_state {
  GW_NEW = 0,  /* connected, no {hi} yet */
  GW_HI = 1,   /* {hi} answered */
  GW_AUTH = 2, /* logged in (implies hi) */
} gw_state;

/* A topic this session is attached to. */
typedef struct gw_attach {
  qim_conversation_id conv;
  char topic[QIM_TOPIC_NAME_CAP];
  uint32_t mode; /* effective access mode (want & given) when attached */
  /* The conversation's latest seq when the session attached: messages up to it belong to
   * history (the client fetches them), so a push of one still in the pipeline is not
   * delivered live — as in Tinode, live {data} is what was published after the attach. */
  qim_conversation_seq since;
  uint64_t kp_at; /* when this session's last typing notice to the topic was relayed (ms) */
} gw_attach;

/* One client message waiting for, or being, handled. */
typedef struct gw_req {
  struct gw_req *next;
  gw_session *s; /* holds a reference while the request runs */
  qim_proto_msg msg;
  qim_trace_id trace;
  bool excl; /* runs alone: nothing before it may still run, nothing after it starts */
} gw_req;

/* Client-chosen cmids of noecho pubs whose own {data} has not come back yet: each is
 * forgotten when its echo is dropped, when its pub fails, or GW_NOECHO_TTL_MS after it was
 * published (a pub that never echoes: a duplicate, or the session left the topic). At most
 * GW_NOECHO_MAX per session; one more noecho pub with its own cmid is refused (503). */
#define GW_NOECHO_MAX 4096
#define GW_NOECHO_TTL_MS 60000u

typedef struct gw_noecho {
  qim_client_message_id cmid;
  uint64_t at_ms; /* when it was published */
} gw_noecho;

/* A {pub} of this session not acknowledged yet: its {data} may come back through the
 * pipeline before the commit's completion reaches us; Tinode clients expect the 202
 * first, so that frame is held here and sent right after the ack. */
typedef struct gw_pending {
  qim_client_message_id cmid;
  qim_ws_frame *held;
} gw_pending;

struct gw_session {
  gw_loop *loop;
  qim_conn *conn; /* NULL once the connection closed */
  uint64_t conn_id;
  unsigned refs;
  gw_state state;
  uint32_t ver; /* hi.ver as qim_proto_version_parse */
  char ua[128];
  qim_tenant_id tenant;
  qim_user_id user;
  char uname[QIM_TOPIC_NAME_CAP]; /* "usr…" once authenticated */
  qim_device_id device;           /* per session (Tinode clients have no stable id) */
  bool device_stable;             /* hashed from hi.device: the device may {sync} (sync.c) */
  bool routed;                    /* a mailbox route is registered for this session */
  bool me;                        /* attached to "me" */
  gw_attach *att;
  size_t natt, catt;
  gw_req *qhead, *qtail; /* requests not started yet, in arrival order */
  unsigned qlen;
  unsigned running; /* requests started and not done */
  bool excl_running;
  gw_noecho *noecho; /* noecho pubs with client-chosen cmids awaiting their echo */
  size_t nnoecho, cnoecho;
  uint8_t nonce[8]; /* first half of the cmids this session makes (see pub.c) */
  uint64_t made;    /* cmids made so far */
  gw_pending *pend; /* pubs in flight (at most queue_max) */
  size_t npend, cpend;
  double req_tokens; /* request token bucket (request_rate / request_burst) */
  uint64_t req_at;   /* when req_tokens was last topped up (monotonic ms) */
};

void qim__gw_session_ref(gw_session *s);
void qim__gw_session_unref(gw_session *s);
static inline bool qim__gw_session_open(const gw_session *s) { return s->conn != NULL; }
gw_attach *qim__gw_session_attached(gw_session *s, qim_conversation_id conv);
/* Attaches (or updates the mode of) a conversation; -ENOSPC over attach_max. */
int qim__gw_session_attach(gw_session *s, qim_conversation_id conv, const char *topic, uint32_t mode,
                          qim_conversation_seq since);
void qim__gw_session_detach(gw_session *s, qim_conversation_id conv);
/* Attaches the session to `me` (on) or detaches it; counts it for presence. */
void qim__gw_session_me(gw_session *s, bool on);
/* Logs the session in as `user` of its tenant: indexes it and adds the mailbox route. */
void qim__gw_session_login(gw_session *s, qim_user_id user);
/* True when `cmid` is a noecho pub of this session: one whose cmid the session made with
 * the noecho mark, or a client-chosen one awaiting its echo (which this call consumes). */
bool qim__gw_session_noecho_take(gw_session *s, const qim_client_message_id *cmid);
/* Remembers a client-chosen noecho cmid: 0, or -ENOSPC with GW_NOECHO_MAX awaiting. */
int qim__gw_session_noecho_add(gw_session *s, const qim_client_message_id *cmid);
/* Forgets a client-chosen noecho cmid whose pub failed (no echo will come). */
void qim__gw_session_noecho_drop(gw_session *s, const qim_client_message_id *cmid);
/* A fresh ClientMessageId for a pub without one: nonce | 7-byte counter | mark byte. */
qim_client_message_id qim__gw_session_cmid(gw_session *s, bool noecho);

/* net.h handler callbacks (the handler's ud is the gateway). */
void qim__gw_on_open(qim_conn *c, void *ud);
void qim__gw_on_message(qim_conn *c, int opcode, const uint8_t *data, size_t len, void *ud);
void qim__gw_on_close(qim_conn *c, int code, void *ud);

/* The request is finished: frees it, releases its session reference, starts the next. */
void qim__gw_req_done(gw_req *r);

/* The actor a request acts as. */
qim_authenticated_actor qim__gw_actor(const gw_session *s);

/* Pubs in flight (session.c): add when the pub starts; hold returns true when `f` was
 * kept for after the ack (a reference is taken); done sends what was held and forgets
 * the pub — call it right after the ack or error ctrl. */
void qim__gw_pending_add(gw_session *s, const qim_client_message_id *cmid);
bool qim__gw_pending_hold(gw_session *s, const qim_client_message_id *cmid, qim_ws_frame *f);
void qim__gw_pending_done(gw_session *s, const qim_client_message_id *cmid);

/* ---- replies (session.c) ---------------------------------------------------------------------- */

/* Sends `json` (len bytes) as a text frame when the session is open. Frees json. */
void qim__gw_send(gw_session *s, char *json, size_t len);
/* {ctrl} with the request's id; `topic` NULL = the request's topic. Steals params. */
void qim__gw_ctrl(gw_session *s, const gw_req *r, const char *topic, int code, const char *text,
                  json_t *params);
/* {ctrl} for a status (err.h) with the request's id and topic. */
void qim__gw_fail(gw_session *s, const gw_req *r, int rc);
/* The {ctrl} code and text for a status; QIM_AGAIN and -EAGAIN are 503. */
int qim__gw_err_code(int rc, const char **text);
uint64_t qim__gw_now(const qim_gateway *g);

/* Frames built off the loop (in a worker) and sent in order on it. */
typedef struct gw_out {
  char **buf;
  size_t *len;
  size_t n, cap;
  unsigned errors; /* error ctrls among them (counted in the stats when flushed) */
} gw_out;
void qim__gw_out_add(gw_out *o, char *buf, size_t len); /* takes buf; NULL (no memory) is skipped */
/* Like qim__gw_out_add for a builder's result: `len` is read after the builder ran (a
 * plain `add(o, build(&len), len)` reads len before, in an unspecified order). */
static inline void qim__gw_out_built(gw_out *o, char *buf, const size_t *len) { qim__gw_out_add(o, buf, *len); }
void qim__gw_out_ctrl(gw_out *o, const char *id, const char *topic, int code, const char *text,
                      json_t *params, uint64_t now);
void qim__gw_out_fail(gw_out *o, const char *id, const char *topic, int rc, uint64_t now);
void qim__gw_out_flush(gw_session *s, gw_out *o); /* sends (if open) and empties */
void qim__gw_out_free(gw_out *o);

/* ---- worker jobs (session.c) ------------------------------------------------------------------- */

typedef struct gw_job gw_job;
struct gw_job {
  uv_work_t work;
  gw_loop *loop;
  gw_req *req;               /* the request the job answers (owned), or NULL */
  void (*run)(gw_job *j);    /* worker thread: may block */
  void (*after)(gw_job *j);  /* loop thread, session may be closed; NULL = flush + done */
  void (*destroy)(gw_job *j); /* frees the job's own fields; NULL = nothing */
  gw_out out;
};

/* Queues j->run on the thread pool; after it, j->after (or flush + req done), then
 * j->destroy and qim_free(j). j must be allocated with qim_malloc/qim_calloc. */
void qim__gw_job_start(gw_loop *l, gw_job *j);
/* What after() ends with by default: flush the frames to the request's session, finish
 * the request. */
void qim__gw_job_finish(gw_job *j);

/* ---- loops and the gateway (gateway.c) ------------------------------------------------------- */

/* Login/acc attempts per remote address (auth.c): a token bucket per slot of a fixed
 * table, so the memory is bounded whatever the number of addresses. */
#define GW_RATE_SLOTS 1024
typedef struct gw_rate {
  uint8_t addr[16];
  bool used;
  double tokens;
  uint64_t at_ms;
} gw_rate;

/* Online/offline presence (presence.c): a registry of live session counts shared by every
 * loop, and its runner on loop 0. */
typedef struct gw_presence gw_presence;

/* A cross-loop event (note.c): posted to every loop, handled there against its indexes. */
typedef struct gw_event gw_event;

struct gw_loop {
  qim_gateway *gw;
  unsigned index;
  uv_loop_t *uv;
  qim_cq *cq;
  qim_connection_shard_id cs;
  gw_index by_user; /* (tenant, user) → logged-in sessions */
  gw_index by_conv; /* (tenant, conversation) → attached sessions */
  unsigned pending; /* operations whose completion still runs here (jobs, commits, store) */
  bool stopping;
  /* Posting from other threads (push sinks, other loops): under post_mu. */
  pthread_mutex_t post_mu;
  bool accepting;    /* the cq may be posted to */
  unsigned posted;   /* events posted and not yet handled (bounded) */
  /* Push batches waiting, handled one at a time in order (push.c). */
  struct gw_push *push_head, *push_tail;
  bool push_busy;
  gw_rate *rate;         /* GW_RATE_SLOTS entries */
  struct gw_kind *kinds; /* push.c: conversation kinds seen (made on first use) */
};

struct qim_gateway {
  qim_gateway_deps d;
  qim_gateway_options o;
  qim_net *net;
  gw_loop *loops;
  unsigned nloops;
  bool started, stopped;
  char dummy_hash[128]; /* argon2id of a random password (auth.c) */
  gw_presence *pres;    /* online counts and the presence runner (presence.c) */
  _Atomic uint64_t st_sessions, st_auth, st_requests, st_errors, st_data, st_pres, st_batches,
      st_dropped, st_pres_onoff, st_pres_deferred, st_capped, st_rate_limited, st_kp_limited;
};

/* Any thread: posts `it` to loop l's completion queue unless it stops; false when refused
 * (the loop is stopping or has `limit` events queued already). */
bool qim__gw_loop_post(gw_loop *l, qim_cq_item *it, unsigned limit);
/* On the loop: an event posted with qim__gw_loop_post was handled. */
void qim__gw_loop_posted_done(gw_loop *l);
/* On the loop: an asynchronous operation started / completed (keeps the cq alive). */
void qim__gw_loop_hold(gw_loop *l);
void qim__gw_loop_release(gw_loop *l);

static inline gw_key qim__gw_key(qim_tenant_id t, qim_u128 id) { return (gw_key){t.v, id}; }

/* ---- handlers (one file each) ------------------------------------------------------------------ */

void qim__gw_hi(gw_req *r);
void qim__gw_acc(gw_req *r);
void qim__gw_login(gw_req *r);
void qim__gw_sub(gw_req *r);
void qim__gw_leave(gw_req *r);
void qim__gw_pub(gw_req *r);
void qim__gw_get(gw_req *r);
void qim__gw_set(gw_req *r);
void qim__gw_del(gw_req *r);
void qim__gw_note(gw_req *r);
void qim__gw_sync(gw_req *r);

/* Worker thread (blocking): adds `cursor`, a MailboxCursor at the lane watermark for the
 * actor's device, to login reply params (sync.c); nothing when it cannot be opened. */
void qim__gw_sync_login_cursor(qim_gateway *g, const qim_authenticated_actor *a, json_t *params);

/* Token of (tenant, user, epoch, expires) signed with the gateway's key (auth.c); the
 * standard base64 text Tinode clients store and send back as a login secret. */
#define GW_TOKEN_RAW 81
int qim__gw_token_make(const qim_gateway *g, qim_tenant_id t, qim_user_id u, uint64_t epoch,
                       uint64_t expires_ms, char *out, size_t cap);
/* Verifies raw token bytes: 0 and the fields, or -EACCES (bad signature, expired, wrong
 * tenant, malformed). */
int qim__gw_token_check(const qim_gateway *g, const uint8_t *raw, size_t len, qim_tenant_id tenant,
                        qim_user_id *user, uint64_t *epoch, uint64_t *expires_ms);
/* The same without a gateway (tests/fuzz/fuzz_token.c): seal writes the MAC of raw's first
 * 49 bytes into its last 32; open checks raw against `key` at `now_ms`. */
#define GW_TOKEN_KEY 32
void qim__gw_token_seal(const uint8_t key[GW_TOKEN_KEY], uint8_t raw[GW_TOKEN_RAW]);
int qim__gw_token_open(const uint8_t key[GW_TOKEN_KEY], uint64_t now_ms, const uint8_t *raw,
                       size_t len, qim_tenant_id tenant, qim_user_id *user, uint64_t *epoch,
                       uint64_t *expires_ms);

void qim__gw_dummy_hash(qim_gateway *g);

/* Topic queries (get.c), run in a worker: appends the frames answering `q` for `topic`
 * (request id `id`) to `out`, in Tinode's order desc, sub, data, del. */
void qim__gw_get_me(qim_gateway *g, const qim_authenticated_actor *a, const char *id,
                    const qim_proto_get_query *q, gw_out *out);
void qim__gw_get_group(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                       const char *topic, const char *id, const qim_proto_get_query *q, gw_out *out);

/* Sets user u's own `want` on its member row of conv (set.c): a store UPDATE, a new
 * membership version; given stays; the role follows given. Blocks (worker only). */
int qim__gw_member_want(qim_gateway *g, qim_tenant_id t, qim_conversation_id conv, qim_user_id u, uint32_t want,
                        uint32_t given);

/* Resolves a group topic name to its conversation: 0, or -ENOENT for anything else. */
int qim__gw_group_conv(const char *topic, qim_conversation_id *conv);

/* P2P topics (p2p.c). The peer named by a `usr…` topic of session s: 0, or -ENOENT (not a
 * user name, or s's own id). */
int qim__gw_p2p_peer(const gw_session *s, const char *topic, qim_user_id *peer);
/* A topic name as session s sees it (grp…, or usr… = the direct conversation with that
 * user) to its conversation: 0, or -ENOENT. */
int qim__gw_topic_conv(const gw_session *s, const char *topic, qim_conversation_id *conv);
void qim__gw_sub_p2p(gw_req *r);
/* acs {want, given, mode} as the ctrl of a {sub} carries it (p2p.c). */
json_t *qim__gw_acs_json(uint32_t want, uint32_t given);
/* get on a P2P topic (get.c): desc carries the peer's public, sub both members, data and
 * del come from the history module as for groups. */
void qim__gw_get_p2p(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv,
                     qim_user_id peer, const char *topic, const char *id,
                     const qim_proto_get_query *q, gw_out *out);

/* The `me` topic as the session list (me.c). Any thread: sends `pr` (topic "me") to every
 * `me` session of (tenant, user) on every loop. gone: the topic was deleted or the user
 * removed from it; upd: its description changed. `topic` is the name as that user sees
 * it. */
void qim__gw_me_pres(qim_gateway *g, qim_tenant_id tenant, qim_user_id user,
                     const qim_proto_pres_frame *pr);
void qim__gw_me_gone(qim_gateway *g, qim_tenant_id tenant, qim_user_id user, const char *topic);
void qim__gw_me_upd(qim_gateway *g, qim_tenant_id tenant, qim_user_id user, const char *topic);
/* Blocking (a worker): `upd` about group conv to every current member, as `a` sees them. */
void qim__gw_me_upd_group(qim_gateway *g, const qim_authenticated_actor *a, qim_conversation_id conv);

/* The session list behind `get sub` on `me` (me.c): one page of the user's CURRENT
 * conversations (groups and direct; left, banned and deleted ones skipped), newest
 * activity first (LastActivityId, then conversation id, descending — the store's order).
 * page->sessions[i] has the latest seq, the LastActivityId and the unread count
 * (latest − read; 0 without R); rows (members[i], convs[i]) are the store rows behind it
 * (free with qim__gw_me_rows_free(rows, page->session_count)). `keep` (NULL = all)
 * filters rows further (ims, topic). req->limit 0 is -EINVAL. has_more / next_cursor:
 * the store's cursor after the last row returned (has_more may be true when only
 * filtered rows follow). Blocking: run it in a worker. */
typedef struct gw_me_rows {
  qim_store_member *members;
  qim_store_conversation *convs;
} gw_me_rows;
typedef bool (*gw_me_keep)(const qim_store_member *m, const qim_store_conversation *c, void *ud);
int qim__gw_me_sessions(qim_store *st, qim_tenant_id tenant, qim_user_id user,
                        const qim_session_page_request *req, gw_me_keep keep, void *ud,
                        qim_session_page *page, gw_me_rows *rows);
void qim__gw_me_rows_free(gw_me_rows *rows, size_t n);
/* The name user `viewer` gives conversation c: grp… for a group, the peer's usr… for a
 * direct one (p2p.c). */
void qim__gw_conv_topic(const qim_store_conversation *c, qim_user_id viewer, char *out, size_t cap);

/* The {data} frame of a message (push.c; live delivery and {get what:"data"}): `d` without
 * head and content, which come from `c` — a Tinode payload's stored text as it is, else the
 * history module's conversion. NULL when the content cannot be turned into Tinode form. */
char *qim__gw_data_frame(const qim_proto_data_frame *d, const qim_message_content *c, size_t *len);

/* Push sink (push.c): registered per loop, called on mailbox workers. */
void qim__gw_push_sink(qim_push_batch *batch, void *ctx);
/* Drops queued push batches (loop stopping). */
void qim__gw_push_drop(gw_loop *l);

/* Cross-loop ephemeral notices (note.c). */
void qim__gw_event_run(qim_cq_item *it);

/* ---- presence (presence.c) ---------------------------------------------------------------------- */

/* What a count is about: a user on `me` (online), a user's sessions attached to a topic
 * (member presence in the topic), all sessions attached to a topic (the topic is active). */
typedef enum gw_pres_kind { GW_PRES_ME = 1, GW_PRES_MEMBER = 2, GW_PRES_TOPIC = 3 } gw_pres_kind;

/* One state change to tell clients about (`user` is zero for GW_PRES_TOPIC; `actor` there
 * is the last user whose session changed the count, so members can be listed as them). */
typedef struct gw_pres_change {
  gw_pres_kind kind;
  qim_tenant_id tenant;
  qim_conversation_id conv;
  qim_user_id user, actor;
  bool on;
} gw_pres_change;

gw_presence *qim__gw_presence_new(void);
void qim__gw_presence_free(gw_presence *p);
/* Any thread: adds `delta` (+1/-1) sessions to a count; a count crossing zero marks the
 * entry for the next take. For GW_PRES_ME `conv` is ignored; for GW_PRES_TOPIC `user` is
 * remembered as the actor. */
void qim__gw_presence_count(gw_presence *p, gw_pres_kind k, qim_tenant_id t, qim_conversation_id conv,
                            qim_user_id user, int delta);
/* Any thread: true when clients were last told "on" (the last take's state, not the live
 * count). A reply that listed an "on" its take had not announced yet could be followed by a
 * flap back to zero within the interval, which announces nothing: that "on" would never get
 * its "off". */
bool qim__gw_presence_is_on(gw_presence *p, gw_pres_kind k, qim_tenant_id t, qim_conversation_id conv,
                            qim_user_id user);
/* Coalesces what changed since the last take: an entry whose state is back to what
 * clients were last told (an on/off flap) yields nothing. Member changes of one topic are
 * limited to max(1, fanout_max / sessions attached to it) per take; the others stay for
 * the next take and are counted in *deferred. Returns the number of changes in *out
 * (qim_free it; NULL when none). */
size_t qim__gw_presence_take(gw_presence *p, uint32_t fanout_max, gw_pres_change **out, uint64_t *deferred);
/* Live entries (tests: entries go away once their count is zero and clients know). */
size_t qim__gw_presence_entries(gw_presence *p);

/* Session hooks: a topic attach (+1) / detach (-1); `me` attach / detach. */
void qim__gw_presence_attach(gw_session *s, qim_conversation_id conv, int delta);
void qim__gw_presence_me(gw_session *s, int delta);
/* Loop 0 runs the coalescing timer and the presence jobs (gateway.c loop hooks). */
void qim__gw_presence_loop_start(gw_loop *l);
void qim__gw_presence_loop_stop(gw_loop *l);

/* Admin routes (admin.c). */
int qim__gw_admin_routes(qim_gateway *g);

#endif /* QIM_GATEWAY_INT_H */
