/*
 * client_int.h — what the files of the client runtime share (docs/client.md):
 *   client.c          host API, runtime thread, command queue
 *   client_events.c   the bounded event queue and the backpressure it drives
 *   client_store.c    the local SQLite store
 *   client_conn.c     TCP, WebSocket handshake, frames, deadlines, reconnect backoff
 *   client_session.c  the protocol: hi, login, sync, rebuild, pending sends, pages
 *   client_frame.c    JSON frames in and out (jansson)
 * Fields marked (loop) are touched only by the runtime thread; (mu) under c->mu.
 */
#ifndef QIM_CLIENT_INT_H
#define QIM_CLIENT_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "client/wsc.h"
#include "qim/client.h"

/* ---- local store (client_store.c) ----------------------------------------------------------- */

typedef struct qim__client_store qim__client_store;

/* One sync entry as it is kept: its event id, topic, seq, sender and the JSON object. */
typedef struct qim__client_entry {
  qim_event_id event_id;
  const char *topic, *type, *from; /* "" when absent */
  uint64_t seq;                    /* 0 when absent */
  const char *json;                /* the entry as received, compact */
} qim__client_entry;

typedef struct qim__client_pending {
  qim_client_message_id cmid;
  char topic[65];
  char *content; /* owned JSON text */
} qim__client_pending;

/*
 * Store functions return 0 or QIM_E_CLIENT_LOCAL_STORE_FAILURE (raised, the SQLite message
 * logged); each is one statement or one transaction, safe from any thread (one mutex).
 */
/* Opens (creating the schema) the store of `loc`; *out is closed by store_close. */
int qim__client_store_open(const qim_local_store_location *loc, qim__client_store **out);
void qim__client_store_close(qim__client_store *s); /* accepts NULL */
/* The device id, made (random, non-zero) and kept at the first call on a new store. */
int qim__client_store_device(qim__client_store *s, qim_device_id *out);
/* The stored cursor as a new string the caller frees (qim_free); *out NULL when none. */
int qim__client_store_cursor(qim__client_store *s, char **out);
/* Replaces the cursor; NULL drops it. */
int qim__client_store_set_cursor(qim__client_store *s, const char *cursor);
/* One page in one transaction: entries not stored yet (inserted[i] says which; summaries
 * follow them, `self` is the own user id for unread counts), then `cursor`. */
int qim__client_store_add_page(qim__client_store *s, const qim__client_entry *e, size_t n,
                               const char *self, const char *cursor, bool *inserted);
/* Rebuild: deletes entries and summaries and sets `cursor` (NULL: none), atomically;
 * pending sends stay. */
int qim__client_store_reset(qim__client_store *s, const char *cursor);
/* A session listing's view of one conversation: latest seq and read position. */
int qim__client_store_set_summary(qim__client_store *s, const char *topic, uint64_t latest,
                                  uint64_t read);
/* Adds a pending send (durable when it returns); a cmid already pending fails. */
int qim__client_store_pending_add(qim__client_store *s, const qim_client_message_id *cmid,
                                  const char *topic, const char *content);
int qim__client_store_pending_remove(qim__client_store *s, const qim_client_message_id *cmid);
int qim__client_store_pending_drop_topic(qim__client_store *s, const char *topic);
/* Every pending send in the order they were made; free with qim__client_pending_free. */
int qim__client_store_pending_list(qim__client_store *s, qim__client_pending **out, size_t *n);
void qim__client_pending_free(qim__client_pending *p, size_t n); /* accepts NULL */

/* ---- event queue (client_events.c) ----------------------------------------------------------- */

typedef struct qim__client_equeue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  qim_client_event *ring;
  size_t cap, head, count;
  bool export_failed; /* reported once by the next poll */
  bool want_wake;     /* the runtime holds events: wake it when room appears */
  uv_async_t *wake;
  qim_connection_state state;
} qim__client_equeue;

/* ---- the client --------------------------------------------------------------------------------
 */

enum { QIM__CLIENT_CMD_CAP = 64 };

typedef enum qim__client_cmd_kind {
  QIM__CMD_CONNECT,
  QIM__CMD_FLUSH,
  QIM__CMD_JOIN,
  QIM__CMD_SESSIONS,
  QIM__CMD_MEMBERS,
  QIM__CMD_STOP,
} qim__client_cmd_kind;

typedef struct qim__client_cmd {
  qim__client_cmd_kind kind;
  qim_client_credentials cr; /* CONNECT: owned copies */
  char topic[65];
} qim__client_cmd;

/* One request waiting for its reply on the current connection. */
typedef struct qim__client_wait {
  char id[80];
  uint64_t deadline_ms;
} qim__client_wait;

typedef struct qim__client_conn qim__client_conn;

struct qim_client {
  /* immutable after open */
  char host[256], hostport[300], path[600];
  int port;
  bool ipv6;
  qim_client_config cfg; /* url/api_key/scope pointers cleared: use the copies above */
  qim_tenant_id tenant;
  qim_device_id device;
  char device_text[40];
  qim__client_store *store;

