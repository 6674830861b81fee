"""A Spark write that the dataset's filesystem refuses (full, read-only, no permission) fails as a
:class:`~odf_chain.errors.StorageError` naming the dataset, the path and what the OS said.

Two places can meet the refusal: the driver's own steps (listing, reading and renaming the
files Spark wrote through ``pyarrow.fs``, which raise a bare ``OSError``), and the Spark job
itself, whose failure reaches the driver as a Java stack trace (an
:class:`~odf_chain.spark.errors.IngestError` whose cause names the file and, several "Caused
by" lines down, the OS's reason). A refusal is only reported as the dataset's when the path it
names lies inside the dataset: a Spark job also reads its inputs, and an input it may not read
is not a storage problem of the dataset.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odf_chain.errors import OdfChainError, StorageError

# What the OS says when it refuses a write (strerror texts, as Java and Python both show them).
_REFUSALS = (
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
    "Permission denied",
    "File too large",
)
_PATH = re.compile(r"file:(/[^\s,;]*)")


def _location(dataset: Any) -> str:
    location = getattr(dataset, "location", dataset)
    return str(location)


def _inside(path: str, root: str) -> bool:
    root = root.removeprefix("file://").removeprefix("file:")
    return path.rstrip(".") == root or path.startswith(root.rstrip("/") + "/")


def _refusal(exc: BaseException, root: str) -> tuple[str, str] | None:
    """(path inside the dataset, the OS's reason) when ``exc``'s cause is a refused write."""
    text = "\n".join(str(e) for e in (exc, exc.__cause__) if e is not None)
    reasons = [r for r in _REFUSALS if r in text]
    paths = [p.rstrip(".") for p in _PATH.findall(text) if _inside(p, root)]
    if not reasons or not paths:
        return None
    return paths[0], reasons[0]


def storage_failures(write: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a Spark writer ``write(df, dataset, ...)`` so that a refusing filesystem is a
    :class:`StorageError` naming the dataset and the path."""

    @functools.wraps(write)
    def wrapper(df: Any, dataset: str | Path | Any, *args: Any, **kwargs: Any) -> Any:
        root = os.path.abspath(_location(dataset)) if "://" not in _location(dataset) else ""
        try:
            return write(df, dataset, *args, **kwargs)
        except StorageError:
            raise
        except OdfChainError as exc:
            refused = _refusal(exc, root or _location(dataset))
            if refused is None:
                raise
            path, reason = refused
            raise StorageError(
                f"dataset {_location(dataset)}: Spark could not write {path}: {reason}"
            ) from exc
        except OSError as exc:  # a driver-side pyarrow.fs call
            detail = os.strerror(exc.errno) if exc.errno else str(exc)
            where = f" {os.fsdecode(exc.filename)}" if exc.filename else ""
            raise StorageError(
                f"dataset {_location(dataset)}: cannot access{where}: {detail}"
            ) from exc

    return wrapper
