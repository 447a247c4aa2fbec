"""The service as production runs it, for tests over real HTTP: gunicorn, the ASGI entry, a uvicorn worker.

`served_app` starts it on a free port against the test database (committed data only: tests that use
it take `transactional_db`) and stops it at the end of the module. pytest-django's `live_server` is a
WSGI thread and cannot serve `/mcp`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connections

ROOT = Path(__file__).resolve().parent.parent
METRICS_TOKEN = "metrics-token-for-tests"


@dataclass(frozen=True)
class Served:
    url: str
    process: subprocess.Popen
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served_app(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Served]:  # noqa: ANN001
    port = free_port()
    state = tmp_path_factory.mktemp("served")
    env = {**os.environ, "EKKO_DATABASE_NAME": connections["default"].settings_dict["NAME"],
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "EKKO_RATE_LIMIT": "1000000/min",
           "EKKO_METRICS_TOKEN": METRICS_TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(state / "metrics"),
           "EKKO_LOG_FORMAT": "json", "EKKO_LOG_LEVEL": "INFO",
           # Webhook tests deliver to a receiver on loopback, which production refuses.
           "EKKO_WEBHOOK_ALLOW_PRIVATE": "true", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    (state / "metrics").mkdir()
    log = state / "server.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [str(ROOT / ".venv/bin/gunicorn"), "ekko_site.asgi",
             "--worker-class", "uvicorn_worker.UvicornWorker", "--bind", f"127.0.0.1:{port}",
             "--workers", "2", "--timeout", "120"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not _answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the served app did not start; see {log}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Served(f"http://127.0.0.1:{port}", process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
