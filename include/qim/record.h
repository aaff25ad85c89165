/*
 * record.h — lifetime and comparison of the seed's composite values (types.h), and
 * their canonical binary encoding.
 *
 * free: releases what the value owns (not the struct itself); accepts zeroed values.
 * copy: deep copy into *dst (aborts on OOM, as small internal allocations do).
 * equal: field-by-field, including owned bytes.
 *
 * The canonical encoding is what logs and stores persist: deterministic (same value →
 * same bytes; big-endian fixed-width integers, u32 length prefixes, a leading version
 * byte), so a replay can be compared byte for byte (FanoutError::DeterminismViolation).
 * decode returns -EINVAL on truncated, trailing or malformed input and never reads
 * past `n`; on success *dst owns fresh memory, on failure *dst is left zeroed.
 * encode returns 0, -EINVAL for a value that cannot be valid (an enum out of range, a
 * mailbox entry whose event_id is not qim_event_id_make(mailbox_seq, event_ordinal)), or
 * -E2BIG for a length or count above UINT32_MAX; on failure out is untouched.
 * dst of copy and decode is overwritten, not freed first.
 *
 * Layout, version 1 (every integer unsigned big-endian; u128 = hi then lo, 16 bytes;
 * id16 = the 16 bytes as stored; bool = one byte 0 or 1; enum = one byte, the C value;
 * bytes = u32 length + bytes; string = bytes without NUL; list = u32 count + items):
 *   header      u8 version (1; 2 for a dispatch and an envelope), u8 tag: 'R' record,
 *               'I' intent, 'E' envelope, 'D' dispatch, 'M' mailbox entry
 *   content     enum type, bool has_custom [string custom_type], u32 schema_version,
 *               bytes payload, bool has_media [bytes media_metadata]
 *   coordinates id16 message_id, u128 conversation_id, u64 conversation_seq,
 *               id16 last_activity_id
 *   actor       u128 tenant, u128 user, u128 device
 *   record      coordinates, actor sender, id16 client_message_id, content,
 *               enum retention_class, enum state, u64 created_at
 *   audience    enum kind; Direct: list of u128 recipients; GroupSnapshot: u128 group_id,
 *               u64 membership_version, u32 member_count, list of u32 target_shards
 *   intent      u128 key.tenant, u128 key.sender, id16 key.cmid, coordinates, enum state,
 *               audience, bool inline_body, u64 delivery.created_at, record, id16 trace
 *   envelope    (version 2) intent; its record is the intent's record (encode refuses an
 *               envelope whose record differs: -EINVAL). Version 1 (intent, record, two
 *               copies of the same bytes) still decodes, if the copies are equal.
 *   dispatch    (version 2) id16 dispatch_id, coordinates source, u128 tenant,
 *               u128 sender, id16 client_message_id, u32 target_shard,
 *               u64 membership_version, list of chunks (u32 chunk_id, list of u128
 *               recipients), content, bool inline_body, u64 created_at, id16 trace.
 *               Version 1 (no tenant, sender, client_message_id) still decodes, with
 *               those three fields zero; encode always writes version 2.
 *   entry       u128 tenant, u128 user, u64 mailbox_seq, u8 event_ordinal, u64 event_id,
 *               enum event_type, coordinates, u128 sender, bool has_cmid [id16 cmid],
 *               bool has_content [content], bool body_included, u64 created_at
 * Absent optionals are not encoded (their C contents are ignored by encode and equal).
 * Changing any of this means a new version byte and a decoder for the old one.
 */
#ifndef QIM_RECORD_H
#define QIM_RECORD_H

#include "qim/types.h"

/* Plain-value comparisons used by the ones below. */
int qim_message_coordinates_equal(const qim_message_coordinates *a, const qim_message_coordinates *b);
int qim_authenticated_actor_equal(const qim_authenticated_actor *a, const qim_authenticated_actor *b);

void qim_bytes_free(qim_bytes *b);
void qim_bytes_copy(qim_bytes *dst, const qim_bytes *src);
int qim_bytes_equal(const qim_bytes *a, const qim_bytes *b);

void qim_message_content_free(qim_message_content *c);
void qim_message_content_copy(qim_message_content *dst, const qim_message_content *src);
int qim_message_content_equal(const qim_message_content *a, const qim_message_content *b);

void qim_message_record_free(qim_message_record *r);
void qim_message_record_copy(qim_message_record *dst, const qim_message_record *src);
int qim_message_record_equal(const qim_message_record *a, const qim_message_record *b);

/* free releases both variants' arrays: the unused variant must be zeroed. copy and
 * equal look only at the variant named by `kind`. */
void qim_delivery_audience_free(qim_delivery_audience *a);
void qim_delivery_audience_copy(qim_delivery_audience *dst, const qim_delivery_audience *src);
int qim_delivery_audience_equal(const qim_delivery_audience *a, const qim_delivery_audience *b);

void qim_commit_intent_free(qim_commit_intent *i);
void qim_commit_intent_copy(qim_commit_intent *dst, const qim_commit_intent *src);
int qim_commit_intent_equal(const qim_commit_intent *a, const qim_commit_intent *b);

void qim_group_dispatch_free(qim_group_dispatch *d);
void qim_group_dispatch_copy(qim_group_dispatch *dst, const qim_group_dispatch *src);
int qim_group_dispatch_equal(const qim_group_dispatch *a, const qim_group_dispatch *b);

void qim_mailbox_entry_free(qim_mailbox_entry *e);
void qim_mailbox_entry_copy(qim_mailbox_entry *dst, const qim_mailbox_entry *src);
int qim_mailbox_entry_equal(const qim_mailbox_entry *a, const qim_mailbox_entry *b);

void qim_history_page_free(qim_history_page *p);
void qim_mailbox_page_free(qim_mailbox_page *p);
void qim_member_page_free(qim_member_page *p);
void qim_session_page_free(qim_session_page *p);

/* Canonical encodings (caller frees out->p with qim_free). */
int qim_message_record_encode(const qim_message_record *r, qim_bytes *out);
int qim_message_record_decode(const uint8_t *p, size_t n, qim_message_record *dst);
int qim_commit_intent_encode(const qim_commit_intent *i, qim_bytes *out);
int qim_commit_intent_decode(const uint8_t *p, size_t n, qim_commit_intent *dst);
/* The outbox payload: a CommittedEnvelope (intent + record). */
int qim_committed_envelope_encode(const qim_committed_envelope *e, qim_bytes *out);
int qim_committed_envelope_decode(const uint8_t *p, size_t n, qim_committed_envelope *dst);
void qim_committed_envelope_free(qim_committed_envelope *e);
void qim_committed_envelope_copy(qim_committed_envelope *dst, const qim_committed_envelope *src);
int qim_committed_envelope_equal(const qim_committed_envelope *a, const qim_committed_envelope *b);
/* The read-back check of a commit (seed 004 §2): the envelope (whose record the codec
 * holds equal to its intent's) is the message `in` holds: same id, seq and cmid, and the
 * same record unless its state changed since (an edit or delete reached it before the
 * commit finished). */
bool qim_committed_envelope_matches(const qim_committed_envelope *env, const qim_commit_intent *in);
/* The dispatch log payload. */
int qim_group_dispatch_encode(const qim_group_dispatch *d, qim_bytes *out);
int qim_group_dispatch_decode(const uint8_t *p, size_t n, qim_group_dispatch *dst);
int qim_mailbox_entry_encode(const qim_mailbox_entry *e, qim_bytes *out);
int qim_mailbox_entry_decode(const uint8_t *p, size_t n, qim_mailbox_entry *dst);

#endif
