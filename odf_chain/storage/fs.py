"""One dataset on any ``pyarrow.fs`` filesystem (S3, GCS, Azure, HDFS, or a local one).

Same layout and same guarantees for readers as the local backend, from what object stores do
offer: an object appears whole or not at all when its upload completes, so every data file is
written under a fresh name in ``.staging/`` and then moved into place (on stores without
rename the move is a server-side copy; readers still never see part of a file).

The head is moved by compare-and-swap where the store offers one: on S3 (and S3-compatible
stores), GCS and Azure, ``refs/head`` is replaced only if it is still the version that was
read, and blocks are created only if no object has their name (conditional writes, through
:mod:`odf_chain.storage.conditional`). A writer that loses the race gets ``ConflictError`` and
nothing it wrote is in the chain.

Other filesystems (HDFS, a local or in-memory ``pyarrow.fs`` filesystem given in code) offer no
such write: two writers that interleave could both be told they won, and one write would drop
out of the chain. Writing to them is refused unless the caller declares ``single_writer=True``
(one scheduled job, say); the head is then moved by read, compare, write and read back, and if
two writers did interleave, the head log names the overwritten head and ``verify`` fails with
``head-rollback``.

There is no lock either, so gc cannot exclude writers here: it refuses a ``min_age`` below its
default unless told the dataset has no other writer (see :mod:`odf_chain.gc`). The head log is
``logs/head`` as on a local disk, rewritten whole on each head move (conditionally where the
store can, so two writers' lines both land).

:class:`FsStorage` is put together by job: where names are and reading and writing one file in
:mod:`~odf_chain.storage.fs_files`, the head and its log in :mod:`~odf_chain.storage.fs_head`;
blocks, data slices, leftovers and derived files are here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, TypedDict, Unpack
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from odf_chain.errors import (
    IntegrityError,
    NotFoundError,
    OdfChainError,
    StorageError,
)
from odf_chain.storage.base import (
    DERIVED_DIR,
    MAX_BLOCK_BYTES,
    STAGING,
    DataCommit,
    EntryInfo,
    arrow_errors,
    check_derived,
    check_staged_size,
    check_stored_block,
)
from odf_chain.storage.block_pass import Hashes, Pass
from odf_chain.storage.conditional import ConditionalStore, gcs_emulator
from odf_chain.storage.fs_head import FsHead
from odf_chain.storage.layout import LAYOUT, SUBDIRS, SUFFIX, check_name, is_name

# pyarrow's scheme -> the Hadoop connector Spark uses for the same store
_SPARK_SCHEMES = {"s3": "s3a"}


class WriteOptions(TypedDict, total=False):
    """How an :class:`FsStorage` may write (see the module docstring)."""

    conditional: ConditionalStore | None  # the store's compare-and-swap, where it has one
    single_writer: bool  # the caller's word that nobody else writes, where it has none


class FsStorage(FsHead):
    """The files of one dataset on a ``pyarrow.fs`` filesystem. Knows bytes and names only."""

    @classmethod
    def create(
        cls,
        filesystem: pafs.FileSystem,
        root: str,
        uri: str | None = None,
        **options: Unpack[WriteOptions],
    ) -> FsStorage:
        """Lay out a new dataset; refuses one that already has a head (see LocalStorage)."""
        storage = cls(filesystem, root, uri, **options)
        storage.check_writable()
        if storage._info("refs/head").type != pafs.FileType.NotFound:
            raise OdfChainError(f"already a dataset: {storage.location}")
        for sub in SUBDIRS:
            with arrow_errors("create", storage._join(sub)):
                filesystem.create_dir(storage._join(sub), recursive=True)
        return storage

    @classmethod
    def open(
        cls,
        filesystem: pafs.FileSystem,
        root: str,
        uri: str | None = None,
        **options: Unpack[WriteOptions],
    ) -> FsStorage:
        """Open an existing dataset. Object stores have no real folders, so a head or a block
        is what makes one. Reading needs no conditional writes; writing does (or
        ``single_writer``)."""
        storage = cls(filesystem, root, uri, **options)
        if storage._info("refs/head").type == pafs.FileType.File or storage.block_names():
            return storage
        raise NotFoundError(f"not a dataset: {storage.location} (no refs/head, no blocks)")

    # -- where things are -----------------------------------------------------------------------

    def fs_path(self, relative: str) -> str:
        return self._join(relative)

    def spark_uri(self, fs_path: str) -> str:
        """``s3://bucket/x`` for pyarrow is ``s3a://bucket/x`` for Spark; other schemes (``hdfs``,
        ``gs``, ``abfs``, ``file``) are named alike by both."""
        parts = urlsplit(self._uri)
        if not parts.scheme or len(parts.scheme) == 1:  # a filesystem given in code, no URI
            return _spark_uri_for(self._fs, fs_path)
        scheme = _SPARK_SCHEMES.get(parts.scheme, parts.scheme)
        if parts.scheme in ("file", "local", "mock"):
            return f"{scheme}://{fs_path if fs_path.startswith('/') else '/' + fs_path}"
        if parts.scheme == "hdfs":  # pyarrow's HDFS paths are absolute, the host is in the URI
            return f"{scheme}://{parts.netloc}{fs_path}"
        return f"{scheme}://{fs_path}"  # bucket/key stores: the path starts with the bucket

    # -- blocks ---------------------------------------------------------------------------------

    def write_block(self, name: str, data: bytes) -> bool:
        """Store a block; True if it was not there before (see LocalStorage.write_block)."""
        relative = f"blocks/{check_name(name, 'block name')}"
        self.check_writable()
        if self._conditional is not None:  # create-only: never replaces an existing object
            if self._conditional.create(relative, data):
                return True
        elif not self._exists(relative):
            self._put(relative, data)
            return True
        check_stored_block(name, self.read_block(name), data)
        return False

    def read_block(self, name: str) -> bytes:
        relative = f"blocks/{check_name(name, 'block name')}"
        try:
            return self._read(relative, MAX_BLOCK_BYTES, "a block")
        except FileNotFoundError:
            raise NotFoundError(f"block {name} not found in {self.location}") from None
        except (OSError, StorageError) as exc:
            raise IntegrityError(f"block {name} cannot be read: {exc}") from None

    @contextlib.contextmanager
    def block_reader(self) -> Iterator[Callable[[str], bytes]]:
        """:meth:`read_block` for many blocks in a row; an object store has no directory
        descriptor to keep open, so each read is one :meth:`read_block`."""
        yield self.read_block

    def read_all_blocks(self, hashes: Hashes) -> Pass | None:
        """None: an object store reads a block per request either way (see ``block_reader``)."""
        return None

    def has_block(self, name: str) -> bool:
        return self._exists(f"blocks/{check_name(name, 'block name')}")

    def block_names(self) -> list[str]:
        return self._names("blocks")

    def block_names_starting(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` block names starting with ``prefix``. An object store lists by key
        prefix itself (one request per 1,000 matches, not a listing of every block); other
        filesystems list ``blocks/`` and filter."""
        check_name(prefix, "block hash prefix")
        if self._conditional is not None:
            names = self._conditional.names_starting(f"blocks/{prefix}", limit)
        else:
            names = [n for n in self._names("blocks") if n.startswith(prefix)]
        return sorted(n for n in names if is_name(n))[:limit]

    def remove_block(self, name: str) -> bool:
        return self._remove(f"blocks/{check_name(name, 'block name')}")

    def _remove(self, relative: str) -> bool:
        if not self._exists(relative):
            return False
        if self._conditional is not None:  # no folder marker put back
            self._conditional.delete(relative)
            return True
        with arrow_errors("remove", self._join(relative)):
            self._fs.delete_file(self._join(relative))
        return True

    # -- data slices ----------------------------------------------------------------------------

    def stage_file(self, suffix: str = "") -> str:
        """A fresh staging path for one file (not created: object stores create on upload)."""
        if not SUFFIX.fullmatch(suffix):
            raise OdfChainError(f"invalid staging suffix {suffix!r}")
        self.check_writable()
        return self._staging(f"data.{secrets.token_hex(8)}{suffix}")

    def staging_area(self, prefix: str) -> str:
        """A fresh folder path under ``.staging/`` for a writer such as Spark to fill."""
        check_name(prefix, "staging prefix")
        self.check_writable()
        return self._staging(f"{prefix}-{secrets.token_hex(16)}")

    def _check_staged(self, staged: str) -> str:
        """``staged`` if it names an entry strictly inside ``.staging/`` (``.staging/..`` would
        make a discard remove the dataset)."""
        staged = str(staged)
        parts = staged.removeprefix(self._join(STAGING) + "/").split("/")
        if not staged.startswith(self._join(STAGING) + "/") or any(
            p in ("", ".", "..") for p in parts
        ):
            raise OdfChainError(f"{staged} is not in {self._join(STAGING)} (strictly inside it)")
        return staged

    def commit_data(self, staged: str, name: str, size: int | None = None) -> DataCommit:
        """Move a staged file to ``data/<name>``. An existing slice of that name and size is
        kept (names are content hashes) and the staged copy dropped; a size mismatch is an
        IntegrityError that leaves the staged copy for :meth:`discard`. ``size``, when given,
        is what the writer wrote: a staged object of another size (a store or proxy that
        altered the upload) is refused before anything moves."""
        staged = self._check_staged(staged)
        target = self._join(f"data/{check_name(name, 'data slice name')}")
        if self._conditional is not None:
            return self._commit_object(staged, name, target, size)
        with arrow_errors("store", target):
            size = check_staged_size(name, self._fs.get_file_info(staged).size, size)
            existing = self._fs.get_file_info(target)
            if existing.type == pafs.FileType.File:
                if existing.size != size:
                    raise IntegrityError(
                        f"data slice {name} already stored with size {existing.size}, "
                        f"staged copy has {size}"
                    )
                self._fs.delete_file(staged)
                return DataCommit(target, False)
            self._fs.move(staged, target)
        return DataCommit(target, True)

    def _commit_object(self, staged: str, name: str, target: str, size: int | None) -> DataCommit:
        """:meth:`commit_data` on an object store: a HEAD each for the staged and the stored
        object, then a server-side copy and a delete (``pyarrow.fs`` would also list each
        missing name as a folder and put a marker back for the emptied ``.staging/``)."""
        assert self._conditional is not None
        staged_size = self._conditional.size(self._relative(staged))
        if staged_size is None:
            raise StorageError(f"cannot store {target}: the staged object {staged} is missing")
        size = check_staged_size(name, staged_size, size)
        existing = self._conditional.size(f"data/{name}")
        if existing is not None:
            if existing != size:
                raise IntegrityError(
                    f"data slice {name} already stored with size {existing}, staged copy has {size}"
                )
            self._conditional.delete(self._relative(staged))
            return DataCommit(target, False)
        self._conditional.move(self._relative(staged), f"data/{name}")
        return DataCommit(target, True)

    def discard(self, staged: str) -> None:
        self._delete_quietly(self._check_staged(staged))

    def discard_area(self, area: str) -> None:
        area = self._check_staged(area)
        with contextlib.suppress(OSError):
            self._fs.delete_dir(area)

    def remove_empty_layout(self) -> None:
        """Nothing to remove: an object store has no folders of its own (a marker a create may
        leave does not make a dataset), and deleting a "folder" there deletes every object under
        it, which another writer may be putting there right now."""

    def data_path(self, name: str) -> str:
        return self._join(f"data/{check_name(name, 'data slice name')}")

    def has_data(self, name: str) -> bool:
        return self._exists(f"data/{check_name(name, 'data slice name')}")

    def data_names(self) -> list[str]:
        return self._names("data")

    def remove_data(self, name: str) -> bool:
        return self._remove(f"data/{check_name(name, 'data slice name')}")

    def open_data(self, name: str) -> BinaryIO:
        path = self.data_path(name)
        try:
            self._file_info(f"data/{name}")
            return self._fs.open_input_file(path)
        except FileNotFoundError:
            raise NotFoundError(f"data slice {name} not found in {self.location}") from None
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc

    # -- leftovers ------------------------------------------------------------------------------

    def leftover_staging(self) -> list[str]:
        selector = pafs.FileSelector(self._join(STAGING), allow_not_found=True)
        with arrow_errors("list", self._join(STAGING)):
            infos = self._fs.get_file_info(selector)
        return sorted(i.base_name for i in infos if i.type != pafs.FileType.NotFound)

    def irregular_entries(
        self, directories: Iterable[str] = ("blocks", "data", STAGING)
    ) -> list[tuple[str, str]]:
        """Object stores hold objects only (on a local filesystem pyarrow lists a symlink as
        what it points to, and reads refuse what is not a file)."""
        return []

    def check_layout(self) -> None:
        """Each layout directory that exists must be a directory."""
        for name in LAYOUT:
            info = self._info(name)
            if info.type not in (pafs.FileType.Directory, pafs.FileType.NotFound):
                raise StorageError(
                    f"{self._join(name)} is not a directory: nothing is removed through it"
                )

    def derived_batch(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to keep open between calls on an object store."""
        return contextlib.nullcontext()

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to keep open between calls on an object store."""
        return contextlib.nullcontext()

    def staged_in_use(self, name: str) -> bool:
        """Object stores carry no claims: only the minimum age (or single-writer mode) guards
        a writer's staged object."""
        return False

    def remove_staged(self, name: str) -> bool:
        if "/" in name or name in ("", ".", ".."):
            raise OdfChainError(f"{name!r} is not an entry of {self._join(STAGING)}")
        path = self._join(f"{STAGING}/{name}")
        with arrow_errors("remove", path):
            info = self._fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                self._fs.delete_dir(path)
            elif info.type == pafs.FileType.File:
                self._fs.delete_file(path)
        return True

    def entry_info(self, relative: str) -> EntryInfo | None:
        info = self._info(relative)
        if info.type == pafs.FileType.NotFound:
            return None
        if info.type == pafs.FileType.File:
            return EntryInfo(_seconds(info), info.size or 0)
        selector = pafs.FileSelector(self._join(relative), recursive=True)
        with arrow_errors("list", self._join(relative)):
            entries = self._fs.get_file_info(selector)
        files = [i for i in entries if i.type == pafs.FileType.File]
        # folders count too where they have a time (see LocalStorage.entry_info); object
        # stores give them none
        times = [_seconds(i) for i in files] + [
            i.mtime.timestamp()
            for i in (info, *entries)
            if i.type == pafs.FileType.Directory and i.mtime is not None
        ]
        return EntryInfo(max(times, default=_seconds(info)), sum(i.size or 0 for i in files))

    # -- derived files (info/): kept simple, an object store gets its own backend later -------

    def read_derived(self, relative: str, limit: int) -> bytes | None:
        path = f"{DERIVED_DIR}/{check_derived(relative)}"
        try:  # a cache: a folder in a missing file's place is as good as missing
            return self._read(path, limit, "a derived file", folders=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {self._join(path)}: {exc}") from exc

    def read_derived_range(
        self, relative: str, start: int, length: int, limit: int
    ) -> tuple[int, bytes] | None:
        """Read whole and cut (one GET on an object store, where a ranged read would take a
        HEAD and a GET): bounded by ``limit`` as :meth:`read_derived` is. For a caller that
        reads a file's end once, not one that reads many parts of it."""
        data = self.read_derived(relative, limit)
        if data is None:
            return None
        offset = min(start, len(data)) if start >= 0 else max(len(data) + start, 0)
        return len(data), data[offset : offset + max(length, 0)]

    def write_derived(self, relative: str, data: bytes, *, durable: bool = False) -> None:
        """``durable`` changes nothing: an object store's upload is durable once it returns."""
        path = f"{DERIVED_DIR}/{check_derived(relative)}"
        parent = path.rpartition("/")[0]
        # local and HDFS filesystems need the folder; object stores have none
        if parent not in self._derived_dirs and self._conditional is None:
            with arrow_errors("create", self._join(parent)):
                self._fs.create_dir(self._join(parent), recursive=True)
            self._derived_dirs.add(parent)
        self._put(path, data)

    def overwrite_derived(self, relative: str, data: bytes) -> None:
        """An object is replaced whole by its upload anyway."""
        self.write_derived(relative, data)

    def patch_derived(self, relative: str, offset: int, data: bytes) -> bool:
        """Read, cut and rewrite the whole file: objects cannot be appended to."""
        existing = self.read_derived(relative, offset + (1 << 20)) or b""
        if len(existing) < offset:
            return False
        self.write_derived(relative, existing[:offset] + data)
        return True

    def remove_derived(self, relative: str) -> None:
        path = self._join(f"{DERIVED_DIR}/{check_derived(relative)}")
        with arrow_errors("remove", path):
            info = self._fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                self._fs.delete_dir(path)
            elif info.type == pafs.FileType.File:
                self._fs.delete_file(path)

    def list_derived(self, directory: str) -> list[str]:
        path = self._join(f"{DERIVED_DIR}/{check_derived(directory)}")
        with arrow_errors("list", path):
            infos = self._fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


# Azurite's account and key, the same for every installation (Microsoft documents them; obstore
# uses them with AZURE_STORAGE_USE_EMULATOR)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def emulator_filesystem(uri: str) -> tuple[pafs.FileSystem, str] | None:
    """The filesystem and path of ``uri`` on the emulator the environment names, with the
    variables the conditional writes read too (:mod:`odf_chain.storage.conditional`), so that
    data files and the head reach the same store; None when none is named.

    ``gs://bucket/x`` with ``STORAGE_EMULATOR_HOST``: anonymous, at that host (``pyarrow.fs``
    reads no such variable and would look for Google credentials). ``az://container/x`` (or
    ``azure://``; ``pyarrow.fs`` knows neither) with ``AZURE_STORAGE_USE_EMULATOR=true``:
    Azurite's account and key (or ``AZURE_STORAGE_ACCOUNT_NAME``/``_KEY``) at
    ``AZURITE_BLOB_STORAGE_URL`` (default ``http://127.0.0.1:10000``), as obstore reaches it."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    path = f"{parts.netloc}{parts.path}".rstrip("/")
    if scheme in ("gs", "gcs") and gcs_emulator():
        base = urlsplit(gcs_emulator())
        return pafs.GcsFileSystem(
            anonymous=True, endpoint_override=base.netloc, scheme=base.scheme or "http"
        ), path
    emulated = os.environ.get("AZURE_STORAGE_USE_EMULATOR", "").lower() in ("1", "true", "yes")
    if scheme in ("az", "azure") and emulated:
        base = urlsplit(os.environ.get("AZURITE_BLOB_STORAGE_URL") or "http://127.0.0.1:10000")
        filesystem = pafs.AzureFileSystem(
            account_name=os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or AZURITE_ACCOUNT,
            account_key=os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or AZURITE_KEY,
            blob_storage_authority=base.netloc,
            dfs_storage_authority=base.netloc,
            blob_storage_scheme=base.scheme or "http",
            dfs_storage_scheme=base.scheme or "http",
        )
        return filesystem, path
    return None


def one_put_per_small_file(filesystem: pafs.FileSystem) -> pafs.FileSystem:
    """``filesystem``, or for S3 the same filesystem that uploads a file below the multipart
    part size (10 MiB) in one PUT when it is closed, instead of a multipart upload of three
    requests (pyarrow does so only with ``allow_delayed_open``). Either way an object appears
    whole when its upload completes; with the option an error such as a missing bucket is
    reported when the file is closed, which every writer here does inside its error handling.
    The options are carried over through pickling's own reconstruction of the filesystem."""
    if not isinstance(filesystem, pafs.S3FileSystem):
        return filesystem
    rebuild, args = filesystem.__reduce__()
    options = args[0] if len(args) == 1 and isinstance(args[0], dict) else None
    if options is None or options.get("allow_delayed_open", True):
        return filesystem
    return rebuild({**options, "allow_delayed_open": True})


def _spark_uri_for(filesystem: pafs.FileSystem, fs_path: str) -> str:
    """How Spark names ``fs_path`` of a filesystem known only as an object."""
    if isinstance(filesystem, pafs.SubTreeFileSystem):
        inner = f"{filesystem.base_path.rstrip('/')}/{fs_path.lstrip('/')}"
        return _spark_uri_for(filesystem.base_fs, inner)
    if isinstance(filesystem, pafs.LocalFileSystem):
        return f"file://{fs_path if fs_path.startswith('/') else '/' + fs_path}"
    kind = filesystem.type_name
    if kind == "s3":
        return f"s3a://{fs_path}"
    if kind == "gcs":
        return f"gs://{fs_path}"
    raise OdfChainError(
        f"Spark cannot reach a dataset on a {kind!r} filesystem given in code: name the dataset "
        "by a URI Spark also understands (s3://..., gs://..., hdfs://host:port/..., abfs://...)"
    )


def _seconds(info: pafs.FileInfo) -> float:
    mtime = info.mtime
    return mtime.timestamp() if mtime is not None else time.time()
