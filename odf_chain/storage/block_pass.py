"""One pass over a local ``blocks/`` directory: every block file read and hashed, on two cores,
in memory that does not grow with the chain.

Verify of a long chain reads every block file once; with a million files that is four million
system calls and as many hashes, most of the time a structural verify takes. The pass goes
through the directory listing a chunk of :data:`CHUNK_FILES` names at a time and hands each
chunk either to this process or, from :data:`HELPER_MIN_FILES` names on, to a helper process
(started fresh, never forked) whenever the helper has fewer than :data:`HELPER_BACKLOG` chunks
waiting: the two share the work by speed, not by a fixed split. A :class:`Worker` says what is
made of each chunk, the same in both processes: verify's decodes and judges it there
(:mod:`odf_chain.block_parts`), so only what is kept crosses the pipe; without one, the chunk's
bytes themselves (this file run as the helper: standard library and ``blake3`` only).

Nothing here holds the files' bytes beyond a chunk: a consumer keeps what it needs of each in
compact form (verify keeps columns; a block it wants whole later is read again by its name,
whose hash proves it the same bytes). The helper's chunks waiting to be consumed are at most
:data:`HELPER_BACKLOG`.

The checks are those of every block read: entries the listing says are regular files, opened
without following a symlink and without waiting on a FIFO, the opened file checked to be
regular and at most ``limit`` bytes, read in one call, and kept only when it did not change
size meanwhile. A file that fails any check is left out (``None``): reading it by name reports
exactly what is wrong. Should the helper fail in any way, the parent reads its chunks itself.

This file imports nothing from odf_chain: it runs as the helper's whole program (see
:data:`SHARES`).
"""

from __future__ import annotations

import array
import collections
import contextlib
import hashlib
import os
import queue
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Below this many files, starting a helper costs more than it saves.
HELPER_MIN_FILES = 20_000
CHUNK_FILES = 8192  # names per chunk: about 6 MB of block bytes held at a time
HELPER_BACKLOG = 2  # chunks waiting for the helper before this process reads one itself
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_HEADER = struct.Struct("<BI")  # status, length
_COUNT = struct.Struct("<I")  # a frame (of names, of an answer): its size first
_FRAME = struct.Struct("<II")  # a chunk's bytes: the count of names and the size of their bytes
_READ, _MISMATCH, _SKIPPED = 0, 1, 2


def _hasher(algorithm: str) -> Callable[[bytes], str]:
    if algorithm == "blake3":
        import blake3

        return lambda data: blake3.blake3(data).hexdigest()
    if algorithm == "sha3-256":
        return lambda data: hashlib.sha3_256(data).hexdigest()
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


class Hashes:
    """Does a file's content hash to its name? A name is a prefix naming the algorithm (five
    characters) and the hex digest; ``prefixes`` maps each known prefix to its algorithm."""

    def __init__(self, prefixes: Mapping[str, str], name_length: int) -> None:
        self.prefixes = dict(prefixes)
        self.name_length = name_length
        self.digests = {p: _hasher(a) for p, a in self.prefixes.items()}


