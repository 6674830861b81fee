"""What every storage backend offers the layers above it.

Two backends implement it: :class:`~odf_chain.storage.local.LocalStorage` (a directory on the
local filesystem: fsync, rename, an OS lock for the head) and
:class:`~odf_chain.storage.fs.FsStorage` (any ``pyarrow.fs`` filesystem: S3, GCS, HDFS, ...).
Names are content hashes; ``staged`` values are paths inside :attr:`Storage.filesystem`.

:class:`Storage` is the union of narrow protocols, one per job (kamu's split of blocks, refs
and data): :class:`BlockStore`, :class:`HeadStore` (and :class:`ChainStore`, the two together),
:class:`DataStore`, :class:`DerivedStore`, :class:`LeftoverStore` and :class:`Place`, each
:class:`Located` (errors name the dataset). A function that needs one part asks for it, so its
signature says what it can touch.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol

from odf_chain.errors import FormatError, IntegrityError, StorageError
from odf_chain.storage.block_pass import Hashes, Pass

if TYPE_CHECKING:  # pyarrow.fs loads when a filesystem is asked for
    import pyarrow.fs as pafs

STAGING = ".staging"
HEAD_LOG = "logs/head"

# Reads are bounded so a hostile or damaged file (a symlink to /dev/zero, a huge file in the
# place of a block) cannot exhaust memory. A head is one multibase hash (~70 bytes).
MAX_HEAD_BYTES = 1024
# Blocks are metadata: a SetDataSchema of thousands of columns is a few hundred KiB; ODF's
# reference implementation writes nothing near this.
MAX_BLOCK_BYTES = 64 * 1024 * 1024
# One line per head move (~160 bytes): about 1.6 million head moves, more than any chain whose
# blocks a verify walk could hold.
MAX_HEAD_LOG_BYTES = 256 * 1024 * 1024
# Derived files (``info/``, see :mod:`odf_chain.index`) are caches: every read of one is bounded
# by its caller, and a name is a plain relative path of these parts (no "..", no absolute path).
DERIVED_DIR = "info"
_DERIVED_PART = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,127}")
_SHOWN = 24  # characters of an invalid value shown in an error, escaped


class DataCommit(NamedTuple):
    """What ``commit_data`` did: where the slice is, and whether this call created
    ``data/<name>`` (False: a file of that name was already there)."""

    path: object
    created: bool


class EntryInfo(NamedTuple):
    """Age and size of a leftover (a file, or a writer's folder: the sum of its files)."""

    mtime: float
    size: int


class HeadMove(NamedTuple):
    """One line of the head log: the head moved from ``old`` (None: no head, or a head from
    before the log existed) to ``new`` at ``time_ms`` (Unix milliseconds)."""

    old: str | None
    new: str
    time_ms: int


_LOG_LINE = re.compile(r"(-|[0-9a-zA-Z]+) ([0-9a-zA-Z]+) ([0-9]{1,15})")


def shown(value: bytes | str) -> str:
    """A short, escaped prefix of a value that was refused: enough to recognise it, never a
    file's content echoed whole (a head that is someone's /etc/shadow, say)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="backslashreplace")
    prefix = value[:_SHOWN]
    return ascii(prefix) + ("..." if len(value) > _SHOWN else "")


def head_log_line(old: str | None, new: str, time_ms: int) -> bytes:
    return f"{old or '-'} {new} {time_ms}\n".encode("ascii")


def parse_head_log(data: bytes, where: str) -> list[HeadMove]:
    """The moves a head log holds, oldest first. A last line without its newline is an append a
    crash cut short: the move it records may never have been acknowledged, so it is skipped (the
    next head move truncates it). Any other malformed line is an error naming the line."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn append
    moves = []
    for number, raw in enumerate(lines, 1):
        match = _LOG_LINE.fullmatch(raw.decode("ascii", errors="replace"))
        if match is None:
            raise FormatError(f"{where} line {number}: not '<old|-> <new> <unix ms>': {shown(raw)}")
        old, new, millis = match.groups()
        moves.append(HeadMove(None if old == "-" else old, new, int(millis)))
    return moves


def check_derived(relative: str) -> str:
    """``relative`` (a path below ``info/``) if every part of it is a plain name: a derived file
    can never be named outside ``info/``."""
    parts = relative.split("/") if isinstance(relative, str) else [None]
    if not all(isinstance(p, str) and _DERIVED_PART.fullmatch(p) for p in parts):
        raise FormatError(f"invalid derived file name {relative!r}: expected parts [0-9A-Za-z._-]")
    return relative


def last_complete_line(tail: bytes) -> bytes | None:
    """The last newline-terminated line of the end of a file (``tail``), if it holds one."""
    end = tail.rfind(b"\n")
    if end < 0:
        return None
    start = tail.rfind(b"\n", 0, end) + 1
    return tail[start:end]


def logged_head(line: bytes | None) -> str | None:
    """The ``new`` head of a head log line, or None when there is none or it is malformed."""
    if line is None:
        return None
    match = _LOG_LINE.fullmatch(line.decode("ascii", errors="replace"))
    return match.group(2) if match else None


class Located(Protocol):
    """What every part of a store has: the dataset's name, for the errors it words."""

    @property
    def location(self) -> str:
        """Where the dataset is, as the user named it (a path or a URI)."""


class Place(Located, Protocol):
    """Where a dataset's files are, for the code that hands them to another reader (pyarrow,
    Spark) instead of reading them through the store."""

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The ``pyarrow.fs`` filesystem the dataset is on (picklable: Spark tasks use it)."""

    def fs_path(self, relative: str) -> str:
        """``relative`` (``data/<hash>``, ``.staging/...``) as a path in :attr:`filesystem`."""

    def spark_uri(self, fs_path: str) -> str:
        """A path of :attr:`filesystem` as Spark (Hadoop) names it."""


class BlockStore(Located, Protocol):
    """The immutable blocks, by content hash: all a walk down the chain reads."""

    def write_block(self, name: str, data: bytes) -> bool: ...
    def read_block(self, name: str) -> bytes: ...
    def block_reader(self) -> AbstractContextManager[Callable[[str], bytes]]:
        """``read_block`` for a walk over many blocks (one directory descriptor, say)."""

    def read_all_blocks(self, hashes: Hashes) -> Pass | None:
        """Every block file by name, in one pass (verify of a long chain): its bytes (None for
        a file left to be read by name: it failed a check) and whether they hash to its name.
        None where one pass is no cheaper than reading block by block (an object store)."""

    def has_block(self, name: str) -> bool: ...
    def block_names(self) -> list[str]: ...
    def block_names_starting(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` names of block files starting with ``prefix`` (a hash prefix a
        user typed), sorted: a listing, no block read. Regular files only (no symlink
        followed, as :meth:`block_names`)."""

    def remove_block(self, name: str) -> bool: ...


class DataStore(Located, Protocol):
    """The Parquet slices, by content hash, and the staging area writers fill them in."""

    def stage_file(self, suffix: str = "") -> object: ...
    def staging_area(self, prefix: str) -> str: ...
    def commit_data(self, staged: object, name: str, size: int | None = None) -> DataCommit: ...
    def discard(self, staged: object) -> None: ...
    def discard_area(self, area: str) -> None: ...
    def has_data(self, name: str) -> bool: ...
    def data_names(self) -> list[str]: ...
    def remove_data(self, name: str) -> bool: ...
    def open_data(self, name: str) -> BinaryIO: ...


class LeftoverStore(Located, Protocol):
    """What verify reports and gc removes: staged entries, entries that are not files, and the
    layout itself."""

    def leftover_staging(self) -> list[str]: ...
    def staged_in_use(self, name: str) -> bool: ...
    def remove_staged(self, name: str) -> bool: ...
    def entry_info(self, relative: str) -> EntryInfo | None: ...
    def irregular_entries(
        self, directories: Iterable[str] = ("blocks", "data", STAGING)
    ) -> list[tuple[str, str]]: ...
    def check_layout(self) -> None: ...
    def remove_empty_layout(self) -> None: ...


STRAY_FILE = "a regular file named like no slice"
"""What :meth:`LeftoverStore.irregular_entries` calls a file of ``data/`` no block can name."""
STRAY_BLOCK_FILE = "a regular file named like no block"
"""What :meth:`LeftoverStore.irregular_entries` calls a file of ``blocks/`` no head can name."""


class DerivedStore(Located, Protocol):
    """Derived files below ``info/`` (caches such as the index): no fsync, never trusted
    blindly. Nothing here reads or moves the chain, so a cache cannot damage it."""

    def derived_batch(self) -> contextlib.AbstractContextManager[None]:
        """A scope for several derived-file calls in a row (a backend may keep handles)."""
        ...

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A scope for the calls of one operation, an append say (a backend may keep handles
        and what it checked about the dataset's layout until it ends)."""
        ...

    def read_derived(self, relative: str, limit: int) -> bytes | None:
        """The bytes of ``info/<relative>`` (a regular file, at most ``limit`` bytes, no symlink
        followed), or None when it is missing."""

    def read_derived_range(
        self, relative: str, start: int, length: int, limit: int
    ) -> tuple[int, bytes] | None:
        """Part of ``info/<relative>`` (as :meth:`read_derived` finds it): its size, and at most
        ``length`` of its bytes from ``start`` (from the end when negative, as in a slice), or
        None when it is missing. A file above ``limit`` bytes is refused by its size, unread:
        a reader that needs a record or two of a long file does not hold the file."""

    def write_derived(self, relative: str, data: bytes, *, durable: bool = False) -> None:
        """Replace ``info/<relative>`` whole (temporary file, then rename; no fsync unless
        ``durable``: then the file is on disk when this returns)."""

    def overwrite_derived(self, relative: str, data: bytes) -> None:
        """Replace the content of ``info/<relative>`` where it is (no new file, no rename: the
        cheap way for a file rewritten at every append). A reader may meet it half written, so
        only for files that carry their own checksum."""

    def patch_derived(self, relative: str, offset: int, data: bytes) -> bool:
        """Make ``info/<relative>`` (created if missing) hold ``data`` at ``offset`` and nothing
        after it: one small write for an append. False, writing nothing, when the file is
        shorter than ``offset`` (it lacks earlier records)."""

    def remove_derived(self, relative: str) -> None:
        """Remove the file or folder ``info/<relative>``; missing is fine."""

    def list_derived(self, directory: str) -> list[str]:
        """The names of the regular files in ``info/<directory>`` ([] when it is missing)."""


class HeadStore(Located, Protocol):
    """The head (the one mutable name), its log, and how a writer moves it."""

    def read_head(self) -> str | None: ...
    def read_head_log(self) -> list[HeadMove]: ...
    def logged_head(self) -> str | None:
        """The head the head log's last complete line moved to (None: no log, or no line),
        read cheaply: what a writer checks before it moves the head."""

    def compare_and_swap_head(
        self,
        expected: str | None,
        new: str,
        *,
        blocks: Iterable[str] = (),
        data: Iterable[str] = (),
        once_moved: Callable[[], object] | None = None,
        logged_is_expected: bool = False,
        new_blocks: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Move the head from ``expected`` to ``new`` (ConflictError when it is not there), once
        the ``blocks`` and ``data`` files it names are checked to be in place (and, asked only
        of stores that lock the head, the ``new_blocks`` written: under the lock, once the head
        is checked, and removed again when the move fails); then
        ``once_moved``, never when the move is refused: a cache that follows the head (the
        derived index), run under the head lock where there is one (so no other writer's
        ``once_moved`` comes between), its failure swallowed (the head has moved).
        ``logged_is_expected`` (asked only of stores that lock the head): refuse with
        :class:`~odf_chain.errors.StaleBaseError` unless the head log's last line names
        ``expected``."""

    @property
    def locks_head(self) -> bool:
        """True when :meth:`head_lock` excludes writers (an OS lock); False where it cannot
        (object stores), so callers that must exclude writers know not to rely on it."""

    def head_lock(self, timeout: float = ...) -> AbstractContextManager[None]: ...

    @property
    def head_moves_atomically(self) -> bool:
        """True when a head move that raised ConflictError never made its block the head, not
        even for a moment (a lock, or a store's compare-and-swap), so a losing writer may
        remove what it wrote; False for a read-compare-write move (``single_writer``)."""


class ChainStore(BlockStore, HeadStore, Protocol):
    """The chain itself: its blocks and its head (kamu's metadata chain: blocks and refs).
    What a reader that walks back from the head asks for."""


class Storage(Place, BlockStore, DataStore, LeftoverStore, DerivedStore, HeadStore, Protocol):
    """The bytes of one dataset: blocks, the head, data slices, a staging area and derived
    files; every backend offers all of it. A function that uses only part of it says so by
    asking for the narrow protocol (a :class:`BlockStore` to walk, a :class:`DerivedStore`
    to keep a cache), so a reader asks only for what it reads."""


def check_stored_block(name: str, stored: bytes, data: bytes) -> None:
    """A block file ``name`` is there already: the block being written, or an error saying
    what the file is. A crash before a head move can leave a torn file under a block's name
    (its bytes are synced with the head move that names it); it is kept, as any leftover, for
    the user to look at: verify reports it and ``gc --discard-uncommitted`` removes it."""
    if stored == data:
        return
    from odf_chain.format.multihash import Multihash

    try:
        expected = Multihash.from_multibase(name)
        whole = Multihash.digest(expected.algorithm, stored) == expected
    except FormatError:
        whole = False
    if whole:
        raise IntegrityError(f"block {name} already stored with different content")
    raise IntegrityError(
        f"block {name}: a file of that name is there and is not that block ({len(stored):,} "
        "bytes that do not hash to it: torn by a crash before a head named it, or altered); "
        "chain-verify reports it, `odf-chain gc --discard-uncommitted` removes it if no head "
        "names it"
    )


def check_staged_size(name: str, staged: int | None, written: int | None) -> int | None:
    """The staged file's size, if it is the size its writer wrote (or no size was given)."""
    if written is not None and staged != written:
        raise IntegrityError(
            f"data slice {name}: its writer wrote {written:,} bytes, the store holds {staged:,}; "
            "the upload was altered on its way (nothing was committed)"
        )
    return staged


@contextlib.contextmanager
def no_lock() -> Iterator[None]:
    yield


@contextlib.contextmanager
def arrow_errors(action: str, where: str):
    """Turn pyarrow's I/O errors (``OSError`` subclasses) into a StorageError naming ``where``."""
    try:
        yield
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot {action} {where}: {exc}") from exc
