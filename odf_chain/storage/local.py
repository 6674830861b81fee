"""One dataset directory on the local filesystem.

Layout (ODF's): ``blocks/<hash>`` immutable blocks, ``refs/head`` the head block hash,
``data/<hash>`` Parquet slices, ``checkpoints/``, ``info/`` (derived) and a hidden ``.staging/``
for in-flight writes. Every file appears by fsync + rename, so a reader (or a crash) never sees
half a file; the head moves only by compare-and-swap under an OS lock that dies with its holder,
and every move is appended to ``logs/head`` (git's reflog), so a head that moved back is known.

**Durability of an append** (what ``chain.commit`` returning promises: a power loss loses no
acknowledged commit, and never leaves a head naming a missing or torn block). A transaction of
k blocks syncs k + 3 times, 4 for one block (and s + 1 more for s data slices: each slice's
bytes, ``data/`` once, beside 2), each needed for one of those two promises:

1. each block file's bytes (fdatasync): else the head could name a block whose file a power
   loss left empty;
2. ``blocks/`` once (fsync): else the head could name a block whose directory entry a power
   loss dropped (``data/`` likewise, once, when the new blocks name slices);
3. the new head's bytes (fdatasync of its staging file, ``refs/.head.next``): else
   ``refs/head`` could be left empty, a dataset with no readable head;
4. ``refs/`` (fsync, after the rename, before returning): else the acknowledged commit could
   be undone by a power loss (the old head comes back).

1, 2 and 3 need only be complete before the rename that publishes the head, in no order among
themselves: the head move (:meth:`~.local_head.LocalHead.compare_and_swap_head`, under the
head lock) issues them at once and renames only when all have returned (a journalling
filesystem commits them together: an append costs about two journal commits, as any durable
small write does), then makes 4. The head move writes the block files itself, under the head
lock once the head is checked (a move refused writes none), and links each into ``blocks/``
before its bytes are synced, so a power loss before the rename can leave a block name on an
empty or torn file; no head names it (the old head is still the durable one), no reader opens
it, and verify reports it as an unreferenced block (gc removes it with the uncommitted files).
**The head's file is exchanged, not replaced**, where the OS can swap two names at once (Linux
``renameat2`` with ``RENAME_EXCHANGE``; elsewhere it is a rename, as before): the old head's
file becomes ``refs/.head.next``, renamed ``refs/.head.spare`` once ``refs/`` is synced, and the
next move overwrites the spare in place (same size: its sync writes bytes, no allocation). So an
append makes one file (its block's) and frees none. A rename over ``refs/head`` freed one per
append, and ext4 without a journal passes over every inode freed in the last minute (five,
while its table block is unwritten) each time it makes a file: a steady writer slowed down its
own next appends, and the rest of the filesystem's (measured:
``docs/performance.md#head-exchange``). The staging file sits in ``refs/``, so the exchange
touches one directory and sync 4 covers both names. Only a spare is overwritten without more
ado: its name is given after the sync, so the disk no longer holds it as ``refs/head``. A
``.head.next`` found instead is an unfinished move's (a writer killed between its exchange and
sync 4, a failed sync 4), which the disk may still hold as ``refs/head``: ``refs/`` is synced
before it is written, since a head written into it before its block is durable could survive a
power loss alone. Either is reused only as a regular file of one link (a hard-link backup's
copy is never written through) that is not the head's own file. Readers take ``refs/head``'s
bytes only if, once read, the name still names that file and it is still linked and unchanged
(:func:`~.local_files.read_swapped_at`): a reader whose read straddles two moves could
otherwise see a head not (yet) moved to. Another tool reading ``refs/head`` without that check
could, in that case, see the head a move is about to set.

A slice's bytes are still synced before its name
(:meth:`LocalStorage.commit_data`: a slice is large, its sync is its write, and it is made
before the lock is taken).

Not synced: the head log line (``logs/head``, appended after 4; :mod:`.local_head` argues why
a lost line is repaired and never misread as a rollback) and the derived index (``info/``, a
cache: :mod:`odf_chain.index.update`). 2 cannot be folded into 4 (two directories, and POSIX
makes an entry durable only by an fsync of its own directory), nor 1 and 3 into one (two files).
A block or slice whose name is not yet synced is named by no head: a power loss that takes it
loses nothing acknowledged.

Reads never follow a symlink below the dataset root (the root itself may be one: it is the
user's path), take regular files only (a FIFO cannot block a read, a device cannot feed one
forever) and are bounded by the limits in :mod:`odf_chain.storage.base`. Deletions go through
directory descriptors opened the same way, so nothing outside the dataset can be removed.

:class:`LocalStorage` is put together by job: the symlink-free file work and the dataset root
in :mod:`~odf_chain.storage.local_files`, the head and its log in
:mod:`~odf_chain.storage.local_head`, derived files in :mod:`~odf_chain.storage.local_derived`;
blocks, data slices and leftovers are here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from odf_chain.errors import IntegrityError, NotFoundError, OdfChainError, StorageError
from odf_chain.storage import block_pass
from odf_chain.storage.base import (
    MAX_BLOCK_BYTES,
    STAGING,
    STRAY_BLOCK_FILE,
    STRAY_FILE,
    DataCommit,
    EntryInfo,
    check_staged_size,
    check_stored_block,
)
from odf_chain.storage.block_pass import Hashes
from odf_chain.storage.layout import LAYOUT, SUBDIRS, SUFFIX, check_name, is_name
from odf_chain.storage.local_derived import LocalDerived
from odf_chain.storage.local_files import (
    create_claimed,
    fsync_dir,
    install_new,
    lstat_at,
    os_errors,
    read_regular_at,
    remove_tree,
    storage_error,
    sync_data,
    write_all,
    write_atomic,
)
from odf_chain.storage.local_head import LOCK_TIMEOUT, LocalHead

if TYPE_CHECKING:  # pyarrow.fs loads when a filesystem is asked for
    import pyarrow.fs as pafs

# names callers and tests import from here, from before the split by job
_is_name = is_name
__all__ = ["LAYOUT", "LOCK_TIMEOUT", "LocalStorage", "check_name", "fsync_dir", "write_atomic"]


_STRAY = {"data": STRAY_FILE, "blocks": STRAY_BLOCK_FILE}  # regular files named like none


class LocalStorage(LocalHead, LocalDerived):
    """The files of one dataset. Knows bytes and names only, never what a block means."""

    def __init__(self, root: Path, *, made_root: bool = False) -> None:
        super().__init__(root)
        self._made_root = made_root  # create() made the root folder itself
        self._claims: dict[str, int] = {}  # staged path -> descriptor holding its shared lock

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
        with os_errors("create a dataset in", root):
            if root.exists() and not root.is_dir():
                raise OdfChainError(f"cannot create a dataset in {root}: not a directory")
            made_root = not root.exists()
            made = [p for p in (root, *root.parents) if not p.exists()]  # its new folders
            root.mkdir(parents=True, exist_ok=True)
            head = root / "refs" / "head"
            if head.exists() or head.is_symlink():
                raise OdfChainError(f"already a dataset: {root}")
            for sub in SUBDIRS:
                (root / sub).mkdir(exist_ok=True)
            fsync_dir(root)
            for folder in made:  # a new folder's own name is durable once the one above it is
                fsync_dir(folder.parent)
        return cls(root, made_root=made_root)

    @classmethod
    def open(cls, root: str | Path) -> LocalStorage:
        """Open an existing dataset; ``blocks/`` and ``refs/`` are what make it one."""
        root = Path(root)
        for sub in ("blocks", "refs"):
            with os_errors("open a dataset in", root):
                is_dir = (root / sub).is_dir()
            if not is_dir:
                raise NotFoundError(f"not a dataset: {root} (no {sub}/ directory)")
        return cls(root)

    def irregular_entries(
        self, directories: Iterable[str] = ("blocks", "data", STAGING)
    ) -> list[tuple[str, str]]:
        """Entries of ``blocks/``, ``data/`` and ``.staging/`` (or those of them named) that are
        neither regular files nor (in ``.staging/``) a writer's folder: symlinks, FIFOs,
        devices; and the files of ``data/`` and ``blocks/`` named like no slice or block
        (``extra.parquet``, ``notes.txt``), which no block or head can name but a tool reading
        the folder as a whole would read.
        No read of odf_chain follows them and gc removes none of them; returned as (relative
        path, what it is)."""
        found = []
        for directory in directories:
            try:
                with self._dir(directory) as dir_fd, os.scandir(dir_fd) as it:
                    # the directory listing's own type first: no stat per regular file
                    others = []
                    for e in it:
                        if not e.is_file(follow_symlinks=False):
                            others.append(e)
                        elif directory in _STRAY and not is_name(e.name):
                            found.append((f"{directory}/{e.name}", _STRAY[directory]))
                    found += self._irregular(directory, others)
            except (OSError, OdfChainError):  # missing or refused: the listings report it
                continue
        return sorted(found)

    @property
    def location(self) -> str:
        return str(self._root)

    @property
    def filesystem(self) -> pafs.FileSystem:
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem()

    def fs_path(self, relative: str) -> str:
        return str(self._root.absolute() / relative)

    def spark_uri(self, fs_path: str) -> str:
        """``file://`` and the plain path: without a scheme Spark would resolve it against the
        cluster's default filesystem (HDFS, say); Hadoop does not percent-decode paths."""
        return f"file://{fs_path}"

    # -- blocks ---------------------------------------------------------------------------------

    def _block_path(self, name: str) -> Path:
        return self._blocks / check_name(name, "block name")

    def write_block(self, name: str, data: bytes) -> bool:
        """Store a block; True if this call created the file, False if it was already there.
        A commit does not come here on a local dataset: its head move writes its blocks under
        the head lock (``compare_and_swap_head(new_blocks=)``); this stores one on its own.

        Names are content hashes, so rewriting the same bytes is a no-op and different bytes
        under an existing name mean something is corrupt. Of writers racing to store the same
        name exactly one gets True: a writer that then loses the head race can
        :meth:`remove_block` exactly what it created.

        Durability: none here. The file is written whole before it is linked into ``blocks/``
        (so no reader ever sees part of it), and the head move that names it syncs its bytes
        and ``blocks/`` together before the head moves (:meth:`compare_and_swap_head`; why that
        order is enough: the module docstring). Until then it is an unreferenced leftover,
        which a power loss may take or leave torn: nothing was acknowledged.
        """
        path = self._block_path(name)
        staging = self.staging_dir
        # no look first: the link finds a file already there (a retry, a racing writer), and a
        # look would cost one more lookup in a folder of a million names at every append
        with os_errors("write", path):
            fd, tmp = create_claimed(staging, f".{name}.", ".tmp")
            try:  # open (the claim held) until it is in place
                write_all(fd, data)
                created = install_new(tmp, path)
            finally:
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
                finally:
                    os.close(fd)
        if created:  # its bytes and blocks/ are synced by the head move
            return True
        check_stored_block(name, self.read_block(name), data)
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
                    return read_regular_at(
                        dir_fd, name, f"{blocks}/{name}", MAX_BLOCK_BYTES, "a block"
                    )

            yield read

    def read_all_blocks(self, hashes: Hashes) -> block_pass.Pass | None:
        """Every block file (verify of a long chain reads them all anyway), a chunk at a time
        as the listing goes: its bytes, or None when it fails a check (reading it by name
        reports it exactly), and whether it hashes to its name. The same checks as
        :meth:`block_reader` in fewer system calls, on two cores for a long chain
        (:mod:`odf_chain.storage.block_pass`). None when ``blocks/`` cannot be opened (the walk
        then reports that per block)."""
        try:
            with self._dir("blocks") as dir_fd:
                return block_pass.Pass(
                    dir_fd,
                    MAX_BLOCK_BYTES,
                    hashes,
                    is_name,
                    lambda others: self._irregular("blocks", others),
                )
        except (OSError, OdfChainError):
            return None

    def has_block(self, name: str) -> bool:
        """True if ``blocks/<name>`` exists, as whatever kind of entry (reading it says more)."""
        path = self._block_path(name)
        with os_errors("check", path):
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
                        and is_name(e.name)
                        and e.is_file(follow_symlinks=False)
                    ):
                        found.append(e.name)
                        if len(found) >= limit:
                            break
        except FileNotFoundError:
            raise NotFoundError(f"{path} is missing") from None
        except OSError as exc:
            raise storage_error(exc, "list", path) from exc
        return sorted(found)

    def remove_block(self, name: str) -> bool:
        """Delete ``blocks/<name>``; True if it was there. Checks nothing: meant for
        :func:`~odf_chain.chain.withdraw` and gc, which prove first that no head names it.
        Removing a block the chain references breaks the dataset."""
        return self._remove(f"blocks/{check_name(name, 'block name')}")

    # -- data slices ----------------------------------------------------------------------------

    def stage_file(self, suffix: str = "") -> Path:
        """A fresh, empty, uniquely named file in ``.staging/`` for a writer to fill before
        :meth:`commit_data`; the name is reserved by creating it."""
        if not SUFFIX.fullmatch(suffix):
            raise OdfChainError(f"invalid staging suffix {suffix!r}")
        staging = self.staging_dir
        with os_errors("create a staging file in", staging):
            # the claim is held until commit_data or discard (or this process dies)
            fd, tmp = create_claimed(staging, "data.", suffix)
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
        with os_errors("resolve", staged):
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
        """Move a filled staging file to ``data/<name>``; say whether this call created the
        file (see :class:`DataCommit`). ``size``, when given, is what the writer wrote: a
        staged file of another size is refused (IntegrityError) before anything moves.

        Durability: the bytes are synced before the file gets its name (a slice is large: its
        sync is its write); the name becomes durable with the head move that names the slice,
        which fsyncs ``data/`` once for all the transaction's slices before the head moves.

        Names are content hashes, so an existing slice of the same size holds the same bytes,
        or should: the staged copy is renamed over it, which repairs a damaged one. A size
        mismatch means the name does not fit one of the two files: IntegrityError, the staged
        file is left for :meth:`discard`. Of writers racing to store the same name exactly one
        gets ``created=True`` (see :meth:`remove_data`).
        """
        staged = self._check_staged(staged)
        target = self.data_path(name)
        with os_errors("store", target):
            with open(staged, "rb") as f:
                sync_data(f.fileno())  # else the name could outlive the bytes in a power loss
                staged_size = os.fstat(f.fileno()).st_size
            check_staged_size(name, staged_size, size)
            created = install_new(staged, target)
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
            os.utime(target)  # data/ is fsynced by the head move (compare_and_swap_head)
        self._release(staged)
        return DataCommit(target, created)

    def discard(self, staged: Path) -> None:
        """Drop a staged file (an abandoned write); missing is fine."""
        self._release(staged)
        *folders, name = self._staged_parts(staged)
        with os_errors("remove", staged):
            try:
                with self._dir("/".join([STAGING, *folders])) as dir_fd:
                    if stat.S_ISDIR(lstat_at(name, dir_fd).st_mode):
                        raise StorageError(f"{staged} is a directory, not a staged file")
                    os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass

    def data_path(self, name: str) -> Path:
        return self._root / "data" / check_name(name, "data slice name")

    def has_data(self, name: str) -> bool:
        """True if ``data/<name>`` exists, as whatever kind of entry (opening it says more)."""
        path = self.data_path(name)
        with os_errors("check", path):
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
            raise storage_error(exc, "open", path) from exc

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
            if stat.S_ISDIR(lstat_at(name, dir_fd).st_mode):
                remove_tree(dir_fd, name, area)

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
            raise storage_error(exc, "list", path) from exc

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
        with os_errors("remove" if remove else "check", self._root / STAGING / name):
            with self._dir(STAGING) as dir_fd:
                try:
                    mode = lstat_at(name, dir_fd).st_mode
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
                        if remove and lstat_at(name, dir_fd).st_ino == os.fstat(fd).st_ino:
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
        with os_errors("check", path):
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
