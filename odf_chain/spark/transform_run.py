"""Running a derivative dataset's query in Spark: each input a view of exactly the rows a block
pins (slices checked against their hashes), the recorded query steps, the answer as Arrow, and
what in the plan would make a re-run answer differently.

Shared by :func:`odf_chain.spark.derive` (the run) and ``chain-verify --reproduce`` (the re-run),
so both read inputs and run queries the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from odf_chain.dataset import Dataset
from odf_chain.derived import REPRODUCIBLE_CONF
from odf_chain.errors import IntegrityError
from odf_chain.events import DatasetKind
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState

# Expressions and operators whose result can differ between two runs over the same rows: by
# design (random, clocks, ids), or because it follows the order rows arrive in, which Spark
# does not fix (first/last, collected arrays, a LIMIT), or because its code is not recorded
# (user-defined functions). Spark's own ``deterministic`` flag misses the order-dependent and
# clock ones (it calls them deterministic within one query), so the plan is read for names too.
NOT_REPRODUCIBLE: dict[str, str] = {
    "Rand": "rand()",
    "Randn": "randn()",
    "Uuid": "uuid()",
    "Shuffle": "shuffle()",
    "RandStr": "randstr()",
    "Uniform": "uniform()",
    "MonotonicallyIncreasingID": "monotonically_increasing_id()",
    "SparkPartitionID": "spark_partition_id()",
    "InputFileName": "input_file_name()",
    "InputFileBlockStart": "input_file_block_start()",
    "InputFileBlockLength": "input_file_block_length()",
    "CurrentTimestamp": "current_timestamp()",
    "Now": "now()",
    "CurrentDate": "current_date()",
    "LocalTimestamp": "localtimestamp()",
    "CurrentTime": "current_time()",
    "CurrentUser": "current_user()",
    "First": "first() (which row depends on row order)",
    "Last": "last() (which row depends on row order)",
    "CollectList": "collect_list() (array order follows row order)",
    "CollectSet": "collect_set() (array order follows row order)",
    "GlobalLimit": "LIMIT (which rows depends on row order unless the order is total)",
    "Sample": "TABLESAMPLE / sample()",
    "PythonUDF": "a Python UDF (its code is not recorded)",
    "PythonUDAF": "a Python UDAF (its code is not recorded)",
    "ScalaUDF": "a JVM UDF (its code is not recorded)",
    "ScalaUDAF": "a JVM UDAF (its code is not recorded)",
    "MapInPandas": "mapInPandas (its code is not recorded)",
    "MapInArrow": "mapInArrow (its code is not recorded)",
    "FlatMapGroupsInPandas": "applyInPandas (its code is not recorded)",
}


def nondeterminism(df) -> tuple[str, ...]:
    """Why ``df``'s answer may differ on a re-run over the same rows (empty: it will not), from
    its analyzed plan: what :data:`NOT_REPRODUCIBLE` names, and anything else Spark itself
    calls non-deterministic."""
    plan = df._jdf.queryExecution().analyzed()
    found: dict[str, None] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            name = str(node.get("class", "")).rsplit(".", 1)[-1]
            if name in NOT_REPRODUCIBLE:
                found[NOT_REPRODUCIBLE[name]] = None
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(plan.toJSON()))
    if not found and not plan.deterministic():
        found["a non-deterministic expression (Spark's own verdict on the plan)"] = None
    return tuple(found)


def run_conf(spark) -> dict[str, str | None]:
    """The settings in :data:`REPRODUCIBLE_CONF` as ``spark`` has them."""
    return {name: spark.conf.get(name, None) for name in REPRODUCIBLE_CONF}


def isolated_session(spark, conf: Mapping[str, str | None] = {}):
    """A session of ``spark``'s context with its own temporary views and SQL settings: the
    input views of one run cannot collide with another's or with the caller's. It starts from
    the caller's ``spark.sql.*`` settings (parallelism, adaptive execution, ...), then
    ``conf``."""
    session = spark.newSession()
    for name, value in spark.conf.getAll.items():
        if name.startswith("spark.sql.") and spark.conf.isModifiable(name):
            session.conf.set(name, value)  # the static ones the context has already
    for name, value in conf.items():
        if value is None:
            session.conf.unset(name)
        else:
            session.conf.set(name, value)
    return session


@dataclass(frozen=True)
class PinnedInput:
    """An input read as of one of its blocks."""

    alias: str
    dataset: Dataset
    block_hash: Multihash
    state: DatasetState  # the input at that block


def pin(alias: str, dataset: Dataset, block_hash: Multihash | None = None) -> PinnedInput:
    """``dataset`` as of ``block_hash`` (its head when None), the block proved to be in its
    chain by a walk back from the head."""
    at = dataset.refresh().head if block_hash is None else block_hash
    if at is None:
        raise IntegrityError(f"input {alias} ({dataset.location}) has no blocks")
    state = dataset.state_at(str(at), verified=True)
    return PinnedInput(alias, dataset, at, state)


def input_frame(spark, given: PinnedInput):
    """The rows ``given`` pins as a DataFrame: its slices up to the block, each checked against
    its physical hash first; a derivative input as its folded answer (retractions applied)."""
    from odf_chain.spark.read_frame import read

    at = str(given.block_hash)
    if given.state.dataset_kind != DatasetKind.DERIVATIVE:  # to_table checks what it reads
        given.dataset.to_pyarrow_dataset(at=at, check="hash")  # every slice checked, then read
    return read(spark, given.dataset, at=at)


def run_queries(session, inputs: Sequence[PinnedInput], queries: Sequence[tuple[str | None, str]]):
    """The answer's DataFrame: each input a temporary view under its alias, each step but the
    last a temporary view under its own alias, the last step the answer."""
    for given in inputs:
        input_frame(session, given).createOrReplaceTempView(given.alias)
    for alias, query in queries[:-1]:
        session.sql(query).createOrReplaceTempView(alias)
    return session.sql(queries[-1][1])


def answer_table(df) -> pa.Table:
    """The answer collected as one Arrow table (schema metadata dropped: Spark's, not ours)."""
    table = df.toArrow()
    return table.replace_schema_metadata(None)
