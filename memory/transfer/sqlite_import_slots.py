"""After a file's cards are staged: slots, chains and ids are settled, then the cards are written.

One active card per slot (scope, owner, key): a file card whose slot another active card holds is not
imported — skipped when it says the same (DESIGN rule 2's same-content test), a `slot_taken` conflict
otherwise. A supersede chain is imported whole or not at all: when one of its cards is left out, for
whatever reason, so are the others (`chain`). Links to cards that end up nowhere are cleared. In a
round trip (ids kept), an id another tenant already uses is renamed silently, so it imports exactly
like an unused one. Then memory.services.imports_nodes inserts the new cards and applies the new
revisions, with one "update" audit event each — unless the cards would take a scope owner past the
tenant's card limit: then the whole import is refused (409 `quota_exceeded`, nothing imported).
"""

from __future__ import annotations

import uuid
from typing import Any

from memory.models import AuditEventType
from memory.rules.node_text import same_content
from memory.services import imports, imports_nodes
from memory.services.audit import audit_chain_lock, audit_event_build
from memory.services.quota import quota_require
from memory.transfer.report import ImportError_
from memory.transfer.sqlite_import_state import ImportState

__all__ = ["settle_and_apply"]

DUPLICATE = "duplicate"  # the reason of a card left out because the same card is already active here


def settle_and_apply(state: ImportState, previous_versions: dict[uuid.UUID, dict[str, Any]]) -> None:
    _settle_slots(state)
    _leave_out_partial_chains(state)
    dropped = imports_nodes.nodes_clear_dangling_links(tenant=state.tenant, staging=state.staging)
    if dropped:
        state.report.warnings.append(
            f"{dropped} link(s) (parentId/supersedesId) pointed at nodes that are neither in the file nor in "
            "this tenant; they were cleared."
        )
    if state.same_workspace:
        _rename_ids_taken_elsewhere(state)
    # Under the chain lock every card writer takes before it inserts: no write slips in after the count.
    audit_chain_lock(tenant=state.tenant)
    quota_require(tenant=state.tenant,
                  adding=imports_nodes.nodes_staged_cards_added(tenant=state.tenant, staging=state.staging))
    _apply(state, previous_versions)


def _settle_slots(state: ImportState) -> None:
    """Keep one active node per slot; an identical active card counts as skipped and links follow it."""
    tenant, staging = state.tenant, state.staging
    slots = imports_nodes.nodes_staged_slots(tenant=tenant, staging=staging)
    if slots.clashes:
        described = "; ".join(
            f"{scope} slot {key!r}: ids {', '.join(ids[:3])}" for scope, _, key, ids in slots.clashes
        )
        raise ImportError_(
            f"The file has more than one active node in the same slot ({described}). "
            "Mark all but the newest superseded and import again; nothing was imported."
        )
    duplicates: list[tuple[uuid.UUID, uuid.UUID]] = []
    for occupant in slots.occupants:
        if occupant.action == "insert" and same_content(occupant.staged, occupant.holder):
            state.leave_out(occupant.staged_id, occupant.source_id, DUPLICATE, None)
            duplicates.append((occupant.staged_id, occupant.holder_id))
            continue
        # Name the holder only when it is in the workspace the caller imports into.
        holder = f"node {occupant.holder_id}" if occupant.holder_workspace_id == state.workspace.pk else (
            "a card of another workspace")
        state.leave_out(occupant.staged_id, occupant.source_id, "slot_taken",
                        f"{holder} is already active in this slot with other content")
    imports_nodes.nodes_unstage(
        tenant=tenant, staging=staging, ids=list(state.nodes_not_imported), relink=duplicates
    )


def _leave_out_partial_chains(state: ImportState) -> None:
    """Leave out every staged card whose supersede chain lost a card (chains import whole or not at all)."""
    causes: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}  # chain member → (the card left out, why)
    for node_id, reason in state.nodes_not_imported.items():
        for member in state.chains.members(node_id):
            if member not in state.nodes_not_imported:
                causes.setdefault(member, (node_id, reason))
    if not causes:
        return
    removed = imports_nodes.nodes_unstage(tenant=state.tenant, staging=state.staging, ids=list(causes))
    sources = {node_id: source for source, node_id in state.node_map.items()}
    for node_id, source_id in sorted(removed, key=lambda row: row[1]):
        cause, reason = causes[node_id]
        if reason == DUPLICATE:  # the same chain is already here: its cards are skipped like its head
            state.leave_out(node_id, source_id, DUPLICATE, None)
        else:
            state.leave_out(node_id, source_id, "chain", f"left out with its supersede chain: "
                            f"{sources.get(cause, cause)} was left out ({reason})")


def _rename_ids_taken_elsewhere(state: ImportState) -> None:
    taken = imports_nodes.nodes_staged_ids_taken(tenant=state.tenant, staging=state.staging)
    renames = {node_id: state.derived_uuid(source_id) for node_id, source_id in taken}
    if renames:
        imports_nodes.nodes_staged_rename(tenant=state.tenant, staging=state.staging, renames=renames)
        state.node_map.update({source_id: renames[node_id] for node_id, source_id in taken})


def _apply(state: ImportState, previous_versions: dict[uuid.UUID, dict[str, Any]]) -> None:
    tenant, staging = state.tenant, state.staging
    if state.fresh:
        # Only inserts: count vectors from the staged rows and let the insert run while the events are read.
        def done(count: int) -> None:
            state.report.imported.nodes += count

        staged = imports_nodes.nodes_insert_staged_in_background(tenant=tenant, staging=staging, on_done=done)
        state.nodes_to_embed = [str(node_id) for node_id, has_vector in staged if not has_vector]
        state.count_vectors(len(staged) - len(state.nodes_to_embed), len(state.nodes_to_embed))
        return
    applied = imports_nodes.nodes_apply_staged(tenant=tenant, staging=staging)
    state.report.updated.nodes += applied.updated
    state.report.imported.nodes += applied.inserted
    state.nodes_to_embed = [str(node_id) for node_id, _, unembedded in applied.written if unembedded]
    state.count_vectors(sum(reused for _, reused, _ in applied.written), len(state.nodes_to_embed))
    events = [
        audit_event_build(
            tenant=tenant, event_type=AuditEventType.UPDATE, node_id=node_id, workspace_id=state.workspace.pk,
            session_id=session_id, user_id=user_id, actor=state.actor, reason="import",
            payload={"source": "sqlite_import", **previous_versions[node_id]}, created_at=state.now,
        )
        for node_id, session_id, user_id in applied.updates
    ]
    imports.audit_events_create(tenant=tenant, events=events)
