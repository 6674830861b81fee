"""The object-level work of a dataset on a ``pyarrow.fs`` filesystem, which every part of
:class:`~odf_chain.storage.fs.FsStorage` (blocks, slices, the head, derived files) shares:
where a name is, whether it is there, and reading and writing one file whole, with one request
where the store has conditional writes (:mod:`odf_chain.storage.conditional`)."""

from __future__ import annotations

import contextlib
import secrets

import pyarrow.fs as pafs

from odf_chain.errors import StorageError
from odf_chain.storage.base import STAGING, arrow_errors
from odf_chain.storage.conditional import ConditionalStore
from odf_chain.storage.layout import is_name


class FsFiles:
    """The files of one dataset on a ``pyarrow.fs`` filesystem, by relative name, and whether
    this store may be written (see :mod:`odf_chain.storage.fs`)."""

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        root: str,
        uri: str | None = None,
        *,
        conditional: ConditionalStore | None = None,
        single_writer: bool = False,
    ) -> None:
        """``conditional``: the same dataset's objects through a store that writes under a
        precondition (the head's compare-and-swap); without one, writing needs
        ``single_writer`` (see :mod:`odf_chain.storage.fs`)."""
        self._fs = filesystem
        self._root = root.rstrip("/")
        self._uri = uri or self._root
        self._conditional = conditional
        self._single_writer = single_writer
        self._staging_ready = False
        self._derived_dirs: set[str] = set()

    def check_writable(self) -> None:
        """Refuse to write where two writers could both win, unless told there is only one.

        A store whose conditional writes were tried and found not enforced (or failing) counts
        as one without them: refused, or under ``single_writer`` written through ``pyarrow.fs``
        alone, as any filesystem without conditional writes."""
        if self._conditional is not None:
            gap = self._conditional.precondition_gap()
            if gap is not None:
                if not self._single_writer:
                    raise StorageError(
                        f"{self.location}: this store does not enforce the conditional writes "
                        f"odf_chain moves the head by ({gap}), so two writers could both move "
                        "the head and one write would be lost; writing is refused. Pass "
                        "single_writer=True (--single-writer) if this dataset has one writer"
                    )
                self._conditional = None
        if self._conditional is None and not self._single_writer:
            raise StorageError(
                f"{self.location}: this filesystem offers no conditional write odf_chain can "
                "use, so two writers could both move the head and one write would be lost; "
                "writing is refused. Use an s3://, gs:// or abfs:// URI (compare-and-swap), "
                "or pass single_writer=True (--single-writer) if this dataset has one writer"
            )

    # -- where things are -----------------------------------------------------------------------

    @property
    def location(self) -> str:
        return self._uri

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    def _join(self, relative: str) -> str:
        return f"{self._root}/{relative}" if self._root else relative

    def _staging(self, name: str) -> str:
        """A path in ``.staging/``, whose folder exists (local and HDFS filesystems need it)."""
        if not self._staging_ready and self._conditional is None:  # object stores: no folders
            with arrow_errors("create", self._join(STAGING)):
                self._fs.create_dir(self._join(STAGING), recursive=True)
            self._staging_ready = True
        return self._join(f"{STAGING}/{name}")

    def _info(self, relative: str) -> pafs.FileInfo:
        with arrow_errors("check", self._join(relative)):
            return self._fs.get_file_info(self._join(relative))

    def _exists(self, relative: str) -> bool:
        """Is there a file at ``relative``? One HEAD on an object store (``pyarrow.fs`` lists
        a missing name as a possible folder too)."""
        if self._conditional is not None:
            return self._conditional.size(relative) is not None
        return self._info(relative).type == pafs.FileType.File

    def _file_info(self, relative: str) -> pafs.FileInfo:
        """The info of a file that must be a file: FileNotFoundError if missing, StorageError
        for anything else (a directory; on a local filesystem a FIFO or device)."""
        info = self._info(relative)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self._join(relative))
        if info.type != pafs.FileType.File:
            kind = info.type.name.lower()
            raise StorageError(f"{self._join(relative)} is not a regular file ({kind}): not read")
        return info

    def _read(self, relative: str, limit: int, what: str, *, folders: bool = True) -> bytes:
        """A file of at most ``limit`` bytes, refused by its listed size before reading and
        read at most ``limit + 1`` bytes (a file that grows meanwhile is refused too). One GET
        on a store with conditional writes (its listed size is checked before the body).

        A name missing there is looked at again as a "folder" (objects under that name and a
        slash), refused as not a file; ``folders=False`` skips that look (a HEAD and a LIST)
        where a folder would do no harm and a missing file is common (derived files)."""
        if self._conditional is not None:
            found = self._conditional.read(relative, limit, what)
            if found is None:
                if folders:
                    self._file_info(relative)
                raise FileNotFoundError(self._join(relative))
            return found[0]
        info = self._file_info(relative)
        too_large = f"{self._join(relative)} is larger than the {limit:,}-byte limit for {what}"
        if info.size is not None and info.size > limit:
            raise StorageError(f"{too_large} ({info.size:,} bytes): not read")
        with self._fs.open_input_stream(self._join(relative)) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise StorageError(f"{too_large} (it grew while being read): not read")
        return data

    def _put(self, relative: str, data: bytes) -> None:
        """Write ``relative`` whole: upload under a fresh staging name, then move into place;
        on an object store, one PUT (an object appears whole when its upload completes)."""
        if self._conditional is not None:
            self._conditional.put(relative, data)
            return
        tmp = self._staging(f".{secrets.token_hex(8)}.tmp")
        target = self._join(relative)
        with arrow_errors("write", target):
            with self._fs.open_output_stream(tmp) as f:
                f.write(data)
            try:
                self._fs.move(tmp, target)
            except BaseException:
                self._delete_quietly(tmp)
                raise

    def _relative(self, fs_path: str) -> str:
        return fs_path.removeprefix(self._root + "/") if self._root else fs_path

    def _delete_quietly(self, fs_path: str) -> None:
        if self._conditional is not None:  # pyarrow.fs would put a marker for the folder back
            with contextlib.suppress(StorageError):
                self._conditional.delete(self._relative(fs_path))
            return
        with contextlib.suppress(OSError):
            self._fs.delete_file(fs_path)

    def _names(self, relative: str) -> list[str]:
        selector = pafs.FileSelector(self._join(relative), allow_not_found=True)
        with arrow_errors("list", self._join(relative)):
            infos = self._fs.get_file_info(selector)
        return sorted(
            i.base_name for i in infos if i.type == pafs.FileType.File and is_name(i.base_name)
        )
