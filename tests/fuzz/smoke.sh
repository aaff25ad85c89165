#!/usr/bin/env bash
# smoke.sh — one fuzz target's short run in the sanitizer build's ctest (label fuzz):
#   smoke.sh BINARY WORK_DIR SEED_CORPUS ARTIFACT_PREFIX [libFuzzer flags...]
# Every run starts over from the checked-in corpus (WORK_DIR is emptied first), so its
# duration and what it covers do not drift from one `make test` to the next; inputs it finds
# stay in WORK_DIR until the next run. A crash or a broken invariant fails the test and
# leaves the input at ARTIFACT_PREFIXcrash-* (e.g. artifacts/http-crash-...; tests/fuzz/README.md
# says what to do next).
set -euo pipefail
bin=$1 work=$2 corpus=$3 prefix=$4
shift 4
rm -rf "$work"
mkdir -p "$work" "$(dirname "$prefix")"
exec "$bin" "$@" -artifact_prefix="$prefix" "$work" "$corpus"
