"""Export and import one workspace as an SQLite file in the Ekko local format (docs/sqlite-format.md).

The file holds seed 000's tables (`memory_messages`, `memory_summaries`, `memory_nodes`,
`memory_audit_events`, `memory_schema_migrations`) with seed 003's `key` and `revision`, a few
Ekko columns, vectors in `memory_embeddings` / `memory_message_embeddings`, and `memory_nodes_fts`,
an FTS5 table over jieba-segmented text so a plain `sqlite3` finds Chinese words. Export streams
rows from PostgreSQL into a temporary file and renames it into place; import checks the file's
shape before touching the database, then runs in one tenant-bound transaction: rows are
validated, compared with what is already stored (identical → skipped, newer node revision →
updated, anything else → reported conflict) and the new ones are COPYed into staging tables and
inserted with one statement per table. Both directions take `tenant=` and `workspace=` explicitly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import BinaryField, F, Func, IntegerField, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memory.errors import Invalid, NotFound
from memory.models import (
    AuditEventType,
    Channel,
    MemoryAuditEvent,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    NodeStatus,
    NodeType,
    Role,
)
from memory.visibility import owner_ref
from tenants.context import tenant_context
from tenants.models import Membership, Scope, Tenant, Workspace

__all__ = [
    "FORMAT_VERSION",
    "KNOWN_FORMAT_VERSIONS",
    "ExportStats",
    "FileInfo",
    "ImportError_",
    "ImportReport",
    "Progress",
    "TableCounts",
    "sqlite_file_inspect",
    "workspace_export_sqlite",
    "workspace_import_sqlite",
]

FORMAT_VERSION = 1
KNOWN_FORMAT_VERSIONS = frozenset({1})
FORMAT_NAME = "ekko-local"
# PRAGMA application_id of files we write ("Ekko"); files from local agents may carry 0.
APPLICATION_ID = 0x456B6B6F
CHUNK_SIZE = 2000
EMBED_BATCH = 500
MAX_CONFLICTS_LISTED = 1000

# (stage, rows done since the last call, stage total or None)
Progress = Callable[[str, int, int | None], None]


class ImportError_(Invalid):  # noqa: N801 - the trailing underscore keeps clear of the builtin
    """The file cannot be imported (not SQLite, truncated, unknown version, wrong shape or bad rows).

    `code` is "invalid" (HTTP 400) and `detail` says what is wrong and how to fix it; nothing was written.
    """

    status, code = 400, "invalid"


# --------------------------------------------------------------------------- file layout (version 1)


@dataclass(frozen=True)
class Column:
    name: str
    ddl: str
    # Required columns must exist in an imported file; optional ones default when absent.
    required: bool = True


MESSAGE_COLUMNS: tuple[Column, ...] = (
    Column("id", "text primary key"),
    Column("session_id", "text not null"),
    Column("parent_id", "text"),
    Column("role", "text not null"),
    Column("content", "text not null"),
    Column("metadata_json", "text"),
    Column("created_at", "text not null"),
    Column("user_id", "text", False),
    Column("channel", "text not null default 'main'", False),
    Column("agent_name", "text not null default ''", False),
    Column("token_count", "integer not null default 0", False),
    Column("search_text", "text not null default ''", False),
    Column("search_text_sig", "text", False),
    Column("row_sig", "text", False),
)

SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("id", "text primary key"),
    Column("session_id", "text not null"),
    Column("parent_summary_id", "text"),
    Column("from_message_id", "text not null"),
    Column("to_message_id", "text not null"),
    Column("summary", "text not null"),
    Column("current_goal", "text"),
    Column("constraints_json", "text not null default '[]'"),
    Column("preferences_json", "text not null default '[]'"),
    Column("decisions_json", "text not null default '[]'"),
    Column("completed_work_json", "text not null default '[]'"),
    Column("pending_work_json", "text not null default '[]'"),
    Column("known_issues_json", "text not null default '[]'"),
    Column("created_at", "text not null"),
)

NODE_COLUMNS: tuple[Column, ...] = (
    Column("id", "text primary key"),
    Column("parent_id", "text"),
    Column("supersedes_id", "text"),
    Column("session_id", "text"),
    Column("workspace_id", "text"),
    Column("user_id", "text"),
    Column("scope", "text not null"),
    Column("domain", "text not null"),
    Column("category_path_json", "text not null"),
    Column("category_path_text", "text not null"),
    Column("type", "text not null"),
    Column("key", "text"),
    Column("value_json", "text"),
    Column("title", "text not null"),
    Column("content", "text not null"),
    Column("status", "text not null"),
    Column("confidence", "real not null"),
    Column("importance", "real not null"),
    Column("tags_json", "text not null default '[]'"),
    Column("entities_json", "text not null default '[]'"),
    Column("source_message_ids_json", "text not null default '[]'"),
    Column("created_at", "text not null"),
    Column("updated_at", "text not null"),
    Column("expires_at", "text"),
    Column("revision", "integer not null default 1"),
    Column("kind", "text", False),
    Column("item_key", "text", False),
    Column("explicit_user_intent", "integer not null default 0", False),
    Column("access_count", "integer not null default 0", False),
    Column("last_accessed_at", "text", False),
    Column("search_text", "text not null default ''", False),
    Column("search_text_sig", "text", False),
    Column("row_sig", "text", False),
)

AUDIT_COLUMNS: tuple[Column, ...] = (
    Column("id", "text primary key"),
    Column("event_type", "text not null"),
    Column("node_id", "text"),
    Column("session_id", "text"),
    Column("workspace_id", "text"),
    Column("user_id", "text"),
    Column("actor", "text not null"),
    Column("reason", "text not null"),
    Column("payload_json", "text"),
    Column("created_at", "text not null"),
    Column("row_sig", "text", False),
)

EMBEDDING_COLUMNS: tuple[Column, ...] = (
    Column("node_id", "text primary key"),
    Column("model", "text not null"),
    Column("dim", "integer not null"),
    Column("vector", "blob not null"),
)
MESSAGE_EMBEDDING_COLUMNS: tuple[Column, ...] = (
    Column("message_id", "text primary key"),
    Column("model", "text not null"),
    Column("dim", "integer not null"),
    Column("vector", "blob not null"),
)

TABLES: dict[str, tuple[Column, ...]] = {
    "memory_messages": MESSAGE_COLUMNS,
    "memory_summaries": SUMMARY_COLUMNS,
    "memory_nodes": NODE_COLUMNS,
    "memory_audit_events": AUDIT_COLUMNS,
}
OPTIONAL_TABLES: dict[str, tuple[Column, ...]] = {
    "memory_embeddings": EMBEDDING_COLUMNS,
    "memory_message_embeddings": MESSAGE_EMBEDDING_COLUMNS,
}

_SCHEMA_SQL = "\n".join(
    [
        "CREATE TABLE memory_schema_migrations (version integer primary key, applied_at text not null);",
        "CREATE TABLE memory_export_info (key text primary key, value text not null);",
        *(
            f"CREATE TABLE {table} ({', '.join(f'{c.name} {c.ddl}' for c in columns)});"
            for table, columns in {**TABLES, **OPTIONAL_TABLES}.items()
        ),
    ]
)

# Seed 000's indexes, created after the rows are in (building them once is faster than maintaining them).
_INDEX_SQL = """
CREATE INDEX idx_memory_messages_session_created ON memory_messages (session_id, created_at);
CREATE INDEX idx_memory_summaries_session_created ON memory_summaries (session_id, created_at);
CREATE INDEX idx_memory_nodes_lookup ON memory_nodes (scope, status, domain, type, importance, updated_at);
CREATE INDEX idx_memory_nodes_key ON memory_nodes (scope, status, domain, type, key, updated_at);
CREATE INDEX idx_memory_nodes_category ON memory_nodes (category_path_text);
CREATE INDEX idx_memory_nodes_session ON memory_nodes (session_id, status, updated_at);
CREATE INDEX idx_memory_nodes_workspace ON memory_nodes (workspace_id, status, updated_at);
CREATE INDEX idx_memory_nodes_user ON memory_nodes (user_id, status, updated_at);
CREATE INDEX idx_memory_audit_events_node ON memory_audit_events (node_id, created_at);
"""

_TABLE_INDEX_SQL: dict[str, str] = {
    table: "\n".join(line for line in _INDEX_SQL.splitlines() if f" ON {table} (" in line)
    for table in ("memory_messages", "memory_summaries", "memory_nodes", "memory_audit_events")
}

# The FTS table keeps its own copy of the segmented text keyed by node_id (seed 003's layout: a hard
# delete runs `DELETE FROM memory_nodes_fts WHERE node_id = ?`); an external-content table keyed on
# memory_nodes' implicit rowid would silently break when a local agent runs VACUUM.
_FTS_SQL = """
CREATE VIRTUAL TABLE memory_nodes_fts USING fts5(node_id UNINDEXED, search_text, tokenize='unicode61');
INSERT INTO memory_nodes_fts (node_id, search_text) SELECT id, search_text FROM memory_nodes;
CREATE TRIGGER memory_nodes_fts_insert AFTER INSERT ON memory_nodes BEGIN
  INSERT INTO memory_nodes_fts (node_id, search_text) VALUES (new.id, new.search_text);
END;
CREATE TRIGGER memory_nodes_fts_delete AFTER DELETE ON memory_nodes BEGIN
  DELETE FROM memory_nodes_fts WHERE node_id = old.id;
END;
CREATE TRIGGER memory_nodes_fts_update AFTER UPDATE OF id, search_text ON memory_nodes BEGIN
  DELETE FROM memory_nodes_fts WHERE node_id = old.id;
  INSERT INTO memory_nodes_fts (node_id, search_text) VALUES (new.id, new.search_text);
