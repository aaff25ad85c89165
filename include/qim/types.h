/*
 * types.h — the value types of the qim core contract (seed 004 §1–§4), in C.
 *
 * Naming: a seed type `FooBar` is `qim_foo_bar`; an enum variant `Foo::Bar` is
 * `QIM_FOO_BAR`. Rust newtypes over u128 / [u8;16] are one-member structs (so a
 * UserId can never be passed where a GroupId is expected); newtypes over plain
 * integers are typedefs. Vec<T> is a pointer plus a count; Option<T> is a flag
 * (`has_*`) or a NULL pointer. Ownership of heap members is stated per struct;
 * free functions live in the module that builds the value (core/record.h).
 */
#ifndef QIM_TYPES_H
#define QIM_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- §1 identities, time and positions ---------------------------------- */

/* Owned byte string; `p` may be NULL when `n` is 0. */
typedef struct qim_bytes {
  uint8_t *p;
  size_t n;
} qim_bytes;

/* An unsigned 128-bit value; encoded big-endian (hi first) everywhere. */
typedef struct qim_u128 {
  uint64_t hi, lo;
} qim_u128;

typedef struct qim_tenant_id { qim_u128 v; } qim_tenant_id;
typedef struct qim_user_id { qim_u128 v; } qim_user_id;
typedef struct qim_device_id { qim_u128 v; } qim_device_id;
typedef struct qim_conversation_id { qim_u128 v; } qim_conversation_id;
typedef struct qim_group_id { qim_u128 v; } qim_group_id; /* a GroupId is also a ConversationId */

typedef struct qim_message_id { uint8_t b[16]; } qim_message_id;
typedef struct qim_client_message_id { uint8_t b[16]; } qim_client_message_id; /* never all-zero */
typedef struct qim_dispatch_id { uint8_t b[16]; } qim_dispatch_id;
typedef struct qim_trace_id { uint8_t b[16]; } qim_trace_id;
typedef struct qim_last_activity_id { uint8_t b[16]; } qim_last_activity_id;

typedef uint64_t qim_event_id;          /* (MailboxSeq << 8) | event_ordinal */
typedef uint32_t qim_writer_id;
typedef uint32_t qim_mailbox_shard_id;
typedef uint32_t qim_connection_shard_id;
typedef uint16_t qim_shard_epoch;
typedef uint8_t qim_lane_id;
typedef uint64_t qim_membership_version;
typedef uint64_t qim_conversation_seq;  /* dense per conversation, < 0x0FFFFFFF */
typedef uint64_t qim_mailbox_seq;       /* (ShardEpoch << 40) | dispatch offset */
typedef uint64_t qim_timestamp_millis;
typedef uint64_t qim_request_id;        /* transport only; never persisted */

/* Opaque page cursor (owned bytes). */
typedef struct qim_page_cursor { qim_bytes bytes; } qim_page_cursor;

typedef enum qim_log_stream_kind {
  QIM_LOG_STREAM_OUTBOX = 0,
  QIM_LOG_STREAM_MAILBOX_DISPATCH = 1,
} qim_log_stream_kind;

typedef struct qim_log_stream {
  qim_log_stream_kind kind;
  qim_mailbox_shard_id shard; /* meaningful for MAILBOX_DISPATCH only */
} qim_log_stream;

typedef struct qim_log_position {
  qim_log_stream stream;
  uint64_t offset;
} qim_log_position;

/* ---- §2 messages, commit and dispatch ------------------------------------ */

typedef enum qim_message_type {
  QIM_MESSAGE_TYPE_TEXT = 0,
  QIM_MESSAGE_TYPE_CUSTOM = 1,
  QIM_MESSAGE_TYPE_MEDIA = 2,
  QIM_MESSAGE_TYPE_CONTROL = 3,
} qim_message_type;

typedef enum qim_retention_class {
  QIM_RETENTION_CLASS_DEFAULT = 0,
  QIM_RETENTION_CLASS_EPHEMERAL_24H = 1,
  QIM_RETENTION_CLASS_COMPLIANCE_HOLD = 2,
  QIM_RETENTION_CLASS_TENANT_CUSTOM = 3,
} qim_retention_class;

typedef enum qim_message_state {
  QIM_MESSAGE_STATE_NORMAL = 0,
  QIM_MESSAGE_STATE_RECALLED = 1,
  QIM_MESSAGE_STATE_EDITED = 2,
  QIM_MESSAGE_STATE_DELETED = 3,
} qim_message_state;

