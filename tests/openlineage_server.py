"""A real HTTP server on 127.0.0.1 that takes OpenLineage events as a backend does (POST
``/api/v1/lineage``), for the emission tests: it records each body, or, while ``hold`` is set,
keeps each request waiting (a slow backend) and then drops it unrecorded."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    """A port nothing listens on (bound once, then closed): a backend that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LineageServer:
    def __init__(self, port: int = 0) -> None:
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

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
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