def read_share(
    dir_fd: int, names: list[str], limit: int, hashes: Hashes | None
) -> list[tuple[bytes | None, bool]]:
    """(bytes or None, does it hash to its name) for each of ``names``: one loop with every
    call bound locally, since it runs a million times."""
    out: list[tuple[bytes | None, bool]] = []
    append, is_regular = out.append, stat.S_ISREG
    open_, fstat, read, close = os.open, os.fstat, os.read, os.close
    digests = {} if hashes is None else hashes.digests
    name_length = 0 if hashes is None else hashes.name_length
    for name in names:
        try:
            fd = open_(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            append((None, False))
            continue
        data = None
        try:
            opened = fstat(fd)
            size = opened.st_size
            if size <= limit and is_regular(opened.st_mode):
                data = read(fd, size + 1)
                if len(data) != size:  # not all of it, or it grew
                    data = None
        except OSError:
            data = None
        finally:
            close(fd)
        if data is None:
            append((None, False))
            continue
        digest = digests.get(name[:5]) if len(name) == name_length else None
        append((data, digest is not None and digest(data) == name[5:]))
    return out


@dataclass
class Share:
    """One chunk of the pass: each name's bytes (None: left to be read by name) and whether
    they hash to the name."""

    names: list[str]
    contents: list[bytes | None]
    matches: list[bool]


def own_share(dir_fd: int, names: list[str], limit: int, hashes: Hashes) -> Share:
    found = read_share(dir_fd, names, limit, hashes)
    return Share(names, [data for data, _ in found], [ok for _, ok in found])


@dataclass(frozen=True)
class Worker:
    """What a pass makes of each chunk: ``own`` of its :class:`Share` in this process; in the
    helper, ``script`` run with ``arguments`` and then the pass's own (it calls :func:`serve`),
    and ``parse`` turns the helper's answer for a chunk of names into the same thing as
    ``own`` (None: not a valid answer, the helper has failed)."""

    script: str
    arguments: list[str]
    own: Callable[[Share], object]
    parse: Callable[[bytes, list[str]], object | None]


def _encode_share(share: Share) -> bytes:
    """A share as the helper sends it: a status and length per name, then the bytes read."""
    headers, chunks = bytearray(), []
    for data, matches in zip(share.contents, share.matches, strict=True):
        if data is None:
            headers += _HEADER.pack(_SKIPPED, 0)
        else:
            headers += _HEADER.pack(_READ if matches else _MISMATCH, len(data))
            chunks.append(data)
    data = b"".join(chunks)
    return _FRAME.pack(len(share.names), len(data)) + headers + data


def _parse_share(raw: bytes, names: list[str]) -> Share | None:
    """The share the helper sent for ``names`` (see :func:`_encode_share`); None if malformed."""
    if len(raw) < _FRAME.size:
        return None
    count, size = _FRAME.unpack(raw[: _FRAME.size])
    end = _FRAME.size + count * _HEADER.size
    parsed = _parse_frame(raw[_FRAME.size : end], count) if count == len(names) else None
    if parsed is None or sum(length for _, length in parsed) != size or len(raw) != end + size:
        return None
    contents: list[bytes | None] = []
    matches, at = [], end
    for status, length in parsed:
        if status == _SKIPPED:
            contents.append(None)
        else:
            contents.append(raw[at : at + length])
            at += length
        matches.append(status == _READ)  # its word is taken: it runs this very code
    return Share(names, contents, matches)


# The bytes of every chunk as they are: what a pass yields without a worker of its own.
SHARES = Worker(__file__, [], lambda share: share, _parse_share)


def _parse_frame(headers: bytes, count: int) -> list[tuple[int, int]] | None:
    """A helper's answer for ``count`` names: (status, length) each; None if malformed."""
    if len(headers) != count * _HEADER.size:
        return None
    parsed = list(_HEADER.iter_unpack(headers))
    if any(status not in (_READ, _MISMATCH, _SKIPPED) for status, _ in parsed):
        return None
    if any(status == _SKIPPED and length for status, length in parsed):
        return None
    return parsed


class _Helper:
    """The helper process, fed chunks of names through a writer thread; a reader thread
    collects its answers (one frame per chunk, made by ``worker`` there)."""

    def __init__(self, dir_fd: int, limit: int, hashes: Hashes, worker: Worker) -> None:
        self.failed = False
        self._parse = worker.parse
        arguments = [*worker.arguments, str(dir_fd), str(limit), str(hashes.name_length)]
        arguments += [f"{p}={a}" for p, a in hashes.prefixes.items()]
        self._proc = subprocess.Popen(
            [sys.executable, "-I", worker.script, *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(dir_fd,),
        )
        self._waiting: collections.deque[list[str]] = collections.deque()  # sent, unanswered
        self._answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._files = 0
        threading.Thread(target=self._write, daemon=True).start()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _write(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            while (frame := self._outbox.get()) is not None:
                stdin.write(frame)
                stdin.flush()
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while len(head := stdout.read(_COUNT.size)) == _COUNT.size:
                (size,) = _COUNT.unpack(head)
                self._answers.put(stdout.read(size))
        except (OSError, ValueError):
            pass
        finally:
            self._answers.put(None)

    @property
    def backlog(self) -> int:
        return len(self._waiting)

    def send(self, names: list[str]) -> None:
        frame = "\n".join(names).encode("ascii")
        self._waiting.append(names)
        self._files += len(names)
        self._outbox.put(_COUNT.pack(len(frame)) + frame)

    def answered(self, *, wait: bool = False) -> Iterator[object]:
        """The shares answered so far (``wait``: all of them, until the helper ends)."""
        while self._waiting and not self.failed:
            try:
                raw = self._answers.get(block=wait)
            except queue.Empty:
                return
            made = None if raw is None else self._parse(raw, self._waiting[0])
            if made is None:
                self.failed = True
                return
            self._waiting.popleft()
            yield made

    def finish(self) -> Iterator[object]:
        """Every answer still to come; then the chunks it did not answer are :meth:`left`."""
        self._outbox.put(None)
        from odf_chain import helper_process  # not at the top: the helper runs this file alone

        timer = threading.Timer(helper_process.seconds_for(self._files), self.stop)
        timer.start()
        try:
            yield from self.answered(wait=True)
        finally:
            timer.cancel()
            self.stop()

    def left(self) -> list[list[str]]:
        """The chunks sent and not answered (the helper failed): this process reads them."""
        left = list(self._waiting)
        self._waiting.clear()
        return left

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdout,):
            if pipe is not None:
                pipe.close()


class Pass:
    """A pass over the block files of ``dir_fd`` (a descriptor of ``blocks/``, duplicated
    here): :meth:`shares` yields them a chunk at a time, once. ``block_name`` says which
    regular files are listed as block files: a test of each character (ASCII letters and
    digits, say), so that it holds for names joined exactly when it holds for each;
    ``irregular_of`` words what the listing found beside regular files (see
    Storage.irregular_entries), set as :attr:`irregular` once the listing is done."""

    def __init__(
        self,
        dir_fd: int,
        limit: int,
        hashes: Hashes,
        block_name: Callable[[str], bool],
        irregular_of: Callable[[list[os.DirEntry]], list[tuple[str, str]]],
    ) -> None:
        self._fd = os.dup(dir_fd)
        self._limit, self._hashes = limit, hashes
        self._block_name, self._irregular_of = block_name, irregular_of
        self.irregular: list[tuple[str, str]] | None = None
        self.stray: list[str] = []  # regular files named like no block, once the pass is over
        self._used = False

    def _listing(self) -> Iterator[list[str]]:
        """The block file names, a chunk at a time, in the order of their inode numbers.

        Files read in inode order are read about in the order they were written to the disk:
        on a cold page cache (a chain larger than the memory, or just copied) that is a sweep
        the disk's read-ahead serves, where the directory's own order (a hash order) is one
        random read per file. So the whole listing comes first, kept compact: a name of the
        canonical form (``f`` and lowercase hex) as its bytes and its inode number, 50 bytes a
        name with the sort; others (a handful, if any) as they are, last. The loop over the
        entries does the least it can per entry (the listing's own type, inode and name); the
        names are judged a chunk at a time."""
        import numpy as np  # this process only: the helper runs this file without it

        others: list[os.DirEntry] = []
        inodes: list[int] = []
        names: list[str] = []
        packed, numbers, odd = bytearray(), array.array("Q"), []
        keep, number, other = names.append, inodes.append, others.append
        with os.scandir(self._fd) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    keep(entry.name)
                    number(entry.inode())
                    if len(names) == CHUNK_FILES:
                        odd += _pack(names, inodes, packed, numbers)
                        names, inodes = [], []
                        keep, number = names.append, inodes.append
                else:
                    other(entry)
        odd += _pack(names, inodes, packed, numbers)
        self.irregular = self._irregular_of(others)
        del names, inodes, others
        if numbers:
            width = len(packed) // len(numbers)
            rows = np.frombuffer(packed, np.uint8).reshape(len(numbers), width)
            order = np.argsort(np.frombuffer(numbers, np.uint64), kind="stable")
            del numbers
            # the names in order, a chunk's bytes each, released as each chunk is handed out:
            # the listing is held twice for a moment here, then less and less (by the end of
            # the pass, when the chunks' columns add up, nothing of it is left)
            chunks = [
                rows[order[at : at + CHUNK_FILES]].tobytes()
                for at in range(0, len(order), CHUNK_FILES)
            ]
            del rows, order, packed
            chunks.reverse()
            step = 2 * width
            while chunks:
                digits = chunks.pop().hex()
                yield self._block_names(
                    ["f" + digits[i : i + step] for i in range(0, len(digits), step)]
                )
        odd.sort()
        for at in range(0, len(odd), CHUNK_FILES):
            yield self._block_names([name for _, name in odd[at : at + CHUNK_FILES]])

    def _block_names(self, names: list[str]) -> list[str]:
        """The block file names among ``names``: one test of the whole chunk, joined, when it
        passes (the usual case), else one name at a time."""
        if self._block_name("".join(names)):  # the test is one on each character
            return names
        kept = []
        for name in names:
            (kept if self._block_name(name) else self.stray).append(name)
        return kept

    def shares(self, worker: Worker = SHARES) -> Iterator[Any]:
        """What ``worker`` makes of every chunk of block files (by default the chunk itself,
        a :class:`Share`), the helper's chunks as it answers them."""
        if self._used:
            raise RuntimeError("a pass over blocks/ is read once")
        self._used = True
        helper: _Helper | None = None
        fd, limit, hashes = self._fd, self._limit, self._hashes
        try:
            listed = 0
            for names in self._listing():
                listed += len(names)
                if helper is None and listed >= HELPER_MIN_FILES and _helper_available():
                    try:
                        helper = _Helper(fd, limit, hashes, worker)
                    except (OSError, ValueError):
                        helper = None
                if helper is not None and not helper.failed and helper.backlog < HELPER_BACKLOG:
                    helper.send(names)
                else:
                    yield worker.own(own_share(fd, names, limit, hashes))
                if helper is not None:
                    yield from helper.answered()
            if helper is not None:
                yield from helper.finish()
                for names in helper.left():
                    yield worker.own(own_share(fd, names, limit, hashes))
        finally:
            if helper is not None:
                helper.stop()
            os.close(fd)

    def all(self) -> dict[str, tuple[bytes | None, bool]]:
        """Every file in one mapping (name: bytes or None, hashes to its name): small
        directories and tests."""
        return {
            name: (data, ok)
            for share in self.shares()
            for name, data, ok in zip(share.names, share.contents, share.matches, strict=True)
        }


def _pack(
    names: list[str], inodes: list[int], packed: bytearray, numbers: array.array
) -> list[tuple[int, str]]:
    """Add the names of the canonical form (``f`` and lowercase hex of one length: multibase
    base16, as block names are) to ``packed`` as bytes and their inode numbers to ``numbers``;
    return the others with theirs."""
    if not names:
        return []
    width = len(names[0])
    if width % 2 and all(len(n) == width and n[0] == "f" for n in names):
        digits = "".join([n[1:] for n in names])
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            raw = b""
        if raw.hex() == digits and (
            not numbers or len(raw) // len(names) == len(packed) // len(numbers)
        ):
            packed += raw
            numbers.extend(inodes)
            return []
    if len(names) == 1:
        return [(inodes[0], names[0])]
    half = len(names) // 2  # some name is not of the form: halves, down to the odd ones
    return _pack(names[:half], inodes[:half], packed, numbers) + _pack(
        names[half:], inodes[half:], packed, numbers
    )


def _helper_available() -> bool:
    from odf_chain import helper_process  # not at the top: the helper runs this file alone

    return helper_process.available()


def serve(argv: list[str], work: Callable[[Share], bytes]) -> None:
    """The helper's loop (``argv``: the pass's arguments): each chunk of names read from stdin
    is read from ``blocks/``, and what ``work`` makes of it written to stdout."""
    dir_fd, limit, name_length = (int(a) for a in argv[:3])
    hashes = Hashes(dict(a.split("=", 1) for a in argv[3:]), name_length)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while len(head := stdin.read(_COUNT.size)) == _COUNT.size:
        (size,) = _COUNT.unpack(head)
        names = stdin.read(size).decode("ascii").split("\n")
        answer = work(own_share(dir_fd, names, limit, hashes))
        stdout.write(_COUNT.pack(len(answer)) + answer)
        stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1:], _encode_share)
