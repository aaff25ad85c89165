#!/usr/bin/env bash
# long.sh — the long fuzz runs (`make fuzz-long`): every libFuzzer target of the sanitizer
# build, one after the other, for FUZZ_SECONDS each (default 600), starting from the
# checked-in corpus. New inputs collect in build-san/tests/fuzz/long/corpus/<target>/ (kept
# between runs, so a second run goes deeper), crashes and broken invariants in
# build-san/tests/fuzz/long/artifacts/, each target's log next to them. Ends with one line
# per target: executions, inputs added, coverage, and whether it crashed.
#   FUZZ_SECONDS=600   seconds per target
#   FUZZ_TARGETS="http ws"   only these (default: every target in targets.txt)
#   FUZZ_BUILD=build-san     the sanitizer build to use
# Exit status 1 if any target crashed. A crash becomes a regression input: minimize it
# (fuzz_<t> -minimize_crash=1 -runs=10000 ARTIFACT), fix the bug, and commit the input as
# tests/fuzz/corpus/<target>/regress_<what>.bin (README.md in this folder).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-san}
bin=$build/tests/fuzz
secs=${FUZZ_SECONDS:-600}
list=$bin/targets.txt
if [[ ! -s $list ]]; then
  echo "long.sh: no libFuzzer targets in $list: build with clang and -DQIM_SANITIZE=ON (make san)" >&2
  exit 2
fi
out=$bin/long
mkdir -p "$out/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
while read -r name max_len; do
  [[ -z $name ]] && continue
  if [[ -n ${FUZZ_TARGETS:-} && " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  mkdir -p "$out/corpus/$name"
  log=$out/$name.log
  echo "fuzz-long: $name for ${secs}s (log $log)"
  rc=0
  "$bin/fuzz_$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$out/artifacts/$name-" \
    "$out/corpus/$name" "$root/tests/fuzz/corpus/$name" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  verdict=ok
  if [[ $rc -ne 0 ]]; then
    verdict="CRASHED (exit $rc): $(grep -m1 -E 'ERROR|invariant failed' "$log" || true)"
    status=1
  fi
  summary+=("$(printf '%-12s executions=%-10s added=%-6s cov=%-6s %s' "$name" "${execs:-?}" "${added:-?}" "${cov:-?}" "$verdict")")
done <"$list"
echo "fuzz-long: ${secs}s per target"
printf '  %s\n' "${summary[@]}"
exit $status
