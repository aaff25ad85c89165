#!/usr/bin/env bash
# qimd_start_stop.sh — starts the real qimd binary and checks its life cycle from the
# outside: the ready line, the data directory, a clean exit on SIGTERM / SIGINT, and
# clear configuration errors with exit status 2.
#   usage: qimd_start_stop.sh QIMD CASE   (CASE: sigterm | sigint | env | bad_config | help)
set -euo pipefail

QIMD=$1
CASE=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qim-e2e-XXXXXX")
pid=

cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL ($CASE): $*" >&2
  if [ -f "$tmp/stderr" ]; then sed 's/^/  qimd stderr: /' "$tmp/stderr" >&2; fi
  exit 1
}

# A loopback port nothing listens on (bash's /dev/tcp: a refused connect means free).
free_port() {
  local p
  for _ in $(seq 1 100); do
    # below the ephemeral range (32768+): no client socket of a parallel test holds it
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  fail "no free port found"
}

# Starts qimd in the background with stderr captured; extra arguments are its flags.
start() {
  "$QIMD" "$@" 2>"$tmp/stderr" &
  pid=$!
}

# Waits up to 20 s (sanitizer builds start slowly) for the ready line.
wait_ready() {
  for _ in $(seq 1 200); do
    if grep -q 'event=server.ready' "$tmp/stderr"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "qimd exited before it was ready"
    sleep 0.1
  done
  fail "no event=server.ready line within 20 s"
}

# Sends `sig`, waits, and requires exit status 0 and the stop lines.
stop_with() {
  local sig=$1 status=0
  kill "-$sig" "$pid"
  wait "$pid" || status=$?
  pid=
  [ "$status" -eq 0 ] || fail "exit status $status after SIG$sig, expected 0"
  grep -qE "event=server.stopping .*signal=SIG$sig" "$tmp/stderr" || fail "no server.stopping line for SIG$sig"
  grep -q "event=server.stopped" "$tmp/stderr" || fail "no server.stopped line"
}

ready_line_has() {
  grep 'event=server.ready' "$tmp/stderr" | grep -qF -- "$1" || fail "ready line lacks '$1'"
}

# Runs qimd expecting exit status `want` and `text` on stderr.
expect_exit() {
  local want=$1 text=$2 status=0
  shift 2
  "$@" >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
  [ "$status" -eq "$want" ] || fail "'$*' exited $status, expected $want"
  grep -qF -- "$text" "$tmp/stderr" "$tmp/stdout" || fail "'$*' did not print: $text"
}

case "$CASE" in
sigterm | sigint)
  port=$(free_port)
  data="$tmp/data/nested"
  start --listen "127.0.0.1:$port" --data "$data"
  wait_ready
  ready_line_has "listen=127.0.0.1:$port"
  ready_line_has "data=$data"
  ready_line_has "store=sqlite:$data/qim.db"
  [ -d "$data" ] || fail "data directory $data was not created"
  [ "$(stat -c %a "$data")" = 700 ] || fail "data directory mode is $(stat -c %a "$data"), expected 700"
  if [ "$CASE" = sigterm ]; then stop_with TERM; else stop_with INT; fi
  [ -d "$data" ] || fail "data directory $data is gone after stop"
  ;;
env)
  # Environment below flags: QIM_LISTEN is overridden, QIM_DATA and QIM_NODE_ID are used.
  port=$(free_port)
  QIM_LISTEN=127.0.0.1:1 QIM_DATA="$tmp/envdata" QIM_NODE_ID=42 start --listen "127.0.0.1:$port"
  wait_ready
  ready_line_has "listen=127.0.0.1:$port"
  ready_line_has "data=$tmp/envdata"
  ready_line_has "node_id=42"
  stop_with TERM
  [ -d "$tmp/envdata" ] || fail "data directory from QIM_DATA was not created"
  ;;
bad_config)
  expect_exit 2 "config: listen: expected HOST:PORT, got 'x' (from --listen)" "$QIMD" --listen x
  expect_exit 2 "config: node_id: expected an integer from 1 to 16777215, got '0' (from QIM_NODE_ID)" \
    env QIM_NODE_ID=0 "$QIMD"
  printf 'listen = 127.0.0.1:6060\nlisen = 1\n' >"$tmp/qim.conf"
  expect_exit 2 "config: $tmp/qim.conf:2: unknown key 'lisen'" "$QIMD" --config "$tmp/qim.conf"
  expect_exit 2 "config: unknown flag '--port'" "$QIMD" --port 1
  touch "$tmp/file"
  expect_exit 1 "step=data_dir error=ENOTDIR" "$QIMD" --data "$tmp/file/sub"
  ;;
help)
  expect_exit 0 "Usage: qimd" "$QIMD" --help
  for flag in "--listen HOST:PORT" "--data DIR" "--config FILE" "--store URL" "--node-id N"; do
    grep -qF -- "$flag" "$tmp/stdout" || fail "--help does not document $flag"
  done
  expect_exit 0 "node_id = 9" "$QIMD" --print-config --node-id 9
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok ($CASE)"
