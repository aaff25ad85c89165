/*
 * client.h — libqimclient, the C client runtime a host application embeds to talk to
 * qimd (docs/client.md): a connection state machine over one WebSocket, a local SQLite
 * store (device id, mailbox cursor, received entries, conversation summaries, pending
 * sends), mailbox sync, rebuild after an expired cursor, and events for the host.
 *
 * Threads. qim_client_open starts one runtime thread with its own libuv loop. Every
 * function here may be called from any host thread; commands travel to the loop through
 * a bounded queue and a uv_async_t, so no host call waits for the network. The runtime
 * never calls into host code: the host polls events (qim_client_poll_event) from a
 * bounded queue. When that queue is full the runtime stops reading the socket (and
 * starts no reconnect) until the host drains it, so nothing is dropped.
 *
 * Status: 0, QIM_AGAIN, -errno or a QIM_E_CLIENT_* / QIM_E_HOST_* domain code (err.h).
 */
#ifndef QIM_CLIENT_H
#define QIM_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "qim/types.h"

typedef struct qim_client qim_client;

/* What the host configures; strings are copied by qim_client_open. Zero means default. */
typedef struct qim_client_config {
  const char *url;                /* "ws://HOST:PORT"; HOST numeric IPv4/IPv6 or "localhost" */
  const char *api_key;            /* ?apikey= of the upgrade request */
  qim_local_store_location store; /* Persistent: a directory that exists and is writable */
  bool persistent_required;       /* a production host: refuse InMemoryForTest */
  qim_tenant_id tenant;           /* the tenant the api key selects (0 = 1, qimd's default) */
  uint32_t deadline_ms;           /* a request without reply for this long fails (10000) */
  uint32_t reconnect_min_ms;      /* first reconnect delay, doubled per failure (250) */
  uint32_t reconnect_max_ms;      /* bound of the backoff (8000) */
  uint32_t event_queue_cap;       /* events the host has not polled yet (256) */
  uint32_t export_deadline_ms;    /* how long the runtime waits for a full queue (30000) */
  uint32_t sync_limit;            /* entries per {sync} page (0 = the server's default) */
} qim_client_config;

typedef enum qim_client_auth {
  QIM_CLIENT_AUTH_BASIC = 0,       /* login + password */
  QIM_CLIENT_AUTH_TOKEN = 1,       /* a token from an earlier login */
  QIM_CLIENT_AUTH_NEW_ACCOUNT = 2, /* create the basic account login + password, then log in */
} qim_client_auth;

typedef struct qim_client_credentials {
  qim_client_auth scheme;
  const char *login, *password; /* BASIC, NEW_ACCOUNT */
  const char *token;            /* TOKEN */
} qim_client_credentials;

/*
 * Opens the local store and starts the runtime (state Disconnected; nothing is sent
 * before qim_client_connect). On success *out is the client, to be released with
 * qim_client_close. Errors: -EINVAL (missing url, api key or scope),
 * QIM_E_HOST_UNSUPPORTED_CAPABILITY (wss:// / TLS, or a host name that is not a
 * literal address or localhost), QIM_E_HOST_PERSISTENT_STORE_REQUIRED,
 * QIM_E_HOST_STABLE_PATH_UNAVAILABLE (scope missing, not a directory or not writable),
 * QIM_E_CLIENT_LOCAL_STORE_FAILURE (SQLite cannot open or migrate the store),
 * QIM_E_HOST_RUNTIME_START_FAILED (loop, async handle or thread cannot be created).
 */
int qim_client_open(const qim_client_config *cfg, qim_client **out);

/*
 * Stops the runtime (closes the connection, joins the thread) and closes the store.
 * Events not polled are released. Accepts NULL. Pending sends stay in a persistent
 * store and are sent by the next runtime that opens it.
 */
void qim_client_close(qim_client *c);

/*
 * Gives the credentials and starts connecting (Connecting → Synchronizing → Online,
 * each a ConnectionChanged event). Strings are copied. Also the way out of Kicked or of
 * a refused login. Errors: -EINVAL, -EAGAIN (command queue full).
 */
int qim_client_connect(qim_client *c, const qim_client_credentials *cr);

/*
 * Queues a message: makes a random, non-zero ClientMessageId (*out_cmid), writes the
 * pending send durably to the local store, and returns; the runtime sends {pub} with
 * that cmid when Online (joining the topic first), and again with the same cmid after
 * every reconnect until the server's ack, which becomes a PendingResolved event.
 * `content_json` is any JSON value (Tinode content). Errors: -EINVAL (topic empty or
 * over 64 bytes, content not JSON), QIM_E_CLIENT_CONNECT_REQUIRED (no
 * qim_client_connect yet), QIM_E_CLIENT_LOCAL_STORE_FAILURE, -EAGAIN (queue full: the
 * send is stored and goes out with the next flush).
 */
int qim_client_send(qim_client *c, const char *topic, const char *content_json,
                    qim_client_message_id *out_cmid);

/*
 * Joins `topic` (a "new…" name creates a group); when the server agrees the runtime
 * re-reads the session list, which arrives as SessionsUpdated. Errors: -EINVAL,
 * QIM_E_CLIENT_CONNECT_REQUIRED, -EAGAIN.
 */
int qim_client_join(qim_client *c, const char *topic);

/* Asks for the session list (get sub on me) → SessionsUpdated. Errors as qim_client_join. */
int qim_client_get_sessions(qim_client *c);

/* Asks for a group's members (get sub) → MembersUpdated. Errors as qim_client_join. */
int qim_client_get_members(qim_client *c, const char *topic);

/*
 * Takes the next event, waiting up to timeout_ms (0: do not wait; negative: wait for
 * ever). Returns 0 with *ev filled (release it with qim_client_event_release),
 * QIM_AGAIN when none came in time, or QIM_E_HOST_EVENT_EXPORT_FAILED once after the
 * host left the queue full for longer than export_deadline_ms: the runtime then
 * dropped its connection (it reconnects once the host drains); the held events follow.
 * -EINVAL for a NULL argument.
 */
int qim_client_poll_event(qim_client *c, qim_client_event *ev, int timeout_ms);

/* Releases what a polled event owns (entries, pages) and zeroes it. Accepts NULL. */
void qim_client_event_release(qim_client_event *ev);

/* The connection state as of the last ConnectionChanged event queued (any thread). */
qim_connection_state qim_client_state(qim_client *c);

#endif /* QIM_CLIENT_H */
