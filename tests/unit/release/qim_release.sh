#!/usr/bin/env bash
# qim_release.sh QIM_RELEASE — the release gate's command against a real git repository:
# a clean commit with complete evidence in both builds is released; a dirty tree, a commit
# that does not contain main, evidence recorded for another commit, a skipped suite and a
# store branch without its backend's conformance run are each refused with their error.
set -euo pipefail
tool=$1
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
repo=$tmp/repo
fails=0

git_() { git -C "$repo" -c user.name=qim -c user.email=qim@localhost "$@" >/dev/null 2>&1; }

# write_build DIR COMMIT [SKIP_E2E]: the three files `make test` leaves in a build directory.
write_build() {
  local dir=$1 commit=$2 e2e_status=run e2e_inside=""
  if [ "${3:-}" = skip ]; then e2e_status=notrun; e2e_inside='<skipped message="Skipped"/>'; fi
  mkdir -p "$dir"
  echo "$commit" > "$dir/junit.commit"
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuite name="(empty)" tests="7">'
    for t in unit_core_test_ids:run conformance_sqlite:run "e2e_p2p:$e2e_status" crash_sqlite:run \
             fuzz_ws:run contract_table:run contract_selftest:run; do
      local inside=""
      [ "${t%%:*}" = e2e_p2p ] && inside=$e2e_inside
      echo "<testcase name=\"${t%%:*}\" classname=\"${t%%:*}\" time=\"0.25\" status=\"${t#*:}\">$inside</testcase>"
    done
    echo '</testsuite>'
  } > "$dir/junit.xml"
  local sep="" json='{"kind":"ctestInfo","tests":['
  for t in unit_core_test_ids:unit conformance_sqlite:conformance e2e_p2p:e2e crash_sqlite:crash \
           fuzz_ws:fuzz contract_table:contract contract_selftest:unit; do
    json+="$sep{\"name\":\"${t%%:*}\",\"properties\":[{\"name\":\"LABELS\",\"value\":[\"${t#*:}\"]}]}"
    sep=","
  done
  echo "$json]}" > "$dir/tests.json"
}

# expect STATUS PATTERN ARGS...: runs the gate; its exit status and output must match.
expect() {
  local want=$1 pattern=$2 out status=0
  shift 2
  out=$("$tool" --repo "$repo" "$@" 2>&1) || status=$?
  if [ "$status" != "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: qim-release $* gave status $status (want $want), output lacks '$pattern':"
    echo "$out"
    fails=$((fails + 1))
  fi
}

git init -q -b main "$repo"
echo one > "$repo/file"
git_ add file && git_ commit -m one
old=$(git -C "$repo" rev-parse HEAD)
echo two > "$repo/file"
git_ commit -am two
head=$(git -C "$repo" rev-parse HEAD)
write_build "$tmp/gcc" "$head"
write_build "$tmp/san" "$head"
builds=("gcc=$tmp/gcc" "san=$tmp/san")

expect 0 "decision: released" --branch main "${builds[@]}"
expect 0 "san/e2e .* passed" --branch main "${builds[@]}"

# A store branch also needs its backend's conformance runner, in both builds.
expect 1 "MissingVerification {branch: store-redis, suite: gcc/conformance_redis}" \
  --branch store-redis "${builds[@]}"

# An untracked file makes the tree dirty; so does an edit.
echo stray > "$repo/stray"
expect 1 "BranchReleaseError::DirtyWorktreeRisk (stray)" --branch main "${builds[@]}"
rm "$repo/stray"
echo edit >> "$repo/file"
expect 1 "DirtyWorktreeRisk" --branch main "${builds[@]}"
git_ checkout -- file

# Evidence recorded for an older commit, or on a dirty tree, is no evidence.
write_build "$tmp/san" "$old"
expect 1 "MissingVerification {branch: main, suite: san/unit}" --branch main "${builds[@]}"
write_build "$tmp/san" "$head-dirty"
expect 1 "MissingVerification {branch: main, suite: san/e2e}" --branch main "${builds[@]}"

# A suite with a test that did not run.
write_build "$tmp/san" "$head" skip
expect 1 "SkippedVerification {branch: main, suite: san/e2e}" --branch main "${builds[@]}"
write_build "$tmp/san" "$head"

# A side branch made before main's last commit would take main back.
git_ checkout -b side "$old"
echo side > "$repo/other"
git_ add other && git_ commit -m side
side=$(git -C "$repo" rev-parse HEAD)
write_build "$tmp/gcc" "$side"
write_build "$tmp/san" "$side"
expect 1 "DirectionViolation (main is not in HEAD)" --branch main "${builds[@]}"
expect 1 "DirectionViolation" --branch main --main no-such-ref "${builds[@]}"
git_ merge -m merge main
merged=$(git -C "$repo" rev-parse HEAD)
write_build "$tmp/gcc" "$merged"
write_build "$tmp/san" "$merged"
expect 0 "decision: released" --branch main "${builds[@]}"

expect 2 "usage" --branch trunk "${builds[@]}"
expect 2 "usage" --branch main
expect 2 "usage" --branch main "gcc"
echo '{"tests":' > "$tmp/san/tests.json"
expect 2 "malformed" --branch main "${builds[@]}"

if [ "$fails" -ne 0 ]; then
  echo "$fails case(s) failed"
  exit 1
fi
echo "qim-release: every case decided as expected"
