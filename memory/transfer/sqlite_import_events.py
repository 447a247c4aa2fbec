"""Import of a file's audit history (`memory_audit_events`), after the nodes it describes.

Events are append-only: one identical to the stored event is skipped, a different one under the
same id is a conflict. An event's node id is mapped like the node's (events outlive hard-forgotten
cards, so it is mapped even when the node is not in the file), and the history of a card that was
not imported (conflict, duplicate, refused or forgotten) stays out with it. An event that carries
its place in the source tenant's audit chain must still match its digests (docs/erasure.md): one
changed after export is refused and reported as `tampered`; the events kept are chained anew in
this tenant by the database. The rows kept are written by memory.services.imports.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from memory.models import MemoryAuditEvent
from memory.rules.audit_digest import VERSION, event_problem, microseconds
from memory.services import imports
from memory.transfer.selectors import audit_events_of
from memory.transfer.sqlite_format import AUDIT_COLUMNS, canonical_json
from memory.transfer.sqlite_import_state import (
    CHUNK_CHARS,
    ImportState,
    read_chunks,
    split_verified,
    stored_key,
)
from memory.transfer.sqlite_rows import EVENT_TYPES, MAX, FileRow

__all__ = ["import_audit_events"]

_AUDIT_COMPARED = (
    "event_type", "node_id", "session_id", "user__username", "actor", "reason", "payload", "created_at"
)


def _audit_fast(state: ImportState, row: FileRow) -> tuple[Any, ...] | None:
    v = row.values
    source_node = v["node_id"]
    node_id = state.event_node_id(source_node)
    if node_id in state.nodes_not_imported:
        return None
    return (
        state.event_id(v["id"]), state.tenant_id, state.workspace_id, v["event_type"], node_id,
        v["session_id"], state.member(v["user_id"]), v["actor"], v["reason"], v["payload_json"],
        v["created_at"],
    )


def import_audit_events(state: ImportState) -> None:
    ws, tenant = state.workspace, state.tenant
    held: list[tuple[Any, ...]] = []
    held_chars = 0
    chain_tenant = _chain_tenant(state)
    for chunk in read_chunks(state, "memory_audit_events", "audit events"):
        verified, chunk = split_verified(state, "memory_audit_events", AUDIT_COLUMNS, chunk)
        verified = [row for row in verified if not state.oversized("auditEvents", row)]
        staged = [event for event in (_audit_fast(state, row) for row in verified) if event is not None]
        state.report.skipped.audit_events += len(verified) - len(staged)
        rows = [row for row in chunk if not state.oversized("auditEvents", row)]
        # A malformed row refuses the whole file first; a well-formed one changed since export is left out.
        incoming = [
            event for row, event in zip(rows, [_audit_in(state, row) for row in rows], strict=True)
            if _chain_holds(state, chain_tenant, row)
        ]
        ids = [e["id"] for e in incoming]
        existing = {} if state.fresh else {
            values[0]: stored_key(values[1:], [6])
            for values in audit_events_of(tenant, ws).filter(pk__in=ids).values_list("id", *_AUDIT_COMPARED)
        }
        elsewhere = set() if state.fresh else set(
            MemoryAuditEvent.objects.filter(tenant=tenant, pk__in=ids)
            .exclude(pk__in=list(existing))
            .values_list("id", flat=True)
        )
        for event in incoming:
            stored = existing.get(event["id"])
            if stored is not None or event["id"] in elsewhere:
                if stored == _audit_key(state, event):
                    state.report.skipped.audit_events += 1
                else:
                    state.report.conflict(
                        "auditEvents", event["source_id"], "changed",
                        "a different audit event with this id is stored; events are append-only",
                    )
                continue
            if event["node_id"] in state.nodes_not_imported:
                state.report.skipped.audit_events += 1
                continue
            staged.append((
                event["id"], tenant.pk, ws.pk, event["event_type"], event["node_id"], event["session_id"],
                event["user"], event["actor"], event["reason"],
                None if event["payload"] is None else event["payload_text"], event["created_at"],
            ))
        held.extend(staged)
        held_chars += sum(len(event[8]) + len(event[9] or "") for event in staged)
        # While the nodes' insert still runs, events are held (staging them would wait for it), up to a
        # chunk's worth of text, so memory stays bounded.
        if not (state.staging.busy and held_chars < CHUNK_CHARS):
            imports.audit_events_stage(tenant=tenant, staging=state.staging, rows=held)
            held, held_chars = [], 0
        state.report.imported.audit_events += len(staged)
    imports.audit_events_stage(tenant=tenant, staging=state.staging, rows=held)
    if state.same_workspace:  # ids are kept: one another tenant uses is renamed, like an unused one
        taken = imports.audit_events_staged_ids_taken(tenant=tenant, staging=state.staging)
        renames = {event_id: state.derived_uuid(str(event_id)) for event_id in taken}
        if renames:
            imports.audit_events_staged_rename(tenant=tenant, staging=state.staging, renames=renames)
    imports.audit_events_insert_staged(tenant=tenant, staging=state.staging)


def _audit_in(state: ImportState, row: FileRow) -> dict[str, Any]:
    source_id = row.text("id")
    source_node = row.text("node_id", required=False)
    return {
        "id": state.event_id(source_id),
        "source_id": source_id,
        "event_type": row.choice("event_type", EVENT_TYPES),
        "node_id": state.event_node_id(source_node),
        "session_id": row.text("session_id", required=False, max_length=MAX["session_id"]),
        "user": state.member(row.text("user_id", required=False)),
        "actor": row.text("actor", max_length=MAX["actor"]),
        "reason": row.text("reason"),
        "payload": row.json("payload_json"),
        "payload_text": row.values.get("payload_json"),
        "created_at": row.timestamp("created_at"),
    }


def _audit_key(state: ImportState, event: dict[str, Any]) -> tuple[Any, ...]:
    return (
        event["event_type"], event["node_id"], event["session_id"], state.username(event["user"]),
        event["actor"], event["reason"], canonical_json(event["payload"]), event["created_at"],
    )


def _chain_tenant(state: ImportState) -> int | None:
    """Return the source tenant of the file's audit chain (its digests cover it), or None."""
    try:
        info = json.loads(state.file.info.get("audit_chain") or "null")
    except ValueError:
        return None
    if not isinstance(info, dict) or info.get("format") != VERSION:
        return None
    if not isinstance(info.get("tenantId"), int):
        return None
    return info["tenantId"]


