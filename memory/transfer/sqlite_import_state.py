"""What one SQLite import knows while it runs, and the helpers every table's import shares.

`ImportState` holds the tenant, the target workspace, the open file, the report, the id maps
(file id → id here: kept for a round trip into the workspace the file came from, derived and
stable for a copy) and the staging tables of memory.services.imports. The helpers read a table in
chunks, join its vectors, and split off the rows this server signed (the fast path).
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from memory.rules.kinds import KindSpec
from memory.selectors import tenant_kinds
from memory.services.imports import ImportStaging
from memory.transfer.report import ImportReport, Progress
from memory.transfer.signatures import SearchTextSigner
from memory.transfer.sqlite_format import Column, FileInfo, canonical_json
from memory.transfer.sqlite_rows import FileRow
from tenants.models import Tenant, Workspace

__all__ = ["ImportState", "read_chunks", "split_verified", "stored_key", "with_vectors"]

_IMPORT_NAMESPACE = uuid.UUID("6f1d1b1e-8a4b-5c2e-9d57-6b0e0c7a4e11")


@dataclass
class ImportState:
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
    signer: SearchTextSigner
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
    staging: ImportStaging | None = None
    now: datetime = field(default_factory=timezone.now)

    def __post_init__(self) -> None:
        self._tenant_kinds: dict[str, KindSpec] | None = None
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

    def username(self, user_id: int | None) -> str | None:
        return None if user_id is None else self.usernames.get(user_id)

    def message_id(self, source_id: str | None) -> str | None:
        return None if source_id is None else self.message_renames.get(source_id, source_id)


    def event_node_id(self, source_node: str | None) -> uuid.UUID | None:
        """Map an event's node id as its node's is mapped, also when the node is not in the file."""
        if source_node is None:
            return None
        return self.node_map.get(source_node) or self.target_uuid(source_node)

    def tenant_kinds(self) -> dict[str, KindSpec]:
        """Return the tenant's own kinds (read once, when a row first needs them)."""
        if self._tenant_kinds is None:
            self._tenant_kinds = tenant_kinds(tenant=self.tenant)
        return self._tenant_kinds

    def member(self, username: str | None) -> int | None:
        """Return the user id of a username the file names, if they are a member of the tenant."""
        return self.members.get(username) if username else None

    def count_vectors(self, reused: int, pending: int) -> None:
        self.report.vectors_reused += reused
        self.report.vectors_pending += pending


def read_chunks(state: ImportState, table: str, sql: str, stage: str) -> Iterator[list[FileRow]]:
    total = state.source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    state.progress(stage, 0, total)
    cursor = state.source.execute(sql)
    names = [d[0] for d in cursor.description]
    while True:
        rows = cursor.fetchmany(state.chunk_size)
        if not rows:
            return
        yield [FileRow(table, dict(zip(names, row, strict=True))) for row in rows]
        state.progress(stage, len(rows), total)


def with_vectors(state: ImportState, table: str, vectors: str, key: str) -> str:
    if not state.file.has(vectors):
        return f"SELECT * FROM {table} ORDER BY rowid"
    return (
        f"SELECT t.*, v.model AS vector_model, v.dim AS vector_dim, v.vector AS vector_blob FROM {table} t "
        f"LEFT JOIN {vectors} v ON v.{key} = t.id ORDER BY t.rowid"
    )


def split_verified(
    state: ImportState, table: str, columns: tuple[Column, ...], rows: list[FileRow]
) -> tuple[list[FileRow], list[FileRow]]:
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



def stored_key(values: Sequence[Any], json_positions: Sequence[int]) -> tuple[Any, ...]:
    """Return stored values as compared with a file row: JSON values in their canonical text."""
    key = list(values)
    for position in json_positions:
        key[position] = canonical_json(key[position])
    return tuple(key)
