"""Derived files of a local dataset (``info/``, see :mod:`odf_chain.index`): caches, written
without fsync and never trusted blindly, read with the same care as a block (no symlink,
regular files, bounded), and never a way out of ``info/``."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator

from odf_chain.errors import StorageError
from odf_chain.storage.base import DERIVED_DIR, check_derived
from odf_chain.storage.local_files import (
    DatasetDir,
    lstat_at,
    open_regular_at,
    os_errors,
    storage_error,
    write_all,
)
from odf_chain.storage.user_files import file_kind


class LocalDerived(DatasetDir):
    """Files below ``info/`` (see :class:`~odf_chain.storage.base.DerivedStore`)."""

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

    def read_derived(self, relative: str, limit: int) -> bytes | None:
        """See :meth:`Storage.read_derived`: read like a block (no symlink, regular, bounded)."""
        path = f"{DERIVED_DIR}/{check_derived(relative)}"
        try:
            return self._read_bounded(path, limit, "a derived file")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc, "read", self._root / path) from exc

    def read_derived_range(
        self, relative: str, start: int, length: int, limit: int
    ) -> tuple[int, bytes] | None:
        """See :meth:`Storage.read_derived_range`: the file opened as :meth:`read_derived` opens
        it, then one positioned read."""
        path = f"{DERIVED_DIR}/{check_derived(relative)}"
        parent, _, name = path.rpartition("/")
        try:
            with self._dir(parent) as dir_fd:
                fd, opened = open_regular_at(dir_fd, name, f"{self._root}/{path}")
            try:
                size = opened.st_size
                if size > limit:
                    raise StorageError(
                        f"{self._root / path} is larger than the {limit:,}-byte limit for a "
                        f"derived file ({size:,} bytes): not read"
                    )
                offset = min(start, size) if start >= 0 else max(size + start, 0)
                wanted = max(min(length, size - offset), 0)
                chunks = []
                while wanted:  # a regular file's pread comes up short only at its end
                    chunk = os.pread(fd, wanted, offset)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    offset, wanted = offset + len(chunk), wanted - len(chunk)
                return size, b"".join(chunks)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise storage_error(exc, "read", self._root / path) from exc

    def write_derived(self, relative: str, data: bytes, *, durable: bool = False) -> None:
        """See :meth:`Storage.write_derived`. A cache needs no fsync: a crash leaves the old
        file or the new one (rename), and readers check what they use. ``durable`` (a queue
        such as the OpenLineage outbox, whose file stands for a promise to send) fsyncs the
        file before the rename and the folder after it."""
        parent, _, name = f"{DERIVED_DIR}/{check_derived(relative)}".rpartition("/")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os_errors("write", self._root / parent / name), self._dir(parent, create=True) as d:
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, flags, 0o666, dir_fd=d)
            try:
                try:
                    write_all(fd, data)
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
                if durable:
                    os.fsync(d)
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
        path = f"{self._root}/{parent}/{name}"  # for errors only: a string, no Path
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with os_errors("write", path), self._dir(parent, create=True) as d:
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
            os_errors("remove", self._root / parent / name),
            contextlib.suppress(FileNotFoundError),
        ):
            with self._dir(parent) as dir_fd:
                if stat.S_ISLNK(lstat_at(name, dir_fd).st_mode):  # the link, never its target
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
            raise storage_error(exc, "list", self._root / relative) from exc
