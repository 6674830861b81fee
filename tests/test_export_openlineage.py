"""OpenLineage export: the run events of the chains built in test_export_datahub, parsed back
line by line into the openlineage-python client's classes; run ids, facet versions and column
lineage checked against expectations written by hand from the lineage each run recorded."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    dataset_version_dataset,
    schema_dataset,
)

from odf_chain import Dataset
from odf_chain.events import AddData
from odf_chain.export.openlineage import external_name, write_openlineage_file
from odf_chain.lineage import LineageRecorder
from odf_chain.state import lineage_of as carried_lineage
from tests.test_export_datahub import (
    CSV_HASH,
    LEGACY_STEPS,
    UUID_RUN,
    Chains,
    build_chains,
    build_legacy_chain,
)

COLUMN_LINEAGE_URL = (
    "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json"
    "#/$defs/ColumnLineageDatasetFacet"
)
VERSION_URL = (
    "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json"
    "#/$defs/DatasetVersionDatasetFacet"
)
SCHEMA_URL = (
    "https://openlineage.io/spec/facets/1-2-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet"
)
PRODUCER = "urn:odf-chain:export:openlineage"
RUN_ID_NAMESPACE = uuid.UUID("6f3c1a52-8d0e-4b7a-9c25-0d4f7e1b2a93")
SYSTEM = [
    ("offset", "int64"),
    ("op", "int32"),
    ("system_time", "timestamp[ms, tz=UTC]"),
    ("event_time", "timestamp[ms, tz=UTC]"),
]


@pytest.fixture
def chains(tmp_path: Path) -> Chains:
    return build_chains(tmp_path)


def export(dataset: Dataset, out: Path, **kwargs: Any) -> list[dict[str, Any]]:
    count = write_openlineage_file(dataset, out, **kwargs)
    lines = out.read_text().splitlines()
    assert count == len(lines)
    events = [json.loads(line) for line in lines]
    for event in events:
        rebuild(event)
    return events


def rebuild(event: dict[str, Any]) -> RunEvent:
    """The event as the client's classes: unknown or misspelled keys, a run id that is not a
    UUID, a bad event time or type all raise here."""
    for dataset in [*event["inputs"], *event["outputs"]]:
        facets = dataset["facets"]
        if "columnLineage" in facets:
            column_lineage(facets["columnLineage"])
        if "schema" in facets:
            schema_fields(facets["schema"]["fields"])
        if "version" in facets:
            dataset_version(facets["version"])
    return RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"]),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
        producer=event["producer"],
    )


def column_lineage(facet: dict[str, Any]) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    cl = column_lineage_dataset
    assert facet["_schemaURL"] == COLUMN_LINEAGE_URL

    def input_field(source: dict[str, Any]) -> column_lineage_dataset.InputField:
        return cl.InputField(
            **{k: v for k, v in source.items() if k != "transformations"},
            transformations=[cl.Transformation(**t) for t in source["transformations"]],
        )

    fields = {
        name: cl.Fields(inputFields=[input_field(source) for source in entry["inputFields"]])
        for name, entry in facet["fields"].items()
    }
    return cl.ColumnLineageDatasetFacet(
        fields=fields, dataset=[input_field(source) for source in facet["dataset"]]
    )


def dataset_version(facet: dict[str, Any]) -> dataset_version_dataset.DatasetVersionDatasetFacet:
    """The ``version`` facet as the client's class (DatasetVersionDatasetFacet 1-0-1): its one
    property, a string, and nothing else but the base facet's keys."""
    assert facet["_schemaURL"] == VERSION_URL
    assert facet["_producer"] == PRODUCER
    assert isinstance(facet["datasetVersion"], str)
    return dataset_version_dataset.DatasetVersionDatasetFacet(
        **{k: v for k, v in facet.items() if not k.startswith("_")}
    )


def schema_fields(fields: list[dict[str, Any]]) -> list[schema_dataset.SchemaDatasetFacetFields]:
    return [
        schema_dataset.SchemaDatasetFacetFields(
            **{k: v for k, v in f.items() if k != "fields"},
            fields=schema_fields(f.get("fields", [])),
        )
        for f in fields
    ]


