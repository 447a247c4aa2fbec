"""The SQL routing check: every statement the suite sends to a tenant table names its tenant.

A pytest plugin (loaded by tests/conftest.py) that wraps every database connection the suite
opens, in any thread (live-server threads, the in-process worker) and in the Celery worker
subprocess of tests/worker.py, with a Django `execute_wrapper`. Each statement that mentions a
tenant table (every model with a `tenant_id` column, read from the models) is parsed once by
PostgreSQL's own parser (tests/tenant_predicates.py); one that leaves a tenant table without a
`tenant_id` predicate is recorded with the test that sent it and the line of code that did. At the
end of the session the run fails and lists them, unless the sending stack passes through one of
the documented exceptions in `ALLOWLIST` (docs/scale-out.md lists them too): this is the proof that
every query Ekko sends can be routed to one Citus shard (docs/scale-out.md).

`-p no:tests.sql_routing` turns the check off for a run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.tenant_predicates import Verdict, check, mentions_tenant_table, to_postgres

ROOT = Path(__file__).resolve().parent.parent
_ROOT_PREFIX = str(ROOT) + os.sep
APP_PACKAGES = ("memory", "tenants", "ekko_site")
_DIRECTORY_VARIABLE = "EKKO_SQL_ROUTING_DIR"
_TEST_VARIABLE = "EKKO_SQL_ROUTING_TEST"


@dataclass(frozen=True)
class CrossShard:
    """A documented exception: a statement sent with `origin` on the stack need not name one tenant.

    `origin` is a module (`django.db.migrations`) or a function (`memory.services.x.func`). With
    `sender_only`, only the code that sent the statement counts (the innermost frame of this
    repository), not what called it.
    """

    origin: str
    reason: str
    sender_only: bool = False

    def matches(self, name: str) -> bool:
        return name == self.origin or name.startswith(self.origin + ".")


# The one list of statements that may reach more than one shard, each with its reason (docs/scale-out.md).
ALLOWLIST: tuple[CrossShard, ...] = (
    CrossShard("django.db.migrations",
               "schema migrations and the test database's creation: DDL and backfills run on every shard "
               "(Citus propagates DDL); not a routed query"),
    CrossShard("django.core.management.commands.flush",
               "test isolation: transactional tests empty every table with TRUNCATE between tests"),
    CrossShard("tenants.services._api_key_by_hash",
               "authentication: a key is found by its hash before its tenant is known (one index lookup "
               "on every shard; docs/scale-out.md says how to make it single-shard)"),
    CrossShard("memory.access.memberships_of",
               "sign-in: a person's memberships in every tenant (the tenant switcher), found by user"),
    CrossShard("ekko_site.admin_site.EkkoAdminSite.admin_view",
               "operators' admin: lists, counts and filters over every tenant (staff only)"),
    CrossShard("memory.services.imports._create_staging",
               "imports: a temporary staging table shaped LIKE a tenant table (local DDL, reads no rows)"),
    CrossShard("memory.pipeline.runs.extraction_retry_due",
               "retry sweep: finds the due extraction runs of every tenant, then runs each in its tenant"),
    CrossShard("memory.webhooks.delivery.webhooks_sweep",
               "webhook sweep: finds the tenants with an active endpoint, then dispatches each in its tenant"),
    CrossShard("memory.backlog.background_backlog",
               "the metrics scrape: capped counts of the work waiting in every tenant (queue depths)"),
    CrossShard("memory.management.commands._workspace.resolve_workspace",
               "export/import commands: an operator names a workspace by its bare id, of any tenant"),
    CrossShard("memory.services.embeddings.vector_columns_resize",
               "reembed --alter-column: changes the vector columns' type and clears every row's model"),
    CrossShard("memory.tenant_indexes._run_ddl",
               "big tenants' own indexes: CREATE INDEX CONCURRENTLY ... WHERE tenant_id = <id> on a search table "
               "(DDL, which Citus propagates to every shard; not a routed query)"),
    CrossShard("tests", "the tests' own look at the database (assertions, raw SQL that proves row-level "
               "security); the application sends none of these", sender_only=True),
)


@dataclass
class Finding:
    """One offending statement sent from one line of code, with the tests that sent it."""

    statement: str
    problem: str
    sent_from: str
    tests: list[str] = field(default_factory=list)
    count: int = 0


class Recorder:
    """Checks each statement (verdicts cached per SQL text) and keeps the findings, thread-safely."""

    def __init__(self, tenant_tables: Callable[[], frozenset[str]], *, sink: Path | None = None,
                 allowlist: tuple[CrossShard, ...] = ALLOWLIST) -> None:
        self._tenant_tables_source = tenant_tables
        self.allowlist = allowlist
        self._tenant_tables: frozenset[str] | None = None
        self._verdicts: dict[tuple[str, bool], Verdict] = {}
        self._lock = threading.Lock()
        self.findings: dict[tuple[str, str], Finding] = {}
        self.current_test = os.environ.get(_TEST_VARIABLE, "")
        self._sink = sink

    def wrapper(self, execute, sql, params, many, context):  # noqa: ANN001, ANN201 - Django's signature
        verdict = self._verdict(sql, params is not None)
        if verdict is not None:
            self._record(verdict)
        return execute(sql, params, many, context)

    def _verdict(self, sql: str, with_parameters: bool) -> Verdict | None:
        if "memory_" not in sql and "tenants_" not in sql:
            return None
        key = (sql, with_parameters)
        verdict = self._verdicts.get(key)
        if verdict is None:
            if self._tenant_tables is None:
                self._tenant_tables = self._tenant_tables_source()
            if not mentions_tenant_table(sql, self._tenant_tables):
                verdict = Verdict("")
            else:
                verdict = check(to_postgres(sql, with_parameters), self._tenant_tables)
            if len(self._verdicts) > 50_000:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return None if verdict.ok else verdict

    def _record(self, verdict: Verdict) -> None:
        frames = _stack()
        names = [f"{module}.{code.co_qualname}" for module, code, _ in frames]
        ours = [index for index, (module, _, _) in enumerate(frames)
                if module.partition(".")[0] in (*APP_PACKAGES, "tests")]
        sender = names[ours[0]] if ours else ""
        if any(entry.matches(sender) if entry.sender_only else any(entry.matches(name) for name in names)
               for entry in self.allowlist):
            return
        app = [index for index in ours if frames[index][0].partition(".")[0] in APP_PACKAGES]
        chosen = (app or ours or [None])[0]
        sent_from = "?" if chosen is None else _where(frames[chosen][1], frames[chosen][2])
        with self._lock:
            finding = self.findings.setdefault(
                (verdict.statement, sent_from), Finding(verdict.statement, verdict.describe(), sent_from))
            finding.count += 1
            if self.current_test and self.current_test not in finding.tests and len(finding.tests) < 3:
                finding.tests.append(self.current_test)
            if self._sink is not None and finding.count == 1:
                with self._sink.open("a", encoding="utf-8") as sink:
                    sink.write(json.dumps(finding.__dict__) + "\n")

    def merge(self, directory: Path) -> None:
        """Add the findings other processes (the Celery worker of tests/worker.py) wrote to `directory`."""
        for path in sorted(directory.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                other = Finding(**json.loads(line))
                mine = self.findings.setdefault((other.statement, other.sent_from), other)
                if mine is not other:
                    mine.count += other.count
                    mine.tests.extend(test for test in other.tests if test not in mine.tests)

    def report(self) -> list[str]:
        lines = []
        for finding in sorted(self.findings.values(), key=lambda f: (f.sent_from, f.statement)):
            statement = finding.statement if len(finding.statement) <= 600 else finding.statement[:600] + " …"
            lines += [f"- {finding.problem} (sent {finding.count}×)", f"    sent from {finding.sent_from}",
                      f"    by {', '.join(finding.tests) or '?'}", f"    {statement}"]
        return lines


def _stack() -> list[tuple[str, Any, int]]:
    """Return (module, code, line) of the caller's frames, innermost first."""
    frames = []
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "?")
        if module != __name__:
            frames.append((module, frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return frames


def _where(code: Any, line: int) -> str:
    path = code.co_filename
    shown = path[len(_ROOT_PREFIX):] if path.startswith(_ROOT_PREFIX) else os.path.basename(path)
    return f"{shown}:{line} in {code.co_qualname}"


def tenant_tables() -> frozenset[str]:
    """Return the tables of every model that has a `tenant_id` column (the tables Citus would distribute)."""
    from django.apps import apps

    return frozenset(
        model._meta.db_table for model in apps.get_models(include_auto_created=True)
        if any(field.column == "tenant_id" for field in model._meta.concrete_fields)
    )


def install(recorder: Recorder, *, open_now: bool = True) -> None:
    """Wrap each connection opened from now on, in any thread (and, with `open_now`, those open now)."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    def add(connection: Any) -> None:
        if recorder.wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(recorder.wrapper)

    def on_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
        add(connection)

    connection_created.connect(on_connect, weak=False, dispatch_uid="ekko-sql-routing")
    for connection in connections.all(initialized_only=True) if open_now else ():
        add(connection)


# --- pytest hooks -------------------------------------------------------------------------------------

_recorder: Recorder | None = None
_directory: tempfile.TemporaryDirectory | None = None


def pytest_configure(config: Any) -> None:
    global _recorder, _directory
    _directory = tempfile.TemporaryDirectory(prefix="ekko-sql-routing-")
    os.environ[_DIRECTORY_VARIABLE] = _directory.name
    _recorder = Recorder(tenant_tables)
    install(_recorder)


def pytest_runtest_protocol(item: Any, nextitem: Any) -> None:
    if _recorder is not None:
        _recorder.current_test = item.nodeid
        os.environ[_TEST_VARIABLE] = item.nodeid


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _recorder is None or _directory is None:
        return
    _recorder.merge(Path(_directory.name))
    if _recorder.findings and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    if _recorder is None or not _recorder.findings:
        return
    terminalreporter.section("SQL routing: statements on tenant tables without a tenant_id predicate",
                             red=True)
    terminalreporter.line(
        "Each one cannot be routed to one Citus shard (docs/scale-out.md). Add the tenant filter where it "
        "is sent, or, for a deliberate cross-tenant statement, an entry with its reason to ALLOWLIST in "
        "tests/sql_routing.py and to docs/scale-out.md.")
    for line in _recorder.report():
        terminalreporter.line(line)
    terminalreporter.line(f"{len(_recorder.findings)} statement(s) without a tenant_id predicate", red=True)


def pytest_unconfigure(config: Any) -> None:
    if _directory is not None:
        _directory.cleanup()


def run_worker_command(argv: list[str]) -> None:
    """Run `celery …` with the check on, writing findings where the test process collects them."""
    directory = os.environ.get(_DIRECTORY_VARIABLE)
    if directory:
        # Django is not set up yet here: the worker's connections are all opened later.
        install(Recorder(tenant_tables, sink=Path(directory) / f"worker-{os.getpid()}.jsonl"), open_now=False)
    from celery.__main__ import main

    sys.argv = ["celery", *argv]
    main()


if __name__ == "__main__":
    run_worker_command(sys.argv[1:])
