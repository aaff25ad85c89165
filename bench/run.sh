#!/usr/bin/env bash
# run.sh — the benchmark harness of issue 10: measures this machine's limits, starts a
# fresh qimd, drives it with qim-bench, and writes BENCHMARKS.md (figure, limit, ratio,
# command, commit, machine for each measurement). `make bench` is meant to call it; see
# bench/README.md for what each measurement means.
#
# Usage: bench/run.sh [--quick] [--build DIR] [--out FILE] [--only LIST] [--keep] [--store S]
#   --quick    seconds instead of minutes: small counts and short runs (checks the harness,
#              the figures mean little)
#   --build    build tree with the binaries (default ./build; built if missing)
#   --qimd     the server binary to measure (default BUILD/src/qimd)
#   --out      where to write the report (default ./BENCHMARKS.md)
#   --only     comma-separated subset of: disk,commit,echo,sock,p2p,p2palt,group,idle,history,
#              sync
#   --keep     keep the work directory (qimd data, logs, accounts, raw results)
#   --store    the measured qimd's store: disk (default: the default store, its WAL in
#              BENCH_DIR) or memory (store-memory mode: the database in /dev/shm, made durable
#              by a journal and snapshots in BENCH_DIR; docs/store.md). p2palt runs
#              one-to-one's search on the other of the two
# Environment: BENCH_DIR, a directory on the real disk for data (default /tmp; never tmpfs).
# Every child process is started here and stopped by its pid; every step has a timeout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
OUT=$ROOT/BENCHMARKS.md
QUICK=0
KEEP=0
STORE=disk
ONLY=disk,commit,echo,sock,p2p,p2palt,group,idle,history,sync
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --build) BUILD=$(cd "$2" && pwd); shift ;;
    --qimd) QIMD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --keep) KEEP=1 ;;
    --store) STORE=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case $STORE in memory | disk) ;; *) echo "run.sh: --store memory or disk, not $STORE" >&2; exit 2 ;; esac
if [ $STORE = memory ] && [ ! -d /dev/shm ]; then echo "run.sh: --store memory needs /dev/shm" >&2; exit 2; fi
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---- sizes: full run (< 15 minutes on 2 cores) and --quick ------------------------------------
if [ $QUICK = 1 ]; then
  SECS=1; P2P_SECS=1; WARM=0.5; CURVE_SECS=1; SEARCH_STEPS=1; CONFIRM_STEPS=1; ACCOUNTS=40; P2P_USERS=20; P2P_START=100
  G_SMALL=10; G_LARGE=20; G_SENDERS=2; G_SEARCH_STEPS=1; IDLE_CONNS=200; IDLE_HOLD=2; SOCK_CONNS=1000
  COMMIT_ARGS="--messages 200"; DISK_SECS=1; WAL_SECS=1; HISTORY_ARGS="--messages 20000 --iterations 200"
  HISTORY_MESSAGES=20000
else
  SECS=5; P2P_SECS=10; WARM=1; CURVE_SECS=10; SEARCH_STEPS=4; CONFIRM_STEPS=2; ACCOUNTS=1000; P2P_USERS=1000; P2P_START=500
  G_SMALL=100; G_LARGE=1000; G_SENDERS=10; G_SEARCH_STEPS=2; IDLE_CONNS=15000; IDLE_HOLD=10; SOCK_CONNS=5000
  COMMIT_ARGS=""; DISK_SECS=3; WAL_SECS=10; HISTORY_ARGS=""
  HISTORY_MESSAGES=1000000
fi
P99_LIMIT_MS=50      # one-to-one: the highest rate whose p99 stays within this
GROUP_P99_LIMIT_MS=250
LAG_LIMIT_MS=${LAG_LIMIT_MS:-20} # client send lag p99 above this: the client, not the server,
                                 # was the bottleneck (a loaded machine deschedules it)

