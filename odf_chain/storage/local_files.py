"""The low-level file work of a local dataset: opening, reading, writing and removing files
without ever following a symlink below the dataset root, and :class:`DatasetDir`, the root
those reads go through, which every part of :class:`~odf_chain.storage.local.LocalStorage`
(blocks, slices, the head, derived files) shares.

Reads take regular files only (a FIFO cannot block a read, a device cannot feed one forever)
and are bounded by their caller's limit. Deletions go through directory descriptors opened the
same way, so nothing outside the dataset can be removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import queue
import secrets
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from odf_chain.errors import ConflictError, NotFoundError, StorageError
from odf_chain.storage.base import DERIVED_DIR, STAGING
from odf_chain.storage.layout import LAYOUT, is_name
from odf_chain.storage.user_files import file_kind, read_at_most

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO slip in between the lstat and the open, the open does not wait
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# link(2) refusals that mean "this filesystem has no hard links", not "something is wrong"
NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def storage_error(exc: OSError, action: str, path: Path | str) -> StorageError:
    """Name the path an operation was about, and the file the OS refused if that differs."""
    detail = exc.strerror or str(exc)
    if exc.filename is not None and os.fsdecode(exc.filename) != str(path):
        detail += f" ({os.fsdecode(exc.filename)})"
    return StorageError(f"cannot {action} {path}: {detail}")


class os_errors:  # a context manager, named like contextlib's
    """Turn an OSError raised inside the block into a :class:`StorageError` naming ``path``.
    A class, not a generator: an append enters a dozen of these."""

    __slots__ = ("action", "path")

    def __init__(self, action: str, path: Path | str) -> None:
        self.action, self.path = action, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, OSError):
            raise storage_error(exc, self.action, self.path) from exc


class _Held:
    """A held descriptor as a context manager that leaves it open (see :meth:`DatasetDir._dir`)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *_: object) -> None:
        return None


def lstat_at(name: str, dir_fd: int) -> os.stat_result:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


class ReplacedError(StorageError):
    """A file replaced by another between its check and its open (a writer's rename)."""


def open_regular_at(dir_fd: int, name: str, path: Path | str) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file ``name`` in the directory ``dir_fd`` (``path``
    names it in errors), and its status: never a symlink, FIFO or device (checked before
    opening and again on the opened file)."""
    before = lstat_at(name, dir_fd)
    if not stat.S_ISREG(before.st_mode):
        raise StorageError(f"{path} is not a regular file ({file_kind(before.st_mode)}): not read")
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise ReplacedError(f"{path} was replaced while being opened: not read")
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


def read_regular_at(dir_fd: int, name: str, path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``name`` in ``dir_fd``, at most ``limit`` of them: a larger
    file is refused before reading, one that grows while read at ``limit + 1`` bytes."""
    fd, opened = open_regular_at(dir_fd, name, path)
    try:
        return _read_open(fd, opened, path, limit, what)
    finally:
        os.close(fd)


def _read_open(fd: int, opened: os.stat_result, path: Path | str, limit: int, what: str) -> bytes:
    too_large = f"{path} is larger than the {limit:,}-byte limit for {what}: not read"
    if opened.st_size > limit:
        raise StorageError(f"{too_large} ({opened.st_size:,} bytes)")
    data = read_at_most(fd, limit, opened.st_size)
    if len(data) > limit:
        raise StorageError(f"{too_large} (it grew while being read)")
    return data


