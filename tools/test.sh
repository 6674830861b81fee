#!/usr/bin/env bash
# Set up (first run only), lint, and run the whole test suite (--fast: the loop without Spark,
# S3 or slow tests); other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/ruff check odf_chain tests tools
.venv/bin/ruff format --check odf_chain tests tools
if [ "${1:-}" = "--fast" ]; then
  # the fast loop: no Spark, no object-store servers, nothing slow (markers: pyproject.toml). A JAVA_HOME
  # without Java makes any Spark a test would start anyway fail instead of running
  shift
  export JAVA_HOME=/nonexistent/the-fast-loop-starts-no-java
  set -- -m "not spark and not s3 and not azure and not gcs and not slow" "$@"
fi
# the tests spread over the cores (pytest-xdist): each worker starts its own Spark session
# and object-store servers when a test first needs them; a worker that runs out of tests takes
# some queued for the other (worksteal: with the default, the two kept about one core busy).
# The slowest tests are listed at the end: the suite must stay well under 15 minutes
exec .venv/bin/python -m pytest -n auto --dist worksteal --durations=12 "$@"
