"""DataHub export: the metadata file of hand-built chains, read back with DataHub's own classes
and checked by ``datahub check metadata-file``; URNs and fine-grained lineages written by hand
from the lineage each chain recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from odf_chain import Dataset
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    FieldOperation,
    InputField,
    LineageInput,
    LineageRun,
    SetInfo,
    Transformation,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.export.datahub import write_datahub_file
from odf_chain.format.multihash import Multihash
from odf_chain.lineage import LineageRecorder
from odf_chain.state import lineage_of

datahub_mcp = pytest.importorskip("datahub.emitter.mcp")
schema_classes = pytest.importorskip("datahub.metadata.schema_classes")
urns = pytest.importorskip("datahub.metadata.urns")

S = TransformationSubtype
CSV_URI = "file:///data/people(2024).csv"
CSV_HASH = "f1e20" + "ab" * 32
REGIONS_URI = "file:///ref/regions.csv"
UUID_RUN = "3F2504E0-4F89-41D3-9A0C-0305E82C3301"  # a UUID, upper case as some jobs write it


def _csv_paths(*names: str) -> list[str]:
    return [f"[version=2.0].[type=string].{name}" for name in names]


@dataclass(frozen=True)
class Chains:
    """users: loaded from a CSV file (email masked, ssn dropped), then from a second file with a
    nested address. summary: run sum-1 reads users at its first write (``users_first``), run
    sum-2 at its second (``users_second``) plus a regions file."""

    users: Dataset
    summary: Dataset
    users_first: Multihash
    users_second: Multihash
    users_id: str  # did:odf:... text
    summary_id: str


def build_chains(root: Path) -> Chains:
    users = Dataset.create(root / "users")
    users.append(SetInfo(description="people we know", keywords=("people", "pii")))
    rec = LineageRecorder("load users", run_id="load-1")
    csv = rec.external_input(
        "people_csv",
        CSV_URI,
        content_hash=CSV_HASH,
        fields=_csv_paths("id", "email", "last", "ssn"),
    )
    read = rec.read("read csv", csv, ["id", "email", "last", "ssn"])
    hashed = rec.transform(
        "hash email", [read["email"]], ["email_hash"], masking=True, description="sha2(email)"
    )
    rec.drop("drop ssn", [read["ssn"]])
    rec.write("write", {"id": read["id"], "email_hash": hashed["email_hash"], "last": read["last"]})
    users.write(
        pa.table({"id": ["1", "2"], "email_hash": ["h1", "h2"], "last": ["Lovelace", "Turing"]}),
        lineage=rec,
    )
    users_first = users.state.head

    summary = Dataset.create(root / "summary")
    state = users.state
    rec = LineageRecorder("summarise", run_id="sum-1")
    u = rec.dataset_input(
        "users", state.dataset_id, state.head, uri=str(users.path), fields=state.field_paths
    )
    r = rec.read("read", u, ["id", "last", "email_hash"])
    rec.transform("count", [r["id"]], ["count(1)"], subtype=S.AGGREGATION, writes=True)
    rec.transform("group", [r["last"]], ["count(1)", "last"], subtype=S.GROUP_BY, writes=True)
    rec.transform("md5", [r["last"]], ["last_hash"], masking=True, writes=True)
    rec.transform("score udf", [r["id"], r["last"]], ["score"], opaque=True, writes=True)
    rec.drop("drop email", [r["email_hash"]])
    rec.write("write", {"last": r["last"]})
    summary.write(
        pa.table(
            {
                "last": ["Lovelace", "Turing"],
                "count(1)": [1, 1],
                "last_hash": ["m1", "m2"],
                "score": [0.5, 0.7],
            }
        ),
        lineage=rec,
    )

    address = pa.struct([("city", pa.string())])
    rec = LineageRecorder("load users", run_id=UUID_RUN)
    csv = rec.external_input(
        "people_csv", "s3://bucket/people/2024-02.csv", fields=_csv_paths("id", "last", "city")
    )
    read = rec.read("read csv", csv, ["id", "last", "city"])
    rec.write("write", {"id": read["id"], "last": read["last"], "address.city": read["city"]})
    users.write(
        pa.table(
            {
                "id": ["3"],
                "last": ["Hopper"],
                "address": pa.array([{"city": "Arlington"}], type=address),
            }
        ),
        lineage=rec,
        evolve=True,
    )
    users_second = users.state.head

    state = users.state
    rec = LineageRecorder("summarise", run_id="sum-2")
    u = rec.dataset_input(
        "users", state.dataset_id, state.head, uri=str(users.path), fields=state.field_paths
    )
    regions = rec.external_input("regions", REGIONS_URI, fields=_csv_paths("city", "region"))
    r = rec.read("read users", u, ["id", "last", "address.city"])
    rr = rec.read("read regions", regions, ["city", "region"])
    rec.transform("count", [r["id"]], ["count(1)"], subtype=S.AGGREGATION, writes=True)
    rec.transform("group", [r["last"]], ["count(1)", "last"], subtype=S.GROUP_BY, writes=True)
    rec.transform(
        "join regions", [r["address.city"], rr["city"]], ["region"], subtype=S.JOIN, writes=True
    )
    rec.write("write", {"last": r["last"], "region": rr["region"]})
    summary.write(
        pa.table({"last": ["Hopper"], "count(1)": [1], "region": ["Virginia"]}),
        lineage=rec,
        evolve=True,
    )
    ids = [d.state.dataset_id.to_did() for d in (users, summary)]
    return Chains(users, summary, users_first, users_second, *ids)


# Steps an older chain may hold: DIRECT CONDITIONAL (the Spark capture's chosen value, before it
# followed openlineage-spark) and INDIRECT IDENTITY (a recorder's type= override); with a
# DIRECT CONDITIONAL masked step before an aggregation.
LEGACY_STEPS = (
    Transformation(TransformationType.DIRECT, TransformationSubtype.CONDITIONAL),
    Transformation(TransformationType.INDIRECT, TransformationSubtype.IDENTITY),
    Transformation(TransformationType.DIRECT, TransformationSubtype.CONDITIONAL, masking=True),
    Transformation(TransformationType.DIRECT, TransformationSubtype.AGGREGATION),
)


@dataclass(frozen=True)
class LegacyChain:
    dataset: Dataset
    did: str


def build_legacy_chain(root: Path) -> LegacyChain:
    """A dataset with columns x, y, z and one lineage event appended as is (no recorder, which
    refuses these pairs now), reading a, b, c, d of ``file:///in/legacy.csv``."""
    dataset = Dataset.create(root)
    dataset.write(pa.table({"x": [1], "y": [2], "z": [3]}))
    path = {name: f"[version=2.0].[type=long].{name}" for name in "xyz"}
    pick, odd, hide, total = LEGACY_STEPS
    dataset.append(
        AddFieldLineage(
            LineageRun("legacy", "old-1", datetime(2025, 1, 2, tzinfo=UTC)),
            (LineageInput("src", uri="file:///in/legacy.csv"),),
            (
                FieldOperation(
                    "pick", (InputField("src", "a"), InputField("src", "b")), (path["x"],), pick
                ),
                FieldOperation("odd", (InputField("src", "c"),), (path["y"],), odd),
                FieldOperation("hide", (InputField("src", "d"),), ("h",), hide, writes=False),
                FieldOperation("total", (InputField("hide", "h"),), (path["z"],), total),
            ),
        )
    )
    return LegacyChain(dataset, dataset.state.dataset_id.to_did())