END;
"""
_TABLE_INDEX_SQL["memory_nodes"] += "\n" + _FTS_SQL


# --------------------------------------------------------------------------- value codecs


def iso_utc(value: datetime | None) -> str | None:
    """Return `value` as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (always UTC, always microseconds), or None."""
    if value is None:
        return None
    if value.utcoffset():
        value = value.astimezone(UTC)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T"
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}Z"
    )


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _json_or_none(value: Any) -> str | None:
    return None if value is None else _json_text(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every import: json.loads(..., parse_constant=...) would build a new one per call.
_JSON_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _vector_blob(vector_send: bytes | memoryview) -> bytes:
    # pgvector's binary form: int16 dim, int16 unused, then big-endian float4s; the file uses little-endian.
    return np.frombuffer(bytes(vector_send), dtype=">f4", offset=4).astype("<f4").tobytes()


def _vector_text(blob: bytes) -> str:
    return "[" + ",".join(map(repr, np.frombuffer(blob, dtype="<f4").tolist())) + "]"


def _vector_send() -> Func:
    return Func(F("embedding"), function="vector_send", output_field=BinaryField())


# --------------------------------------------------------------------------- derived search text


def _segment(*parts: str | None) -> str:
    from memory.rules.text import segment_for_search  # lazy: jieba loads on first use

    return segment_for_search(*parts)


def _segmenter_id() -> str:
    import jieba

    import memory.rules.text

    source = Path(memory.rules.text.__file__).read_bytes()
    return f"jieba-{jieba.__version__}/text-{hashlib.sha256(source).hexdigest()[:16]}"


class _SearchTextSigner:
    """Vouch for rows and search text this server wrote, so an import may trust them instead of redoing work.

    jieba segments about 4,000 cards a second and checking every field of a row costs more than
    inserting it: a 100k-card import would miss its budget doing either for rows it wrote itself.
    Both signatures are BLAKE2 MACs keyed with the server secret and the segmenter version.
    `search_text_sig` covers a row's words and its segmented text: the text is reused when they are
    unchanged. `row_sig` covers every column of the row: an unchanged row skips the field-by-field
    checks (they held when the row left this server's database). Anything written by someone else,
    or edited, is checked and segmented again.
    """

    def __init__(self) -> None:
        self.key = hashlib.sha256(b"ekko.sqlite_io.search_text" + settings.SECRET_KEY.encode()).digest()
        self.segmenter = _segmenter_id()

    def sign(self, kind: str, inputs: Sequence[str], search_text: str) -> str:
        message = "\x1f".join((kind, self.segmenter, *inputs, search_text)).encode()
        return hashlib.blake2b(message, key=self.key, digest_size=16).hexdigest()

    def verified(self, kind: str, inputs: Sequence[str], search_text: Any, signature: Any) -> bool:
        if not isinstance(search_text, str) or not isinstance(signature, str) or not search_text:
            return False
        return hmac.compare_digest(self.sign(kind, inputs, search_text), signature)

    def row(self, table: str, values: Sequence[Any]) -> str:
        """Return the MAC of a file row: every column before `row_sig`, as the repr of a tuple.

        A tuple's repr quotes its strings and spells ints, floats and None distinctly, so no two rows
        share it; SQLite hands the values back with the same types the export wrote.
        """
        text = f"{table}\x1f{self.segmenter}\x1f{tuple(values)!r}"
        return hashlib.blake2b(text.encode(), key=self.key, digest_size=16).hexdigest()

    def row_verified(self, table: str, columns: tuple[Column, ...], values: dict[str, Any]) -> bool:
        signature = values.get("row_sig")
        if not isinstance(signature, str):
            return False
        ordered = [values.get(column.name) for column in columns[:-1]]
        return hmac.compare_digest(self.row(table, ordered), signature)


def _node_search_text(title: str, content: str, tags: list[str], entities: list[str]) -> str:
    return _segment(title, content, *tags, *entities)


# --------------------------------------------------------------------------- rows: PostgreSQL → file
#
# PostgreSQL formats every exported value itself (timestamps with to_char, jsonb and arrays as JSON
# text, uuids as text): parsing them into Python objects only to print them again cost more than
# everything else in an export.

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
}


def _export_values(queryset: Any, spec: dict[str, Any]) -> Any:
    """Return `queryset` as value tuples in `spec` order, with SQL expressions annotated under file names."""
    annotations = {f"file_{name}": value for name, value in spec.items() if not isinstance(value, str)}
    names = [value if isinstance(value, str) else f"file_{name}" for name, value in spec.items()]
    return queryset.annotate(**annotations).values_list(*names)


def _column_index(columns: tuple[Column, ...]) -> dict[str, int]:
    return {column.name: index for index, column in enumerate(columns)}


_MSG = _column_index(MESSAGE_COLUMNS)
_NODE = _column_index(NODE_COLUMNS)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _canonical_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


# What "identical" means on import: equal values (not equal text) in every column but the derived
# search text and, for nodes, the bookkeeping that moves without new content (revision, updatedAt,
# seed 004's access counters). Stored rows are read with these fields and compared as tuples.
_MESSAGE_COMPARED = (
    "session_id",
    "parent_id",
    "role",
    "content",
    "metadata",
    "created_at",
    "user__username",
    "channel",
    "agent_name",
)
_SUMMARY_COMPARED = (
    "session_id",
    "parent_summary_id",
    "from_message_id",
    "to_message_id",
    "summary",
    "current_goal",
    "constraints",
    "preferences",
    "decisions",
    "completed_work",
    "pending_work",
    "known_issues",
    "created_at",
)
_NODE_COMPARED = (
    "parent_id",
    "supersedes_id",
    "session_id",
    "user__username",
    "scope",
    "domain",
    "category_path",
    "type",
    "key",
    "value_json",
    "title",
    "content",
    "status",
    "confidence",
    "importance",
    "tags",
    "entities",
    "source_message_ids",
    "created_at",
    "expires_at",
    "kind",
    "item_key",
    "explicit_user_intent",
)
_NODE_STORED = ("workspace_id", "revision", "owner_ref", "updated_at")
_NODE_JSON_POSITIONS = [
    _NODE_COMPARED.index(c) for c in ("category_path", "value_json", "tags", "entities", "source_message_ids")
]
_AUDIT_COMPARED = (
    "event_type",
    "node_id",
    "session_id",
    "user__username",
    "actor",
    "reason",
    "payload",
    "created_at",
)


def _stored_key(values: Sequence[Any], json_positions: Sequence[int]) -> tuple[Any, ...]:
    key = list(values)
    for position in json_positions:
        key[position] = _canonical_json(key[position])
    return tuple(key)


# --------------------------------------------------------------------------- export


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


def _workspace_in_tenant(tenant: Tenant, workspace: Workspace | int) -> Workspace:
    workspace_id = workspace if isinstance(workspace, int) else workspace.pk
    found = Workspace.objects.filter(tenant=tenant, pk=workspace_id).first()
    if found is None:
        raise NotFound("No such workspace in this tenant.")
    return found


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


def _audit_events_of(tenant: Tenant, workspace: Workspace) -> Any:
    node_ids = MemoryNode.objects.filter(tenant=tenant, workspace=workspace).values("id")
    return MemoryAuditEvent.objects.filter(
        Q(workspace=workspace) | Q(workspace__isnull=True, node_id__in=node_ids), tenant=tenant
    )


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
    report = progress or (lambda stage, done, total: None)
    signer = _SearchTextSigner()
    writer = _SqliteWriter(partial, signer)
    try:
        with _consistent_snapshot(), tenant_context(tenant):
            ws = _workspace_in_tenant(tenant, workspace)
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

    def __init__(self, path: Path, signer: _SearchTextSigner) -> None:
        self.signer = signer
        self.error: BaseException | None = None
        self.tasks: queue.Queue[tuple[str, Sequence[Any]] | None] = queue.Queue(maxsize=8)
        self.thread = threading.Thread(target=self._run, args=(path,), name="ekko-sqlite-export", daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        try:
            out = sqlite3.connect(path, isolation_level=None)
            try:
                out.executescript(self._SETUP + _SCHEMA_SQL)
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
    writer.script(_TABLE_INDEX_SQL.get(table, ""))
    return written


def _export_rows(
    out: _SqliteWriter,
    tenant: Tenant,
    ws: Workspace,
    signer: _SearchTextSigner,
    include_embeddings: bool,
    chunk_size: int,
    report: Progress,
) -> dict[str, int]:
    messages = MemoryMessage.objects.filter(tenant=tenant, workspace=ws)
    summaries = MemorySummary.objects.filter(tenant=tenant, workspace=ws)
    nodes = MemoryNode.objects.filter(tenant=tenant, workspace=ws)
    events = _audit_events_of(tenant, ws)
    workspace_id = str(ws.pk)

    def message_rows() -> Iterator[list[Any]]:
        query = _export_values(messages.order_by("created_at", "message_id"), _MESSAGE_EXPORT)
        for values in query.iterator(chunk_size=chunk_size):
            row = [*values, None]
            content = row[_MSG["content"]]
            if not row[_MSG["search_text"]]:
                row[_MSG["search_text"]] = _segment(content)
            row[_MSG["search_text_sig"]] = signer.sign("message", (content,), row[_MSG["search_text"]])
            yield row

    def node_rows() -> Iterator[list[Any]]:
        query = _export_values(nodes.order_by("created_at", "id"), _NODE_EXPORT)
        title, content, tags, entities = (
            _NODE[c] - 1 for c in ("title", "content", "tags_json", "entities_json")
        )
        for values in query.iterator(chunk_size=chunk_size):
            search_text = values[-1]
            if not search_text:
                search_text = _node_search_text(
                    values[title], values[content], json.loads(values[tags]), json.loads(values[entities])
                )
            inputs = (values[title], values[content], values[tags], values[entities])
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
                for owner, model, blob in ((owner, model, _vector_blob(raw)) for owner, model, raw in query)
            )
            written = _write_chunks(
                out, table, columns, rows, chunk_size, stage, with_vectors.count(), report
            )
            if table == "memory_embeddings":
                counts["embeddings"] = written
    return counts


def _write_info(
    out: _SqliteWriter, tenant: Tenant, ws: Workspace, signer: _SearchTextSigner, counts: dict[str, int]
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
        "embedding_model": _server_embedding_model() or "",
        "embedding_dim": str(settings.EKKO_EMBEDDING_DIM),
        "search_text_segmenter": signer.segmenter,
        "counts": _json_text(counts),
    }
    out.rows("INSERT INTO memory_export_info (key, value) VALUES (?, ?)", sorted(info.items()))


def _server_embedding_model() -> str | None:
    """Return the model id this server embeds with, without loading the model."""
    from memory.search import embeddings

    built = getattr(embeddings, "_provider", None)
    if built is not None:
        return built.model_id
    provider = settings.EKKO_EMBEDDING_PROVIDER
    if provider == "local":
        return embeddings.LocalUSEProvider.model_id
    if provider == "openai":
        model = settings.EKKO_EMBEDDING_MODEL
        return f"openai:{model}" if model else None
    return None


# --------------------------------------------------------------------------- file inspection


@dataclass(frozen=True)
class FileInfo:
    """What `sqlite_file_inspect` learned about a file that passed every structural check."""

    version: int
    columns: dict[str, frozenset[str]]
    info: dict[str, str]

    def has(self, table: str, column: str | None = None) -> bool:
        if table not in self.columns:
            return False
        return column is None or column in self.columns[table]


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_header(path: Path) -> None:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise ImportError_(f"Cannot read the file: {exc.strerror or exc}.") from exc
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise ImportError_(
            "The file is not an SQLite database. Upload a file made by export (a .sqlite file)."
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    count_is_valid = header[24:28] == header[92:96] and page_count > 0
    if page_size < 512 or page_size & (page_size - 1):
        raise ImportError_("The SQLite header is damaged (impossible page size). Export the workspace again.")
    if count_is_valid and size < page_size * page_count:
        raise ImportError_(
            f"The SQLite file is truncated: it has {size} bytes but its header promises "
            f"{page_size * page_count}. Copy or upload the whole file again."
        )


def sqlite_file_inspect(path: str | os.PathLike[str]) -> FileInfo:
    """Check that `path` is an intact SQLite file in a known Ekko format version; touch no database.

    Raises ImportError_ naming the first problem: not SQLite, truncated or damaged, an unchecked
    write-ahead log beside it, no or unknown `memory_schema_migrations` version, a missing table
    or column.
    """
    path = Path(path)
    _check_header(path)
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ImportError_(
            f"{wal.name} holds writes not yet in the database. Close the agent using it, or run "
            f"`sqlite3 {path.name} 'PRAGMA wal_checkpoint(TRUNCATE)'`, then import again."
        )
    try:
        with closing_sqlite(path) as source:
            problems = [row[0] for row in source.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise ImportError_(
                    "The SQLite file is damaged ("
                    + "; ".join(problems)[:300]
                    + "). Export the workspace again."
                )
            tables = {
                name
                for (name,) in source.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                )
            }
            if "memory_schema_migrations" not in tables:
                raise ImportError_(
                    "The file has no memory_schema_migrations table, so its format version is unknown. "
                    "Only files in the Ekko local format can be imported (see docs/sqlite-format.md)."
                )
            version = source.execute("SELECT max(version) FROM memory_schema_migrations").fetchone()[0]
            if not isinstance(version, int) or version not in KNOWN_FORMAT_VERSIONS:
                known = ", ".join(map(str, sorted(KNOWN_FORMAT_VERSIONS)))
                raise ImportError_(
                    f"The file's format version is {version!r}; this server reads version {known}. "
                    "Export it again with a matching Ekko version."
                )
            columns: dict[str, frozenset[str]] = {}
            for table, expected in {**TABLES, **OPTIONAL_TABLES}.items():
                if table not in tables:
                    if table in TABLES:
                        raise ImportError_(
                            f"The file has no {table} table; it is not a complete Ekko export."
                        )
                    continue
                present = frozenset(row[1] for row in source.execute(f"PRAGMA table_info({table})"))
                missing = [
                    c.name
                    for c in expected
                    if (c.required or table in OPTIONAL_TABLES) and c.name not in present
                ]
                if missing:
                    raise ImportError_(
                        f"Table {table} lacks column(s) {', '.join(missing)}; it is not an "
                        f"Ekko local format version {version} file."
                    )
                columns[table] = present
            info: dict[str, str] = {}
            if "memory_export_info" in tables:
                info = {
                    str(k): str(v) for k, v in source.execute("SELECT key, value FROM memory_export_info")
                }
            return FileInfo(version=version, columns=columns, info=info)
    except sqlite3.DatabaseError as exc:
        raise ImportError_(f"The SQLite file cannot be read ({exc}). Export the workspace again.") from exc


@contextmanager
def closing_sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    # immutable=1: read without creating journal or -shm files beside an upload (WAL files are refused above).
    uri = f"file:{path.resolve().as_posix()}?mode=ro&immutable=1"
    source = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        yield source
    finally:
        source.close()


# --------------------------------------------------------------------------- import report


@dataclass
class TableCounts:
    messages: int = 0
    summaries: int = 0
    nodes: int = 0
    audit_events: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "summaries": self.summaries,
            "nodes": self.nodes,
            "auditEvents": self.audit_events,
        }


@dataclass
class ImportReport:
    """What an import did: counts per table, conflicts with reasons, vectors and warnings."""

    mode: str  # "same_workspace": ids kept; "copy": ids derived for the target workspace
    imported: TableCounts = field(default_factory=TableCounts)
    updated: TableCounts = field(default_factory=TableCounts)
    skipped: TableCounts = field(default_factory=TableCounts)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    conflict_count: int = 0
    vectors_reused: int = 0
    vectors_pending: int = 0
    warnings: list[str] = field(default_factory=list)

    def conflict(self, table: str, source_id: str, reason: str, detail: str) -> None:
        self.conflict_count += 1
        if len(self.conflicts) < MAX_CONFLICTS_LISTED:
            self.conflicts.append({"table": table, "id": source_id, "reason": reason, "detail": detail})

    def as_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported.as_json(),
            "updated": self.updated.as_json(),
            "skipped": self.skipped.as_json(),
            "conflicts": self.conflicts,
            "conflictCount": self.conflict_count,
            "mode": self.mode,
            "vectors": {"reused": self.vectors_reused, "pendingEmbedding": self.vectors_pending},
            "warnings": self.warnings,
        }

    def summary_line(self) -> str:
        i, u, s = self.imported, self.updated, self.skipped
        return (
            f"imported {i.messages} messages, {i.summaries} summaries, {i.nodes} nodes, "
            f"{i.audit_events} audit "
            f"events; updated {u.nodes} nodes; skipped {s.messages + s.summaries + s.nodes + s.audit_events} "
            f"identical rows; {self.conflict_count} conflicts; {self.vectors_reused} vectors reused, "
            f"{self.vectors_pending} to embed ({self.mode})"
        )


# --------------------------------------------------------------------------- import: row validation

_IMPORT_NAMESPACE = uuid.UUID("6f1d1b1e-8a4b-5c2e-9d57-6b0e0c7a4e11")
_MAX = {
    "message_id": 128,
    "session_id": 200,
    "title": 500,
    "key": 255,
    "kind": 64,
    "item_key": 128,
    "domain": 100,
    "category": 100,
    "tag": 100,
    "entity": 200,
    "actor": 200,
    "agent_name": 200,
    "category_path_text": 500,
}
_ROLES = frozenset(Role.values)
_CHANNELS = frozenset(Channel.values)
_SCOPES = frozenset(Scope.values)
_NODE_TYPES = frozenset(NodeType.values)
_STATUSES = frozenset(NodeStatus.values)
_EVENT_TYPES = frozenset(AuditEventType.values)


class _Row:
    """One file row (column → value) with validating accessors; errors name the table, row id and column."""

    __slots__ = ("table", "values", "id")

    def __init__(self, table: str, values: dict[str, Any]) -> None:
        self.table = table
        self.values = values
        value = values.get("id")
        self.id = value if isinstance(value, str) else repr(value)

    def fail(self, column: str, problem: str) -> ImportError_:
        return ImportError_(
            f"{self.table} row id={self.id[:80]!r}, column {column}: {problem}. Fix or "
            "re-export the file; nothing was imported."
        )

    def get(self, column: str, default: Any = None) -> Any:
        value = self.values.get(column)
        return default if value is None else value

    def text(
        self, column: str, *, required: bool = True, max_length: int | None = None, default: str | None = None
    ) -> str | None:
        value = self.values.get(column)
        if type(value) is str and "\x00" not in value and (max_length is None or len(value) <= max_length):
            return value
        return self._text_checked(column, value, required, max_length, default)

    def _text_checked(
        self, column: str, value: Any, required: bool, max_length: int | None, default: str | None
    ) -> str | None:
        if value is None:
            value = default
        if value is None:
            if required:
                raise self.fail(column, "a value is required")
            return None
        if type(value) is not str:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(column, f"expected text, found {type(value).__name__}")
            value = str(value)
        if "\x00" in value:
            raise self.fail(column, "contains a NUL character")
        if max_length is not None and len(value) > max_length:
            raise self.fail(column, f"longer than {max_length} characters")
        return value

    def choice(self, column: str, choices: frozenset[str], default: str | None = None) -> str:
        value = self.text(column, default=default)
        if value not in choices:
            raise self.fail(column, f"{value!r} is not one of {', '.join(sorted(choices))}")
        return value

    def json(self, column: str, *, default: Any = None) -> Any:
        value = self.values.get(column)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(column, "expected JSON text")
        try:
            parsed = [] if value == "[]" else _JSON_DECODER.decode(value)
        except ValueError as exc:
            raise self.fail(column, f"not valid JSON ({exc})") from exc
        # PostgreSQL's jsonb refuses NUL; only re-check the rare text that spells one.
        if "\\u0000" in value and "\x00" in _json_text(parsed):
            raise self.fail(column, "contains a NUL character")
        return parsed

    def json_strings(self, column: str, max_length: int) -> list[str]:
        value = self.json(column, default=[])
        if type(value) is not list:
            raise self.fail(column, "expected a JSON array of strings")
        for item in value:
            if type(item) is not str or len(item) > max_length:
                raise self.fail(column, f"expected an array of strings of at most {max_length} characters")
        return value

    def timestamp(self, column: str, *, required: bool = True) -> datetime | None:
        value = self.text(column, required=required)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise self.fail(column, f"{value!r} is not an ISO-8601 timestamp") from exc
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

    def number(self, column: str) -> float:
        value = self.values.get(column)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise self.fail(column, "expected a number from 0 to 1")
        return float(value)

    def integer(self, column: str, *, default: int = 0, low: int = 0, high: int = 2**31 - 1) -> int:
        value = self.get(column, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(column, f"expected an integer in {low}..{high}")
        return value

    def vector(self, state: _Import) -> tuple[str | None, str]:
        """Return (pgvector text, model) for a reusable vector, or (None, '') to embed it again."""
        blob, dim = self.values.get("vector_blob"), self.values.get("vector_dim")
        if blob is None:
            return None, ""
        if not isinstance(blob, bytes) or not isinstance(dim, int) or len(blob) != dim * 4:
            raise self.fail("vector", "the vector blob does not hold `dim` little-endian float32 values")
        if self.values.get("vector_model") != state.server_model or dim != settings.EKKO_EMBEDDING_DIM:
            return None, ""
        if not np.isfinite(np.frombuffer(blob, dtype="<f4")).all():
            raise self.fail("vector", "the vector holds NaN or infinite values")
        return _vector_text(blob), state.server_model


# --------------------------------------------------------------------------- import


@dataclass
class _Import:
    tenant: Tenant
    workspace: Workspace
    file: FileInfo
    source: sqlite3.Connection
    report: ImportReport
    progress: Progress
    actor: str
    chunk_size: int
    same_workspace: bool
    source_tag: str
    members: dict[str, int]
    server_model: str | None
    signer: _SearchTextSigner
    # File id → id in this workspace, for every node and summary of the file.
    node_map: dict[str, uuid.UUID] = field(default_factory=dict)
    summary_map: dict[str, uuid.UUID] = field(default_factory=dict)
    # Message ids taken by a different message in the target workspace → the id it was imported under.
    message_renames: dict[str, str] = field(default_factory=dict)
    # Nodes of the file that will not exist under their mapped id (conflict, duplicate, forgotten).
    nodes_not_imported: set[uuid.UUID] = field(default_factory=set)
    # Rows written without a usable vector, to embed after commit.
    nodes_to_embed: list[str] = field(default_factory=list)
    messages_to_embed: list[int] = field(default_factory=list)
    # A copy into a workspace with no rows at all: its derived ids cannot exist yet, so nothing is looked up,
    # foreign keys are checked statement by statement, and big inserts run while Python reads on.
    fresh: bool = False
    pending: _Background | None = None
    now: datetime = field(default_factory=timezone.now)

    def __post_init__(self) -> None:
        self.usernames = {pk: name for name, pk in self.members.items()}
        prefix = f"{self.tenant.pk}:{self.workspace.pk}:{self.source_tag}:"
        # uuid5(namespace, prefix + id), with the namespace and prefix hashed once.
        self._hashed_prefix = hashlib.sha1(_IMPORT_NAMESPACE.bytes + prefix.encode(), usedforsecurity=False)

    def target_uuid(self, source_id: str) -> uuid.UUID:
        """Map a file id to the id in this workspace: kept for a round trip, derived (stable) for a copy."""
        if self.same_workspace:
            try:
                return uuid.UUID(source_id)
            except ValueError:
                pass
        digest = self._hashed_prefix.copy()
        digest.update(source_id.encode())
        return uuid.UUID(bytes=digest.digest()[:16], version=5)

    @staticmethod
    def link_uuid(source_id: str | None, mapped: dict[str, uuid.UUID]) -> uuid.UUID | None:
        """Map a link: to the mapped row when the file has it, else to the same id if it is a UUID."""
        if source_id is None:
            return None
        target = mapped.get(source_id)
        if target is not None:
            return target
        try:
            # A link outside the file (a node of another workspace); cleared later if this tenant lacks it.
            return uuid.UUID(source_id)
        except ValueError:
            return None

    def user_id(self, row: _Row) -> int | None:
        username = row.text("user_id", required=False)
        return self.members.get(username) if username else None

    def username(self, user_id: int | None) -> str | None:
        return None if user_id is None else self.usernames.get(user_id)

    def message_id(self, source_id: str | None) -> str | None:
        return None if source_id is None else self.message_renames.get(source_id, source_id)


def workspace_import_sqlite(
    *,
    tenant: Tenant,
    workspace: Workspace | int,
    path: str | os.PathLike[str],
    actor: str = "system",
    chunk_size: int = CHUNK_SIZE,
    progress: Progress | None = None,
    embed_after_commit: bool = True,
) -> ImportReport:
    """Import an Ekko local-format file into `workspace` in one transaction and report what happened.

    The file is checked first (ImportError_, code "invalid", nothing written). Into the workspace it
    was exported from, ids are kept: identical rows are skipped, a node whose file revision is at
    least the stored one becomes a new revision (audit event "update", reason "import"), an older
    or clashing row is a conflict and the stored row wins. Into any other workspace the rows are a
    copy with ids derived from (workspace, file id), so importing the same file twice adds nothing.
    Rows left without a vector are queued for embedding after commit unless `embed_after_commit` is
    False (then the periodic `memory.embed_missing` sweep catches up).
    """
    file = sqlite_file_inspect(path)
    report_progress = progress or (lambda stage, done, total: None)
    with closing_sqlite(Path(path)) as source, tenant_context(tenant):
        ws = _workspace_in_tenant(tenant, workspace)
        same = file.info.get("tenant") == tenant.slug and file.info.get("workspace_id") == str(ws.pk)
        state = _Import(
            tenant=tenant,
            workspace=ws,
            file=file,
            source=source,
            report=ImportReport(mode="same_workspace" if same else "copy"),
            progress=report_progress,
            actor=actor,
            chunk_size=chunk_size,
            same_workspace=same,
            source_tag=f"{file.info.get('tenant', 'local')}/{file.info.get('workspace_id', '-')}",
            members=_members_named(tenant, _usernames_in_file(source, file)),
            server_model=_server_embedding_model(),
            signer=_SearchTextSigner(),
        )
        try:
            # A savepoint, so a failed statement leaves the tenant transaction usable for its cleanup.
            with transaction.atomic():
                _import_all(state)
        except (IntegrityError, DataError) as exc:
            raise ImportError_(
                f"The file's rows contradict each other or this workspace ({str(exc).splitlines()[0]}); "
                "nothing was imported."
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise ImportError_(f"The SQLite file cannot be read ({exc}); nothing was imported.") from exc
        if embed_after_commit:
            _queue_embedding(state)
    return state.report


class _Background:
    """One SQL statement running on the import's connection in a worker thread while Python reads the file.

    psycopg connections are thread-safe, and the importing thread touches the database again only after
    `wait()`; errors come back through Django's wrapper so they read like any other database error.
    """

    def __init__(
        self, sql: str, *, fetch: bool = False, on_done: Callable[[Any], None] | None = None
    ) -> None:
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

    def wait(self) -> Any:
        self.thread.join()
        if self.error is not None:
            with connection.wrap_database_errors:
                raise self.error
        if self.on_done is not None:
            self.on_done(self.result)
        return self.result


def _finish_pending(state: _Import) -> Any:
    pending, state.pending = state.pending, None
    return None if pending is None else pending.wait()


def _import_all(state: _Import) -> None:
    with connection.cursor() as cursor:
        # The app connection forces custom plans (for HNSW search), which makes PostgreSQL re-plan the
        # cached foreign-key check query for every inserted row: ~4x slower checks. Imports don't search.
        cursor.execute(
            "SELECT current_setting('plan_cache_mode'), set_config('plan_cache_mode', 'auto', true)"
        )
        previous_plan_cache_mode = cursor.fetchone()[0]
    _import_rows(state)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", [previous_plan_cache_mode])


def _import_rows(state: _Import) -> None:
    source = state.source
    _prepare_staging()
    state.fresh = not state.same_workspace and not any(
        model.objects.filter(tenant=state.tenant, workspace=state.workspace).exists()
        for model in (MemoryNode, MemoryMessage, MemorySummary, MemoryAuditEvent)
    )
    for table, mapping in (("memory_nodes", state.node_map), ("memory_summaries", state.summary_map)):
        mapping.update(
            (i, state.target_uuid(i))
            for (i,) in source.execute(f"SELECT id FROM {table}")
            if isinstance(i, str)
        )
    if state.fresh:
        # Nothing here can be updated and dangling links are cleared before inserting, so each INSERT can
        # check its own foreign keys (overlapping with the file reading) instead of one long check at the end.
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    try:
        _import_messages(state)
        _import_summaries(state)
        _import_nodes(state)
        _import_audit_events(state)
        _finish_pending(state)
    except BaseException:
        with suppress(BaseException):
            _finish_pending(state)  # the statement must end before the transaction rolls back
        raise
    with connection.cursor() as cursor:
        # Deferred foreign keys are checked here, inside the import, rather than at a caller's commit.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        _empty_staging(cursor)


def _usernames_in_file(source: sqlite3.Connection, file: FileInfo) -> set[str]:
    names: set[str] = set()
    for table in ("memory_messages", "memory_nodes", "memory_audit_events"):
        if file.has(table, "user_id"):
            rows = source.execute(f"SELECT DISTINCT user_id FROM {table}")
            names.update(name for (name,) in rows if isinstance(name, str))
    return names


def _members_named(tenant: Tenant, usernames: set[str]) -> dict[str, int]:
    """Return username → user id for the names that are members of `tenant` (others map to no user)."""
    if not usernames:
        return {}
    members = Membership.objects.filter(tenant=tenant, user__username__in=sorted(usernames))
    return dict(members.values_list("user__username", "user_id"))


def _queue_embedding(state: _Import) -> None:
    """After commit, queue embeddings for the rows imported without a usable vector, in batches."""
    from memory.pipeline import background, tasks

    tenant_id = state.tenant.pk
    nodes, messages = list(state.nodes_to_embed), list(state.messages_to_embed)

    def queue() -> None:
        for start in range(0, len(nodes), EMBED_BATCH):
            background.enqueue(tasks.embed_nodes, tenant_id, nodes[start : start + EMBED_BATCH])
        for start in range(0, len(messages), EMBED_BATCH):
            background.enqueue(tasks.embed_messages, tenant_id, messages[start : start + EMBED_BATCH])

    if nodes or messages:
        transaction.on_commit(queue)


# Staging tables: COPY cannot write into a table with row-level security, so rows are COPYed into
# temporary tables first and moved with INSERT … SELECT, which the tenant policy checks row by row.
_STAGING = {
    "memory_memorymessage": "ekko_import_messages",
    "memory_memorysummary": "ekko_import_summaries",
    "memory_memorynode": "ekko_import_nodes",
    "memory_memoryauditevent": "ekko_import_events",
}


def _prepare_staging() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('pg_temp.ekko_import_nodes') IS NOT NULL")
        if cursor.fetchone()[0]:
            # A second import in the same transaction reuses the tables (no new relations, no new locks).
            _empty_staging(cursor)
            return
        for table, staging in _STAGING.items():
            cursor.execute(f"CREATE TEMP TABLE {staging} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
            if table in ("memory_memorymessage", "memory_memorynode"):
                cursor.execute(f"ALTER TABLE {staging} DROP COLUMN search_vector")
        # Messages get their integer key from the real table's identity on insert.
        cursor.execute("ALTER TABLE ekko_import_messages ALTER COLUMN id DROP NOT NULL")
        for table, columns in _JSON_TEXT_COLUMNS.items():
            alterations = ", ".join(f"ALTER COLUMN {c} TYPE text USING NULL" for c in columns)
            cursor.execute(f"ALTER TABLE {_STAGING[table]} {alterations}")
        cursor.execute(
            "ALTER TABLE ekko_import_nodes ADD COLUMN import_action text NOT NULL DEFAULT 'insert'"
        )
        cursor.execute("ALTER TABLE ekko_import_nodes ADD COLUMN source_id text")
        cursor.execute("ALTER TABLE ekko_import_summaries ADD COLUMN source_id text")
        cursor.execute("CREATE INDEX ON ekko_import_nodes (id)")
        cursor.execute("CREATE INDEX ON ekko_import_summaries (id)")


def _empty_staging(cursor: Any) -> None:
    cursor.execute("TRUNCATE " + ", ".join(_STAGING.values()))


def _analyze(staging: str) -> None:
    # Temporary tables have no statistics until analysed; without them the joins below plan as nested loops.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL default_statistics_target = 10")  # a small sample is plenty for join plans
        cursor.execute(f"ANALYZE {staging}")
        cursor.execute("RESET default_statistics_target")


def _copy_rows(state: _Import, staging: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    _finish_pending(state)
    if not rows:
        return
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {staging} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


# JSON values are staged as the file's own (already validated) JSON text: PostgreSQL turns them into
# jsonb far faster than Python can re-encode them ("json" → jsonb). Arrays ("array") are staged as
# PostgreSQL array literals (see _pg_array), which the insert casts to varchar[].
_JSON_TEXT_COLUMNS: dict[str, dict[str, str]] = {
    "memory_memorymessage": {"metadata": "json"},
    "memory_memorysummary": {
        c: "json"
        for c in ("constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")
    },
    "memory_memorynode": {
        "category_path": "array",
        "tags": "array",
        "entities": "array",
        "source_message_ids": "array",
        "value_json": "json",
    },
    "memory_memoryauditevent": {"payload": "json"},
}


def _pg_array(items: list[str]) -> str:
    """Return a PostgreSQL array literal of strings (every element quoted, so no value is special)."""
    if not items:
        return "{}"
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "}"


def _pg_array_from_json(text: str | None) -> str:
    return "{}" if not text or text == "[]" else _pg_array(_JSON_DECODER.decode(text))


def _staged_value(table: str, column: str, alias: str = "s") -> str:
    kind = _JSON_TEXT_COLUMNS.get(table, {}).get(column)
    if kind == "array":
        return f"{alias}.{column}::varchar[]"
    if kind == "json":
        return f"{alias}.{column}::jsonb"
    return f"{alias}.{column}"


def _insert_staged_sql(
    staging: str, table: str, columns: Sequence[str], where: str = "TRUE", returning: str = ""
) -> str:
    names = ", ".join(columns)
    values = ", ".join(_staged_value(table, c) for c in columns)
    return f"INSERT INTO {table} ({names}) SELECT {values} FROM {staging} s WHERE {where} {returning}"


def _move_staged(
    staging: str, table: str, columns: Sequence[str], where: str = "TRUE", returning: str = ""
) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(_insert_staged_sql(staging, table, columns, where, returning))
        return cursor.fetchall() if returning else cursor.rowcount


def _read_chunks(state: _Import, table: str, sql: str, stage: str) -> Iterator[list[_Row]]:
    total = state.source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    state.progress(stage, 0, total)
    cursor = state.source.execute(sql)
    names = [d[0] for d in cursor.description]
    while True:
        rows = cursor.fetchmany(state.chunk_size)
        if not rows:
            return
        yield [_Row(table, dict(zip(names, row, strict=True))) for row in rows]
        state.progress(stage, len(rows), total)


def _with_vectors(state: _Import, table: str, vectors: str, key: str) -> str:
    if not state.file.has(vectors):
        return f"SELECT * FROM {table} ORDER BY rowid"
    return (
        f"SELECT t.*, v.model AS vector_model, v.dim AS vector_dim, v.vector AS vector_blob FROM {table} t "
        f"LEFT JOIN {vectors} v ON v.{key} = t.id ORDER BY t.rowid"
    )


def _split_verified(
    state: _Import, table: str, columns: tuple[Column, ...], rows: list[_Row]
) -> tuple[list[_Row], list[_Row]]:
    """Split a chunk into rows this server wrote unchanged (fast path) and rows to check field by field.

    Only a copy into an empty workspace takes the fast path: elsewhere every row is compared with what
    is stored anyway.
    """
    if not state.fresh or not state.file.has(table, "row_sig"):
        return [], rows
    verified, checked = [], []
    for row in rows:
        (verified if state.signer.row_verified(table, columns, row.values) else checked).append(row)
    return verified, checked


def _member(state: _Import, username: str | None) -> int | None:
    return state.members.get(username) if username else None


def _message_fast(state: _Import, row: _Row) -> tuple[Any, ...]:
    v = row.values
    vector, vector_model = row.vector(state)
    return (
        state.tenant.pk,
        state.workspace.pk,
        v["id"],
        v["session_id"],
        _member(state, v["user_id"]),
        v["parent_id"],
        v["role"],
        v["content"],
        v["channel"],
        v["agent_name"],
        v["metadata_json"],
        v["token_count"],
        v["created_at"],
        v["search_text"] or _segment(v["content"]),
        vector,
        vector_model,
    )


def _node_fast(state: _Import, row: _Row) -> tuple[Any, ...]:
    v = row.values
    user = _member(state, v["user_id"])
    search_text = v["search_text"] or _node_search_text(
        v["title"], v["content"], json.loads(v["tags_json"]), json.loads(v["entities_json"])
    )
    vector, vector_model = row.vector(state)
    return (
        state.node_map[v["id"]],
        state.tenant.pk,
        state.workspace.pk,
        user,
        v["session_id"],
        state.link_uuid(v["parent_id"], state.node_map),
        state.link_uuid(v["supersedes_id"], state.node_map),
        v["scope"],
        owner_ref(
            scope=v["scope"], workspace_id=state.workspace.pk, session_id=v["session_id"], user_id=user
        ),
        v["kind"],
        v["item_key"],
        v["key"],
        v["domain"],
        _pg_array_from_json(v["category_path_json"]),
        v["category_path_text"],
        v["type"],
        v["value_json"],
        v["title"],
        v["content"],
        v["status"],
        v["confidence"],
        v["importance"],
        _pg_array_from_json(v["tags_json"]),
        _pg_array_from_json(v["entities_json"]),
        _pg_array_from_json(v["source_message_ids_json"]),
        bool(v["explicit_user_intent"]),
        v["revision"],
        v["created_at"],
        v["updated_at"],
        v["expires_at"],
        v["access_count"],
        v["last_accessed_at"],
        search_text,
        vector,
        vector_model,
        "insert",
        v["id"],
    )


def _audit_fast(state: _Import, row: _Row) -> tuple[Any, ...] | None:
    v = row.values
    source_node = v["node_id"]
    node_id = (
        None if source_node is None else state.node_map.get(source_node) or state.target_uuid(source_node)
    )
    if node_id in state.nodes_not_imported:
        return None
    return (
        state.target_uuid(v["id"]),
        state.tenant.pk,
        state.workspace.pk,
        v["event_type"],
        node_id,
        v["session_id"],
        _member(state, v["user_id"]),
        v["actor"],
        v["reason"],
        v["payload_json"],
        v["created_at"],
    )


def _count_vectors(state: _Import, reused: int, pending: int) -> None:
    state.report.vectors_reused += reused
    state.report.vectors_pending += pending


# ----- messages

_MESSAGE_DB_COLUMNS = (
    "tenant_id",
    "workspace_id",
    "message_id",
    "session_id",
    "user_id",
    "parent_id",
    "role",
    "content",
    "channel",
    "agent_name",
    "metadata",
    "token_count",
    "created_at",
    "search_text",
    "embedding",
    "embedding_model",
)


@dataclass
class _Message:
    id: str
    session_id: str
    parent_id: str | None
    role: str
    content: str
    metadata: Any
    created_at: datetime
    user: int | None
    channel: str
    agent_name: str
    token_count: int
    search_text: str | None
    vector: str | None
    vector_model: str
    metadata_text: str | None

    def compare_key(self, state: _Import) -> tuple[Any, ...]:
        """Return the values compared with a stored message (_MESSAGE_COMPARED order)."""
        return (
            self.session_id,
            self.parent_id,
            self.role,
            self.content,
            _canonical_json(self.metadata),
            self.created_at,
            state.username(self.user),
            self.channel,
            self.agent_name,
        )

    def renamed(self) -> str:
        digest = hashlib.sha256(self.content.encode()).hexdigest()[:10]
        return f"{self.id[: _MAX['message_id'] - 18]}~import-{digest}"


def _import_messages(state: _Import) -> None:
    ws, tenant = state.workspace, state.tenant
    sql = _with_vectors(state, "memory_messages", "memory_message_embeddings", "message_id")
    for chunk in _read_chunks(state, "memory_messages", sql, "messages"):
        verified, chunk = _split_verified(state, "memory_messages", MESSAGE_COLUMNS, chunk)
        fast_rows = [_message_fast(state, row) for row in verified]
        incoming = [_message_in(state, row) for row in chunk]
        wanted = {m.id for m in incoming} | {m.renamed() for m in incoming}
        existing = (
            {}
            if state.fresh
            else {
                values[0]: _stored_key(values[1:], [4])
                for values in MemoryMessage.objects.filter(
                    tenant=tenant, workspace=ws, message_id__in=wanted
                ).values_list("message_id", *_MESSAGE_COMPARED)
            }
        )
        staged = fast_rows
        for message in incoming:
            stored = existing.get(message.id)
            if stored is not None and stored != message.compare_key(state):
                # Another message owns this id here: keep both, the file's under a derived id.
                renamed = message.renamed()
                state.message_renames[message.id] = renamed
                state.report.conflict(
                    "messages",
                    message.id,
                    "id_taken",
                    f"imported as {renamed}: a different message has this id here",
                )
                message.id = renamed
                stored = existing.get(renamed)
                if stored is not None and stored != message.compare_key(state):
                    continue
            if stored is not None:
                state.report.skipped.messages += 1
                continue
            staged.append(
                (
                    tenant.pk,
                    ws.pk,
                    message.id,
                    message.session_id,
                    message.user,
                    message.parent_id,
                    message.role,
                    message.content,
                    message.channel,
                    message.agent_name,
                    None if message.metadata is None else message.metadata_text,
                    message.token_count,
                    message.created_at,
                    message.search_text or _segment(message.content),
                    message.vector,
                    message.vector_model,
                )
            )
        _copy_rows(state, "ekko_import_messages", _MESSAGE_DB_COLUMNS, staged)
    with connection.cursor() as cursor:
        # Parent links to a message that was renamed follow it.
        for old, new in state.message_renames.items():
            cursor.execute("UPDATE ekko_import_messages SET parent_id = %s WHERE parent_id = %s", [new, old])

    def done(inserted: list[tuple[int, bool]]) -> None:
        state.messages_to_embed = [pk for pk, unembedded in inserted if unembedded]
        state.report.imported.messages += len(inserted)
        _count_vectors(state, len(inserted) - len(state.messages_to_embed), len(state.messages_to_embed))

    returning = "RETURNING id, embedding IS NULL"
    table, staging = "memory_memorymessage", "ekko_import_messages"
    if state.fresh:
        sql = _insert_staged_sql(staging, table, _MESSAGE_DB_COLUMNS, returning=returning)
        state.pending = _Background(sql, fetch=True, on_done=done)
    else:
        done(_move_staged(staging, table, _MESSAGE_DB_COLUMNS, returning=returning))


def _message_in(state: _Import, row: _Row) -> _Message:
    content = row.text("content")
    search_text = row.get("search_text")
    if not state.signer.verified("message", [content], search_text, row.get("search_text_sig")):
        search_text = None  # segmented only if the message is staged
    vector, vector_model = row.vector(state)
    return _Message(
        id=row.text("id", max_length=_MAX["message_id"]),
        session_id=row.text("session_id", max_length=_MAX["session_id"]),
        parent_id=row.text("parent_id", required=False, max_length=_MAX["message_id"]),
        role=row.choice("role", _ROLES),
        content=content,
        metadata=row.json("metadata_json"),
        created_at=row.timestamp("created_at"),
        user=state.user_id(row),
        channel=row.choice("channel", _CHANNELS, default=Channel.MAIN),
        agent_name=row.text("agent_name", default="", max_length=_MAX["agent_name"]),
        token_count=row.integer("token_count"),
        search_text=search_text,
        vector=vector,
        vector_model=vector_model,
        metadata_text=row.values.get("metadata_json"),
    )


# ----- summaries

_SUMMARY_DB_COLUMNS = (
    "id",
    "tenant_id",
    "workspace_id",
    "session_id",
    "parent_summary_id",
    "from_message_id",
    "to_message_id",
    "summary",
    "current_goal",
    "constraints",
    "preferences",
    "decisions",
    "completed_work",
    "pending_work",
    "known_issues",
    "created_at",
)
_SUMMARY_LISTS = ("constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")


def _import_summaries(state: _Import) -> None:
    ws, tenant = state.workspace, state.tenant
    sql = "SELECT * FROM memory_summaries ORDER BY rowid"
    for chunk in _read_chunks(state, "memory_summaries", sql, "summaries"):
        incoming = [_summary_in(state, row) for row in chunk]
        existing = (
            {}
            if state.fresh
            else {
                values[0]: (values[1], _stored_key(values[2:], range(6, 12)))
                for values in MemorySummary.objects.filter(
                    tenant=tenant, pk__in=[s["id"] for s in incoming]
                ).values_list("id", "workspace_id", *_SUMMARY_COMPARED)
            }
        )
        staged = []
        for summary in incoming:
            stored = existing.get(summary["id"])
            if stored is not None:
                if stored[0] == ws.pk and stored[1] == _summary_key(summary):
                    state.report.skipped.summaries += 1
                else:
                    state.report.conflict(
                        "summaries",
                        summary["source_id"],
                        "changed",
                        "a different summary with this id is stored; summaries are append-only",
                    )
                continue
            staged.append(
                (
                    summary["id"],
                    tenant.pk,
                    ws.pk,
                    summary["session_id"],
                    summary["parent"],
                    summary["from"],
                    summary["to"],
                    summary["summary"],
                    summary["current_goal"],
                    *summary["texts"],
                    summary["created_at"],
                    summary["source_id"],
                )
            )
        _copy_rows(state, "ekko_import_summaries", (*_SUMMARY_DB_COLUMNS, "source_id"), staged)
    _analyze("ekko_import_summaries")
    _settle_summary_chain(state)
    state.report.imported.summaries += _move_staged(
        "ekko_import_summaries", "memory_memorysummary", _SUMMARY_DB_COLUMNS
    )


def _summary_in(state: _Import, row: _Row) -> dict[str, Any]:
    source_id = row.text("id")
    return {
        "id": state.summary_map.get(source_id) or state.target_uuid(source_id),
        "source_id": source_id,
        "session_id": row.text("session_id", max_length=_MAX["session_id"]),
        "parent": state.link_uuid(row.text("parent_summary_id", required=False), state.summary_map),
        "from": state.message_id(row.text("from_message_id", max_length=_MAX["message_id"])),
        "to": state.message_id(row.text("to_message_id", max_length=_MAX["message_id"])),
        "summary": row.text("summary"),
        "current_goal": row.text("current_goal", required=False),
        "created_at": row.timestamp("created_at"),
        **{name: row.json_strings(f"{name}_json", 2**31) for name in _SUMMARY_LISTS},
        "texts": [row.values.get(f"{name}_json") or "[]" for name in _SUMMARY_LISTS],
    }


def _summary_key(summary: dict[str, Any]) -> tuple[Any, ...]:
    return (
        summary["session_id"],
        summary["parent"],
        summary["from"],
        summary["to"],
        summary["summary"],
        summary["current_goal"],
        *(_canonical_json(summary[name]) for name in _SUMMARY_LISTS),
        summary["created_at"],
    )


def _settle_summary_chain(state: _Import) -> None:
    """Drop staged summaries that would fork a session's chain or hang from a missing parent (reported)."""
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
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
                [state.tenant.pk, state.tenant.pk, state.workspace.pk],
            )
            dropped = cursor.fetchall()
            if not dropped:
                return
            for source_id, reason in dropped:
                detail = (
                    "its parent summary is neither in the file nor stored"
                    if reason == "missing_parent"
                    else "the stored chain already continues differently from this summary's parent"
                )
                state.report.conflict("summaries", source_id, reason, detail)
            cursor.execute(
                "DELETE FROM ekko_import_summaries WHERE source_id = ANY(%s)", [[s for s, _ in dropped]]
            )


