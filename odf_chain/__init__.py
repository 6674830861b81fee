"""odf_chain: tamper-evident, hash-linked Open Data Fabric metadata chains for Parquet data."""

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
    "Vocabulary",
    "decode_block",
    "encode_block",
]
