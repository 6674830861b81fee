"""The few things capture asks the JVM over py4j (no JVM jar needed).

The plan itself comes in one call (``analyzed().toJSON()``). What the JSON does not carry is
where a file relation's files are (``LogicalRelation.relation`` serialises as null) and what an
RDD round trip read. For those, and only for those leaves, a handful of calls per leaf:
``collectLeaves`` (and ``subqueriesAll`` for leaves inside subqueries), each such leaf's output
attribute ids (to match it with its JSON node), its file index's root paths and input files
(one string each, joined on the JVM side), and for a ``LogicalRDD`` a walk of the RDD's
dependencies down to its ``FileScanRDD`` scans. Costs grow with the number of leaves and RDDs,
never with the number of columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SEPARATOR = "\u0001"
MAX_RDDS = 500  # an RDD lineage longer than this is cut short (and said so)
_EXPR_ID = re.compile(r"#(\d+)")
_PARTITIONED_FILE = re.compile(r"path: (.*?), range: \d+-\d+(?:,|$)")


@dataclass(frozen=True, slots=True)
class FileRelation:
    """A relation's root paths (as created) and the files its index lists, as URIs; for a
    relation without a file index (JDBC, say) only its class is known."""

    roots: tuple[str, ...]
    files: tuple[str, ...]
    format: str | None
    relation: str = "HadoopFsRelation"

    @property
    def has_files(self) -> bool:
        return self.relation == "HadoopFsRelation"


@dataclass(frozen=True, slots=True)
class FileScan:
    """A ``FileScanRDD`` found under an RDD: the files it reads and its read schema (JSON)."""

    files: tuple[str, ...]
    schema_json: str


@dataclass(frozen=True, slots=True)
class RddOrigin:
    """What the dependencies of a ``LogicalRDD``'s RDD show: the file scans under it, the RDD
    classes met on the way, and whether the walk had to stop early."""

    scans: tuple[FileScan, ...]
    classes: frozenset[str]
    truncated: bool = False

    @property
    def from_dataframe(self) -> bool:
        """An RDD made from a DataFrame (``df.rdd``) passes through an ``SQLExecutionRDD``."""
        return "SQLExecutionRDD" in self.classes


def _split(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split(SEPARATOR) if part)


def _attribute_ids(text: str) -> tuple[int, ...]:
    """The expression ids in ``a#1L<SEP>b#2``: the last ``#<digits>`` of each attribute (a
    name may itself hold ``#``; Spark's suffixes after the id never do)."""
    ids = []
    for part in text.split(SEPARATOR):
        found = _EXPR_ID.findall(part)
        if found:
            ids.append(int(found[-1]))
    return tuple(ids)


class LeafProbe:
    """Looks up, on demand and once, the JVM objects of the plan's file and RDD leaves."""

    def __init__(self, analyzed: Any, jvm: Any) -> None:
        self._analyzed = analyzed
        self._jvm = jvm
        self._leaves: dict[tuple[int, ...], Any] | None = None

    def _java_strings(self, array: Any) -> tuple[str, ...]:
        """A Java ``String[]`` as a tuple, in one call (py4j would fetch items one by one)."""
        wrapped = self._jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(array)
        return _split(wrapped.mkString(SEPARATOR))

    def _load(self) -> dict[tuple[int, ...], Any]:
        if self._leaves is None:
            leaves: dict[tuple[int, ...], Any] = {}
            plans = [self._analyzed]
            subqueries = self._analyzed.subqueriesAll()
            plans += [subqueries.apply(i) for i in range(subqueries.size())]
            for plan in plans:
                found = plan.collectLeaves()
                for i in range(found.size()):
                    leaf = found.apply(i)
                    if leaf.getClass().getSimpleName() in ("LogicalRelation", "LogicalRDD"):
                        leaves.setdefault(_attribute_ids(leaf.output().mkString(SEPARATOR)), leaf)
            self._leaves = leaves
        return self._leaves

    def leaf(self, attribute_ids: tuple[int, ...]) -> Any | None:
        return self._load().get(attribute_ids)

    def file_relation(self, attribute_ids: tuple[int, ...]) -> FileRelation | None:
        """Root paths and files of the relation whose output has these ids (None when the
        leaf is not found)."""
        leaf = self.leaf(attribute_ids)
        if leaf is None:
            return None
        relation = leaf.relation()
        kind = str(relation.getClass().getSimpleName())
        if kind != "HadoopFsRelation":
            return FileRelation((), (), None, kind)
        location = relation.location()
        roots = _split(location.rootPaths().mkString(SEPARATOR))
        files = self._java_strings(location.inputFiles())
        try:
            fmt = str(relation.fileFormat().shortName())
        except Exception:  # a format that is not a DataSourceRegister
            fmt = str(relation.fileFormat().toString())
        return FileRelation(roots, files, fmt)

    def rdd_origin(self, attribute_ids: tuple[int, ...]) -> RddOrigin | None:
        """The file scans under a ``LogicalRDD``'s RDD, by walking its dependencies."""
        leaf = self.leaf(attribute_ids)
        if leaf is None:
            return None
        stack = [leaf.rdd()]
        seen: set[int] = set()
        classes: set[str] = set()
        scans: list[FileScan] = []
        truncated = False
        while stack:
            if len(seen) >= MAX_RDDS:
                truncated = True
                break
            rdd = stack.pop()
            rdd_id = int(rdd.id())
            if rdd_id in seen:
                continue
            seen.add(rdd_id)
            cls = str(rdd.getClass().getSimpleName())
            classes.add(cls)
            if "CheckpointRDD" in cls:  # a checkpoint cuts the lineage: the origin is hidden
                truncated = True
                continue
            if cls == "FileScanRDD":
                scans.append(self._file_scan(rdd))
                continue
            dependencies = rdd.dependencies()
            stack.extend(dependencies.apply(i).rdd() for i in range(dependencies.size()))
        return RddOrigin(tuple(scans), frozenset(classes), truncated)

    def _file_scan(self, rdd: Any) -> FileScan:
        partitions = rdd.filePartitions()
        files: list[str] = []
        for i in range(partitions.size()):
            listed = self._java_strings(partitions.apply(i).files())
            for entry in listed:
                match = _PARTITIONED_FILE.match(entry)
                if match and match.group(1) not in files:
                    files.append(match.group(1))
        return FileScan(tuple(files), str(rdd.readSchema().json()))


def input_files(jdf: Any, jvm: Any) -> tuple[str, ...]:
    """``df.inputFiles()`` in one string: the fallback when the leaves cannot be probed."""
    wrapped = jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(jdf.inputFiles())
    return _split(wrapped.mkString(SEPARATOR))
