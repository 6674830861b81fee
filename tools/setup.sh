#!/usr/bin/env bash
# Create ./.venv and install odf_chain with its development tools. Safe to re-run: it only
# reinstalls when pyproject.toml changed. Needs python3 (3.11+) with venv and pip; everything
# else comes from the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "odf_chain needs Python 3.11 or newer (found $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
# Headless Chromium renders the audit report in tests/test_audit.py (which skips without it).
# Best effort, as root with apt-get only (package lists refreshed if the first try fails):
# set-up never fails for want of a browser.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
    >/dev/null 2>&1 ||
    echo "setup: could not install chromium; tests/test_audit.py's browser test will skip" >&2
fi
