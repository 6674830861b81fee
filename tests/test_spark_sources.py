"""odf_chain.spark.inputs and .ingest: input files -> DataFrame + content hashes (local Spark)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as st

from odf_chain.errors import (
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    SchemaError,
)
from odf_chain.spark.avro_input import MAX_SPARK_NESTING
from odf_chain.spark.errors import odf_error, spark_errors
from odf_chain.spark.inputs import FORMATS, InputFile, SourceFrame, read_input
from tests.helpers import multihash_name

UTC = dt.UTC


def _inputs_of(files: list[Path]) -> tuple[InputFile, ...]:
    """What `inputs` should be, computed without odf_chain."""
    return tuple(
        InputFile(f.as_uri(), f.stat().st_size, multihash_name(f.read_bytes())) for f in files
    )


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name-{i}" for i in ids],
            "score": [i * 0.5 for i in ids],
        }
    )


@pytest.fixture
def tabular(tmp_path: Path) -> Path:
    """Three CSV, three JSON-lines and three Parquet files of 10, 20 and 30 rows, each format in
    its own directory, plus the files Spark leaves next to its output (to be skipped)."""
    for fmt in ("csv", "json", "parquet"):
        d = tmp_path / fmt
        d.mkdir()
        for k, (start, n) in enumerate([(0, 10), (10, 20), (30, 30)]):
            table = _table(start, n)
            path = d / f"part-{k}.{fmt}"
            if fmt == "csv":
                pacsv.write_csv(table, path)
            elif fmt == "json":
                path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
            else:
                pq.write_table(table, path)
        (d / "_SUCCESS").write_bytes(b"")
        (d / f".part-0.{fmt}.crc").write_bytes(b"crc")
        (d / f"part-0.{fmt}.crc").write_bytes(b"crc")
        (d / "subdir").mkdir()
        (d / "subdir" / f"part-9.{fmt}").write_bytes(b"not read")
    return tmp_path


def _check_tabular(source: SourceFrame, files: list[Path], rows: int) -> None:
    assert source.inputs == _inputs_of(files)
    assert source.avro_schema is None
    types = {f.name: f.dataType for f in source.df.schema.fields}
    # CSV inference picks the narrowest integer type; JSON inference always long
    id_type = st.IntegerType() if files[0].suffix == ".csv" else st.LongType()
    assert types == {"id": id_type, "name": st.StringType(), "score": st.DoubleType()}
    assert source.df.count() == rows


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_directory_glob_and_files(spark, tabular: Path, fmt: str) -> None:
    d = tabular / fmt
    files = sorted(d.glob(f"part-*.{fmt}"))
    options = {"inferSchema": False} if fmt == "csv" else None

    # a directory: its visible files, sorted; _SUCCESS, .crc, hidden files and subdirs skipped
    source = read_input(spark, [str(d)], fmt)
    _check_tabular(source, files, 60)
    # a glob, as a file URI
    _check_tabular(read_input(spark, [f"{d.as_uri()}/part-[12].{fmt}"], fmt), files[1:], 50)
    # files one by one, in argument order, each file once
    one_by_one = read_input(spark, [str(files[2]), str(files[0]), str(files[2])], fmt)
    _check_tabular(one_by_one, [files[2], files[0]], 40)

    if fmt == "csv":  # options override the defaults
        types = read_input(spark, [str(d)], fmt, options=options).df.schema.fields
        assert {f.dataType for f in types} == {st.StringType()}


def test_uris_are_kept_as_given(spark, tmp_path: Path) -> None:
    d = tmp_path / "a dir"
    d.mkdir()
    pq.write_table(_table(0, 3), d / "f[1] é.parquet")
    pq.write_table(_table(3, 4), d / "g.parquet")
    given = "file://" + str(d / "g.parquet")
    source = read_input(spark, [given, str(d / "f[1] é.parquet")], "parquet")
    assert [i.uri for i in source.inputs] == [given, (d / "f[1] é.parquet").as_uri()]
    assert source.df.count() == 7
    under_uri = read_input(spark, [d.as_uri() + "/"], "parquet")
    assert [i.uri for i in under_uri.inputs] == [
        d.as_uri() + "/f%5B1%5D%20%C3%A9.parquet",
        d.as_uri() + "/g.parquet",
    ]


def test_glob_over_directories(spark, tmp_path: Path) -> None:
    for day in ("2024-01-01", "2024-01-02", "_tmp"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "x.json").write_text('{"a": 1}\n{"a": 2}\n')
    source = read_input(spark, [str(tmp_path / "*" / "x.json")], "json")
    assert [i.uri for i in source.inputs] == [
        (tmp_path / "2024-01-01" / "x.json").as_uri(),
        (tmp_path / "2024-01-02" / "x.json").as_uri(),
    ]
    assert source.df.count() == 4
    # a glob matching directories stands for their files
    assert len(read_input(spark, [str(tmp_path / "2024-*")], "json").inputs) == 2


# --------------------------------------------------------------------------------------------
# Avro

AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "doc": "an order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]},
        },
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {
                        "name": "address",
                        "type": [
                            "null",
                            {
                                "type": "record",
                                "name": "Address",
                                "fields": [
                                    {"name": "city", "type": "string"},
                                    {"name": "zip", "type": ["null", "int"]},
                                ],
                            },
                        ],
                    },
                ],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "lines", "type": {"type": "array", "items": "shop.Address"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {
            "name": "fx",
            "type": {
                "type": "fixed",
                "name": "Fx",
                "size": 8,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 4,
            },
        },
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "blob", "type": "bytes"},
        {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "t_ns", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
    ],
}


def _order(i: int) -> dict:
    return {
        "id": i,
        "ok": i % 2 == 0,
        "ratio": 0.25 * i,
        "note": None if i % 3 == 0 else f"note {i}",
        "status": ["NEW", "PAID", "SHIPPED"][i % 3],
        "customer": {
            "name": f"c{i}",
            "address": None if i % 4 == 0 else {"city": f"city{i}", "zip": None if i % 5 else i},
        },
        "tags": [f"t{j}" for j in range(i % 3)],
        "lines": [{"city": "x", "zip": j} for j in range(i % 2)],
        "attrs": {"a": i, "b": None} if i % 2 else {},
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "at": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=1001 * i),
        "at_us": None
        if i % 2
        else dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=7 * i),
        "local": dt.datetime(2024, 6, 1, 12, 0) + dt.timedelta(seconds=i),
        "price": Decimal(i * 101) / 100,
        "fx": Decimal(-i * 12345) / 10000,
        "ref": uuid.UUID(int=i),
        "digest": i.to_bytes(4, "big"),
        "blob": bytes(range(i % 7)),
        "t_ms": dt.time(1, 2, 3, (i % 1000) * 1000),
        "t_us": dt.time(4, 5, 6, i % 1_000_000),
        "t_ns": 1_700_000_000_123_456_789 + i,
    }


def _expected_row(rec: dict) -> dict:
    """A record as fastavro reads it, made comparable with a collected Spark row: logical types
    that Spark cannot hold are their underlying numbers; timestamps become epoch seconds."""
    out = dict(rec)
    out["ref"] = str(rec["ref"])
    t = rec["t_ms"]
    out["t_ms"] = ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000
    t = rec["t_us"]
    out["t_us"] = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    return _comparable(out)


def _comparable(value):
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, dt.datetime):
        # Spark returns timestamps naive in the driver's local zone, NTZ ones naive as stored
        return ("ts", value.timestamp()) if value.tzinfo else ("ntz", value.isoformat())
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _spark_rows(df) -> list[dict]:
    schema = {f.name: f.dataType for f in df.schema.fields}
    rows = []
    for row in df.collect():  # collecting is fine in a test
        d = row.asDict(recursive=True)
        for name, t in schema.items():
            if isinstance(t, st.TimestampType) and d[name] is not None:
                d[name] = d[name].astimezone(UTC)  # naive local -> aware
        rows.append(_comparable(d))
    return rows


def _write_avro(path: Path, records: list[dict], schema=AVRO_SCHEMA, codec="null") -> Path:
    with path.open("wb") as fh:
        fastavro.writer(fh, schema, records, codec=codec, sync_interval=2000)
    return path


@pytest.fixture
def avro_files(tmp_path: Path) -> list[Path]:
    d = tmp_path / "avro"
    d.mkdir()
    return [
        _write_avro(d / "a.avro", [_order(i) for i in range(0, 40)]),
        _write_avro(d / "b.avro", [_order(i) for i in range(40, 45)], codec="deflate"),
        _write_avro(d / "c.avro", []),  # header only
        _write_avro(d / "d.avro", [_order(i) for i in range(45, 110)]),
    ]


def test_avro_rows_schema_and_tasks(spark, avro_files: list[Path]) -> None:
    source = read_input(spark, [str(avro_files[0].parent)], "avro")
    assert source.inputs == _inputs_of(avro_files)
    with avro_files[0].open("rb") as fh:
        reader = fastavro.reader(fh)
        assert source.avro_schema == reader.metadata["avro.schema"]
    assert json.loads(source.avro_schema) == AVRO_SCHEMA
    df = source.df
    assert df.rdd.getNumPartitions() == len(avro_files)  # one task per file

    types = {f.name: f.dataType for f in df.schema.fields}
    address = st.StructType(
        [
            st.StructField("city", st.StringType(), False),
            st.StructField("zip", st.IntegerType(), True),
        ]
    )
    assert types["customer"] == st.StructType(
        [
            st.StructField("name", st.StringType(), False),
            st.StructField("address", address, True),
        ]
    )
    assert types["lines"] == st.ArrayType(address, False)
    assert types["attrs"] == st.MapType(st.StringType(), st.LongType(), True)
    assert types["status"] == st.StringType()
    assert types["day"] == st.DateType()
    assert types["at"] == types["at_us"] == st.TimestampType()
    assert types["local"] == st.TimestampNTZType()
    assert types["price"] == st.DecimalType(10, 2)
    assert types["fx"] == st.DecimalType(12, 4)
    assert types["ref"] == st.StringType()
    assert types["digest"] == types["blob"] == st.BinaryType()
    assert types["ratio"] == st.FloatType()
    assert (types["t_ms"], types["t_us"], types["t_ns"]) == (
        st.IntegerType(),
        st.LongType(),
        st.LongType(),
    )
    nullable = {f.name for f in df.schema.fields if f.nullable}
    assert nullable == {"note", "at_us"}

    expected = []
    for path in avro_files:
        with path.open("rb") as fh:
            expected += [_expected_row(r) for r in fastavro.reader(fh)]
    assert len(expected) == 110
    assert _spark_rows(df) == expected


def _record(name: str, avro_type) -> dict:
    """A one-field record schema."""
    return {"type": "record", "name": "R", "fields": [{"name": name, "type": avro_type}]}


def test_avro_files_must_share_a_schema(spark, tmp_path: Path) -> None:
    a = _write_avro(tmp_path / "a.avro", [{"x": 1}], _record("x", "long"))
    # the same schema, written with other whitespace and key order, is the same schema
    written = b'{"type": "record", "name": "R", "fields": [{"name": "x", "type": "long"}]}'
    other = b'{"name":"R","type":"record","fields":[{"type":"long","name":"x"}]}'
    assert written in a.read_bytes()  # (same length: the header holds the text's length)
    (tmp_path / "a2.avro").write_bytes(a.read_bytes().replace(written, other.ljust(len(written))))
    assert len(read_input(spark, [str(tmp_path)], "avro").inputs) == 2
    b = _write_avro(tmp_path / "b.avro", [{"x": 1}], _record("x", "int"))
    with pytest.raises(SchemaError) as e:
        read_input(spark, [str(tmp_path)], "avro")
    assert a.as_uri() in str(e.value) and b.as_uri() in str(e.value)


def test_avro_schema_spark_cannot_hold(spark, tmp_path: Path) -> None:
    schema = _record("big", {"type": "bytes", "logicalType": "decimal", "precision": 40})
    path = _write_avro(tmp_path / "big.avro", [{"big": Decimal(1)}], schema)
    with pytest.raises(SchemaError, match=r"big\.avro: field big: decimal\(40, 0\)"):
        read_input(spark, [str(path)], "avro")

    deep: dict = {"type": "record", "name": "R0", "fields": [{"name": "x", "type": "int"}]}
    for i in range(1, MAX_SPARK_NESTING + 1):
        deep = {"type": "record", "name": f"R{i}", "fields": [{"name": "r", "type": deep}]}
    path = _write_avro(tmp_path / "deep.avro", [], deep)
    with pytest.raises(SchemaError, match=r"deep\.avro: field r(\.r)+\.x: the schema nests deeper"):
        read_input(spark, [str(path)], "avro")


def test_corrupt_avro_header_fails_at_read_input(spark, tmp_path: Path) -> None:
    good = _write_avro(tmp_path / "good.avro", [_order(1)])
    bad = tmp_path / "bad.avro"
    bad.write_bytes(b"this is not avro at all")
    with pytest.raises(FormatError, match=r"bad\.avro: not a readable Avro file"):
        read_input(spark, [str(good), str(bad)], "avro")


def test_corrupt_avro_body_fails_when_the_action_runs(spark, tmp_path: Path) -> None:
    good = _write_avro(tmp_path / "good.avro", [_order(i) for i in range(50)])
    raw = _write_avro(tmp_path / "bad.avro", [_order(i) for i in range(200)]).read_bytes()
    bad = tmp_path / "bad.avro"
    bad.write_bytes(raw[: len(raw) * 2 // 3])  # cut inside a block
    source = read_input(spark, [str(good), str(bad)], "avro")  # header and hash are fine
    with (
        pytest.raises(FormatError, match=r"bad\.avro: cannot read Avro records") as e,
        spark_errors(),
    ):
        source.df.count()
    assert bad.as_uri() in str(e.value)
    # without the context manager, Spark's own exception carries the same error
    with pytest.raises(Exception) as raw_error:
        source.df.count()
    err = odf_error(raw_error.value)
    assert isinstance(err, FormatError) and bad.as_uri() in str(err)


def test_avro_file_changed_after_listing(spark, tmp_path: Path) -> None:
    path = _write_avro(tmp_path / "a.avro", [_order(1), _order(2)])
    source = read_input(spark, [str(path)], "avro")
    _write_avro(path, [_order(3), _order(4)])
    with pytest.raises(IntegrityError, match="changed after it was listed"), spark_errors():
        source.df.count()


# --------------------------------------------------------------------------------------------
# errors


def test_missing_paths(spark, tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(NotFoundError, match=r"nope\.csv does not exist"):
        read_input(spark, [str(missing)], "csv")
    with pytest.raises(NotFoundError, match="no files match"):
        read_input(spark, [str(tmp_path / "*.csv")], "csv")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_bytes(b"")
    with pytest.raises(NotFoundError, match="holds no input files"):
        read_input(spark, [str(tmp_path / "empty")], "csv")
    with pytest.raises(NotFoundError):
        read_input(spark, [], "csv")


def test_unknown_format(spark, tmp_path: Path) -> None:
    with pytest.raises(OdfChainError) as e:
        read_input(spark, [str(tmp_path)], "xml")
    assert all(fmt in str(e.value) for fmt in FORMATS)


def test_malformed_files(spark, tmp_path: Path) -> None:
    pq.write_table(_table(0, 5), tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"PAR1 but not really")
    with pytest.raises(FormatError, match=r"b\.parquet: not a readable Parquet file"):
        read_input(spark, [str(tmp_path / "*.parquet")], "parquet")

    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(FormatError, match=r"json input .*bad\.json"):  # FAILFAST by default
        read_input(spark, [str(bad_json)], "json").df.count()

    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("a,b\n1,2\n3,4,5\n")  # found when the rows are read (FAILFAST)
    source = read_input(spark, [str(bad_csv)], "csv")
    with (
        pytest.raises(FormatError, match=r"bad\.csv: cannot read the input file: .*3,4,5"),
        spark_errors(),
    ):
        source.df.collect()  # (count() alone does not parse the columns)


@pytest.mark.parametrize("case", ["ragged-csv", "csv-as-json", "parquet-as-csv"])
def test_inputs_spark_cannot_read_are_one_line_and_create_nothing(spark, tmp_path, case) -> None:
    """ingest_files(create=True) on input Spark refuses: one printable line naming the file,
    and no dataset at the path (its Seed would have been committed with the data)."""
    from odf_chain.spark.ingest import ingest_files

    if case == "parquet-as-csv":
        pq.write_table(_table(0, 5), tmp_path / "in.bin")
        # refused by its magic bytes before Spark reads it (issue 20: tests/test_ingest_inputs.py)
        name, fmt, said = "in.bin", "csv", "a Parquet file (it starts with 'PAR1'), not csv"
    elif case == "ragged-csv":
        (tmp_path / "in.csv").write_text("id,name,v\n1,a,2\n2,b\n3,c,4,5\n")
        name, fmt, said = "in.csv", "csv", "Malformed CSV record: 2,b"  # the row, quoted
    else:
        (tmp_path / "in.csv").write_text("id,name\n1,a\n2,b\n")
        name, fmt, said = "in.csv", "json", "Malformed records"
    with pytest.raises(OdfChainError) as caught:
        ingest_files(spark, tmp_path / "ds", [str(tmp_path / name)], fmt, create=True)
    message = str(caught.value)
    assert "\n" not in message and message.isprintable(), message
    assert name in message and said in message, message
    assert not (tmp_path / "ds").exists(), sorted((tmp_path / "ds").rglob("*"))


def test_ingest_lineage_copies_each_column_from_every_file(spark, avro_files: list[Path]) -> None:
    """The lineage odf-chain ingest states: each column from the column of the same name (its
    Avro v2 path) in every input file, the files pinned by the hashes taken when listed."""
    from odf_chain.schema.avro_paths import avro_field_paths
    from odf_chain.schema.paths import v1_path
    from odf_chain.spark.ingest import ingest_lineage

    source = read_input(spark, [str(avro_files[0].parent)], "avro")
    rec = ingest_lineage(source, "load orders")
    assert rec.job_name == "load orders"
    assert [(i.uri, str(i.content_hash)) for i in rec.inputs] == [
        (i.uri, i.blake3) for i in source.inputs
    ]
    assert [i.name for i in rec.inputs] == ["a.avro", "b.avro", "c.avro", "d.avro"]
    by_name = {v1_path(p): p for p in reversed(avro_field_paths(AVRO_SCHEMA))}
    files = [i.name for i in rec.inputs]
    ops = {op.outputs: op for op in rec.operations}
    top = {(c,) for c in source.df.columns}
    assert top <= set(ops)
    # nested fields too, each from its own path in the files
    nested = ops[("customer.address.city",)]
    assert {f.field for f in nested.inputs} == {by_name["customer.address.city"]}
    assert ("lines.zip",) in ops
    for column in source.df.columns:
        op = ops[(column,)]
        assert [(f.origin, f.field) for f in op.inputs] == [(n, by_name[column]) for n in files]
        assert op.writes and op.transformation.subtype.name == "IDENTITY"


def test_ingest_lineage_is_accepted_and_reaches_nested_fields(spark, avro_files, tmp_path):
    from odf_chain.dataset import Dataset
    from odf_chain.spark import write
    from odf_chain.spark.ingest import ingest_lineage

    source = read_input(spark, [str(avro_files[0].parent)], "avro")
    write(
        source.df,
        tmp_path / "orders",
        create=True,
        avro_schema=source.avro_schema,
        lineage=ingest_lineage(source, "load orders"),
        truncate_timestamps=True,  # the files hold microseconds (at_us)
    )
    replay = Dataset.open(tmp_path / "orders").lineage()
    city = replay.field("customer.address.city")
    ups = {(r.field.dataset, r.field.path) for r in replay.graph.upstream(city)}
    assert {dataset for dataset, _ in ups} == {i.uri for i in source.inputs}
    assert {path for _, path in ups} == {city.path}  # the same path in the files' schema


def test_the_old_module_names_still_import():
    """``odf_chain.spark.sources`` and ``odf_chain.spark.writer`` were split by job; the names
    they exported still import from them, as the very objects of their new homes."""
    import importlib

    from odf_chain import spark
    from odf_chain.spark import sources, writer

    constants = {"FORMATS": "inputs", "MAX_SPARK_NESTING": "avro_input"}  # no __module__
    for old in (sources, writer):
        for name in old.__all__:
            value = getattr(old, name)
            where = (
                value.__module__ if name not in constants else f"{spark.__name__}.{constants[name]}"
            )
            assert getattr(importlib.import_module(where), name) is value, (old.__name__, name)
    assert spark.write is writer.write and spark.read is writer.read
    assert callable(spark.write) and callable(spark.read)  # the functions, not modules