def test_an_older_chains_pairs_get_openlineages_names(tmp_path: Path) -> None:
    """The same names as the OpenLineage export: DIRECT:TRANSFORMATION for an older DIRECT
    CONDITIONAL, INDIRECT alone for an INDIRECT step with a direct subtype."""
    legacy = build_legacy_chain(tmp_path / "legacy")
    mcps = export(legacy.dataset, tmp_path / "legacy.json")
    lineage = aspects(mcps)[(odf_urn(legacy.did), "upstreamLineage")]
    csv = "urn:li:dataset:(urn:li:dataPlatform:file,file:///in/legacy.csv,PROD)"
    assert sorted(fine_grained(lineage)) == [
        (
            field_urn(odf_urn(legacy.did), long("x")),
            "DIRECT:TRANSFORMATION",
            (field_urn(csv, "a"), field_urn(csv, "b")),
        ),
        (field_urn(odf_urn(legacy.did), long("y")), "INDIRECT", (field_urn(csv, "c"),)),
        (
            field_urn(odf_urn(legacy.did), long("z")),
            "DIRECT:AGGREGATION,MASKED",
            (field_urn(csv, "d"),),
        ),
    ]


@pytest.fixture
def chains(tmp_path: Path) -> Chains:
    return build_chains(tmp_path)


