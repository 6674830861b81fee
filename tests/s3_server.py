"""A real S3 API server on 127.0.0.1 for the tests: moto's S3 service, in its own process.

It is served one request at a time (werkzeug without threads), which makes each conditional
PUT atomic on the server, as S3 guarantees; moto's threaded server checks a precondition and
writes in two steps that another request can slip between. The tests talk to it over HTTP,
through the same clients users have (pyarrow's S3 filesystem for data, obstore for the
conditional writes), configured by the standard AWS environment variables.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

_SERVE = """
import os
import sys
from moto.server import MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

os.environ["MOTO_PORT"] = sys.argv[1]
# S3's app itself: moto's dispatcher, which finds the service of each request, lists moto's
# ~170 module folders per request (a third of the server's time); every request here is S3's
app = create_backend_app("s3")
# on the socket the parent bound and passed (sys.argv[2]): no port to pick and lose
make_server(
    "127.0.0.1",
    int(sys.argv[1]),
    app,
    threaded=False,
    request_handler=MotoRequestHandler,
    fd=int(sys.argv[2]),
).serve_forever()
"""

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``start()`` the server, ``env`` to reach it, ``stop()`` it."""

    def __init__(self) -> None:
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {**ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self, timeout: float = 60.0) -> None:
        """Bind and listen here, and hand the socket to the server process: the port is the
        server's from the start, so no other process (another xdist worker's server) can take
        it between picking and binding, and what answers on it is this server."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            self.port = sock.getsockname()[1]
            self._process = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(self.port), str(sock.fileno())],
                pass_fds=(sock.fileno(),),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **ENV},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._process.poll() is None:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the moto S3 server did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
