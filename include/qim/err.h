/*
 * err.h — qim's one status convention and the domain error table.
 *
 * Every function that can fail returns `int`:
 *   0            success (QIM_OK);
 *   QIM_AGAIN    (positive) not an error: "not now, call again" for non-blocking flow;
 *   -errno       a system failure (-ENOMEM, -EIO, -EAGAIN for a full queue, ...);
 *   QIM_E_*      (<= -1000) a domain error: one value per variant of every error
 *                enum of seed 004 §5, plus qim's documented extensions.
 * A function that takes a completion callback and fails synchronously never runs
 * the callback. Payloads of a variant (retry_after_ms, trim_watermark, ...) travel
 * in a `qim_error` next to the code. Domain errors are produced through
 * qim_err_raise() so tests can record which errors they produced (docs/status.md).
 */
#ifndef QIM_ERR_H
#define QIM_ERR_H

#include <errno.h>
#include <stdint.h>

#define QIM_OK 0
#define QIM_AGAIN 1

/*
 * X(SYMBOL, number, "SeedEnum::Variant", ctrl code, "ctrl text")
 * ctrl code 0 means the error never reaches the wire (client-, tool- or test-side).
 * Numbers are stable: never renumber, only append.
 */
#define QIM_ERROR_TABLE(X)                                                                         \
  /* MessageStoreError */                                                                          \
  X(MESSAGE_STORE_INVALID_CLIENT_MESSAGE_ID, 1001, "MessageStoreError::InvalidClientMessageId", 400, "malformed") \
  X(MESSAGE_STORE_COMMIT_NOT_FOUND, 1002, "MessageStoreError::CommitNotFound", 404, "not found")   \
  X(MESSAGE_STORE_INVALID_STATE_TRANSITION, 1003, "MessageStoreError::InvalidStateTransition", 500, "internal error") \
  X(MESSAGE_STORE_HISTORY_ACCESS_DENIED, 1004, "MessageStoreError::HistoryAccessDenied", 403, "permission denied") \
  X(MESSAGE_STORE_HISTORY_UNAVAILABLE, 1005, "MessageStoreError::HistoryUnavailable", 410, "gone") \
  X(MESSAGE_STORE_UNAVAILABLE, 1006, "MessageStoreError::Unavailable", 503, "service unavailable") \
  X(MESSAGE_STORE_INVARIANT_VIOLATION, 1007, "MessageStoreError::InvariantViolation", 500, "internal error") \
  /* qim extensions to MessageStoreError (history, docs/history.md) */                            \
  X(MESSAGE_STORE_INVALID_RANGE, 1050, "MessageStoreError::InvalidRange", 400, "malformed")      \
  X(MESSAGE_STORE_COMPLIANCE_HOLD, 1051, "MessageStoreError::ComplianceHold", 403, "message under compliance hold") \
  X(MESSAGE_STORE_EDIT_NOT_PERMITTED, 1052, "MessageStoreError::EditNotPermitted", 403, "permission denied") \
  X(MESSAGE_STORE_INVALID_CONTENT, 1053, "MessageStoreError::InvalidContent", 400, "malformed")  \
  /* CommitError */                                                                                \
  X(COMMIT_INVALID_CLIENT_MESSAGE_ID, 1101, "CommitError::InvalidClientMessageId", 400, "malformed") \
  X(COMMIT_PERMISSION_DENIED, 1102, "CommitError::PermissionDenied", 403, "permission denied")    \
  X(COMMIT_RATE_LIMITED, 1103, "CommitError::RateLimited", 429, "too many requests")              \
  X(COMMIT_CLOCK_UNSAFE, 1104, "CommitError::ClockUnsafe", 503, "service unavailable")            \
  X(COMMIT_RECOVERABLE, 1105, "CommitError::Recoverable", 503, "retry with the same cmid")       \
  X(COMMIT_UNAVAILABLE, 1106, "CommitError::Unavailable", 503, "service unavailable")             \
  X(COMMIT_INVARIANT_VIOLATION, 1107, "CommitError::InvariantViolation", 500, "internal error")   \
  /* qim extensions to CommitError */                                                              \
  X(COMMIT_CLIENT_MESSAGE_ID_REUSED, 1150, "CommitError::ClientMessageIdReused", 409, "cmid reused with different content") \
  X(COMMIT_MESSAGE_TOO_LARGE, 1151, "CommitError::MessageTooLarge", 413, "too large")             \
  X(COMMIT_INVALID_REFERENCE, 1152, "CommitError::InvalidReference", 400, "malformed")            \
  /* CommitLogError */                                                                             \
  X(COMMIT_LOG_PUBLICATION_NOT_DURABLE, 1201, "CommitLogError::PublicationNotDurable", 503, "service unavailable") \
  X(COMMIT_LOG_TRANSACTION_ABORTED, 1202, "CommitLogError::TransactionAborted", 503, "service unavailable") \
  X(COMMIT_LOG_POSITION_UNAVAILABLE, 1203, "CommitLogError::PositionUnavailable", 410, "gone")    \
  X(COMMIT_LOG_UNAVAILABLE, 1204, "CommitLogError::Unavailable", 503, "service unavailable")      \
  X(COMMIT_LOG_INVARIANT_VIOLATION, 1205, "CommitLogError::InvariantViolation", 500, "internal error") \
  /* FanoutError */                                                                                \
  X(FANOUT_MEMBERSHIP_SNAPSHOT_UNAVAILABLE, 1301, "FanoutError::MembershipSnapshotUnavailable", 500, "internal error") \
  X(FANOUT_DETERMINISM_VIOLATION, 1302, "FanoutError::DeterminismViolation", 500, "internal error") \
  X(FANOUT_TRANSACTION_FAILED, 1303, "FanoutError::TransactionFailed", 503, "service unavailable") \
  X(FANOUT_UNAVAILABLE, 1304, "FanoutError::Unavailable", 503, "service unavailable")             \
  /* MailboxMaterializeError */                                                                    \
  X(MATERIALIZE_SHARD_NOT_OWNED, 1401, "MailboxMaterializeError::ShardNotOwned", 503, "service unavailable") \
  X(MATERIALIZE_LANE_NOT_READY, 1402, "MailboxMaterializeError::LaneNotReady", 503, "service unavailable") \
  X(MATERIALIZE_DISPATCH_CORRUPT, 1403, "MailboxMaterializeError::DispatchCorrupt", 500, "internal error") \
  X(MATERIALIZE_PROGRESS_CONFLICT, 1404, "MailboxMaterializeError::ProgressConflict", 500, "internal error") \
  X(MATERIALIZE_READINESS_FAILED, 1405, "MailboxMaterializeError::ReadinessFailed", 503, "service unavailable") \
  X(MATERIALIZE_UNAVAILABLE, 1406, "MailboxMaterializeError::Unavailable", 503, "service unavailable") \
  /* MailboxStoreError */                                                                          \
  X(MAILBOX_CURSOR_EXPIRED, 1501, "MailboxStoreError::CursorExpired", 410, "cursor expired")      \
  X(MAILBOX_CURSOR_INVALID, 1502, "MailboxStoreError::CursorInvalid", 400, "cursor invalid")      \
  X(MAILBOX_CORRUPT_ENTRY, 1503, "MailboxStoreError::CorruptEntry", 500, "internal error")        \
  X(MAILBOX_GROUP_TOO_LARGE, 1504, "MailboxStoreError::GroupTooLarge", 413, "too large")          \
  X(MAILBOX_UNAVAILABLE, 1505, "MailboxStoreError::Unavailable", 503, "service unavailable")      \
  X(MAILBOX_INVARIANT_VIOLATION, 1506, "MailboxStoreError::InvariantViolation", 500, "internal error") \
  /* GroupMembershipError */                                                                       \
  X(GROUP_PERMISSION_DENIED, 1601, "GroupMembershipError::PermissionDenied", 403, "permission denied") \
  X(GROUP_ALREADY_EXISTS, 1602, "GroupMembershipError::AlreadyExists", 409, "already exists")     \
  X(GROUP_NOT_FOUND, 1603, "GroupMembershipError::NotFound", 404, "not found")                    \
  X(GROUP_MEMBER_LIMIT_EXCEEDED, 1604, "GroupMembershipError::MemberLimitExceeded", 422, "policy violation") \
  X(GROUP_INTERNAL_IDENTITY_REQUIRED, 1605, "GroupMembershipError::InternalIdentityRequired", 401, "authentication required") \
  X(GROUP_UNAVAILABLE, 1606, "GroupMembershipError::Unavailable", 503, "service unavailable")     \
  /* ClientRuntimeError (client side: never on the wire) */                                        \
  X(CLIENT_CONNECT_REQUIRED, 1701, "ClientRuntimeError::ConnectRequired", 0, "")                  \
  X(CLIENT_CURSOR_EXPIRED, 1702, "ClientRuntimeError::CursorExpired", 0, "")                      \
  X(CLIENT_CURSOR_INVALID, 1703, "ClientRuntimeError::CursorInvalid", 0, "")                      \
  X(CLIENT_SYNC_INCOMPLETE, 1704, "ClientRuntimeError::SyncIncomplete", 0, "")                    \
  X(CLIENT_DEADLINE_EXCEEDED, 1705, "ClientRuntimeError::DeadlineExceeded", 0, "")                \
  X(CLIENT_LOCAL_STORE_FAILURE, 1706, "ClientRuntimeError::LocalStoreFailure", 0, "")             \
  X(CLIENT_PROTOCOL_FAILURE, 1707, "ClientRuntimeError::ProtocolFailure", 0, "")                  \
  X(CLIENT_PERMISSION_DENIED, 1708, "ClientRuntimeError::PermissionDenied", 0, "")                \
  X(CLIENT_UNAVAILABLE, 1709, "ClientRuntimeError::Unavailable", 0, "")                           \
  /* ClientHostError */                                                                            \
  X(HOST_STABLE_PATH_UNAVAILABLE, 1801, "ClientHostError::StablePathUnavailable", 0, "")          \
  X(HOST_PERSISTENT_STORE_REQUIRED, 1802, "ClientHostError::PersistentStoreRequired", 0, "")      \
  X(HOST_RUNTIME_START_FAILED, 1803, "ClientHostError::RuntimeStartFailed", 0, "")                \
  X(HOST_EVENT_EXPORT_FAILED, 1804, "ClientHostError::EventExportFailed", 0, "")                  \
  X(HOST_UNSUPPORTED_CAPABILITY, 1805, "ClientHostError::UnsupportedCapability", 0, "")           \
  /* StorageConformanceError */                                                                    \
  X(CONFORMANCE_SEMANTIC_MISMATCH, 1901, "StorageConformanceError::SemanticMismatch", 0, "")      \
  X(CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE, 1902, "StorageConformanceError::IsolatedDependencyUnavailable", 0, "") \
  X(CONFORMANCE_CONTRACT_VECTOR_FAILED, 1903, "StorageConformanceError::ContractVectorFailed", 0, "") \
  /* BranchReleaseError */                                                                         \
  X(RELEASE_DIRECTION_VIOLATION, 2001, "BranchReleaseError::DirectionViolation", 0, "")           \
  X(RELEASE_DIRTY_WORKTREE_RISK, 2002, "BranchReleaseError::DirtyWorktreeRisk", 0, "")            \
  X(RELEASE_MISSING_VERIFICATION, 2003, "BranchReleaseError::MissingVerification", 0, "")         \
  X(RELEASE_SKIPPED_VERIFICATION, 2004, "BranchReleaseError::SkippedVerification", 0, "")

