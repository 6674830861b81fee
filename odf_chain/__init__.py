"""odf_chain: tamper-evident, hash-linked Open Data Fabric metadata chains for Parquet data.

Importing the package is cheap: each public name is imported from its home module on first use
(PEP 562), so ``odf-chain --version`` and a program that needs one corner load only that corner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odf_chain.chain import BlockEntry
    from odf_chain.dataset import Dataset
    from odf_chain.errors import (
        ConflictError,
        FormatError,
        IntegrityError,
        NotFoundError,
        OdfChainError,
        RuleViolation,
        SchemaError,
        SchemaEvolutionError,
        StorageError,
        UnsyncedCommitError,
    )
    from odf_chain.events import (
        AddData,
        Checkpoint,
        DatasetKind,
        DataSlice,
        DisablePollingSource,
        DisablePushSource,
        ExecuteTransform,
        ExecuteTransformInput,
        MetadataBlock,
        OffsetInterval,
        Seed,
        SetDataSchema,
        SetInfo,
        SetLicense,
        SetVocab,
        SourceState,
    )
    from odf_chain.format.codec import decode_block, encode_block
    from odf_chain.format.did import DatasetId
    from odf_chain.format.multihash import Multihash
    from odf_chain.state import DatasetState, Vocabulary

__version__ = "0.1.0"

_HOMES = {
    "AddData": "odf_chain.events",
    "BlockEntry": "odf_chain.chain",
    "Checkpoint": "odf_chain.events",
    "ConflictError": "odf_chain.errors",
    "Dataset": "odf_chain.dataset",
    "DatasetId": "odf_chain.format.did",
    "DatasetKind": "odf_chain.events",
    "DatasetState": "odf_chain.state",
    "DataSlice": "odf_chain.events",
    "decode_block": "odf_chain.format.codec",
    "DisablePollingSource": "odf_chain.events",
    "DisablePushSource": "odf_chain.events",
    "encode_block": "odf_chain.format.codec",
    "ExecuteTransform": "odf_chain.events",
    "ExecuteTransformInput": "odf_chain.events",
    "FormatError": "odf_chain.errors",
    "IntegrityError": "odf_chain.errors",
    "MetadataBlock": "odf_chain.events",
    "Multihash": "odf_chain.format.multihash",
    "NotFoundError": "odf_chain.errors",
    "OdfChainError": "odf_chain.errors",
    "OffsetInterval": "odf_chain.events",
    "RuleViolation": "odf_chain.errors",
    "SchemaError": "odf_chain.errors",
    "SchemaEvolutionError": "odf_chain.errors",
    "Seed": "odf_chain.events",
    "SetDataSchema": "odf_chain.events",
    "SetInfo": "odf_chain.events",
    "SetLicense": "odf_chain.events",
    "SetVocab": "odf_chain.events",
    "SourceState": "odf_chain.events",
    "StorageError": "odf_chain.errors",
    "UnsyncedCommitError": "odf_chain.errors",
    "Vocabulary": "odf_chain.state",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'odf_chain' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AddData",
    "BlockEntry",
    "Checkpoint",
    "ConflictError",
    "DataSlice",
    "Dataset",
    "DatasetId",
    "DatasetKind",
    "DatasetState",
    "DisablePollingSource",
    "DisablePushSource",
    "ExecuteTransform",
    "ExecuteTransformInput",
    "FormatError",
    "IntegrityError",
    "MetadataBlock",
    "Multihash",
    "NotFoundError",
    "OdfChainError",
    "OffsetInterval",
    "RuleViolation",
    "SchemaError",
    "SchemaEvolutionError",
    "Seed",
    "SetDataSchema",
    "SetInfo",
    "SetLicense",
    "SetVocab",
    "SourceState",
    "StorageError",
    "UnsyncedCommitError",
    "Vocabulary",
    "__version__",
    "decode_block",
    "encode_block",
]