  /* host ↔ runtime */
  pthread_mutex_t mu;
  qim__client_cmd cmds[QIM__CLIENT_CMD_CAP]; /* (mu) ring */
  size_t cmd_head, cmd_count;                /* (mu) */
  bool has_credentials;                      /* (mu) a connect was asked for */
  qim__client_equeue events;
  uv_loop_t loop;
  uv_async_t wake;
  uv_thread_t thread;

  /* (loop) */
  bool stopping;
  qim_connection_state state;
  qim_client_credentials cr; /* owned copies; token replaced by the login's */
  bool want_online;          /* reconnect after a loss */
  uint32_t backoff_ms;
  uv_timer_t reconnect_timer, tick_timer, export_timer, retry_timer;
  qim__client_conn *conn;
  qim_client_event *held; /* events the full queue could not take yet */
  size_t held_n, held_cap;
  bool paused;
  char self[65];    /* own user id (usr…) after login */
  char *token;      /* the login's token, for reconnects */
  bool token_login; /* the current login uses a token */
  qim__client_wait *waits;
  size_t wait_n, wait_cap;
  bool syncing, sync_more, sync_dirty, rebuilding;
  bool sync_had_cursor; /* the {sync} in flight carried a cursor */
  char **joined;        /* topics joined on this connection */
  size_t joined_n;
  char **joining;
  size_t joining_n;
  qim__client_cmd *deferred; /* host commands waiting for Online or for their topic */
  size_t deferred_n, deferred_cap;
  bool retry_sync; /* the retry timer re-sends {sync} (after a 503) */
};

/* client.c: the next host command, false when none (any thread). */
bool qim__client_take_cmd(qim_client *c, qim__client_cmd *out);

/* client_events.c. The queue is shared with host threads; the rest runs on the loop. */
void qim__client_equeue_init(qim__client_equeue *q, size_t cap, uv_async_t *wake);
void qim__client_equeue_destroy(qim__client_equeue *q); /* releases events not polled */
/* Queues `ev` (taking what it owns), or holds it and pauses the connection when full. */
void qim__client_emit(qim_client *c, qim_client_event *ev);
void qim__client_emit_state(qim_client *c, qim_connection_state st); /* only on a change */
void qim__client_emit_failed(qim_client *c, int code);
/* The host made room: held events move over; reading resumes when none is left. */
void qim__client_events_drained(qim_client *c);
void qim__client_events_free_held(qim_client *c);

/* client_conn.c (loop). */
/* Connects (state Connecting); failures arrive as events and a scheduled reconnect. */
void qim__client_conn_start(qim_client *c);
/* Closes the connection (if any), forgets its requests, Disconnected unless Kicked, and
 * schedules a reconnect when `reconnect`. Safe inside the connection's own callbacks. */
void qim__client_conn_drop(qim_client *c, bool reconnect);
/* Sends `frame` (stolen) as one text frame: 0, -ENOTCONN before the upgrade, -errno. */
int qim__client_conn_send(qim_client *c, json_t *frame);
/* Stops (true) or resumes reading; resuming restarts deadlines or a due reconnect. */
void qim__client_conn_pause(qim_client *c, bool pause);
/* A request `id` now waits for its reply, within deadline_ms; take it when it comes. */
void qim__client_wait_add(qim_client *c, const char *id);
bool qim__client_wait_take(qim_client *c, const char *id); /* false: not waited for */
void qim__client_schedule_reconnect(qim_client *c);        /* after the backoff delay */
uint64_t qim__client_now_ms(void);                         /* CLOCK_MONOTONIC */

/* client_session.c (loop). */
void qim__client_session_open(qim_client *c); /* the WebSocket is up: say hi */
/* One text frame from the server; malformed → ProtocolFailure (event) and a drop. */
void qim__client_session_frame(qim_client *c, const char *text, size_t len);
void qim__client_session_lost(qim_client *c); /* the connection is gone: SyncIncomplete? */
void qim__client_session_command(qim_client *c, const qim__client_cmd *cmd);
void qim__client_session_free(qim_client *c); /* after the loop stopped */

/* client_frame.c: -EPROTO for a frame without the documented shape. */
/* A {sync} entry as a MailboxEntry (owning its content bytes). */
int qim__client_frame_entry(qim_client *c, json_t *e, qim_mailbox_entry *out);
/* A {meta sub} listing as a page the caller releases with the event. */
int qim__client_frame_members(json_t *subs, qim_member_page **out);
int qim__client_frame_sessions(qim_client *c, json_t *subs, qim_session_page **out);
/* grp… → the group's id; usr… → the direct conversation of this user and the peer. */
int qim__client_conversation(qim_client *c, const char *topic, qim_conversation_id *out);
void qim__client_cmid_text(const qim_client_message_id *cmid, char out[23]);
int qim__client_cmid_parse(const char *text, qim_client_message_id *out);

#endif /* QIM_CLIENT_INT_H */
