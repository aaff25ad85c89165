#!/usr/bin/env bash
# test-evidence.sh BUILD_DIR — run by `make test` before a build's ctest: records what the
# release gate (docs/release.md, qim-release) needs beside ctest's own JUnit file, which
# is removed here so an aborted run never leaves an older run's results for a new commit.
#   BUILD_DIR/junit.commit  the commit tested, with "-dirty" when the tree had changes
#   BUILD_DIR/tests.json    ctest --show-only=json-v1: every test and its labels
set -euo pipefail
build=$1
commit=$(git rev-parse HEAD 2>/dev/null || echo none)
if [ -n "$(git status --porcelain 2>/dev/null || echo unknown)" ]; then
  commit="$commit-dirty"
fi
rm -f "$build/junit.xml"
echo "$commit" > "$build/junit.commit"
ctest --test-dir "$build" --show-only=json-v1 > "$build/tests.json"
