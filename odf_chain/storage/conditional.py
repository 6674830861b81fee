"""Conditional writes on object stores: the compare-and-swap a chain's head needs.

``pyarrow.fs`` can read and write S3, GCS and Azure objects but cannot say "write this only if
the object is still the one I read", so two writers that interleave could both move the head.
The stores themselves can: S3 (and S3-compatible stores) take ``If-None-Match: *`` and
``If-Match: <etag>`` on a PUT, GCS generation preconditions, Azure ETags. This module reaches
them through ``obstore`` (the Python binding of the Rust ``object_store`` crate), whose put modes
``create`` and update-if-version map to exactly those headers, and turns their refusals into
:class:`~odf_chain.errors.ConflictError`.

Credentials, regions and endpoints come from each cloud's usual environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_ACCOUNT_NAME``, ...), as ``pyarrow.fs`` reads them for the data files, or from
``config=`` in code. An ``http://`` endpoint (a MinIO or test server) is allowed as such, and so
are the emulators' own variables: ``STORAGE_EMULATOR_HOST`` (Google's client libraries) for
``gs://``, ``AZURE_STORAGE_USE_EMULATOR`` and ``AZURITE_BLOB_STORAGE_URL`` (obstore's) for
``az://`` (see :func:`odf_chain.storage.fs.emulator_filesystem` for the data files).

A store that takes the put modes without enforcing them (an emulator, an S3-compatible server
that ignores ``If-None-Match``) would let two writers both move the head: before its first
write in a process, :meth:`ConditionalStore.precondition_gap` tries each precondition once on
an object of its own, and writing is refused where one is not enforced (as on a filesystem
without conditional writes; see :meth:`~odf_chain.storage.fs_files.FsFiles.check_writable`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from odf_chain.errors import ConflictError, StorageError

# URI schemes of the stores that offer conditional writes through obstore
CONDITIONAL_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl"})

Version = dict[str, str]  # what identifies one version of an object: its ETag (and generation)

# S3 answers 409 ConditionalRequestConflict to a conditional write while another one to the same
# object is in flight (AWS advises retrying); obstore reports it as an AlreadyExistsError, or a
# generic error naming the status
_IN_FLIGHT = re.compile(r"\b409\b|ConditionalRequestConflict|Conflict\b")
_CONFLICT_ATTEMPTS = 8
_CONFLICT_PAUSE = 0.05  # seconds, times the attempt number

# what each dataset's store did with a precondition it should refuse, checked once per process:
# None where every one was enforced (see ConditionalStore.precondition_gap)
_GAPS: dict[str, str | None] = {}


def _in_flight(exc: BaseException) -> bool:
    """Is ``exc`` S3's 409 for a conditional write racing another (not a settled refusal)?"""
    return bool(_IN_FLIGHT.search(str(exc)))


def _endpoint(scheme: str, config: dict[str, Any]) -> str:
    if scheme not in ("s3", "s3a"):
        return ""
    for key in ("endpoint", "aws_endpoint", "endpoint_url", "aws_endpoint_url"):
        if config.get(key):
            return str(config[key])
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""


