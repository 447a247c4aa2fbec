"""Shared bench plumbing: a separate database on the embedded server, Django setup, machine facts, percentiles."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
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
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
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