/* Owns custom_type (NULL = None), payload_or_ciphertext and media_metadata
 * (has_media_metadata=false = None). */
typedef struct qim_message_content {
  qim_message_type message_type;
  char *custom_type;
  uint32_t schema_version;
  qim_bytes payload_or_ciphertext;
  bool has_media_metadata;
  qim_bytes media_metadata;
} qim_message_content;

typedef struct qim_send_message {
  qim_request_id request_id;
  qim_client_message_id client_message_id;
  qim_conversation_id conversation_id;
  qim_message_content content;
  qim_user_id *mention_targets;
  size_t mention_count;
  bool has_reply_to;
  qim_conversation_seq reply_to_conversation_seq;
} qim_send_message;

typedef struct qim_authenticated_actor {
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  qim_device_id device_id;
} qim_authenticated_actor;

typedef struct qim_authenticated_send {
  qim_authenticated_actor actor;
  qim_send_message request;
  qim_trace_id trace_id;
} qim_authenticated_send;

typedef struct qim_commit_key {
  qim_tenant_id tenant_id;
  qim_user_id sender_id;
  qim_client_message_id client_message_id;
} qim_commit_key;

/* Forward-only: Reserved < Recorded < Outboxed < Committed. */
typedef enum qim_commit_state {
  QIM_COMMIT_STATE_RESERVED = 0,
  QIM_COMMIT_STATE_RECORDED = 1,
  QIM_COMMIT_STATE_OUTBOXED = 2,
  QIM_COMMIT_STATE_COMMITTED = 3,
} qim_commit_state;

typedef struct qim_message_coordinates {
  qim_message_id message_id;
  qim_conversation_id conversation_id;
  qim_conversation_seq conversation_seq;
  qim_last_activity_id last_activity_id;
} qim_message_coordinates;

typedef struct qim_recipient_chunk {
  uint32_t chunk_id;
  qim_user_id *recipient_ids;
  size_t recipient_count;
} qim_recipient_chunk;

typedef enum qim_delivery_audience_kind {
  QIM_DELIVERY_AUDIENCE_DIRECT = 0,
  QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT = 1,
} qim_delivery_audience_kind;

typedef struct qim_delivery_audience {
  qim_delivery_audience_kind kind;
  struct { /* DIRECT: owns recipients */
    qim_user_id *recipients;
    size_t recipient_count;
  } direct;
  struct { /* GROUP_SNAPSHOT: owns target_shards */
    qim_group_id group_id;
    qim_membership_version membership_version;
    uint32_t member_count;
    qim_mailbox_shard_id *target_shards;
    size_t target_shard_count;
  } group;
} qim_delivery_audience;

typedef struct qim_frozen_delivery_input {
  qim_delivery_audience audience;
  bool inline_body;
  qim_timestamp_millis created_at;
} qim_frozen_delivery_input;

typedef struct qim_message_record {
  qim_message_coordinates coordinates;
  qim_authenticated_actor sender;
  qim_client_message_id client_message_id;
  qim_message_content content;
  qim_retention_class retention_class;
  qim_message_state state;
  qim_timestamp_millis created_at;
} qim_message_record;

typedef struct qim_commit_intent {
  qim_commit_key key;
  qim_message_coordinates coordinates;
  qim_commit_state state;
  qim_frozen_delivery_input delivery;
  qim_message_record record;
  qim_trace_id trace_id;
} qim_commit_intent;

typedef struct qim_committed_message {
  qim_client_message_id client_message_id;
  qim_message_coordinates coordinates;
} qim_committed_message;

typedef enum qim_reserve_result_kind {
  QIM_RESERVE_RESULT_FRESH = 0,
  QIM_RESERVE_RESULT_EXISTING = 1,
  QIM_RESERVE_RESULT_COMMITTED = 2,
} qim_reserve_result_kind;

/* FRESH / EXISTING carry `intent`; COMMITTED carries `committed` (replay the ACK). */
typedef struct qim_reserve_result {
  qim_reserve_result_kind kind;
  qim_commit_intent intent;
  qim_committed_message committed;
} qim_reserve_result;

typedef enum qim_loaded_commit_kind {
  QIM_LOADED_COMMIT_IN_FLIGHT = 0,
  QIM_LOADED_COMMIT_COMMITTED = 1,
} qim_loaded_commit_kind;

typedef struct qim_loaded_commit {
  qim_loaded_commit_kind kind;
  qim_commit_intent intent;         /* IN_FLIGHT */
  qim_committed_message committed;  /* COMMITTED */
} qim_loaded_commit;

