"""Where a dataset's bytes live: a local directory, or any ``pyarrow.fs`` filesystem.

A plain path (or a ``file://`` URI) is served by :class:`LocalStorage` (fsync, rename, an OS
lock around the head). Any other URI that ``pyarrow.fs`` understands (``s3://``, ``gs://``,
``hdfs://``, ``abfs://``, ...) is served by :class:`FsStorage`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from odf_chain.errors import StorageError
from odf_chain.storage.base import (
    BlockStore,
    ChainStore,
    DataCommit,
    DataStore,
    DerivedStore,
    EntryInfo,
    HeadStore,
    LeftoverStore,
    Located,
    Place,
    Storage,
)
from odf_chain.storage.layout import check_name
from odf_chain.storage.local import LocalStorage
from odf_chain.storage.local_files import fsync_dir, write_atomic

if TYPE_CHECKING:  # pyarrow.fs and the filesystem storage load when a URI or filesystem is given
    import pyarrow.fs as pafs

    from odf_chain.storage.fs import FsStorage

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")

__all__ = [
    "BlockStore",
    "ChainStore",
    "DataCommit",
    "DataStore",
    "DerivedStore",
    "EntryInfo",
    "FsStorage",
    "HeadStore",
    "LeftoverStore",
    "LocalStorage",
    "Located",
    "Place",
    "Storage",
    "check_name",
    "create_storage",
    "fsync_dir",
    "is_uri",
    "local_path",
    "open_storage",
    "write_atomic",
]


def __getattr__(name: str) -> Any:
    """``FsStorage`` on first use: a local dataset never needs ``pyarrow.fs``."""
    if name == "FsStorage":
        from odf_chain.storage.fs import FsStorage

        return FsStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_local_filesystem(filesystem: object) -> bool:
    if filesystem is None:
        return False
    import pyarrow.fs as pafs

    return isinstance(filesystem, pafs.LocalFileSystem)


def is_uri(location: str | Path) -> bool:
    return isinstance(location, str) and bool(_URI.match(location))


def local_path(location: str | Path) -> Path | None:
    """The local path ``location`` names (a path or a ``file://`` URI), else None."""
    if not is_uri(location):
        return Path(location)
    parts = urlsplit(str(location))
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    return None


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow.fs as pafs

    from odf_chain.storage.fs import emulator_filesystem, one_put_per_small_file

    try:
        filesystem, path = emulator_filesystem(uri) or pafs.FileSystem.from_uri(uri)
    except (OSError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # not a dlopen dump
        raise StorageError(f"cannot open a filesystem for {uri}: {first}") from None
    return one_put_per_small_file(filesystem), path


def _fs_storage(
    factory, location: str, filesystem: pafs.FileSystem | None, single_writer: bool
) -> Storage:
    """An FsStorage for a URI (with the conditional writes its store offers) or for a path in
    a filesystem given in code (none: writing there needs ``single_writer``)."""
    from odf_chain.storage.conditional import ConditionalStore

    if filesystem is not None:
        return factory(filesystem, location, single_writer=single_writer)
    return factory(
        *_filesystem(location),
        location,
        conditional=ConditionalStore.for_uri(location),
        single_writer=single_writer,
    )


def create_storage(
    location: str | Path, filesystem: pafs.FileSystem | None = None, *, single_writer: bool = False
) -> Storage:
    """Lay out a new dataset at ``location``: a path or a URI, or a path in ``filesystem``
    (for a filesystem configured in code, say an ``S3FileSystem`` with its own credentials).
    ``single_writer`` allows writing on a filesystem without conditional writes (see
    :mod:`odf_chain.storage.fs`)."""
    if _is_local_filesystem(filesystem):  # fsync, rename and a real head lock
        return LocalStorage.create(Path(location))
    path = local_path(location) if filesystem is None else None
    if path is not None:
        return LocalStorage.create(path)
    from odf_chain.storage.fs import FsStorage

    return _fs_storage(FsStorage.create, str(location), filesystem, single_writer)


def open_storage(
    location: str | Path, filesystem: pafs.FileSystem | None = None, *, single_writer: bool = False
) -> Storage:
    """Open the dataset at ``location`` (a path or a URI, or a path in ``filesystem``)."""
    if _is_local_filesystem(filesystem):
        return LocalStorage.open(Path(location))
    path = local_path(location) if filesystem is None else None
    if path is not None:
        return LocalStorage.open(path)
    from odf_chain.storage.fs import FsStorage

    return _fs_storage(FsStorage.open, str(location), filesystem, single_writer)
