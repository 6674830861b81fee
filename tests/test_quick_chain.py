"""tools/quick_chain.py (the benchmarks' builder of long chains) writes chains verify accepts,
with and without blocks that add no slice, shaped as asked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from odf_chain.dataset import Dataset
from odf_chain.events import AddData
from odf_chain.storage.local import LocalStorage
from odf_chain.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import quick_chain


@pytest.mark.parametrize("slice_less", [0, 1, 4])
def test_quick_chains_verify(tmp_path: Path, slice_less: int) -> None:
    root = tmp_path / "chain"
    quick_chain.build(root, 302, report=False, slice_less=slice_less)
    report = verify(LocalStorage(root), check_data=False)
    assert report.ok, [p.line() for p in report.problems]
    assert report.blocks_checked == 302
    events = [entry.block.event for entry in Dataset.open(root).blocks()[2:]]
    sliced = [e.new_data is not None for e in events]
    assert all(isinstance(e, AddData) for e in events)
    assert sliced == [k % (slice_less + 1) == 0 for k in range(300)]
    state = Dataset.open(root).state
    assert state.num_slices == sum(sliced)
    assert state.last_offset == sum(sliced) * quick_chain.ROWS - 1