typedef struct qim_outbox_publication {
  qim_message_id message_id;
  qim_log_position position;
} qim_outbox_publication;

/* Invariant: record equals intent.record, otherwise InvariantViolation. */
typedef struct qim_committed_envelope {
  qim_commit_intent intent;
  qim_message_record record;
} qim_committed_envelope;

/* tenant_id, sender_id and client_message_id are a qim extension (dispatch encoding
 * version 2): copied from the envelope's record by the fanout, they let the materializer
 * place each recipient on its lane (the hash needs the tenant) and fill MailboxEntry's
 * tenant, sender and ClientMessageId without reading anything but the dispatch log. */
typedef struct qim_group_dispatch {
  qim_dispatch_id dispatch_id;
  qim_message_coordinates source_message;
  qim_tenant_id tenant_id;
  qim_user_id sender_id;
  qim_client_message_id client_message_id;
  qim_mailbox_shard_id target_shard;
  qim_membership_version membership_version;
  qim_recipient_chunk *recipient_chunks;
  size_t chunk_count;
  qim_message_content content;
  bool inline_body;
  qim_timestamp_millis created_at;
  qim_trace_id trace_id;
} qim_group_dispatch;

typedef struct qim_dispatch_log_record {
  qim_log_position position;
  qim_group_dispatch dispatch;
} qim_dispatch_log_record;

typedef struct qim_fanout_plan {
  qim_log_position source;
  qim_group_dispatch *dispatches;
  size_t dispatch_count;
} qim_fanout_plan;

typedef struct qim_fanout_transaction {
  qim_log_position source;
  qim_group_dispatch *dispatches;
  size_t dispatch_count;
} qim_fanout_transaction;

/* ---- §3 mailboxes, history and materialization ---------------------------- */

typedef enum qim_event_type {
  QIM_EVENT_TYPE_MESSAGE = 0,
  QIM_EVENT_TYPE_MENTION = 1,
  QIM_EVENT_TYPE_MEMBERSHIP = 2,
  QIM_EVENT_TYPE_CONTROL = 3,
} qim_event_type;

typedef struct qim_mailbox_entry {
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  qim_mailbox_seq mailbox_seq;
  uint8_t event_ordinal;
  qim_event_id event_id;
  qim_event_type event_type;
  qim_message_coordinates coordinates;
  qim_user_id sender_id;
  bool has_client_message_id;
  qim_client_message_id client_message_id;
  bool has_content;
  qim_message_content content;
  bool body_included;
  qim_timestamp_millis created_at;
} qim_mailbox_entry;

typedef struct qim_dispatch_progress {
  qim_dispatch_id dispatch_id;
  qim_mailbox_shard_id shard;
  qim_lane_id lane;
  uint32_t *completed_chunks;
  size_t completed_chunk_count;
  bool has_completed_at;
  qim_timestamp_millis completed_at;
} qim_dispatch_progress;

typedef struct qim_lane_watermark {
  qim_mailbox_shard_id shard;
  qim_lane_id lane;
  qim_mailbox_seq materialized;
  qim_mailbox_seq floor;
} qim_lane_watermark;

typedef struct qim_append_mailbox_batch {
  qim_mailbox_shard_id shard;
  qim_lane_id lane;
  qim_dispatch_id dispatch_id;
  uint32_t chunk_id;
  qim_mailbox_seq mailbox_seq;
  qim_mailbox_entry *entries;
  size_t entry_count;
  qim_dispatch_progress progress;
} qim_append_mailbox_batch;

typedef struct qim_durability_receipt {
  qim_dispatch_id dispatch_id;
  qim_lane_id lane;
  qim_mailbox_seq mailbox_seq;
} qim_durability_receipt;

typedef struct qim_mailbox_range_query {
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  qim_mailbox_seq after_seq;
  qim_mailbox_seq up_to_seq;
  uint32_t max_items;
  uint32_t max_bytes;
} qim_mailbox_range_query;

typedef struct qim_cursor_identity {
  qim_tenant_id tenant_id;
  qim_user_id user_id;
  qim_device_id device_id;
  qim_mailbox_shard_id mailbox_shard;
  qim_lane_id lane;
  qim_shard_epoch shard_epoch;
} qim_cursor_identity;

typedef struct qim_mailbox_cursor {
  qim_cursor_identity identity;
  qim_mailbox_seq last_applied_seq;
  qim_bytes signed_token;
} qim_mailbox_cursor;

typedef struct qim_mailbox_pull_request {
  qim_authenticated_actor actor;
  qim_mailbox_cursor cursor;
  qim_mailbox_range_query range;
} qim_mailbox_pull_request;