def dataset_level(event: dict[str, Any]) -> dict[tuple[str, str, str], list[tuple]]:
    """The columnLineage facet's dataset-level list as {(namespace, name, field): [(type,
    subtype, masking), ...]}."""
    facet = event["outputs"][0]["facets"]["columnLineage"]
    return {
        (s["namespace"], s["name"], s["field"]): [
            (t["type"], t.get("subtype"), t["masking"]) for t in s["transformations"]
        ]
        for s in facet["dataset"]
    }


def lineage_of(event: dict[str, Any]) -> dict[str, dict[tuple[str, str, str], list[tuple]]]:
    """The columnLineage facet as {output: {(namespace, name, field): [(type, subtype,
    masking), ...]}}."""
    facet = event["outputs"][0]["facets"]["columnLineage"]
    return {
        name: {
            (s["namespace"], s["name"], s["field"]): [
                (t["type"], t["subtype"], t["masking"]) for t in s["transformations"]
            ]
            for s in entry["inputFields"]
        }
        for name, entry in facet["fields"].items()
    }


def names_and_types(fields: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(f["name"], f["type"]) for f in fields]


def runs_of(dataset: Dataset) -> list[tuple[Any, Any]]:
    """(the run's lineage, the AddData block carrying it) for each run, from the chain."""
    return [
        (lineage, entry)
        for entry in dataset.blocks()
        if (lineage := carried_lineage(entry.block.event)) is not None
    ]


# -- tests ----------------------------------------------------------------------------------------


def test_summary_runs_become_start_and_complete_events(chains: Chains, tmp_path: Path) -> None:
    events = export(chains.summary, tmp_path / "summary.jsonl")
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE"]
    runs = runs_of(chains.summary)
    for (lineage, _), (start, complete) in zip(runs, [events[:2], events[2:]], strict=True):
        run = lineage.run
        assert start["eventTime"] == run.started_at.isoformat()
        assert complete["eventTime"] == run.ended_at.isoformat()
        assert start["run"]["runId"] == complete["run"]["runId"]
        for event in (start, complete):
            assert event["job"]["namespace"] == "odf_chain"
            assert event["job"]["name"] == "summarise"
            assert event["producer"] == PRODUCER
            job_type = event["job"]["facets"]["jobType"]
            assert (job_type["processingType"], job_type["integration"]) == ("BATCH", "ODF_CHAIN")
    # START names the datasets only; the facets come with COMPLETE
    assert all(d["facets"] == {} for d in [*events[0]["inputs"], *events[0]["outputs"]])
    # every line is one compact event
    assert len((tmp_path / "summary.jsonl").read_text().splitlines()) == 4


def test_run_ids_are_uuids_derived_when_the_recorded_one_is_not(
    chains: Chains, tmp_path: Path
) -> None:
    summary = export(chains.summary, tmp_path / "summary.jsonl")
    expected = [
        str(uuid.uuid5(RUN_ID_NAMESPACE, f"{chains.summary_id}/sum-1")),
        str(uuid.uuid5(RUN_ID_NAMESPACE, f"{chains.summary_id}/sum-2")),
    ]
    assert [e["run"]["runId"] for e in summary[::2]] == expected
    facets = [e["run"]["facets"]["odf_chain_run"] for e in summary[1::2]]
    assert [f["runId"] for f in facets] == ["sum-1", "sum-2"]  # the recorded ids kept
    assert [f["datasetId"] for f in facets] == [chains.summary_id] * 2
    # Seed, SetDataSchema, AddData with lineage (2), SetDataSchema (region), AddData (4)
    assert [f["blockSequenceNumber"] for f in facets] == [2, 4]
    assert [f["blockHash"] for f in facets] == [str(e.hash) for _, e in runs_of(chains.summary)]
    assert [f["offsets"] for f in facets] == [{"start": 0, "end": 1}, {"start": 2, "end": 2}]
    assert facets[0]["_schemaURL"] == "urn:odf-chain:facets:OdfChainRunFacet:1-0-0"

    users = export(chains.users, tmp_path / "users.jsonl")
    # a recorded UUID is used as it is, in its canonical (lower case) text
    assert users[2]["run"]["runId"] == "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
    assert users[3]["run"]["facets"]["odf_chain_run"]["runId"] == UUID_RUN
    assert users[0]["run"]["runId"] == str(
        uuid.uuid5(RUN_ID_NAMESPACE, f"{chains.users_id}/load-1")
    )


