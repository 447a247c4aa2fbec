"""Writes of imported memory cards: the node staging table, the slot checks and the insert or update.

The node half of memory.services.imports (same staging tables, same rules: every function takes
`tenant=` and runs only inside that tenant's open transaction). Staged cards are checked against the
one-active-card-per-slot rule and the stored cards, dropped or renamed as the import decides, then
inserted — in the background for a copy into an empty workspace — or applied as new revisions of
stored cards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from memory.rules.kinds import JOURNAL_KIND
from memory.services.imports import (
    ImportStaging,
    _analyze,
    _Background,
    _copy,
    _ids_taken,
    _insert_staged_sql,
    _ready,
    _rename,
    _run,
    _staged_value,
)
from memory.services.quota import QUOTA_SCOPES
from tenants.models import Tenant

__all__ = [
    "NODE_STAGING_COLUMNS",
    "NODE_STAGING_EXTRA",
    "AppliedNodes",
    "SlotOccupant",
    "StagedSlots",
    "nodes_apply_staged",
    "nodes_staged_cards_added",
    "nodes_clear_dangling_links",
    "nodes_insert_staged_in_background",
    "nodes_stage",
    "nodes_staged_ids_taken",
    "nodes_staged_rename",
    "nodes_staged_slots",
    "nodes_unstage",
]

NODE_STAGING_COLUMNS = (
    "id", "tenant_id", "workspace_id", "user_id", "session_id", "parent_id", "supersedes_id", "scope",
    "owner_ref", "kind", "item_key", "key", "domain", "category_path", "category_path_text", "type",
    "value_json", "title", "content", "status", "confidence", "importance", "tags", "entities",
    "source_message_ids", "explicit_user_intent", "review_state", "revision", "created_at", "updated_at",
    "expires_at", "access_count", "last_accessed_at", "search_text", "embedding", "embedding_model",
)
# Staged beside a node's columns: what the import does with it, and the file's id (for reports).
NODE_STAGING_EXTRA = ("import_action", "source_id")
_NODE_UPDATED_COLUMNS = tuple(
    c for c in NODE_STAGING_COLUMNS
    if c not in {"id", "tenant_id", "workspace_id", "created_at", "access_count", "last_accessed_at",
                 "embedding", "embedding_model"}
)


def nodes_stage(*, tenant: Tenant, staging: ImportStaging, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY nodes (NODE_STAGING_COLUMNS + NODE_STAGING_EXTRA order) into staging."""
    _ready(tenant, staging)
    _copy("ekko_import_nodes", (*NODE_STAGING_COLUMNS, *NODE_STAGING_EXTRA), rows)


@dataclass(frozen=True)
class SlotOccupant:
    """A staged active node whose slot a stored active node (`holder_id`) already holds."""

    staged_id: UUID
    source_id: str
    action: str  # "insert" | "update"
    holder_id: UUID
    holder_workspace_id: int
    staged: dict[str, Any]  # title, content, value_json of the staged node
    holder: dict[str, Any]  # the same of the stored node


@dataclass(frozen=True)
class StagedSlots:
    clashes: list[tuple[str, str, str, list[str]]]  # (scope, owner, key, file ids) held twice in the file
    occupants: list[SlotOccupant]


def nodes_staged_slots(*, tenant: Tenant, staging: ImportStaging) -> StagedSlots:
    """Return the slots the staged active nodes would hold twice: in the file, or with a stored node."""
    _ready(tenant, staging)
    _analyze("ekko_import_nodes")
    clashes = _run(
        """
        SELECT scope, owner_ref, key, array_agg(source_id ORDER BY source_id)
        FROM ekko_import_nodes WHERE status = 'active' GROUP BY scope, owner_ref, key HAVING count(*) > 1
        LIMIT 5
        """, fetch=True,
    )
    if clashes:
        return StagedSlots(clashes=clashes, occupants=[])
    rows = _run(
        """
        SELECT s.id, s.source_id, s.import_action, n.id, n.workspace_id, s.title, s.content,
               s.value_json::jsonb, n.title, n.content, n.value_json
        FROM ekko_import_nodes s
        JOIN memory_memorynode n ON n.tenant_id = %s AND n.status = 'active' AND n.scope = s.scope
             AND n.owner_ref = s.owner_ref AND n.key = s.key AND n.id <> s.id
        WHERE s.status = 'active'
          AND NOT EXISTS (SELECT 1 FROM ekko_import_nodes u
                          WHERE u.id = n.id AND (u.status <> 'active' OR u.scope <> n.scope
                                                 OR u.owner_ref <> n.owner_ref OR u.key <> n.key))
        """, [tenant.pk], fetch=True,
    )
    occupants = [
        SlotOccupant(
            staged_id=row[0], source_id=row[1], action=row[2], holder_id=row[3], holder_workspace_id=row[4],
            staged={"title": row[5], "content": row[6], "value_json": row[7]},
            holder={"title": row[8], "content": row[9], "value_json": row[10]},
        )
        for row in rows
    ]
    return StagedSlots(clashes=[], occupants=occupants)