typedef struct qim_mailbox_page {
  qim_mailbox_entry *entries;
  size_t entry_count;
  qim_mailbox_seq covered_through_seq;
  qim_mailbox_seq lane_watermark;
  bool has_more;
} qim_mailbox_page;

typedef enum qim_history_direction {
  QIM_HISTORY_DIRECTION_OLDER = 0,
  QIM_HISTORY_DIRECTION_NEWER = 1,
} qim_history_direction;

typedef struct qim_history_query {
  qim_authenticated_actor actor;
  qim_conversation_id conversation_id;
  qim_history_direction direction;
  qim_conversation_seq anchor;
  uint32_t max_items;
  uint32_t max_bytes;
} qim_history_query;

typedef struct qim_history_page {
  qim_message_record *records;
  size_t record_count;
  qim_conversation_seq latest_conversation_seq;
  qim_conversation_seq earliest_available_conversation_seq;
  bool has_more;
} qim_history_page;

typedef struct qim_watermark_advance {
  qim_mailbox_shard_id shard;
  qim_lane_id lane;
  qim_mailbox_seq materialized;
  qim_mailbox_seq floor;
} qim_watermark_advance;

typedef struct qim_shard_takeover {
  qim_mailbox_shard_id shard;
  qim_shard_epoch epoch;
} qim_shard_takeover;

typedef enum qim_shard_readiness_kind {
  QIM_SHARD_READINESS_READY = 0,
  QIM_SHARD_READINESS_LANE_NOT_READY = 1,
} qim_shard_readiness_kind;

typedef struct qim_shard_readiness {
  qim_shard_readiness_kind kind;
  qim_log_position replay_from;  /* READY */
  qim_lane_id lane;              /* LANE_NOT_READY */
  uint32_t retry_after_ms;       /* LANE_NOT_READY */
} qim_shard_readiness;

typedef struct qim_push_batch {
  qim_connection_shard_id connection_shard;
  qim_mailbox_entry *entries;
  size_t entry_count;
  qim_trace_id trace_id;
} qim_push_batch;

/* ---- §4 groups, client and release ---------------------------------------- */

typedef enum qim_group_role {
  QIM_GROUP_ROLE_OWNER = 0,
  QIM_GROUP_ROLE_ADMIN = 1,
  QIM_GROUP_ROLE_MEMBER = 2,
  QIM_GROUP_ROLE_GUEST = 3,
} qim_group_role;

typedef struct qim_group_member {
  qim_user_id user_id;
  qim_group_role role;
  qim_conversation_seq joined_at;
  bool has_left_at;
  qim_conversation_seq left_at;
} qim_group_member;

typedef struct qim_group_create_request {
  qim_group_id group_id;
  qim_user_id *invitees;
  size_t invitee_count;
} qim_group_create_request;

typedef struct qim_group_created {
  qim_group_id group_id;
  qim_user_id owner_id;
  qim_membership_version membership_version;
} qim_group_created;

typedef struct qim_internal_principal {
  char *service_name;
  char *subject;
} qim_internal_principal;

typedef struct qim_admin_membership_change {
  qim_group_id group_id;
  qim_user_id *add;
  size_t add_count;
  qim_user_id *remove;
  size_t remove_count;
} qim_admin_membership_change;

typedef struct qim_member_page_request {
  qim_authenticated_actor actor;
  qim_group_id group_id;
  bool has_cursor;
  qim_page_cursor cursor;
  uint32_t limit;
} qim_member_page_request;

typedef struct qim_member_page {
  qim_group_member *members;
  size_t member_count;
  bool has_next_cursor;
  qim_page_cursor next_cursor;
  bool has_more;
} qim_member_page;

typedef struct qim_connect_request {
  qim_authenticated_actor actor;
  bool has_cursor;
  qim_mailbox_cursor cursor;
} qim_connect_request;

typedef enum qim_connection_state {
  QIM_CONNECTION_STATE_DISCONNECTED = 0,
  QIM_CONNECTION_STATE_CONNECTING = 1,
  QIM_CONNECTION_STATE_SYNCHRONIZING = 2,
  QIM_CONNECTION_STATE_REBUILDING = 3,
  QIM_CONNECTION_STATE_ONLINE = 4,
  QIM_CONNECTION_STATE_KICKED = 5,
} qim_connection_state;

typedef struct qim_session_page_request {
  bool has_cursor;
  qim_page_cursor cursor;
  uint32_t limit;
} qim_session_page_request;