# ----- nodes

_NODE_DB_COLUMNS = (
    "id",
    "tenant_id",
    "workspace_id",
    "user_id",
    "session_id",
    "parent_id",
    "supersedes_id",
    "scope",
    "owner_ref",
    "kind",
    "item_key",
    "key",
    "domain",
    "category_path",
    "category_path_text",
    "type",
    "value_json",
    "title",
    "content",
    "status",
    "confidence",
    "importance",
    "tags",
    "entities",
    "source_message_ids",
    "explicit_user_intent",
    "revision",
    "created_at",
    "updated_at",
    "expires_at",
    "access_count",
    "last_accessed_at",
    "search_text",
    "embedding",
    "embedding_model",
)
_NODE_UPDATED_COLUMNS = tuple(
    c
    for c in _NODE_DB_COLUMNS
    if c
    not in {
        "id",
        "tenant_id",
        "workspace_id",
        "created_at",
        "access_count",
        "last_accessed_at",
        "embedding",
        "embedding_model",
    }
)


@dataclass
class _Node:
    id: uuid.UUID
    source_id: str
    parent: uuid.UUID | None
    supersedes: uuid.UUID | None
    session_id: str | None
    user: int | None
    scope: str
    domain: str
    category_path: list[str]
    type: str
    key: str
    value_json: Any
    title: str
    content: str
    status: str
    confidence: float
    importance: float
    tags: list[str]
    entities: list[str]
    source_message_ids: list[str]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    revision: int
    kind: str
    item_key: str | None
    explicit_user_intent: bool
    access_count: int
    last_accessed_at: datetime | None
    search_text: str | None
    vector: str | None
    vector_model: str
    owner_ref: str
    # The file's JSON texts of category_path, tags, entities, source_message_ids and value_json, staged as is.
    texts: list[str]

    def compare_key(self, state: _Import) -> tuple[Any, ...]:
        """Return the values compared with a stored node (_NODE_COMPARED order)."""
        return (
            self.parent,
            self.supersedes,
            self.session_id,
            state.username(self.user),
            self.scope,
            self.domain,
            _canonical_json(self.category_path),
            self.type,
            self.key,
            _canonical_json(self.value_json),
            self.title,
            self.content,
            self.status,
            self.confidence,
            self.importance,
            _canonical_json(self.tags),
            _canonical_json(self.entities),
            _canonical_json(self.source_message_ids),
            self.created_at,
            self.expires_at,
            self.kind,
            self.item_key,
            self.explicit_user_intent,
        )

    def db_row(self, state: _Import, action: str) -> tuple[Any, ...]:
        search_text = self.search_text or _node_search_text(
            self.title, self.content, self.tags, self.entities
        )
        return (
            self.id,
            state.tenant.pk,
            state.workspace.pk,
            self.user,
            self.session_id,
            self.parent,
            self.supersedes,
            self.scope,
            self.owner_ref,
            self.kind,
            self.item_key,
            self.key,
            self.domain,
            self.texts[0],
            "/".join(self.category_path),
            self.type,
            None if self.value_json is None else self.texts[4],
            self.title,
            self.content,
            self.status,
            self.confidence,
            self.importance,
            self.texts[1],
            self.texts[2],
            self.texts[3],
            self.explicit_user_intent,
            self.revision,
            self.created_at,
            self.updated_at,
            self.expires_at,
            self.access_count,
            self.last_accessed_at,
            search_text,
            self.vector,
            self.vector_model,
            action,
            self.source_id,
        )


