#!/usr/bin/env bash
# report.sh — renders the peers section of BENCHMARKS.md from bench/peers/run.sh's results
# ("MEDIUM<TAB>SERVER<TAB>key=value ..." lines) and puts it between the markers
# `<!-- peers:begin -->` and `<!-- peers:end -->` of OUT, leaving the rest of the file (issue
# 10's report) as it is; appended when the markers are absent.
#
# Usage: bench/peers/report.sh RESULTS OUT COMMIT MACHINE QUICK QIM_DIRECT
set -euo pipefail
RESULTS=$1 OUT=$2 COMMIT=$3 MACHINE=$4 QUICK=$5 QIM_DIRECT=$6

# The results, read once: R["MEDIUM|SERVER|SCENARIO"] = that run's key=value line (the last one).
declare -A R=()
while IFS=$'\t' read -r m srv kv; do
  sc=${kv#*scenario=}; sc=${sc%% *}
  R["$m|$srv|$sc"]=" $kv "
done < "$RESULTS"
# get MEDIUM SERVER SCENARIO KEY
get() {
  local l=${R["$1|$2|$3"]:-}
  [[ $l == *" $4="* ]] || return 0
  l=${l#* $4=}
  echo "${l%% *}"
}
num() { if [ -z "$1" ]; then echo "—"; else LC_ALL=C awk -v v="$1" 'BEGIN { if (v < 100 && v != int(v)) { printf "%.1f", v; exit } s = sprintf("%.0f", v); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } print s o }'; fi; }
ratio() { if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ] || [ "$1" = 0 ]; then echo "—"; else awk -v a="$1" -v b="$2" 'BEGIN { r = a / b; printf (r >= 10 ? "%.0f×" : "%.2f×"), r }'; fi; }
# cell MEDIUM SERVER SCENARIO KEY: the value, marked when the run lost messages or failed.
cell() {
  local v lost st
  v=$(get "$@"); lost=$(get "$1" "$2" "$3" lost); st=$(get "$1" "$2" "$3" status)
  if [ -z "$st" ]; then echo "not run"; return; fi
  [ "$st" != ok ] && { echo "failed"; return; }
  echo "$(num "$v")$([ -n "$lost" ] && [ "$lost" != 0 ] && echo " ($lost lost)")"
}

block() {
  echo "<!-- peers:begin (bench/peers/run.sh rewrites this block; the rest of the file is bench/run.sh's) -->"
  echo "## Peers: qim beside ejabberd, Prosody and Tinode's storage path"
  echo
  echo "Written by \`make bench-peers\` (bench/peers/run.sh) on $(date -u +%Y-%m-%dT%H:%MZ) at commit \`$COMMIT\`."
  echo "Machine: $MACHINE."
  [ "$QUICK" = 1 ] && echo && echo "**Quick run (--quick): tiny counts; these figures only show that the harness works.**"
  echo
  echo "Ratios are qim ÷ peer: above 1 means qim did more per second (throughput) or took longer"
  echo "(latency, memory). One-to-one on qim is $([ "$QIM_DIRECT" = p2p ] && echo "its p2p topics (\`sub usr…\`)" || echo "**a 2-member group per pair** (\`--qim-direct group\`, not the default one-to-one path: p2p topics, \`sub usr…\`)"). The"
  echo "XMPP servers carry one-to-one as \`<message type='chat'>\` to the peer's bare JID."
  echo
  echo "Read the ratios with the machine's load in mind (the load average above: other jobs share"
  echo "these cores, so repeated runs move by tens of percent). A fixed-rate row whose client send"
  echo "lag p99 is of the order of its latency p99 measured the client's scheduling, not the server."
  echo
  local medium
  for medium in disk tmpfs; do
    grep -q "^$medium	" "$RESULTS" || continue
    local title="Data on the real disk (ext4, default durability)"
    [ $medium = tmpfs ] && title="Data on a tmpfs (/dev/shm: the same software, no disk waits)"
    echo "### $title"
    echo
    local q=qim rate
    rate=$(get $medium qim rate rate); [ -z "$rate" ] && rate=$(get $medium ejabberd rate rate)
    echo "| Measurement | qim | ejabberd | Prosody | qim/ejabberd | qim/Prosody |"
    echo "|---|---|---|---|---|---|"
    row() { # LABEL SCENARIO KEY
      echo "| $1 | $(cell $medium qim "$2" "$3") | $(cell $medium ejabberd "$2" "$3") | $(cell $medium prosody "$2" "$3") | $(ratio "$(get $medium qim "$2" "$3")" "$(get $medium ejabberd "$2" "$3")") | $(ratio "$(get $medium qim "$2" "$3")" "$(get $medium prosody "$2" "$3")") |"
    }
    row "One-to-one burst: msgs/s delivered ($(get $medium qim burst users) users, $(get $medium qim burst messages) each to their peer at once)" burst msgs_per_s
    row "Burst: seconds the harness took to write it (the client's share of the figure above)" burst send_s
    row "Fixed rate $(num "$rate") msgs/s: p50 send→delivery ms" rate lat_p50_ms
    row "Fixed rate $(num "$rate") msgs/s: p99 send→delivery ms" rate lat_p99_ms
    row "Fixed rate: client send lag p99 ms (how late the harness wrote against its schedule)" rate lag_p99_ms
    row "Group: deliveries/s (room of $(get $medium qim group size), $(get $medium qim group senders) senders × $(get $medium qim group messages) msgs at once)" group deliveries_per_s
    row "Group: p99 send→delivery ms" group lat_p99_ms
    row "Server RSS after the runs, kB" rss rss_kb
    row "Server CPU % of its core during the burst" burst server_cpu_pct
    echo
    local qc pg pg1
    qc=$(get $medium qim commit msgs_per_s); pg=$(get $medium tinode-pg tinode-pg msgs_per_s); pg1=$(get $medium tinode-pg tinode-pg msgs_per_s_one_tx)
    echo "| Durable commits/s, $(get $medium qim commit submitters) concurrent submitters | msgs/s | qim ÷ it |"
    echo "|---|---|---|"
    echo "| qim commit path (qim-bench-commit: checks, reserve, history row, outbox, committed; SQLite WAL, synchronous=FULL) | $(num "$qc") | — |"
    echo "| Tinode's path on PostgreSQL 15 as Tinode issues it: 3 autocommit statements per message | $(num "$pg") | $(ratio "$qc" "$pg") |"
    echo "| The same 3 statements in one transaction per message (one WAL flush instead of three; two more round trips) | $(num "$pg1") | $(ratio "$qc" "$pg1") |"
    echo
  done
  cat <<'EOF'
### How it is run, and every fairness choice

* **One harness** (bench/peers/harness.js, Node 20, npm `@xmpp/client` 0.13.6 and `ws` 8.23.1
  pinned by bench/peers/package-lock.json) runs the same scenario and timing code against
  every server; only the adapter differs (adapters.js: Tinode JSON frames over a WebSocket
  for qim, XMPP over TCP for the peers). Every message body is the same 100-byte text
  carrying sender, number and send time; latency is send → delivery on the other connection.
* **Scenarios** (counts, not durations, so every server does the same work; a scenario's
  deliveries must arrive within 120 s, otherwise the rest is reported as lost):
  burst — N/2 pairs, every user writes M messages to its peer at once, throughput =
  deliveries ÷ (last delivery − first send); fixed rate — open-loop senders (message n of
  sender q due at t0 + (q/Q + n)·Q/R, never waiting for the server) at R = half the slowest
  server's burst figure in the same medium, 1 s warm-up then 10 s measured; group — one room,
  every member online, K senders write M messages at once, deliveries to the other members.
  The disk counts are small because the XMPP servers archive every message in its own
  SQLite transaction (about 20–50 msgs/s on this machine's disk).
* **Storage and sync policy**: SQLite for the three servers, in the same directory medium:
  the durable run on the real disk, the tmpfs run on /dev/shm. Each server keeps its own
  SQLite defaults: qim sets WAL + `synchronous=FULL`; ejabberd and Prosody leave SQLite's
  default rollback journal with `synchronous=FULL`. Every message is archived by all:
  qim stores every message; ejabberd `mod_mam` with `default: always` and MUC rooms with
  `mam: true`; Prosody `mod_mam` with `default_archive_policy = true` and `muc_mam` logging
  every room. Tinode's path: a private PostgreSQL 15 cluster (`initdb` in a temporary
  directory on the same medium, loopback port, `fsync` and `synchronous_commit` on, only
  `max_connections` raised for the clients), driven by `pgbench -M prepared`, one topic per
  client (a Tinode topic saves one message at a time). qim's figure is `qim-bench-commit
  --senders 8 --inflight S/8` (in-process, no network) with the same S in flight.
* **CPUs**: every server (all its threads) pinned to CPU 1 with `taskset`, every client
  (harness, pgbench) to CPU 0. qimd runs `--io-threads 1`; ejabberd's VM gets one scheduler
  (`+S 1`, the ERL_OPTIONS of ejabberdctl); Prosody is single-threaded; PostgreSQL's
  backends share CPU 1 likewise. qim-bench-commit has no client and runs on CPU 1.
* **Debian defaults lifted** (each is a protection against clients, not what is measured):
  ejabberd — the per-connection traffic shaper (`c2s_shaper: normal`, 3,000 B/s) set to
  `none`; mandatory STARTTLS (`starttls_required: true`) off; in-band registration enabled
  (`mod_register`, `ip_access: all`, `registration_timeout: infinity` instead of one
  registration per IP per 600 s); listen `backlog: 1024` (default 5); `mod_fail2ban` and
  `mod_pres_counter` not loaded. Prosody — `mod_limits` (c2s `rate = "10kb/s"`) not loaded;
  `c2s_require_encryption = false`; `allow_registration = true`; `tcp_backlog = 1024`
  (default 128). qimd — its per-connection send and login rate limits (`--send-rate 50`,
  `--login-rate 20` by default) raised to 1,000,000.
* **Logins**: XMPP clients use SASL PLAIN on loopback (SCRAM costs the client about a second
  of CPU per login); passwords stay stored as Debian configures them (ejabberd `scram`,
  Prosody `internal_hashed`). qim clients log in with tokens from accounts made once
  (`{acc}`: argon2id). Accounts are created before anything is timed (XMPP in-band
  registration, Tinode `{acc}`).
* **Group chat**: XMPP rooms are created by their first member, who unlocks them (instant
  room: the owner submits the default configuration) before the others join with
  `<history maxstanzas='0'/>`; qim groups are `sub new…` then `sub grp…`. XMPP rooms reflect
  each message to its sender; those echoes are not counted. qim senders use `noecho`.
* **RSS**: `VmRSS` of the server process after all scenarios of the medium (ejabberd: the
  BEAM VM; PostgreSQL is not compared for memory).
* Not tuned for the scenario: qimd runs its defaults apart from the lifted limits above.
EOF
  echo
  echo "Command: \`make bench-peers\` (bench/peers/run.sh; \`--quick\`, \`--media disk|tmpfs\`, \`--servers\`, \`--qim-direct p2p|group\`)."
  echo "<!-- peers:end -->"
}

new=$(mktemp)
block > "$new"
if [ -f "$OUT" ] && grep -q '^<!-- peers:begin' "$OUT"; then
  awk -v f="$new" '/^<!-- peers:begin/ { while ((getline l < f) > 0) print l; skip = 1; next }
                   /^<!-- peers:end -->/ { skip = 0; next } !skip { print }' "$OUT" > "$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
else
  { [ -f "$OUT" ] && cat "$OUT" && echo; cat "$new"; } > "$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
fi
rm -f "$new"
