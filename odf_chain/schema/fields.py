"""The description of one schema field as DataHub's SchemaField carries it."""

from __future__ import annotations

from dataclasses import dataclass

VERSION_TOKEN = "[version=2.0]"
KEY_TOKEN = "[key=True]"


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """One entry of a schema's v2 field list.

    ``type`` is DataHub's type class without the ``TypeClass`` suffix, lower-cased (``string``,
    ``number``, ``boolean``, ``bytes``, ``date``, ``time``, ``enum``, ``null``, ``array``,
    ``map``, ``union``, ``record``, ``fixed``); ``native_type`` is the source system's own type
    string, as DataHub's ``nativeDataType`` holds it.
    """

    path: str
    type: str
    native_type: str
    nullable: bool
    doc: str | None = None
    is_part_of_key: bool = False
