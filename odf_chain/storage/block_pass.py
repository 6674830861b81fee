"""One pass over a local ``blocks/`` directory: every block file read and hashed, on two cores.

Verify of a long chain reads every block file once; with 100k files that is 400k system calls
and as many hashes, most of the time a structural verify takes. Reading and hashing a file is
independent of every other, so a share of the files goes to a helper process: this file run
as a script (standard library and ``blake3`` only, so it starts in a few tens of milliseconds,
and started fresh, never forked), given the directory as an inherited descriptor and the names
on its standard input. It returns each file's bytes and whether its content hashes to its name.

The checks are those of every block read: entries the listing says are regular files, opened
without following a symlink and without waiting on a FIFO, the opened file checked to be
regular and at most ``limit`` bytes, read in one call, and kept only when it did not change
size meanwhile. A file that fails any check is left out (``None``): reading it by name reports
exactly what is wrong. Should the helper fail in any way, the parent reads its share itself.

This file imports nothing from odf_chain: it runs as the helper's whole program.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import sys
from collections.abc import Callable, Mapping

# Below this many files, starting a helper costs more than it saves.
HELPER_MIN_FILES = 20_000
HELPER_SHARE = 0.45  # of the files, to the helper: the parent has the decoding to do after
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_HEADER = struct.Struct("<BI")  # status, length
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
    call bound locally, since it runs a hundred thousand times."""
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


class _Helper:
    """The helper process reading ``names``; :meth:`result` is its answer, or None."""

    def __init__(self, dir_fd: int, names: list[str], limit: int, hashes: Hashes) -> None:
        from odf_chain import helper_process  # not at the top: the helper runs this file alone

        self._names = names
        arguments = [str(dir_fd), str(limit), str(hashes.name_length)]
        arguments += [f"{p}={a}" for p, a in hashes.prefixes.items()]
        self._helper = helper_process.Helper(
            __file__,
            arguments,
            "\n".join(names).encode("ascii"),
            timeout=helper_process.seconds_for(len(names)),
            pass_fds=(dir_fd,),
        )

    def result(self) -> list[tuple[bytes | None, bool]] | None:
        out = self._helper.result()
        # Its word that a file hashes to its name is taken: it runs this very file's code.
        return None if out is None else _parse(out, len(self._names))


def _parse(out: bytes, count: int) -> list[tuple[bytes | None, bool]] | None:
    """The helper's answer: a header per file, then the bytes of those it read."""
    if len(out) < count * _HEADER.size:
        return None
    headers = list(_HEADER.iter_unpack(out[: count * _HEADER.size]))
    at = count * _HEADER.size
    result: list[tuple[bytes | None, bool]] = []
    for status, length in headers:
        if status == _SKIPPED:
            result.append((None, False))
            continue
        if status not in (_READ, _MISMATCH) or at + length > len(out):
            return None
        result.append((out[at : at + length], status == _READ))
        at += length
    return result if at == len(out) else None


Found = dict[str, tuple[bytes | None, bool]]  # name: (its bytes or None, hashes to its name)


class Pass:
    """A pass over ``names`` in ``dir_fd``: :attr:`first` is read when this returns (the
    parent's share, or all of it), :meth:`rest` waits for the helper's share. The caller can
    decode the first share while the helper still reads.

    Holds its own descriptor of the directory until :meth:`rest` (should the helper fail, its
    share is read here)."""

    def __init__(
        self,
        dir_fd: int,
        names: list[str],
        limit: int,
        hashes: Hashes,
        irregular: list[tuple[str, str]] | None = None,
    ) -> None:
        from odf_chain import helper_process  # not at the top: the helper runs this file alone

        # what the storage's listing found beside regular files (see Storage.irregular_entries)
        self.irregular = irregular

        self._helper: _Helper | None = None
        self._theirs: list[str] = []
        own = names
        if len(names) >= HELPER_MIN_FILES and helper_process.available():
            cut = int(len(names) * (1 - HELPER_SHARE))
            own, self._theirs = names[:cut], names[cut:]
            self._helper = _Helper(dir_fd, self._theirs, limit, hashes)
        self._fd = os.dup(dir_fd) if self._helper is not None else -1
        self._limit, self._hashes = limit, hashes
        self.first: Found = dict(zip(own, read_share(dir_fd, own, limit, hashes), strict=True))

    def rest(self) -> Found:
        """The helper's share ({} when there was none); call once."""
        if self._helper is None:
            return {}
        try:
            answer = self._helper.result()
            if answer is None:  # the helper failed: its share is read here
                answer = read_share(self._fd, self._theirs, self._limit, self._hashes)
        finally:
            os.close(self._fd)
            self._helper = None
        return dict(zip(self._theirs, answer, strict=True))

    def all(self) -> Found:
        """Both shares in one mapping."""
        return {**self.first, **self.rest()}


def _main(argv: list[str]) -> None:
    dir_fd, limit, name_length = int(argv[0]), int(argv[1]), int(argv[2])
    hashes = Hashes(dict(a.split("=", 1) for a in argv[3:]), name_length)
    names = sys.stdin.buffer.read().decode("ascii").split("\n")
    headers, chunks = bytearray(), []
    for data, matches in read_share(dir_fd, names, limit, hashes):
        if data is None:
            headers += _HEADER.pack(_SKIPPED, 0)
        else:
            headers += _HEADER.pack(_READ if matches else _MISMATCH, len(data))
            chunks.append(data)
    out = sys.stdout.buffer
    out.write(headers)
    out.write(b"".join(chunks))
    out.flush()


if __name__ == "__main__":
    _main(sys.argv[1:])