BENCH_DIR=${BENCH_DIR:-/tmp}
WORK=$(mktemp -d "$BENCH_DIR/qim-bench-run.XXXXXX")
RESULTS=$WORK/results.tsv
: > "$RESULTS"
PIDS=()
MEMDIR=
JOURNAL_MEMDIR=
cleanup() {
  for p in "${PIDS[@]:-}"; do if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi; done
  for p in "${PIDS[@]:-}"; do if [ -n "$p" ]; then wait "$p" 2>/dev/null || true; fi; done
  if [ -n "$MEMDIR" ]; then rm -rf "$MEMDIR"; fi
  if [ -n "$JOURNAL_MEMDIR" ]; then rm -rf "$JOURNAL_MEMDIR"; fi
  if [ $KEEP = 0 ]; then rm -rf "$WORK"; else echo "run.sh: work directory kept: $WORK" >&2; fi
}
trap cleanup EXIT
log() { echo "run.sh: [${SECONDS}s] $*" >&2; } # seconds since the harness started

QB=$BUILD/tools/qim-bench
QIMD=${QIMD:-$BUILD/src/qimd}
if [ ! -x "$QB" ] || [ ! -x "$QIMD" ] || [ ! -x "$BUILD/bench/qim-bench-ws_echo" ]; then
  log "building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" >/dev/null
fi
BB=$BUILD/bench

# A free loopback port (nothing listening on it now).
free_port() {
  local p
  for _ in $(seq 1 200); do
    # Below the kernel's ephemeral range (32768+ here): the thousands of client sockets
    # the echo and socket-cost steps open must not be holding the port qimd wants.
    p=$((10000 + RANDOM % 22000))
    if ! ss -Htan "sport = :$p" 2>/dev/null | grep -q .; then echo $p; return; fi
  done
  echo "run.sh: no free port" >&2; exit 1
}

