"""One dataset directory on the local filesystem.

Layout (ODF's): ``blocks/<hash>`` immutable blocks, ``refs/head`` the head block hash,
``data/<hash>`` Parquet slices, ``checkpoints/``, ``info/`` (derived) and a hidden ``.staging/``
for in-flight writes. Every file appears by fsync + rename, so a reader (or a crash) never sees
half a file; the head moves only by compare-and-swap under an OS lock that dies with its holder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow.fs as pafs

from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    StorageError,
)
from odf_chain.storage.base import STAGING, DataCommit, EntryInfo

_NAME = re.compile(r"[0-9a-zA-Z]+")
_SUFFIX = re.compile(r"[0-9a-zA-Z._-]*")
_SUBDIRS = ("blocks", "refs", "data", "checkpoints", "info")
LOCK_TIMEOUT = 30.0
_LOCK_POLL = 0.005
# link(2) refusals that mean "this filesystem has no hard links", not "something is wrong"
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def _storage_error(exc: OSError, action: str, path: Path | str) -> StorageError:
    """Name the path an operation was about, and the file the OS refused if that differs."""
    detail = exc.strerror or str(exc)
    if exc.filename is not None and os.fsdecode(exc.filename) != str(path):
        detail += f" ({os.fsdecode(exc.filename)})"
    return StorageError(f"cannot {action} {path}: {detail}")


@contextlib.contextmanager
def _os_errors(action: str, path: Path | str) -> Iterator[None]:
    """Turn an OSError raised inside the block into a :class:`StorageError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise _storage_error(exc, action, path) from exc


def _is_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is a bare multibase string; a name is joined onto a directory, so
    anything else (``..``, ``/``, empty) could escape it and is refused."""
    if not _is_name(name):
        raise OdfChainError(f"invalid {what} {name!r}: expected [0-9a-zA-Z]+")
    return name


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename into it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_unique(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """Create a new, uniquely named file; unlike ``mkstemp`` it honours the umask (0666 base), so
    datasets stay readable by the people the umask allows, not only their writer."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        path = directory / f"{prefix}{secrets.token_hex(8)}{suffix}"
        try:
            return os.open(path, flags, 0o666), str(path)
        except FileExistsError:
            continue


def write_atomic(path: Path, data: bytes, staging_dir: Path | None = None) -> None:
    """Make ``path`` hold ``data`` all at once: write a unique staging file (in ``staging_dir``,
    default ``path``'s directory; it must be on the same filesystem), fsync, rename, fsync dir."""
    staging_dir = path.parent if staging_dir is None else staging_dir
    fd, tmp = _create_unique(staging_dir, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _install_new(source: Path | str, target: Path) -> bool:
    """Give ``target`` the content of ``source`` unless ``target`` exists; True if this call
    created it. A hard link creates atomically, so of several processes installing the same
    name exactly one gets True; ``source`` stays (the caller removes it). Without hard links
    ``source`` is renamed instead: still correct, but two racing creators may both get True."""
    try:
        os.link(source, target)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
    if os.path.lexists(target):
        return False
    os.rename(source, target)
    return True


def _names(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as it:
            return sorted(e.name for e in it if _is_name(e.name) and e.is_file())
    except FileNotFoundError:
        raise NotFoundError(f"{directory} is missing") from None
    except OSError as exc:
        raise _storage_error(exc, "list", directory) from exc


class LocalStorage:
    """The files of one dataset. Knows bytes and names only, never what a block means."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @classmethod
    def create(cls, root: str | Path) -> LocalStorage:
        """Lay out a new dataset; refuses a directory that already has a head, so an existing
        chain can never be silently forked or overwritten.

        Blocks without a head (a Seed written by a create that crashed before moving the head)
        do not count: they are unreferenced leftovers, and refusing them would make the
        directory unusable for good. Two creates racing on one directory both get here; the
        first Seed's head move (expected: no head) then wins and the other gets a conflict.
        """
        root = Path(root)
        with _os_errors("create a dataset in", root):
            if root.exists() and not root.is_dir():
                raise OdfChainError(f"cannot create a dataset in {root}: not a directory")
            root.mkdir(parents=True, exist_ok=True)
            head = root / "refs" / "head"
            if head.exists() or head.is_symlink():
                raise OdfChainError(f"already a dataset: {root}")
            for sub in _SUBDIRS:
                (root / sub).mkdir(exist_ok=True)
            fsync_dir(root)
        return cls(root)

    @classmethod
    def open(cls, root: str | Path) -> LocalStorage:
        """Open an existing dataset; ``blocks/`` and ``refs/`` are what make it one."""
        root = Path(root)
        for sub in ("blocks", "refs"):
            with _os_errors("open a dataset in", root):
                is_dir = (root / sub).is_dir()
            if not is_dir:
                raise NotFoundError(f"not a dataset: {root} (no {sub}/ directory)")
        return cls(root)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def location(self) -> str:
        return str(self._root)

    @property
    def filesystem(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem()

    def fs_path(self, relative: str) -> str:
        return str(self._root.absolute() / relative)

    def spark_uri(self, fs_path: str) -> str:
        """``file://`` and the plain path: without a scheme Spark would resolve it against the
        cluster's default filesystem (HDFS, say); Hadoop does not percent-decode paths."""
        return f"file://{fs_path}"

    @property
    def info_dir(self) -> Path:
        return self._root / "info"

    @property
    def staging_dir(self) -> Path:
        """``.staging/``, created on demand: it sits on the dataset's filesystem, so a rename
        out of it is atomic."""
        path = self._root / STAGING
        with _os_errors("create", path):
            path.mkdir(exist_ok=True)
        return path

    # -- blocks ---------------------------------------------------------------------------------

    def _block_path(self, name: str) -> Path:
        return self._root / "blocks" / check_name(name, "block name")

    def write_block(self, name: str, data: bytes) -> bool:
        """Store a block; True if this call created the file, False if it was already there.

        Names are content hashes, so rewriting the same bytes is a no-op and different bytes
        under an existing name mean something is corrupt. Of writers racing to store the same
        name exactly one gets True: a writer that then loses the head race can
        :meth:`remove_block` exactly what it created.
        """
        path = self._block_path(name)
        with _os_errors("check", path):
            exists = path.exists()
        if not exists:
            staging = self.staging_dir
            with _os_errors("write", path):
                fd, tmp = _create_unique(staging, f".{name}.", ".tmp")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    created = _install_new(tmp, path)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
                if created:
                    fsync_dir(path.parent)
                    return True
        if self.read_block(name) != data:
            raise IntegrityError(f"block {name} already stored with different content")
        return False

    def read_block(self, name: str) -> bytes:
        try:
            return self._block_path(name).read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"block {name} not found in {self._root}") from None
        except OSError as exc:  # a directory or unreadable file where a block should be
            raise IntegrityError(f"block {name} cannot be read: {exc.strerror}") from None

    def has_block(self, name: str) -> bool:
        path = self._block_path(name)
        with _os_errors("check", path):
            return path.is_file()

    def block_names(self) -> list[str]:
        return _names(self._root / "blocks")

    def remove_block(self, name: str) -> bool:
        """Delete ``blocks/<name>``; True if it was there. Checks nothing: meant for a writer
        removing the block it created (``write_block`` returned True) after losing the head
        race. Removing a block the chain references breaks the dataset."""
        return self._remove(self._block_path(name))

    def _remove(self, path: Path) -> bool:
        with _os_errors("remove", path):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
        return True

    # -- data slices ----------------------------------------------------------------------------

    def stage_file(self, suffix: str = "") -> Path:
        """A fresh, empty, uniquely named file in ``.staging/`` for a writer to fill before
        :meth:`commit_data`; the name is reserved by creating it."""
        if not _SUFFIX.fullmatch(suffix):
            raise OdfChainError(f"invalid staging suffix {suffix!r}")
        staging = self.staging_dir
        with _os_errors("create a staging file in", staging):
            fd, tmp = _create_unique(staging, "data.", suffix)
            os.close(fd)
        return Path(tmp)

    def _check_staged(self, staged: Path) -> Path:
        staged = Path(staged)
        staging = self.staging_dir
        with _os_errors("resolve", staged):
            # anywhere under staging: writers such as Spark fill a folder of their own there
            inside = staged.parent.resolve().is_relative_to(staging.resolve())
        if not inside:
            raise OdfChainError(f"{staged} is not in {self.staging_dir}")
        return staged

    def commit_data(self, staged: Path, name: str) -> DataCommit:
        """Move a filled staging file to ``data/<name>`` durably; say whether this call created
        the file (see :class:`DataCommit`).

        Names are content hashes, so an existing slice of the same size holds the same bytes,
        or should: the staged copy is renamed over it, which repairs a damaged one. A size
        mismatch means the name does not fit one of the two files: IntegrityError, the staged
        file is left for :meth:`discard`. Of writers racing to store the same name exactly one
        gets ``created=True`` (see :meth:`remove_data`).
        """
        staged = self._check_staged(staged)
        target = self.data_path(name)
        with _os_errors("store", target):
            with open(staged, "rb") as f:
                os.fsync(f.fileno())
                size = os.fstat(f.fileno()).st_size
            created = _install_new(staged, target)
            if created:
                with contextlib.suppress(FileNotFoundError):  # gone if renamed, not linked
                    os.unlink(staged)
            else:
                existing = target.stat().st_size
                if existing != size:
                    raise IntegrityError(
                        f"data slice {name} already stored with size {existing}, "
                        f"staged copy has {size}"
                    )
                os.replace(staged, target)
            # A rename keeps the time the writer made the file, which may be long ago (Spark
            # wrote it before the hashing); gc judges a leftover's age by it, so the slice must
            # look as new as its commit: until the head names it, it is a fresh orphan.
            os.utime(target)
            fsync_dir(target.parent)
        return DataCommit(target, created)

    def discard(self, staged: Path) -> None:
        """Drop a staged file (an abandoned write); missing is fine."""
        staged = self._check_staged(staged)
        with _os_errors("remove", staged):
            staged.unlink(missing_ok=True)

    def data_path(self, name: str) -> Path:
        return self._root / "data" / check_name(name, "data slice name")

    def has_data(self, name: str) -> bool:
        path = self.data_path(name)
        with _os_errors("check", path):
            return path.is_file()

    def data_names(self) -> list[str]:
        return _names(self._root / "data")

    def remove_data(self, name: str) -> bool:
        """Delete ``data/<name>``; True if it was there. Checks nothing, like
        :meth:`remove_block`: for a writer removing the slice it created (``created=True``)
        after losing the head race."""
        return self._remove(self.data_path(name))

    def open_data(self, name: str) -> BinaryIO:
        """The slice for reading; the caller closes it. Errors while reading from the handle are
        plain ``OSError``s: the caller is the one reading."""
        path = self.data_path(name)
        try:
            return open(path, "rb")
        except FileNotFoundError:
            raise NotFoundError(f"data slice {name} not found in {self._root}") from None
        except OSError as exc:
            raise _storage_error(exc, "open", path) from exc

    def staging_area(self, prefix: str) -> str:
        """A fresh folder under ``.staging/`` for a writer such as Spark to fill (not created:
        the writer creates it)."""
        check_name(prefix, "staging prefix")
        return str(self.staging_dir.absolute() / f"{prefix}-{secrets.token_hex(16)}")

    def discard_area(self, area: str) -> None:
        """Remove a writer's staging folder and whatever is left in it."""
        path = self._check_staged(Path(area))
        shutil.rmtree(path, ignore_errors=True)

    def leftover_staging(self) -> list[str]:
        """Names of the entries of ``.staging/`` (files, and the folders writers such as Spark
        fill): orphans of writers that crashed, or that are still writing."""
        path = self._root / STAGING
        try:
            with os.scandir(path) as it:
                return sorted(e.name for e in it if e.is_file() or e.is_dir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _storage_error(exc, "list", path) from exc

    def remove_staged(self, name: str) -> None:
        """Delete one entry of ``.staging/`` (a file or a writer's folder), for gc."""
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise OdfChainError(f"{name!r} is not an entry of {self._root / STAGING}")
        entry = self._root / STAGING / name
        with _os_errors("remove", entry):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink(missing_ok=True)

    def entry_info(self, relative: str) -> EntryInfo | None:
        """Newest modification time and total size of a file or folder of the dataset."""
        path = self._root / relative
        with _os_errors("check", path):
            if not (path.exists() or path.is_symlink()):
                return None
            if path.is_dir():
                files = [p.lstat() for p in path.rglob("*") if p.is_file()]
                newest = max((f.st_mtime for f in files), default=path.stat().st_mtime)
                return EntryInfo(newest, sum(f.st_size for f in files))
            stat = path.lstat()
            return EntryInfo(stat.st_mtime, stat.st_size)

    # -- head -----------------------------------------------------------------------------------

    @property
    def _head_path(self) -> Path:
        return self._root / "refs" / "head"

    def read_head(self) -> str | None:
        """The head block hash, or None for a dataset with no blocks yet."""
        try:
            text = self._head_path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return None
        except OSError as exc:  # a directory, or an unreadable file
            raise _storage_error(exc, "read", self._head_path) from exc
        head = text.removesuffix("\n")
        if not _is_name(head):
            raise FormatError(f"{self._head_path}: invalid head {head!r}")
        return head

    @contextlib.contextmanager
    def head_lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the exclusive head lock: ``flock`` on ``refs/.head.lock``. The OS drops it when
        the holder's process dies, so a crashed writer never leaves a stale lock behind."""
        lock_path = self._root / "refs" / ".head.lock"
        with _os_errors("open the head lock", lock_path):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise _storage_error(e, "lock", lock_path) from e
                if time.monotonic() >= deadline:
                    raise ConflictError(f"could not lock {lock_path} within {timeout:g} s")
                time.sleep(_LOCK_POLL)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def compare_and_swap_head(
        self, expected: str | None, new: str, *, timeout: float = LOCK_TIMEOUT
    ) -> None:
        """Point the head at ``new`` only if it still is ``expected``: of two writers appending
        to the same head, exactly one wins and the other learns so before anything is visible."""
        check_name(new, "head")
        if expected is not None:
            check_name(expected, "expected head")
        with self.head_lock(timeout):
            current = self.read_head()
            if current != expected:
                raise ConflictError(
                    f"head moved: expected {expected or 'no head'}, found "
                    f"{current or 'no head'}; another writer appended first — re-open and retry"
                )
            staging = self.staging_dir
            with _os_errors("write", self._head_path):
                write_atomic(self._head_path, new.encode("ascii"), staging)