def _import_nodes(state: _Import) -> None:
    ws, tenant = state.workspace, state.tenant
    sql = _with_vectors(state, "memory_nodes", "memory_embeddings", "node_id")
    previous_versions: dict[uuid.UUID, dict[str, Any]] = {}
    for chunk in _read_chunks(state, "memory_nodes", sql, "nodes"):
        verified, chunk = _split_verified(state, "memory_nodes", NODE_COLUMNS, chunk)
        fast_rows = [_node_fast(state, row) for row in verified]
        incoming = [_node_in(state, row) for row in chunk]
        ids = [n.id for n in incoming]
        existing = (
            {}
            if state.fresh
            else {
                values[0]: values[1:]
                for values in MemoryNode.objects.filter(tenant=tenant, pk__in=ids).values_list(
                    "id", *_NODE_STORED, *_NODE_COMPARED
                )
            }
        )
        missing = [i for i in ids if i not in existing]
        forgotten = (
            set()
            if state.fresh
            else set(
                MemoryAuditEvent.objects.filter(tenant=tenant, node_id__in=missing).values_list(
                    "node_id", flat=True
                )
            )
        )
        staged = fast_rows
        for node in incoming:
            if node.id in forgotten:
                state.nodes_not_imported.add(node.id)
                state.report.conflict(
                    "nodes",
                    node.source_id,
                    "forgotten",
                    "this memory was hard-forgotten here; it is not brought back",
                )
                continue
            stored = existing.get(node.id)
            if stored is None:
                staged.append(node.db_row(state, "insert"))
                continue
            stored_workspace, stored_revision, stored_owner_ref, stored_updated_at = stored[:4]
            stored_key = _stored_key(stored[4:], _NODE_JSON_POSITIONS)
            if stored_workspace != ws.pk:
                state.nodes_not_imported.add(node.id)
                state.report.conflict(
                    "nodes",
                    node.source_id,
                    "other_workspace",
                    "a node with this id belongs to another workspace",
                )
                continue
            if stored_key == node.compare_key(state):
                state.report.skipped.nodes += 1
                continue
            if node.revision < stored_revision:
                state.nodes_not_imported.add(node.id)
                state.report.conflict(
                    "nodes",
                    node.source_id,
                    "stale_revision",
                    f"the file has revision {node.revision}, the stored node is at "
                    f"{stored_revision} with different content; the stored node is kept",
                )
                continue
            node.revision = max(stored_revision + 1, node.revision)
            previous = dict(zip(_NODE_COMPARED, stored[4:], strict=True))
            if (previous["scope"], previous["session_id"], previous["user__username"]) == (
                node.scope,
                node.session_id,
                state.username(node.user),
            ):
                node.owner_ref = stored_owner_ref
            previous_versions[node.id] = {
                "fromRevision": stored_revision,
                "toRevision": node.revision,
                "previous": _node_json(previous, stored_updated_at),
            }
            staged.append(node.db_row(state, "update"))
        _copy_rows(state, "ekko_import_nodes", (*_NODE_DB_COLUMNS, "import_action", "source_id"), staged)
    _analyze("ekko_import_nodes")
    _settle_node_slots(state)
    _apply_staged_nodes(state, previous_versions)


