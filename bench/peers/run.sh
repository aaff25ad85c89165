#!/usr/bin/env bash
# run.sh — the peers benchmark (issue 11): qim beside the servers users would pick instead,
# on this machine, the same scenario for all, ratios reported. `make bench-peers` calls it.
#   * durable commits/s: qim's commit path (qim-bench-commit) vs Tinode's storage path on
#     PostgreSQL (tinode_pg.sh, pgbench), the same number of concurrent submitters;
#   * qimd, ejabberd and Prosody started here on loopback ports with the configs of this
#     directory (SQLite storage, archive and group chat on), driven by harness.js: one-to-one
#     burst, latency at a fixed rate all of them sustain, group deliveries/s, RSS after.
# Everything runs twice: data on the real disk (BENCH_DIR, default /tmp) and on a tmpfs
# (/dev/shm). Servers are pinned to CPU 1, clients to CPU 0. The peers block of BENCHMARKS.md
# (between the "peers:begin" / "peers:end" markers) is rewritten by report.sh.
#
# Usage: bench/peers/run.sh [--quick] [--build DIR] [--out FILE] [--media disk,tmpfs]
#                           [--servers qim,ejabberd,prosody] [--qim-direct p2p|group] [--keep]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$ROOT/build
OUT=$ROOT/BENCHMARKS.md
QUICK=0 KEEP=0 MEDIA=disk,tmpfs SERVERS=qim,ejabberd,prosody QIM_DIRECT=p2p
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --build) BUILD=$(cd "$2" && pwd); shift ;;
    --out) OUT=$2; shift ;;
    --media) MEDIA=$2; shift ;;
    --servers) SERVERS=$2; shift ;;
    --qim-direct) QIM_DIRECT=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "peers: $*" >&2; }

"$HERE/install.sh"
QIMD=$BUILD/src/qimd
COMMIT_BIN=$BUILD/bench/qim-bench-commit
[ -x "$QIMD" ] && [ -x "$COMMIT_BIN" ] || { log "build first (make build): $QIMD"; exit 1; }

# ---- sizes (counts, not durations: every server does the same work) ------------------------
# Disk runs are small because the XMPP servers archive each message with its own SQLite
# transaction and fsync (measured: ~20-50 msgs/s here); the tmpfs runs are larger.
if [ $QUICK = 1 ]; then
  DISK="USERS=10 BURST=5 GSIZE=10 GSEND=2 GMSG=3 SUBMITTERS=8 PER=10"
  TMPFS="USERS=10 BURST=10 GSIZE=10 GSEND=2 GMSG=5 SUBMITTERS=8 PER=20"
  RATE_SECS=2
else
  DISK="USERS=40 BURST=10 GSIZE=50 GSEND=5 GMSG=4 SUBMITTERS=64 PER=10"
  TMPFS="USERS=100 BURST=30 GSIZE=50 GSEND=5 GMSG=20 SUBMITTERS=64 PER=100"
  RATE_SECS=10
fi
TIMEOUT=120         # a scenario's deliveries must all arrive within this (seconds)
SERVER_CPU=1 CLIENT_CPU=0
[ "$(nproc)" -lt 2 ] && SERVER_CPU=0
DOMAIN=bench.local

WORK=$(mktemp -d "${BENCH_DIR:-/tmp}/qim-peers.XXXXXX")
chmod 711 "$WORK" # the PostgreSQL cluster below it runs as user postgres
SHM=
RESULTS=$WORK/results.tsv
: > "$RESULTS"
PIDS=()
stop_pid() { # PID: SIGTERM, wait up to 15 s, then SIGKILL (only processes started here)
  local p=$1
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && stop_pid "$p"; done
  [ -n "$SHM" ] && rm -rf "$SHM"
  if [ $KEEP = 0 ]; then rm -rf "$WORK"; else log "work directory kept: $WORK"; fi
}
trap cleanup EXIT

