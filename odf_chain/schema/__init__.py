"""Pure schema logic: DataHub v2 field paths, Avro/DataMine <-> Arrow conversion, evolution.

No I/O here; reading schema files is :mod:`odf_chain.schema_files`' job.

The names below resolve on first use (PEP 562): the fold imports :mod:`.evolution` on every
start, and should not pay for the Avro and DataMine converters (fastavro among them) it never
calls.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "arrow_field_paths": "arrow_paths",
    "arrow_fields": "arrow_paths",
    "avro_field_paths": "avro_paths",
    "avro_fields": "avro_paths",
    "arrow_to_avro": "convert",
    "avro_to_arrow": "convert",
    "DataMineSchema": "datamine",
    "DataMineWarning": "datamine",
    "arrow_to_datamine": "datamine",
    "datamine_to_arrow": "datamine",
    "parse_datamine": "datamine",
    "EvolutionViolation": "evolution",
    "SchemaDiff": "evolution",
    "check_evolution": "evolution",
    "diff_schemas": "evolution",
    "FieldInfo": "fields",
    "field_paths": "paths",
    "schema_fields": "paths",
}

__all__ = [
    "DataMineSchema",
    "DataMineWarning",
    "EvolutionViolation",
    "FieldInfo",
    "SchemaDiff",
    "arrow_field_paths",
    "arrow_fields",
    "arrow_to_avro",
    "arrow_to_datamine",
    "avro_field_paths",
    "avro_fields",
    "avro_to_arrow",
    "check_evolution",
    "datamine_to_arrow",
    "diff_schemas",
    "field_paths",
    "parse_datamine",
    "schema_fields",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:
    from odf_chain.schema.arrow_paths import arrow_field_paths, arrow_fields
    from odf_chain.schema.avro_paths import avro_field_paths, avro_fields
    from odf_chain.schema.convert import arrow_to_avro, avro_to_arrow
    from odf_chain.schema.datamine import (
        DataMineSchema,
        DataMineWarning,
        arrow_to_datamine,
        datamine_to_arrow,
        parse_datamine,
    )
    from odf_chain.schema.evolution import (
        EvolutionViolation,
        SchemaDiff,
        check_evolution,
        diff_schemas,
    )
    from odf_chain.schema.fields import FieldInfo
    from odf_chain.schema.paths import field_paths, schema_fields