def _node_in(state: _Import, row: _Row) -> _Node:
    source_id = row.text("id")
    scope = row.choice("scope", _SCOPES)
    title = row.text("title", max_length=_MAX["title"])
    content = row.text("content")
    tags = row.json_strings("tags_json", _MAX["tag"])
    entities = row.json_strings("entities_json", _MAX["entity"])
    category_path = row.json_strings("category_path_json", _MAX["category"])
    if sum(map(len, category_path)) + len(category_path) > _MAX["category_path_text"]:
        raise row.fail("category_path_json", "the joined path is longer than 500 characters")
    key = row.text("key", required=False, max_length=_MAX["key"]) or f"unkeyed:{source_id}"[: _MAX["key"]]
    session_id = row.text("session_id", required=False, max_length=_MAX["session_id"])
    user = state.user_id(row)
    search_text = row.get("search_text")
    # Signed over the file's own JSON texts, so an unchanged row verifies without re-encoding anything.
    inputs = (title, content, row.values.get("tags_json") or "", row.values.get("entities_json") or "")
    if not state.signer.verified("node", inputs, search_text, row.get("search_text_sig")):
        search_text = None  # segmented only if the node is staged
    vector, vector_model = row.vector(state)
    renames = state.message_renames
    sources = row.json_strings("source_message_ids_json", _MAX["message_id"])
    if renames and any(i in renames for i in sources):
        sources = [renames.get(i, i) for i in sources]
    texts = [
        _pg_array(category_path),
        _pg_array(tags),
        _pg_array(entities),
        _pg_array(sources),
        row.values.get("value_json") or "null",
    ]
    return _Node(
        id=state.node_map.get(source_id) or state.target_uuid(source_id),
        source_id=source_id,
        parent=state.link_uuid(row.text("parent_id", required=False), state.node_map),
        supersedes=state.link_uuid(row.text("supersedes_id", required=False), state.node_map),
        session_id=session_id,
        user=user,
        scope=scope,
        domain=row.text("domain", max_length=_MAX["domain"]),
        category_path=category_path,
        type=row.choice("type", _NODE_TYPES),
        key=key,
        value_json=row.json("value_json"),
        title=title,
        content=content,
        status=row.choice("status", _STATUSES),
        confidence=row.number("confidence"),
        importance=row.number("importance"),
        tags=tags,
        entities=entities,
        source_message_ids=sources,
        texts=texts,
        created_at=row.timestamp("created_at"),
        updated_at=row.timestamp("updated_at"),
        expires_at=row.timestamp("expires_at", required=False),
        revision=row.integer("revision", default=1, low=1),
        kind=row.text("kind", required=False, max_length=_MAX["kind"])
        or key.split(":", 1)[0][: _MAX["kind"]],
        item_key=row.text("item_key", required=False, max_length=_MAX["item_key"]),
        explicit_user_intent=bool(row.integer("explicit_user_intent", high=1)),
        access_count=row.integer("access_count"),
        last_accessed_at=row.timestamp("last_accessed_at", required=False),
        search_text=search_text,
        vector=vector,
        vector_model=vector_model,
        owner_ref=owner_ref(
            scope=scope, workspace_id=state.workspace.pk, session_id=session_id, user_id=user
        ),
    )