free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo $p; return; }
  done
  log "no free port"; exit 1
}
wait_port() { # PORT PID SECONDS
  for _ in $(seq 1 $(($3 * 10))); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# add MEDIUM SERVER OUTFILE: keeps the RESULT line of a run.
add() { grep '^RESULT ' "$3" | sed "s|^RESULT |$1\t$2\t|" >> "$RESULTS" || true; }
field() { echo "$2" | tr ' \t' '\n' | sed -n "s/^$1=//p" | head -1; }

# ---- servers ---------------------------------------------------------------------------------
# start_server NAME DIR → sets SPID and SPORT. Each gets CPU $SERVER_CPU alone.
start_server() {
  local name=$1 dir=$2
  mkdir -p "$dir"
  SPORT=$(free_port)
  case $name in
    qim)
      # One I/O thread (the peers below get one scheduler / are single-threaded); the
      # per-connection send and login rate limits lifted, as the peers' shapers are.
      taskset -c $SERVER_CPU "$QIMD" --listen 127.0.0.1:$SPORT --data "$dir/qimd" --io-threads 1 \
        --log-level warn --login-rate 1000000 --login-burst 1000000 --send-rate 1000000 \
        --send-burst 1000000 > "$dir/server.log" 2>&1 &
      ;;
    ejabberd)
      sed "s|@PORT@|$SPORT|; s|@DB@|$dir/ejabberd.db|; s|@HOST@|$DOMAIN|" "$HERE/ejabberd.yml.in" > "$dir/ejabberd.yml"
      # erl → erlexec → beam.smp all exec, so $! is the VM. No -sname: no epmd, no distribution.
      (cd "$dir" && ERL_LIBS=/usr/lib/x86_64-linux-gnu EJABBERD_CONFIG_PATH=$dir/ejabberd.yml \
        EJABBERD_LOG_PATH=$dir/ejabberd.log ERL_CRASH_DUMP=$dir/erl_crash.dump \
        exec taskset -c $SERVER_CPU erl -noinput +K true +P 250000 +S 1 -mnesia dir "\"$dir/spool\"" \
        -s ejabberd) > "$dir/server.log" 2>&1 &
      ;;
    prosody)
      sed "s|@PORT@|$SPORT|; s|@DB@|$dir/prosody.sqlite|; s|@HOST@|$DOMAIN|; s|@DATA@|$dir|; s|@PID@|$dir/prosody.pid|" \
        "$HERE/prosody.cfg.lua.in" > "$dir/prosody.cfg.lua"
      taskset -c $SERVER_CPU prosody --config "$dir/prosody.cfg.lua" -F > "$dir/server.log" 2>&1 &
      ;;
  esac
  SPID=$!
  PIDS+=("$SPID")
  if ! wait_port "$SPORT" "$SPID" 60; then log "$name did not start: $(tail -5 "$dir/server.log")"; return 1; fi
}

# harness SCENARIO ARGS...: the Node harness on the client CPU, bounded by timeout.
harness() {
  local proto=xmpp; [ "$CUR" = qim ] && proto=qim
  taskset -c $CLIENT_CPU timeout $((TIMEOUT + 180)) node "$HERE/harness.js" "$@" --proto $proto --host 127.0.0.1 \
    --port "$SPORT" --domain $DOMAIN --accounts "$CDIR/accounts.txt" --qim-direct "$QIM_DIRECT" \
    --server-pid "$SPID" --timeout $TIMEOUT
}

