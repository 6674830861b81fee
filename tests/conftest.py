"""Fixtures shared by the tests (helpers are in tests/helpers.py), and the markers given by
fixture: a test using the ``spark`` fixture is marked ``spark``, one using ``s3_server`` ``s3``,
``azurite_server`` ``azure``, ``gcs_server`` ``gcs``."""

from __future__ import annotations

import contextlib
import itertools
import os

import pyarrow.fs as pafs
import pytest


@pytest.fixture(scope="session")
def spark():
    """The shared local SparkSession (see tests/spark_session.py)."""
    from tests.spark_session import get_session, stop_session

    session = get_session()
    yield session
    stop_session()


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


@contextlib.contextmanager
def _serving(server):
    """Start ``server`` and set its environment for the session (spawned writers and Spark's
    Python workers inherit it, as for the S3 server); restore it after."""
    from tests import spark_session

    server.start()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    spark_session.share_environment(server.env)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture(scope="session")
def azurite_server():
    """Azurite's blob service on 127.0.0.1 for the whole session (tests/azurite_server.py);
    the tests skip, saying what is missing, without Node.js or the npm package."""
    from tests.azurite_server import AzuriteServer, missing

    if reason := missing():
        pytest.skip(reason)
    with _serving(AzuriteServer()) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server on 127.0.0.1 for the whole session (tests/gcs_server.py)."""
    from tests.gcs_server import GcsServer, missing

    if reason := missing():
        pytest.skip(reason)
    with _serving(GcsServer()) as server:
        yield server


_buckets = itertools.count()


@pytest.fixture
def az_container(azurite_server) -> str:
    """A fresh, empty container on the session's Azurite: ``az://<name>``."""
    name = f"odf-test-{os.getpid()}-{next(_buckets)}"
    azurite_server.create_container(name)
    return f"az://{name}"


@pytest.fixture
def gs_bucket(gcs_server) -> str:
    """A fresh, empty bucket on the session's GCS emulator: ``gs://<name>``."""
    name = f"odf-test-{os.getpid()}-{next(_buckets)}"
    gcs_server.create_bucket(name)
    return f"gs://{name}"


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
    by_fixture = {
        "spark": pytest.mark.spark,
        "s3_server": pytest.mark.s3,
        "azurite_server": pytest.mark.azure,
        "gcs_server": pytest.mark.gcs,
    }
    for item in items:
        # the closure of the test's fixtures: those it names and all they depend on
        used = set(getattr(item, "fixturenames", ()))
        for fixture, mark in by_fixture.items():
            if fixture in used:
                item.add_marker(mark)
