"""The source and attachment events go through ``Dataset.append`` like any other: encoded,
stored, read back equal to what was appended (as given by hand: optional fields left out, lists
for tuples), and verified; the rules ODF gives them refuse before anything is written."""

from __future__ import annotations

import pytest

from odf_chain import Dataset, chain
from odf_chain.errors import FormatError, RuleViolation
from odf_chain.events import (
    AddPushSource,
    DatasetKind,
    DisablePollingSource,
    DisablePushSource,
    Seed,
    SetAttachments,
    SetLicense,
    SetPollingSource,
)
from odf_chain.format.codec import decode_block
from odf_chain.format.did import DatasetId
from odf_chain.state import EMPTY
from odf_chain.storage import create_storage
from odf_chain.transaction import Transaction

POLLING = SetPollingSource(
    fetch={
        "kind": "FetchStepUrl",
        "url": "https://example.org/stations.csv",
        "event_time": {"kind": "EventTimeSourceFromSystemTime"},
        "cache": {"kind": "SourceCachingForever"},
        "headers": [{"name": "Accept", "value": "text/csv"}],
    },
    prepare=[{"value": {"kind": "PrepStepDecompress", "format": 0}}],
    read={"kind": "ReadStepCsv", "ddl_schema": ["id BIGINT", "name STRING"], "header": True},
    preprocess={"kind": "TransformSql", "engine": "datafusion", "query": "SELECT * FROM input"},
    merge={"kind": "MergeStrategySnapshot", "primary_key": ["id"]},
)
PUSH = AddPushSource(
    source_name="readings",
    read={"kind": "ReadStepNdJson", "ddl_schema": ["station BIGINT", "value DOUBLE"]},
    merge={"kind": "MergeStrategyAppend"},
)
ATTACHMENTS = SetAttachments(
    {
        "kind": "AttachmentsEmbedded",
        "items": [
            {"path": "README.md", "content": "# Stations\n"},
            {"path": "NOTES", "content": ""},
        ],
    }
)
EVENTS = [
    ATTACHMENTS,
    SetLicense(short_name="CC0", name="CC0 1.0", spdx_id="CC0-1.0", website_url="https://x"),
    PUSH,
    DisablePushSource(source_name="readings"),
    POLLING,
    DisablePollingSource(),
    DisablePollingSource(),  # not active: changes nothing, accepted (see odf_chain.rules)
]


def test_every_source_event_is_appended_read_back_and_verified(tmp_path):
    dataset = Dataset.create(tmp_path / "stations")
    entries = [dataset.append(event) for event in EVENTS]

    for entry, event in zip(entries, EVENTS, strict=True):
        assert decode_block(dataset.storage.read_block(str(entry.hash))).event == event
    reopened = Dataset.open(tmp_path / "stations")
    assert [e.block.event for e in reopened.blocks()][1:] == EVENTS
    assert reopened.blocks()[5].block.event.fetch["headers"][0] == {
        "name": "Accept",
        "value": "text/csv",
    }
    assert reopened.verify().problems == []


def test_rules_refuse_before_anything_is_written(tmp_path):
    dataset = Dataset.create(tmp_path / "stations")
    dataset.append(PUSH)
    head = dataset.storage.read_head()
    with pytest.raises(RuleViolation, match="rule sources"):
        dataset.append(POLLING)
    with pytest.raises(FormatError, match=r"SetPollingSource.merge: required"):
        dataset.append(SetPollingSource(fetch=POLLING.fetch, read=POLLING.read))
    assert dataset.storage.read_head() == head
    assert Dataset.open(tmp_path / "stations").verify().problems == []


def test_sources_are_refused_in_a_derivative_dataset(tmp_path):
    storage = create_storage(tmp_path / "summary")
    seed = Seed(DatasetId.generate(), DatasetKind.DERIVATIVE)
    Transaction.create(storage, chain.prepare(EMPTY, seed)).commit()
    dataset = Dataset.open(tmp_path / "summary")
    for event in (POLLING, PUSH):
        with pytest.raises(RuleViolation, match="rule dataset-kind"):
            dataset.append(event)
    dataset.append(DisablePushSource(source_name="readings"))  # harmless: nothing to disable
    assert dataset.verify().problems == []