typedef struct qim_session_summary {
  qim_conversation_id conversation_id;
  qim_conversation_seq latest_conversation_seq;
  qim_last_activity_id last_activity_id;
  uint32_t unread_count;
} qim_session_summary;

typedef struct qim_session_page {
  qim_session_summary *sessions;
  size_t session_count;
  bool has_next_cursor;
  qim_page_cursor next_cursor;
  bool has_more;
} qim_session_page;

typedef struct qim_rebuild_plan {
  qim_mailbox_cursor expired_cursor;
  qim_cursor_identity reset_cursor;
} qim_rebuild_plan;

typedef enum qim_local_store_mode {
  QIM_LOCAL_STORE_MODE_PERSISTENT = 0,
  QIM_LOCAL_STORE_MODE_IN_MEMORY_FOR_TEST = 1,
} qim_local_store_mode;

/* StorageBackend names Redis and Scylla; Sqlite is qim's documented extension. */
typedef enum qim_storage_backend {
  QIM_STORAGE_BACKEND_REDIS = 0,
  QIM_STORAGE_BACKEND_SCYLLA = 1,
  QIM_STORAGE_BACKEND_SQLITE = 2,
} qim_storage_backend;

typedef struct qim_local_store_location {
  char *scope;
  qim_local_store_mode mode;
} qim_local_store_location;

typedef enum qim_release_branch {
  QIM_RELEASE_BRANCH_MAIN = 0,
  QIM_RELEASE_BRANCH_STORE_REDIS = 1,
  QIM_RELEASE_BRANCH_STORE_SCYLLA = 2,
} qim_release_branch;

typedef struct qim_verification_evidence {
  qim_release_branch branch;
  char *suite;
  bool passed;
  uint64_t elapsed_ms;
  uint32_t tests;   /* qim extension: how many tests the suite has */
  uint32_t skipped; /* qim extension: how many of them did not run (ctest "notrun", "disabled") */
} qim_verification_evidence;

typedef struct qim_release_decision {
  qim_release_branch branch;
  qim_verification_evidence *evidence;
  size_t evidence_count;
} qim_release_decision;

/* ClientEvent: what the client runtime reports to its host. */
typedef enum qim_client_event_kind {
  QIM_CLIENT_EVENT_CONNECTION_CHANGED = 0,
  QIM_CLIENT_EVENT_MESSAGES_ADDED = 1,
  QIM_CLIENT_EVENT_PENDING_RESOLVED = 2,
  QIM_CLIENT_EVENT_SESSIONS_UPDATED = 3,
  QIM_CLIENT_EVENT_MEMBERS_UPDATED = 4,
  QIM_CLIENT_EVENT_REBUILD_REQUIRED = 5,
  QIM_CLIENT_EVENT_LOCAL_STORE_RESET = 6,
  QIM_CLIENT_EVENT_FAILED = 7,
} qim_client_event_kind;

/* One event; only the member named by `kind` is meaningful. One taken with
 * qim_client_poll_event owns its arrays until qim_client_event_release (client.h). */
typedef struct qim_client_event {
  qim_client_event_kind kind;
  qim_connection_state connection_state;            /* CONNECTION_CHANGED */
  const qim_mailbox_entry *messages;                /* MESSAGES_ADDED */
  size_t message_count;
  qim_committed_message pending_resolved;           /* PENDING_RESOLVED */
  const qim_session_page *sessions;                 /* SESSIONS_UPDATED */
  const qim_member_page *members;                   /* MEMBERS_UPDATED */
  qim_rebuild_plan rebuild;                         /* REBUILD_REQUIRED */
  int failed;                                       /* FAILED: a QIM_E_CLIENT_* code */
} qim_client_event;

/* ---- errors with payloads (seed §5; codes in err.h) ------------------------ */

/*
 * A domain error value: `code` is a QIM_E_* (or -errno); the other members are the
 * payload of the variants that carry one and are zero otherwise.
 */
typedef struct qim_error {
  int code;
  uint32_t retry_after_ms;          /* CommitError::RateLimited, LaneNotReady */
  qim_lane_id lane;                 /* MailboxMaterializeError::LaneNotReady */
  qim_mailbox_seq trim_watermark;   /* CursorExpired (mailbox and client) */
  qim_commit_key key;               /* CommitError::Recoverable */
  qim_release_branch branch;        /* Missing/SkippedVerification */
  char suite[64];                   /* Missing/SkippedVerification */
} qim_error;

#endif /* QIM_TYPES_H */
