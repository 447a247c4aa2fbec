"""Shared bench plumbing: a separate database on the embedded server, Django setup, machine facts,
percentiles, a gunicorn subprocess with a JSON client, and the wait for background vectors."""

from __future__ import annotations

import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE = "ekko_bench"
# Bench tenants hold far more cards per person or workspace than a tenant's default card limit (500,
# seed 001's quota), which would refuse their writes and imports: they get the column's largest value.
BENCH_CARD_LIMIT = 2_147_483_647


def lift_card_limit(setup) -> None:  # noqa: ANN001 - a tenants.services.TenantSetup
    """Let a bench tenant's people and workspaces hold any number of cards (logged as made by the bench)."""
    from tenants.services import tenant_card_limit_set

    tenant_card_limit_set(tenant=setup.tenant, card_limit=BENCH_CARD_LIMIT, changed_by=setup.owner,
                          via="bench")


# How production serves the app (Dockerfile, docker-compose.yml): the ASGI entry under gunicorn with
# uvicorn workers. "wsgi" is the former sync-worker setup, kept to compare the two.
SERVERS = {
    "asgi": ["ekko_site.asgi", "--worker-class", "uvicorn_worker.UvicornWorker"],
    "wsgi": ["ekko_site.wsgi"],
}


def server_command(port: int, workers: int, server: str = "asgi") -> list[str]:
    """Return the gunicorn command line serving the app on 127.0.0.1:`port` with `workers` workers."""
    return [str(ROOT / ".venv/bin/gunicorn"), *SERVERS[server], "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers)]


def setup_django(database: str = BENCH_DATABASE) -> None:
    """Point this process at a bench database (created and migrated if needed) and set Django up."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")
    if not os.environ.get("DATABASE_URL"):
        os.environ["EKKO_DATABASE_NAME"] = database
        from ekko_site import embedded_db

        server = embedded_db.ensure_running(Path(os.environ.get("EKKO_DATA_DIR", ROOT / ".ekko")) / "pgdata")
        import psycopg

        with psycopg.connect(host=server.socket_dir, port=server.port, user=embedded_db.OWNER_ROLE,
                             dbname="postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
                conn.execute(f'CREATE DATABASE "{database}"')
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def machine() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            total_kb = int(meminfo.readline().split()[1])
        memory = f"{total_kb / 1024 / 1024:.0f} GiB"
    except OSError:
        memory = "?"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        model = cpu
    return f"{os.cpu_count()} cores ({model}), {memory} RAM, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "n": 0}
    def pick(q: float) -> float:  # noqa: E306
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "mean": statistics.fmean(ordered),
            "n": len(ordered)}


def git_revision() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def load_average() -> str:
    """Return the 1/5/15-minute load averages and the core count, for printing beside a figure."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, workers: int, database: str = BENCH_DATABASE,
                 extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start gunicorn (`workers` workers, as in production) on the bench database; wait until it
    listens. `extra_env` adds settings (a broker, inline tasks)."""
    env = {**os.environ, "EKKO_DATABASE_NAME": database, "EKKO_RATE_LIMIT": "1000000/min",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "EKKO_LOG_LEVEL": os.environ.get("EKKO_LOG_LEVEL", "WARNING"),
           **(extra_env or {})}
    server = subprocess.Popen(
        [*server_command(port, workers), "--timeout", "300", "--log-level", "warning"], cwd=ROOT, env=env)
    for _ in range(600):
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with code {server.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.terminate()
    raise RuntimeError("gunicorn did not start listening within 60 s")


def start_worker(broker_env: dict[str, str], concurrency: int, nice: int = 0,
                 database: str = BENCH_DATABASE) -> subprocess.Popen:
    """Start a Celery worker (prefork, `concurrency` children, CPU priority lowered by `nice`) on the
    bench database and `broker_env`'s broker and queue, logging to .ekko/bench-worker.log; wait until
    it is ready."""
    env = {**os.environ, "EKKO_DATABASE_NAME": database, "EKKO_LOG_LEVEL": "WARNING", **broker_env}
    log_path = Path(os.environ.get("EKKO_DATA_DIR", ROOT / ".ekko")) / "bench-worker.log"
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [*(["nice", "-n", str(nice)] if nice else []), str(ROOT / ".venv/bin/celery"), "-A", "ekko_site",
             "worker", "--concurrency", str(concurrency),
             "--queues", env["CELERY_TASK_DEFAULT_QUEUE"], "--loglevel", "INFO", "--without-heartbeat",
             "--without-mingle", "--without-gossip"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if worker.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with code {worker.returncode}; see {log_path}")
        if " ready." in log_path.read_text(errors="replace"):
            return worker
        time.sleep(0.1)
    worker.terminate()
    raise RuntimeError(f"the Celery worker was not ready within 60 s; see {log_path}")


class Client:
    """One keep-alive connection to the bench server's `/api/v1/`, timing each request in ms."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def get(self, path: str) -> float:
        started = time.perf_counter()
        self.conn.request("GET", f"/api/v1/{path}", headers=self.headers)
        response = self.conn.getresponse()
        response.read()
        if response.status >= 400:
            raise RuntimeError(f"GET {path} answered {response.status}")
        return (time.perf_counter() - started) * 1000

    def post(self, path: str, body: dict) -> tuple[float, dict]:
        payload = json.dumps(body, ensure_ascii=False).encode()
        started = time.perf_counter()
        self.conn.request("POST", f"/api/v1/{path}", body=payload, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status >= 400:
            raise RuntimeError(f"POST {path} answered {response.status}: {data[:500]!r}")
        return elapsed, json.loads(data)


def wait_for_vectors(count_missing: Callable[[], int], *, what: str, limit_seconds: float = 600) -> float:
    """Poll `count_missing` until it is 0; embed stragglers in-process after a 20 s stall; return seconds."""
    from memory.services.embeddings import embed_missing

    started = time.perf_counter()
    last, stalled_since = None, time.perf_counter()
    while True:
        missing = count_missing()
        if missing == 0:
            return time.perf_counter() - started
        if missing != last:
            last, stalled_since = missing, time.perf_counter()
            print(f"  waiting for {missing} {what} vector(s)", file=sys.stderr, flush=True)
        elif time.perf_counter() - stalled_since > 20:
            # No worker is draining the queue (a broker without a worker, or vectors from another model):
            # catch up the way the periodic sweep would.
            print(f"  {missing} vector(s) stalled; embedding them in-process", file=sys.stderr, flush=True)
            while embed_missing(limit_per_tenant=5000):
                pass
        if time.perf_counter() - started > limit_seconds:
            raise RuntimeError(f"{missing} {what}(s) still have no vector after {limit_seconds:.0f}s.")
        time.sleep(0.5)
