/*
 * history_rows.h — bulk seeding of a conversation's history in a sqlite store, for
 * benchmarks that need a conversation of 1,000,000 messages in seconds (qim-seed
 * --messages, bench/history.c). Committing them one by one through the commit path costs
 * several store transactions with an fsync each; this writes, in one transaction, exactly
 * the rows those commits would have left behind once their dedupe window and logs were
 * gone: the history records (the store's own record encoding) and the conversation's
 * counters (latest_seq, next_order, touched_at, last_activity). No intents, outbox or
 * mailbox entries: seeded messages are history, not deliveries in flight.
 *
 * The store must be closed while this runs (it opens the file with SQLite directly), so
 * it knows the `records` and `conversations` tables of src/store/sqlite_schema.c.
 */
#ifndef QIM_SEED_HISTORY_ROWS_H
#define QIM_SEED_HISTORY_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "qim/clock.h"
#include "qim/types.h"

typedef struct qim_seed_history {
  const char *db_path; /* the sqlite file (qimd: <data>/qim.db) */
  qim_tenant_id tenant_id;
  qim_conversation_id conversation_id;
  const qim_authenticated_actor *senders; /* message seq s is sent by senders[s % count] */
  size_t sender_count;
  uint64_t from, to; /* appends seqs (from, to]; the conversation's latest_seq must be from */
  qim_id_gen *ids;   /* message and activity ids, as the commit mints them */
} qim_seed_history;

/*
 * The content of seeded message `seq` from sender index `sender`, as a Tinode {pub}
 * content (JSON text into out[0..cap)): an object carrying qim-bench's markers,
 * {"qbn":seq,"qbs":sender,"qbt":0,"txt":"seeded message <seq> …"}, so a reader can check
 * that a page holds the right messages. Returns its length.
 */
int qim_seed_history_content(uint64_t seq, size_t sender, char *out, size_t cap);

/*
 * Appends the messages. 0; -EEXIST when the conversation's latest_seq is not `from`
 * (seeded already, or written to meanwhile); -ENOENT when there is no such conversation;
 * -EIO (with a line on stderr) when SQLite fails; -EINVAL for bad arguments.
 */
int qim_seed_history_append(const qim_seed_history *h);

#endif /* QIM_SEED_HISTORY_ROWS_H */
