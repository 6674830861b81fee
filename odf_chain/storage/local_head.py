"""The head of a local dataset: ``refs/head``, moved only by compare-and-swap under an OS lock
that dies with its holder, and ``logs/head`` (git's reflog), to which every move is appended,
so a head that moved back is known.

A head move makes an append's syncs (the count and its reasons: :mod:`odf_chain.storage.local`,
which also says why the head's file is exchanged with its staging file, ``refs/.head.next``,
rather than replaced): at once, before the rename, the new head's staging file, each new block
file and ``blocks/``
(so every block the new head needs has durable bytes and a durable name before the head does;
and ``data/`` for the slices, when it names any); then ``refs/`` after the rename (so the move
survives a power loss once it returns). Why they may run at once: :meth:`LocalHead._move_head`.
The head log line is appended after that and **not synced**:

- the log only ever lags: its lines (the move, and the repair of one it missed) are written
  after ``refs/`` is synced, so a power loss can take log lines (the last ones: a tail cut
  short, or a tail of zeros where the size reached the disk before the bytes) but never leave
  a line naming a head newer than the durable one;
- a lagging log is not a rollback: every head it names is the head or an ancestor of it, which
  is what verify's head-log check and ``chain.check_not_rolled_back`` accept;
- the next head move repairs it under the lock (:meth:`LocalHead._open_head_log`): a torn or
  zeroed tail is cut off, and a line from the last logged head to the current head is added, so
  the log again names every head a writer could have left behind.

What is given up: a move back to a head between the last synced line and the head at the power
loss (a backup restored right after a crash) is not seen; a move back past it still is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    StaleBaseError,
    StorageError,
    UnsyncedCommitError,
)
from odf_chain.storage.base import (
    HEAD_LOG,
    MAX_BLOCK_BYTES,
    MAX_HEAD_BYTES,
    MAX_HEAD_LOG_BYTES,
    STAGING,
    HeadMove,
    check_stored_block,
    head_log_line,
    last_complete_line,
    logged_head,
    parse_head_log,
    shown,
)
from odf_chain.storage.layout import check_name, is_name
from odf_chain.storage.local_files import (
    READ_FLAGS,
    DatasetDir,
    exchange_at,
    lstat_at,
    os_errors,
    place_new,
    read_regular_at,
    read_swapped_at,
    restage_locked,
    start_writeback,
    storage_error,
    sync_data,
    sync_together,
    write_all,
)
from odf_chain.storage.user_files import file_kind

Sync = tuple[Callable[[int], None], int]  # a sync function and the descriptor it syncs
HELD_FILES = 64
"""Block files a head move holds open for their syncs at most; a transaction of more has the
others synced (together) and closed first, so a long one never runs out of descriptors."""
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOG_TAIL = 4096  # a head log line is ~160 bytes: the last one is in this many
LOCK_TIMEOUT = 30.0
_LOCK_POLL = 0.005
HEAD_NEXT = ".head.next"
"""The new head's staging file, in ``refs/`` beside ``refs/head`` (written under the head lock:
one at a time). Exchanged with ``refs/head`` where the OS can, it then holds the previous head
(:meth:`LocalHead._move_head`)."""
HEAD_SPARE = ".head.spare"
"""The previous head's file once ``refs/`` was synced after the exchange that swapped it out:
the name says the disk no longer holds it as ``refs/head``, so the next move may overwrite it in
place (renamed back to :data:`HEAD_NEXT` first). Only a move that synced ``refs/`` names it so;
a :data:`HEAD_NEXT` found instead is a move's that did not finish."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _cut_zeros(fd: int, size: int) -> int:
    """Cut off the zero bytes that end the head log; its new size. The log is not synced, so a
    power loss can leave its last lines as zeros (a size that reached the disk before the bytes
    did); no line holds a zero byte, so they are never a move, whatever their length."""
    end = size
    while end:
        start = max(0, end - _LOG_TAIL)
        kept = os.pread(fd, end - start, start).rstrip(b"\0")
        if kept:
            end = start + len(kept)
            break
        end = start
    os.ftruncate(fd, end)
    return end


def _missing(path: Path) -> ConflictError:
    return ConflictError(
        f"{path} is missing at the head move (taken by gc, or never written): nothing was "
        "committed; retry the write"
    )


@contextlib.contextmanager
def _holding(held: contextlib.ExitStack, files: list[Sync]) -> Iterator[None]:
    """Close the descriptors of ``files`` (opened in the block) if the block fails; else leave
    them to ``held``, which closes them with the head move."""
    try:
        yield
    except BaseException:
        for _, fd in files:
            os.close(fd)
        raise
    for _, fd in files:
        held.callback(os.close, fd)


