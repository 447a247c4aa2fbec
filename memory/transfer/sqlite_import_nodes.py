"""Import of a file's memory cards (`memory_nodes`, with their vectors): reading, checking, comparing.

Each file row is checked (memory.transfer.sqlite_rows), then put to the caller's write rules
(memory.transfer.import_rules: scope, owner, size, secrets) — a refused card is left out with its
reason — and compared with the stored node of the same id: identical → skipped; a file revision at
least the stored one → a new revision of the stored node; older, another workspace's, or
hard-forgotten here → a reported conflict, the stored node wins. The cards kept are staged; the
slots, chains and ids are settled and the rows written by memory.transfer.sqlite_import_slots.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.models import MemoryAuditEvent, MemoryNode, ReviewState
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import resolve_kind
from memory.rules.node_text import node_search_text
from memory.rules.sensitive import find_sensitive_node_content
from memory.services import imports_nodes
from memory.transfer.import_rules import Refusal, card_refusal, scope_refusal, too_large
from memory.transfer.report import sensitive_detail
from memory.transfer.signatures import NODE_SEARCH_COLUMNS, node_file_search_text
from memory.transfer.sqlite_format import NODE_COLUMNS, canonical_json, iso_utc, pg_array, pg_array_from_json
from memory.transfer.sqlite_import_slots import settle_and_apply
from memory.transfer.sqlite_import_state import ImportState, read_chunks, split_verified, stored_key
from memory.transfer.sqlite_rows import MAX, NODE_TYPES, REVIEW_STATES, SCOPES, STATUSES, TEXT_CAPS, FileRow
from memory.visibility import owner_ref

__all__ = ["import_nodes"]

# What "identical" means: equal values in every column but the derived search text and the bookkeeping
# that moves without new content (revision, updatedAt, seed 004's access counters).
_NODE_COMPARED = (
    "parent_id", "supersedes_id", "session_id", "user__username", "scope", "domain", "category_path", "type",
    "key", "value_json", "title", "content", "status", "confidence", "importance", "tags", "entities",
    "source_message_ids", "created_at", "expires_at", "kind", "item_key", "explicit_user_intent",
    "review_state",
)
_NODE_STORED = ("workspace_id", "revision", "owner_ref", "updated_at")
_NODE_JSON_POSITIONS = [
    _NODE_COMPARED.index(c) for c in ("category_path", "value_json", "tags", "entities", "source_message_ids")
]


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
    review_state: str
    access_count: int
    last_accessed_at: datetime | None
    search_text: str | None  # the file's, when its signature held; else segmented if staged
    vector: str | None
    vector_model: str
    owner_ref: str
    # The file's JSON texts of category_path, tags, entities, source_message_ids and value_json, staged as is.
    texts: list[str]

    def compare_key(self, state: ImportState) -> tuple[Any, ...]:
        """Return the values compared with a stored node (_NODE_COMPARED order)."""
        return (
            self.parent, self.supersedes, self.session_id, state.username(self.user), self.scope, self.domain,
            canonical_json(self.category_path), self.type, self.key, canonical_json(self.value_json),
            self.title, self.content, self.status, self.confidence, self.importance,
            canonical_json(self.tags), canonical_json(self.entities), canonical_json(self.source_message_ids),
            self.created_at, self.expires_at, self.kind, self.item_key, self.explicit_user_intent,
            self.review_state,
        )

    def secret(self) -> str | None:
        """Return why this card must not be stored (DESIGN rule 7, reading what a write reads), or None."""
        return find_sensitive_node_content(
            title=self.title, content=self.content, item_key=self.item_key, value_json=self.value_json,
            tags=self.tags, entities=self.entities,
        )

    def staged(self, state: ImportState, action: str) -> tuple[Any, ...]:
        search_text = self.search_text or node_search_text(
            title=self.title, content=self.content, value_json=self.value_json, item_key=self.item_key,
            tags=self.tags, entities=self.entities,
        )
        return (
            self.id, state.tenant_id, state.workspace_id, self.user, self.session_id, self.parent,
            self.supersedes, self.scope, self.owner_ref, self.kind, self.item_key, self.key, self.domain,
            self.texts[0], "/".join(self.category_path), self.type,
            None if self.value_json is None else self.texts[4], self.title, self.content, self.status,
            self.confidence, self.importance, self.texts[1], self.texts[2], self.texts[3],
            self.explicit_user_intent, self.review_state, self.revision, self.created_at,
            self.updated_at, self.expires_at, self.access_count, self.last_accessed_at, search_text,
            self.vector, self.vector_model, action, self.source_id,
        )


class _LeftOut(Exception):  # noqa: N818 - not an error: a row the rules keep out of the import
    def __init__(self, node_id: uuid.UUID, source_id: str, refusal: Refusal) -> None:
        self.node_id, self.source_id, self.refusal = node_id, source_id, refusal


def _node_fast(state: ImportState, row: FileRow) -> tuple[Any, ...]:
    """Return the staging row of a node this server signed (its checks held when it left the database)."""
    v = row.values
    user = state.member(v["user_id"])
    search_text = v["search_text"] or node_file_search_text(tuple(v[c] or "" for c in NODE_SEARCH_COLUMNS))
    vector, vector_model = row.vector(state.server_model)
    return (
        state.node_map[v["id"]], state.tenant_id, state.workspace_id, user, v["session_id"],
        state.link_uuid(v["parent_id"], state.node_map), state.link_uuid(v["supersedes_id"], state.node_map),
        v["scope"],
        owner_ref(
            scope=v["scope"], workspace_id=state.workspace_id, session_id=v["session_id"], user_id=user
        ),
        v["kind"], v["item_key"], v["key"], v["domain"], pg_array_from_json(v["category_path_json"]),
        v["category_path_text"], v["type"], v["value_json"], v["title"], v["content"], v["status"],
        v["confidence"], v["importance"], pg_array_from_json(v["tags_json"]),
        pg_array_from_json(v["entities_json"]),
        pg_array_from_json(v["source_message_ids_json"]), bool(v["explicit_user_intent"]),
        v["review_state"] or ReviewState.REVIEWED.value, v["revision"],
        v["created_at"], v["updated_at"], v["expires_at"], v["access_count"], v["last_accessed_at"],
        search_text, vector, vector_model, "insert", v["id"],
    )


def _fast_refusal(state: ImportState, row: FileRow) -> Refusal | None:
    """Apply the write rules to a signed row (its shape and its secrets were checked on this server)."""
    v = row.values
    oversized = row.oversized()
    if oversized is not None:
        return too_large(oversized, TEXT_CAPS["memory_nodes"][oversized])
    return card_refusal(state.viewer, scope=v["scope"], user_id=state.member(v["user_id"]),
                        username=v["user_id"])


def import_nodes(state: ImportState) -> None:
    tenant = state.tenant
    previous_versions: dict[uuid.UUID, dict[str, Any]] = {}
    for chunk in read_chunks(state, "memory_nodes", "nodes", ("memory_embeddings", "node_id")):
        verified, chunk = split_verified(state, "memory_nodes", NODE_COLUMNS, chunk)
        staged = []
        for row in verified:
            node_id = state.node_map[row.values["id"]]
            if row.values["supersedes_id"] is not None:
                state.chains.link(node_id, state.link_uuid(row.values["supersedes_id"], state.node_map))
            refusal = _fast_refusal(state, row)
            if refusal is None:
                staged.append(_node_fast(state, row))
            else:
                state.leave_out(node_id, row.values["id"], refusal.reason, refusal.detail)
        incoming = []
        for row in chunk:
            try:
                incoming.append(_node_in(state, row))
            except _LeftOut as out:
                state.leave_out(out.node_id, out.source_id, out.refusal.reason, out.refusal.detail)
        ids = [n.id for n in incoming]
        existing = {} if state.fresh else {
            values[0]: values[1:]
            for values in MemoryNode.objects.filter(tenant=tenant, pk__in=ids).values_list(
                "id", *_NODE_STORED, *_NODE_COMPARED
            )
        }
        missing = [i for i in ids if i not in existing]
        forgotten = set() if state.fresh else set(
            MemoryAuditEvent.objects.filter(tenant=tenant, node_id__in=missing)
            .values_list("node_id", flat=True)
        )
        for node in incoming:
            if node.id in forgotten:
                state.leave_out(node.id, node.source_id, "forgotten",
                                "this memory was hard-forgotten here; it is not brought back")
                continue
            stored = existing.get(node.id)
            if stored is None:
                staged.append(node.staged(state, "insert"))
                continue
            action = _compare(state, node, stored, previous_versions)
            if action is not None:
                staged.append(node.staged(state, action))
        imports_nodes.nodes_stage(tenant=tenant, staging=state.staging, rows=staged)
    settle_and_apply(state, previous_versions)


def _compare(
    state: ImportState,
    node: _Node,
    stored: tuple[Any, ...],
    previous_versions: dict[uuid.UUID, dict[str, Any]],
) -> str | None:
    """Return "update" when the file's node replaces the stored one, None when it is skipped or a conflict."""
    stored_workspace, stored_revision, stored_owner_ref, stored_updated_at = stored[:4]
    if stored_workspace != state.workspace.pk:
        state.leave_out(node.id, node.source_id, "other_workspace",
                        "a node with this id belongs to another workspace")
        return None
    if stored_key(stored[4:], _NODE_JSON_POSITIONS) == node.compare_key(state):
        state.report.skipped.nodes += 1
        return None
    if node.revision < stored_revision:
        state.leave_out(node.id, node.source_id, "stale_revision",
                        f"the file has revision {node.revision}, the stored node is at "
                        f"{stored_revision} with different content; the stored node is kept")
        return None
    previous = dict(zip(_NODE_COMPARED, stored[4:], strict=True))
    refusal = scope_refusal(state.viewer, previous["scope"])
    if refusal is not None:  # the stored card is out of the caller's reach, whatever the file says
        state.leave_out(node.id, node.source_id, refusal.reason, refusal.detail)
        return None
    node.revision = max(stored_revision + 1, node.revision)
    if (previous["scope"], previous["session_id"], previous["user__username"]) == (
        node.scope, node.session_id, state.username(node.user)
    ):
        node.owner_ref = stored_owner_ref
    previous_versions[node.id] = {
        "fromRevision": stored_revision,
        "toRevision": node.revision,
        "previous": _node_json(previous, stored_updated_at),
    }
    return "update"


