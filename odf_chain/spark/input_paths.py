"""Which files the paths of an ingest name, and how Spark is given them.

Paths
-----
Each path is a file, a directory (its files, not its subdirectories) or a glob (``*``, ``?``,
``[...]`` in any component; a directory it matches stands for its files). Names starting with
``.`` or ``_`` (``_SUCCESS``, Spark's hidden files) and ``.crc`` files are skipped when listing a
directory or matching a glob, as Spark skips them; a file named explicitly is always read, as
is an existing file whose name merely contains glob characters (``f[1].csv``). Files
are taken in argument order, each directory's and glob's files sorted by name, each file once.
Paths are local paths or ``file://`` URIs; other pyarrow.fs URIs (``s3://``, ``gs://``,
``hdfs://``) are listed, hashed and (for Avro) read through :mod:`pyarrow.fs`, and handed to
Spark's readers as given, so Spark must know the scheme too. ``InputFile.uri`` keeps a URI as it
was given (files found under it are appended, percent-encoded); local paths become
``file:///...`` URIs.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow.fs as pafs

from odf_chain.errors import NotFoundError, OdfChainError, StorageError

_GLOB_SPECIAL = re.compile(r"([\\\[\]*?{}])")


def file_name(uri: str) -> str:
    """A file's name: its URI's last component, decoded."""
    return unquote(uri.rstrip("/").rsplit("/", 1)[-1]) or uri


@dataclass(frozen=True, slots=True)
class _Located:
    uri: str
    fs: pafs.FileSystem
    path: str  # the path inside fs

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def spark_path(self) -> str:
        # Spark globs every path it is given: escape the glob characters of a concrete file.
        # Hadoop paths are not percent-encoded, so local files are named by their plain path.
        raw = f"file://{self.path}" if self.is_local else self.uri
        return escape_glob(raw)


def escape_glob(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped: Spark globs every path it reads."""
    return _GLOB_SPECIAL.sub(r"\\\1", path)


def _skipped(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith(".crc")


def _magic_index(parts: list[str]) -> int:
    return next((i for i, part in enumerate(parts) if _glob.has_magic(part)), len(parts))


def _anchor(spec: str) -> tuple[pafs.FileSystem, str, str | None, list[str]]:
    """Where matching starts for one input argument: (filesystem, the path in it before the
    first component with a glob character, that path's URI as given (None for a local path),
    the components left to match)."""
    if spec.startswith("file:"):
        rest = spec[len("file:") :]
        if rest.startswith("//"):
            host, sep, tail = rest[2:].partition("/")
            if host not in ("", "localhost"):
                raise OdfChainError(f"input {spec}: file URIs of other hosts are not supported")
            rest = sep + tail
        if not rest.startswith("/"):
            raise OdfChainError(f"input {spec}: a file URI needs an absolute path")
        parts = rest.rstrip("/").split("/")
        i = _magic_index(parts)
        prefix = spec[: len(spec) - len(rest)]
        base = "/".join(parts[:i])
        return pafs.LocalFileSystem(), unquote(base) or "/", prefix + base, _parts(parts[i:])
    if "://" not in spec:
        parts = os.path.abspath(spec).split("/")
        i = _magic_index(parts)
        return pafs.LocalFileSystem(), "/".join(parts[:i]) or "/", None, parts[i:]
    scheme, _, rest = spec.partition("://")
    parts = rest.rstrip("/").split("/")
    i = max(_magic_index(parts), 1)  # the first component is the authority (host, bucket)
    base_uri = f"{scheme}://" + "/".join(parts[:i])
    try:
        fs, base = pafs.FileSystem.from_uri(base_uri)
    except (OSError, ValueError) as e:
        raise OdfChainError(f"input {spec}: not a path or a known URI ({e})") from None
    return fs, base, base_uri, _parts(parts[i:])


def _parts(raw: list[str]) -> list[str]:
    return [unquote(p) for p in raw if p]


def _info(fs: pafs.FileSystem, path: str, spec: str) -> pafs.FileInfo:
    try:
        return fs.get_file_info(path)
    except OSError as e:
        raise StorageError(f"input {spec}: {e}") from None


def _list_dir(fs: pafs.FileSystem, path: str, spec: str) -> list[pafs.FileInfo]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as e:
        raise StorageError(f"input {spec}: cannot list {path}: {e}") from None
    return sorted(infos, key=lambda i: i.base_name)


def _expand_one(spec: str) -> list[_Located]:
    fs, base, base_uri, rest = _anchor(spec)
    literal = "/".join([base.rstrip("/"), *rest])
    if rest and _info(fs, literal, spec).type != pafs.FileType.NotFound:
        # an existing name that merely contains glob characters ("f[1].csv") is taken as it is
        base, rest = literal, []
        base_uri = None if base_uri is None else spec

    def uri_of(rel: list[str]) -> str:
        if base_uri is None:
            return Path(base, *rel).as_uri()
        if not rel:
            return base_uri
        return base_uri.rstrip("/") + "/" + "/".join(quote(r) for r in rel)

    def join(path: str, name: str) -> str:
        return path.rstrip("/") + "/" + name

    # Walk the components left, listing a directory for each one with a glob character.
    candidates: list[tuple[str, list[str]]] = [(base, [])]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        matched: list[tuple[str, list[str]]] = []
        for path, rel in candidates:
            if not _glob.has_magic(part):
                matched.append((join(path, part), [*rel, part]))
                continue
            for info in _list_dir(fs, path, spec):
                name = info.base_name
                if not fnmatch.fnmatchcase(name, part) or (_skipped(name) and not _skipped(part)):
                    continue
                if last or info.type == pafs.FileType.Directory:
                    matched.append((info.path, [*rel, name]))
        candidates = matched

    out: list[_Located] = []
    for path, rel in candidates:
        info = _info(fs, path, spec)
        if info.type == pafs.FileType.File:
            out.append(_Located(uri_of(rel), fs, path))
        elif info.type == pafs.FileType.Directory:
            for entry in _list_dir(fs, path, spec):
                if entry.type == pafs.FileType.File and not _skipped(entry.base_name):
                    out.append(_Located(uri_of([*rel, entry.base_name]), fs, entry.path))
            if not out and not rest:
                raise NotFoundError(f"input {spec}: the directory holds no input files")
        elif not rest:
            raise NotFoundError(f"input {spec} does not exist")
    if not out:
        raise NotFoundError(f"input {spec}: no files match")
    return out


def expand_inputs(paths: Iterable[str]) -> list[str]:
    """The input files ``paths`` name (globs expanded, folders listed), as URIs; a missing
    input raises :class:`NotFoundError` naming it. Reads listings only: callers check inputs
    with it before starting Spark."""
    return [located.uri for located in _expand(paths)]


def _expand(paths: Iterable[str]) -> list[_Located]:
    if isinstance(paths, str | bytes | os.PathLike):
        raise OdfChainError("read_input takes a list of paths, not a single path")
    out: list[_Located] = []
    seen: set[tuple[str, str]] = set()
    for spec in paths:
        spec = os.fspath(spec)
        if not spec:
            raise OdfChainError("an input path is empty")
        for located in _expand_one(spec):
            key = (located.fs.type_name, located.path)
            if key not in seen:
                seen.add(key)
                out.append(located)
    if not out:
        raise NotFoundError("no input paths given")
    return out


def _open(fs: pafs.FileSystem, path: str):
    if isinstance(fs, pafs.LocalFileSystem):
        return open(path, "rb")
    return fs.open_input_file(path)
