"""A real HTTP server on 127.0.0.1 that takes OpenLineage events as a backend does (POST
``/api/v1/lineage``), for the emission tests: it records each body, or, while ``hold`` is set,
keeps each request waiting (a slow backend) and then drops it unrecorded."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class DownBackend:
    """A backend that is down: a port bound and not listening, so a connection is refused
    there. The port stays bound until :meth:`close` or :meth:`up`, so no other test (another
    xdist worker's server, say) can take it meanwhile, as it could a port bound once and
    closed. :meth:`up` brings the backend up on that very socket."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def up(self) -> LineageServer:
        taken, self.socket = self.socket, None
        if taken is None:
            raise RuntimeError("the backend is up already")
        return LineageServer(bound=taken)

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None

    def __enter__(self) -> DownBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LineageServer:
    def __init__(self, port: int = 0, *, bound: socket.socket | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.arrived = 0  # requests seen, held ones too
        self.hold = threading.Event()  # set: requests wait for release, then are dropped
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.arrived += 1
                if owner.hold.is_set():
                    owner.release.wait(60)
                else:
                    owner.events.append(json.loads(body))
                    owner.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        if bound is None:
            self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        else:  # a DownBackend's socket, bound all along: now listening
            self.server = ThreadingHTTPServer(bound.getsockname(), Handler, False)
            self.server.socket.close()
            self.server.socket = bound
            self.server.server_address = bound.getsockname()
            self.server.server_activate()
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LineageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["eventType"] == event_type]

    def counts(self) -> dict[tuple[str, str], int]:
        """How many times each (run id, event type) arrived."""
        seen: dict[tuple[str, str], int] = {}
        for event in self.events:
            key = (event["run"]["runId"], event["eventType"])
            seen[key] = seen.get(key, 0) + 1
        return seen
