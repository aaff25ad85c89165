#!/usr/bin/env bash
# tinode_pg.sh — Tinode's storage path for one {pub} (seed 003: update the topic's seq,
# insert the message, mark it read by the sender in their subscription; three statements,
# each its own autocommit as Tinode's store.Messages.Save issues them) run by pgbench
# against a private PostgreSQL cluster made here with initdb: loopback port, default
# durability (fsync=on, synchronous_commit=on, wal_sync_method default). Prints
# `RESULT scenario=tinode-pg ...` with messages/s; also the same three statements in one
# transaction per message (cheaper for PostgreSQL: one WAL flush instead of three).
#
# Usage: tinode_pg.sh DIR CLIENTS MESSAGES
#   DIR      where the cluster lives (a real disk, or a tmpfs for the tmpfs run)
#   CLIENTS  concurrent submitters (pgbench -c), one topic each (a Tinode topic saves one
#            message at a time, so concurrency comes from distinct topics)
#   MESSAGES per client (pgbench -t; a count, not a duration: opening the connections is
#            slow on a loaded machine and would eat into a -T window)
# Server pinned to CPU 1, pgbench to CPU 0 (taskset). The cluster is removed afterwards.
set -euo pipefail
DIR=$1 CLIENTS=$2 PER=$3
BIN=/usr/lib/postgresql/15/bin
PG=$(mktemp -d "$DIR/qim-peers-pg.XXXXXX")
chown postgres: "$PG"
# setpriv execs (no fork), so $! is the server itself and is stopped by its pid.
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
PGPID=
cleanup() {
  if [ -n "$PGPID" ]; then kill -INT "$PGPID" 2>/dev/null || true; for _ in $(seq 1 100); do kill -0 "$PGPID" 2>/dev/null || break; sleep 0.1; done; fi
  rm -rf "$PG"
}
trap cleanup EXIT

PORT=$((20000 + RANDOM % 40000))
while ss -Hltn "sport = :$PORT" | grep -q .; do PORT=$((20000 + RANDOM % 40000)); done
as_pg "$BIN/initdb" -D "$PG/data" -A trust -U bench --no-sync > "$PG/initdb.log"
# max_connections: room for the clients; everything else stays at PostgreSQL's defaults.
as_pg taskset -c 1 "$BIN/postgres" -D "$PG/data" -p "$PORT" -k "$PG" -c listen_addresses=127.0.0.1 \
  -c max_connections=$((CLIENTS + 10)) > "$PG/server.log" 2>&1 &
PGPID=$!
for _ in $(seq 1 100); do "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" && break; sleep 0.1; done
PSQL=("$BIN/psql" -q -h 127.0.0.1 -p "$PORT" -U bench -d postgres -v ON_ERROR_STOP=1)

# Tinode's PostgreSQL schema for the tables a {pub} touches (seed 003), with a topic and a
# subscription per client.
"${PSQL[@]}" <<SQL
CREATE TABLE topics(id SERIAL PRIMARY KEY, createdat TIMESTAMP(3) NOT NULL, updatedat TIMESTAMP(3) NOT NULL,
  touchedat TIMESTAMP(3), name CHAR(25) NOT NULL UNIQUE, seqid INT NOT NULL DEFAULT 0, delid INT DEFAULT 0);
CREATE TABLE subscriptions(id SERIAL PRIMARY KEY, createdat TIMESTAMP(3) NOT NULL, updatedat TIMESTAMP(3) NOT NULL,
  deletedat TIMESTAMP(3), userid BIGINT NOT NULL, topic CHAR(25) NOT NULL, delid INT DEFAULT 0,
  recvseqid INT DEFAULT 0, readseqid INT DEFAULT 0, modewant VARCHAR(8), modegiven VARCHAR(8), private JSONB,
  UNIQUE(topic, userid));
CREATE TABLE messages(id SERIAL PRIMARY KEY, createdat TIMESTAMP(3) NOT NULL, updatedat TIMESTAMP(3) NOT NULL,
  deletedat TIMESTAMP(3), delid INT DEFAULT 0, seqid INT NOT NULL, topic CHAR(25) NOT NULL, "from" BIGINT NOT NULL,
  head JSONB, content JSONB, UNIQUE(topic, seqid));
CREATE INDEX messages_topic_created ON messages(topic, createdat);
INSERT INTO topics(createdat, updatedat, name) SELECT now(), now(), 'grp' || g FROM generate_series(1, $CLIENTS) g;
INSERT INTO subscriptions(createdat, updatedat, userid, topic, modewant, modegiven)
  SELECT now(), now(), g, 'grp' || g, 'JRWPS', 'JRWPS' FROM generate_series(1, $CLIENTS) g;
SQL

BODY='"s=1;n=1;t=1;xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"'
cat > "$PG/pub.sql" <<SQL
\set t (:client_id + 1)
UPDATE topics SET seqid = seqid + 1, touchedat = now() WHERE name = 'grp' || :t RETURNING seqid AS seq \gset
INSERT INTO messages(createdat, updatedat, seqid, topic, "from", head, content) VALUES (now(), now(), :seq, 'grp' || :t, :t, NULL, '$BODY'::jsonb) RETURNING id;
UPDATE subscriptions SET updatedat = now(), recvseqid = :seq, readseqid = :seq WHERE topic = 'grp' || :t AND userid = :t;
SQL
{ echo 'BEGIN;'; sed -n '2,4p' "$PG/pub.sql"; echo 'COMMIT;'; } | { echo '\set t (:client_id + 1)'; cat; } > "$PG/pub_tx.sql"
chown postgres: "$PG"/*.sql

bench() { # FILE → messages/s and latency average
  taskset -c 0 "$BIN/pgbench" -h 127.0.0.1 -p "$PORT" -U bench -n -M prepared -c "$CLIENTS" -j 1 -t "$PER" \
    -f "$1" postgres 2>&1
}
out=$(bench "$PG/pub.sql")
echo "$out" | sed 's/^/    /' >&2
tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
out=$(bench "$PG/pub_tx.sql")
echo "$out" | sed 's/^/    /' >&2
tps_tx=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
lat_tx=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
echo "RESULT scenario=tinode-pg clients=$CLIENTS messages=$((CLIENTS * PER)) msgs_per_s=${tps:-0} lat_avg_ms=${lat:-} msgs_per_s_one_tx=${tps_tx:-0} lat_avg_ms_one_tx=${lat_tx:-} status=$([ -n "$tps" ] && echo ok || echo failed)"