def test_column_lineage_of_each_summary_run(chains: Chains, tmp_path: Path) -> None:
    events = export(chains.summary, tmp_path / "summary.jsonl")
    first, second = events[1], events[3]
    users = ("odf", chains.users_id)
    regions = ("file", "/ref/regions.csv")
    direct, group = ("DIRECT", "IDENTITY", False), ("INDIRECT", "GROUP_BY", False)
    assert lineage_of(first) == {
        "count(1)": {(*users, "id"): [("DIRECT", "AGGREGATION", False)], (*users, "last"): [group]},
        "last": {(*users, "last"): [direct, group]},
        "last_hash": {(*users, "last"): [("DIRECT", "TRANSFORMATION", True)]},
        "score": {
            (*users, "id"): [("DIRECT", "TRANSFORMATION", False)],
            (*users, "last"): [("DIRECT", "TRANSFORMATION", False)],
        },
    }  # the dropped email_hash feeds nothing
    assert lineage_of(second) == {
        "count(1)": {(*users, "id"): [("DIRECT", "AGGREGATION", False)], (*users, "last"): [group]},
        "last": {(*users, "last"): [direct, group]},
        "region": {
            (*regions, "city"): [("INDIRECT", "JOIN", False)],
            (*regions, "region"): [direct],
            (*users, "address.city"): [("INDIRECT", "JOIN", False)],
        },
    }
    facet = first["outputs"][0]["facets"]["columnLineage"]
    assert facet["_schemaURL"] == COLUMN_LINEAGE_URL
    descriptions = {
        name: [t["description"] for s in entry["inputFields"] for t in s["transformations"]]
        for name, entry in facet["fields"].items()
    }
    assert descriptions["last_hash"] == ["via read -> md5"]
    assert descriptions["last"] == ["via read -> write", "via read -> group"]
    assert all(
        d.startswith("via read -> score udf; opaque step: score udf") for d in descriptions["score"]
    )
    assert not any("opaque" in d for name in ("count(1)", "last") for d in descriptions[name])


def test_inputs_and_output_carry_schema_version_and_statistics(
    chains: Chains, tmp_path: Path
) -> None:
    events = export(chains.summary, tmp_path / "summary.jsonl")
    first, second = events[1], events[3]
    (_, first_data), (_, second_data) = runs_of(chains.summary)

    [users_in] = first["inputs"]
    assert (users_in["namespace"], users_in["name"]) == ("odf", chains.users_id)
    assert users_in["facets"]["version"]["datasetVersion"] == str(chains.users_first)
    assert users_in["facets"]["schema"]["_schemaURL"] == SCHEMA_URL
    assert names_and_types(users_in["facets"]["schema"]["fields"]) == [
        *SYSTEM,
        ("id", "string"),
        ("email_hash", "string"),
        ("last", "string"),
    ]

    regions_in, users_in = second["inputs"]  # sorted by namespace, then name
    assert (regions_in["namespace"], regions_in["name"]) == ("file", "/ref/regions.csv")
    assert regions_in["facets"] == {}  # no schema known, no content hash recorded
    assert users_in["facets"]["version"]["datasetVersion"] == str(chains.users_second)
    fields = users_in["facets"]["schema"]["fields"]
    assert names_and_types(fields)[-1] == ("address", "struct")
    assert fields[-1]["fields"] == [{"name": "city", "type": "string", "ordinal_position": 1}]
    assert fields[-1]["ordinal_position"] == 8

    for event, data, rows, extra in [
        (first, first_data, 2, [("last_hash", "string"), ("score", "double")]),
        (
            second,
            second_data,
            1,
            [("last_hash", "string"), ("score", "double"), ("region", "string")],
        ),
    ]:
        [out] = event["outputs"]
        assert (out["namespace"], out["name"]) == ("odf", chains.summary_id)
        assert out["facets"]["version"]["datasetVersion"] == str(data.hash)
        assert names_and_types(out["facets"]["schema"]["fields"]) == [
            *SYSTEM,
            ("last", "string"),
            ("count(1)", "int64"),
            *extra,
        ]
        assert isinstance(data.block.event, AddData)
        stats = out["outputFacets"]["outputStatistics"]
        assert stats["rowCount"] == rows
        assert stats["fileCount"] == 1
        assert stats["size"] == data.block.event.new_data.size


