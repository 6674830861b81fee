"""Judge many ExtraAttributes texts at once, here or in a helper process (standard library only).

Parsing each AddData's ExtraAttributes JSON is the largest cost left in verifying a long chain
once blocks are decoded as columns, and it is independent per block: so verify can hand the
texts to a second Python process (this file run as a script, importing nothing but the
standard library, started fresh: never forked; see :mod:`odf_chain.helper_process`) and use the
machine's second core while it walks and folds. The helper parses under the caller's limit on
integer digits, so both refuse the same texts.

A verdict per text: :data:`OBJECT` (a JSON object, as the block decoder requires),
:data:`TRANSACTION` (an object with the transaction key, which the rules judge) or
:data:`REFUSED` (anything the block decoder would refuse, or might: UTF-8 or JSON errors, not
an object, nesting deeper than :data:`MAX_DEPTH`; and an object carrying field lineage, which
changes the state beyond what the bulk path folds). A refused text is no error here: its block
is decoded on its own, and the decoder (or the rules) words any error.
"""

from __future__ import annotations

import json
import struct
import sys

OBJECT, TRANSACTION, REFUSED = 0, 1, 2
_VERDICTS = bytes((OBJECT, TRANSACTION, REFUSED))
TRANSACTION_KEY = "odf-chain.dev/transaction"  # state.TRANSACTION_KEY (this file imports nothing)
LINEAGE_KEY = "odf-chain.dev/field-lineage"  # state.LINEAGE_KEY
# Deeper nesting is refused here, and the block decoder decides: its verdict on deep JSON depends
# on how deep in the stack it runs; this one must not.
MAX_DEPTH = 200
_COUNT = struct.Struct("<I")


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


def encode(texts: list[bytes]) -> bytes:
    """The helper's input: the count, every length, then every text."""
    lengths = struct.pack(f"<{len(texts)}I", *map(len, texts))
    return _COUNT.pack(len(texts)) + lengths + b"".join(texts)


def decode(data: bytes) -> list[bytes]:
    (count,) = _COUNT.unpack_from(data, 0)
    lengths = struct.unpack_from(f"<{count}I", data, 4)
    texts, at = [], 4 + 4 * count
    for n in lengths:
        texts.append(data[at : at + n])
        at += n
    return texts


class Helper:
    """This file run as a helper process (:mod:`odf_chain.helper_process`) judging ``texts``
    under this process's limits; :meth:`result` is its verdicts, or None when it failed in any
    way or answered anything but one known verdict per text (the caller then judges them)."""

    def __init__(self, texts: list[bytes]) -> None:
        from odf_chain import helper_process

        self._count = len(texts)
        self._helper = helper_process.Helper(
            __file__,
            [str(sys.get_int_max_str_digits())],
            encode(texts),
            timeout=helper_process.seconds_for(len(texts)),
            site=False,
        )

    def result(self) -> bytes | None:
        out = self._helper.result()
        if out is None or len(out) != self._count or out.translate(None, _VERDICTS):
            return None
        return out


def _main() -> None:
    sys.set_int_max_str_digits(int(sys.argv[1]))  # the caller's limit, as its decoder has it
    texts = decode(sys.stdin.buffer.read())
    sys.stdout.buffer.write(judge(texts))


if __name__ == "__main__":
    _main()
