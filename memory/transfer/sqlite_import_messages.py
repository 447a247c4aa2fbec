"""Import of a file's evidence: `memory_messages` (with their vectors) and `memory_summaries`.

Messages are append-only: a row identical to the stored one is skipped; a row whose id a different
message holds here is imported under a derived id (reported as `id_taken`), and replies, summaries
and node sources follow it. Summaries are append-only chains: a summary that would fork a session's
chain or hang from a missing parent is reported and left out. A message or summary that carries a
secret or personal identifier is left out and reported (`sensitive_content`), the rest imports; a
summary's children then hang from its parent. The rows kept are written by memory.services.imports.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from memory.models import Channel, MemoryMessage, MemorySummary
from memory.rules.sensitive import find_sensitive_content
from memory.rules.text import segment_for_search
from memory.services import imports
from memory.services.summaries import SUMMARY_LIST_FIELDS
from memory.transfer.report import sensitive_detail
from memory.transfer.sqlite_format import MESSAGE_COLUMNS, canonical_json
from memory.transfer.sqlite_import_state import (
    ImportState,
    read_chunks,
    split_verified,
    stored_key,
)
from memory.transfer.sqlite_rows import CHANNELS, MAX, ROLES, FileRow

__all__ = ["import_messages", "import_summaries"]

# What "identical" means: equal values (not equal text) in every column but the derived search text.
_MESSAGE_COMPARED = (
    "session_id", "parent_id", "role", "content", "metadata", "created_at", "user__username", "channel",
    "agent_name",
)
_SUMMARY_COMPARED = (
    "session_id", "parent_summary_id", "from_message_id", "to_message_id", "summary", "current_goal",
    "constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues", "created_at",
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

    def compare_key(self, state: ImportState) -> tuple[Any, ...]:
        """Return the values compared with a stored message (_MESSAGE_COMPARED order)."""
        return (
            self.session_id, self.parent_id, self.role, self.content, canonical_json(self.metadata),
            self.created_at, state.username(self.user), self.channel, self.agent_name,
        )

    def renamed(self) -> str:
        digest = hashlib.sha256(self.content.encode()).hexdigest()[:10]
        return f"{self.id[: MAX['message_id'] - 18]}~import-{digest}"

    def staged(self, state: ImportState) -> tuple[Any, ...]:
        return (
            state.tenant_id, state.workspace_id, self.id, self.session_id, self.user, self.parent_id,
            self.role, self.content, self.channel, self.agent_name,
            None if self.metadata is None else self.metadata_text, self.token_count, self.created_at,
            self.search_text or segment_for_search(self.content), self.vector, self.vector_model,
        )


def _message_fast(state: ImportState, row: FileRow) -> tuple[Any, ...]:
    v = row.values
    vector, vector_model = row.vector(state.server_model)
    return (
        state.tenant_id, state.workspace_id, v["id"], v["session_id"], state.member(v["user_id"]),
        v["parent_id"], v["role"], v["content"], v["channel"], v["agent_name"], v["metadata_json"],
        v["token_count"], v["created_at"], v["search_text"] or segment_for_search(v["content"]),
        vector, vector_model,
    )


def _refused(state: ImportState, table: str, source_id: str, *texts: str | None) -> bool:
    """Report and return True when the texts carry a secret (DESIGN rule 7 holds for imports too)."""
    reason = find_sensitive_content(*texts)
    if reason is None:
        return False
    state.report.conflict(table, source_id, "sensitive_content", sensitive_detail(reason))
    return True


def import_messages(state: ImportState) -> None:
    ws, tenant = state.workspace, state.tenant
    vectors = ("memory_message_embeddings", "message_id")
    for chunk in read_chunks(state, "memory_messages", "messages", vectors):
        verified, chunk = split_verified(state, "memory_messages", MESSAGE_COLUMNS, chunk)
        # Capture does not refuse secrets in evidence, so even this server's own rows are checked.
        staged = [
            _message_fast(state, row) for row in verified
            if not state.oversized("messages", row)
            and not _refused(state, "messages", row.values["id"], row.values["content"])
        ]
        read = (_message_in(state, row) for row in chunk if not state.oversized("messages", row))
        incoming = [m for m in read if not _refused(state, "messages", m.id, m.content)]
        wanted = {m.id for m in incoming} | {m.renamed() for m in incoming}
        existing = {} if state.fresh else {
            values[0]: stored_key(values[1:], [4])
            for values in MemoryMessage.objects.filter(
                tenant=tenant, workspace=ws, message_id__in=wanted
            ).values_list("message_id", *_MESSAGE_COMPARED)
        }
        for message in incoming:
            stored = existing.get(message.id)
            if stored is not None and stored != message.compare_key(state):
                # Another message owns this id here: keep both, the file's under a derived id.
                renamed = message.renamed()
                state.message_renames[message.id] = renamed
                state.report.conflict(
                    "messages", message.id, "id_taken",
                    f"imported as {renamed}: a different message has this id here",
                )
                message.id = renamed
                stored = existing.get(renamed)
                if stored is not None and stored != message.compare_key(state):
                    continue
            if stored is not None:
                state.report.skipped.messages += 1
                continue
            staged.append(message.staged(state))
        imports.messages_stage(tenant=tenant, staging=state.staging, rows=staged)

    def done(inserted: list[tuple[int, bool]]) -> None:
        state.messages_to_embed = [pk for pk, unembedded in inserted if unembedded]
        state.report.imported.messages += len(inserted)
        state.count_vectors(len(inserted) - len(state.messages_to_embed), len(state.messages_to_embed))

    imports.messages_insert_staged(
        tenant=tenant, staging=state.staging, parent_renames=state.message_renames, in_background=state.fresh,
        on_done=done,
    )


def _message_in(state: ImportState, row: FileRow) -> _Message:
    content = row.text("content")
    search_text = row.get("search_text")
    if not state.signer.verified("message", [content], search_text, row.get("search_text_sig")):
        search_text = None  # segmented only if the message is staged
    vector, vector_model = row.vector(state.server_model)
    return _Message(
        id=row.text("id", max_length=MAX["message_id"]),
        session_id=row.text("session_id", max_length=MAX["session_id"]),
        parent_id=row.text("parent_id", required=False, max_length=MAX["message_id"]),
        role=row.choice("role", ROLES),
        content=content,
        metadata=row.json("metadata_json"),
        created_at=row.timestamp("created_at"),
        user=state.member(row.text("user_id", required=False)),
        channel=row.choice("channel", CHANNELS, default=Channel.MAIN),
        agent_name=row.text("agent_name", default="", max_length=MAX["agent_name"]),
        token_count=row.integer("token_count"),
        search_text=search_text,
        vector=vector,
        vector_model=vector_model,
        metadata_text=row.values.get("metadata_json"),
    )


# ----- summaries


def import_summaries(state: ImportState) -> None:
    ws, tenant = state.workspace, state.tenant
    # A summary left out for its content: its children hang from its parent instead (id → parent).
    relink: dict[UUID, UUID | None] = {}
    for chunk in read_chunks(state, "memory_summaries", "summaries"):
        incoming = []
        for row in chunk:
            if state.oversized("summaries", row):
                source_id = row.text("id")
                relink[state.summary_map.get(source_id) or state.target_uuid(source_id)] = state.link_uuid(
                    row.text("parent_summary_id", required=False), state.summary_map)
                continue
            summary = _summary_in(state, row)
            lists = (text for name in SUMMARY_LIST_FIELDS for text in summary[name])
            texts = (summary["summary"], summary["current_goal"], *lists)
            if _refused(state, "summaries", summary["source_id"], *texts):
                relink[summary["id"]] = summary["parent"]
            else:
                incoming.append(summary)
        existing = {} if state.fresh else {
            values[0]: (values[1], stored_key(values[2:], range(6, 12)))
            for values in MemorySummary.objects.filter(
                tenant=tenant, pk__in=[s["id"] for s in incoming]
            ).values_list("id", "workspace_id", *_SUMMARY_COMPARED)
        }
        staged = []
        for summary in incoming:
            stored = existing.get(summary["id"])
            if stored is not None:
                if stored[0] == ws.pk and stored[1] == _summary_key(summary):
                    state.report.skipped.summaries += 1
                else:
                    state.report.conflict(
                        "summaries", summary["source_id"], "changed",
                        "a different summary with this id is stored; summaries are append-only",
                    )
                continue
            staged.append((
                summary["id"], tenant.pk, ws.pk, summary["session_id"], summary["parent"], summary["from"],
                summary["to"], summary["summary"], summary["current_goal"], *summary["texts"],
                summary["created_at"], summary["source_id"],
            ))
        imports.summaries_stage(tenant=tenant, staging=state.staging, rows=staged)
    dropped = imports.summaries_unstage_broken_chains(
        tenant=tenant, staging=state.staging, workspace=ws, relink=_resolved(relink)
    )
    for source_id, reason in dropped:
        detail = (
            "its parent summary is neither in the file nor stored"
            if reason == "missing_parent"
            else "the stored chain already continues differently from this summary's parent"
        )
        state.report.conflict("summaries", source_id, reason, detail)
    if state.same_workspace:  # ids are kept: one another tenant uses is renamed, like an unused one
        taken = imports.summaries_staged_ids_taken(tenant=tenant, staging=state.staging)
        renames = {summary_id: state.derived_uuid(source_id) for summary_id, source_id in taken}
        if renames:
            imports.summaries_staged_rename(tenant=tenant, staging=state.staging, renames=renames)
    state.report.imported.summaries += imports.summaries_insert_staged(tenant=tenant, staging=state.staging)


def _resolved(relink: dict[UUID, UUID | None]) -> dict[UUID, UUID | None]:
    """Follow each left-out summary's parent past the other left-out ones."""
    resolved = {}
    for summary_id, parent in relink.items():
        seen = {summary_id}
        while parent in relink and parent not in seen:
            seen.add(parent)
            parent = relink[parent]
        resolved[summary_id] = parent
    return resolved


def _summary_in(state: ImportState, row: FileRow) -> dict[str, Any]:
    source_id = row.text("id")
    return {
        "id": state.summary_map.get(source_id) or state.target_uuid(source_id),
        "source_id": source_id,
        "session_id": row.text("session_id", max_length=MAX["session_id"]),
        "parent": state.link_uuid(row.text("parent_summary_id", required=False), state.summary_map),
        "from": state.message_id(row.text("from_message_id", max_length=MAX["message_id"])),
        "to": state.message_id(row.text("to_message_id", max_length=MAX["message_id"])),
        "summary": row.text("summary"),
        "current_goal": row.text("current_goal", required=False),
        "created_at": row.timestamp("created_at"),
        **{name: row.json_strings(f"{name}_json", 2**31) for name in SUMMARY_LIST_FIELDS},
        "texts": [row.values.get(f"{name}_json") or "[]" for name in SUMMARY_LIST_FIELDS],
    }


def _summary_key(summary: dict[str, Any]) -> tuple[Any, ...]:
    return (
        summary["session_id"], summary["parent"], summary["from"], summary["to"], summary["summary"],
        summary["current_goal"], *(canonical_json(summary[name]) for name in SUMMARY_LIST_FIELDS),
        summary["created_at"],
    )
