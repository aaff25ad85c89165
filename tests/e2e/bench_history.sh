#!/usr/bin/env bash
# bench_history.sh — keeps the WebSocket history benchmark (bench/run.sh step "history")
# working: qim-seed --messages seeds a 2,000-message group into a fresh data directory (and
# refuses to seed it twice), qimd starts on it, `qim-bench accounts` logs the seeded
# members in for tokens, and `qim-bench history --duration 1` must page through the group
# with every page checked: RESULT status=ok, errors=0, wrong_pages=0, pages > 0. Then two of
# the members chat one-to-one (`qim-bench p2p`): nothing lost, no errors, and the measured
# run's wall-clock start (measure_from_unix_ms, for matching qimd's log) inside the time
# qim-bench ran. No timing is asserted; the figures belong to the benchmark.
#   usage: bench_history.sh QIMD QIM_SEED QIM_BENCH
set -euo pipefail

QIMD=$1 SEED=$2 QB=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qim-bench-history-XXXXXX")
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in seed.out seed2.err accounts.out history.out p2p.out qimd.err; do
    [ -f "$tmp/$f" ] && sed "s/^/  $f: /" "$tmp/$f" | tail -20 >&2
  done
  exit 1
}

free_port() {
  local p
  for _ in $(seq 1 100); do
    # below the ephemeral range (32768+): no client socket of a parallel test holds it
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  fail "no free port found"
}

PW=history-password
"$SEED" --data "$tmp/data" --count 3 --prefix hb --password $PW --group 1 --messages 2000 \
  > "$tmp/seed.out" || fail "qim-seed --messages 2000 failed"
group=$(sed -n 's/^group //p' "$tmp/seed.out")
[ -n "$group" ] || fail "qim-seed printed no group"
grep -qx 'messages 2000' "$tmp/seed.out" || fail "qim-seed did not report the messages"

# A second seeding of the same directory is refused, and leaves the history as it was.
if "$SEED" --data "$tmp/data" --count 3 --prefix hb --password $PW --group 1 --messages 10 \
  > /dev/null 2> "$tmp/seed2.err"; then
  fail "qim-seed --messages seeded a directory that was seeded already"
fi
grep -q 'fresh data directory' "$tmp/seed2.err" || fail "the refusal does not say why"

port=$(free_port)
"$QIMD" --listen 127.0.0.1:$port --data "$tmp/data" --log-level warn \
  --login-rate 1000000 --login-burst 1000000 --request-rate 1000000 --request-burst 1000000 \
  2> "$tmp/qimd.err" &
pid=$!
for _ in $(seq 1 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "qimd exited before it was ready"
  sleep 0.1
done

"$QB" accounts --server 127.0.0.1:$port --accounts "$tmp/accounts.txt" --count 3 --prefix hb \
  --password $PW --quiet > "$tmp/accounts.out" 2>&1 || fail "qim-bench accounts failed"
grep -q 'existed=3 ' "$tmp/accounts.out" || fail "the seeded accounts did not log in"

"$QB" history --server 127.0.0.1:$port --server-pid $pid --accounts "$tmp/accounts.txt" \
  --users 2 --topic "$group" --duration 1 --warmup 0.2 > "$tmp/history.out" 2>&1 ||
  fail "qim-bench history exited non-zero"
line=$(grep '^RESULT ' "$tmp/history.out") || fail "no RESULT line"
field() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
[ "$(field status)" = ok ] || fail "status is not ok"
[ "$(field errors)" = 0 ] || fail "errors=$(field errors)"
[ "$(field wrong_pages)" = 0 ] || fail "wrong_pages=$(field wrong_pages)"
[ "$(field newest_seq)" = 2000 ] || fail "newest_seq=$(field newest_seq), expected 2000"
[ "$(field pages)" -gt 0 ] || fail "no pages"
[ -n "$(field page_p99_ms)" ] && [ -n "$(field server_cpu_pct)" ] || fail "latency or server figures missing"
echo "ok: $line"

t0=$(date +%s%3N)
"$QB" p2p --server 127.0.0.1:$port --server-pid $pid --accounts "$tmp/accounts.txt" \
  --users 2 --rate 20 --duration 1 --warmup 0.2 > "$tmp/p2p.out" 2>&1 || fail "qim-bench p2p exited non-zero"
t1=$(date +%s%3N)
line=$(grep '^RESULT ' "$tmp/p2p.out") || fail "no p2p RESULT line"
[ "$(field status)" = ok ] || fail "p2p status is not ok"
[ "$(field errors)" = 0 ] || fail "p2p errors=$(field errors)"
[ "$(field lost)" = 0 ] && [ "$(field expected)" -gt 0 ] || fail "p2p expected=$(field expected) lost=$(field lost)"
start=$(field measure_from_unix_ms)
[ -n "$start" ] && [ "$start" -ge "$t0" ] && [ "$start" -le "$t1" ] ||
  fail "measure_from_unix_ms=$start is not within the run ($t0..$t1)"
echo "ok: $line"
