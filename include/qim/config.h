/*
 * config.h — every setting qimd needs, where each comes from, and how it is checked.
 *
 * Sources, highest precedence first: command-line flags (`--listen`, `--max-message-size`,
 * ...), environment variables (`QIM_LISTEN`, `QIM_MAX_MESSAGE_SIZE`, ...), a configuration
 * file (`--config FILE` or `QIM_CONFIG`), built-in defaults. The file holds `key = value`
 * lines; `#` starts a comment at the start of a line or after whitespace; keys are the
 * names in the table of config.c (qim_config_write_help prints it). List settings
 * (api_key, service_token, tenant_retention) may repeat; a source that sets a list replaces the
 * lists of lower sources as a whole.
 *
 * Bad configuration is always an error that names the key and the source, e.g.
 *   config: listen: expected HOST:PORT, got 'x' (from --listen)
 * never a silent fallback to a default. Unknown keys in the file, unknown flags, and a
 * scalar key given twice in one source are errors too. Unknown QIM_* environment
 * variables are ignored (the test harness sets QIM_ERRLOG and friends).
 *
 * A qim_config is a plain value: no heap members, copy it freely, nothing to free.
 * Durations are in milliseconds (fields end in _ms), sizes in bytes.
 */
#ifndef QIM_CONFIG_H
#define QIM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qim/log.h"
#include "qim/types.h"

#define QIM_CONFIG_HOST_CAP 256
#define QIM_CONFIG_PATH_CAP 1024
#define QIM_CONFIG_API_KEY_CAP 128
#define QIM_CONFIG_MAX_API_KEYS 32
#define QIM_CONFIG_SERVICE_CAP 64
#define QIM_CONFIG_TOKEN_CAP 256
#define QIM_CONFIG_TOKEN_MIN 16
#define QIM_CONFIG_MAX_SERVICE_TOKENS 16
#define QIM_CONFIG_MAX_TENANT_RETENTIONS 64

/* The Tinode demo key; by default it selects tenant 1 (PROTOCOL.md §2). */
#define QIM_CONFIG_DEMO_API_KEY "AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K"

/* An API key a client sends (`?apikey=`) and the tenant it selects. */
typedef struct qim_config_api_key {
  char key[QIM_CONFIG_API_KEY_CAP];
  qim_tenant_id tenant;
} qim_config_api_key;

/* RetentionClass::TenantCustom: how long messages of that class are kept for one tenant. */
typedef struct qim_config_tenant_retention {
  qim_tenant_id tenant;
  uint64_t age_ms;
} qim_config_tenant_retention;

/* A bearer token for the admin API and the internal service it authenticates
 * (becomes InternalPrincipal.service_name). */
typedef struct qim_config_service_token {
  char service[QIM_CONFIG_SERVICE_CAP];
  char token[QIM_CONFIG_TOKEN_CAP];
} qim_config_service_token;

