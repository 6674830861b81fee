#!/usr/bin/env bash
# The core install, proved: a fresh venv in a temporary directory, `pip install .` with no
# extras, and there the library and the commands that need no Spark run for real, PySpark is
# absent, and each command that needs Spark says in one line which extra to install (exit 2).
# CI runs it (.ci/run). Needs python3 (3.11+) with venv and pip, and the package registry.
# KEEP=1 keeps the venv and prints its path; its size is printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/odf_chain-smoke.XXXXXX")"
if [ -z "${KEEP:-}" ]; then
  trap 'rm -rf "$work"' EXIT
fi
started=$SECONDS

fail() {
  echo "smoke_core: FAILED: $*" >&2
  exit 1
}

"$PYTHON" -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check "$repo"
installed=$SECONDS
# everything below runs outside the source tree: the installed package, not ./odf_chain
cd "$work"
export PATH="$work/venv/bin:$PATH"

# 1. no PySpark (nor py4j), no obstore: the core pulls neither
for absent in pyspark py4j obstore; do
  if "$py" -c "import $absent" 2>/dev/null; then
    fail "the core install brought $absent"
  fi
done

# 2. the package imports, and --version answers with its own version
"$py" -c "import odf_chain, odf_chain.cli"
expected="odf-chain $("$py" -c 'import odf_chain; print(odf_chain.__version__)')"
[ "$(odf-chain --version)" = "$expected" ] || fail "odf-chain --version: $(odf-chain --version)"
odf-chain --help >/dev/null
chain-verify --help >/dev/null

# 3. a dataset written and read back with the Python API
"$py" - "$work/ds" <<'EOF'
import sys

import pyarrow as pa

from odf_chain import Dataset

location = sys.argv[1]
ds = Dataset.create(location)
first = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
ds.write(first)
ds.write(pa.table({"id": [4], "name": ["d"]}))
back = Dataset.open(location).to_table(columns=["id", "name"])
assert back.num_rows == 4, back
assert back.column("id").to_pylist() == [1, 2, 3, 4], back
print(f"written and read back: {back.num_rows} rows")
EOF

# 4. the commands without Spark
odf-chain log "$work/ds" | grep -q AddData || fail "odf-chain log shows no AddData"
odf-chain log -n 1 "$work/ds" >/dev/null
odf-chain schema "$work/ds" >/dev/null
odf-chain fields "$work/ds" >/dev/null
chain-verify "$work/ds" | grep -q "^OK: " || fail "chain-verify did not say OK"
chain-verify --deep "$work/ds" | grep -q "^OK: " || fail "chain-verify --deep did not say OK"
odf-chain receipt "$work/ds" -o "$work/receipt.json" >/dev/null
chain-verify "$work/ds" --receipt "$work/receipt.json" | grep -q "^OK: " \
  || fail "chain-verify --receipt did not say OK"
odf-chain export datahub "$work/ds" -o "$work/datahub.json" >/dev/null
"$py" -c "import json, sys; json.load(open(sys.argv[1]))" "$work/datahub.json"
odf-chain export openlineage "$work/ds" -o "$work/openlineage.jsonl" >/dev/null
odf-chain gc --dry-run "$work/ds" >/dev/null

# 5. what needs Spark says so in one line naming the extra, exit 2, never a traceback
printf 'id,name\n5,e\n' >"$work/more.csv"
expect_hint() {
  local out code=0
  out="$("$@" 2>&1)" || code=$?
  [ "$code" = 2 ] || fail "$* exited $code, not 2: $out"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$* said more than one line: $out"
  case "$out" in
    *"pip install 'odf_chain[spark]'"*) ;;
    *) fail "$* did not name the extra: $out" ;;
  esac
  case "$out" in *Traceback*) fail "$* gave a traceback: $out" ;; esac
  echo "  $1 ${2:-}: $out"
}
expect_hint odf-chain ingest "$work/ds" "$work/more.csv" --format csv
expect_hint odf-chain derive "$work/derived" --create --input ds="$work/ds" --sql "SELECT * FROM ds"
expect_hint odf-chain verify --reproduce "$work/ds"
expect_hint chain-verify --reproduce "$work/ds"

# 6. an object store without its extra: one line naming it (no network: obstore is asked first)
"$py" - <<'EOF'
from odf_chain.errors import StorageError
from odf_chain.storage.conditional import ConditionalStore

try:
    ConditionalStore.for_uri("s3://bucket/dataset")
except StorageError as exc:
    assert "pip install 'odf_chain[cloud]'" in str(exc), exc
else:
    raise AssertionError("an s3:// dataset opened without obstore")
EOF

size="$(du -sh "$work/venv" | cut -f1)"
echo "smoke_core: OK: core venv $size (no pyspark, no obstore); install $((installed - started)) s," \
  "checks $((SECONDS - installed)) s"
if [ -n "${KEEP:-}" ]; then
  echo "smoke_core: kept $work"
fi
