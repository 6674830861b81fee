"""Which inputs of a lineage event a plan's sources are (the default ``resolve_input``).

- **A slice of another odf_chain dataset** (a file ``<dataset>/data/<physical hash>`` of a
  directory holding ``refs/head`` and ``blocks/``) becomes that dataset, pinned: its dataset id
  and the block whose AddData (or ExecuteTransform) named the slice; when several slices of one
  dataset are read, the latest such block. Its fields are the dataset's schema at that block.
  A file under ``data/`` that no block names is treated as an external file.
- **Any other file** becomes an external source with its URI and the BLAKE3 multihash of its
  content (each file is hashed once per resolver, streaming).
- **A directory** (a root path of the relation that is a directory) becomes one input for the
  directory, not one per file: its URI is the directory's, and its content hash is the BLAKE3
  multihash of a manifest listing what was read, one line per file sorted by relative path:
  ``<relative posix path> TAB <multibase BLAKE3 multihash of the file>`` LF, in UTF-8. Anyone
  can recompute it from the files; one input per directory keeps events small when a job reads
  hundreds of part files. A file outside every root path gets an input of its own.
- **In-memory rows** (LocalRelation, DataFrames made from Python objects): an input named
  ``local`` with no URI. An RDD whose origin is not visible: ``rdd``. Another leaf (a catalog
  table without files, a stream): its table name, or its plan node's class.

The fields of an external or in-memory input are what Spark read from it (its output columns'
Spark types, converted to Arrow), so their v2 paths follow the lakehouse convention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

import pyarrow as pa

from odf_chain import replay
from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError, OdfChainError, StorageError
from odf_chain.events import AddData, ExecuteTransform, LineageInput
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.spark.plan_lineage.model import PlanSource, SourceKind


@dataclass(frozen=True)
class ResolvedInput:
    """One input of the event, and the schema whose v2 paths name its fields (None: the
    input's fields cannot be named, so operations do not list them)."""

    input: LineageInput
    schema: pa.Schema | None


ResolveInput = Callable[[PlanSource], Sequence[ResolvedInput]]


def local_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI (Spark writes ``file:/x`` and ``file:///x``, with
    percent-escapes) or of a bare path; None for other schemes."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def _uri(path: Path) -> str:
    return path.as_uri()


def _is_dataset(root: Path) -> bool:
    return (root / "refs" / "head").is_file() and (root / "blocks").is_dir()


@dataclass(frozen=True)
class _DatasetIndex:
    """A dataset's chain, read once: which block named each slice."""

    dataset: Dataset
    entries: list[BlockEntry]
    block_of_slice: dict[str, int]  # physical hash (multibase) -> index into entries


SPARK_LOCAL_URI = "spark:local-rows"  # rows made in the driver (createDataFrame, a LocalRelation)
SPARK_RDD_URI = "spark:rdd"  # an RDD whose origin Spark does not show


class InputResolver:
    """The default ``resolve_input``: a callable that caches file hashes and dataset chains,
    so that a file or a dataset read by several relations is looked at once."""

    def __init__(self, algorithm: str = BLAKE3) -> None:
        self.algorithm = algorithm
        self._hashes: dict[str, Multihash] = {}
        self._datasets: dict[Path, _DatasetIndex | None] = {}

    # -- file content -------------------------------------------------------------------------

    def file_hash(self, uri: str) -> Multihash:
        """The multihash of a file's bytes, streamed, computed once per URI."""
        found = self._hashes.get(uri)
        if found is not None:
            return found
        path = local_path(uri)
        try:
            if path is not None:
                with open(path, "rb") as fh:
                    digest, _ = Multihash.digest_stream(self.algorithm, fh)
            else:
                import pyarrow.fs as pafs

                fs, inner = pafs.FileSystem.from_uri(uri)
                with fs.open_input_stream(inner) as fh:
                    digest, _ = Multihash.digest_stream(self.algorithm, fh)
        except FileNotFoundError:
            raise NotFoundError(f"{uri}: read by the DataFrame but no longer there") from None
        except OSError as exc:
            raise StorageError(f"{uri}: cannot be read to hash it ({exc})") from None
        self._hashes[uri] = digest
        return digest

    def manifest_hash(self, root: str, files: Sequence[str]) -> Multihash:
        """The content hash of a directory input (see the module docstring)."""
        base = PurePosixPath(unquote(urlparse(root).path))
        lines = []
        for uri in files:
            relative = PurePosixPath(unquote(urlparse(uri).path)).relative_to(base)
            lines.append(f"{relative.as_posix()}\t{self.file_hash(uri)}\n")
        lines.sort()
        return Multihash.digest(self.algorithm, "".join(lines).encode())

    # -- odf_chain datasets -------------------------------------------------------------------

    def _dataset(self, root: Path) -> _DatasetIndex | None:
        if root not in self._datasets:
            index = None
            if _is_dataset(root):
                try:
                    dataset = Dataset.open(root)
                    entries = dataset.blocks()
                except OdfChainError:
                    entries = None
                if entries is not None:
                    by_slice: dict[str, int] = {}
                    for i, entry in enumerate(entries):
                        event = entry.block.event
                        if isinstance(event, AddData | ExecuteTransform) and event.new_data:
                            by_slice[str(event.new_data.physical_hash)] = i
                    index = _DatasetIndex(dataset, entries, by_slice)
            self._datasets[root] = index
        return self._datasets[root]

    def _dataset_slice(self, uri: str) -> tuple[Path, int] | None:
        """(dataset root, index of the block that named the slice) for a dataset's data file."""
        path = local_path(uri)
        if path is None or path.parent.name != "data":
            return None
        root = path.parent.parent
        index = self._dataset(root)
        if index is None or path.name not in index.block_of_slice:
            return None
        return root, index.block_of_slice[path.name]

    def _pinned(self, root: Path, block: int) -> ResolvedInput:
        index = self._datasets[root]
        assert index is not None
        state = replay.fold(index.entries[: block + 1])
        pinned = LineageInput(
            name=root.name or "dataset",
            uri=_uri(root),
            dataset_id=state.dataset_id,
            block_hash=index.entries[block].hash,
        )
        return ResolvedInput(pinned, state.schema)

    # -- the callable -------------------------------------------------------------------------

    def __call__(self, source: PlanSource) -> tuple[ResolvedInput, ...]:
        # Sources with no file behind them are external inputs named by a ``spark:`` URI, so an
        # event stays well formed (every input a dataset or a URI) and says what it was.
        if source.kind is SourceKind.LOCAL:
            return (ResolvedInput(LineageInput("local", uri=SPARK_LOCAL_URI), source.schema),)
        if source.kind is SourceKind.RDD:
            return (ResolvedInput(LineageInput("rdd", uri=SPARK_RDD_URI), source.schema),)
        if source.kind is SourceKind.OTHER:
            uri = f"spark:{source.label}"
            return (ResolvedInput(LineageInput(source.label, uri=uri), source.schema),)
        return self._files(source)

    def _files(self, source: PlanSource) -> tuple[ResolvedInput, ...]:
        out: list[ResolvedInput] = []
        latest: dict[Path, int] = {}
        external: list[str] = []
        for uri in source.files:
            found = self._dataset_slice(uri)
            if found is None:
                external.append(uri)
            else:
                root, block = found
                latest[root] = max(block, latest.get(root, -1))
        for root in sorted(latest):
            out.append(self._pinned(root, latest[root]))
        out.extend(self._external(source, external))
        return tuple(out)

    def _external(self, source: PlanSource, files: list[str]) -> list[ResolvedInput]:
        by_root: dict[str, list[str]] = {}
        alone: list[str] = []
        roots = sorted(
            {r.rstrip("/") for r in source.roots}, key=lambda r: -len(_norm(r))
        )  # deepest first
        for uri in files:
            normalized = _norm(uri)
            for root in roots:
                base = _norm(root)
                if normalized != base and normalized.startswith(base.rstrip("/") + "/"):
                    by_root.setdefault(root, []).append(uri)
                    break
            else:
                alone.append(uri)
        out = []
        for uri in sorted(alone):
            name = PurePosixPath(_norm(uri)).name or uri
            digest = self.file_hash(uri)
            out.append(
                ResolvedInput(
                    LineageInput(name, _canonical(uri), content_hash=digest), source.schema
                )
            )
        for root in sorted(by_root):
            name = PurePosixPath(_norm(root)).name or root
            digest = self.manifest_hash(root, by_root[root])
            uri = _canonical(root).rstrip("/") + "/"
            out.append(ResolvedInput(LineageInput(name, uri, content_hash=digest), source.schema))
        return out


def _norm(uri: str) -> str:
    """A URI's path part, unescaped, for comparing Spark's ``file:/x`` with ``file:///x``."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}"


def _canonical(uri: str) -> str:
    """Local files as ``file:///...`` URIs (as odf_chain's sources record them); others as
    given."""
    path = local_path(uri)
    return _uri(path) if path is not None else uri


__all__ = ["InputResolver", "ResolveInput", "ResolvedInput", "local_path"]