def _node_json(previous: dict[str, Any], updated_at: datetime) -> dict[str, Any]:
    """Return the API-shaped previous values of a node, kept in the import's update audit event."""
    return {
        "title": previous["title"],
        "content": previous["content"],
        "status": previous["status"],
        "valueJson": previous["value_json"],
        "scope": previous["scope"],
        "key": previous["key"],
        "confidence": previous["confidence"],
        "importance": previous["importance"],
        "tags": previous["tags"],
        "entities": previous["entities"],
        "sourceMessageIds": previous["source_message_ids"],
        "expiresAt": iso_utc(previous["expires_at"]),
        "supersedesId": _str_or_none(previous["supersedes_id"]),
        "parentId": _str_or_none(previous["parent_id"]),
        "updatedAt": iso_utc(updated_at),
    }


def _settle_node_slots(state: _Import) -> None:
    """Keep one active node per slot: file nodes whose slot another active node holds are not imported.

    An identical card already active in the slot (a user's preference copied along with its
    workspace) counts as skipped and links to it follow the stored card; a different one is a
    conflict and the stored card wins. Links to nodes that end up nowhere are cleared.
    """
    tenant_id = state.tenant.pk
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT scope, owner_ref, key, array_agg(source_id ORDER BY source_id)
            FROM ekko_import_nodes WHERE status = 'active' GROUP BY scope, owner_ref, key HAVING count(*) > 1
            LIMIT 5
            """
        )
        clashes = cursor.fetchall()
        if clashes:
            described = "; ".join(
                f"{scope} slot {key!r}: ids {', '.join(ids[:3])}" for scope, _, key, ids in clashes
            )
            raise ImportError_(
                f"The file has more than one active node in the same slot ({described}). "
                "Mark all but the newest superseded and import again; nothing was imported."
            )
        cursor.execute(
            """
            SELECT s.id, s.source_id, s.import_action, n.id,
                   s.title = n.title AND s.content = n.content
                   AND s.value_json::jsonb IS NOT DISTINCT FROM n.value_json
            FROM ekko_import_nodes s
            JOIN memory_memorynode n ON n.tenant_id = %s AND n.status = 'active' AND n.scope = s.scope
                 AND n.owner_ref = s.owner_ref AND n.key = s.key AND n.id <> s.id
            WHERE s.status = 'active'
              AND NOT EXISTS (SELECT 1 FROM ekko_import_nodes u
                              WHERE u.id = n.id AND (u.status <> 'active' OR u.scope <> n.scope
                                                     OR u.owner_ref <> n.owner_ref OR u.key <> n.key))
            """,
            [tenant_id],
        )
        duplicates: list[tuple[uuid.UUID, uuid.UUID]] = []
        for staged_id, source_id, action, holder_id, same_card in cursor.fetchall():
            state.nodes_not_imported.add(staged_id)
            if same_card and action == "insert":
                state.report.skipped.nodes += 1
                duplicates.append((staged_id, holder_id))
            else:
                state.report.conflict(
                    "nodes",
                    source_id,
                    "slot_taken",
                    f"node {holder_id} is already active in this slot with other content",
                )
        if state.nodes_not_imported:
            cursor.execute(
                "DELETE FROM ekko_import_nodes WHERE id = ANY(%s)", [list(state.nodes_not_imported)]
            )
        for staged_id, holder_id in duplicates:
            for link in ("parent_id", "supersedes_id"):
                cursor.execute(
                    f"UPDATE ekko_import_nodes SET {link} = %s WHERE {link} = %s", [holder_id, staged_id]
                )
        dropped = 0
        for link in ("parent_id", "supersedes_id"):
            cursor.execute(
                f"""
                UPDATE ekko_import_nodes s SET {link} = NULL
                WHERE {link} IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM ekko_import_nodes x WHERE x.id = s.{link})
                  AND NOT EXISTS (SELECT 1 FROM memory_memorynode n
                                  WHERE n.id = s.{link} AND n.tenant_id = %s)
                """,
                [tenant_id],
            )
            dropped += cursor.rowcount
        if dropped:
            state.report.warnings.append(
                f"{dropped} link(s) (parentId/supersedesId) pointed at nodes that are neither in the file "
                "nor in "
                "this tenant; they were cleared."
            )


def _apply_staged_nodes(state: _Import, previous_versions: dict[uuid.UUID, dict[str, Any]]) -> None:
    if state.fresh:
        # Only inserts: count vectors from the staged rows and let the insert run while the events are read.
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, embedding IS NOT NULL FROM ekko_import_nodes")
            staged = cursor.fetchall()
        state.nodes_to_embed = [str(node_id) for node_id, has_vector in staged if not has_vector]
        _count_vectors(state, len(staged) - len(state.nodes_to_embed), len(state.nodes_to_embed))

        def done(count: int) -> None:
            state.report.imported.nodes += count

        sql = _insert_staged_sql("ekko_import_nodes", "memory_memorynode", _NODE_DB_COLUMNS)
        state.pending = _Background(sql, on_done=done)
        return
    assignments = ", ".join(f"{c} = {_staged_value('memory_memorynode', c)}" for c in _NODE_UPDATED_COLUMNS)
    with connection.cursor() as cursor:
        # Nodes leaving a slot are updated before nodes entering one, so the one-active-per-slot index holds.
        for status_test in ("s.status <> 'active'", "s.status = 'active'"):
            cursor.execute(
                f"""
                UPDATE memory_memorynode n SET {assignments},
                       embedding = CASE WHEN s.embedding IS NOT NULL THEN s.embedding
                                        WHEN s.title = n.title AND s.content = n.content THEN n.embedding END,
                       embedding_model = CASE WHEN s.embedding IS NOT NULL THEN s.embedding_model
                                              WHEN s.title = n.title AND s.content = n.content
                                              THEN n.embedding_model ELSE '' END
                FROM ekko_import_nodes s
                WHERE s.import_action = 'update' AND n.id = s.id AND n.tenant_id = %s AND {status_test}
                """,
                [state.tenant.pk],
            )
            state.report.updated.nodes += cursor.rowcount
    # One statement: links between new rows are fine (foreign keys are checked at its end at the earliest)
    # and no two of them hold the same active slot (settled above).
    state.report.imported.nodes += _move_staged(
        "ekko_import_nodes", "memory_memorynode", _NODE_DB_COLUMNS, "import_action = 'insert'"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.id, s.embedding IS NOT NULL, n.embedding IS NULL
            FROM ekko_import_nodes s JOIN memory_memorynode n ON n.id = s.id AND n.tenant_id = %s
            """,
            [state.tenant.pk],
        )
        written = cursor.fetchall()
        state.nodes_to_embed = [str(node_id) for node_id, _, unembedded in written if unembedded]
        _count_vectors(state, sum(reused for _, reused, _ in written), len(state.nodes_to_embed))
        cursor.execute(
            "SELECT id, session_id, user_id FROM ekko_import_nodes WHERE import_action = 'update' "
            "ORDER BY source_id"
        )
        updated = cursor.fetchall()
    MemoryAuditEvent.objects.bulk_create(
        [
            MemoryAuditEvent(
                tenant=state.tenant,
                workspace=state.workspace,
                event_type=AuditEventType.UPDATE,
                node_id=node_id,
                session_id=session_id,
                user_id=user_id,
                actor=state.actor,
                reason="import",
                payload={"source": "sqlite_import", **previous_versions[node_id]},
                created_at=state.now,
            )
            for node_id, session_id, user_id in updated
        ],
        batch_size=1000,
    )