# -- helpers ------------------------------------------------------------------------------------


def odf_urn(did: str) -> str:
    return f"urn:li:dataset:(urn:li:dataPlatform:odf,{did},PROD)"


def field_urn(dataset: str, path: str) -> str:
    return f"urn:li:schemaField:({dataset},{path})"


def long(name: str) -> str:
    return f"[version=2.0].[type=long].{name}"


def string(name: str) -> str:
    return f"[version=2.0].[type=string].{name}"


SYSTEM_PATHS = [
    "[version=2.0].[type=long].offset",
    "[version=2.0].[type=int].op",
    "[version=2.0].[type=int].system_time",
    "[version=2.0].[type=int].event_time",
]
CITY = "[version=2.0].[type=struct].[type=struct].address.[type=string].city"


def export(dataset: Dataset, out: Path, **kwargs: Any) -> list[dict[str, Any]]:
    count = write_datahub_file(dataset, out, **kwargs)
    mcps = json.loads(out.read_text())
    assert count == len(mcps)
    return mcps


def aspects(mcps: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["entityUrn"], m["aspectName"]): m["aspect"]["json"] for m in mcps}


def fine_grained(aspect: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    out = []
    for entry in aspect["fineGrainedLineages"]:
        assert entry["upstreamType"] == "FIELD_SET"
        assert entry["downstreamType"] == "FIELD"
        assert len(entry["downstreams"]) == 1
        out.append(
            (entry["downstreams"][0], entry["transformOperation"], tuple(entry["upstreams"]))
        )
    return out


def datahub_check(path: Path) -> subprocess.CompletedProcess[str]:
    """DataHub's own offline check of a metadata file: its file source parses every MCP with
    the generated classes; no GMS, no network (telemetry off)."""
    cli = Path(sys.executable).with_name("datahub")
    env = {**os.environ, "DATAHUB_TELEMETRY_ENABLED": "false"}
    return subprocess.run(
        [str(cli), "check", "metadata-file", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def summary_fine_grained(chains: Chains) -> list[tuple[str, str, tuple[str, ...]]]:
    """The summary's fine-grained lineages, written by hand: both runs, grouped by (written
    field, transformation), sorted."""
    users, summary = odf_urn(chains.users_id), odf_urn(chains.summary_id)
    regions = "urn:li:dataset:(urn:li:dataPlatform:file,file:///ref/regions.csv,PROD)"
    count_urn = field_urn(summary, "[version=2.0].[type=long].count%281%29")
    return sorted(
        [
            (count_urn, "DIRECT:AGGREGATION", (field_urn(users, string("id")),)),
            (count_urn, "INDIRECT:GROUP_BY", (field_urn(users, string("last")),)),
            (
                field_urn(summary, string("last")),
                "DIRECT:IDENTITY",
                (field_urn(users, string("last")),),
            ),
            (
                field_urn(summary, string("last")),
                "INDIRECT:GROUP_BY",
                (field_urn(users, string("last")),),
            ),
            (
                field_urn(summary, string("last_hash")),
                "DIRECT:TRANSFORMATION,MASKED",
                (field_urn(users, string("last")),),
            ),
            (
                field_urn(summary, "[version=2.0].[type=double].score"),
                "DIRECT:TRANSFORMATION,OPAQUE",
                (field_urn(users, string("id")), field_urn(users, string("last"))),
            ),
            (
                field_urn(summary, string("region")),
                "DIRECT:IDENTITY",
                (field_urn(regions, string("region")),),
            ),
            (
                field_urn(summary, string("region")),
                "INDIRECT:JOIN",
                (field_urn(regions, string("city")), field_urn(users, CITY)),
            ),
        ]
    )


# -- tests ----------------------------------------------------------------------------------------


def test_summary_fine_grained_lineage_is_what_the_runs_recorded(
    chains: Chains, tmp_path: Path
) -> None:
    mcps = export(chains.summary, tmp_path / "summary.json")
    found = aspects(mcps)
    users, summary = odf_urn(chains.users_id), odf_urn(chains.summary_id)
    regions = "urn:li:dataset:(urn:li:dataPlatform:file,file:///ref/regions.csv,PROD)"

    lineage = found[(summary, "upstreamLineage")]
    expected = summary_fine_grained(chains)
    assert fine_grained(lineage) == expected

    upstreams = lineage["upstreams"]
    assert [u["dataset"] for u in upstreams] == [regions, users]  # sorted by URN
    assert {u["type"] for u in upstreams} == {"TRANSFORMED"}
    # the newest pin (sum-2 read users at its second write)
    assert upstreams[1]["properties"] == {
        "odf.input": "users",
        "odf.pinned_block": str(chains.users_second),
    }

    # file order: this dataset's aspects, then each odf_chain input's schema
    assert [(m["entityUrn"], m["aspectName"]) for m in mcps] == [
        (summary, "datasetProperties"),
        (summary, "schemaMetadata"),
        (summary, "upstreamLineage"),
        (users, "schemaMetadata"),
    ]
    assert all(m["entityType"] == "dataset" and m["changeType"] == "UPSERT" for m in mcps)


def test_schemas_list_the_v2_paths_datahub_shows(chains: Chains, tmp_path: Path) -> None:
    found = aspects(export(chains.summary, tmp_path / "summary.json"))
    users, summary = odf_urn(chains.users_id), odf_urn(chains.summary_id)

    own = found[(summary, "schemaMetadata")]
    assert [f["fieldPath"] for f in own["fields"]] == [
        *SYSTEM_PATHS,
        string("last"),
        long("count(1)"),  # the schema keeps the path as it is; URNs encode it
        string("last_hash"),
        "[version=2.0].[type=double].score",
        string("region"),
    ]
    assert own["schemaName"] == "summary"
    assert own["platform"] == "urn:li:dataPlatform:odf"
    assert own["version"] == 0
    summary_blocks = chains.summary.blocks()
    schema_blocks = [b for b in summary_blocks if type(b.block.event).__name__ == "SetDataSchema"]
    assert own["hash"] == str(schema_blocks[-1].hash)
    raw = own["platformSchema"]["com.linkedin.schema.OtherSchema"]["rawSchema"]
    assert "count(1): int64" in raw and "region: string" in raw

    # users as of the newest pin: the nested address is there, so the JOIN's URN resolves
    theirs = found[(users, "schemaMetadata")]
    assert [f["fieldPath"] for f in theirs["fields"]] == [
        *SYSTEM_PATHS,
        string("id"),
        string("email_hash"),
        string("last"),
        "[version=2.0].[type=struct].[type=struct].address",
        CITY,
    ]
    by_path = {f["fieldPath"]: f for f in theirs["fields"]}
    assert by_path["[version=2.0].[type=struct].[type=struct].address"]["nativeDataType"] == (
        "struct<city:string>"
    )
    assert by_path[SYSTEM_PATHS[0]]["nullable"] is False
    assert by_path[CITY]["nullable"] is True


def test_datahub_classes_read_the_file_back_unchanged(chains: Chains, tmp_path: Path) -> None:
    mcps = export(chains.summary, tmp_path / "summary.json")
    wrapper = datahub_mcp.MetadataChangeProposalWrapper
    kinds = []
    for obj in mcps:
        parsed = wrapper.from_obj(json.loads(json.dumps(obj)))
        assert isinstance(parsed, wrapper), obj["aspectName"]
        assert parsed.validate()
        kinds.append(type(parsed.aspect).__name__)
        # the canonical form DataHub writes itself: nothing added, nothing lost
        assert parsed.to_obj(simplified_structure=True) == obj
    assert kinds == [
        "DatasetPropertiesClass",
        "SchemaMetadataClass",
        "UpstreamLineageClass",
        "SchemaMetadataClass",
    ]
    schema = wrapper.from_obj(json.loads(json.dumps(mcps[1]))).aspect
    types = {f.fieldPath: type(f.type.type).__name__ for f in schema.fields}
    assert types == {
        SYSTEM_PATHS[0]: "NumberTypeClass",
        SYSTEM_PATHS[1]: "NumberTypeClass",
        SYSTEM_PATHS[2]: "TimeTypeClass",
        SYSTEM_PATHS[3]: "TimeTypeClass",
        string("last"): "StringTypeClass",
        long("count(1)"): "NumberTypeClass",
        string("last_hash"): "StringTypeClass",
        "[version=2.0].[type=double].score": "NumberTypeClass",
        string("region"): "StringTypeClass",
    }
    users_schema = wrapper.from_obj(json.loads(json.dumps(mcps[3]))).aspect
    address = next(f for f in users_schema.fields if f.fieldPath.endswith("].address"))
    assert isinstance(address.type.type, schema_classes.RecordTypeClass)


def test_urns_parse_with_datahub_urn_classes(chains: Chains, tmp_path: Path) -> None:
    mcps = export(chains.summary, tmp_path / "summary.json")
    lineage = aspects(mcps)[(odf_urn(chains.summary_id), "upstreamLineage")]
    for entry in lineage["fineGrainedLineages"]:
        for text in [*entry["upstreams"], *entry["downstreams"]]:
            parsed = urns.SchemaFieldUrn.from_string(text)
            # DataHub's own constructor encodes the path the same way
            decoded = parsed.field_path.replace("%28", "(").replace("%29", ")")
            assert urns.SchemaFieldUrn(parsed.parent, decoded).urn() == text
            urns.DatasetUrn.from_string(parsed.parent)
    for upstream in lineage["upstreams"]:
        urns.DatasetUrn.from_string(upstream["dataset"])


def test_every_field_urn_names_a_path_of_an_exported_schema(chains: Chains, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    mcps = export(chains.summary, out)
    found = aspects(mcps)
    schemas = {
        urn: {f["fieldPath"] for f in aspect["fields"]}
        for (urn, name), aspect in found.items()
        if name == "schemaMetadata"
    }
    summary = odf_urn(chains.summary_id)
    lineage = found[(summary, "upstreamLineage")]
    for entry in lineage["fineGrainedLineages"]:
        for text in entry["downstreams"]:
            parsed = urns.SchemaFieldUrn.from_string(text)
            assert parsed.parent == summary
            assert parsed.field_path.replace("%28", "(").replace("%29", ")") in schemas[summary]
        for text in entry["upstreams"]:
            parsed = urns.SchemaFieldUrn.from_string(text)
            if parsed.parent.startswith("urn:li:dataset:(urn:li:dataPlatform:odf,"):
                assert parsed.field_path in schemas[parsed.parent]
    text = out.read_text()
    # what a wrong export would write: plain names, the unencoded path, v1 paths upstream
    assert field_urn(summary, "count(1)") not in text
    assert field_urn(summary, long("count(1)")) not in text
    assert field_urn(summary, "last") not in text
    assert field_urn(odf_urn(chains.users_id), "address.city") not in text


def test_datahub_check_metadata_file_accepts_the_exports(chains: Chains, tmp_path: Path) -> None:
    for dataset, name in [(chains.summary, "summary"), (chains.users, "users")]:
        out = tmp_path / f"{name}.json"
        count = write_datahub_file(dataset, out)
        result = datahub_check(out)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{count} MCEs found - all valid" in result.stdout


def test_datahub_check_rejects_a_broken_file(chains: Chains, tmp_path: Path) -> None:
    """The check can fail: a schemaMetadata without its required hash is refused."""
    out = tmp_path / "summary.json"
    mcps = export(chains.summary, out)
    del mcps[1]["aspect"]["json"]["hash"]
    out.write_text(json.dumps(mcps))
    result = datahub_check(out)
    assert result.returncode != 0
    assert "hash" in result.stdout + result.stderr


def test_users_export_names_its_file_inputs_on_the_file_platform(
    chains: Chains, tmp_path: Path
) -> None:
    mcps = export(chains.users, tmp_path / "users.json")
    users = odf_urn(chains.users_id)
    people = "urn:li:dataset:(urn:li:dataPlatform:file,file:///data/people%282024%29.csv,PROD)"
    s3 = "urn:li:dataset:(urn:li:dataPlatform:file,s3://bucket/people/2024-02.csv,PROD)"
    assert [(m["entityUrn"], m["aspectName"]) for m in mcps] == [
        (users, "datasetProperties"),
        (users, "schemaMetadata"),
        (users, "upstreamLineage"),
    ]  # no schema for files: nothing is known of them but the fields read
    found = aspects(mcps)
    lineage = found[(users, "upstreamLineage")]
    assert [u["dataset"] for u in lineage["upstreams"]] == [people, s3]
    assert lineage["upstreams"][0]["properties"] == {
        "odf.input": "people_csv",
        "odf.content_hash": CSV_HASH,
    }
    assert fine_grained(lineage) == sorted(
        [
            (field_urn(users, CITY), "DIRECT:IDENTITY", (field_urn(s3, string("city")),)),
            (
                field_urn(users, string("email_hash")),
                "DIRECT:TRANSFORMATION,MASKED",
                (field_urn(people, string("email")),),
            ),
            (
                field_urn(users, string("id")),
                "DIRECT:IDENTITY",
                (field_urn(people, string("id")), field_urn(s3, string("id"))),
            ),
            (
                field_urn(users, string("last")),
                "DIRECT:IDENTITY",
                (field_urn(people, string("last")), field_urn(s3, string("last"))),
            ),
        ]
    )  # the dropped ssn appears nowhere
    assert "ssn" not in json.dumps(lineage)

    props = found[(users, "datasetProperties")]
    assert props == {
        "name": "users",
        "description": "people we know",
        "tags": ["people", "pii"],
        "customProperties": {
            "odf.dataset_id": chains.users_id,
            "odf.location": str(chains.users.path),
            "odf.head": str(chains.users_second),
            # Seed, SetInfo, then per write SetDataSchema + AddData (carrying its lineage)
            "odf.blocks": "6",
            "odf.records": "3",
        },
    }


def test_export_at_an_earlier_block_sees_the_first_run_and_pin_only(
    chains: Chains, tmp_path: Path
) -> None:
    blocks = chains.summary.blocks()
    first_data = next(b for b in blocks if isinstance(b.block.event, AddData))
    mcps = export(chains.summary, tmp_path / "early.json", at=str(first_data.block.sequence_number))
    found = aspects(mcps)
    users, summary = odf_urn(chains.users_id), odf_urn(chains.summary_id)
    lineage = found[(summary, "upstreamLineage")]
    assert {op for _, op, _ in fine_grained(lineage)} == {
        "DIRECT:AGGREGATION",
        "INDIRECT:GROUP_BY",
        "DIRECT:IDENTITY",
        "DIRECT:TRANSFORMATION,MASKED",
        "DIRECT:TRANSFORMATION,OPAQUE",
    }  # no JOIN: run sum-2 came later
    assert [u["dataset"] for u in lineage["upstreams"]] == [users]
    assert lineage["upstreams"][0]["properties"]["odf.pinned_block"] == str(chains.users_first)
    # users as of the first pin: no address yet
    assert [f["fieldPath"] for f in found[(users, "schemaMetadata")]["fields"]] == [
        *SYSTEM_PATHS,
        string("id"),
        string("email_hash"),
        string("last"),
    ]
    assert [f["fieldPath"] for f in found[(summary, "schemaMetadata")]["fields"]][-1] == (
        "[version=2.0].[type=double].score"
    )
    assert found[(summary, "datasetProperties")]["customProperties"]["odf.head"] == str(
        first_data.hash
    )


def test_two_exports_are_byte_identical(chains: Chains, tmp_path: Path) -> None:
    write_datahub_file(chains.summary, tmp_path / "a.json")
    write_datahub_file(Dataset.open(chains.summary.path), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_platform_and_env_name_the_datasets(chains: Chains, tmp_path: Path) -> None:
    mcps = export(chains.summary, tmp_path / "s.json", platform="kamu", env="dev")
    summary = f"urn:li:dataset:(urn:li:dataPlatform:kamu,{chains.summary_id},DEV)"
    assert {m["entityUrn"] for m in mcps} == {
        summary,
        f"urn:li:dataset:(urn:li:dataPlatform:kamu,{chains.users_id},DEV)",
    }
    assert aspects(mcps)[(summary, "schemaMetadata")]["platform"] == "urn:li:dataPlatform:kamu"


def test_an_unreachable_input_is_named_not_described(chains: Chains, tmp_path: Path) -> None:
    (tmp_path / "users").rename(tmp_path / "moved")
    out = tmp_path / "summary.json"
    mcps = export(chains.summary, out)
    users, summary = odf_urn(chains.users_id), odf_urn(chains.summary_id)
    found = aspects(mcps)
    assert (users, "schemaMetadata") not in found
    props = found[(summary, "datasetProperties")]["customProperties"]
    assert props["odf.unreachable_inputs"] == chains.users_id
    lineage = found[(summary, "upstreamLineage")]
    assert users in [u["dataset"] for u in lineage["upstreams"]]
    assert field_urn(users, CITY) in json.dumps(lineage)
    assert datahub_check(out).returncode == 0


def test_a_dataset_without_schema_or_lineage_has_properties_only(tmp_path: Path) -> None:
    empty = Dataset.create(tmp_path / "empty")
    mcps = export(empty, tmp_path / "empty.json")
    assert [m["aspectName"] for m in mcps] == ["datasetProperties"]
    did = empty.state.dataset_id.to_did()
    assert mcps[0]["entityUrn"] == odf_urn(did)
    assert mcps[0]["aspect"]["json"]["customProperties"]["odf.blocks"] == "1"


def test_lineage_blocks_are_where_the_export_reads_them(chains: Chains) -> None:
    """Sanity of the fixture itself: two lineage runs in each chain, each carried by the AddData
    of its data (no event an ODF reader cannot decode)."""
    for dataset in (chains.users, chains.summary):
        events = [b.block.event for b in dataset.blocks()]
        carrying = [e for e in events if lineage_of(e) is not None]
        assert len(carrying) == 2
        assert all(isinstance(e, AddData) and e.new_data is not None for e in carrying)
        assert not any(isinstance(e, AddFieldLineage) for e in events)


def test_an_input_location_holding_another_dataset_is_not_described(
    chains: Chains, tmp_path: Path
) -> None:
    (tmp_path / "users").rename(tmp_path / "moved")
    impostor = Dataset.create(tmp_path / "users")
    impostor.write(pa.table({"id": ["x"]}))
    found = aspects(export(chains.summary, tmp_path / "summary.json"))
    summary = odf_urn(chains.summary_id)
    assert {urn for urn, _ in found} == {summary}  # neither users nor the impostor described
    props = found[(summary, "datasetProperties")]["customProperties"]
    assert props["odf.unreachable_inputs"] == chains.users_id


def test_an_avro_ingested_input_keeps_its_avro_paths(tmp_path: Path) -> None:
    """Data ingested from Avro shows DataHub's Avro paths (record name token); the lineage of a
    dataset derived from it points at exactly those."""
    from odf_chain.schema.convert import AVRO_SCHEMA_KEY

    writer = {
        "type": "record",
        "name": "Person",
        "namespace": "org.example",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
    }
    people = Dataset.create(tmp_path / "people")
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["Ada", "Alan"]})
    people.write(table.replace_schema_metadata({AVRO_SCHEMA_KEY: json.dumps(writer).encode()}))
    state = people.state
    names = Dataset.create(tmp_path / "names")
    rec = LineageRecorder("upper", run_id="u-1")
    src = rec.dataset_input(
        "people", state.dataset_id, state.head, uri=str(people.path), fields=state.field_paths
    )
    rec.transform("upper", [src["name"]], ["name_upper"], writes=True)
    rec.write("write", {"id": src["id"]})
    names.write(pa.table({"id": [1, 2], "name_upper": ["ADA", "ALAN"]}), lineage=rec)

    out = tmp_path / "names.json"
    found = aspects(export(names, out))
    people_urn = odf_urn(state.dataset_id.to_did())
    names_urn = odf_urn(names.state.dataset_id.to_did())
    assert [f["fieldPath"] for f in found[(people_urn, "schemaMetadata")]["fields"]][-2:] == [
        "[version=2.0].[type=Person].[type=long].id",
        "[version=2.0].[type=Person].[type=string].name",
    ]
    assert fine_grained(found[(names_urn, "upstreamLineage")]) == [
        (
            field_urn(names_urn, long("id")),
            "DIRECT:IDENTITY",
            (field_urn(people_urn, "[version=2.0].[type=Person].[type=long].id"),),
        ),
        (
            field_urn(names_urn, string("name_upper")),
            "DIRECT:TRANSFORMATION",
            (field_urn(people_urn, "[version=2.0].[type=Person].[type=string].name"),),
        ),
    ]
    assert datahub_check(out).returncode == 0


# -- --no-indirect --------------------------------------------------------------------------------


def test_no_indirect_leaves_indirect_edges_out_of_the_fine_grained_lineage(
    chains: Chains, tmp_path: Path
) -> None:
    """Join keys and the group-by go; everything else is as in the default export, upstreams
    included (they name the datasets the INDIRECT inputs came from), and DataHub still reads
    the file back unchanged and accepts it."""
    out = tmp_path / "summary.json"
    mcps = export(chains.summary, out, indirect=False)
    default = export(chains.summary, tmp_path / "default.json")
    summary = odf_urn(chains.summary_id)
    lineage = aspects(mcps)[(summary, "upstreamLineage")]
    assert fine_grained(lineage) == [
        entry for entry in summary_fine_grained(chains) if not entry[1].startswith("INDIRECT")
    ]
    before = aspects(default)
    assert lineage["upstreams"] == before[(summary, "upstreamLineage")]["upstreams"]
    assert [(m["entityUrn"], m["aspectName"]) for m in mcps] == [
        (m["entityUrn"], m["aspectName"]) for m in default
    ]
    assert {k: v for k, v in aspects(mcps).items() if k[1] != "upstreamLineage"} == {
        k: v for k, v in before.items() if k[1] != "upstreamLineage"
    }

    wrapper = datahub_mcp.MetadataChangeProposalWrapper
    for obj in mcps:
        parsed = wrapper.from_obj(json.loads(json.dumps(obj)))
        assert parsed.validate()
        assert parsed.to_obj(simplified_structure=True) == obj
    result = datahub_check(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(mcps)} MCEs found - all valid" in result.stdout


def test_no_indirect_drops_a_legacy_indirect_step_too(tmp_path: Path) -> None:
    """An INDIRECT step with a direct subtype (an older chain's) is INDIRECT all the same."""
    legacy = build_legacy_chain(tmp_path / "legacy")
    mcps = export(legacy.dataset, tmp_path / "legacy.json", indirect=False)
    lineage = aspects(mcps)[(odf_urn(legacy.did), "upstreamLineage")]
    assert [op for _, op, _ in fine_grained(lineage)] == [
        "DIRECT:TRANSFORMATION",
        "DIRECT:AGGREGATION,MASKED",
    ]
