#!/usr/bin/env bash
# selftest.sh — proves the contract check can fail: it runs check.sh on broken tables
# and error logs in a temporary directory and requires each to FAIL with the right
# message, and the real table with complete error logs to pass.
#   usage: selftest.sh CHECK_SH TABLE SRC_ROOT CC
set -uo pipefail
CHECK=$1
TABLE=$2
SRC=$3
CC=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qim-contract-self-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bad=0

# Fills directory $1 with the error logs the table's real/extension rows ask for.
complete_logs() {
  mkdir -p "$1"
  awk -F'\t' -v dir="$1" '!/^#/ && $2 == "error" && $4 ~ /^(real|extension)$/ { print $1 >> (dir "/" $5 ".log") }' "$TABLE"
}

# expect WANT_RC TEXT TABLE LOGDIR: runs the check and compares exit status and output.
expect() {
  local want=$1 text=$2 table=$3 logs=$4 rc=0
  bash "$CHECK" "$table" "$SRC" "$logs" "$CC" >"$tmp/out" 2>&1 || rc=$?
  if { [ "$want" = fail ] && [ "$rc" -eq 0 ]; } || { [ "$want" = pass ] && [ "$rc" -ne 0 ]; }; then
    echo "FAIL: expected the check to $want on $table (exit $rc); its output:"
    sed 's/^/  /' "$tmp/out"
    bad=1
  elif ! grep -qF -- "$text" "$tmp/out"; then
    echo "FAIL: check output lacks: $text"
    sed 's/^/  /' "$tmp/out"
    bad=1
  else
    echo "ok: $want: $text"
  fi
}

mkdir -p "$tmp/empty"
complete_logs "$tmp/full"

# A small broken table and no error logs at all.
printf 'UserId\ttype\tqim_user_id\treal\t\nCommitError::ClockUnsafe\terror\tQIM_E_COMMIT_CLOCK_UNSAFE\treal\tunit_core_test_clock\nNoSuchType\ttype\tqim_no_such_type\treal\t\n' >"$tmp/small.tsv"
expect fail "NoSuchType (type) has no C symbol qim_no_such_type" "$tmp/small.tsv" "$tmp/empty"
expect fail "CommitError::ClockUnsafe is real but no test produced it" "$tmp/small.tsv" "$tmp/empty"
expect fail "has no table row" "$tmp/small.tsv" "$tmp/empty"

# The real table with complete logs passes; that makes the failures below meaningful.
expect pass "contract: ok" "$TABLE" "$tmp/full"

# One symbol missing from the headers.
{ cat "$TABLE"; printf 'NoSuchType\ttype\tqim_no_such_type\treal\t\n'; } >"$tmp/extra.tsv"
expect fail "NoSuchType (type) has no C symbol qim_no_such_type" "$tmp/extra.tsv" "$tmp/full"

# A row pointing at another existing symbol breaks the naming rule.
sed 's/^ShardEpoch\ttype\tqim_shard_epoch/ShardEpoch\ttype\tqim_lane_id/' "$TABLE" >"$tmp/wrong.tsv"
expect fail "ShardEpoch should be qim_shard_epoch by the naming rule" "$tmp/wrong.tsv" "$tmp/full"

# An error row dropped from the table while err.h still has the code.
grep -v '^FanoutError::Unavailable' "$TABLE" >"$tmp/dropped.tsv"
expect fail "QIM_E_FANOUT_UNAVAILABLE (FanoutError::Unavailable) has no table row" "$tmp/dropped.tsv" "$tmp/full"

# A real error whose test never produced it, and one produced only by another test.
first=$(awk -F'\t' '!/^#/ && $2 == "error" && $4 == "real" { print $1 "\t" $5; exit }' "$TABLE")
name=${first%%$'\t'*}
test=${first##*$'\t'}
if [ -n "$name" ]; then
  complete_logs "$tmp/lacking"
  grep -vxF -- "$name" "$tmp/lacking/$test.log" >"$tmp/l" || true
  mv "$tmp/l" "$tmp/lacking/$test.log"
  expect fail "$name is real but no test produced it" "$TABLE" "$tmp/lacking"
  echo "$name" >>"$tmp/lacking/some_other_test.log"
  expect fail "$name names test $test, but it was produced only by: some_other_test" "$TABLE" "$tmp/lacking"
fi

# A malformed row.
{ cat "$TABLE"; printf 'Foo\ttype\tqim_foo\tmaybe\t\n'; } >"$tmp/status.tsv"
expect fail 'bad status "maybe"' "$tmp/status.tsv" "$tmp/full"

exit "$bad"
