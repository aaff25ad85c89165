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
 * past `n`; on success *dst owns fresh memory.
 */
#ifndef QIM_RECORD_H
#define QIM_RECORD_H

#include "qim/types.h"

void qim_bytes_free(qim_bytes *b);
void qim_bytes_copy(qim_bytes *dst, const qim_bytes *src);
int qim_bytes_equal(const qim_bytes *a, const qim_bytes *b);

void qim_message_content_free(qim_message_content *c);
void qim_message_content_copy(qim_message_content *dst, const qim_message_content *src);
int qim_message_content_equal(const qim_message_content *a, const qim_message_content *b);

void qim_message_record_free(qim_message_record *r);
void qim_message_record_copy(qim_message_record *dst, const qim_message_record *src);
int qim_message_record_equal(const qim_message_record *a, const qim_message_record *b);

void qim_delivery_audience_free(qim_delivery_audience *a);
void qim_delivery_audience_copy(qim_delivery_audience *dst, const qim_delivery_audience *src);

void qim_commit_intent_free(qim_commit_intent *i);
void qim_commit_intent_copy(qim_commit_intent *dst, const qim_commit_intent *src);
int qim_commit_intent_equal(const qim_commit_intent *a, const qim_commit_intent *b);

void qim_group_dispatch_free(qim_group_dispatch *d);
void qim_group_dispatch_copy(qim_group_dispatch *dst, const qim_group_dispatch *src);

void qim_mailbox_entry_free(qim_mailbox_entry *e);
void qim_mailbox_entry_copy(qim_mailbox_entry *dst, const qim_mailbox_entry *src);

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
/* The dispatch log payload. */
int qim_group_dispatch_encode(const qim_group_dispatch *d, qim_bytes *out);
int qim_group_dispatch_decode(const uint8_t *p, size_t n, qim_group_dispatch *dst);
int qim_mailbox_entry_encode(const qim_mailbox_entry *e, qim_bytes *out);
int qim_mailbox_entry_decode(const uint8_t *p, size_t n, qim_mailbox_entry *dst);

#endif