def test_drops_are_kept_in_the_run_facet(chains: Chains, tmp_path: Path) -> None:
    summary = export(chains.summary, tmp_path / "summary.jsonl")
    drops = [e["run"]["facets"]["odf_chain_run"]["drops"] for e in summary[1::2]]
    assert drops == [
        [
            {
                "namespace": "odf",
                "name": chains.users_id,
                "field": "email_hash",
                "operation": "drop email",
            }
        ],
        [],
    ]
    users = export(chains.users, tmp_path / "users.jsonl")
    assert users[1]["run"]["facets"]["odf_chain_run"]["drops"] == [
        {
            "namespace": "file",
            "name": "/data/people(2024).csv",
            "field": "ssn",
            "operation": "drop ssn",
        }
    ]


def test_users_runs_read_files_named_as_openlineage_names_them(
    chains: Chains, tmp_path: Path
) -> None:
    events = export(chains.users, tmp_path / "users.jsonl")
    first, second = events[1], events[3]
    [csv] = first["inputs"]
    assert (csv["namespace"], csv["name"]) == ("file", "/data/people(2024).csv")
    assert csv["facets"]["version"]["datasetVersion"] == CSV_HASH
    assert lineage_of(first) == {
        "email_hash": {
            ("file", "/data/people(2024).csv", "email"): [("DIRECT", "TRANSFORMATION", True)]
        },
        "id": {("file", "/data/people(2024).csv", "id"): [("DIRECT", "IDENTITY", False)]},
        "last": {("file", "/data/people(2024).csv", "last"): [("DIRECT", "IDENTITY", False)]},
    }
    [s3] = second["inputs"]
    assert (s3["namespace"], s3["name"]) == ("s3://bucket", "people/2024-02.csv")
    assert lineage_of(second)["address.city"] == {
        ("s3://bucket", "people/2024-02.csv", "city"): [("DIRECT", "IDENTITY", False)]
    }


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///data/x.csv", ("file", "/data/x.csv")),
        ("file:///data/a%20b.csv", ("file", "/data/a b.csv")),
        ("file://localhost/data/x.csv", ("file", "/data/x.csv")),
        ("file://nas/share/x.csv", ("file://nas", "/share/x.csv")),
        ("/data/x.csv", ("file", "/data/x.csv")),
        ("s3://bucket/k/x.parquet", ("s3://bucket", "k/x.parquet")),
        ("s3a://bucket/k/x.parquet", ("s3://bucket", "k/x.parquet")),
        ("gs://bucket/k", ("gs://bucket", "k")),
        ("hdfs://nn:8020/p/x", ("hdfs://nn:8020", "/p/x")),
        ("https://example.org/data.csv", ("https://example.org", "/data.csv")),
    ],
)
def test_external_names(uri: str, expected: tuple[str, str]) -> None:
    assert external_name(uri) == expected


def test_namespace_and_an_earlier_block(chains: Chains, tmp_path: Path) -> None:
    first_data = runs_of(chains.summary)[0][1]
    events = export(
        chains.summary,
        tmp_path / "early.jsonl",
        at=str(first_data.block.sequence_number),
        namespace="warehouse",
    )
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert {e["job"]["namespace"] for e in events} == {"warehouse"}
    assert events[1]["run"]["facets"]["odf_chain_run"]["runId"] == "sum-1"


def test_an_unreachable_input_keeps_its_name_and_version(chains: Chains, tmp_path: Path) -> None:
    (tmp_path / "users").rename(tmp_path / "moved")
    events = export(chains.summary, tmp_path / "summary.jsonl")
    [users_in] = events[1]["inputs"]
    assert users_in["name"] == chains.users_id
    assert set(users_in["facets"]) == {"version"}


