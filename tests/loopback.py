"""A small real HTTP server on 127.0.0.1 that plays an outside API (embeddings, chat model) in tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


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