# ----- audit events

_AUDIT_DB_COLUMNS = (
    "id",
    "tenant_id",
    "workspace_id",
    "event_type",
    "node_id",
    "session_id",
    "user_id",
    "actor",
    "reason",
    "payload",
    "created_at",
)


def _import_audit_events(state: _Import) -> None:
    ws, tenant = state.workspace, state.tenant
    sql = "SELECT * FROM memory_audit_events ORDER BY rowid"
    held: list[tuple[Any, ...]] = []
    for chunk in _read_chunks(state, "memory_audit_events", sql, "audit events"):
        verified, chunk = _split_verified(state, "memory_audit_events", AUDIT_COLUMNS, chunk)
        fast_rows = [event for event in (_audit_fast(state, row) for row in verified) if event is not None]
        state.report.skipped.audit_events += len(verified) - len(fast_rows)
        incoming = [_audit_in(state, row) for row in chunk]
        ids = [e["id"] for e in incoming]
        existing = (
            {}
            if state.fresh
            else {
                values[0]: _stored_key(values[1:], [6])
                for values in _audit_events_of(tenant, ws)
                .filter(pk__in=ids)
                .values_list("id", *_AUDIT_COMPARED)
            }
        )
        elsewhere = (
            set()
            if state.fresh
            else set(
                MemoryAuditEvent.objects.filter(tenant=tenant, pk__in=ids)
                .exclude(pk__in=list(existing))
                .values_list("id", flat=True)
            )
        )
        staged = fast_rows
        for event in incoming:
            stored = existing.get(event["id"])
            if stored is not None or event["id"] in elsewhere:
                if stored == _audit_key(state, event):
                    state.report.skipped.audit_events += 1
                else:
                    state.report.conflict(
                        "auditEvents",
                        event["source_id"],
                        "changed",
                        "a different audit event with this id is stored; events are append-only",
                    )
                continue
            if event["node_id"] in state.nodes_not_imported:
                # History of a card that was not imported (conflict, duplicate or forgotten) stays out.
                state.report.skipped.audit_events += 1
                continue
            staged.append(
                (
                    event["id"],
                    tenant.pk,
                    ws.pk,
                    event["event_type"],
                    event["node_id"],
                    event["session_id"],
                    event["user"],
                    event["actor"],
                    event["reason"],
                    None if event["payload"] is None else event["payload_text"],
                    event["created_at"],
                )
            )
        if state.fresh:
            held.extend(staged)  # the nodes' insert may still be running; staged once it is done
        else:
            _copy_rows(state, "ekko_import_events", _AUDIT_DB_COLUMNS, staged)
        state.report.imported.audit_events += len(staged)
    _copy_rows(state, "ekko_import_events", _AUDIT_DB_COLUMNS, held)
    _move_staged("ekko_import_events", "memory_memoryauditevent", _AUDIT_DB_COLUMNS)


def _audit_in(state: _Import, row: _Row) -> dict[str, Any]:
    source_id = row.text("id")
    source_node = row.text("node_id", required=False)
    return {
        "id": state.target_uuid(source_id),
        "source_id": source_id,
        "event_type": row.choice("event_type", _EVENT_TYPES),
        # Events outlive their nodes, so an event's node id is mapped even when the node is not in the file.
        "node_id": None
        if source_node is None
        else state.node_map.get(source_node) or state.target_uuid(source_node),
        "session_id": row.text("session_id", required=False, max_length=_MAX["session_id"]),
        "user": state.user_id(row),
        "actor": row.text("actor", max_length=_MAX["actor"]),
        "reason": row.text("reason"),
        "payload": row.json("payload_json"),
        "payload_text": row.values.get("payload_json"),
        "created_at": row.timestamp("created_at"),
    }


def _audit_key(state: _Import, event: dict[str, Any]) -> tuple[Any, ...]:
    return (
        event["event_type"],
        event["node_id"],
        event["session_id"],
        state.username(event["user"]),
        event["actor"],
        event["reason"],
        _canonical_json(event["payload"]),
        event["created_at"],
    )