def test_two_exports_are_byte_identical(chains: Chains, tmp_path: Path) -> None:
    write_openlineage_file(chains.summary, tmp_path / "a.jsonl")
    write_openlineage_file(Dataset.open(chains.summary.path), tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_a_dataset_without_lineage_has_no_events(tmp_path: Path) -> None:
    empty = Dataset.create(tmp_path / "empty")
    assert write_openlineage_file(empty, tmp_path / "empty.jsonl") == 0
    assert (tmp_path / "empty.jsonl").read_text() == ""


# -- OpenLineage's vocabulary ---------------------------------------------------------------------

# The column lineage facet's vocabulary, as OpenLineage's documentation lists it
# (website/docs/spec/facets/dataset-facets/column_lineage_facet.md, "Transformation Type") and
# openlineage-spark's TransformationInfo pairs it: each subtype belongs to one type.
VOCABULARY = {
    "DIRECT": {"IDENTITY", "TRANSFORMATION", "AGGREGATION"},
    "INDIRECT": {"JOIN", "GROUP_BY", "FILTER", "SORT", "WINDOW", "CONDITIONAL"},
}


def vocabulary_problems(events: list[dict[str, Any]]) -> list[str]:
    """Every transformation of every event outside OpenLineage's vocabulary: a type that is not
    DIRECT or INDIRECT, a subtype not paired with its type, a masking that is not a boolean."""
    problems = []
    for event in events:
        for dataset in event["outputs"]:
            facet = dataset["facets"].get("columnLineage", {"fields": {}})
            for target, entry in facet["fields"].items():
                for source in entry["inputFields"]:
                    for t in source["transformations"]:
                        where = f"{target} <- {source['field']}: {t}"
                        if t["type"] not in VOCABULARY:
                            problems.append(f"type: {where}")
                        elif "subtype" in t and t["subtype"] not in VOCABULARY[t["type"]]:
                            problems.append(f"subtype: {where}")
                        if not isinstance(t.get("masking"), bool):
                            problems.append(f"masking: {where}")
    return problems


def test_every_transformation_is_in_openlineages_vocabulary(chains: Chains, tmp_path: Path) -> None:
    for name, dataset in (("users", chains.users), ("summary", chains.summary)):
        events = export(dataset, tmp_path / f"{name}.jsonl")
        assert any(lineage_of(e) for e in events if e["eventType"] == "COMPLETE")
        assert vocabulary_problems(events) == []


def test_an_older_chains_pairs_are_exported_in_openlineages_vocabulary(tmp_path: Path) -> None:
    """A chain written before holds DIRECT CONDITIONAL (the Spark capture's value chosen among
    candidates) and an INDIRECT step with a direct subtype (a recorder's type= override): the
    export writes DIRECT TRANSFORMATION for the first, INDIRECT without a subtype for the
    second, and the bytes of the chain keep what was recorded."""
    legacy = build_legacy_chain(tmp_path / "legacy")
    events = export(legacy.dataset, tmp_path / "legacy.jsonl")
    complete = events[1]
    assert vocabulary_problems(events) == []
    facet = complete["outputs"][0]["facets"]["columnLineage"]["fields"]
    src = ("file", "/in/legacy.csv")
    assert {
        (f, s["field"], t["type"], t.get("subtype"), t["masking"])
        for f, entry in facet.items()
        for s in entry["inputFields"]
        for t in s["transformations"]
        if (s["namespace"], s["name"]) == src
    } == {
        ("x", "a", "DIRECT", "TRANSFORMATION", False),
        ("x", "b", "DIRECT", "TRANSFORMATION", False),
        ("y", "c", "INDIRECT", None, False),
        ("z", "d", "DIRECT", "AGGREGATION", True),
    }
    recorded = [
        e.block.event for e in legacy.dataset.blocks() if e.block.event_name == "AddFieldLineage"
    ]
    assert [op.transformation for op in recorded[0].operations] == list(LEGACY_STEPS)


# -- --no-indirect --------------------------------------------------------------------------------


def test_indirect_inputs_are_under_the_fields_by_default(chains: Chains, tmp_path: Path) -> None:
    events = export(chains.summary, tmp_path / "summary.jsonl")
    assert [dataset_level(e) for e in events[1::2]] == [{}, {}]
    assert any(t[0] == "INDIRECT" for e in events[1::2] for _, _, t in _all(e))


def test_no_indirect_moves_indirect_inputs_to_the_dataset_level_list(
    chains: Chains, tmp_path: Path
) -> None:
    events = export(chains.summary, tmp_path / "summary.jsonl", indirect=False)
    first, second = events[1], events[3]
    users = ("odf", chains.users_id)
    regions = ("file", "/ref/regions.csv")
    direct = ("DIRECT", "IDENTITY", False)
    assert lineage_of(first) == {
        "count(1)": {(*users, "id"): [("DIRECT", "AGGREGATION", False)]},
        "last": {(*users, "last"): [direct]},
        "last_hash": {(*users, "last"): [("DIRECT", "TRANSFORMATION", True)]},
        "score": {
            (*users, "id"): [("DIRECT", "TRANSFORMATION", False)],
            (*users, "last"): [("DIRECT", "TRANSFORMATION", False)],
        },
    }
    # the group-by on last decides which rows exist: listed once for the whole dataset
    assert dataset_level(first) == {(*users, "last"): [("INDIRECT", "GROUP_BY", False)]}
    assert lineage_of(second) == {
        "count(1)": {(*users, "id"): [("DIRECT", "AGGREGATION", False)]},
        "last": {(*users, "last"): [direct]},
        "region": {(*regions, "region"): [direct]},
    }
    assert dataset_level(second) == {  # sorted by namespace, name, field
        (*regions, "city"): [("INDIRECT", "JOIN", False)],
        (*users, "address.city"): [("INDIRECT", "JOIN", False)],
        (*users, "last"): [("INDIRECT", "GROUP_BY", False)],
    }
    facet = first["outputs"][0]["facets"]["columnLineage"]
    assert [t["description"] for t in facet["dataset"][0]["transformations"]] == [
        "via read -> group"
    ]
    assert vocabulary_problems(events) == []


def test_no_indirect_loses_nothing(chains: Chains, tmp_path: Path) -> None:
    """Every (input field, transformation) of the default export is in the --no-indirect one:
    a DIRECT one under the same field, an INDIRECT one in the dataset-level list; the rest of
    the events is the same."""
    for name, dataset in (("users", chains.users), ("summary", chains.summary)):
        default = export(dataset, tmp_path / f"{name}.jsonl")
        split = export(dataset, tmp_path / f"{name}-split.jsonl", indirect=False)
        assert len(default) == len(split)
        for full, part in zip(default, split, strict=True):
            if full["eventType"] == "START":
                assert full == part
                continue
            kept = {
                (target, source, t)
                for target, sources in lineage_of(full).items()
                for source, steps in sources.items()
                for t in steps
                if t[0] == "DIRECT"
            }
            moved = {(source, t) for (_, source, t) in _all(full) if t[0] == "INDIRECT"}
            assert set(_all(part)) == kept
            assert {(s, t) for s, steps in dataset_level(part).items() for t in steps} == moved
            facets = [d["facets"] for d in full["outputs"]]
            for facet in facets:
                facet.pop("columnLineage")
            assert facets == [
                {k: v for k, v in d["facets"].items() if k != "columnLineage"}
                for d in part["outputs"]
            ]
            assert full["inputs"] == part["inputs"] and full["run"] == part["run"]


def _all(event: dict[str, Any]) -> list[tuple[str, tuple[str, str, str], tuple]]:
    return [
        (target, source, (t[0], t[1], t[2]))
        for target, sources in lineage_of(event).items()
        for source, steps in sources.items()
        for t in steps
    ]


def test_no_indirect_leaves_out_a_field_fed_by_indirect_inputs_only(tmp_path: Path) -> None:
    legacy = build_legacy_chain(tmp_path / "legacy")
    [_, complete] = export(legacy.dataset, tmp_path / "legacy.jsonl", indirect=False)
    assert set(lineage_of(complete)) == {"x", "z"}  # y's one input, c, is INDIRECT
    # an INDIRECT step recorded with a direct subtype: written without one, as under a field
    assert dataset_level(complete) == {("file", "/in/legacy.csv", "c"): [("INDIRECT", None, False)]}
    assert (
        "subtype"
        not in complete["outputs"][0]["facets"]["columnLineage"]["dataset"][0]["transformations"][0]
    )


# -- datasetVersion -------------------------------------------------------------------------------


def test_versions_are_the_pinned_blocks_and_the_block_each_run_ended_at(
    chains: Chains, tmp_path: Path
) -> None:
    """An input that is an odf_chain dataset: the block its run pinned; the output: the block
    holding the run's last record, the dataset's head once that run was written (a later run
    moves the head on, not the version of an earlier run)."""
    events = export(chains.summary, tmp_path / "summary.jsonl")
    blocks = chains.summary.blocks()
    ended = [data for _, data in runs_of(chains.summary)]
    assert ended[-1].hash == chains.summary.state.head
    for complete, pinned, data in zip(
        events[1::2], [chains.users_first, chains.users_second], ended, strict=True
    ):
        [users_in] = [d for d in complete["inputs"] if d["namespace"] == "odf"]
        assert users_in["facets"]["version"] == {
            "_producer": PRODUCER,
            "_schemaURL": VERSION_URL,
            "datasetVersion": str(pinned),
        }
        [out] = complete["outputs"]
        assert out["facets"]["version"]["datasetVersion"] == str(data.hash)
        # exported as of that block, the run's version is the head there
        at = data.block.sequence_number
        assert blocks[at].hash == data.hash
        again = export(chains.summary, tmp_path / f"at{at}.jsonl", at=str(at))
        assert again[-1]["outputs"][0]["facets"]["version"] == out["facets"]["version"]
    assert [e["outputs"][0]["facets"] for e in events[::2]] == [{}, {}]  # START: names only


# A slice begins at the first row group (1 Mi rows) at or past the target: one row more than a
# row group, with a one-byte target, makes two slices.
SPREAD_ROWS = (1 << 20) + 1


def build_spread_run(root: Path, chains: Chains) -> tuple[Dataset, list[Any]]:
    """A dataset whose one lineage run (reading users) was written as two AddData blocks;
    return it and those two blocks."""
    dataset = Dataset.create(root)
    users = chains.users.state
    rec = LineageRecorder("copy", run_id="spread-1")
    u = rec.dataset_input(
        "users", users.dataset_id, users.head, uri=str(chains.users.path), fields=users.field_paths
    )
    rec.write("write", {"id": rec.read("read", u, ["id"])["id"]})
    table = pa.table({"id": pa.array(range(SPREAD_ROWS), pa.int64()).cast(pa.string())})
    written = dataset.write(table, lineage=rec, target_slice_bytes=1)
    return dataset, [e for e in written if isinstance(e.block.event, AddData)]


def test_a_run_written_in_several_blocks_has_the_version_of_the_last(
    chains: Chains, tmp_path: Path
) -> None:
    dataset, (first, last) = build_spread_run(tmp_path / "spread", chains)
    assert dataset.state.head == last.hash
    [_, complete] = export(dataset, tmp_path / "spread.jsonl")
    [users_in] = complete["inputs"]
    assert users_in["facets"]["version"]["datasetVersion"] == str(chains.users_second)
    [out] = complete["outputs"]
    assert out["facets"]["version"]["datasetVersion"] == str(last.hash)
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == SPREAD_ROWS
    assert out["outputFacets"]["outputStatistics"]["fileCount"] == 2
    # as of the first of them the run is not done: no version, no statistics yet
    [_, early] = export(dataset, tmp_path / "early.jsonl", at=str(first.block.sequence_number))
    assert "version" not in early["outputs"][0]["facets"]
    assert early["outputs"][0]["outputFacets"] == {}
    assert early["inputs"] == complete["inputs"]  # the pin is known from the start
