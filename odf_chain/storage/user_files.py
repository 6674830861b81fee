"""Files a user names outside any dataset: schema files, receipts, key files.

The path is the user's own, so a symlink in it is followed (unlike inside a dataset, see
:mod:`odf_chain.storage.local`). What it names must still be a regular file of bounded size:
a FIFO would block the read, ``/dev/zero`` would never end it, a huge file would fill memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from odf_chain.errors import FormatError, NotFoundError, StorageError

# Opened non-blocking: should a FIFO be there, the open returns at once and fstat refuses it.
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_READ_CHUNK = 1 << 20


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for an error message."""
    for test, kind in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return kind
    return "of an unknown kind"


def read_at_most(fd: int, limit: int, size: int | None = None) -> bytes:
    """What ``fd`` holds, but never more than ``limit + 1`` bytes: a caller that gets more than
    ``limit`` knows the file is too large (or grew while it was read) without reading it all.

    ``size``, the regular file's size as its caller found it: a read that returns fewer bytes
    than asked, ending exactly there, ended at the file's end (the one place a regular file's
    read comes up short), and no read is made to find that out."""
    chunks, total = [], 0
    # a file of known size is asked for one byte more than it holds, so its read comes up
    # short at its end: no buffer of ``limit`` (or a chunk's) bytes is made for a 70-byte head
    found = limit if size is None else min(limit, size)
    while total <= limit:
        wanted = min(_READ_CHUNK, (found if total <= found else limit) + 1 - total)
        chunk = os.read(fd, wanted)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if len(chunk) < wanted and total == size:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def open_regular(path: str | Path, what: str) -> int:
    """A read descriptor of the regular file ``path`` names (the caller closes it)."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise NotFoundError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise StorageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte, which no path can hold (os.open's ValueError)
        raise StorageError(f"cannot read {what} {path!r}: a path cannot hold a NUL byte") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StorageError(f"{what} {path}: not a regular file ({file_kind(mode)})")
    os.set_blocking(fd, True)
    return fd


def read_regular(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` names, at most ``limit`` of them: a larger file is
    refused before reading, one that grows while it is read at ``limit + 1`` bytes."""
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FormatError(
                f"{what} {path}: {size:,} bytes, more than a {what} can be (limit {limit:,} bytes)"
            )
        data = read_at_most(fd, limit)
    except OSError as exc:
        raise StorageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FormatError(f"{what} {path}: more than a {what} can be (limit {limit:,} bytes)")
    return data
