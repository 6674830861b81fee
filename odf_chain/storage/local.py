"""One dataset directory on the local filesystem.

Layout (ODF's): ``blocks/<hash>`` immutable blocks, ``refs/head`` the head block hash,
``data/<hash>`` Parquet slices, ``checkpoints/``, ``info/`` (derived) and a hidden ``.staging/``
for in-flight writes. Every file appears by fsync + rename, so a reader (or a crash) never sees
half a file; the head moves only by compare-and-swap under an OS lock that dies with its holder,
and every move is appended to ``logs/head`` (git's reflog), so a head that moved back is known.

Reads never follow a symlink below the dataset root (the root itself may be one: it is the
user's path), take regular files only (a FIFO cannot block a read, a device cannot feed one
forever) and are bounded by the limits in :mod:`odf_chain.storage.base`. Deletions go through
directory descriptors opened the same way, so nothing outside the dataset can be removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
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
from odf_chain.storage import block_pass
from odf_chain.storage.base import (
    DERIVED_DIR,
    HEAD_LOG,
    MAX_BLOCK_BYTES,
    MAX_HEAD_BYTES,
    MAX_HEAD_LOG_BYTES,
    STAGING,
    DataCommit,
    EntryInfo,
    HeadMove,
    check_derived,
    check_staged_size,
    head_log_line,
    last_complete_line,
    logged_head,
    parse_head_log,
    shown,
)
from odf_chain.storage.block_pass import Hashes
from odf_chain.storage.user_files import file_kind, read_at_most

_SUFFIX = re.compile(r"[0-9a-zA-Z._-]*")
_SUBDIRS = ("blocks", "refs", "data", "checkpoints", "info", "logs")
# every directory of the layout: gc refuses to work through any of them that is not a directory
LAYOUT = ("blocks", "refs", "data", STAGING, "checkpoints", "info", "logs")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO slip in between the lstat and the open, the open does not wait
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOG_TAIL = 4096  # a head log line is ~160 bytes: the last one is in this many
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


def _lstat(name: str, dir_fd: int) -> os.stat_result:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def _open_regular_at(dir_fd: int, name: str, path: Path | str) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file ``name`` in the directory ``dir_fd`` (``path``
    names it in errors), and its status: never a symlink, FIFO or device (checked before
    opening and again on the opened file)."""
    before = _lstat(name, dir_fd)
    if not stat.S_ISREG(before.st_mode):
        raise StorageError(f"{path} is not a regular file ({file_kind(before.st_mode)}): not read")
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise StorageError(f"{path} was replaced while being opened: not read")
    return fd, opened