typedef struct qim_config {
  /* Where clients connect (gateway). */
  char listen_host[QIM_CONFIG_HOST_CAP]; /* IPv4, hostname, or IPv6 without brackets */
  uint16_t listen_port;

  /* Files. data_dir is created at start; store_url defaults to sqlite:<data_dir>/qim.db. */
  char data_dir[QIM_CONFIG_PATH_CAP];
  char store_url[QIM_CONFIG_PATH_CAP];
  qim_storage_backend store_backend;    /* parsed from store_url */
  char store_path[QIM_CONFIG_PATH_CAP]; /* SQLITE: the database file */
  char store_host[QIM_CONFIG_HOST_CAP]; /* REDIS: host, port and database number */
  uint16_t store_port;
  uint32_t store_db;
  char config_file[QIM_CONFIG_PATH_CAP]; /* the file that was read; "" if none */

  /* Node identity and threads. node_id feeds every WriterId (clock.h). */
  uint32_t node_id;
  uint32_t io_threads;

  /* Message pipeline. shard_count and lanes_per_shard are fixed when a store is created. */
  uint32_t max_message_size;      /* {pub} content limit; larger gets {ctrl 413} */
  uint32_t inline_body_threshold; /* bodies up to this size are inlined into mailboxes */
  uint32_t shard_count;     /* 0: as the store was created (a new store: QIM_STORE_DEFAULT_*) */
  uint32_t lanes_per_shard; /* 0: likewise */
  uint64_t dedupe_window_ms;  /* how long a ClientMessageId replay returns the same seq */
  uint64_t msg_delete_age_ms; /* window for non-owner hard delete and sender recall */
  qim_config_tenant_retention tenant_retentions[QIM_CONFIG_MAX_TENANT_RETENTIONS];
  uint32_t tenant_retention_count; /* TenantCustom ages; tenants not listed keep them */
  uint32_t member_limit;           /* members per group (MemberLimitExceeded above it) */
  uint32_t mailbox_retain_count;   /* dispatch-log records a mailbox lane keeps behind its
                                      watermark; older entries are trimmed (CursorExpired) */
  uint64_t mailbox_retention_interval_ms; /* how often each lane trims */
  uint32_t membership_versions_kept; /* newest membership versions of a group kept readable
                                        (older ones are pruned); 0 = keep every version */
  uint32_t commit_linger_us;         /* store group commit: how long a transaction stays open
                                        for more writes under steady load (0 = never) */

  /* Clients, tenants and accounts. */
  qim_config_api_key api_keys[QIM_CONFIG_MAX_API_KEYS];
  uint32_t api_key_count;
  qim_config_service_token service_tokens[QIM_CONFIG_MAX_SERVICE_TOKENS];
  uint32_t service_token_count;
  uint64_t token_lifetime_ms; /* login token `expires` */
  uint32_t login_min_length;
  uint32_t password_min_length;

  /* Rate limits (token buckets): sends per user, login/acc attempts per remote address. */
  uint32_t send_rate; /* per second */
  uint32_t send_burst;
  uint32_t login_rate; /* per second */
  uint32_t login_burst;
  uint32_t request_rate; /* requests per second per session */
  uint32_t request_burst;
  uint32_t conns_per_ip; /* live connections per remote address; 0 = no limit */

  /* Presence and notices (docs/gateway.md "Presence"). */
  uint64_t presence_interval_ms; /* coalescing interval of on/off presence */
  uint32_t presence_fanout_max;  /* deliveries of one change or notice per I/O loop */
  uint64_t typing_interval_ms;   /* shortest gap between relayed kp per session and topic */

  /* The whole upgrade request must arrive within handshake_timeout (slowloris guard;
   * docs/gateway-transport.md); connections per IP are conns_per_ip above. */
  uint64_t handshake_timeout_ms;

  /* Operations. */
  qim_log_level log_level;
  uint64_t clock_tolerance_ms; /* how far the wall clock may step back before ClockUnsafe */
} qim_config;

/* Why a load failed: `key` is the setting ("" when the problem is not one key, e.g. an
 * unreadable file) and `message` the whole human-readable line, starting "config: ". */
typedef struct qim_config_error {
  char key[64];
  char message[512];
} qim_config_error;

/* Fills `c` with the built-in defaults (store_url is derived later from data_dir). */
void qim_config_defaults(qim_config *c);

/*
 * Builds the effective configuration from defaults, the file, the environment and the
 * flags. `argv` holds only flags (no program name); `envp` is a NULL-terminated
 * "NAME=value" list, NULL for none. Returns 0 and fills `out`, or -EINVAL (bad value,
 * unknown key or flag) / -errno (file unreadable) with `err` filled; `out` is then
 * unspecified. Reads the file named by --config / QIM_CONFIG; nothing else is touched.
 */
int qim_config_load(qim_config *out, int argc, char *const argv[], char *const envp[],
                    qim_config_error *err);

/* The tenant an API key selects: 0, or -ENOENT for an unknown key. */
int qim_config_tenant_for_api_key(const qim_config *c, const char *key, size_t len,
                                  qim_tenant_id *out);

/* The service a token belongs to (compared in constant time): 0 with *service set to a
 * string inside `c`, or -ENOENT. */
int qim_config_service_for_token(const qim_config *c, const char *token, size_t len,
                                 const char **service);

/* Prints every setting: key, flag, environment variable, default and meaning. */
void qim_config_write_help(FILE *out);

/* Prints `c` in file format (service tokens redacted), one `key = value` line each. */
void qim_config_write(const qim_config *c, FILE *out);

/* Name of a log level ("debug", "info", "warn", "error"). */
const char *qim_config_log_level_name(qim_log_level level);

#endif /* QIM_CONFIG_H */
