"""Typed request and response bodies. Python names are snake_case; on the wire they are API.md's camelCase.

Responses accept fields this version does not know (a newer server may add them), so an upgrade of the
service never breaks an older client; requests drop fields left as None.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

Scope = Literal["session", "workspace", "user", "global"]


class Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- requests -------------------------------------------------------------------------------------------


class MessageInput(Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    id: str | None = None
    parent_id: str | None = None
    agent_name: str | None = None
    channel: Literal["main", "subagent"] | None = None
    metadata: dict[str, Any] | None = None
    created_at: str | None = None


class MessageCapture(Body):
    session_id: str
    messages: list[MessageInput]
    workspace_id: str | None = None
    user_id: str | None = None


class MessageSearch(Body):
    query_text: str
    workspace_id: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    include_subagent: bool | None = None
    limit: int | None = None


class MemoryQuery(Body):
    user_id: str | None = None
    workspace_id: str | None = None
    session_id: str | None = None
    scopes: list[Scope] | None = None
    domain: str | None = None
    category_path_prefix: list[str] | None = None
    types: list[str] | None = None
    kinds: list[str] | None = None
    key: str | None = None
    value_json: Any = None
    tags: list[str] | None = None
    entities: list[str] | None = None
    query_text: str | None = None
    include_expired: bool | None = None
    all: bool | None = None
    limit: int | None = None


class NodeDraft(Body):
    kind: str | None = None
    item_key: str | None = None
    scope: Scope | None = None
    domain: str | None = None
    category_path: list[str] | None = None
    type: str | None = None
    value_json: Any = None
    title: str | None = None
    content: str | None = None
    confidence: float | None = None
    importance: float | None = None
    tags: list[str] | None = None
    entities: list[str] | None = None
    expires_at: str | None = None
    session_id: str | None = None
    workspace_id: str | None = None
    user_id: str | None = None


class WriteOperation(Body):
    operation: Literal["create", "update", "supersede", "expire", "accept"]
    reason: str | None = None
    target_id: str | None = None
    expected_revision: int | None = None
    node: NodeDraft | None = None


class MemoryWrite(Body):
    operations: list[WriteOperation]
    explicit_user_intent: bool = False
    source_message_ids: list[str] = Field(default_factory=list)


class MemorySelector(Body):
    type: str | None = None
    kind: str | None = None
    key: str | None = None
    value_json: Any = None
    scope: Scope | None = None
    domain: str | None = None


class ForgetTarget(Body):
    id: str
    expected_revision: int


class MemoryForget(Body):
    reason: str
    explicit_user_intent: bool = True
    id: str | None = None
    expected_revision: int | None = None
    targets: list[ForgetTarget] | None = None
    all: bool | None = None
    scope: Scope | None = None
    domain: str | None = None
    category_path_prefix: list[str] | None = None
    type: str | None = None
    kind: str | None = None
    key: str | None = None
    value_json: Any = None
    mode: Literal["soft", "hard"] | None = None
    purge_evidence: bool | None = None


class ContextRequest(Body):
    session_id: str
    query_text: str
    workspace_id: str | None = None
    user_id: str | None = None
    token_budget: int | None = None


class SummaryCreate(Body):
    session_id: str
    from_message_id: str
    to_message_id: str
    summary: str
    parent_summary_id: str | None = None
    current_goal: str | None = None
    constraints: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    completed_work: list[str] = Field(default_factory=list)
    pending_work: list[str] = Field(default_factory=list)
    known_issues: list[str] = Field(default_factory=list)


class OrganizeRequest(Body):
    scope: Scope | None = None
    user_id: str | None = None
    workspace_id: str | None = None
    mode: Literal["manual", "scheduled"] | None = None
    apply_mode: Literal["review", "auto_low"] | None = None


# --- responses ------------------------------------------------------------------------------------------


class Workspace(Body):
    id: str
    name: str
    slug: str
    created_at: str | None = None


class WorkspaceList(Body):
    workspaces: list[Workspace]


class Message(Body):
    id: str
    session_id: str
    role: str
    content: str
    created_at: str
    workspace_id: str | None = None
    user_id: str | None = None
    parent_id: str | None = None
    channel: str | None = None
    agent_name: str | None = None
    metadata: Any = None


class MessageList(Body):
    messages: list[Message]


class MessageHit(Body):
    id: str
    session_id: str
    role: str
    content: str
    created_at: str
    score: float


class MessageSearchResult(Body):
    messages: list[MessageHit]
    diagnostics: dict[str, Any] = Field(default_factory=dict)


class MemoryNode(Body):
    id: str
    key: str
    kind: str
    revision: int
    scope: Scope
    workspace_id: str
    domain: str
    type: str
    title: str
    content: str
    status: Literal["active", "superseded", "expired", "deleted"]
    confidence: float
    importance: float
    item_key: str | None = None
    parent_id: str | None = None
    supersedes_id: str | None = None
    superseded_by_id: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    category_path: list[str] = Field(default_factory=list)
    value_json: Any = None
    tags: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    source_message_ids: list[str] = Field(default_factory=list)
    explicit_user_intent: bool = False
    review_state: Literal["reviewed", "unreviewed"] | None = None
    created_at: str | None = None
    updated_at: str | None = None
    expires_at: str | None = None
    access_count: int = 0
    last_accessed_at: str | None = None


class Omitted(Body):
    node_id: str
    reason: str


class SearchResult(Body):
    exact: list[MemoryNode]
    relevant: list[MemoryNode]
    omitted: list[Omitted] = Field(default_factory=list)
    diagnostics: dict[str, Any] = Field(default_factory=dict)


class NodeEnvelope(Body):
    node: MemoryNode | None


class AuditEvent(Body):
    id: str
    event_type: str
    actor: str
    reason: str
    created_at: str
    node_id: str | None = None
    payload: Any = None


class NodeHistory(Body):
    chain: list[MemoryNode]
    events: list[AuditEvent]


class WriteResultItem(Body):
    operation: str
    action: Literal["created", "updated", "superseded", "expired", "noop", "accepted"] | str
    node_id: str
    revision: int
    key: str


class WriteResult(Body):
    done: bool
    results: list[WriteResultItem]


class ForgetResult(Body):
    deleted_ids: list[str]
    mode: Literal["soft", "hard"]
    receipt: dict[str, Any] | None = None


class Summary(Body):
    id: str
    session_id: str
    summary: str
    from_message_id: str
    to_message_id: str
    created_at: str


class SummaryEnvelope(Body):
    summary: Summary | None


class Context(Body):
    prompt: str
    recent_messages: list[dict[str, Any]]
    latest_summary: Summary | None = None
    active_tasks: list[MemoryNode] = Field(default_factory=list)
    constraints: list[MemoryNode] = Field(default_factory=list)
    preferences: list[MemoryNode] = Field(default_factory=list)
    relevant_nodes: list[MemoryNode] = Field(default_factory=list)
    used_memory_ids: list[str] = Field(default_factory=list)
    diagnostics: dict[str, Any] = Field(default_factory=dict)


class ExtractQueued(Body):
    task_id: str


class ExtractStatus(Body):
    task_id: str
    state: str
    results: Any = None


class ImportReport(Body):
    imported: dict[str, int]
    skipped: dict[str, int] = Field(default_factory=dict)
    conflicts: list[Any] = Field(default_factory=list)


class ToolList(Body):
    tools: list[dict[str, Any]]


class ScopeQuota(Body):
    scope: str
    owner: str
    used: int
    limit: int
    headroom: int
    unreviewed: int
    oldest_unreviewed_days: int | None = None
    level: str | None = None


class QuotaReport(Body):
    level: str
    scopes: list[ScopeQuota]


class OrganizeQueued(Body):
    run_id: str


class OrganizeItem(Body):
    id: str
    action: str
    members: list[str]
    target_id: str | None = None
    risk: str
    risk_reasons: list[str] = Field(default_factory=list)
    decision: str
    planner: str
    reason: str = ""
    proposed: dict[str, Any] | None = None
    result_node_id: str | None = None


class OrganizeRun(Body):
    state: str
    phase: str
    before: int | None = None
    after: int | None = None
    compression_ratio: float | None = None
    items: list[OrganizeItem] = Field(default_factory=list)
