"""The Ekko local SQLite format, version 1 (docs/sqlite-format.md): layout, value codecs and inspection.

What a file holds — seed 000's tables with seed 003's `key` and `revision`, the Ekko columns, the
vector tables and the `memory_nodes_fts` FTS5 table — is declared here once, as `Column` tuples the
export writes and the import checks. The value codecs turn database values into file text and back
(UTC timestamps, JSON text, little-endian float32 vectors, PostgreSQL array literals for staging).
`sqlite_file_inspect` checks a file's shape (SQLite header, integrity, version, tables, columns)
without touching the database. Pure: no ORM, no writes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from memory.transfer.report import ImportError_

__all__ = [
    "APPLICATION_ID",
    "AUDIT_COLUMNS",
    "EMBEDDING_COLUMNS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KNOWN_FORMAT_VERSIONS",
    "MESSAGE_COLUMNS",
    "MESSAGE_EMBEDDING_COLUMNS",
    "NODE_COLUMNS",
    "OPTIONAL_TABLES",
    "SCHEMA_SQL",
    "SUMMARY_COLUMNS",
    "TABLES",
    "TABLE_INDEX_SQL",
    "Column",
    "FileInfo",
    "closing_sqlite",
    "iso_utc",
    "server_embedding_model",
    "sqlite_file_inspect",
]

FORMAT_VERSION = 1
KNOWN_FORMAT_VERSIONS = frozenset({1})
FORMAT_NAME = "ekko-local"
# PRAGMA application_id of files we write ("Ekko"); files from local agents may carry 0.
APPLICATION_ID = 0x456B6B6F

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
    # Older files have no review state: their cards import as reviewed (docs/sqlite-format.md).
    Column("review_state", "text not null default 'reviewed'", False),
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
    # The event's place in the source tenant's audit chain (docs/erasure.md); an import checks the
    # digests and chains the events anew in its own tenant.
    Column("sequence", "integer", False),
    Column("previous_digest", "text", False),
    Column("content_salt", "text", False),
    Column("content_digest", "text", False),
    Column("digest", "text", False),
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

SCHEMA_SQL = "\n".join(
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

TABLE_INDEX_SQL: dict[str, str] = {
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
TABLE_INDEX_SQL["memory_nodes"] += "\n" + _FTS_SQL


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


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every import: json.loads(..., parse_constant=...) would build a new one per call.
JSON_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def vector_blob(vector_send: bytes | memoryview) -> bytes:
    # pgvector's binary form: int16 dim, int16 unused, then big-endian float4s; the file uses little-endian.
    return np.frombuffer(bytes(vector_send), dtype=">f4", offset=4).astype("<f4").tobytes()


def vector_text(blob: bytes) -> str:
    return "[" + ",".join(map(repr, np.frombuffer(blob, dtype="<f4").tolist())) + "]"


def pg_array(items: list[str]) -> str:
    """Return a PostgreSQL array literal of strings (every element quoted, so no value is special)."""
    if not items:
        return "{}"
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "}"


def pg_array_from_json(text: str | None) -> str:
    return "{}" if not text or text == "[]" else pg_array(JSON_DECODER.decode(text))


def str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def canonical_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def server_embedding_model() -> str | None:
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

