"""The head of a dataset on a ``pyarrow.fs`` filesystem: ``refs/head`` moved by the store's
compare-and-swap where it has one, else by read, compare, write and read back under
``single_writer``; and ``logs/head``, rewritten whole on each move (conditionally where the
store can, so two writers' lines both land). See :mod:`odf_chain.storage.fs`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager

from odf_chain.errors import ConflictError, FormatError, OdfChainError, StorageError
from odf_chain.storage.base import (
    HEAD_LOG,
    MAX_HEAD_BYTES,
    MAX_HEAD_LOG_BYTES,
    HeadMove,
    head_log_line,
    last_complete_line,
    logged_head,
    no_lock,
    parse_head_log,
    shown,
)
from odf_chain.storage.fs_files import FsFiles
from odf_chain.storage.layout import check_name, is_name

_LOG_ATTEMPTS = 64  # conditional appends to the head log before its line is left to the next move


class FsHead(FsFiles):
    """The head and its log (see :class:`~odf_chain.storage.base.HeadStore`)."""

    def read_head(self) -> str | None:
        try:
            data = self._read("refs/head", MAX_HEAD_BYTES, "a head")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {self._join('refs/head')}: {exc}") from exc
        return self._parse_head(data)

    def _head_log_bytes(self) -> bytes:
        try:
            return self._read(HEAD_LOG, MAX_HEAD_LOG_BYTES, "the head log")
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise StorageError(f"cannot read {self._join(HEAD_LOG)}: {exc}") from exc

    def read_head_log(self) -> list[HeadMove]:
        return parse_head_log(self._head_log_bytes(), self._join(HEAD_LOG))

    def logged_head(self) -> str | None:
        return logged_head(last_complete_line(self._head_log_bytes()))

    @property
    def locks_head(self) -> bool:
        return False

    @property
    def head_moves_atomically(self) -> bool:
        """Through conditional writes the store was found to enforce (tried once per process:
        :meth:`~odf_chain.storage.conditional.ConditionalStore.precondition_gap`)."""
        return self._conditional is not None and self._conditional.precondition_gap() is None

    def head_lock(self, timeout: float = 0.0) -> AbstractContextManager[None]:
        """No lock to take here (see the module docstring): callers check :attr:`locks_head`."""
        return no_lock()

    def compare_and_swap_head(
        self,
        expected: str | None,
        new: str,
        *,
        blocks: Iterable[str] = (),
        data: Iterable[str] = (),
        once_moved: Callable[[], object] | None = None,
        new_blocks: Sequence[tuple[str, bytes]] = (),
        **_: object,
    ) -> None:
        """:meth:`_swap_head`, then ``once_moved``, its failure swallowed. ``new_blocks`` is
        for stores with a head lock: here blocks are written before the move."""
        if new_blocks:
            raise ValueError("a store without a head lock writes blocks before the head move")
        self._swap_head(expected, new, blocks=blocks, data=data)
        if once_moved is not None:
            with contextlib.suppress(Exception):  # the head has moved: not the move's failure
                once_moved()

    def _swap_head(
        self, expected: str | None, new: str, *, blocks: Iterable[str], data: Iterable[str]
    ) -> None:
        """Move the head from ``expected`` to ``new`` if it is still at ``expected``, once the
        files the new head needs are checked to be there (see LocalStorage), and log the move.
        A compare-and-swap on stores with conditional writes; read, compare, write and read
        back under ``single_writer`` (see the module docstring)."""
        check_name(new, "head")
        if expected is not None:
            check_name(expected, "expected head")
        self.check_writable()
        if self._conditional is not None:
            found = self._conditional.read("refs/head", MAX_HEAD_BYTES, "a head")
            current = None if found is None else self._parse_head(found[0])
        else:
            current = self.read_head()
        if current != expected:
            raise ConflictError(
                f"head moved: expected {expected or 'no head'}, found {current or 'no head'}; "
                "another writer appended first — re-open and retry"
            )
        self._check_needed(blocks, data)
        now_ms = time.time_ns() // 1_000_000
        if self._conditional is not None:
            payload = new.encode("ascii")
            if found is None:
                if not self._conditional.create("refs/head", payload):
                    raise ConflictError(
                        f"head of {self.location} was created by another writer while this one "
                        "created it: nothing was committed; re-open and retry"
                    )
            else:
                self._conditional.replace("refs/head", payload, found[1], "the head")
            # the head has moved: a failed log write must not report the write as failed (the
            # next move appends the missing line)
            with contextlib.suppress(OdfChainError, OSError):
                self._append_head_log(current, expected, new, now_ms)
            return
        log = self._completed_log(self._head_log_bytes(), current, now_ms)
        self._put("refs/head", new.encode("ascii"))
        if self.read_head() != new:
            raise ConflictError(
                f"head of {self.location} was moved by another writer while this one moved it"
            )
        with contextlib.suppress(OdfChainError, OSError):
            self._put(HEAD_LOG, log + head_log_line(expected, new, now_ms))

    def _parse_head(self, data: bytes) -> str:
        head = data.decode("ascii", errors="replace").removesuffix("\n")
        if not is_name(head):
            raise FormatError(f"{self._join('refs/head')}: invalid head {shown(data)}")
        return head

    def _check_needed(self, blocks: Iterable[str], data: Iterable[str]) -> None:
        for directory, names in (("blocks", blocks), ("data", data)):
            for name in names:
                relative = f"{directory}/{check_name(name)}"
                if not self._exists(relative):
                    raise ConflictError(
                        f"{self._join(relative)} is missing at the head move (taken by gc, or "
                        "never written): nothing was committed; retry the write"
                    )

    @staticmethod
    def _completed_log(log: bytes, current: str | None, now_ms: int) -> bytes:
        """The head log ready for the next line: whole lines, and a line for a move to
        ``current`` whose own log write failed (``current`` named nowhere in the log; a line
        that only landed after a later writer's is not missing)."""
        if log and not log.endswith(b"\n"):  # an upload never tears; still, end the line
            log += b"\n"
        if current is not None and current.encode("ascii") not in log:
            log += head_log_line(logged_head(last_complete_line(log)), current, now_ms)
        return log

    def _append_head_log(
        self, current: str | None, expected: str | None, new: str, now_ms: int
    ) -> None:
        """Append the move's line by conditional writes, re-reading after each lost race, so
        that writers moving the head one after another all keep their lines."""
        assert self._conditional is not None
        line = head_log_line(expected, new, now_ms)
        for _ in range(_LOG_ATTEMPTS):
            found = self._conditional.read(HEAD_LOG, MAX_HEAD_LOG_BYTES, "the head log")
            log = self._completed_log(b"" if found is None else found[0], current, now_ms)
            if line in log:  # a retry after a write that landed but was not acknowledged
                return
            if found is None:
                if self._conditional.create(HEAD_LOG, log + line):
                    return
                continue
            try:
                self._conditional.replace(HEAD_LOG, log + line, found[1], "the head log")
                return
            except ConflictError:
                continue
