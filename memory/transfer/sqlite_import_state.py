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
from memory.transfer.import_rules import SupersedeChains, too_large
from memory.transfer.report import ImportReport, Progress
from memory.transfer.signatures import SearchTextSigner
from memory.transfer.sqlite_format import TABLES, Column, FileInfo, canonical_json
from memory.transfer.sqlite_rows import OVERSIZED, SMALL_CAP, TEXT_CAPS, FileRow, read_cap
from memory.visibility import Viewer
from tenants.models import Tenant, Workspace

__all__ = ["CHUNK_CHARS", "ImportState", "read_chunks", "split_verified", "stored_key"]

# Text characters one chunk of file rows holds at most (give or take one fetch of _FETCH_ROWS rows).
CHUNK_CHARS = 8_000_000
_FETCH_ROWS = 32
_SIZE = "ekko_size"
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
    # Who imports: the write rules are this caller's (memory.transfer.import_rules).
    viewer: Viewer
    # File username → member username, for people the file names differently (never an owner-less card).
    user_map: dict[str, str] = field(default_factory=dict)
    # File id → id in this workspace, for every node and summary of the file; audit events renamed.
    node_map: dict[str, uuid.UUID] = field(default_factory=dict)
    summary_map: dict[str, uuid.UUID] = field(default_factory=dict)
    event_renames: dict[str, uuid.UUID] = field(default_factory=dict)
    # Message ids taken by a different message in the target workspace → the id it was imported under.
    message_renames: dict[str, str] = field(default_factory=dict)
    # Nodes of the file that will not exist under their mapped id → why (a conflict reason, "duplicate").
    nodes_not_imported: dict[uuid.UUID, str] = field(default_factory=dict)
    chains: SupersedeChains = field(default_factory=SupersedeChains)
    # Rows written without a usable vector, to embed after commit.
    nodes_to_embed: list[str] = field(default_factory=list)
    messages_to_embed: list[int] = field(default_factory=list)
    # A copy into a workspace with no rows at all: its derived ids cannot exist yet, so nothing is looked up,
    # foreign keys are checked statement by statement, and big inserts run while Python reads on.
    fresh: bool = False
    staging: ImportStaging | None = None
    now: datetime = field(default_factory=timezone.now)

    def __post_init__(self) -> None:
        self.tenant_id, self.workspace_id = self.tenant.pk, self.workspace.pk  # read per row: plain ints
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
        return self.derived_uuid(source_id)

    def derived_uuid(self, source_id: str) -> uuid.UUID:
        """Return the id a file id gets here when it is not kept: uuid5 of (tenant, workspace, file, id)."""
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

    def event_id(self, source_id: str) -> uuid.UUID:
        return self.event_renames.get(source_id) or self.target_uuid(source_id)

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
        """Return the user id of a username the file names (through the user map), if they are a member."""
        return self.members.get(self.user_map.get(username, username)) if username else None

    def leave_out(self, node_id: uuid.UUID, source_id: str, reason: str, detail: str | None) -> None:
        """Keep a file node out of the import; report it unless `detail` is None (counted as skipped)."""
        self.nodes_not_imported[node_id] = reason
        if detail is None:
            self.report.skipped.nodes += 1
        else:
            self.report.conflict("nodes", source_id, reason, detail)

    def oversized(self, table: str, row: FileRow) -> bool:
        """Report and return True when a text of `row` is over the API's size limit (the row is left out)."""
        column = row.oversized()
        if column is None:
            return False
        refusal = too_large(column, TEXT_CAPS[row.table][column])
        self.report.conflict(table, row.id, refusal.reason, refusal.detail)
        return True

    def count_vectors(self, reused: int, pending: int) -> None:
        self.report.vectors_reused += reused
        self.report.vectors_pending += pending


def _read_expression(column: str, cap: int) -> str:
    # Text and blobs are read up to one character past their cap: a longer value is refused (or, for
    # derived columns, recomputed) without ever being held whole.
    kept = f"substr({column}, 1, {cap + 1})"
    return f"CASE WHEN typeof({column}) IN ('text', 'blob') THEN {kept} ELSE {column} END"


def read_chunks(
    state: ImportState, table: str, stage: str, vectors: tuple[str, str] | None = None
) -> Iterator[list[FileRow]]:
    """Yield a table's rows in file order, in chunks of at most `chunk_size` rows and about CHUNK_CHARS.

    `vectors` = (vector table, its key column) joins each row's vector when the file has that table.
    """
    # Only the format's own columns are read (a file's other columns are not ours to interpret).
    present = state.file.columns[table]
    columns = {f"t.{c.name}": read_cap(table, c.name) for c in TABLES[table] if c.name in present}
    joined = ""
    if vectors is not None and state.file.has(vectors[0]):
        vector_table, key = vectors
        joined = f" LEFT JOIN {vector_table} v ON v.{key} = t.id"
        columns.update({"v.model": SMALL_CAP, "v.dim": SMALL_CAP, "v.vector": read_cap(table, "vector")})
    names = {"v.model": "vector_model", "v.dim": "vector_dim", "v.vector": "vector_blob"}
    large = [(c, cap) for c, cap in columns.items() if cap > SMALL_CAP]
    limits = [(f"t.{c}", cap) for c, cap in TEXT_CAPS.get(table, {}).items() if c in present]
    select = ", ".join(
        [f"{_read_expression(c, cap)} AS {names.get(c, c.removeprefix('t.'))}" for c, cap in columns.items()]
        + [" + ".join(f"coalesce(min(length({c}), {cap + 1}), 0)" for c, cap in large) + f" AS {_SIZE}"]
        + ["CASE " + " ".join(f"WHEN length({c}) > {cap} THEN '{c.removeprefix('t.')}'" for c, cap in limits)
           + f" END AS {OVERSIZED}"] * bool(limits)
    )
    # Every small column is bounded by SMALL_CAP; the large ones are counted row by row.
    fixed = SMALL_CAP * (len(columns) - len(large))
    total = state.source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    state.progress(stage, 0, total)
    cursor = state.source.execute(f"SELECT {select} FROM {table} t{joined} ORDER BY t.rowid")
    names_read = [d[0] for d in cursor.description]
    chunk: list[FileRow] = []
    chars = 0
    while batch := cursor.fetchmany(_FETCH_ROWS):
        for row in batch:
            values = dict(zip(names_read, row, strict=True))
            chars += values.pop(_SIZE) + fixed
            chunk.append(FileRow(table, values))
        if len(chunk) >= state.chunk_size or chars >= CHUNK_CHARS:
            yield chunk
            state.progress(stage, len(chunk), total)
            chunk, chars = [], 0
    if chunk:
        yield chunk
        state.progress(stage, len(chunk), total)


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