def _node_in(state: ImportState, row: FileRow) -> _Node:
    """Return the checked card of a file row; raise _LeftOut when the write rules keep it out."""
    source_id = row.text("id")
    node_id = state.node_map.get(source_id) or state.target_uuid(source_id)
    supersedes = state.link_uuid(row.text("supersedes_id", required=False), state.node_map)
    state.chains.link(node_id, supersedes)
    scope = row.choice("scope", SCOPES)
    title = row.text("title", max_length=MAX["title"])
    content = row.text("content")
    oversized = row.oversized()
    if oversized is not None:
        raise _LeftOut(node_id, source_id, too_large(oversized, TEXT_CAPS["memory_nodes"][oversized]))
    tags = row.json_strings("tags_json", MAX["tag"])
    entities = row.json_strings("entities_json", MAX["entity"])
    category_path = row.json_strings("category_path_json", MAX["category"])
    if sum(map(len, category_path)) + len(category_path) > MAX["category_path_text"]:
        raise row.fail("category_path_json", "the joined path is longer than 500 characters")
    item_key = row.text("item_key", required=False, max_length=MAX["item_key"])
    kind = row.text("kind", required=False, max_length=MAX["kind"])
    key = row.text("key", required=False, max_length=MAX["key"]) or _key_of(state, source_id, kind, item_key)
    session_id = row.text("session_id", required=False, max_length=MAX["session_id"])
    username = row.text("user_id", required=False)
    user = state.member(username)
    refusal = card_refusal(state.viewer, scope=scope, user_id=user, username=username)
    if refusal is not None:
        raise _LeftOut(node_id, source_id, refusal)
    value_json = row.json("value_json")
    search_text = row.get("search_text")
    # Signed over the file's own texts, so an unchanged row verifies without re-encoding anything.
    search_inputs = tuple(row.values.get(c) or "" for c in NODE_SEARCH_COLUMNS)
    if not state.signer.verified("node", search_inputs, search_text, row.get("search_text_sig")):
        search_text = None  # segmented only if the node is staged
    vector, vector_model = row.vector(state.server_model)
    renames = state.message_renames
    sources = row.json_strings("source_message_ids_json", MAX["message_id"])
    if renames and any(i in renames for i in sources):
        sources = [renames.get(i, i) for i in sources]
    texts = [
        pg_array(category_path), pg_array(tags), pg_array(entities), pg_array(sources),
        row.values.get("value_json") or "null",
    ]
    node = _Node(
        id=node_id,
        source_id=source_id,
        parent=state.link_uuid(row.text("parent_id", required=False), state.node_map),
        supersedes=supersedes,
        session_id=session_id,
        user=user,
        scope=scope,
        domain=row.text("domain", max_length=MAX["domain"]),
        category_path=category_path,
        type=row.choice("type", NODE_TYPES),
        key=key,
        value_json=value_json,
        title=title,
        content=content,
        status=row.choice("status", STATUSES),
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
        kind=kind or key.split(":", 1)[0][: MAX["kind"]],
        item_key=item_key,
        explicit_user_intent=bool(row.integer("explicit_user_intent", high=1)),
        review_state=row.choice("review_state", REVIEW_STATES, default=ReviewState.REVIEWED.value),
        access_count=row.integer("access_count"),
        last_accessed_at=row.timestamp("last_accessed_at", required=False),
        search_text=search_text,
        vector=vector,
        vector_model=vector_model,
        owner_ref=owner_ref(
            scope=scope, workspace_id=state.workspace_id, session_id=session_id, user_id=user
        ),
    )
    # A card this server signed passed rule 7 when it was written here; any other is checked now.
    signed = state.file.has("memory_nodes", "row_sig") and state.signer.row_verified(
        "memory_nodes", NODE_COLUMNS, row.values)
    secret = None if signed else node.secret()
    if secret is not None:
        raise _LeftOut(node_id, source_id, Refusal("sensitive_content", sensitive_detail(secret)))
    return node


