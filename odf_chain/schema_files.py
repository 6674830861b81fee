"""Reading schema files the CLI accepts: Avro (.avsc), DataMine JSON (.json), Parquet.

The schema package itself is pure; this module is where files come in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from odf_chain.errors import SchemaError
from odf_chain.schema import _json as json_text
from odf_chain.schema.convert import avro_to_arrow
from odf_chain.schema.datamine import datamine_to_arrow
from odf_chain.storage.user_files import open_regular, read_regular


def load_schema_file(path: str | Path, table: str | None = None) -> pa.Schema:
    """The Arrow schema a file describes.

    ``.avsc`` is an Avro schema (its writer schema is kept, so field paths follow the Avro
    convention); ``.json`` is a DataMine document (``table`` picks one of several tables), or an
    Avro schema if it looks like one; ``.parquet`` / ``.parq`` gives the file's own schema.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".parq"):
        with os.fdopen(open_regular(path, _WHAT), "rb") as f:
            try:
                return pq.read_schema(f)
            except (pa.ArrowException, OSError) as exc:
                raise SchemaError(f"{path}: not a readable Parquet file: {exc}") from None
    if suffix not in (".avsc", ".json"):
        os.close(open_regular(path, _WHAT))  # a missing file is named as such first
        raise SchemaError(
            f"{path}: unknown schema file type {suffix or '(none)'}; "
            "expected .avsc (Avro), .json (DataMine or Avro) or .parquet"
        )
    try:
        text = read_regular(path, MAX_SCHEMA_FILE_BYTES, _WHAT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not UTF-8 text: {exc}") from None
    if suffix == ".avsc":
        return _named(path, avro_to_arrow, text)
    doc = json_text.loads(text, what=str(path))
    # The converters get the text, not the decoded value: they read deep documents
    # iteratively, and the DataMine reader refuses duplicate keys.
    if isinstance(doc, dict) and (
        "table_list" in doc
        or ("table" in doc and "fields" in doc)
        or (isinstance(doc.get("schema"), dict) and "table_list" in doc["schema"])
    ):
        return _named(path, lambda t: datamine_to_arrow(t, table=table), text)
    return _named(path, avro_to_arrow, text)


def _named(path: Path, convert, value) -> pa.Schema:
    try:
        return convert(value)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None


# A schema document of this size already describes far more columns than any dataset holds.
MAX_SCHEMA_FILE_BYTES = 64 * 1024 * 1024
_WHAT = "schema file"
