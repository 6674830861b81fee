"""Azurite, Microsoft's Azure Storage emulator (its blob service), on 127.0.0.1 in its own
process for the tests: the npm package ``tools/setup.sh`` installs under ``.node/``.

The tests reach it as users reach Azure, through obstore (conditional writes) and
``pyarrow.fs`` (data files), both pointed at it by the environment obstore reads:
``AZURE_STORAGE_USE_EMULATOR`` and ``AZURITE_BLOB_STORAGE_URL`` (Azurite's well-known account
and key then sign the requests). Without Node.js or the package the tests skip, saying which.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.s3_server import _free_port

ROOT = Path(__file__).resolve().parent.parent
# the version tools/setup.sh pins and installs
AZURITE_VERSION = re.search(
    r"^AZURITE_VERSION=(\S+)$", (ROOT / "tools" / "setup.sh").read_text(), re.M
).group(1)
BINARY = ROOT / ".node" / "node_modules" / ".bin" / "azurite-blob"


def missing() -> str:
    """Why Azurite cannot start here (empty when it can)."""
    if shutil.which("node") is None:
        return "Node.js (node) is not installed: Azurite runs on it (apt-get install nodejs npm)"
    if not BINARY.exists() or installed_version() != AZURITE_VERSION:
        return (
            f"Azurite {AZURITE_VERSION} is not installed at {BINARY} "
            f"(bash tools/setup.sh runs: npm install --prefix .node azurite@{AZURITE_VERSION})"
        )
    return ""


def installed_version() -> str:
    package = ROOT / ".node" / "node_modules" / "azurite" / "package.json"
    try:
        return json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return ""


class AzuriteServer:
    """``start()`` the blob service, ``env`` to reach it, ``stop()`` it."""

    def __init__(self) -> None:
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.endpoint}

    def start(self, timeout: float = 90.0) -> None:
        for _ in range(5):  # a port taken between picking and binding: pick another
            self.port = _free_port()
            self._process = subprocess.Popen(
                [
                    str(BINARY),
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    str(self.port),
                    "--inMemoryPersistence",  # no workspace folder; gone with the process
                    "--skipApiVersionCheck",  # the clients' API versions may be newer
                    "--loose",
                    "--silent",
                    "--disableTelemetry",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._process.poll() is None:
                try:
                    urllib.request.urlopen(self.endpoint, timeout=2).close()
                    return
                except urllib.error.HTTPError:  # it answers: up
                    return
                except OSError:
                    time.sleep(0.2)
            self.stop()
        raise RuntimeError("Azurite did not start")

    def create_container(self, name: str) -> None:
        import pyarrow.fs as pafs

        from odf_chain.storage.fs import AZURITE_ACCOUNT, AZURITE_KEY

        pafs.AzureFileSystem(
            account_name=AZURITE_ACCOUNT,
            account_key=AZURITE_KEY,
            blob_storage_authority=f"127.0.0.1:{self.port}",
            dfs_storage_authority=f"127.0.0.1:{self.port}",
            blob_storage_scheme="http",
            dfs_storage_scheme="http",
        ).create_dir(name)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
