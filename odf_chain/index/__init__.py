"""The derived index: what lets a reader answer without folding the chain from its Seed.

A cache under ``info/odf-chain-index/``, never part of the chain, never a source of truth
(see ``docs/derived-index.md``). :mod:`.records` is its bytes, :mod:`.update` what a writer
adds after the head moves (below :mod:`odf_chain.chain`, which calls it), :mod:`.read` the
checked reads and the rebuild, :mod:`.check` what verify compares with the state it derived
itself.
"""