def gcs_emulator() -> str:
    """The GCS emulator's base URL from ``STORAGE_EMULATOR_HOST`` (the variable Google's own
    client libraries read; ``host:port`` means ``http://host:port``), else empty."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    if host and "://" not in host:
        host = f"http://{host}"
    return host


def _gcs_emulator_config(config: dict[str, Any], options: dict[str, Any]) -> None:
    """Point obstore's GCS client at ``STORAGE_EMULATOR_HOST`` (it has no such variable of its
    own): a service-account key naming the base URL, with OAuth off, as its tests do."""
    base = gcs_emulator()
    if not base or any(k.startswith(("google_service_account", "service_account")) for k in config):
        return
    key = {"gcs_base_url": base, "disable_oauth": True, "client_email": "", "private_key": ""}
    config["google_service_account_key"] = json.dumps({**key, "private_key_id": ""})
    if base.startswith("http://"):
        options["allow_http"] = True


@contextlib.contextmanager
def _refused(action: str) -> Iterator[None]:
    """An obstore call's error as one StorageError line, ``cannot <action>: <reason>`` (obstore's
    errors share no public base class to catch instead)."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"cannot {action}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """obstore's messages end in a multi-line debug dump of the request: keep the sentence."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class ConditionalStore:
    """The objects under one dataset's prefix, written only under a precondition."""

    def __init__(self, store: Any, uri: str) -> None:
        self._store = store
        self._uri = uri.rstrip("/")

    @classmethod
    def for_uri(cls, uri: str, config: dict[str, Any] | None = None) -> ConditionalStore | None:
        """The conditional store of ``uri``'s bucket and prefix; None for a scheme without
        conditional writes (HDFS, a local or in-memory filesystem)."""
        scheme = urlsplit(uri).scheme.lower()
        if scheme not in CONDITIONAL_SCHEMES:
            return None
        try:
            import obstore.store  # imported here: local datasets never need it
        except ImportError:
            raise StorageError(
                f"{scheme}:// datasets need obstore: pip install 'odf_chain[cloud]'"
            ) from None

        config = dict(config or {})
        options: dict[str, Any] = {}
        if _endpoint(scheme, config).startswith("http://"):
            options["allow_http"] = True
        if scheme in ("gs", "gcs"):
            _gcs_emulator_config(config, options)
        s3_uri = "s3://" + uri.split("://", 1)[1] if scheme == "s3a" else uri
        try:
            store = obstore.store.from_url(s3_uri, config=config or None, client_options=options)
        except Exception as exc:  # obstore's errors share no public base with ValueError
            raise StorageError(
                f"cannot open {uri} for conditional writes: {_first_line(exc)}"
            ) from None
        return cls(store, uri)

    def _where(self, relative: str) -> str:
        return f"{self._uri}/{relative}"

    def precondition_gap(self) -> str | None:
        """None if the store refuses what each precondition forbids, else what it did instead.

        Tried once per process for each dataset, before its first write, on an object of its
        own in ``.staging/`` (removed after; gc takes one a killed process leaves): a
        create-only write over an existing object must be refused, a write conditional on the
        version read must land, and one conditional on that version once replaced must be
        refused. Six requests (seven where a refused create is answered 409 and looked at again);
        readers never pay them. What the store did is kept for the process; a failed request
        is not (the next write tries again)."""
        if self._uri in _GAPS:
            return _GAPS[self._uri]
        try:
            gap = self._try_preconditions()
        except (StorageError, ConflictError) as exc:
            return f"a conditional write failed: {exc}"
        _GAPS[self._uri] = gap
        return gap

    def _try_preconditions(self) -> str | None:
        probe = f".staging/precondition-check-{secrets.token_hex(8)}"
        try:
            if not self.create(probe, b"first"):
                return "a create-only write of a new name was refused"
            if self.create(probe, b"second"):
                return "a create-only write over an existing object was accepted"
            found = self.read(probe, 64, "a precondition check")
            if found is None or found[0] != b"first":
                return "a create-only write over an existing object replaced it"
            self.replace(probe, b"third", found[1], "a precondition check")
            try:
                self.replace(probe, b"fourth", found[1], "a precondition check")
            except ConflictError:
                return None
            return "a write conditional on a version already replaced was accepted"
        finally:
            with contextlib.suppress(StorageError):
                self.delete(probe)

    def read(self, relative: str, limit: int, what: str) -> tuple[bytes, Version] | None:
        """The object's bytes and version (empty if the store reports none), None when it does
        not exist. Refused by its listed size before the body is read when larger than
        ``limit``."""
        import obstore

        try:
            result = obstore.get(self._store, relative)
            meta = result.meta
            if meta["size"] > limit:
                raise StorageError(
                    f"{self._where(relative)} is larger than the {limit:,}-byte limit for {what}"
                    f" ({meta['size']:,} bytes): not read"
                )
            data = bytes(result.bytes())
        except FileNotFoundError:  # what obstore raises for a missing object
            return None
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"cannot read {self._where(relative)}: {_first_line(exc)}") from None
        return data, {k: meta[k] for k in ("e_tag", "version") if meta.get(k)}

    def put(self, relative: str, data: bytes) -> None:
        """Write ``relative`` whole, whatever is there (for files no two writers race on)."""
        import obstore

        with _refused(f"write {self._where(relative)}"):
            obstore.put(self._store, relative, data)

    def create(self, relative: str, data: bytes) -> bool:
        """Write ``relative`` only if no object has that name; False if one already does.

        S3 answers 409 (``ConditionalRequestConflict``) while another conditional write to the
        same name is in flight, which says nothing about whether that one lands: the answer is
        confirmed by looking, and the create tried again while nothing is there."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        for attempt in range(_CONFLICT_ATTEMPTS):
            try:
                obstore.put(self._store, relative, data, mode="create")
                return True
            except (AlreadyExistsError, PreconditionError) as exc:
                if not _in_flight(exc) or self.size(relative) is not None:
                    return False
            except Exception as exc:
                if not _in_flight(exc):
                    raise StorageError(
                        f"cannot write {self._where(relative)}: {_first_line(exc)}"
                    ) from None
                if self.size(relative) is not None:
                    return False
            time.sleep(_CONFLICT_PAUSE * (attempt + 1))
        raise ConflictError(
            f"{self._where(relative)}: other conditional writes to it kept the store busy "
            f"({_CONFLICT_ATTEMPTS} tries): nothing was written; retry"
        )

    def names_starting(self, relative: str, limit: int) -> list[str]:
        """The last path part of at most ``limit`` objects whose keys start with ``relative``
        and lie directly in its folder (``blocks/f1e20ab`` lists ``blocks/f1e20ab…``, not
        ``blocks/f1e20ab…/x``).

        obstore's prefixes are whole path parts, so the listing starts *after* ``relative``
        (S3's ``start-after``, GCS's ``startOffset``) and stops at the first key past the
        prefix: S3, GCS and Azure list keys in lexicographic order, so only the matching keys
        and one more are fetched, whatever the number of blocks."""
        import obstore

        folder, _, _ = relative.rpartition("/")
        found: list[str] = []
        with _refused(f"list {self._where(relative)}*"):
            stream = obstore.list(
                self._store, prefix=folder, offset=relative, chunk_size=min(limit + 1, 1000)
            )
            for chunk in stream:
                for meta in chunk:
                    path = meta["path"]
                    if not path.startswith(relative):
                        return found
                    name = path.removeprefix(folder + "/")
                    if "/" not in name:
                        found.append(name)
                        if len(found) >= limit:
                            return found
        return found

    def size(self, relative: str) -> int | None:
        """The object's size, None when no object has that name: one HEAD (a filesystem view
        would also list the name as a folder when it is missing; an object store has none)."""
        import obstore

        with _refused(f"read {self._where(relative)}"):
            try:
                meta = obstore.head(self._store, relative)
            except FileNotFoundError:
                return None
        return int(meta["size"])

    def move(self, source: str, target: str) -> None:
        """Copy ``source`` to ``target`` on the server, then delete ``source``: the target
        appears whole (a copy completes like an upload), and no folder marker is left behind
        (``pyarrow.fs`` puts one back for the emptied folder)."""
        import obstore

        with _refused(f"copy {self._where(source)} to {self._where(target)}"):
            obstore.copy(self._store, source, target)
        self.delete(source)

    def delete(self, relative: str) -> None:
        """Delete the object (deleting a missing one is no error on S3, GCS or Azure)."""
        import obstore

        with _refused(f"remove {self._where(relative)}"), contextlib.suppress(FileNotFoundError):
            obstore.delete(self._store, relative)

    def replace(self, relative: str, data: bytes, version: Version, what: str) -> None:
        """Overwrite ``relative`` only if it is still at ``version``: ConflictError when another
        writer replaced (or removed) it since it was read."""
        import obstore
        from obstore.exceptions import NotFoundError, PreconditionError

        if not version:  # nothing to make the write conditional on: never overwrite blindly
            raise StorageError(
                f"{self._where(relative)}: the store reported no ETag or version for it, so it "
                "cannot be replaced conditionally: not written"
            )
        try:
            obstore.put(self._store, relative, data, mode=dict(version))
        except (PreconditionError, NotFoundError, FileNotFoundError):
            raise ConflictError(
                f"{what} {self._where(relative)} was changed by another writer since it was "
                "read: nothing was overwritten"
            ) from None
        except Exception as exc:
            if _in_flight(exc):  # S3's 409: another writer's conditional write was under way
                raise ConflictError(
                    f"{what} {self._where(relative)} was being written by another writer at "
                    "the same moment (409 ConditionalRequestConflict): nothing was overwritten"
                ) from None
            raise StorageError(
                f"cannot write {self._where(relative)}: {_first_line(exc)}"
            ) from None
