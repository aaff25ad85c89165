#!/usr/bin/env bash
# Installs the Debian packages qim builds and tests with (DESIGN.md §7).
# As root it runs apt-get; otherwise it prints the exact install line and fails,
# so `make run` / `make test` never continue on a machine that lacks a library.
set -euo pipefail

PKGS=(cmake make gcc clang libclang-rt-14-dev pkg-config
      libuv1-dev libwslay-dev libhttp-parser-dev libjansson-dev libsqlite3-dev
      libssl-dev libsodium-dev librust-blake3-dev b3sum libcmocka-dev
      libhiredis-dev redis-server nodejs npm)

missing=()
for p in "${PKGS[@]}"; do
  # nodejs/npm may come from outside Debian (the machine image); accept the binaries.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "qim needs these Debian packages; run as root:" >&2
  echo "  $line" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
