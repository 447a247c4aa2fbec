"""Writes of imported rows: the staging tables an import fills and the statements that move rows in.

memory.transfer reads and checks a file and decides, row by row, what to import; the rows it keeps
come here. COPY cannot write into a table with row-level security, so rows are COPYed into
temporary staging tables (`ekko_import_*`, dropped at commit) and moved with one INSERT … SELECT
per table, which the tenant policy checks row by row; nodes a newer file revision replaces are
updated from the staging table in one statement, with their audit events (the nodes' statements are in
memory.services.imports_nodes). A copy into an empty
workspace may run its big insert on the same connection in a worker thread while the file reading
goes on (`in_background`); every other call first waits for that statement.

Every function takes `tenant=` and refuses to run unless that tenant is bound in the current
transaction: one import is one `tenant_context`, so all its statements commit or roll back together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection, transaction

from memory.models import MemoryAuditEvent, MemoryMessage
from tenants.context import current_tenant_id
from tenants.models import Tenant, Workspace

__all__ = [
    "EVENT_STAGING_COLUMNS",
    "MESSAGE_STAGING_COLUMNS",
    "SUMMARY_STAGING_COLUMNS",
    "ImportStaging",
    "audit_events_create",
    "audit_events_insert_staged",
    "audit_events_stage",
    "audit_events_staged_ids_taken",
    "audit_events_staged_rename",
    "import_staging_abandon",
    "import_staging_close",
    "import_staging_open",
    "messages_create",
    "messages_insert_staged",
    "messages_stage",
    "summaries_insert_staged",
    "summaries_stage",
    "summaries_staged_ids_taken",
    "summaries_staged_rename",
    "summaries_unstage_broken_chains",
]

MESSAGE_STAGING_COLUMNS = (
    "tenant_id", "workspace_id", "message_id", "session_id", "user_id", "parent_id", "role", "content",
    "channel", "agent_name", "metadata", "token_count", "created_at", "search_text", "embedding",
    "embedding_model",
)
SUMMARY_STAGING_COLUMNS = (
    "id", "tenant_id", "workspace_id", "session_id", "parent_summary_id", "from_message_id", "to_message_id",
    "summary", "current_goal", "constraints", "preferences", "decisions", "completed_work", "pending_work",
    "known_issues", "created_at",
)
EVENT_STAGING_COLUMNS = (
    "id", "tenant_id", "workspace_id", "event_type", "node_id", "session_id", "user_id", "actor", "reason",
    "payload", "created_at",
)
# Staged beside a summary's columns: the file's id (for reports).
SUMMARY_STAGING_EXTRA = ("source_id",)

_STAGING = {
    "memory_memorymessage": "ekko_import_messages",
    "memory_memorysummary": "ekko_import_summaries",
    "memory_memorynode": "ekko_import_nodes",
    "memory_memoryauditevent": "ekko_import_events",
}
# JSON values are staged as the file's own (already validated) JSON text: PostgreSQL turns them into
# jsonb far faster than Python can re-encode them ("json" → jsonb). Arrays ("array") are staged as
# PostgreSQL array literals (memory.transfer.sqlite_format.pg_array), cast to varchar[] on insert.
_JSON_TEXT_COLUMNS: dict[str, dict[str, str]] = {
    "memory_memorymessage": {"metadata": "json"},
    "memory_memorysummary": {
        c: "json"
        for c in ("constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")
    },
    "memory_memorynode": {
        "category_path": "array", "tags": "array", "entities": "array", "source_message_ids": "array",
        "value_json": "json",
    },
    "memory_memoryauditevent": {"payload": "json"},
}


class _Background:
    """One SQL statement running on the import's connection in a worker thread while Python reads the file.

    psycopg connections are thread-safe, and the importing thread touches the database again only after
    `wait()`; errors come back through Django's wrapper so they read like any other database error.
    """

    def __init__(self, sql: str, *, fetch: bool, on_done: Callable[[Any], None]) -> None:
        self.on_done = on_done
        self.result: Any = None
        self.error: BaseException | None = None
        raw = connection.connection

        def run() -> None:
            try:
                with raw.cursor() as cursor:
                    cursor.execute(sql)
                    self.result = cursor.fetchall() if fetch else cursor.rowcount
            except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
                self.error = exc

        self.thread = threading.Thread(target=run, name="ekko-import-statement", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            with connection.wrap_database_errors:
                raise self.error
        self.on_done(self.result)


@dataclass
class ImportStaging:
    """The staging tables of one import and the one statement that may be running in the background."""

    tenant_id: int
    previous_plan_cache_mode: str
    pending: _Background | None = field(default=None, repr=False)

    @property
    def busy(self) -> bool:
        """Return True while a statement started in the background may still be running."""
        return self.pending is not None and self.pending.thread.is_alive()

    def wait(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.wait()


def _ready(tenant: Tenant, staging: ImportStaging | None = None) -> None:
    """Refuse to write unless `tenant` is bound in an open transaction (and owns `staging`); wait for it."""
    if current_tenant_id() != tenant.pk or not connection.in_atomic_block:
        raise RuntimeError("Import writes run inside tenant_context(tenant) for the tenant they are given.")
    if staging is not None:
        if staging.tenant_id != tenant.pk:
            raise RuntimeError("These staging tables belong to another tenant's import.")
        staging.wait()


def import_staging_open(*, tenant: Tenant, check_each_statement: bool) -> ImportStaging:
    """Create (or empty) the staging tables; with `check_each_statement`, check foreign keys per statement.

    Checking per statement suits a copy into an empty workspace: nothing there is updated and dangling
    links are cleared before inserting, so each INSERT checks its own keys while the file reading goes on.
    """
    _ready(tenant)
    with connection.cursor() as cursor:
        # The app connection forces custom plans (for HNSW search), which makes PostgreSQL re-plan the
        # cached foreign-key check query for every inserted row: ~4x slower checks. Imports don't search.
        cursor.execute(
            "SELECT current_setting('plan_cache_mode'), set_config('plan_cache_mode', 'auto', true)"
        )
        staging = ImportStaging(tenant_id=tenant.pk, previous_plan_cache_mode=cursor.fetchone()[0])
        cursor.execute("SELECT to_regclass('pg_temp.ekko_import_nodes') IS NOT NULL")
        if cursor.fetchone()[0]:
            # A second import in the same transaction reuses the tables (no new relations, no new locks).
            _empty_staging(cursor)
        else:
            _create_staging(cursor)
        if check_each_statement:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    return staging


def _create_staging(cursor: Any) -> None:
    for table, staging in _STAGING.items():
        cursor.execute(f"CREATE TEMP TABLE {staging} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
        if table in ("memory_memorymessage", "memory_memorynode"):
            cursor.execute(f"ALTER TABLE {staging} DROP COLUMN search_vector")
    # Messages get their integer key from the real table's identity on insert.
    cursor.execute("ALTER TABLE ekko_import_messages ALTER COLUMN id DROP NOT NULL")
    for table, columns in _JSON_TEXT_COLUMNS.items():
        alterations = ", ".join(f"ALTER COLUMN {c} TYPE text USING NULL" for c in columns)
        cursor.execute(f"ALTER TABLE {_STAGING[table]} {alterations}")
    cursor.execute("ALTER TABLE ekko_import_nodes ADD COLUMN import_action text NOT NULL DEFAULT 'insert'")
    cursor.execute("ALTER TABLE ekko_import_nodes ADD COLUMN source_id text")
    cursor.execute("ALTER TABLE ekko_import_summaries ADD COLUMN source_id text")
    cursor.execute("CREATE INDEX ON ekko_import_nodes (id)")
    cursor.execute("CREATE INDEX ON ekko_import_summaries (id)")


def _empty_staging(cursor: Any) -> None:
    cursor.execute("TRUNCATE " + ", ".join(_STAGING.values()))


def import_staging_close(*, tenant: Tenant, staging: ImportStaging) -> None:
    """Check the deferred foreign keys now (inside the import, not at a caller's commit) and empty staging."""
    _ready(tenant, staging)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        _empty_staging(cursor)
        cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", [staging.previous_plan_cache_mode])


def import_staging_abandon(*, staging: ImportStaging) -> None:
    """Let a statement still running end before the transaction rolls back (its error is not the news)."""
    try:
        staging.wait()
    except Exception:  # noqa: BLE001, S110 - the import already failed for the reason being raised
        pass


def _analyze(staging_table: str) -> None:
    # Temporary tables have no statistics until analysed; without them the joins below plan as nested loops.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL default_statistics_target = 10")  # a small sample is plenty for join plans
        cursor.execute(f"ANALYZE {staging_table}")
        cursor.execute("RESET default_statistics_target")


def _copy(staging_table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    if not rows:
        return
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {staging_table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _staged_value(table: str, column: str, alias: str = "s") -> str:
    kind = _JSON_TEXT_COLUMNS.get(table, {}).get(column)
    if kind == "array":
        return f"{alias}.{column}::varchar[]"
    if kind == "json":
        return f"{alias}.{column}::jsonb"
    return f"{alias}.{column}"


def _insert_staged_sql(table: str, columns: Sequence[str], where: str = "TRUE", returning: str = "",
                       order: str = "") -> str:
    names = ", ".join(columns)
    values = ", ".join(_staged_value(table, c) for c in columns)
    ordered = f"ORDER BY {order}" if order else ""
    return (f"INSERT INTO {table} ({names}) SELECT {values} FROM {_STAGING[table]} s WHERE {where} {ordered} "
            f"{returning}")


def _run(sql: str, params: Sequence[Any] = (), *, fetch: bool = False) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if fetch else cursor.rowcount


def _ids_taken(table: str, columns: Sequence[str], where: str = "TRUE", blank: dict[str, str] | None = None
               ) -> list[UUID]:
    """Return the ids of the staged rows (`where`) that another tenant already uses.

    Row-level security hides other tenants' rows, but the primary key is global: the insert is tried in a
    savepoint and undone — with the columns in `blank` replaced, so that costly indexes and the slot and
    chain constraints stay out of it — and the ids it could not insert are the taken ones. The caller
    renames them, so a foreign id imports exactly like an unused one.
    """
    values = ", ".join((blank or {}).get(c, _staged_value(table, c)) for c in columns)
    staging_table = _STAGING[table]
    tried = [row[0] for row in _run(f"SELECT s.id FROM {staging_table} s WHERE {where}", fetch=True)]
    if not tried:
        return []
    savepoint = transaction.savepoint()
    try:
        inserted = _run(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {values} FROM {staging_table} s "
            f"WHERE {where} ON CONFLICT (id) DO NOTHING RETURNING id", fetch=True)
    finally:
        transaction.savepoint_rollback(savepoint)
    kept = {row[0] for row in inserted}
    return [staged_id for staged_id in tried if staged_id not in kept]


def _rename(staging_table: str, renames: dict[UUID, UUID], links: Sequence[str]) -> None:
    for old, new in renames.items():
        _run(f"UPDATE {staging_table} SET id = %s WHERE id = %s", [new, old])
        for link in links:
            _run(f"UPDATE {staging_table} SET {link} = %s WHERE {link} = %s", [new, old])


# --- messages -------------------------------------------------------------------------------------

def messages_stage(*, tenant: Tenant, staging: ImportStaging, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY messages (MESSAGE_STAGING_COLUMNS order) into staging."""
    _ready(tenant, staging)
    _copy("ekko_import_messages", MESSAGE_STAGING_COLUMNS, rows)


def messages_insert_staged(
    *, tenant: Tenant, staging: ImportStaging, parent_renames: dict[str, str], in_background: bool,
    on_done: Callable[[list[tuple[int, bool]]], None],
) -> None:
    """Insert the staged messages; `on_done` gets (pk, has no vector) per row, at once or after the wait."""
    _ready(tenant, staging)
    for old, new in parent_renames.items():  # replies to a renamed message follow it
        _run("UPDATE ekko_import_messages SET parent_id = %s WHERE parent_id = %s", [new, old])
    sql = _insert_staged_sql("memory_memorymessage", MESSAGE_STAGING_COLUMNS,
                             returning="RETURNING id, embedding IS NULL")
    if in_background:
        staging.pending = _Background(sql, fetch=True, on_done=on_done)
    else:
        on_done(_run(sql, fetch=True))


def messages_create(*, tenant: Tenant, messages: Sequence[MemoryMessage]) -> list[int]:
    """Insert unsaved messages of `tenant` (a JSONL import's new lines) and return their primary keys."""
    _ready(tenant)
    if any(message.tenant_id != tenant.pk for message in messages):
        raise RuntimeError("Every imported message must belong to the tenant it is imported into.")
    return [message.pk for message in MemoryMessage.objects.bulk_create(messages)]


# --- summaries ------------------------------------------------------------------------------------

def summaries_stage(*, tenant: Tenant, staging: ImportStaging, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY summaries (SUMMARY_STAGING_COLUMNS + SUMMARY_STAGING_EXTRA order) into staging."""
    _ready(tenant, staging)
    _copy("ekko_import_summaries", (*SUMMARY_STAGING_COLUMNS, *SUMMARY_STAGING_EXTRA), rows)


def summaries_unstage_broken_chains(
    *, tenant: Tenant, staging: ImportStaging, workspace: Workspace, relink: dict[UUID, UUID | None]
) -> list[tuple[str, str]]:
    """Drop staged summaries that would fork a session's chain or hang from a missing parent.

    Staged parents named in `relink` (a summary left out → the parent its children hang from instead)
    are replaced first. Returns (file id, "missing_parent" | "chain_fork") for each summary dropped,
    repeating until the chain holds.
    """
    _ready(tenant, staging)
    for left_out, parent in relink.items():
        _run("UPDATE ekko_import_summaries SET parent_summary_id = %s WHERE parent_summary_id = %s",
             [parent, left_out])
    _analyze("ekko_import_summaries")
    dropped_all: list[tuple[str, str]] = []
    while True:
        dropped = _run(
            """
            SELECT s.source_id,
                   CASE WHEN s.parent_summary_id IS NOT NULL AND p.id IS NULL AND q.id IS NULL
                                     THEN 'missing_parent' ELSE 'chain_fork' END
            FROM ekko_import_summaries s
            LEFT JOIN ekko_import_summaries q ON q.id = s.parent_summary_id
            LEFT JOIN memory_memorysummary p ON p.id = s.parent_summary_id AND p.tenant_id = %s
            WHERE (s.parent_summary_id IS NOT NULL AND p.id IS NULL AND q.id IS NULL)
               OR EXISTS (SELECT 1 FROM memory_memorysummary e
                          WHERE e.tenant_id = %s AND e.workspace_id = %s AND e.session_id = s.session_id
                            AND e.parent_summary_id IS NOT DISTINCT FROM s.parent_summary_id
                            AND e.id <> s.id)
            """,
            [tenant.pk, tenant.pk, workspace.pk], fetch=True,
        )
        if not dropped:
            return dropped_all
        dropped_all += dropped
        _run("DELETE FROM ekko_import_summaries WHERE source_id = ANY(%s)", [[s for s, _ in dropped]])


def summaries_staged_ids_taken(*, tenant: Tenant, staging: ImportStaging) -> list[tuple[UUID, str]]:
    """Return (id, file id) of the staged summaries whose id another tenant uses."""
    _ready(tenant, staging)
    taken = _ids_taken("memory_memorysummary", SUMMARY_STAGING_COLUMNS, blank={"session_id": "s.id::text"})
    return _run("SELECT id, source_id FROM ekko_import_summaries WHERE id = ANY(%s)", [taken], fetch=True) \
        if taken else []


def summaries_staged_rename(*, tenant: Tenant, staging: ImportStaging, renames: dict[UUID, UUID]) -> None:
    """Give staged summaries new ids (old → new), with their children's parent links."""
    _ready(tenant, staging)
    _rename("ekko_import_summaries", renames, ("parent_summary_id",))


def summaries_insert_staged(*, tenant: Tenant, staging: ImportStaging) -> int:
    """Insert the staged summaries and return how many."""
    _ready(tenant, staging)
    return _run(_insert_staged_sql("memory_memorysummary", SUMMARY_STAGING_COLUMNS))


# --- audit events ---------------------------------------------------------------------------------

def audit_events_stage(*, tenant: Tenant, staging: ImportStaging, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY audit events (EVENT_STAGING_COLUMNS order) into staging."""
    _ready(tenant, staging)
    _copy("ekko_import_events", EVENT_STAGING_COLUMNS, rows)


def audit_events_staged_ids_taken(*, tenant: Tenant, staging: ImportStaging) -> list[UUID]:
    """Return the ids of the staged audit events that another tenant uses."""
    _ready(tenant, staging)
    return _ids_taken("memory_memoryauditevent", EVENT_STAGING_COLUMNS)


def audit_events_staged_rename(*, tenant: Tenant, staging: ImportStaging, renames: dict[UUID, UUID]) -> None:
    """Give staged audit events new ids (old → new)."""
    _ready(tenant, staging)
    _rename("ekko_import_events", renames, ())


def audit_events_insert_staged(*, tenant: Tenant, staging: ImportStaging) -> int:
    """Insert the staged audit events and return how many."""
    _ready(tenant, staging)
    # The database chains events in the order they are inserted (memory.audit_chain): oldest first.
    return _run(_insert_staged_sql("memory_memoryauditevent", EVENT_STAGING_COLUMNS,
                                   order="s.created_at, s.id"))


def audit_events_create(*, tenant: Tenant, events: Sequence[MemoryAuditEvent]) -> None:
    """Insert unsaved audit events of `tenant` (the import's own "update" events)."""
    _ready(tenant)
    if any(event.tenant_id != tenant.pk for event in events):
        raise RuntimeError("Every audit event must belong to the tenant it is written for.")
    MemoryAuditEvent.objects.bulk_create(events, batch_size=1000)
