"""The embedded PostgreSQL: concurrent manage.py processes start one server and share it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import time; from django.db import connections; c = connections['owner'].cursor(); "
    "c.execute('SELECT pg_postmaster_start_time(), current_setting(\\'data_directory\\')'); a = c.fetchone(); "
    "c = connections['default'].cursor(); c.execute('SELECT current_user'); "
    "print('PROBE', *a, *c.fetchone(), sep='|'); time.sleep(2)"
)


def _postmasters_for(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(attrs=("name", "cmdline")):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(data_dir) in cmdline:
            found.append(proc)
    return found


def test_two_concurrent_manage_py_processes_share_one_embedded_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["EKKO_DATA_DIR"] = str(tmp_path / "ekko")
    command = [sys.executable, "manage.py", "shell", "-v", "0", "-c", PROBE]
    procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    probes = {line for out, _ in outputs for line in out.splitlines() if line.startswith("PROBE")}
    assert len(probes) == 1, f"expected one shared server, saw {probes}"
    _, _, data_directory, user = probes.pop().split("|")
    assert Path(data_directory).resolve() == (tmp_path / "ekko" / "pgdata").resolve()
    assert user == "ekko_app"
    # The last process to leave stops the server it started.
    assert _postmasters_for(tmp_path / "ekko" / "pgdata") == []
