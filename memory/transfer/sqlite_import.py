"""Import an Ekko local-format SQLite file into one workspace, in one tenant-bound transaction.

The file's shape is checked first (memory.transfer.sqlite_format), then its tables are read in
order — messages, summaries, nodes, audit events (memory.transfer.sqlite_import_*) — every row
validated and compared with what is stored: identical → skipped, a newer node revision → updated,
anything else → a reported conflict. The rows kept are written by memory.services.imports (staged
with COPY, moved with one statement per table); this package never writes memory tables itself.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from django.db import DataError, IntegrityError, transaction

from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary
from memory.services import imports
from memory.transfer.import_rules import require_import_allowed, user_map_checked
from memory.transfer.report import ImportError_, ImportReport, Progress, no_progress
from memory.transfer.selectors import members_named, workspace_in_tenant
from memory.transfer.signatures import SearchTextSigner
from memory.transfer.sqlite_export import CHUNK_SIZE
from memory.transfer.sqlite_format import (
    FileInfo,
    closing_sqlite,
    server_embedding_model,
    sqlite_file_inspect,
)
from memory.transfer.sqlite_import_events import import_audit_events
from memory.transfer.sqlite_import_messages import import_messages, import_summaries
from memory.transfer.sqlite_import_nodes import import_nodes
from memory.transfer.sqlite_import_state import ImportState
from memory.transfer.sqlite_rows import read_cap
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace

__all__ = ["workspace_import_sqlite"]

EMBED_BATCH = 500


def workspace_import_sqlite(
    *,
    tenant: Tenant,
    workspace: Workspace | int,
    path: str | os.PathLike[str],
    viewer: Viewer,
    user_map: Mapping[str, str] | None = None,
    actor: str | None = None,
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

    The rows obey the write rules of `viewer` — the API key or person importing, or for a command an
    operator's `importer_viewer`; there is no default, so no path imports without rules — as
    memory.transfer.import_rules says: a read-only caller or a
    workspace outside its reach is refused whole, a card it may not write is left out and reported.
    `user_map` maps usernames of the file to members of the tenant; `actor` (default: the viewer's)
    is recorded on the audit events the import writes.
    """
    file = sqlite_file_inspect(path)
    with closing_sqlite(Path(path)) as source, tenant_context(tenant):
        ws = workspace_in_tenant(tenant, workspace)
        require_import_allowed(viewer, ws)
        user_map = user_map_checked(tenant, user_map)
        same = file.info.get("tenant") == tenant.slug and file.info.get("workspace_id") == str(ws.pk)
        state = ImportState(
            tenant=tenant,
            workspace=ws,
            file=file,
            source=source,
            report=ImportReport(mode="same_workspace" if same else "copy"),
            progress=progress or no_progress,
            actor=actor or viewer.actor,
            chunk_size=chunk_size,
            same_workspace=same,
            source_tag=f"{file.info.get('tenant', 'local')}/{file.info.get('workspace_id', '-')}",
            members=members_named(tenant, {user_map.get(n, n) for n in _usernames_in_file(source, file)}),
            server_model=server_embedding_model(),
            signer=SearchTextSigner(),
            viewer=viewer,
            user_map=user_map,
        )
        try:
            # A savepoint, so a failed statement leaves the tenant transaction usable for its cleanup.
            with transaction.atomic():
                _import_rows(state)
        except (IntegrityError, DataError) as exc:
            # The database's message may name a constraint or a value of rows this caller cannot see.
            raise ImportError_(
                "The file's rows contradict each other or this workspace (two rows claim the same slot or "
                "id, or a value cannot be stored); nothing was imported. Export it again or fix the rows."
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise ImportError_(f"The SQLite file cannot be read ({exc}); nothing was imported.") from exc
        if embed_after_commit:
            _queue_embedding(state)
    return state.report



def workspace_import_upload(*, viewer: Viewer, chunks: Iterable[bytes], actor: str,
                            user_map: Mapping[str, str] | None = None) -> ImportReport:
    """Import an uploaded file (its chunks, as the API and the pages get them) into the viewer's workspace.

    SQLite reads a path, so the upload is copied to a temporary file first; the file is gone after.
    """
    with tempfile.NamedTemporaryFile(prefix="ekko-import-", suffix=".sqlite") as copy:
        for chunk in chunks:
            copy.write(chunk)
        copy.flush()
        return workspace_import_sqlite(tenant=viewer.tenant, workspace=viewer.workspace, path=copy.name,
                                       viewer=viewer, user_map=user_map, actor=actor)


def _import_rows(state: ImportState) -> None:
    source = state.source
    # A copy into a workspace with no rows at all: its derived ids cannot exist yet, so nothing is looked up,
    # foreign keys are checked statement by statement, and big inserts run while Python reads on.
    state.fresh = not state.same_workspace and not any(
        model.objects.filter(tenant=state.tenant, workspace=state.workspace).exists()
        for model in (MemoryNode, MemoryMessage, MemorySummary, MemoryAuditEvent)
    )
    for table, mapping in (("memory_nodes", state.node_map), ("memory_summaries", state.summary_map)):
        mapping.update((i, state.target_uuid(i)) for i in _file_ids(source, table))
    if state.same_workspace:
        _follow_earlier_renames(state)
    state.staging = imports.import_staging_open(tenant=state.tenant, check_each_statement=state.fresh)
    try:
        import_messages(state)
        import_summaries(state)
        import_nodes(state)
        import_audit_events(state)
    except BaseException:
        imports.import_staging_abandon(staging=state.staging)  # the statement must end before the rollback
        raise
    imports.import_staging_close(tenant=state.tenant, staging=state.staging)


def _file_ids(source: sqlite3.Connection, table: str) -> list[str]:
    # Read as the chunks read them (memory.transfer.sqlite_import_state.read_chunks), so both agree.
    cap = read_cap(table, "id") + 1
    rows = source.execute(f"SELECT substr(id, 1, {cap}) FROM {table} WHERE typeof(id) = 'text'")
    return [i for (i,) in rows]


def _follow_earlier_renames(state: ImportState) -> None:
    """Map the file ids an earlier import of this file renamed (another tenant used them) to their new ids."""
    state.node_map.update(_earlier_renames(state, MemoryNode, state.node_map))
    state.summary_map.update(_earlier_renames(state, MemorySummary, state.summary_map))
    kept_events = {}
    for source in _file_ids(state.source, "memory_audit_events"):
        kept = state.target_uuid(source)
        if kept != state.derived_uuid(source):
            kept_events[state.derived_uuid(str(kept))] = source
    renamed = MemoryAuditEvent.objects.filter(tenant=state.tenant, pk__in=list(kept_events))
    state.event_renames.update({kept_events[found]: found for found in renamed.values_list("pk", flat=True)})


def _earlier_renames(state: ImportState, model: type, mapping: dict[str, uuid.UUID]) -> dict[str, uuid.UUID]:
    derived = {}
    for source, kept in mapping.items():
        renamed = state.derived_uuid(source)
        if renamed != kept:  # a kept id (a UUID); the others are derived already
            derived[renamed] = source
    found = model.objects.filter(tenant=state.tenant, pk__in=list(derived)).values_list("pk", flat=True)
    return {derived[row_id]: row_id for row_id in found}


def _usernames_in_file(source: sqlite3.Connection, file: FileInfo) -> set[str]:
    names: set[str] = set()
    for table in ("memory_messages", "memory_nodes", "memory_audit_events"):
        if file.has(table, "user_id"):
            cap = read_cap(table, "user_id") + 1
            rows = source.execute(f"SELECT DISTINCT substr(user_id, 1, {cap}) FROM {table}")
            names.update(name for (name,) in rows if isinstance(name, str))
    return names


def _queue_embedding(state: ImportState) -> None:
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
