"""SetTransform goes through ``Dataset.append`` like any event odf_chain writes: encoded, stored,
read back equal to what was appended, and verified. (Which rules a SetTransform must satisfy is
the rules' business; this only shows that the bytes exist.)"""

from __future__ import annotations

from odf_chain import Dataset, chain
from odf_chain.events import DatasetKind, Seed, SetTransform
from odf_chain.format.codec import decode_block
from odf_chain.format.did import DatasetId
from odf_chain.state import EMPTY
from odf_chain.storage import create_storage
from odf_chain.transaction import Transaction


def _derivative_dataset(path) -> Dataset:
    # Dataset.create seeds a root dataset; a derivative one is seeded through a transaction.
    storage = create_storage(path)
    seed = Seed(DatasetId.generate(), DatasetKind.DERIVATIVE)
    Transaction.create(storage, chain.prepare(EMPTY, seed)).commit()
    return Dataset.open(path)


def test_set_transform_is_appended_and_read_back(tmp_path):
    dataset = _derivative_dataset(tmp_path / "summary")
    upstream = DatasetId.generate()
    # Written the short way: optional fields left out, lists for tuples.
    event = SetTransform(
        inputs=[{"dataset_ref": upstream.to_did(), "alias": "orders"}],
        transform={"kind": "TransformSql", "engine": "spark", "query": "SELECT * FROM orders"},
    )
    entry = dataset.append(event)

    stored = dataset.storage.read_block(str(entry.hash))
    assert decode_block(stored).event == event
    reopened = Dataset.open(tmp_path / "summary")
    assert [e.block.event for e in reopened.blocks()][1] == event
    assert reopened.blocks()[1].block.event.transform["version"] is None
    assert reopened.verify().problems == []
