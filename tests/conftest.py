"""Shared helpers for tests that work on real dataset directories (imported as
``tests.conftest``)."""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from odf_chain.events import SetDataSchema

Snapshot = dict[str, bytes | None]


def snapshot_tree(root: Path) -> Snapshot:
    """Every directory (value None) and file (value: its bytes) under ``root``, by relative path.

    Nothing is excluded: lock files, hidden staging directories and all.
    """
    out: Snapshot = {}
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = path.read_bytes() if path.is_file() else None
    return out


def multihash_name(data: bytes, algorithm: str = "blake3") -> str:
    """The multibase (base16) multihash of ``data``, computed without odf_chain:
    ``f`` + hex(varint code, varint length 32, digest)."""
    if algorithm == "blake3":
        return "f1e20" + blake3.blake3(data).hexdigest()
    if algorithm == "sha3-256":
        return "f1620" + hashlib.sha3_256(data).hexdigest()
    raise ValueError(algorithm)


def non_utf8_schema(nested: bool) -> bytes:
    """A well-formed Arrow schema whose (possibly nested) field name is not UTF-8."""
    inner = pa.field("zq", pa.int64())
    schema = pa.schema([pa.field("s", pa.struct([inner]))]) if nested else pa.schema([inner])
    raw = SetDataSchema.from_arrow(schema).raw_arrow_schema
    assert raw.count(b"zq") == 1
    return raw.replace(b"zq", b"\xff\xfe")


@pytest.fixture(scope="session")
def spark():
    """The shared local SparkSession (see tests/spark_session.py)."""
    from tests.spark_session import get_session, stop_session

    session = get_session()
    yield session
    stop_session()


def _permission_bits_apply() -> bool:
    """False for root (or anyone with CAP_DAC_OVERRIDE): chmod then stops nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        locked = Path(tmp) / "locked"
        locked.mkdir(mode=0o500)
        try:
            (locked / "probe").touch()
        except PermissionError:
            return True
        finally:
            locked.chmod(0o700)
        return False


PERMISSIONS = _permission_bits_apply()


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 for the whole session, and the AWS environment variables
    that point every client at it (set for the session: spawned writers inherit them)."""
    from tests import spark_session
    from tests.s3_server import S3Server

    server = S3Server()
    server.start()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    # Spark's Python workers take the environment the JVM started with, plus the context's
    # executor environment: a session started before this server must hand them the variables
    # too, as a cluster's executors have their own credentials
    spark_session.share_environment(server.env)
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


_buckets = itertools.count()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh, empty bucket on the session's S3 server: ``s3://<name>``."""
    name = f"odf-test-{os.getpid()}-{next(_buckets)}"
    fs = pafs.S3FileSystem(
        endpoint_override=s3_server.endpoint, scheme="http", allow_bucket_creation=True
    )
    fs.create_dir(name)
    return f"s3://{name}"


# A test taking the fixture that gives Spark or S3, or a fixture that depends on it, gets its
# marker (pyproject.toml lists them); tests that start Spark another way are marked by hand
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_fixture = {"spark": pytest.mark.spark, "s3_server": pytest.mark.s3}
    for item in items:
        # the closure of the test's fixtures: those it names and all they depend on
        used = set(getattr(item, "fixturenames", ()))
        for fixture, mark in by_fixture.items():
            if fixture in used:
                item.add_marker(mark)
