"""What every storage backend offers the layers above it.

Two backends implement it: :class:`~odf_chain.storage.local.LocalStorage` (a directory on the
local filesystem: fsync, rename, an OS lock for the head) and
:class:`~odf_chain.storage.fs.FsStorage` (any ``pyarrow.fs`` filesystem: S3, GCS, HDFS, ...).
Names are content hashes; ``staged`` values are paths inside :attr:`Storage.filesystem`.
"""

from __future__ import annotations

import contextlib
from typing import BinaryIO, NamedTuple, Protocol

import pyarrow.fs as pafs

from odf_chain.errors import StorageError

STAGING = ".staging"


class DataCommit(NamedTuple):
    """What ``commit_data`` did: where the slice is, and whether this call created
    ``data/<name>`` (False: a file of that name was already there)."""

    path: object
    created: bool


class EntryInfo(NamedTuple):
    """Age and size of a leftover (a file, or a writer's folder: the sum of its files)."""

    mtime: float
    size: int


class Storage(Protocol):
    """The bytes of one dataset: blocks, the head, data slices and a staging area."""

    @property
    def location(self) -> str:
        """Where the dataset is, as the user named it (a path or a URI)."""

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The ``pyarrow.fs`` filesystem the dataset is on (picklable: Spark tasks use it)."""

    def fs_path(self, relative: str) -> str:
        """``relative`` (``data/<hash>``, ``.staging/...``) as a path in :attr:`filesystem`."""

    def spark_uri(self, fs_path: str) -> str:
        """A path of :attr:`filesystem` as Spark (Hadoop) names it."""

    # blocks
    def write_block(self, name: str, data: bytes) -> bool: ...
    def read_block(self, name: str) -> bytes: ...
    def has_block(self, name: str) -> bool: ...
    def block_names(self) -> list[str]: ...
    def remove_block(self, name: str) -> bool: ...

    # data slices
    def stage_file(self, suffix: str = "") -> object: ...
    def staging_area(self, prefix: str) -> str: ...
    def commit_data(self, staged: object, name: str) -> DataCommit: ...
    def discard(self, staged: object) -> None: ...
    def discard_area(self, area: str) -> None: ...
    def has_data(self, name: str) -> bool: ...
    def data_names(self) -> list[str]: ...
    def remove_data(self, name: str) -> bool: ...
    def open_data(self, name: str) -> BinaryIO: ...

    # leftovers (for verify and gc)
    def leftover_staging(self) -> list[str]: ...
    def remove_staged(self, name: str) -> None: ...
    def entry_info(self, relative: str) -> EntryInfo | None: ...

    # head
    def read_head(self) -> str | None: ...
    def compare_and_swap_head(self, expected: str | None, new: str) -> None: ...


@contextlib.contextmanager
def arrow_errors(action: str, where: str):
    """Turn pyarrow's I/O errors (``OSError`` subclasses) into a StorageError naming ``where``."""
    try:
        yield
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot {action} {where}: {exc}") from exc
