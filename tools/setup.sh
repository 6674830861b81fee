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
