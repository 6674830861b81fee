"""Judge many ExtraAttributes texts at once (standard library only).

Parsing each AddData's ExtraAttributes JSON is the largest cost left in verifying a long chain
once blocks are decoded as columns; verify's pass judges each chunk's texts with its columns,
in whichever process reads the chunk (:mod:`odf_chain.block_parts`), under this process's limit
on integer digits, so both refuse the same texts.

A verdict per text: :data:`OBJECT` (a JSON object, as the block decoder requires),
:data:`TRANSACTION` (an object with the transaction key, which the rules judge) or
:data:`REFUSED` (anything the block decoder would refuse, or might: UTF-8 or JSON errors, not
an object, nesting deeper than :data:`MAX_DEPTH`; and an object carrying field lineage, which
changes the state beyond what the bulk path folds). A refused text is no error here: its block
is decoded on its own, and the decoder (or the rules) words any error.
"""

from __future__ import annotations

import json

OBJECT, TRANSACTION, REFUSED = 0, 1, 2
TRANSACTION_KEY = "odf-chain.dev/transaction"  # state.TRANSACTION_KEY (this file imports nothing)
LINEAGE_KEY = "odf-chain.dev/field-lineage"  # state.LINEAGE_KEY
# Deeper nesting is refused here, and the block decoder decides: its verdict on deep JSON depends
# on how deep in the stack it runs; this one must not.
MAX_DEPTH = 200


# What ``json.loads(text)`` does, minus its wrappers (a third of the time on short texts): the
# same C scanner with the default settings, the same whitespace, the same refusals.
_scan = json.JSONDecoder().scan_once
_space = json.decoder.WHITESPACE.match


def loads_object(text: str) -> object:
    """``json.loads(text)`` for a ``str``: raises ValueError (or RecursionError) where it does."""
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM")
    try:
        value, end = _scan(text, _space(text, 0).end())
    except StopIteration:
        raise ValueError("Expecting value") from None
    if _space(text, end).end() != len(text):
        raise ValueError("Extra data")
    return value


def judge(texts: list[bytes]) -> bytes:
    """One verdict byte per text."""
    verdicts = bytearray(len(texts))
    for i, raw in enumerate(texts):
        try:
            value = loads_object(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            verdicts[i] = REFUSED
            continue
        deep = raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH)
        if not isinstance(value, dict) or deep or LINEAGE_KEY in value:  # deep: whatever else
            verdicts[i] = REFUSED
        elif TRANSACTION_KEY in value:
            verdicts[i] = TRANSACTION
    return bytes(verdicts)


def _deeper_than(value: object, depth: int) -> bool:
    """Is ``value`` nested more than ``depth`` levels deep (iteratively: no recursion)?"""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if level > depth:
            return True
        if isinstance(node, dict):
            stack.extend((v, level + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, level + 1) for v in node if isinstance(v, dict | list))
    return False
