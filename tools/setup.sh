#!/usr/bin/env bash
# Create ./.venv and install odf_chain (editable) with an extra: `dev` (the default: the tests'
# and benchmarks' tools, PySpark included; tools/test.sh) or `spark` (the library and PySpark
# only: what tools/demo.sh needs). Safe to re-run: it installs only when pyproject.toml changed
# or the extra asked for is not there yet (dev holds spark). Needs python3 (3.11+) with venv and
# pip; everything else comes from the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv
EXTRA="${1:-dev}"
case "$EXTRA" in
  dev | spark) ;;
  *) echo "usage: tools/setup.sh [dev|spark]" >&2; exit 2 ;;
esac
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "odf_chain needs Python 3.11 or newer (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# Headless Chromium renders the audit report in tests/test_audit.py (which skips without it):
# for the tests only. Best effort, as root with apt-get only (package lists refreshed if the
# first try fails): set-up never fails for want of a browser.
if [ "$EXTRA" = dev ] && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
    >/dev/null 2>&1 ||
    echo "setup: could not install chromium; tests/test_audit.py's browser test will skip" >&2
fi
# Azurite, Azure's storage emulator, for the tests on az:// (tests/azurite_server.py): from the
# npm registry into ./.node (no global install), the pinned version only. Best effort: without
# Node.js (Debian's nodejs and npm, as root) or the package those tests skip, saying why.
AZURITE_VERSION=3.37.0
if [ "$EXTRA" = dev ]; then
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q nodejs npm || { apt-get update -q && apt-get install -y -q nodejs npm; }; } \
      >/dev/null 2>&1 || true
  fi
  installed="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' .node/node_modules/azurite/package.json \
    2>/dev/null || true)"
  if [ "$installed" != "$AZURITE_VERSION" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "setup: no npm; the Azure tests (Azurite) will skip" >&2
    elif ! npm install --prefix "$PWD/.node" --no-audit --no-fund --loglevel=error \
      "azurite@$AZURITE_VERSION" >/dev/null; then
      echo "setup: could not install azurite@$AZURITE_VERSION; the Azure tests will skip" >&2
    fi
  fi
fi
version="$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$VENV/.installed-$EXTRA-$version" ] || [ -f "$VENV/.installed-dev-$version" ]; then
  exit 0
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[$EXTRA]"
# the stamps of an older pyproject.toml go; spark's stays beside dev's (dev holds it)
find "$VENV" -maxdepth 1 -name '.installed-*' ! -name "*-$version" -delete
touch "$VENV/.installed-$EXTRA-$version"
