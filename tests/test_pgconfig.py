"""PostgreSQL settings from one place (ekko_site/pgconfig.py): the embedded server and compose agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ekko_site import pgconfig

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
PROBE = """
import json, sys
from pathlib import Path
import psycopg
from ekko_site import embedded_db
server = embedded_db.ensure_running(Path(sys.argv[1]))
with psycopg.connect(host=server.socket_dir, port=server.port, user=embedded_db.OWNER_ROLE,
                     dbname="postgres") as c:
    settings = {name: c.execute("SELECT current_setting(%s)", [name]).fetchone()[0] for name in sys.argv[2:]}
print(json.dumps(settings))
"""


def test_docker_compose_runs_postgres_with_the_same_settings():
    assert COMPOSE["services"]["db"]["command"] == pgconfig.compose_command(), (
        "docker-compose.yml's db command drifted from ekko_site/pgconfig.py: paste the output of "
        "`python -m ekko_site.pgconfig`")


def test_an_environment_variable_overrides_one_setting():
    settings = pgconfig.server_settings({"EKKO_PG_WORK_MEM": "64MB", "EKKO_PG_SHARED_BUFFERS": " "})
    assert settings == {**pgconfig.DEFAULTS, "work_mem": "64MB"}
    assert "work_mem = '64MB'" in pgconfig.conf_text({"EKKO_PG_WORK_MEM": "64MB"})


def test_the_embedded_server_starts_with_the_settings(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("EKKO_PG_")}
    env["EKKO_PG_WORK_MEM"] = "48MB"
    data_dir = tmp_path / "pgdata"
    done = subprocess.run([sys.executable, "-c", PROBE, str(data_dir), *pgconfig.DEFAULTS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {**pgconfig.DEFAULTS, "work_mem": "48MB"}
    # Written again before every start, included once, last.
    lines = (data_dir / "postgresql.conf").read_text(encoding="utf-8").splitlines()
    assert lines[-1] == "include_if_exists = 'ekko.conf'" and lines.count(lines[-1]) == 1


def test_workers_can_be_scaled_out():
    worker = COMPOSE["services"]["worker"]
    assert "container_name" not in worker and "ports" not in worker, (
        "`docker compose up --scale worker=N` needs workers without a fixed name or host port")
    assert COMPOSE["x-app"]["environment"]["EKKO_CACHE_URL"].startswith("redis://"), (
        "rate-limit counters must be shared by every web process (EKKO_CACHE_URL)")