run_medium() {
  local medium=$1 base=$2 sizes=$3
  eval "$sizes"
  log "== $medium ($base): $sizes"
  # 1. durable commits: qim's commit path vs Tinode's statements on PostgreSQL
  if [[ ",$SERVERS," == *",qim,"* ]]; then
    local cout=$WORK/$medium-commit.out
    # qim-bench-commit runs in-process (no client): pinned to the server CPU alone.
    (cd "$base" && TMPDIR=$base timeout 600 taskset -c $SERVER_CPU "$COMMIT_BIN" --senders 8 \
      --inflight $((SUBMITTERS / 8)) --messages $((SUBMITTERS * PER / 8)) --conversations $SUBMITTERS) > "$cout" 2>&1 \
      || log "qim-bench-commit failed"
    local line; line=$(grep '^commit new' "$cout" | head -1 || true)
    printf '%s\tqim\tscenario=commit submitters=%s msgs_per_s=%s p99_ms=%s status=ok\n' "$medium" "$SUBMITTERS" \
      "$(echo "$line" | sed -n 's/.*sends\/s=\([0-9.]*\).*/\1/p')" "$(echo "$line" | sed -n 's/.* p99=\([0-9.]*\)ms.*/\1/p')" >> "$RESULTS"
    timeout 900 "$HERE/tinode_pg.sh" "$base" "$SUBMITTERS" "$PER" > "$WORK/$medium-pg.out" 2>"$WORK/$medium-pg.err" \
      || log "tinode_pg failed: $(tail -3 "$WORK/$medium-pg.err")"
    add "$medium" tinode-pg "$WORK/$medium-pg.out"
  fi
  # 2. pass 1: start every server, accounts, burst, group (servers keep running)
  local users=$((USERS > GSIZE ? USERS : GSIZE))
  declare -gA SP=() SO=()
  for CUR in ${SERVERS//,/ }; do
    CDIR=$base/$CUR
    start_server "$CUR" "$CDIR" || continue
    SP[$CUR]=$SPID; SO[$CUR]=$SPORT
    log "$CUR: pid $SPID port $SPORT"
    harness register --users $users --concurrency 8 > "$WORK/$medium-$CUR-register.out" 2>&1 || log "$CUR: register failed"
    harness burst --users "$USERS" --messages "$BURST" > "$WORK/$medium-$CUR-burst.out" 2>&1 || log "$CUR: burst failed"
    add "$medium" "$CUR" "$WORK/$medium-$CUR-burst.out"
    harness group --size "$GSIZE" --senders "$GSEND" --messages "$GMSG" > "$WORK/$medium-$CUR-group.out" 2>&1 || log "$CUR: group failed"
    add "$medium" "$CUR" "$WORK/$medium-$CUR-group.out"
    grep -h '^RESULT' "$WORK/$medium-$CUR-burst.out" "$WORK/$medium-$CUR-group.out" | sed 's/^/    /' >&2 || true
  done
  # 3. pass 2: latency at a fixed rate every server sustained (half the slowest burst)
  local min; min=$(awk -F'\t' -v m="$medium" '$1 == m && $3 ~ /scenario=burst/ { split($3, a, " "); for (i in a) if (a[i] ~ /^msgs_per_s=/) { v = substr(a[i], 12) + 0; if (min == "" || v < min) min = v } } END { print (min == "" ? 0 : min) }' "$RESULTS")
  RATE=$(awk -v m="$min" 'BEGIN { r = int(m / 2); if (r < 2) r = 2; if (r > 5000) r = 5000; print r }')
  log "$medium: fixed rate $RATE msgs/s (half the slowest burst, $min msgs/s)"
  for CUR in ${SERVERS//,/ }; do
    [ -n "${SP[$CUR]:-}" ] || continue
    CDIR=$base/$CUR SPID=${SP[$CUR]} SPORT=${SO[$CUR]}
    harness rate --users "$USERS" --rate "$RATE" --duration $RATE_SECS --warmup 1 > "$WORK/$medium-$CUR-rate.out" 2>&1 || log "$CUR: rate failed"
    add "$medium" "$CUR" "$WORK/$medium-$CUR-rate.out"
    grep -h '^RESULT' "$WORK/$medium-$CUR-rate.out" | sed 's/^/    /' >&2 || true
    local rss; rss=$(awk '/VmRSS/ {print $2}' "/proc/$SPID/status" 2>/dev/null || echo "")
    printf '%s\t%s\tscenario=rss rss_kb=%s status=ok\n' "$medium" "$CUR" "$rss" >> "$RESULTS"
  done
  # journal mode each server's SQLite file ended up in (sync policy is SQLite's default
  # synchronous=FULL unless the server sets it; qim sets WAL + FULL)
  for f in "$base/ejabberd/ejabberd.db" "$base/prosody/prosody.sqlite" "$base/qim/qimd/qim.db"; do
    [ -f "$f" ] && log "$medium: $(basename "$f") journal_mode=$(sqlite3 "$f" 'PRAGMA journal_mode' 2>/dev/null || echo '?')"
  done
  for CUR in ${SERVERS//,/ }; do [ -n "${SP[$CUR]:-}" ] && stop_pid "${SP[$CUR]}"; done
  return 0
}

T0=$(date +%s)
for m in ${MEDIA//,/ }; do
  case $m in
    disk) run_medium disk "$WORK" "$DISK" ;;
    tmpfs) SHM=$(mktemp -d /dev/shm/qim-peers.XXXXXX); chmod 711 "$SHM"; run_medium tmpfs "$SHM" "$TMPFS"; rm -rf "$SHM"; SHM= ;;
  esac
done
log "all runs: $(( $(date +%s) - T0 )) s"

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
CPU=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
MACHINE="$(nproc) cores ($CPU), $(awk '/MemTotal/ {printf "%.1f GB", $2/1048576}' /proc/meminfo), Linux $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
cp "$RESULTS" "$HERE/last-results.tsv"
"$HERE/report.sh" "$RESULTS" "$OUT" "$COMMIT" "$MACHINE" "$QUICK" "$QIM_DIRECT"
log "wrote the peers block of $OUT"