def _read_regular_at(dir_fd: int, name: str, path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``name`` in ``dir_fd``, at most ``limit`` of them: a larger
    file is refused before reading, one that grows while read at ``limit + 1`` bytes."""
    fd, opened = _open_regular_at(dir_fd, name, path)
    try:
        too_large = f"{path} is larger than the {limit:,}-byte limit for {what}: not read"
        if opened.st_size > limit:
            raise StorageError(f"{too_large} ({opened.st_size:,} bytes)")
        data = read_at_most(fd, limit)
        if len(data) > limit:
            raise StorageError(f"{too_large} (it grew while being read)")
        return data
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_name(name: object) -> bool:
    """[0-9a-zA-Z]+: ASCII letters and digits (``isalnum`` alone takes any script's)."""
    return isinstance(name, str) and name.isascii() and name.isalnum()


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


def _create_claimed(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """:func:`_create_unique`, holding a shared lock on the new file (its claim) until the
    descriptor closes: gc removes a staged file only under an exclusive lock, so it never takes
    one a live writer is filling. A file gc took between the create and the lock is replaced."""
    while True:
        fd, path = _create_unique(directory, prefix, suffix)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.lstat(path).st_ino == os.fstat(fd).st_ino:
                return fd, path
        except FileNotFoundError:
            pass
        os.close(fd)


def write_atomic(path: Path, data: bytes, staging_dir: Path | None = None) -> None:
    """Make ``path`` hold ``data`` all at once: write a unique staging file (in ``staging_dir``,
    default ``path``'s directory; it must be on the same filesystem), fsync, rename, fsync dir."""
    staging_dir = path.parent if staging_dir is None else staging_dir
    fd, tmp = _create_claimed(staging_dir, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:  # open (the claim held) until it is in place
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


class LocalStorage:
    """The files of one dataset. Knows bytes and names only, never what a block means."""

    def __init__(self, root: Path, *, made_root: bool = False) -> None:
        self._root = root
        self._made_root = made_root  # create() made the root folder itself
        self._claims: dict[str, int] = {}  # staged path -> descriptor holding its shared lock
        self._held: dict[str, int] | None = None  # directory descriptors kept by derived_batch

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
            made_root = not root.exists()
            root.mkdir(parents=True, exist_ok=True)
            head = root / "refs" / "head"
            if head.exists() or head.is_symlink():
                raise OdfChainError(f"already a dataset: {root}")
            for sub in _SUBDIRS:
                (root / sub).mkdir(exist_ok=True)
            fsync_dir(root)
        return cls(root, made_root=made_root)

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

    # -- reading without following symlinks ---------------------------------------------------

    @contextlib.contextmanager
    def _dir(self, relative: str, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the dataset's directory ``relative`` ("" for the root), reached
        without following a symlink below the root: a symlinked ``data/`` or ``blocks/`` is
        refused, never read or deleted through. ``create`` makes missing directories.

        Raises FileNotFoundError for a missing component, StorageError for one that is not a
        directory.
        """
        held = self._held
        if held is not None and relative.startswith(DERIVED_DIR):
            if relative not in held:
                with self._open_dir(relative, create=create) as fd:
                    held[relative] = os.dup(fd)
            yield held[relative]
            return
        with self._open_dir(relative, create=create) as fd:
            yield fd

    @contextlib.contextmanager
    def derived_batch(self) -> Iterator[None]:
        """Keep the descriptors of the derived directories open across the calls made inside
        (an index update reads and writes a few files of one folder per append)."""
        if self._held is not None:
            yield
            return
        self._held = {}
        try:
            yield
        finally:
            held, self._held = self._held, None
            for fd in held.values():
                os.close(fd)

    @contextlib.contextmanager
    def _open_dir(self, relative: str, *, create: bool = False) -> Iterator[int]:
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            path = self._root
            for part in filter(None, relative.split("/")):
                path = path / part
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                        os.fsync(fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    kind = file_kind(_lstat(part, fd).st_mode)
                    raise StorageError(f"{path} is {kind}, not a directory: not followed") from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_regular(self, relative: str) -> int:
        """A read descriptor of the regular file ``relative``: never through a symlink, never a
        FIFO or a device (checked before opening and again on the opened file)."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent) as dir_fd:
            return _open_regular_at(dir_fd, name, self._root / relative)[0]

    def _read_bounded(self, relative: str, limit: int, what: str) -> bytes:
        """The bytes of a regular file of at most ``limit`` bytes: a larger one is refused
        before reading, and one that grows while read is refused at ``limit + 1`` bytes."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent) as dir_fd:
            return _read_regular_at(dir_fd, name, self._root / relative, limit, what)

    def _entry_mode(self, relative: str) -> int | None:
        """The type bits of ``relative`` itself (a symlink is not followed); None if missing."""
        parent, _, name = relative.rpartition("/")
        try:
            with self._dir(parent) as dir_fd:
                return _lstat(name, dir_fd).st_mode
        except FileNotFoundError:
            return None

    def _names(self, directory: str) -> list[str]:
        """The names of the regular files of a layout directory (symlinks and other entries are
        :meth:`irregular_entries`)."""
        path = self._root / directory
        try:
            with self._dir(directory) as dir_fd, os.scandir(dir_fd) as it:
                return sorted(
                    e.name for e in it if _is_name(e.name) and e.is_file(follow_symlinks=False)
                )
        except FileNotFoundError:
            raise NotFoundError(f"{path} is missing") from None
        except OSError as exc:
            raise _storage_error(exc, "list", path) from exc

    def irregular_entries(
        self, directories: Iterable[str] = ("blocks", "data", STAGING)
    ) -> list[tuple[str, str]]:
        """Entries of ``blocks/``, ``data/`` and ``.staging/`` (or those of them named) that are
        neither regular files nor (in ``.staging/``) a writer's folder: symlinks, FIFOs,
        devices. No read follows them and gc removes none of them; returned as (relative path,
        what it is)."""
        found = []
        for directory in directories:
            try:
                with self._dir(directory) as dir_fd, os.scandir(dir_fd) as it:
                    # the directory listing's own type first: no stat per regular file
                    others = [e for e in it if not e.is_file(follow_symlinks=False)]
                    found += self._irregular(directory, others)
            except (OSError, OdfChainError):  # missing or refused: the listings report it
                continue
        return sorted(found)

    @staticmethod
    def _irregular(directory: str, others: list[os.DirEntry]) -> list[tuple[str, str]]:
        """Of the entries a listing did not type as regular files, those that are not."""
        found = []
        for entry in others:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:  # removed meanwhile
                continue
            if not (stat.S_ISREG(mode) or (directory == STAGING and stat.S_ISDIR(mode))):
                found.append((f"{directory}/{entry.name}", file_kind(mode)))
        return found

    def check_layout(self) -> None:
        """Refuse a dataset whose layout directories are not all real directories (a symlinked
        ``data/``, say): reads would refuse them, so writes must not go through them (the
        slices would land outside the dataset), and gc must not delete through them. Missing
        ones are fine."""
        with _os_errors("check", self._root), self._dir("") as root_fd:
            for name in LAYOUT:
                try:
                    mode = _lstat(name, root_fd).st_mode
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(mode):
                    raise StorageError(
                        f"{self._root / name} is {file_kind(mode)}, not a directory: odf_chain "
                        "does not read, write or remove files through it"
                    )

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
        self.check_layout()  # every write starts here: none goes through a symlinked directory
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
                fd, tmp = _create_claimed(staging, f".{name}.", ".tmp")
                with os.fdopen(fd, "wb") as f:  # open (the claim held) until it is in place
                    try:
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
        relative = f"blocks/{check_name(name, 'block name')}"
        with self._block_errors(name):
            return self._read_bounded(relative, MAX_BLOCK_BYTES, "a block")

    @contextlib.contextmanager
    def _block_errors(self, name: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError:
            raise NotFoundError(f"block {name} not found in {self._root}") from None
        except StorageError as exc:  # a symlink, FIFO, directory or oversized file
            raise IntegrityError(f"block {name} cannot be read: {exc}") from None
        except OSError as exc:  # an unreadable file
            raise IntegrityError(f"block {name} cannot be read: {exc.strerror}") from None

    @contextlib.contextmanager
    def block_reader(self) -> Iterator[Callable[[str], bytes]]:
        """:meth:`read_block` for many blocks in a row (a walk down the chain): ``blocks/`` is
        opened once and every block read through that descriptor, with the same checks (no
        symlink, regular files only, bounded) and the same errors. When ``blocks/`` cannot be
        opened, each read is left to :meth:`read_block`, which reports that per block."""
        with contextlib.ExitStack() as stack:
            try:
                dir_fd = stack.enter_context(self._dir("blocks"))
            except (OSError, OdfChainError):
                yield self.read_block
                return
            blocks = f"{self._root}/blocks"

            def read(name: str) -> bytes:
                check_name(name, "block name")
                with self._block_errors(name):
                    return _read_regular_at(
                        dir_fd, name, f"{blocks}/{name}", MAX_BLOCK_BYTES, "a block"
                    )

            yield read

    def read_all_blocks(self, hashes: Hashes) -> block_pass.Pass | None:
        """Every block file at once (verify of a long chain reads them all anyway), by name:
        its bytes, or None when it fails a check (reading it by name reports it exactly), and
        whether it hashes to its name. The same checks as :meth:`block_reader` in fewer system
        calls, on two cores for a long chain (:mod:`odf_chain.storage.block_pass`). None when
        ``blocks/`` cannot be opened (the walk then reports that per block)."""
        try:
            with self._dir("blocks") as dir_fd, os.scandir(dir_fd) as it:
                names, others = [], []
                keep, other = names.append, others.append
                for entry in it:  # 100k entries: _is_name inlined
                    if not entry.is_file(follow_symlinks=False):
                        other(entry)
                    elif (name := entry.name).isascii() and name.isalnum():
                        keep(name)
                irregular = self._irregular("blocks", others)
                return block_pass.Pass(dir_fd, names, MAX_BLOCK_BYTES, hashes, irregular)
        except (OSError, OdfChainError):
            return None

    def has_block(self, name: str) -> bool:
        """True if ``blocks/<name>`` exists, as whatever kind of entry (reading it says more)."""
        path = self._block_path(name)
        with _os_errors("check", path):
            return self._entry_mode(f"blocks/{name}") is not None

    def block_names(self) -> list[str]:
        return self._names("blocks")

    def block_names_starting(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` regular files of ``blocks/`` whose names start with ``prefix``:
        one pass over the directory listing (its own entry types: no stat, no symlink
        followed), stopping at ``limit``; no block is read."""
        check_name(prefix, "block hash prefix")
        path = self._root / "blocks"
        found: list[str] = []
        try:
            with self._dir("blocks") as dir_fd, os.scandir(dir_fd) as it:
                for e in it:
                    if (
                        e.name.startswith(prefix)
                        and _is_name(e.name)
                        and e.is_file(follow_symlinks=False)
                    ):
                        found.append(e.name)
                        if len(found) >= limit:
                            break
        except FileNotFoundError:
            raise NotFoundError(f"{path} is missing") from None
        except OSError as exc:
            raise _storage_error(exc, "list", path) from exc
        return sorted(found)

    def remove_block(self, name: str) -> bool:
        """Delete ``blocks/<name>``; True if it was there. Checks nothing: meant for a writer
        removing the block it created (``write_block`` returned True) after losing the head
        race. Removing a block the chain references breaks the dataset."""
        return self._remove(f"blocks/{check_name(name, 'block name')}")

    def _remove(self, relative: str) -> bool:
        """Unlink the regular file ``relative`` through its directory's descriptor: never a
        symlink's target, never anything outside the dataset."""
        parent, _, name = relative.rpartition("/")
        path = self._root / relative
        with _os_errors("remove", path):
            try:
                with self._dir(parent) as dir_fd:
                    mode = _lstat(name, dir_fd).st_mode
                    if not stat.S_ISREG(mode):
                        raise StorageError(f"{path} is {file_kind(mode)}: not removed")
                    os.unlink(name, dir_fd=dir_fd)
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
            # the claim is held until commit_data or discard (or this process dies)
            fd, tmp = _create_claimed(staging, "data.", suffix)
        self._claims[tmp] = fd
        return Path(tmp)

    def _release(self, staged: Path | str) -> None:
        fd = self._claims.pop(str(staged), None)
        if fd is not None:
            os.close(fd)

    def _staged_parts(self, staged: Path | str) -> list[str]:
        """The components of ``staged`` below ``.staging/`` (anywhere below: writers such as
        Spark fill a folder of their own there). The path must name an entry strictly inside
        ``.staging/``: ``.staging/..`` or ``.staging`` itself would make a discard remove the
        dataset, so they are refused."""
        staging = self.staging_dir
        target = os.path.abspath(staged)  # folds "..": the name is what is inside, or not
        name = os.path.basename(target)
        with _os_errors("resolve", staged):
            parent = os.path.realpath(os.path.dirname(target))
            rel = os.path.relpath(parent, os.path.realpath(staging))
        parts = [] if rel == "." else rel.split(os.sep)
        if name in ("", ".", "..") or any(p in ("", ".", "..") for p in parts):
            raise OdfChainError(f"{staged} is not in {staging} (strictly inside it)")
        return [*parts, name]

    def _check_staged(self, staged: Path | str) -> Path:
        self._staged_parts(staged)
        return Path(staged)

    def commit_data(self, staged: Path, name: str, size: int | None = None) -> DataCommit:
        """Move a filled staging file to ``data/<name>`` durably; say whether this call created
        the file (see :class:`DataCommit`). ``size``, when given, is what the writer wrote: a
        staged file of another size is refused (IntegrityError) before anything moves.

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
                staged_size = os.fstat(f.fileno()).st_size
            check_staged_size(name, staged_size, size)
            created = _install_new(staged, target)
            if created:
                with contextlib.suppress(FileNotFoundError):  # gone if renamed, not linked
                    os.unlink(staged)
            else:
                existing = target.stat().st_size
                if existing != staged_size:
                    raise IntegrityError(
                        f"data slice {name} already stored with size {existing}, "
                        f"staged copy has {staged_size}"
                    )
                os.replace(staged, target)
            # A rename keeps the time the writer made the file, which may be long ago (Spark
            # wrote it before the hashing); gc judges a leftover's age by it, so the slice must
            # look as new as its commit: until the head names it, it is a fresh orphan.
            os.utime(target)
            fsync_dir(target.parent)
        self._release(staged)
        return DataCommit(target, created)

    def discard(self, staged: Path) -> None:
        """Drop a staged file (an abandoned write); missing is fine."""
        self._release(staged)
        *folders, name = self._staged_parts(staged)
        with _os_errors("remove", staged):
            try:
                with self._dir("/".join([STAGING, *folders])) as dir_fd:
                    if stat.S_ISDIR(_lstat(name, dir_fd).st_mode):
                        raise StorageError(f"{staged} is a directory, not a staged file")
                    os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass

    def data_path(self, name: str) -> Path:
        return self._root / "data" / check_name(name, "data slice name")

    def has_data(self, name: str) -> bool:
        """True if ``data/<name>`` exists, as whatever kind of entry (opening it says more)."""
        path = self.data_path(name)
        with _os_errors("check", path):
            return self._entry_mode(f"data/{name}") is not None

    def data_names(self) -> list[str]:
        return self._names("data")

    def remove_data(self, name: str) -> bool:
        """Delete ``data/<name>``; True if it was there. Checks nothing, like
        :meth:`remove_block`: for a writer removing the slice it created (``created=True``)
        after losing the head race."""
        return self._remove(f"data/{check_name(name, 'data slice name')}")

    def open_data(self, name: str) -> BinaryIO:
        """The slice for reading (a regular file, not through a symlink); the caller closes it.
        Errors while reading from the handle are plain ``OSError``s: the caller is the one
        reading."""
        path = self.data_path(name)
        try:
            return os.fdopen(self._open_regular(f"data/{name}"), "rb")
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
        """Remove a writer's staging folder and whatever is left in it (best effort: what stays
        is a leftover for gc). The folder must be strictly inside ``.staging/``; anything but a
        folder there is not the writer's, and stays."""
        *folders, name = self._staged_parts(area)
        with (
            contextlib.suppress(OSError, OdfChainError),
            self._dir("/".join([STAGING, *folders])) as dir_fd,
        ):
            if stat.S_ISDIR(_lstat(name, dir_fd).st_mode):
                shutil.rmtree(name, dir_fd=dir_fd, onerror=_missing_is_fine)

    def remove_empty_layout(self) -> None:
        """Remove the layout's folders, and the root if :meth:`create` made it, when every one
        of them is empty (best effort). A file anywhere in the layout (another writer's staged
        slice, a lock) keeps it all; ``rmdir`` removes nothing but an empty folder and never
        follows a symlink."""
        with contextlib.suppress(OSError, OdfChainError), self._dir("") as root_fd:
            for sub in LAYOUT:
                with contextlib.suppress(FileNotFoundError), self._dir(sub) as sub_fd:
                    if os.listdir(sub_fd):
                        return
            for sub in LAYOUT:
                with contextlib.suppress(OSError):
                    os.rmdir(sub, dir_fd=root_fd)
        if self._made_root:
            with contextlib.suppress(OSError):
                os.rmdir(self._root)

    def _remove_entry(self, directory: str, name: str) -> None:
        """Remove ``directory/name``: a folder with everything in it (symlinks inside are
        unlinked, never followed), or a regular file; missing is fine."""
        with self._dir(directory) as dir_fd:
            try:
                mode = _lstat(name, dir_fd).st_mode
            except FileNotFoundError:
                return
            if stat.S_ISDIR(mode):
                shutil.rmtree(name, dir_fd=dir_fd, onerror=_missing_is_fine)
            elif stat.S_ISREG(mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
            else:
                raise StorageError(
                    f"{self._root / directory / name} is {file_kind(mode)}: not removed"
                )

    def leftover_staging(self) -> list[str]:
        """Names of the entries of ``.staging/`` (files, and the folders writers such as Spark
        fill): orphans of writers that crashed, or that are still writing. Symlinks and other
        entries are :meth:`irregular_entries`."""
        path = self._root / STAGING
        try:
            with self._dir(STAGING) as dir_fd, os.scandir(dir_fd) as it:
                return sorted(
                    e.name
                    for e in it
                    if e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False)
                )
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _storage_error(exc, "list", path) from exc

    def staged_in_use(self, name: str) -> bool:
        """True while a writer holds its claim on the staged file ``name`` (see
        :meth:`stage_file`); a writer's folder (Spark's) carries no claim: its age guards it."""
        return self._unclaimed(name, remove=False) is False

    def remove_staged(self, name: str) -> bool:
        """Delete one entry of ``.staging/`` (a file or a writer's folder), for gc; False (and
        nothing removed) when a live writer holds the file's claim. The file is removed while
        gc holds it locked, so a writer can never claim it in between."""
        return self._unclaimed(name, remove=True) is not False

    def _unclaimed(self, name: str, *, remove: bool) -> bool | None:
        """False: a writer's claim holds ``.staging/<name>``. Otherwise None, after removing it
        when asked (a folder, a file no one claims, or nothing there any more)."""
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise OdfChainError(f"{name!r} is not an entry of {self._root / STAGING}")
        with _os_errors("remove" if remove else "check", self._root / STAGING / name):
            with self._dir(STAGING) as dir_fd:
                try:
                    mode = _lstat(name, dir_fd).st_mode
                except FileNotFoundError:
                    return None
                if stat.S_ISREG(mode):
                    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                    try:
                        fd = os.open(name, flags, dir_fd=dir_fd)
                    except FileNotFoundError:
                        return None
                    try:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            return False
                        if remove and _lstat(name, dir_fd).st_ino == os.fstat(fd).st_ino:
                            os.unlink(name, dir_fd=dir_fd)
                        return None
                    except FileNotFoundError:
                        return None
                    finally:
                        os.close(fd)
            if remove:
                self._remove_entry(STAGING, name)
            return None

    def entry_info(self, relative: str) -> EntryInfo | None:
        """Newest modification time and total size of a file or folder of the dataset (no
        symlink followed: a link counts as itself)."""
        path = self._root / relative
        with _os_errors("check", path):
            try:
                top = path.lstat()
            except FileNotFoundError:
                return None
            if not stat.S_ISDIR(top.st_mode):
                return EntryInfo(top.st_mtime, top.st_size)
            # every folder's time counts too: a writer at work may only just have made one
            # (a Spark task's attempt folder) beside files it wrote long ago
            newest, total = top.st_mtime, 0
            for folder, dirs, names in os.walk(path, followlinks=False):
                for name in dirs + names:
                    try:
                        info = os.lstat(os.path.join(folder, name))
                    except FileNotFoundError:  # removed meanwhile
                        continue
                    newest = max(newest, info.st_mtime)
                    if not stat.S_ISDIR(info.st_mode):
                        total += info.st_size
            return EntryInfo(newest, total)

    # -- derived files (info/) -------------------------------------------------------------------

    def read_derived(self, relative: str, limit: int) -> bytes | None:
        """See :meth:`Storage.read_derived`: read like a block (no symlink, regular, bounded)."""
        path = f"{DERIVED_DIR}/{check_derived(relative)}"
        try:
            return self._read_bounded(path, limit, "a derived file")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error(exc, "read", self._root / path) from exc

    def write_derived(self, relative: str, data: bytes) -> None:
        """See :meth:`Storage.write_derived`. A cache needs no fsync: a crash leaves the old
        file or the new one (rename), and readers check what they use."""
        parent, _, name = f"{DERIVED_DIR}/{check_derived(relative)}".rpartition("/")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with _os_errors("write", self._root / parent / name), self._dir(parent, create=True) as d:
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, flags, 0o666, dir_fd=d)
            try:
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=d)
                raise

    def overwrite_derived(self, relative: str, data: bytes) -> None:
        """See :meth:`Storage.overwrite_derived`: in place, no new file, no rename."""
        self.patch_derived(relative, 0, data)

    def patch_derived(self, relative: str, offset: int, data: bytes) -> bool:
        """See :meth:`Storage.patch_derived`: ``data`` written at ``offset``, then the file cut
        after it (a reader meeting the write half done sees records that fail their checks)."""
        parent, _, name = f"{DERIVED_DIR}/{check_derived(relative)}".rpartition("/")
        path = self._root / parent / name
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with _os_errors("write", path), self._dir(parent, create=True) as d:
            fd = os.open(name, flags, 0o666, dir_fd=d)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise StorageError(f"{path} is not a regular file ({file_kind(info.st_mode)})")
                if info.st_size < offset:
                    return False
                view = memoryview(data)
                while view:
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
                if info.st_size > offset:
                    os.ftruncate(fd, offset)
            finally:
                os.close(fd)
        return True

    def remove_derived(self, relative: str) -> None:
        parent, _, name = f"{DERIVED_DIR}/{check_derived(relative)}".rpartition("/")
        if self._held:  # a held descriptor of what goes would write into a removed folder
            gone = f"{parent}/{name}"
            for key in [k for k in self._held if k == gone or k.startswith(gone + "/")]:
                os.close(self._held.pop(key))
        with (
            _os_errors("remove", self._root / parent / name),
            contextlib.suppress(FileNotFoundError),
        ):
            with self._dir(parent) as dir_fd:
                if stat.S_ISLNK(_lstat(name, dir_fd).st_mode):  # the link, never its target
                    os.unlink(name, dir_fd=dir_fd)
                    return
            self._remove_entry(parent, name)

    def list_derived(self, directory: str) -> list[str]:
        relative = f"{DERIVED_DIR}/{check_derived(directory)}"
        try:
            with self._dir(relative) as dir_fd, os.scandir(dir_fd) as it:
                return sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _storage_error(exc, "list", self._root / relative) from exc

    # -- head -----------------------------------------------------------------------------------

    @property
    def _head_path(self) -> Path:
        return self._root / "refs" / "head"

    def read_head(self) -> str | None:
        """The head block hash, or None for a dataset with no blocks yet."""
        try:
            data = self._read_bounded("refs/head", MAX_HEAD_BYTES, "a head")
        except FileNotFoundError:
            return None
        except OSError as exc:  # an unreadable file
            raise _storage_error(exc, "read", self._head_path) from exc
        head = data.decode("ascii", errors="replace").removesuffix("\n")
        if not _is_name(head):
            raise FormatError(f"{self._head_path}: invalid head {shown(data)}")
        return head

    def read_head_log(self) -> list[HeadMove]:
        """Every logged head move, oldest first; [] for a dataset from before the log."""
        path = self._root / HEAD_LOG
        try:
            data = self._read_bounded(HEAD_LOG, MAX_HEAD_LOG_BYTES, "the head log")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _storage_error(exc, "read", path) from exc
        return parse_head_log(data, str(path))

    def logged_head(self) -> str | None:
        """The last logged head, from the log's last few KiB (never the whole log)."""
        path = self._root / HEAD_LOG
        try:
            fd = self._open_regular(HEAD_LOG)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error(exc, "read", path) from exc
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, min(size, _LOG_TAIL), size - min(size, _LOG_TAIL))
        except OSError as exc:
            raise _storage_error(exc, "read", path) from exc
        finally:
            os.close(fd)
        return logged_head(last_complete_line(tail))

    @property
    def locks_head(self) -> bool:
        return True

    @property
    def head_moves_atomically(self) -> bool:
        return True

    @contextlib.contextmanager
    def head_lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the exclusive head lock: ``flock`` on ``refs/.head.lock``. The OS drops it when
        the holder's process dies, so a crashed writer never leaves a stale lock behind. Writers
        hold it to move the head, gc for its whole deletion pass."""
        lock_path = self._root / "refs" / ".head.lock"
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with _os_errors("open the head lock", lock_path), self._dir("refs") as refs_fd:
            fd = os.open(".head.lock", flags, 0o644, dir_fd=refs_fd)
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
        self,
        expected: str | None,
        new: str,
        *,
        blocks: Iterable[str] = (),
        data: Iterable[str] = (),
        timeout: float = LOCK_TIMEOUT,
    ) -> None:
        """Point the head at ``new`` only if it still is ``expected``: of two writers appending
        to the same head, exactly one wins and the other learns so before anything is visible.

        ``blocks`` and ``data`` name the files the new head needs. They were put in place
        before the lock was taken, so gc (which deletes only under this lock) may have taken
        one as a leftover meanwhile: each is checked here, and a missing one refuses the move.
        So no acknowledged write ever lacks a file. The move is then appended to the head log.
        """
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
            for directory, names in (("blocks", blocks), ("data", data)):
                for name in names:
                    relative = f"{directory}/{check_name(name)}"
                    with _os_errors("check", self._root / relative):
                        present = self._entry_mode(relative)
                    if present is None or not stat.S_ISREG(present):
                        raise ConflictError(
                            f"{self._root / relative} is missing at the head move (taken by gc, "
                            "or never written): nothing was committed; retry the write"
                        )
            log_fd = self._open_head_log(current)
            try:
                staging = self.staging_dir
                with _os_errors("write", self._head_path):
                    write_atomic(self._head_path, new.encode("ascii"), staging)
                # The head has moved: a failure now must not report the write as failed. The
                # log then misses this move until the next one repairs it (_open_head_log).
                with contextlib.suppress(OSError):
                    _write_all(log_fd, head_log_line(expected, new, _now_ms()))
                    os.fsync(log_fd)
            finally:
                os.close(log_fd)

    def _open_head_log(self, current: str | None) -> int:
        """The head log open for appending (under the head lock), made consistent first: a last
        line a crash cut short is cut off, and if a crash fell between a head move and its log
        line (the log's last head is not ``current``), the missing move is appended. So the log
        never names a head that never was, and lacks at most the current one."""
        path = self._root / HEAD_LOG
        with _os_errors("write", path), self._dir("logs", create=True) as logs_fd:
            try:
                fd = os.open("head", _LOG_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=logs_fd)
                os.fsync(logs_fd)
            except FileExistsError:
                try:
                    fd = os.open("head", _LOG_FLAGS, dir_fd=logs_fd)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
                    raise StorageError(f"{path} is a symlink: not written through") from None
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise StorageError(f"{path} is not a regular file ({file_kind(info.st_mode)})")
                size = info.st_size
                tail = os.pread(fd, min(size, _LOG_TAIL), size - min(size, _LOG_TAIL))
                if tail and not tail.endswith(b"\n"):
                    end = tail.rfind(b"\n")
                    if end >= 0 or size <= _LOG_TAIL:  # a torn append: cut it off
                        os.ftruncate(fd, size - len(tail) + end + 1)
                        tail = tail[: end + 1]
                    else:  # a line longer than any we write: end it, verify names it
                        _write_all(fd, b"\n")
                        tail = b"\n"
                logged = logged_head(last_complete_line(tail))
                if current is not None and logged != current:
                    _write_all(fd, head_log_line(logged, current, _now_ms()))
            except BaseException:
                os.close(fd)
                raise
        return fd


def _missing_is_fine(function, path, excinfo) -> None:
    """rmtree's error handler: an entry removed meanwhile (by its writer) is not a failure."""
    if not isinstance(excinfo[1], FileNotFoundError):
        raise excinfo[1]
