"""Where a dataset's bytes live: blocks, the head ref and data slices on the local filesystem."""

from odf_chain.storage.local import (
    DataCommit,
    LocalStorage,
    check_name,
    fsync_dir,
    write_atomic,
)

__all__ = ["DataCommit", "LocalStorage", "check_name", "fsync_dir", "write_atomic"]
