"""Shared bench plumbing: a separate database on the embedded server, Django setup, gunicorn, machine facts,
percentiles."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DATABASE = "ekko_bench"


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


def start_server(port: int, workers: int, database: str = BENCH_DATABASE) -> subprocess.Popen:
    """Start gunicorn (`workers` sync workers, as in production) on the bench database; wait until it
    listens."""
    env = {**os.environ, "EKKO_DATABASE_NAME": database, "EKKO_RATE_LIMIT": "1000000/min",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "EKKO_LOG_LEVEL": os.environ.get("EKKO_LOG_LEVEL", "WARNING")}
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "ekko_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers",
         str(workers), "--timeout", "300", "--log-level", "warning"], cwd=ROOT, env=env)
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