def _chain_holds(state: ImportState, chain_tenant: int | None, row: FileRow) -> bool:
    """Keep an event without chain data; refuse (and report) one whose digests no longer match."""
    v = row.values
    if not v.get("digest"):
        return True
    problem = "the file names no audit chain for its digests" if chain_tenant is None else None
    if problem is None:
        try:
            created = datetime.fromisoformat(str(v["created_at"]))
            fields = {
                "tenant_id": chain_tenant, "sequence": int(v["sequence"]),
                "previous_digest": str(v["previous_digest"]),
                "event_id": v["id"], "event_type": v["event_type"], "node_id": v["node_id"],
                "session_id": v["session_id"], "actor": v["actor"], "reason": v["reason"],
                "payload_text": v["payload_json"], "content_salt": v["content_salt"] or "",
                "content_digest_": v["content_digest"], "digest": v["digest"],
                "created_at_us": microseconds(created if created.tzinfo else created.replace(tzinfo=UTC)),
            }
            # An event written without a workspace is exported under the file's workspace.
            problem = event_problem(**fields, workspace_id=v["workspace_id"]) and event_problem(
                **fields, workspace_id=None)
        except (KeyError, TypeError, ValueError):
            problem = "its chain columns are incomplete"
    if problem is None:
        return True
    state.report.conflict("auditEvents", row.id, "tampered",
                          f"the event no longer matches its audit-chain digest ({problem}); it was changed "
                          "after export, so it is not imported")
    return False
