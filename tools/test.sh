#!/usr/bin/env bash
# Set up (first run only), lint, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/ruff check odf_chain tests tools
.venv/bin/ruff format --check odf_chain tests tools
# the slowest tests are listed at the end: the suite must stay well under 15 minutes
exec .venv/bin/python -m pytest --durations=12 "$@"