enum qim_err_code {
#define QIM_ERR_ENUM_(sym, num, name, ctrl, text) QIM_E_##sym = -(num),
  QIM_ERROR_TABLE(QIM_ERR_ENUM_)
#undef QIM_ERR_ENUM_
};

/* The lowest (most negative) errno-style value; anything below is a domain code. */
#define QIM_E_DOMAIN_FIRST (-1000)

/* True when `code` is one of the QIM_E_* domain errors above. */
static inline int qim_err_is_domain(int code) { return code <= QIM_E_DOMAIN_FIRST; }

/*
 * Stable name of a status: "CommitError::RateLimited" for a domain code,
 * "ENOMEM" style names via strerrorname_np for -errno, "OK" / "AGAIN".
 * Never NULL; unknown values give "Unknown".
 */
const char *qim_err_name(int code);

/* The Tinode {ctrl} code a client sees for `code` (500 for -errno values, 0 if never on the wire). */
int qim_err_ctrl_code(int code);

/* The {ctrl} text that goes with qim_err_ctrl_code(); never NULL. */
const char *qim_err_ctrl_text(int code);

/*
 * Produce a domain error: records `code` (when the QIM_ERRLOG environment variable
 * names a file, one "name" line is appended — the contract check reads these) and
 * returns `code` unchanged, so callers write `return qim_err_raise(QIM_E_...);`.
 */
int qim_err_raise(int code);

#endif /* QIM_ERR_H */
