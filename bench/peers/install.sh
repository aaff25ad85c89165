#!/usr/bin/env bash
# install.sh — what the peers benchmark needs beyond scripts/deps.sh: the peer servers from
# Debian (ejabberd with SQLite, Prosody with SQLite, PostgreSQL for Tinode's storage path)
# and the harness's npm packages, pinned by bench/peers/package-lock.json (`npm ci`).
# Debian's packages would start their services; the benchmark starts its own instances, so
# a system-wide instance found running is reported (the benchmark never stops it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PKGS=(ejabberd erlang-p1-sqlite3 prosody lua-dbi-sqlite3 postgresql sqlite3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench-peers needs: apt-get install -y --no-install-recommends ${missing[*]} (as root)" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -d "$HERE/node_modules/@xmpp/client" ] || [ ! -d "$HERE/node_modules/ws" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
