"""The names of the two hash algorithms a chain may use, importing nothing: the command line
offers them as choices before it imports the hashing itself (:mod:`.multihash`)."""

BLAKE3 = "blake3"
SHA3_256 = "sha3-256"
ALGORITHMS = (BLAKE3, SHA3_256)