def _key_of(state: ImportState, source_id: str, kind: str | None, item_key: str | None) -> str:
    """Return the key of a file row that has none: its kind's canonical key, else a key of its own."""
    if kind:
        try:
            return canonical_key(resolve_kind(kind, state.tenant_kinds()), item_key)
        except SchemaError:
            pass  # not a kind of this tenant, or an itemized kind without a usable item key
    return f"unkeyed:{source_id}"[: MAX["key"]]


def _node_json(previous: dict[str, Any], updated_at: datetime) -> dict[str, Any]:
    """Return the API-shaped previous values of a node, kept in the import's update audit event."""
    return {
        "title": previous["title"],
        "content": previous["content"],
        "status": previous["status"],
        "reviewState": previous["review_state"],
        "valueJson": previous["value_json"],
        "scope": previous["scope"],
        "key": previous["key"],
        "confidence": previous["confidence"],
        "importance": previous["importance"],
        "tags": previous["tags"],
        "entities": previous["entities"],
        "sourceMessageIds": previous["source_message_ids"],
        "expiresAt": iso_utc(previous["expires_at"]),
        "supersedesId": None if previous["supersedes_id"] is None else str(previous["supersedes_id"]),
        "parentId": None if previous["parent_id"] is None else str(previous["parent_id"]),
        "updatedAt": iso_utc(updated_at),
    }
