"""Export one workspace to an Ekko local-format SQLite file, streaming (docs/sqlite-format.md).

Every message, summary, node of every status, audit event and vector of the workspace is read from
one repeatable-read snapshot and written to `<path>.partial`, which is renamed into place when
complete. PostgreSQL formats every value itself (timestamps with to_char, jsonb and arrays as JSON
text, uuids as text): parsing them into Python objects only to print them again cost more than
everything else in an export. A writer thread does SQLite's inserts and index builds while the
next rows are read; rows and their search text are signed (memory.transfer.signatures) so this
server's own files import on the fast path. Reads only: the export never writes memory tables.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BinaryField, F, Func, IntegerField, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memory.audit_chain import audit_chain_info
from memory.models import MemoryMessage, MemoryNode, MemorySummary
from memory.rules.text import segment_for_search
from memory.transfer.report import Progress, no_progress
from memory.transfer.selectors import audit_events_of, workspace_in_tenant
from memory.transfer.signatures import NODE_SEARCH_COLUMNS, SearchTextSigner, node_file_search_text
from memory.transfer.sqlite_format import (
    APPLICATION_ID,
    AUDIT_COLUMNS,
    EMBEDDING_COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    MESSAGE_COLUMNS,
    MESSAGE_EMBEDDING_COLUMNS,
    NODE_COLUMNS,
    SCHEMA_SQL,
    SUMMARY_COLUMNS,
    TABLE_INDEX_SQL,
    Column,
    iso_utc,
    json_text,
    server_embedding_model,
    vector_blob,
)
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace

__all__ = ["CHUNK_SIZE", "ExportStats", "workspace_export_sqlite"]

CHUNK_SIZE = 2000

_ISO_UTC = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


def _iso(field_name: str) -> Func:
    return Func(F(field_name), template=_ISO_UTC, output_field=TextField())


def _text(field_name: str) -> Cast:
    return Cast(field_name, TextField())


def _array_json(field_name: str) -> Func:
    return Func(F(field_name), template="to_jsonb(%(expressions)s)::text", output_field=TextField())


# File column → ORM field path or SQL expression, in file column order. `workspace_id` and
# `search_text_sig` are filled in Python.
_MESSAGE_EXPORT: dict[str, Any] = {
    "id": "message_id",
    "session_id": "session_id",
    "parent_id": "parent_id",
    "role": "role",
    "content": "content",
    "metadata_json": _text("metadata"),
    "created_at": _iso("created_at"),
    "user_id": "user__username",
    "channel": "channel",
    "agent_name": "agent_name",
    "token_count": "token_count",
    "search_text": "search_text",
}
_SUMMARY_EXPORT: dict[str, Any] = {
    "id": _text("id"),
    "session_id": "session_id",
    "parent_summary_id": _text("parent_summary_id"),
    "from_message_id": "from_message_id",
    "to_message_id": "to_message_id",
    "summary": "summary",
    "current_goal": "current_goal",
    "constraints_json": _text("constraints"),
    "preferences_json": _text("preferences"),
    "decisions_json": _text("decisions"),
    "completed_work_json": _text("completed_work"),
    "pending_work_json": _text("pending_work"),
    "known_issues_json": _text("known_issues"),
    "created_at": _iso("created_at"),
}
_NODE_EXPORT: dict[str, Any] = {
    "id": _text("id"),
    "parent_id": _text("parent_id"),
    "supersedes_id": _text("supersedes_id"),
    "session_id": "session_id",
    "user_id": "user__username",
    "scope": "scope",
    "domain": "domain",
    "category_path_json": _array_json("category_path"),
    "category_path_text": "category_path_text",
    "type": "type",
    "key": "key",
    "value_json": _text("value_json"),
    "title": "title",
    "content": "content",
    "status": "status",
    "confidence": "confidence",
    "importance": "importance",
    "tags_json": _array_json("tags"),
    "entities_json": _array_json("entities"),
    "source_message_ids_json": _array_json("source_message_ids"),
    "created_at": _iso("created_at"),
    "updated_at": _iso("updated_at"),
    "expires_at": _iso("expires_at"),
    "revision": "revision",
    "kind": "kind",
    "item_key": "item_key",
    "explicit_user_intent": Cast("explicit_user_intent", IntegerField()),
    "review_state": "review_state",
    "access_count": "access_count",
    "last_accessed_at": _iso("last_accessed_at"),
    "search_text": "search_text",
}
_AUDIT_EXPORT: dict[str, Any] = {
    "id": _text("id"),
    "event_type": "event_type",
    "node_id": _text("node_id"),
    "session_id": "session_id",
    "user_id": "user__username",
    "actor": "actor",
    "reason": "reason",
    "payload_json": _text("payload"),
    "created_at": _iso("created_at"),
    "sequence": "sequence",
    "previous_digest": "previous_digest",
    "content_salt": "content_salt",
    "content_digest": "content_digest",
    "digest": "digest",
}


def _vector_send() -> Func:
    return Func(F("embedding"), function="vector_send", output_field=BinaryField())


def _export_values(queryset: Any, spec: dict[str, Any]) -> Any:
    """Return `queryset` as value tuples in `spec` order, with SQL expressions annotated under file names."""
    annotations = {f"file_{name}": value for name, value in spec.items() if not isinstance(value, str)}
    names = [value if isinstance(value, str) else f"file_{name}" for name, value in spec.items()]
    return queryset.annotate(**annotations).values_list(*names)


def _column_index(columns: tuple[Column, ...]) -> dict[str, int]:
    return {column.name: index for index, column in enumerate(columns)}


_MSG = _column_index(MESSAGE_COLUMNS)
_NODE = _column_index(NODE_COLUMNS)


@dataclass(frozen=True)
class ExportStats:
    path: Path
    messages: int
    summaries: int
    nodes: int
    audit_events: int
    embeddings: int
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "summaries": self.summaries,
            "nodes": self.nodes,
            "auditEvents": self.audit_events,
            "embeddings": self.embeddings,
            "bytes": self.bytes,
        }


@contextmanager
def _consistent_snapshot() -> Iterator[None]:
    """Read every table from one snapshot when we own the transaction (a caller's transaction is kept)."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def workspace_export_sqlite(
    *,
    tenant: Tenant,
    workspace: Workspace | int,
    path: str | os.PathLike[str],
    include_embeddings: bool = True,
    chunk_size: int = CHUNK_SIZE,
    progress: Progress | None = None,
) -> ExportStats:
    """Write `workspace` (every row of every status) to a new SQLite file at `path`, streaming."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    report = progress or no_progress
    signer = SearchTextSigner()
    writer = _SqliteWriter(partial, signer)
    try:
        with _consistent_snapshot(), tenant_context(tenant):
            ws = workspace_in_tenant(tenant, workspace)
            counts = _export_rows(writer, tenant, ws, signer, include_embeddings, chunk_size, report)
            _write_info(writer, tenant, ws, signer, counts)
        report("indexes", 0, None)
        writer.finish()
        os.replace(partial, target)
    except BaseException:
        writer.abort()
        partial.unlink(missing_ok=True)
        raise
    return ExportStats(path=target, bytes=target.stat().st_size, **counts)


class _SqliteWriter:
    """Writes the export file on its own thread, so SQLite's inserts and index builds overlap the reading
    from PostgreSQL (sqlite3 and psycopg both release the GIL while they work)."""

    _SETUP = (
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA temp_store=MEMORY; "
        "PRAGMA cache_size=-131072; "
        f"PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={FORMAT_VERSION};"
    )

    def __init__(self, path: Path, signer: SearchTextSigner) -> None:
        self.signer = signer
        self.error: BaseException | None = None
        self.tasks: queue.Queue[tuple[str, Sequence[Any]] | None] = queue.Queue(maxsize=8)
        self.thread = threading.Thread(target=self._run, args=(path,), name="ekko-sqlite-export", daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        try:
            out = sqlite3.connect(path, isolation_level=None)
            try:
                out.executescript(self._SETUP + SCHEMA_SQL)
                while (task := self.tasks.get()) is not None:
                    sql, rows = task
                    signed_table = _ROW_SIGNED_INSERTS.get(sql)
                    if signed_table is not None:
                        # The row MAC is computed here, where it overlaps the reading from PostgreSQL.
                        rows = [(*row, self.signer.row(signed_table, row)) for row in rows]
                    if rows:
                        out.execute("BEGIN")
                        out.executemany(sql, rows)
                        out.execute("COMMIT")
                    else:
                        out.executescript(sql)
                out.executescript("PRAGMA journal_mode=DELETE; PRAGMA optimize;")
            finally:
                out.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the exporting thread
            self.error = exc
            while True:  # unblock a producer waiting on a full queue
                try:
                    self.tasks.get_nowait()
                except queue.Empty:
                    break

    def _put(self, task: tuple[str, Sequence[Any]] | None) -> None:
        while True:
            if self.error is not None:
                raise self.error
            try:
                self.tasks.put(task, timeout=0.5)
                return
            except queue.Full:
                if not self.thread.is_alive():
                    raise RuntimeError("The SQLite writer stopped.") from self.error

    def rows(self, sql: str, rows: list[Sequence[Any]]) -> None:
        self._put((sql, rows))

    def script(self, sql: str) -> None:
        self._put((sql, ()))

    def finish(self) -> None:
        self._put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        if self.thread.is_alive():
            with suppress(queue.Full):
                self.tasks.put(None, timeout=10)
        self.thread.join(timeout=60)


def _insert_sql(table: str, columns: tuple[Column, ...]) -> str:
    names, marks = ", ".join(c.name for c in columns), ", ".join("?" * len(columns))
    return f"INSERT INTO {table} ({names}) VALUES ({marks})"


# Inserts whose rows arrive without their last column, `row_sig`, which the writer appends.
_ROW_SIGNED_INSERTS = {
    _insert_sql(table, columns): table
    for table, columns in (
        ("memory_messages", MESSAGE_COLUMNS),
        ("memory_nodes", NODE_COLUMNS),
        ("memory_audit_events", AUDIT_COLUMNS),
    )
}


def _write_chunks(
    writer: _SqliteWriter,
    table: str,
    columns: tuple[Column, ...],
    rows: Iterable[Sequence[Any]],
    chunk_size: int,
    stage: str,
    total: int,
    report: Progress,
) -> int:
    sql = _insert_sql(table, columns)
    written, batch = 0, []
    report(stage, 0, total)
    for row in rows:
        batch.append(row)
        if len(batch) >= chunk_size:
            writer.rows(sql, batch)
            written += len(batch)
            report(stage, len(batch), total)
            batch = []
    if batch:
        writer.rows(sql, batch)
        written += len(batch)
        report(stage, len(batch), total)
    # Each table's indexes are built as soon as its rows are in, while the next table is being read.
    writer.script(TABLE_INDEX_SQL.get(table, ""))
    return written


def _export_rows(
    out: _SqliteWriter,
    tenant: Tenant,
    ws: Workspace,
    signer: SearchTextSigner,
    include_embeddings: bool,
    chunk_size: int,
    report: Progress,
) -> dict[str, int]:
    messages = MemoryMessage.objects.filter(tenant=tenant, workspace=ws)
    summaries = MemorySummary.objects.filter(tenant=tenant, workspace=ws)
    nodes = MemoryNode.objects.filter(tenant=tenant, workspace=ws)
    events = audit_events_of(tenant, ws)
    workspace_id = str(ws.pk)

    def message_rows() -> Iterator[list[Any]]:
        query = _export_values(messages.order_by("created_at", "message_id"), _MESSAGE_EXPORT)
        for values in query.iterator(chunk_size=chunk_size):
            row = [*values, None]
            content = row[_MSG["content"]]
            if not row[_MSG["search_text"]]:
                row[_MSG["search_text"]] = segment_for_search(content)
            row[_MSG["search_text_sig"]] = signer.sign("message", (content,), row[_MSG["search_text"]])
            yield row

    def node_rows() -> Iterator[list[Any]]:
        query = _export_values(nodes.order_by("created_at", "id"), _NODE_EXPORT)
        # values lack workspace_id, so file positions after it are one less.
        positions = [_NODE[c] - 1 for c in NODE_SEARCH_COLUMNS]
        for values in query.iterator(chunk_size=chunk_size):
            inputs = tuple(values[i] or "" for i in positions)
            search_text = values[-1] or node_file_search_text(inputs)
            # values lack workspace_id (a constant) and the signature; both are put in place here.
            row = [
                *values[:4],
                workspace_id,
                *values[4:-1],
                search_text,
                signer.sign("node", inputs, search_text),
            ]
            yield row

    def audit_rows() -> Iterator[list[Any]]:
        query = _export_values(events.order_by("created_at", "id"), _AUDIT_EXPORT)
        for values in query.iterator(chunk_size=chunk_size):
            yield [*values[:4], workspace_id, *values[4:]]

    summary_rows = _export_values(summaries.order_by("created_at", "id"), _SUMMARY_EXPORT)
    counts = {
        "messages": _write_chunks(
            out,
            "memory_messages",
            MESSAGE_COLUMNS,
            message_rows(),
            chunk_size,
            "messages",
            messages.count(),
            report,
        ),
        "summaries": _write_chunks(
            out,
            "memory_summaries",
            SUMMARY_COLUMNS,
            summary_rows.iterator(chunk_size=chunk_size),
            chunk_size,
            "summaries",
            summaries.count(),
            report,
        ),
        "nodes": _write_chunks(
            out, "memory_nodes", NODE_COLUMNS, node_rows(), chunk_size, "nodes", nodes.count(), report
        ),
        "audit_events": _write_chunks(
            out,
            "memory_audit_events",
            AUDIT_COLUMNS,
            audit_rows(),
            chunk_size,
            "audit events",
            events.count(),
            report,
        ),
        "embeddings": 0,
    }
    if include_embeddings:
        for model_query, table, columns, id_field, stage in (
            (nodes, "memory_embeddings", EMBEDDING_COLUMNS, _text("id"), "vectors"),
            (
                messages,
                "memory_message_embeddings",
                MESSAGE_EMBEDDING_COLUMNS,
                F("message_id"),
                "message vectors",
            ),
        ):
            with_vectors = model_query.filter(embedding__isnull=False).exclude(embedding_model="")
            query = (
                with_vectors.order_by("pk")
                .annotate(file_owner=id_field, file_vector=_vector_send())
                .values_list("file_owner", "embedding_model", "file_vector")
                .iterator(chunk_size=chunk_size)
            )
            rows = (
                [owner, model, len(blob) // 4, blob]
                for owner, model, blob in ((owner, model, vector_blob(raw)) for owner, model, raw in query)
            )
            written = _write_chunks(
                out, table, columns, rows, chunk_size, stage, with_vectors.count(), report
            )
            if table == "memory_embeddings":
                counts["embeddings"] = written
    return counts


def _write_info(
    out: _SqliteWriter, tenant: Tenant, ws: Workspace, signer: SearchTextSigner, counts: dict[str, int]
) -> None:
    now = iso_utc(timezone.now())
    out.rows(
        "INSERT INTO memory_schema_migrations (version, applied_at) VALUES (?, ?)", [(FORMAT_VERSION, now)]
    )
    info = {
        "format": FORMAT_NAME,
        "format_version": str(FORMAT_VERSION),
        "exported_at": now,
        "tenant": tenant.slug,
        "workspace_id": str(ws.pk),
        "workspace_slug": ws.slug,
        "workspace_name": ws.name,
        "embedding_model": server_embedding_model() or "",
        "embedding_dim": str(settings.EKKO_EMBEDDING_DIM),
        "search_text_segmenter": signer.segmenter,
        "counts": json_text(counts),
        "audit_chain": json_text(audit_chain_info(tenant=tenant)),
    }
    out.rows("INSERT INTO memory_export_info (key, value) VALUES (?, ?)", sorted(info.items()))