def nodes_staged_cards_added(*, tenant: Tenant, staging: ImportStaging) -> dict[str, int]:
    """Return the ordinary cards each scope owner gains from the staged nodes (quota.cards_added's rule).

    A staged active card counts one; a stored active card that a staged "update" replaces counts minus
    one (a new revision of a card is no new card). Owners that gain nothing are left out.
    """
    _ready(tenant, staging)
    scopes = [str(scope) for scope in QUOTA_SCOPES]
    rows = _run(
        """
        SELECT owner_ref, sum(gained)::int FROM (
            SELECT owner_ref, 1 AS gained FROM ekko_import_nodes
            WHERE status = 'active' AND scope = ANY(%s) AND kind <> %s
            UNION ALL
            SELECT n.owner_ref, -1 FROM memory_memorynode n
            JOIN ekko_import_nodes s ON s.id = n.id AND s.import_action = 'update'
            WHERE n.tenant_id = %s AND n.status = 'active' AND n.scope = ANY(%s) AND n.kind <> %s
        ) changes GROUP BY owner_ref HAVING sum(gained) > 0
        """, [scopes, JOURNAL_KIND, tenant.pk, scopes, JOURNAL_KIND], fetch=True,
    )
    return dict(rows)


def nodes_unstage(
    *, tenant: Tenant, staging: ImportStaging, ids: Sequence[UUID], relink: Sequence[tuple[UUID, UUID]] = ()
) -> list[tuple[UUID, str]]:
    """Drop staged nodes by id and return (id, file id) of those that were staged.

    Links to a dropped node listed in `relink` (dropped, holder) follow the holder instead.
    """
    _ready(tenant, staging)
    removed = _run("DELETE FROM ekko_import_nodes WHERE id = ANY(%s) RETURNING id, source_id", [list(ids)],
                   fetch=True) if ids else []
    for dropped, holder in relink:
        for link in ("parent_id", "supersedes_id"):
            _run(f"UPDATE ekko_import_nodes SET {link} = %s WHERE {link} = %s", [holder, dropped])
    return removed


def nodes_clear_dangling_links(*, tenant: Tenant, staging: ImportStaging) -> int:
    """Clear staged links to nodes neither staged nor stored in `tenant`; return how many were cleared."""
    _ready(tenant, staging)
    cleared = 0
    for link in ("parent_id", "supersedes_id"):
        cleared += _run(
            f"""
            UPDATE ekko_import_nodes s SET {link} = NULL
            WHERE {link} IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM ekko_import_nodes x WHERE x.id = s.{link})
              AND NOT EXISTS (SELECT 1 FROM memory_memorynode n WHERE n.id = s.{link} AND n.tenant_id = %s)
            """,
            [tenant.pk],
        )
    return cleared


def nodes_staged_ids_taken(*, tenant: Tenant, staging: ImportStaging) -> list[tuple[UUID, str]]:
    """Return (id, file id) of the nodes staged for insert whose id another tenant uses."""
    _ready(tenant, staging)
    blank = {"embedding": "NULL", "embedding_model": "''", "search_text": "''", "status": "'deleted'"}
    taken = _ids_taken("memory_memorynode", NODE_STAGING_COLUMNS, "s.import_action = 'insert'", blank)
    return _run("SELECT id, source_id FROM ekko_import_nodes WHERE id = ANY(%s)", [taken], fetch=True) \
        if taken else []


def nodes_staged_rename(*, tenant: Tenant, staging: ImportStaging, renames: dict[UUID, UUID]) -> None:
    """Give staged nodes new ids (old → new), with the links to them."""
    _ready(tenant, staging)
    _rename("ekko_import_nodes", renames, ("parent_id", "supersedes_id"))


def nodes_insert_staged_in_background(
    *, tenant: Tenant, staging: ImportStaging, on_done: Callable[[int], None]
) -> list[tuple[UUID, bool]]:
    """Start inserting every staged node (a copy into an empty workspace); return (id, has a vector) each."""
    _ready(tenant, staging)
    staged = _run("SELECT id, embedding IS NOT NULL FROM ekko_import_nodes", fetch=True)
    sql = _insert_staged_sql("memory_memorynode", NODE_STAGING_COLUMNS)
    staging.pending = _Background(sql, fetch=False, on_done=on_done)
    return staged


@dataclass(frozen=True)
class AppliedNodes:
    updated: int
    inserted: int
    written: list[tuple[UUID, bool, bool]]  # (id, vector came from the file, stored row has no vector)
    updates: list[tuple[UUID, str | None, int | None]]  # (id, session id, user id) of each updated node


def nodes_apply_staged(*, tenant: Tenant, staging: ImportStaging) -> AppliedNodes:
    """Update the nodes staged as "update" (keeping a vector when the text is unchanged), insert the rest."""
    _ready(tenant, staging)
    assignments = ", ".join(f"{c} = {_staged_value('memory_memorynode', c)}" for c in _NODE_UPDATED_COLUMNS)
    updated = 0
    # Nodes leaving a slot are updated before nodes entering one, so the one-active-per-slot index holds.
    for status_test in ("s.status <> 'active'", "s.status = 'active'"):
        updated += _run(
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
            [tenant.pk],
        )
    # One statement: links between new rows are fine (foreign keys are checked at its end at the earliest)
    # and no two of them hold the same active slot (settled before).
    inserted = _run(_insert_staged_sql("memory_memorynode", NODE_STAGING_COLUMNS, "import_action = 'insert'"))
    written = _run(
        """
        SELECT s.id, s.embedding IS NOT NULL, n.embedding IS NULL
        FROM ekko_import_nodes s JOIN memory_memorynode n ON n.id = s.id AND n.tenant_id = %s
        """, [tenant.pk], fetch=True,
    )
    updates = _run(
        "SELECT id, session_id, user_id FROM ekko_import_nodes WHERE import_action = 'update' "
        "ORDER BY source_id",
        fetch=True,
    )
    return AppliedNodes(updated=updated, inserted=inserted, written=written, updates=updates)