def _take_spare(refs_fd: int) -> None:
    """Under the head lock, before a move that replaces a head: name :data:`HEAD_NEXT` the file
    it may overwrite in place. A :data:`HEAD_NEXT` already there is an unfinished move's, which
    the disk may still hold as ``refs/head``: ``refs/`` is synced, settling it (rare: a writer
    killed mid-move, a failed sync). Otherwise the spare, if any, is renamed to it (never over
    anything: the lock keeps every other move out)."""
    try:
        lstat_at(HEAD_NEXT, refs_fd)
    except FileNotFoundError:
        with contextlib.suppress(FileNotFoundError):
            os.rename(HEAD_SPARE, HEAD_NEXT, src_dir_fd=refs_fd, dst_dir_fd=refs_fd)
    else:
        os.fsync(refs_fd)


def _sync_files(files: list[Sync]) -> None:
    """Sync ``files`` together and close them, emptying the list."""
    try:
        start_writeback(fd for _, fd in files)
        sync_together(files)
    finally:
        while files:
            os.close(files.pop()[1])


class LocalHead(DatasetDir):
    """The head and its log (see :class:`~odf_chain.storage.base.HeadStore`)."""

    @functools.cached_property
    def _head_path(self) -> Path:
        return self._root / "refs" / "head"

    def read_head(self) -> str | None:
        """The head block hash, or None for a dataset with no blocks yet."""
        try:
            with self._dir("refs") as refs_fd:
                return self._read_head_at(refs_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # an unreadable folder
            raise storage_error(exc, "read", self._head_path) from exc

    def _read_head_at(self, refs_fd: int) -> str | None:
        """:meth:`read_head` through a descriptor of ``refs/`` the caller holds. Read as a file
        a head move may swap out and rewrite (:func:`read_swapped_at`): a reader whose read
        straddles two moves would otherwise find a head not (yet) moved to."""
        try:
            data = read_swapped_at(refs_fd, "head", self._head_path, MAX_HEAD_BYTES, "a head")
        except FileNotFoundError:
            return None
        except OSError as exc:  # an unreadable file
            raise storage_error(exc, "read", self._head_path) from exc
        return self._parsed_head(data)

    def _parsed_head(self, data: bytes) -> str:
        head = data.decode("ascii", errors="replace").removesuffix("\n")
        if not is_name(head):
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
            raise storage_error(exc, "read", path) from exc
        return parse_head_log(data, str(path))

    def logged_head(self) -> str | None:
        """The last logged head, from the log's last few KiB (never the whole log)."""
        path = self._root / HEAD_LOG
        try:
            fd = self._open_regular(HEAD_LOG)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc, "read", path) from exc
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, min(size, _LOG_TAIL), size - min(size, _LOG_TAIL))
        except OSError as exc:
            raise storage_error(exc, "read", path) from exc
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
        with self._head_locked(timeout):
            yield

    @contextlib.contextmanager
    def _head_locked(self, timeout: float) -> Iterator[int]:
        """:meth:`head_lock`, giving the descriptor of ``refs/`` it locked in (held as long as
        the lock), through which the head move reads the head."""
        lock_path = f"{self._root}/refs/.head.lock"  # for errors only: a string, no Path
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with os_errors("open the head lock", lock_path), self._dir("refs") as refs_fd:
            fd = os.open(".head.lock", flags, 0o644, dir_fd=refs_fd)
            try:
                refs_fd = os.dup(refs_fd)
            except BaseException:
                os.close(fd)
                raise
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise storage_error(e, "lock", lock_path) from e
                if time.monotonic() >= deadline:
                    raise ConflictError(f"could not lock {lock_path} within {timeout:g} s")
                time.sleep(_LOCK_POLL)
            yield refs_fd
        finally:
            os.close(fd)  # closing the descriptor releases the flock
            os.close(refs_fd)

    def compare_and_swap_head(
        self,
        expected: str | None,
        new: str,
        *,
        blocks: Iterable[str] = (),
        data: Iterable[str] = (),
        once_moved: Callable[[], object] | None = None,
        timeout: float = LOCK_TIMEOUT,
        logged_is_expected: bool = False,
        new_blocks: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Point the head at ``new`` only if it still is ``expected``: of two writers appending
        to the same head, exactly one wins and the other learns so before anything is visible.

        ``new_blocks`` are written here, under the lock, once the head is checked
        (:meth:`_place_blocks`; removed again should the move fail before the rename).
        ``blocks`` and ``data`` name the other files the new head needs. They were put in place
        before the lock was taken, so gc (which deletes only under this lock) may have taken
        one as a leftover meanwhile: each is checked here, and a missing one refuses the move.
        So no acknowledged write ever lacks a file, nor, after a power loss, a file's name:
        ``blocks/`` (and ``data/`` when ``data`` names slices) is synced before the head moves.
        ``once_moved`` runs once the move is durable, under the lock (:meth:`_move_head`). The
        move is then appended to the head log. ``logged_is_expected``: also refuse
        (:class:`StaleBaseError`) unless the head log's last line names ``expected``, the check
        a writer that did not read the log first leaves to the move
        (:data:`odf_chain.chain.AT_THE_MOVE`).
        """
        blocks, data = list(blocks), list(data)
        check_name(new, "head")
        if expected is not None:
            check_name(expected, "expected head")
        for name, _ in new_blocks:
            check_name(name)
        with self._head_locked(timeout) as refs_fd, contextlib.ExitStack() as held:
            self._check_layout()  # as every write: none goes through a symlinked directory
            current = self._read_head_at(refs_fd)
            if current != expected:
                raise StaleBaseError(
                    f"head moved: expected {expected or 'no head'}, found "
                    f"{current or 'no head'}; another writer appended first — re-open and retry"
                )
            log_fd, repair = self._open_head_log(current)
            held.callback(os.close, log_fd)
            if logged_is_expected and repair:  # the log names another head: not decided here
                raise StaleBaseError(
                    f"the head log's last line does not name the head {current}: "
                    "read the log before writing"
                )
            created: list[str] = []
            try:
                syncs, there = self._place_blocks(held, new_blocks, created)
                # every other file the head will name, checked under the lock, with what
                # makes it durable
                syncs += self._named(held, "blocks", [*there, *blocks], sync_files=True)
                if data:  # the slices' bytes were synced by commit_data: their names are not
                    syncs += self._named(held, "data", data, sync_files=False)
                self._move_head(refs_fd, new.encode("ascii"), syncs, once_moved)
            except BaseException:
                if created:
                    self._withdraw_placed(refs_fd, new, created)
                raise
            # The head has moved: a failure now must not report the write as failed. The log
            # then misses this move until the next one repairs it (_open_head_log). Not
            # synced: a power loss can take these lines, which that repair re-derives from the
            # head (see the module docstring). The repair of a move the log missed goes in
            # only now, after refs/ is synced: the log never gets ahead of the head.
            with contextlib.suppress(OSError):
                write_all(log_fd, repair + head_log_line(expected, new, _now_ms()))

    def _move_head(
        self,
        refs_fd: int,
        head: bytes,
        syncs: list[Sync],
        once_moved: Callable[[], object] | None = None,
    ) -> None:
        """Write the new head to its staging file (:data:`HEAD_NEXT`), make it and everything
        in ``syncs`` durable at once, rename it to ``refs/head`` (an exchange of the two names
        where the OS can: the old head's file is the next move's staging file), then sync
        ``refs/`` (the syncs of an append: :mod:`odf_chain.storage.local`).

        The file written is the previous move's :data:`HEAD_SPARE` when there is one (that
        move synced ``refs/`` after its exchange, so the disk no longer holds it as
        ``refs/head``). A :data:`HEAD_NEXT` found instead is an unfinished move's (a writer
        killed between its exchange and sync 4, a failed sync 4): the disk may still hold it as
        ``refs/head``, and a new head written into it before its block is durable could
        survive a power loss alone, naming a block never written; ``refs/`` is synced first.
        Other writers (an older odf_chain, a filesystem backend on the same folder) make
        neither name: nothing here trusts what they wrote.

        Why syncs 1-3 may run at once and why the rename waits for all of them, crash by crash:

        - before the rename, ``refs/head`` is the old head, durable since the move that set
          it synced ``refs/`` (or since this one did, finding that move unfinished), and the
          staging file is not its file: whatever of the new block, its name or the staging file
          a power loss keeps or takes is named by no head; a block file it left torn is a
          leftover (verify's ``orphan-block``) no reader opens;
        - the rename is made only once all of syncs 1-3 have returned: should it survive a
          power loss, the block it names has its bytes (1) and its name (2), and the head file
          its bytes (3), on disk;
        - a reader sees the new head only after the rename, when the block is already in
          ``blocks/`` (linked before its sync, :meth:`_place_blocks`): it never sees a head
          naming a missing block, crash or no crash; nor, through a file the exchange swapped
          out and this move rewrote, one not moved to (:meth:`_read_head_at`);
        - sync 4 (``refs/``) after the rename, before returning: the acknowledged move survives
          a power loss; it cannot join the others (it is what makes the rename durable).

        ``once_moved`` (the derived index) runs after sync 4, still under the head lock (not
        when a sync fails: the index then lags, and readers catch up). Run
        beside a sync it saves nothing where the sync's wait is itself work for the same CPUs
        (a journal commit, a loop or virtual disk): measured on two cores, beside sync 4 an
        append was no faster on the root disk and slower on an in-memory ext4 image, by the
        hand-off to a sync thread; beside syncs 1-3 its files fell into their journal commit
        and ext4 made about 0.5 more commits per append (``docs/performance.md``).
        """
        path = self._head_path

        def with_the_others(fd: int) -> None:
            together = [(sync_data, fd), *syncs]
            start_writeback(fd for sync, fd in together if sync is sync_data)
            # syncs 1-3 together: the head's bytes, the blocks' bytes, blocks/ (and data/); on
            # ext4 about one journal commit instead of three
            sync_together(together)

        with os_errors("write", path):
            try:
                replaced = lstat_at("head", refs_fd)
            except FileNotFoundError:  # the first move
                replaced = None
            else:
                _take_spare(refs_fd)
            exchanged = staged = False
            try:
                fd = restage_locked(refs_fd, HEAD_NEXT, head, path.parent, not_of=replaced)
                staged = True
                try:
                    with_the_others(fd)
                finally:
                    os.close(fd)  # before the rename: a failed close then fails no moved head
                exchanged = exchange_at(refs_fd, HEAD_NEXT, "head")
                if not exchanged:
                    os.rename(HEAD_NEXT, "head", src_dir_fd=refs_fd, dst_dir_fd=refs_fd)
            except BaseException:
                if staged and not exchanged:  # else: nothing of ours, or the old head's file
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(HEAD_NEXT, dir_fd=refs_fd)
                raise
            # sync 4: the rename itself, through the lock's descriptor
            try:
                os.fsync(refs_fd)
            except OSError as exc:  # visible now, durable perhaps not: not a failed write
                raise UnsyncedCommitError(
                    f"{path}: the head moved to {head.decode()} (the write is visible), but "
                    f"syncing {path.parent} failed ({exc.strerror or exc}): the move may not "
                    "survive a power loss. Do not write it again; run chain-verify once the "
                    "disk is sound",
                    head=head.decode(),
                ) from exc
            if exchanged:  # refs/ synced since the exchange: the old head's file is a spare
                with contextlib.suppress(OSError):  # else the next move syncs refs/ first
                    os.rename(HEAD_NEXT, HEAD_SPARE, src_dir_fd=refs_fd, dst_dir_fd=refs_fd)
        if once_moved is not None:  # under the head lock still
            with contextlib.suppress(Exception):  # the head has moved: not the move's failure
                once_moved()

    def _place_blocks(
        self,
        held: contextlib.ExitStack,
        new_blocks: Sequence[tuple[str, bytes]],
        created: list[str],
    ) -> tuple[list[Sync], list[str]]:
        """Write the blocks of a head move into ``blocks/``, under the head lock: gc, which
        deletes only under it, cannot take them before the move, so they need neither a claim
        nor a look after. The syncs of their bytes (descriptors held in ``held``), and the
        names that were there already (checked to hold those very bytes; their sync and their
        look are :meth:`_named`'s). ``created`` gets each name this call created."""
        if not new_blocks:
            return [], []
        path = self._root / "blocks"
        files: list[Sync] = []
        there: list[str] = []
        with os_errors("write", path):
            staging_fd = held.enter_context(self._dir(STAGING, create=True))
            blocks_fd = held.enter_context(self._dir("blocks"))
            with _holding(held, files):
                for name, data in new_blocks:
                    if len(files) == HELD_FILES:  # a long transaction: these first
                        _sync_files(files)
                    with os_errors("write", f"{path}/{name}"):  # the block, not its staging
                        fd = place_new(staging_fd, blocks_fd, name, data, self._staging)
                    if fd is None:  # a retry's, or another writer's that lost the head race
                        check_stored_block(name, self._stored(blocks_fd, name), data)
                        there.append(name)
                        continue
                    created.append(name)
                    files.append((sync_data, fd))
        return files, there

    def _stored(self, blocks_fd: int, name: str) -> bytes:
        """The bytes of the block file ``name`` found in place of one being written."""
        try:
            return read_regular_at(
                blocks_fd, name, self._root / "blocks" / name, MAX_BLOCK_BYTES, "a block"
            )
        except (StorageError, OSError) as exc:  # a symlink, a FIFO, an unreadable file
            raise IntegrityError(f"block {name} cannot be read: {exc}") from None

    def _withdraw_placed(self, refs_fd: int, new: str, created: list[str]) -> None:
        """Remove the blocks :meth:`_place_blocks` created for a head move that failed, still
        under the head lock, once the head is read again and is not ``new`` (a failure after
        the rename leaves them: the head may name them). Nothing else can name a block file
        this move created. Best effort: one left is a leftover verify reports and gc removes."""
        with contextlib.suppress(Exception):
            if self._read_head_at(refs_fd) == new:
                return
            with self._dir("blocks") as blocks_fd:
                for name in reversed(created):  # the newest first: none left without its parent
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=blocks_fd)

    def _named(
        self, held: contextlib.ExitStack, directory: str, names: list[str], *, sync_files: bool
    ) -> list[Sync]:
        """Check (under the head lock) that each of ``names`` is a regular file of
        ``directory``; the syncs that make them durable: ``directory`` itself (their names),
        and with ``sync_files`` each file's bytes, through a descriptor opened here (the
        check itself: a file replaced by anything else fails it). The descriptors stay open
        in ``held``."""
        for name in names:
            check_name(name)
        path = self._root / directory
        with os_errors("sync", path):
            try:
                dir_fd = held.enter_context(self._dir(directory))
            except FileNotFoundError:  # the folder itself is gone: so are the files named
                if not names:
                    raise
                raise _missing(path / names[0]) from None
            files: list[Sync] = []
            with _holding(held, files):
                for name in names:
                    if sync_files:
                        if len(files) == HELD_FILES:  # a long transaction: these first
                            _sync_files(files)
                        try:
                            fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
                        except (FileNotFoundError, NotADirectoryError):
                            raise _missing(path / name) from None
                        except OSError as exc:
                            if exc.errno != errno.ELOOP:  # a symlink: not the file written
                                raise
                            raise _missing(path / name) from None
                        files.append((sync_data, fd))
                        mode = os.fstat(fd).st_mode
                    else:
                        try:
                            mode = lstat_at(name, dir_fd).st_mode
                        except FileNotFoundError:
                            mode = None
                    if mode is None or not stat.S_ISREG(mode):
                        raise _missing(path / name)
            # files before folders: sync threads take them in this order, and a folder's
            # fsync, having no data to write out, starts a journal commit soonest
            return [*files, (os.fsync, dir_fd)]

    @staticmethod
    def _open_log(logs_fd: int, path: Path) -> int:
        try:
            return os.open("head", _LOG_FLAGS, dir_fd=logs_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StorageError(f"{path} is a symlink: not written through") from None

    def _open_head_log(self, current: str | None) -> tuple[int, bytes]:
        """The head log open for appending (under the head lock), made consistent first: a last
        line a crash cut short (or a zeroed tail) is cut off. Returned with it: the line of the
        move the log misses when its last head is not ``current`` (a crash between a head move
        and its log write, or a power loss that took unsynced log lines, the last one or
        several), from the last logged head to ``current``, for the caller to append with its
        own line once its head move is durable. So the log never names a head that never was,
        nor one ahead of a durable head, and lacks at most the current one."""
        path = self._root / HEAD_LOG
        with os_errors("write", path), self._dir("logs", create=True) as logs_fd:
            try:
                fd = os.open("head", _LOG_FLAGS, dir_fd=logs_fd)  # there after the first move
            except FileNotFoundError:
                try:
                    fd = os.open("head", _LOG_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=logs_fd)
                except FileExistsError:  # made meanwhile
                    fd = self._open_log(logs_fd, path)
                else:
                    try:
                        os.fsync(logs_fd)
                    except BaseException:
                        os.close(fd)
                        raise
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
                if tail.endswith(b"\0"):  # lines the last power loss took: see _cut_zeros
                    size = _cut_zeros(fd, size)
                    tail = os.pread(fd, min(size, _LOG_TAIL), size - min(size, _LOG_TAIL))
                if tail and not tail.endswith(b"\n"):
                    end = tail.rfind(b"\n")
                    if end >= 0 or size <= _LOG_TAIL:  # a torn append: cut it off
                        os.ftruncate(fd, size - len(tail) + end + 1)
                        tail = tail[: end + 1]
                    else:  # a line longer than any we write: end it, verify names it
                        write_all(fd, b"\n")
                        tail = b"\n"
                logged = logged_head(last_complete_line(tail))
                repair = b""
                if current is not None and logged != current:
                    repair = head_log_line(logged, current, _now_ms())
            except BaseException:
                os.close(fd)
                raise
        return fd, repair
