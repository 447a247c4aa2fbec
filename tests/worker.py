"""A real Celery worker on Redis for tests: a subprocess on the test database and a private queue."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connections
from kombu import pools

from ekko_site.celery import app

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("EKKO_TEST_REDIS_URL", "redis://127.0.0.1:6379/7")


def use_broker(url: str | None, queue: str = "ekko") -> None:
    """Point this process's Celery app at `url` (None: no broker, the in-process queue again)."""
    app.conf.update(task_always_eager=False, broker_url=url or "memory://", result_backend=url,
                    task_default_queue=queue)
    # Drop the connection and producer pools of the previous broker (kombu keeps them globally).
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    app._local.__dict__.pop("backend", None)  # the result backend is cached per thread


@contextmanager
def celery_worker(queue: str, extra_env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    env = {**os.environ, "CELERY_BROKER_URL": REDIS_URL, "CELERY_RESULT_BACKEND": REDIS_URL,
           "CELERY_TASK_DEFAULT_QUEUE": queue, "EKKO_DATABASE_NAME": connections["default"].settings_dict["NAME"],
           **(extra_env or {})}
    env.pop("DATABASE_URL", None)
    log = open(ROOT / ".ekko" / f"worker-{queue}.log", "w")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        # Through the SQL routing check (tests/sql_routing.py), which reports what the worker sends.
        [sys.executable, "-m", "tests.sql_routing", "-A", "ekko_site", "worker", "--pool", "solo",
         "--queues", queue, "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
         "--without-gossip"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


def wait_for(condition: Callable[[], bool], *, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
