"""Step 5: report what is in the dataset's directories but not in the chain, as warnings.

Unreferenced blocks and data files, abandoned staging files and entries that are not regular
files are not part of the dataset, but an auditor wants to know, and gc plans from this list
(:attr:`VerifyReport.uncommitted`, :attr:`VerifyReport.descendants`): unreferenced blocks that
descend from the head may be a rolled-back head's, and are kept as evidence.
"""

from __future__ import annotations

from odf_chain.chain import parse_block_name
from odf_chain.chain_walk import Walk
from odf_chain.errors import NotFoundError, OdfChainError
from odf_chain.events import AddData, ExecuteTransform
from odf_chain.format.codec import decode_block
from odf_chain.format.multihash import Multihash
from odf_chain.storage import Storage
from odf_chain.storage.base import STAGING, STRAY_BLOCK_FILE, STRAY_FILE
from odf_chain.verify.report import VerifyReport


def _listing(list_names, directory: str, report: VerifyReport, *, needed: bool) -> list:
    """A directory listing, or [] with a ``layout`` problem (an error when the chain needs the
    directory) when the directory is missing or cannot be listed."""
    try:
        return list_names()
    except OdfChainError as exc:
        missing = isinstance(exc, NotFoundError)
        message = f"the {directory} directory is missing" if missing else str(exc)
        report.add("error" if needed else "warning", "layout", message, path=directory)
        return []


_LISTED = 5


def _descendants(
    storage: Storage, walk: Walk, orphans: list[str], report: VerifyReport
) -> dict[str, int]:
    """Unreferenced blocks that descend from the head (their ``prev_block_hash`` is the head, or
    another such block), by name with their sequence numbers; reported as one warning, and
    recorded with the slices they name in ``report.descendants`` (gc keeps them all).

    A write that dies between writing its blocks and moving the head leaves at most two of them
    (a schema block and its AddData); more mean the head was moved backwards.
    """
    if not orphans:
        return {}
    children: dict[str, list[tuple[str, int]]] = {}
    slices: dict[str, tuple[str, ...]] = {}
    for name in orphans:
        try:
            expected = parse_block_name(name)
            data = storage.read_block(name)
            if Multihash.digest(expected.algorithm, data) != expected:
                continue  # damaged: its link cannot be trusted
            block = decode_block(data)
        except OdfChainError:
            continue
        report.bytes_hashed += len(data)
        prev = None if block.prev_block_hash is None else str(block.prev_block_hash)
        if prev is not None:
            children.setdefault(prev, []).append((name, block.sequence_number))
        event = block.event
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            slices[name] = (str(event.new_data.physical_hash),)
        report.uncommitted[name] = (prev, slices.get(name, ()))
    found: dict[str, int] = {}
    frontier = [report.head] if report.head is not None else []
    while frontier:
        parent = frontier.pop()
        for name, seq in children.get(parent, ()):
            if name not in found and name not in walk.visited:
                found[name] = seq
                frontier.append(name)
    if not found:
        return found
    report.descendants = {name: slices.get(name, ()) for name in found}
    named = sum(len(v) for v in report.descendants.values())
    kept = f"; they name {named} data file{'s' if named != 1 else ''}" if named else ""
    by_seq = sorted(found, key=lambda n: (found[n], n))
    n = len(found)
    listed = ", ".join(by_seq[:_LISTED]) + (f" and {n - _LISTED} more" if n > _LISTED else "")
    low, high = found[by_seq[0]], found[by_seq[-1]]
    seqs = f"sequence number {low}" if low == high else f"sequence numbers {low}..{high}"
    head_seq = walk.chain.sequence_number(-1) if len(walk.chain) else None
    report.add(
        "warning",
        "unreferenced-descendants",
        f"{n} unreferenced block{'s descend' if n > 1 else ' descends'} from the head "
        f"({seqs}: {listed}){kept}: the head may have been rolled back (an interrupted write "
        "leaves at most two); gc keeps them",
        sequence_number=head_seq,
        block_hash=report.head,
        path="refs/head",
    )
    return found


def check_leftovers(storage: Storage, walk: Walk, report: VerifyReport) -> None:
    if walk.complete:
        why = (
            "block is not part of the chain (a writer's that lost or crashed, or a rolled-back "
            "head's): gc keeps it and the slice it names unless --discard-uncommitted names it"
        )
    else:
        why = (
            "block is not reachable from the head (the walk stopped early: it may be in the chain)"
        )
    # a damaged block the chain names is not a leftover
    listing = None  # the one pass's, else a listing now
    if not walk.listed:
        listing = _listing(storage.block_names, "blocks/", report, needed=True)
    orphans = walk.visited.others(listing)
    descendants = _descendants(storage, walk, orphans, report)
    for name in orphans:
        if name not in descendants:
            report.add("warning", "orphan-block", why, block_hash=name, path=f"blocks/{name}")
    # a slice a block outside the chain names is kept with it (a rolled-back suffix's data?)
    kept = {n for _, names in report.uncommitted.values() for n in names}
    data_names = _listing(storage.data_names, "data/", report, needed=walk.chain.has_slices())
    named = walk.chain.names_slices(data_names)
    for name, is_named in zip(data_names, named, strict=True):
        if not is_named and name not in kept:
            report.add(
                "warning",
                "orphan-data",
                "data file is not named by any block (an interrupted write?)",
                path=f"data/{name}",
            )
    for name in _listing(storage.leftover_staging, ".staging/", report, needed=False):
        report.add(
            "warning",
            "staging-leftover",
            "abandoned in-flight file",
            path=f".staging/{name}",
        )
    if walk.irregular is None:
        irregular = storage.irregular_entries()
    else:  # blocks/ as the one pass listed it
        irregular = sorted(walk.irregular + storage.irregular_entries(("data", STAGING)))
    for path, kind in irregular:
        folder, _, name = path.partition("/")
        if kind in (STRAY_FILE, STRAY_BLOCK_FILE):
            ours = False
        elif folder == "blocks":
            ours = name in walk.visited
        else:
            ours = folder == "data" and walk.chain.names_slices([name])[0]
        if not ours:  # the chain's own are errors already, where they are read
            if kind == STRAY_FILE:
                what = f"{kind}: no block names it, but a tool reading data/ as a folder would"
                what += " read it"
            elif kind == STRAY_BLOCK_FILE:
                what = f"{kind}: no head can name it, but a tool listing blocks/ would take it"
                what += " for a block"
            else:
                what = f"not a regular file ({kind}): never read or followed"
            report.add("warning", "irregular-entry", f"{what}, not removed by gc", path=path)
