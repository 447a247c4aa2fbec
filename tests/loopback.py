"""A small real HTTP server on 127.0.0.1 that plays an outside API (embeddings, chat model) in tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers JSON and records each request in `requests` (reset per server)."""

    requests: list[dict] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def reply(self, status: int, payload: dict | list | bytes) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler],
                    monkeypatch: pytest.MonkeyPatch | None = None) -> Iterator[str]:
    """Serve `handler` on a free loopback port and yield its base URL; proxies are bypassed for it."""
    if monkeypatch is not None:
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    handler.requests = []  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