SWAPPED_READ_SECONDS = 5.0


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file and its last change (to the filesystem clock's tick): equal for two looks at
    one file not renamed, written or relinked in between."""
    return st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns


def read_swapped_at(dir_fd: int, name: str, path: Path | str, limit: int, what: str) -> bytes:
    """:func:`read_regular_at` for a file that a writer swaps out of its name and then rewrites
    (``refs/head``: :func:`exchange_at`): what was read counts only if ``name`` still names the
    file read once the read is over, and that file is still linked and unchanged since it was
    opened (its inode number alone could be a new file's, reusing a freed one's: a failed
    move's staging file, holding a head never moved to), so a reader whose file was swapped out
    (and may since hold a head not yet moved to) reads again, as does one whose open met a
    move. Bounded by time (:data:`SWAPPED_READ_SECONDS`), not by tries: on a loaded machine
    beside busy writers one read can take as long as a head move, several times running; only
    a reader that met a move at every read for that long is refused.

    What is left: a file swapped out, rewritten and swapped back within one tick of the
    filesystem's clock while one read was paused (its times then look unchanged) could give a
    reader the rewrite's bytes; they name the head that move set, or, torn, no block."""
    deadline = None
    while True:
        try:
            fd, opened = open_regular_at(dir_fd, name, path)
        except ReplacedError:  # a move between the check and the open: read the new one
            pass
        else:
            try:
                data = _read_open(fd, opened, path, limit, what)
                after = os.fstat(fd)  # the file read: still linked, not changed since opened
                named = lstat_at(name, dir_fd)  # and still the one the name names
            finally:
                os.close(fd)
            if after.st_nlink and _version(after) == _version(opened) == _version(named):
                return data
        if deadline is None:
            deadline = time.monotonic() + SWAPPED_READ_SECONDS
        elif time.monotonic() > deadline:
            raise ConflictError(
                f"{path} was replaced at every read for {SWAPPED_READ_SECONDS:g} s: not read"
            )


def write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)  # a small write is whole at once: no view made
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def sync_data(fd: int) -> None:
    """Make a file's bytes durable, and its size (fdatasync also writes the metadata needed to
    read the data back: size, allocation), not its times: no reader of a block, a head or a
    slice looks at its mtime. ``fsync`` where the OS has no fdatasync (macOS)."""
    getattr(os, "fdatasync", os.fsync)(fd)


_SYNC_THREADS = 4
_sync_jobs: tuple[int, queue.SimpleQueue] | None = None
_sync_jobs_lock = threading.Lock()


def _sync_worker(jobs: queue.SimpleQueue) -> None:
    while True:
        sync, fd, done, errors = jobs.get()
        try:
            sync(fd)
        except BaseException as exc:  # handed to the caller, which raises it
            errors.append(exc)
        finally:
            done.release()


def _jobs() -> queue.SimpleQueue:
    """The queue of the process's sync threads, started on first use (daemons: they only ever
    run a sync a caller is waiting for); a forked child (a Spark worker, say) starts its own:
    threads do not survive ``fork``."""
    global _sync_jobs
    with _sync_jobs_lock:
        if _sync_jobs is None or _sync_jobs[0] != os.getpid():
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            for i in range(_SYNC_THREADS):
                name = f"odf-chain-sync-{i}"
                threading.Thread(target=_sync_worker, args=(jobs,), name=name, daemon=True).start()
            _sync_jobs = (os.getpid(), jobs)
        return _sync_jobs[1]


def sync_together(syncs: Sequence[tuple[Callable[[int], None], int]]) -> None:
    """Make each ``sync(fd)`` of ``syncs`` at the same time (this thread does the first, the
    process's sync threads the others: ``fsync`` releases the GIL) and return when all are
    done; the first error is raised after every sync has ended, so no descriptor is closed
    under a sync still running. For syncs that must all be complete before one later step
    (a head move) and need no order among themselves: a filesystem with a journal (ext4, XFS)
    commits the ones in flight together, so n syncs cost about one journal commit, not n.
    Each hand-off is a queue entry and a lock the worker releases when done (fewer futex
    calls than a thread pool's futures; what it costs is mostly the thread's wake-up, 0.02-0.2
    ms per append by the load of the machine).
    """
    if not syncs:
        return
    errors: list[BaseException] = []
    pending = []
    if len(syncs) > 1:
        jobs = _jobs()
        for sync, fd in syncs[1:]:
            done = threading.Lock()
            done.acquire()
            jobs.put((sync, fd, done, errors))
            pending.append(done)
    try:
        syncs[0][0](syncs[0][1])
    except BaseException as exc:  # raised below, once every sync has ended
        errors.insert(0, exc)
    for done in pending:  # all ended before the caller closes these descriptors
        done.acquire()
    if errors:
        raise errors[0]


def start_writeback(fds: Iterable[int]) -> None:
    """Start writing the files' dirty pages out, without waiting (a hint: nothing depends on
    it). On Linux ``POSIX_FADV_DONTNEED`` starts the writeback in this call, and ext4 then
    allocates the files' blocks in the journal transaction that is open now: syncs made next,
    at once, find all of them in one transaction and wait for one commit, where a directory's
    fsync starting first would commit without them and leave them a second one. Pages being
    written are not dropped from the cache."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for fd in fds:
        with contextlib.suppress(OSError):
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename into it survives a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_unique(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """Create a new, uniquely named file; unlike ``mkstemp`` it honours the umask (0666 base), so
    datasets stay readable by the people the umask allows, not only their writer."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        path = f"{directory}/{prefix}{secrets.token_hex(8)}{suffix}"  # a str: no Path parsing
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue


def create_claimed(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """:func:`create_unique`, holding a shared lock on the new file (its claim) until the
    descriptor closes: gc removes a staged file only under an exclusive lock, so it never takes
    one a live writer is filling. A file gc took between the create and the lock is replaced."""
    while True:
        fd, path = create_unique(directory, prefix, suffix)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # ENOLCK (NFS, say): no claim, no file left
            if os.lstat(path).st_ino == os.fstat(fd).st_ino:
                return fd, path
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)


def write_atomic(path: Path, data: bytes, staging_dir: Path | None = None) -> None:
    """Make ``path`` hold ``data`` all at once: write a unique staging file (in ``staging_dir``,
    default ``path``'s directory; it must be on the same filesystem), fdatasync, rename, fsync
    ``path``'s directory: two syncs, the least that makes the new content durable under its
    name (without the first a power loss can leave the name on an empty or partial file)."""
    staging_dir = path.parent if staging_dir is None else staging_dir
    replace_staged(path, data, staging_dir, f".{path.name}.", sync_data)
    fsync_dir(path.parent)


def replace_staged(
    path: Path, data: bytes, staging_dir: Path, prefix: str, make_durable: Callable[[int], None]
) -> None:
    """Write ``data`` to a claimed staging file (``prefix``, in ``staging_dir``), call
    ``make_durable`` with its descriptor, then rename it over ``path``; on any failure the
    staging file is removed. Syncing ``path``'s directory is the caller's (the rename's
    durability: one sync, or one made with others)."""
    fd, tmp = create_claimed(staging_dir, prefix, ".tmp")
    try:
        try:  # open (the claim held) until it is in place
            write_all(fd, data)
            make_durable(fd)
            os.rename(tmp, path)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def stage_locked(staging_fd: int, tmp: str, data: bytes, staging: Path) -> int:
    """A new file ``tmp`` of the staging folder ``staging_fd`` (``staging``, for errors) holding
    ``data``: its descriptor (the caller closes it, and removes or renames ``tmp``). For a
    caller holding the head lock: gc removes staging files only under it, so the file is
    neither claimed nor named at random; one of that name, which a writer that died holding the
    lock left, is removed first (anything else there is refused, named)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o666, dir_fd=staging_fd)
    except FileExistsError:
        try:
            os.unlink(tmp, dir_fd=staging_fd)
        except (IsADirectoryError, PermissionError) as exc:  # a folder in the way
            raise StorageError(
                f"{staging / tmp} is in the way of a write and cannot be removed "
                f"({exc.strerror}); remove it by hand (nothing was written)"
            ) from None
        fd = os.open(tmp, flags, 0o666, dir_fd=staging_fd)
    try:
        write_all(fd, data)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=staging_fd)
        raise
    return fd


def restage_locked(
    dir_fd: int, tmp: str, data: bytes, folder: Path, *, not_of: os.stat_result | None
) -> int:
    """:func:`stage_locked`, reusing the file ``tmp`` already there: a regular file of one link
    (no other name, such as a hard-link backup's, sees it change) that is not ``not_of``'s file
    is overwritten in place to hold exactly ``data``, so no inode is made or freed; anything
    else there is made anew as :func:`stage_locked` does (never opened first: a device's open
    can act). For the head's staging file, which :func:`exchange_at` leaves holding the
    previous head (a filesystem without a journal skips every inode freed in the last minute
    when it makes a file: ext4 ``recently_deleted``)."""
    try:
        before = lstat_at(tmp, dir_fd)
    except FileNotFoundError:
        return stage_locked(dir_fd, tmp, data, folder)
    if not_of is not None and (before.st_dev, before.st_ino) == (not_of.st_dev, not_of.st_ino):
        raise StorageError(
            f"{folder / tmp} is the same file as the one it replaces (linked twice, as a "
            "crash on a filesystem without a journal can leave it): check the filesystem "
            "(fsck), then remove it; nothing was written"
        )
    if not (stat.S_ISREG(before.st_mode) and before.st_nlink == 1):
        return stage_locked(dir_fd, tmp, data, folder)  # removes it (or refuses a folder)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:  # gone or replaced meanwhile: made anew
        return stage_locked(dir_fd, tmp, data, folder)
    try:
        found = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if (found.st_dev, found.st_ino, found.st_nlink) != (before.st_dev, before.st_ino, 1):
        os.close(fd)
        return stage_locked(dir_fd, tmp, data, folder)
    try:
        view, at = memoryview(data), 0
        while at < len(view):
            at += os.pwrite(fd, view[at:], at)
        if found.st_size != len(data):
            os.ftruncate(fd, len(data))
    except BaseException:
        os.close(fd)
        raise
    return fd


_RENAME_EXCHANGE = 2  # linux/fs.h
# renameat2 refusals that mean "not here" (an old kernel, a filesystem without the flag)
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP}


@functools.cache
def _renameat2() -> tuple[Callable[..., int], Callable[[], int]] | None:
    """libc's ``renameat2`` and the errno getter of its calls, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: only a head move needs it

    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28, musl 1.2.4
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call, ctypes.get_errno


def exchange_at(dir_fd: int, a: str, b: str) -> bool:
    """Swap the files the names ``a`` and ``b`` of ``dir_fd`` name, at once (Linux
    ``RENAME_EXCHANGE``): a rename of ``a`` over ``b`` that keeps ``b``'s old file as ``a``
    instead of freeing it. False, with nothing done, where the OS or the filesystem cannot or
    ``b`` is missing: the caller renames then."""
    found = _renameat2()
    if found is None:
        return False
    call, get_errno = found
    if call(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = get_errno()
    if code in _NO_EXCHANGE or code == errno.ENOENT:  # ``a`` was just written: ``b`` is missing
        return False
    raise OSError(code, os.strerror(code), a)


def place_new(staging_fd: int, dir_fd: int, name: str, data: bytes, staging: Path) -> int | None:
    """Give ``name`` in ``dir_fd`` the content ``data`` unless a file of that name is there:
    written whole in the staging folder ``staging_fd``, then linked in (as :func:`install_new`),
    so no reader ever sees part of it. A descriptor of the new file (for its sync: the
    caller closes it), or None when the name was taken, writing nothing.

    For a caller holding the head lock (:func:`stage_locked`: the staging file is
    ``.<name>.tmp``)."""
    tmp = f".{name}.tmp"
    fd = stage_locked(staging_fd, tmp, data, staging)
    try:
        created = install_new(tmp, name, src_dir_fd=staging_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=staging_fd)
        raise
    # the staging name only: once the block is in place, failing to remove it leaves a
    # leftover (verify reports it, gc removes it), not a failed write
    with contextlib.suppress(OSError):
        os.unlink(tmp, dir_fd=staging_fd)
    if created:
        return fd
    os.close(fd)
    return None


def install_new(
    source: Path | str,
    target: Path | str,
    *,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
) -> bool:
    """Give ``target`` the content of ``source`` unless ``target`` exists; True if this call
    created it. A hard link creates atomically, so of several processes installing the same
    name exactly one gets True; ``source`` stays (the caller removes it). Without hard links
    ``source`` is renamed instead: still correct, but two racing creators may both get True.
    ``src_dir_fd``/``dst_dir_fd``: the names are relative to those folders (as ``os.link``)."""
    try:
        os.link(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in NO_HARD_LINKS:
            raise
    try:
        os.stat(target, dir_fd=dst_dir_fd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        pass
    os.rename(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    return True


_TREE_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def remove_tree(dir_fd: int, name: str, path: Path | str) -> None:
    """Remove the folder ``name`` of ``dir_fd`` (``path``, for errors) and everything in it.
    Only folders are opened, and only as folders that are not symlinks
    (``O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK``): an entry swapped meanwhile for a FIFO or a
    symlink is never followed nor waited on (``shutil.rmtree`` opens first and looks after, and
    a FIFO there blocks it, and gc with it, under the head lock); everything else in the tree
    is unlinked. Entries removed meanwhile (by their writer) are fine; ``name`` itself no
    longer a folder is refused, named."""
    try:
        fd = os.open(name, _TREE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        raise StorageError(f"{path} is no longer a folder: not removed") from None
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in children:
            if is_dir:
                with contextlib.suppress(StorageError):  # a folder no more: unlinked below
                    remove_tree(fd, child, f"{path}/{child}")
                    continue
            try:
                os.unlink(child, dir_fd=fd)
            except FileNotFoundError:
                pass
            except IsADirectoryError:  # made a folder meanwhile
                remove_tree(fd, child, f"{path}/{child}")
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(name, dir_fd=dir_fd)


class DatasetDir:
    """The root of one dataset directory, and the symlink-free ways into it. ``_held`` is the
    descriptor cache of a batch (:meth:`batch`, and ``LocalDerived.derived_batch`` for the
    derived files alone): :meth:`_dir` hands out a held descriptor while one is open."""

    def __init__(self, root: Path) -> None:
        self._root = root
        # paths every append builds: made once (a Path also keeps its text once made)
        self._staging, self._blocks = root / STAGING, root / "blocks"
        self._held: dict[str, int] | None = None  # directory descriptors kept by a batch
        self._hold_all = False  # a batch() holds every directory, derived_batch() info/'s
        self._layout: set[str] | None = None  # what batch()'s first layout check found

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Keep what the calls made inside find out about the dataset's folders: their
        descriptors, each opened once (below the root, never through a symlink, as
        :meth:`_dir` opens them), and the layout check, made once. One append reads and
        writes about twenty files in six folders, each of which would otherwise open the root
        and its folder again (a fifth of an append's time when syncs are cheap). Scope it to
        one operation: a folder replaced meanwhile is not seen again until the batch ends."""
        if self._hold_all:
            yield
            return
        outer = self._held
        self._held = {} if outer is None else outer
        self._hold_all = True
        try:
            yield
        finally:
            self._hold_all = False
            self._layout = None
            if outer is None:
                held, self._held = self._held, None
                for fd in held.values():
                    os.close(fd)
            else:  # inside a derived_batch: keep its own, close the rest
                for key in [k for k in self._held if not k.startswith(DERIVED_DIR)]:
                    os.close(self._held.pop(key))

    @property
    def root(self) -> Path:
        return self._root

    @property
    def info_dir(self) -> Path:
        return self._root / "info"

    @property
    def staging_dir(self) -> Path:
        """``.staging/``, created on demand: it sits on the dataset's filesystem, so a rename
        out of it is atomic."""
        path = self._staging
        # every write starts here: none goes through a symlinked directory
        if STAGING not in self._check_layout():  # the check has just seen it, when it is there
            with os_errors("create", path):
                path.mkdir(exist_ok=True)
        return path

    def check_layout(self) -> None:
        """Refuse a dataset whose layout directories are not all real directories (a symlinked
        ``data/``, say): reads would refuse them, so writes must not go through them (the
        slices would land outside the dataset), and gc must not delete through them. Missing
        ones are fine."""
        self._check_layout()

    def _check_layout(self) -> set[str]:
        """:meth:`check_layout`, returning the layout directories it found (once a batch)."""
        if self._layout is not None:
            return self._layout
        found = set()
        # one listing of the root (its entries' types come with it), not a look per name
        with os_errors("check", self._root), self._dir("") as root_fd, os.scandir(root_fd) as it:
            for entry in it:
                if entry.name in LAYOUT and entry.is_dir(follow_symlinks=False):
                    found.add(entry.name)
            # a name the listing does not show as a folder, looked up as the old check did: on
            # a case-insensitive filesystem "Data" answers for data/, and a name may be gone
            for name in LAYOUT:
                if name in found:
                    continue
                try:
                    mode = lstat_at(name, root_fd).st_mode
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(mode):
                    raise StorageError(
                        f"{self._root / name} is {file_kind(mode)}, not a directory: odf_chain "
                        "does not read, write or remove files through it"
                    )
                found.add(name)
        if self._hold_all:
            self._layout = found
        return found

    def _dir(self, relative: str, *, create: bool = False) -> AbstractContextManager[int]:
        """A descriptor of the dataset's directory ``relative`` ("" for the root), reached
        without following a symlink below the root: a symlinked ``data/`` or ``blocks/`` is
        refused, never read or deleted through. ``create`` makes missing directories.

        Raises FileNotFoundError for a missing component, StorageError for one that is not a
        directory.
        """
        held = self._held
        if held is not None and (self._hold_all or relative.startswith(DERIVED_DIR)):
            fd = held.get(relative)
            if fd is None:
                fd = held[relative] = self._held_dir(held, relative, create)
            return _Held(fd)
        return self._open_dir(relative, create=create)

    def _held_dir(self, held: dict[str, int], relative: str, create: bool) -> int:
        """A new descriptor of ``relative`` for ``held``: opened from its parent's when that is
        held (the root's is, in a batch), else from the root."""
        parent, _, name = relative.rpartition("/")
        if not relative:
            return os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if parent not in held and not self._hold_all:
            with self._open_dir(relative, create=create) as fd:
                return os.dup(fd)
        parent_fd = held.get(parent)
        if parent_fd is None:
            parent_fd = held[parent] = self._held_dir(held, parent, create)
        return self._child(parent_fd, name, relative, create)

    @contextlib.contextmanager
    def _open_dir(self, relative: str, *, create: bool = False) -> Iterator[int]:
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            parts = relative.split("/") if relative else ()
            for i, part in enumerate(parts):
                if not part:
                    continue
                child = self._child(fd, part, "/".join(parts[: i + 1]), create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _child(self, fd: int, part: str, relative: str, create: bool) -> int:
        """The directory ``part`` of the directory ``fd`` (``relative`` below the root),
        opened without following a symlink; made when missing with ``create``."""
        try:
            return os.open(part, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
                os.fsync(fd)
            return os.open(part, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            kind = file_kind(lstat_at(part, fd).st_mode)
            path = self._root / relative  # named for the error only
            raise StorageError(f"{path} is {kind}, not a directory: not followed") from None

    def _open_regular(self, relative: str) -> int:
        """A read descriptor of the regular file ``relative``: never through a symlink, never a
        FIFO or a device (checked before opening and again on the opened file)."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent) as dir_fd:
            return open_regular_at(dir_fd, name, f"{self._root}/{relative}")[0]

    def _read_bounded(self, relative: str, limit: int, what: str) -> bytes:
        """The bytes of a regular file of at most ``limit`` bytes: a larger one is refused
        before reading, and one that grows while read is refused at ``limit + 1`` bytes."""
        parent, _, name = relative.rpartition("/")
        with self._dir(parent) as dir_fd:
            return read_regular_at(dir_fd, name, f"{self._root}/{relative}", limit, what)

    def _entry_mode(self, relative: str) -> int | None:
        """The type bits of ``relative`` itself (a symlink is not followed); None if missing."""
        parent, _, name = relative.rpartition("/")
        try:
            with self._dir(parent) as dir_fd:
                return lstat_at(name, dir_fd).st_mode
        except FileNotFoundError:
            return None

    def _names(self, directory: str) -> list[str]:
        """The names of the regular files of a layout directory (symlinks and other entries are
        :meth:`irregular_entries`)."""
        path = self._root / directory
        try:
            with self._dir(directory) as dir_fd, os.scandir(dir_fd) as it:
                return sorted(
                    e.name for e in it if is_name(e.name) and e.is_file(follow_symlinks=False)
                )
        except FileNotFoundError:
            raise NotFoundError(f"{path} is missing") from None
        except OSError as exc:
            raise storage_error(exc, "list", path) from exc

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

    def _remove(self, relative: str) -> bool:
        """Unlink the regular file ``relative`` through its directory's descriptor: never a
        symlink's target, never anything outside the dataset."""
        parent, _, name = relative.rpartition("/")
        path = self._root / relative
        with os_errors("remove", path):
            try:
                with self._dir(parent) as dir_fd:
                    mode = lstat_at(name, dir_fd).st_mode
                    if not stat.S_ISREG(mode):
                        raise StorageError(f"{path} is {file_kind(mode)}: not removed")
                    os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
        return True

    def _remove_entry(self, directory: str, name: str) -> None:
        """Remove ``directory/name``: a folder with everything in it (symlinks inside are
        unlinked, never followed), or a regular file; missing is fine."""
        with self._dir(directory) as dir_fd:
            try:
                mode = lstat_at(name, dir_fd).st_mode
            except FileNotFoundError:
                return
            if stat.S_ISDIR(mode):
                remove_tree(dir_fd, name, self._root / directory / name)
            elif stat.S_ISREG(mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
            else:
                raise StorageError(
                    f"{self._root / directory / name} is {file_kind(mode)}: not removed"
                )