# record ID COMMAND...: runs a benchmark command (timeout 600 s), keeps its RESULT line(s)
# as "ID<TAB>command<TAB>key=value ..." and its whole output in $WORK/ID.out.
record() {
  local id=$1; shift
  local out=$WORK/$id.out
  log "$id: $*"
  if ! timeout 600 "$@" > "$out" 2>&1; then log "$id: failed (see $out)"; fi
  local shown="$*"
  shown=${shown//$BUILD\//}
  grep '^RESULT ' "$out" | sed "s|^RESULT |$id\t$shown\t|" >> "$RESULTS" || true
  grep -v '^RESULT ' "$out" | sed 's/^/    /' >&2 || true
}

# field KEY LINE: the value of KEY in a key=value line.
field() { echo "$2" | tr ' \t' '\n' | sed -n "s/^$1=//p" | head -1; }
last_result() { grep "^$1	" "$RESULTS" | tail -1 | cut -f3; }

# ---- 1. disk ceiling and durable commits ------------------------------------------------------
want disk && record disk "$BB/qim-bench-disk_ceiling" "$WORK" --seconds $DISK_SECS --wal-seconds $WAL_SECS
if want commit && [ -x "$BB/qim-bench-commit" ]; then
  out=$WORK/commit.out
  log "commit: qim-bench-commit $COMMIT_ARGS"
  # shellcheck disable=SC2086
  (cd "$WORK" && TMPDIR=$WORK timeout 600 "$BB/qim-bench-commit" $COMMIT_ARGS) > "$out" 2>&1 || log "commit: failed"
  line=$(grep '^commit new' "$out" | head -1 || true)
  if [ -n "$line" ]; then
    rate=$(echo "$line" | sed -n 's/.*sends\/s=\([0-9.]*\).*/\1/p')
    p99=$(echo "$line" | sed -n 's/.* p99=\([0-9.]*\)ms.*/\1/p')
    printf 'commit\tbench/qim-bench-commit%s\tscenario=commit sends_per_s=%s p99_ms=%s status=ok\n' \
      "${COMMIT_ARGS:+ $COMMIT_ARGS}" "$rate" "$p99" >> "$RESULTS"
  fi
fi

# ---- machine baselines: WebSocket echo, kernel cost per socket ------------------------------
IO_THREADS=$(nproc)
if want echo; then
  EPORT=$(free_port)
  "$BB/qim-bench-ws_echo" --listen 127.0.0.1:$EPORT --threads "$IO_THREADS" --duration 300 \
    > "$WORK/ws_echo.log" 2>&1 &
  EPID=$!; PIDS+=("$EPID")
  sleep 0.5
  record echo "$QB" echo --server 127.0.0.1:$EPORT --users 4 --window 16 --size 200 \
    --duration $SECS --warmup $WARM --server-pid "$EPID" --quiet
  kill "$EPID" 2>/dev/null || true; wait "$EPID" 2>/dev/null || true
fi
want sock && record sock "$BB/qim-bench-sock_cost" --conns $SOCK_CONNS --rounds 3

# ---- qimd ------------------------------------------------------------------------------------
NEED_QIMD=0 QPORT='' QPID='' QLOG='' S=''
for m in p2p p2palt group idle sync; do want $m && NEED_QIMD=1; done
# launch_qimd DATA LOG ACCOUNTS [STORE]: a qimd on a free port with its store in DATA (STORE:
# a --store URL for it) and no rate limits, logging to LOG; sets QPORT, QPID, QLOG (= LOG)
# and S (qim-bench's server arguments, ACCOUNTS its accounts file).
launch_qimd() {
  QPORT=$(free_port) QLOG=$2
  "$QIMD" --listen 127.0.0.1:$QPORT --data "$1" ${4:+--store "$4"} --log-level warn \
    --login-rate 1000000 --login-burst 1000000 --send-rate 1000000 --send-burst 1000000 \
    --request-rate 1000000 --request-burst 1000000 --conns-per-ip 0 \
    > "$2" 2>&1 &
  QPID=$!; PIDS+=("$QPID")
  # Up to a minute: a store-memory qimd started again replays its journal first.
  for _ in $(seq 1 600); do
    ss -Hltn "sport = :$QPORT" 2>/dev/null | grep -q . && break
    kill -0 "$QPID" 2>/dev/null || { log "qimd exited: $(tail -3 "$2")"; exit 1; }
    sleep 0.1
  done
  S="--server 127.0.0.1:$QPORT --server-pid $QPID --accounts $3 --quiet"
}
# stop_qimd: stops the qimd launch_qimd started last (SIGINT) and waits for it to exit.
stop_qimd() {
  kill -INT "$QPID" 2>/dev/null || true
  wait "$QPID" 2>/dev/null || true
}
# start_qimd DATA LOG ACCOUNTS: launch_qimd on the default store, then creates the accounts
# (result line accounts).
start_qimd() {
  launch_qimd "$1" "$2" "$3"
  # shellcheck disable=SC2086
  record accounts "$QB" accounts $S --count $ACCOUNTS --concurrency "$IO_THREADS"
}
# The measured qimd's store (--store): STORE_URL is its --store argument (empty: the default).
# 2b's qimd (p2palt) runs the other store (ALT_KIND) in ALT_DIR, with ALT_URL its --store
# argument: the default store beside a store-memory qimd, store-memory mode beside a default one.
STORE_URL='' ALT_DIR='' ALT_KIND='' ALT_URL=''
if [ $STORE = memory ]; then
  JOURNAL_MEMDIR=$(mktemp -d /dev/shm/qim-bench-journal.XXXXXX)
  STORE_URL="sqlite:$WORK/qimd/qim.db?memory=$JOURNAL_MEMDIR"
fi
if want p2palt && [ $STORE = memory ]; then
  ALT_KIND=disk ALT_DIR=$WORK/qimd-disk
elif want p2palt && [ -d /dev/shm ]; then
  ALT_KIND=memory ALT_DIR=$WORK/qimd-memory MEMDIR=$(mktemp -d /dev/shm/qim-bench-journal.XXXXXX)
  ALT_URL="sqlite:$ALT_DIR/qim.db?memory=$MEMDIR"
fi
printf 'store\t(setting)\tscenario=store mode=%s url=%s\n' "$STORE" "${STORE_URL:-default}" >> "$RESULTS"
if [ $NEED_QIMD = 1 ]; then
  # The accounts are made once, on the default store: argon2id makes that ~45 s. A
  # store-memory qimd opens that store as its base, and 2b's qimd gets a copy of it, taken
  # with qimd stopped, so the files stand at one commit.
  start_qimd "$WORK/qimd" "$WORK/qimd.log" "$WORK/accounts.txt"
  if [ -n "$ALT_DIR" ] || [ -n "$STORE_URL" ]; then
    stop_qimd
    if [ -n "$ALT_DIR" ]; then cp -r "$WORK/qimd" "$ALT_DIR"; fi
    launch_qimd "$WORK/qimd" "$WORK/qimd-run.log" "$WORK/accounts.txt" "$STORE_URL"
  fi
fi

# verdict LINE LIMIT_MS: "ok" when the run kept up, else the first reason it did not:
# status (the run failed), errors, lost, skipped, rate (sent < 97% of the target), p99 (even
# less the client's slowest lag, latency above the limit: a client held up that long reads
# that much late at most, so the server missed whatever the client did), lag (the client
# fell behind its schedule), p99 (latency above the limit).
verdict() {
  local l=$1 lim=$2
  [ "$(field status "$l")" = ok ] || { echo status; return; }
  [ "$(field errors "$l")" = 0 ] || { echo errors; return; }
  [ "$(field lost "$l")" = 0 ] || { echo lost; return; }
  [ "$(field skipped "$l")" = 0 ] || { echo skipped; return; }
  awk -v p="$(field lat_p99_ms "$l")" -v g="$(field lag_p99_ms "$l")" -v s="$(field send_rate "$l")" \
    -v gmax="$(field lag_max_ms "$l")" -v t="$(field rate_target "$l")" -v lim="$lim" \
    -v lag="$LAG_LIMIT_MS" \
    'BEGIN { print ((s < 0.97 * t) ? "rate" : (p - gmax > lim) ? "p99" : (g > lag) ? "lag" : (p > lim) ? "p99" : "ok") }'
}

# step ID LIMIT RATE ARGS...: one search run; marks its result line with its verdict and
# succeeds when it was "ok".
# settle: waits (at most 60 s) until qimd has finished the work an earlier run left queued
# (a run that overloaded it leaves a backlog of fanout and mailbox writes): its CPU over
# half a second below a tenth of a core. Without it, a run measures its predecessor's tail.
settle() {
  local t0 t1 i
  for i in $(seq 1 120); do
    t0=$(awk '{print $14 + $15}' "/proc/$QPID/stat" 2>/dev/null) || return 0
    sleep 0.5
    t1=$(awk '{print $14 + $15}' "/proc/$QPID/stat" 2>/dev/null) || return 0
    if [ $((t1 - t0)) -lt $(( $(getconf CLK_TCK) / 20 )) ]; then
      [ "$i" -gt 1 ] && log "settle: qimd idle after $((i / 2)).$((i % 2 * 5)) s"
      return 0
    fi
  done
  log "settle: qimd still busy after 60 s"
}

# slow_counts ID FROM: appends to ID's last result line (when the run wrote one) how many
# WAL syncs, write transactions and I/O loop iterations of 50 ms or longer qimd logged
# during the run (its log from line FROM on; docs/store.md, "Slow syncs and transactions
# are reported"; docs/gateway-transport.md, "Loop stalls") and the slowest of each:
# whether the disk, the writer or a gateway loop held messages back during it.
slow_counts() {
  local counts
  counts=$(tail -n +"$(($2 + 1))" "$QLOG" | awk '
    function ms(l) { match(l, / ms=[0-9.]+/); return substr(l, RSTART + 4, RLENGTH - 4) + 0 }
    / event=store\.sqlite\.slow_sync / { ns++; v = ms($0); if (v > ms_s) ms_s = v }
    / event=store\.sqlite\.slow_transaction / { nt++; v = ms($0); if (v > ms_t) ms_t = v }
    / event=gateway\.loop_stall / { nl++; v = ms($0); if (v > ms_l) ms_l = v }
    END { printf "qimd_slow_syncs=%d qimd_slowest_sync_ms=%.1f qimd_slow_transactions=%d qimd_slowest_transaction_ms=%.1f qimd_loop_stalls=%d qimd_slowest_loop_stall_ms=%.1f", ns, ms_s, nt, ms_t, nl, ms_l }')
  if tail -1 "$RESULTS" | grep -q "^$1	"; then sed -i '$ s/$/ '"$counts"'/' "$RESULTS"; fi
}

# mark_verdict ID LIMIT_MS: prints the verdict of ID's last run and appends it to that run's
# result line (when the run wrote one: it is then the last line).
mark_verdict() {
  local v
  v=$(verdict "$(last_result "$1")" "$2")
  if tail -1 "$RESULTS" | grep -q "^$1	"; then sed -i '$ s/$/ verdict='"$v"'/' "$RESULTS"; fi
  echo "$v"
}

# judged ID LIMIT_MS COMMAND...: runs a load once qimd has settled and prints its verdict. A
# run whose client fell behind its schedule ("lag") measured how the machine scheduled
# qim-bench, not qim: it runs once more and the second verdict stands. Both result lines
# are kept (a search's table shows both; the curve's shows the second).
judged() {
  local id=$1 lim=$2 v try from; shift 2
  for try in 1 2; do
    settle
    from=$(wc -l < "$QLOG")
    record "$id" "$@"
    slow_counts "$id" "$from"
    v=$(mark_verdict "$id" "$lim")
    { [ "$v" = lag ] && [ $try = 1 ]; } || break
    log "$id: the client fell behind its schedule: once more"
  done
  echo "$v"
}

step() {
  local id=$1 lim=$2 rate=$3 v; shift 3
  # shellcheck disable=SC2086
  v=$(judged "$id-search" "$lim" "$QB" "$@" --rate "$rate" --duration "${STEP_SECS:-$SECS}" --warmup $WARM $S)
  log "$id-search: rate $rate: $v"
  [ "$v" = ok ]
}

# search ID LIMIT START ARGS...: from START, doubles the rate while runs keep up (or halves
# it until one does), then bisects SEARCH_STEPS times between the highest rate that kept up
# and the lowest that did not (4: the last bracket is a sixteenth of the first, ~6 %, finer
# than a run's own noise). Prints the highest rate that kept up (0 if none did).
search() {
  local id=$1 lim=$2 rate=$3; shift 3
  local lo=0 hi=0
  if step "$id" "$lim" "$rate" "$@"; then
    lo=$rate
    for _ in $(seq 1 12); do
      rate=$((rate * 2))
      if step "$id" "$lim" "$rate" "$@"; then lo=$rate; else hi=$rate; break; fi
    done
  else
    hi=$rate
    for _ in $(seq 1 8); do
      rate=$((rate / 2))
      [ $rate -lt 1 ] && break
      if step "$id" "$lim" "$rate" "$@"; then lo=$rate; break; else hi=$rate; fi
    done
  fi
  if [ $lo -gt 0 ] && [ $hi -gt 0 ]; then lo=$(bisect "$id" "$lim" $lo $hi $SEARCH_STEPS "$@"); fi
  echo $lo
}

# bisect ID LIMIT LO HI STEPS ARGS...: STEPS bisections between LO, a rate that kept up, and
# HI, one that did not; prints the highest rate that kept up.
bisect() {
  local id=$1 lim=$2 lo=$3 hi=$4 steps=$5 rate; shift 5
  for _ in $(seq 1 "$steps"); do
    rate=$(((lo + hi) / 2))
    [ $rate -le $lo ] && break
    if step "$id" "$lim" "$rate" "$@"; then lo=$rate; else hi=$rate; fi
  done
  echo $lo
}

# confirm ID LIMIT MAX ARGS...: the highest rate at or below MAX that keeps up again on the
# store the search grew: MAX itself, else three quarters of it, and so on down (at most 8
# times: a tenth of MAX), then CONFIRM_STEPS bisections between the highest rate that kept
# up and the lowest that did not (2: within ~4 % of it). Prints it (0 if none did). Its
# runs are ID's steps (result lines ID-search).
confirm() {
  local id=$1 lim=$2 hi=$3 lo=0 rate; shift 3
  if step "$id" "$lim" "$hi" "$@"; then echo "$hi"; return; fi
  for _ in $(seq 1 8); do
    rate=$((hi * 3 / 4))
    [ $rate -lt 1 ] && break
    if step "$id" "$lim" "$rate" "$@"; then lo=$rate; break; fi
    hi=$rate
  done
  if [ $lo -gt 0 ]; then lo=$(bisect "$id" "$lim" $lo $hi $CONFIRM_STEPS "$@"); fi
  echo $lo
}

# ---- 2. one-to-one ---------------------------------------------------------------------------
# p2p_search ID [START]: the one-to-one rate search, the same for the measured qimd and 2b's.
# One-to-one topics (`sub usr<peer>`, both sides), qim-bench's default, named explicitly.
# Its steps run as long as the curve's points (bench/README.md, section 2).
p2p_search() { STEP_SECS=$P2P_SECS search "$1" $P99_LIMIT_MS "${2:-$P2P_START}" p2p --via usr --users $P2P_USERS; }
if want p2p; then
  max=$(p2p_search p2p)
  # The figure is the highest rate that holds again on the store the search grew, where a
  # rate the search passed on a smaller store can miss: the confirmation, from the search's
  # result down, finds it. The curve is then at 25/50/75/100 % of that rate, its 100 % point
  # the confirmation's run that held (a row of its own, p2p-100); 25/50/75 % run after it.
  # confirmed: the highest curve point with it and every point below it ok.
  held=0 confirmed=0 holding=1
  [ "$max" -gt 0 ] && held=$(STEP_SECS=$P2P_SECS confirm p2p-confirm $P99_LIMIT_MS "$max" p2p --via usr --users $P2P_USERS)
  if [ "$held" -gt 0 ]; then
    for pct in 25 50 75; do
      r=$((held * pct / 100)); [ $r -lt 1 ] && r=1
      # shellcheck disable=SC2086
      v=$(judged "p2p-$pct" $P99_LIMIT_MS "$QB" p2p --via usr --users $P2P_USERS --rate $r --duration $CURVE_SECS --warmup $WARM $S --label pct=$pct)
      if [ "$v" = ok ] && [ $holding = 1 ]; then confirmed=$r; else holding=0; fi
    done
    awk -F '\t' -v r="$held" '$1 == "p2p-confirm-search" && (" " $3 " ") ~ (" rate_target=" r " ") && $3 ~ / verdict=ok$/ { l = $0 }
      END { if (l != "") { sub(/^p2p-confirm-search/, "p2p-100", l); print l } }' "$RESULTS" >> "$RESULTS"
    [ $holding = 1 ] && confirmed=$held
  fi
  printf 'p2p-max\t(search)\tscenario=p2p-max max_rate=%s held_rate=%s confirmed_rate=%s p99_limit_ms=%s status=ok\n' \
    "$max" "$held" "$confirmed" $P99_LIMIT_MS >> "$RESULTS"
fi

# ---- 2b. the same search on the other store ---------------------------------------------------
# A second qimd with the same binary, clients and search on the other durable store: beside a
# default one, store-memory mode (what its journal gains or costs against a WAL on this
# disk); beside a store-memory one, the default store (bench/README.md, section 2b).
if [ -n "$ALT_DIR" ]; then
  main_qimd=("$QPORT" "$QPID" "$S")
  launch_qimd "$ALT_DIR" "$WORK/qimd-alt.log" "$WORK/accounts.txt" "$ALT_URL"
  # A reference, not a target: it starts one doubling higher and bisects twice (within ~12 %),
  # six or seven steps where section 2's search takes nine (the run's 15-minute budget).
  max=$(SEARCH_STEPS=2 p2p_search p2palt $((P2P_START * 2)))
  printf 'p2palt-max\t(search)\tscenario=p2palt-max store=%s max_rate=%s p99_limit_ms=%s status=ok\n' \
    "$ALT_KIND" "$max" $P99_LIMIT_MS >> "$RESULTS"
  stop_qimd
  rm -rf "$ALT_DIR"
  if [ -n "$MEMDIR" ]; then rm -rf "$MEMDIR"; MEMDIR=; fi
  QPORT=${main_qimd[0]} QPID=${main_qimd[1]} S=${main_qimd[2]}
fi

# ---- 3. group fanout -------------------------------------------------------------------------
if want group; then
  # From the target's rate (50,000 deliveries/s), two bisections (within ~12 %): a step of
  # groups of 1,000 takes ~30 s, most of it the members' presence as they attach (~10^6
  # {pres} frames, which each step's setup waits out), and the target is what is asked.
  for g in $G_SMALL $G_LARGE; do
    start=$(((50000 + g - 2) / (g - 1))); [ $start -lt 2 ] && start=2 # rounded up: ≥ 50,000
    [ $QUICK = 1 ] && [ $start -gt 50 ] && start=50
    max=$(SEARCH_STEPS=$G_SEARCH_STEPS search "group$g" $GROUP_P99_LIMIT_MS $start group --groups 1 --group-size $g --senders $G_SENDERS)
    printf 'group%s-max\t(search)\tscenario=group-max group_size=%s max_rate=%s max_deliveries_per_s=%s p99_limit_ms=%s status=ok\n' \
      "$g" "$g" "$max" $((max * (g - 1))) $GROUP_P99_LIMIT_MS >> "$RESULTS"
  done
fi

# ---- 4. idle connections ---------------------------------------------------------------------
if want idle; then
  # On a qimd started again on the same store: the earlier scenarios grew its heap, and
  # connections allocated from that freed memory moved its RSS by nothing (0 bytes a
  # connection in the run of 1cfaf07, after p2p and groups of 1,000). A store-memory qimd's
  # journal replay leaves RSS at ~44 MB, but in use (the writer's page cache; malloc_trim
  # frees none of it), so it hides no connection (bench/README.md, section 4).
  if want p2p || want group; then
    stop_qimd
    launch_qimd "$WORK/qimd" "$WORK/qimd-idle.log" "$WORK/accounts.txt" "$STORE_URL"
  fi
  # shellcheck disable=SC2086
  record idle "$QB" idle --users $IDLE_CONNS --duration $IDLE_HOLD --concurrency 200 $S
fi

# ---- 5. history: in-process, and over the WebSocket against a second qimd whose data
# directory qim-seed --messages filled (one group of HISTORY_MESSAGES messages) ---------------
if want history && [ -x "$BB/qim-bench-history" ]; then
  # shellcheck disable=SC2086
  (timeout 600 "$BB/qim-bench-history" "$WORK" $HISTORY_ARGS) > "$WORK/history.out" 2>&1 || log "history: failed"
  sed 's/^/    /' "$WORK/history.out" >&2
  # The get data line (the request the WebSocket run makes) and the overall verdict.
  hl=$(grep 'get data before=<random> limit=50' "$WORK/history.out" | head -1 || true)
  if [ -n "$hl" ]; then
    printf 'history-inproc\tbench/qim-bench-history%s\tscenario=history-inproc messages=%s p50_us=%s p99_us=%s max_us=%s target=%s status=ok\n' \
      "${HISTORY_ARGS:+ $HISTORY_ARGS}" "$(sed -n 's/^qim-bench-history: \([0-9]*\) messages.*/\1/p' "$WORK/history.out")" \
      "$(echo "$hl" | sed -n 's/.* p50 *\([0-9.]*\) us.*/\1/p')" "$(echo "$hl" | sed -n 's/.* p99 *\([0-9.]*\) us.*/\1/p')" \
      "$(echo "$hl" | sed -n 's/.* max *\([0-9.]*\) us.*/\1/p')" \
      "$(sed -n 's/^qim-bench-history: target .*: \([A-Za-z]*\)$/\1/p' "$WORK/history.out")" >> "$RESULTS"
  fi
fi
if want history && [ -x "$BUILD/tools/qim-seed" ]; then
  HDATA=$WORK/qimd-history
  HPW=bench-history-password
  log "history: qim-seed --messages $HISTORY_MESSAGES into $HDATA"
  t0=$(date +%s.%N)
  if timeout 300 "$BUILD/tools/qim-seed" --data "$HDATA" --count 4 --prefix hist --password $HPW \
      --group 1 --messages "$HISTORY_MESSAGES" > "$WORK/history-seed.out" 2> "$WORK/history-seed.err"; then
    seed_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    printf 'history-seed\tqim-seed --count 4 --group 1 --messages %s\tscenario=history-seed messages=%s seed_s=%s status=ok\n' \
      "$HISTORY_MESSAGES" "$HISTORY_MESSAGES" "$seed_s" >> "$RESULTS"
    HGROUP=$(sed -n 's/^group //p' "$WORK/history-seed.out")
    HPORT=$(free_port)
    "$QIMD" --listen 127.0.0.1:$HPORT --data "$HDATA" --log-level warn \
      --login-rate 1000000 --login-burst 1000000 --request-rate 1000000 --request-burst 1000000 \
      > "$WORK/qimd-history.log" 2>&1 &
    HPID=$!; PIDS+=("$HPID")
    for _ in $(seq 1 100); do
      ss -Hltn "sport = :$HPORT" 2>/dev/null | grep -q . && break
      sleep 0.1
    done
    HS="--server 127.0.0.1:$HPORT --server-pid $HPID --accounts $WORK/history-accounts.txt --quiet"
    # shellcheck disable=SC2086
    record history-accounts "$QB" accounts $HS --count 4 --prefix hist --password $HPW
    # One page in flight (latency alone), then four (pages/s with the cores shared).
    for c in 1 4; do
      # shellcheck disable=SC2086
      record "history-ws$c" "$QB" history $HS --users $c --topic "$HGROUP" --duration $SECS --warmup $WARM
    done
    kill "$HPID" 2>/dev/null || true; wait "$HPID" 2>/dev/null || true
    rm -rf "$HDATA" # half a gigabyte for a million messages
  else
    log "history: qim-seed failed: $(tail -3 "$WORK/history-seed.err")"
  fi
fi

# ---- 6. sync catch-up (bench/sync_catchup.js starts its own qimd on a free port) -------------
if want sync; then
  # It uses the e2e tests' pinned npm packages (ws); install them if this checkout has none.
  node "$ROOT/tests/e2e/lib/npm_ci.js" >&2 || log "sync: npm ci of tests/e2e failed"
  record sync env QIMD="$QIMD" node "$ROOT/bench/sync_catchup.js"
fi

# ---- report ----------------------------------------------------------------------------------
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# BENCHMARKS.md itself is this script's output: an earlier run's copy is no change to what ran.
git -C "$ROOT" diff --quiet -- . ':(exclude)BENCHMARKS.md' 2>/dev/null ||
  COMMIT="$COMMIT (with uncommitted changes)"
CPU=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
MACHINE="$(nproc) cores ($CPU), $(awk '/MemTotal/ {printf "%.1f GB", $2/1048576}' /proc/meminfo), Linux $(uname -r), BENCH_DIR $BENCH_DIR ($(df -T "$BENCH_DIR" | awk 'NR==2 {print $2}'))"
# The peers block (bench/peers/run.sh, issue 11) is kept across rewrites.
PEERS_BLOCK=$(sed -n '/^<!-- peers:begin/,/^<!-- peers:end -->/p' "$OUT" 2>/dev/null || true)
"$ROOT/bench/report.sh" "$RESULTS" "$WORK" "$COMMIT" "$MACHINE" "$QUICK" > "$OUT"
[ -n "$PEERS_BLOCK" ] && printf '\n%s\n' "$PEERS_BLOCK" >> "$OUT"
log "wrote $OUT"
