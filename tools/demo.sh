#!/usr/bin/env bash
# Set up (first run only: .venv with odf_chain[spark], not the test tools) and run the demo:
# create a dataset, write slices, evolve the schema, show the log and schemas, verify, and
# catch a tampered copy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh spark
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python tools/demo.py "$@"
