"""The PostgreSQL server settings Ekko runs with, in one place: the embedded server and docker-compose's `db`.

Sized for the 2-core / 24 GiB machines we measure on (DESIGN.md, bench/README.md): pgvector's HNSW
scans are memory bound, so the vectors and their graph should sit in shared buffers; an HNSW build
of a million 512-d vectors wants its graph (about 3 GB) in `maintenance_work_mem`, or it is many
times slower. Each value can be overridden by an environment variable `EKKO_PG_<NAME>`
(`EKKO_PG_SHARED_BUFFERS=4GB`), read by the embedded server at its next start and by
docker-compose.yml through the same names and defaults. `tests/test_pgconfig.py` fails when
docker-compose.yml and this table drift apart; `python -m ekko_site.pgconfig` prints the
compose `command:` to paste.
"""

from __future__ import annotations

import os

# name → default; the values are PostgreSQL's own syntax.
DEFAULTS: dict[str, str] = {
    # A twelfth of the memory: 1M cards' vectors (2 GB) plus their HNSW graph stay mostly cached.
    "shared_buffers": "2GB",
    # What the planner may assume the OS caches besides shared buffers (a hint, nothing is allocated).
    "effective_cache_size": "12GB",
    # Per sort or hash node of one query; the search queries sort little, imports and exports more.
    "work_mem": "32MB",
    # Index builds (HNSW, GIN) and VACUUM; a bigger HNSW build can raise it for its own session.
    "maintenance_work_mem": "2GB",
    # Helpers of the leader in a parallel index build: on 2 cores one more process is all that helps.
    "max_parallel_maintenance_workers": "1",
    # Web workers, Celery workers and the tests' parallel runs on one server.
    "max_connections": "200",
}


def variable(name: str) -> str:
    """Return the environment variable that overrides `name` (`shared_buffers` → `EKKO_PG_SHARED_BUFFERS`)."""
    return f"EKKO_PG_{name.upper()}"


def server_settings(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """Return every setting with the environment's overrides applied."""
    return {name: environ.get(variable(name), "").strip() or default for name, default in DEFAULTS.items()}


def conf_text(environ: dict[str, str] | os._Environ = os.environ) -> str:
    """Return the settings as a postgresql.conf include file."""
    lines = ["# Written by ekko_site/pgconfig.py at every start of the embedded server: edit that, not this."]
    lines += [f"{name} = '{value}'" for name, value in server_settings(environ).items()]
    return "\n".join(lines) + "\n"


def compose_command() -> list[str]:
    """Return docker-compose's `db` command: `postgres` and a `-c` flag per setting (env-overridable)."""
    command = ["postgres"]
    for name, default in DEFAULTS.items():
        command += ["-c", f"{name}=${{{variable(name)}:-{default}}}"]
    return command


if __name__ == "__main__":
    import json

    program, *flags = compose_command()
    pairs = [f'"-c", {json.dumps(setting)}' for setting in flags[1::2]]
    print(f"    command: [{json.dumps(program)},\n              " + ",\n              ".join(pairs) + "]")
