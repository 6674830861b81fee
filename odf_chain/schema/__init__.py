"""Pure schema logic: DataHub v2 field paths, Avro/DataMine <-> Arrow conversion, evolution.

No I/O here; reading schema files is :mod:`odf_chain.schema_files`' job.
"""

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
