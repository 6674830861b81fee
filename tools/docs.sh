#!/usr/bin/env bash
# Build the documentation site with warnings as errors (broken links, pages missing from the
# nav, stale anchors fail). Installs the docs extra into ./.venv (or $VENV) when mkdocs is
# missing. Output: /tmp/site, or the directory given as the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  bash tools/setup.sh
fi
if ! "$VENV/bin/python" -c 'import mkdocs, material, mkdocstrings_handlers.python' 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet -e '.[docs]'
fi
# the CLI reference is generated from the parsers: a stale page fails the build
"$VENV/bin/python" tools/gen_cli_reference.py --check
export NO_MKDOCS_2_WARNING=1
exec "$VENV/bin/python" -m mkdocs build --strict --site-dir "${1:-/tmp/site}"
