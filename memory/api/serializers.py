"""Request bodies (input serializers, camelCase as API.md spells them) and response shapes for the schema.

Input serializers map camelCase fields to the snake_case names services take (`source=`).
Response serializers describe what memory.presenters renders; the API tests validate every
response against the OpenAPI schema generated from them, so the two cannot drift apart.
"""

from __future__ import annotations

from rest_framework import serializers

from memory.models import Channel, NodeStatus, NodeType, ReviewState, Role
from memory.rules.errors import SchemaError
from memory.rules.kinds import JOURNAL_KIND, resolve_kind
from memory.rules.text import MAX_TEXT
from tenants.models import Scope

SCOPES = [s.value for s in Scope]
# What a search ran (diagnostics.searchModes): memory/search may report only these.
SEARCH_MODES = ["structured", "list_all", "keyword", "vector", "rerank"]


def _search_modes() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=SEARCH_MODES),
        help_text="What ran: structured filters, list-all, the keyword and vector arms, and `rerank` when "
                  "the configured reranker (EKKO_RERANK_BASE_URL) reordered the best candidates.")


def _strings(max_length: int = 200, **kwargs) -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(max_length=max_length), max_length=100, **kwargs)


def _is_journal(kind: object) -> bool:
    try:
        return isinstance(kind, str) and resolve_kind(kind).name == JOURNAL_KIND
    except SchemaError:
        return False


class IdOrSlugField(serializers.CharField):
    """A workspace id or slug; integers are accepted too."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, int):
            data = str(data)
        return super().to_internal_value(data)


class ValueJsonMixin:
    """Records whether `valueJson` was sent at all (null is a value; absence is not)."""

    def to_internal_value(self, data: object) -> dict:
        attrs = super().to_internal_value(data)  # type: ignore[misc]
        attrs["value_json_given"] = isinstance(data, dict) and "valueJson" in data
        return attrs


# --- workspaces -----------------------------------------------------------------------------------

class WorkspaceCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)


class WorkspaceSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    slug = serializers.CharField()
    createdAt = serializers.DateTimeField()


class WorkspaceListSerializer(serializers.Serializer):
    workspaces = WorkspaceSerializer(many=True)


# --- messages -------------------------------------------------------------------------------------

class MessageInputSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=128, required=False)
    role = serializers.ChoiceField(choices=Role.values)
    content = serializers.CharField(max_length=MAX_TEXT, trim_whitespace=False)
    parentId = serializers.CharField(max_length=128, required=False, allow_null=True, source="parent_id")
    agentName = serializers.CharField(max_length=200, required=False, allow_blank=True, source="agent_name")
    channel = serializers.ChoiceField(choices=Channel.values, required=False)
    metadata = serializers.DictField(required=False, allow_null=True)
    createdAt = serializers.DateTimeField(required=False, source="created_at")


class MessageCaptureSerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    messages = MessageInputSerializer(many=True, allow_empty=False)


class MessageSerializer(serializers.Serializer):
    id = serializers.CharField()
    sessionId = serializers.CharField()
    workspaceId = serializers.CharField()
    userId = serializers.CharField(allow_null=True)
    parentId = serializers.CharField(allow_null=True)
    role = serializers.ChoiceField(choices=Role.values)
    content = serializers.CharField()
    channel = serializers.ChoiceField(choices=Channel.values)
    agentName = serializers.CharField(allow_null=True)
    metadata = serializers.JSONField(allow_null=True)
    createdAt = serializers.DateTimeField()


class MessageListSerializer(serializers.Serializer):
    messages = MessageSerializer(many=True)


class MessageListQuerySerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, source="workspace_id")
    limit = serializers.IntegerField(min_value=1, max_value=500, default=50)


class MessageSearchSerializer(serializers.Serializer):
    queryText = serializers.CharField(max_length=2000, source="query_text")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    sessionId = serializers.CharField(max_length=200, required=False, allow_null=True, source="session_id")
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    includeSubagent = serializers.BooleanField(default=False, source="include_subagent")
    limit = serializers.IntegerField(min_value=1, max_value=200, default=20)


class DiagnosticsSerializer(serializers.Serializer):
    storeStatus = serializers.CharField(required=False)
    searchModes = _search_modes()


class MessageHitSerializer(serializers.Serializer):
    id = serializers.CharField()
    sessionId = serializers.CharField()
    role = serializers.CharField()
    content = serializers.CharField()
    createdAt = serializers.DateTimeField()
    score = serializers.FloatField()


class MessageSearchResultSerializer(serializers.Serializer):
    messages = MessageHitSerializer(many=True)
    diagnostics = DiagnosticsSerializer()


# --- nodes ----------------------------------------------------------------------------------------

class MemoryNodeSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    key = serializers.CharField()
    kind = serializers.CharField()
    itemKey = serializers.CharField(allow_null=True)
    revision = serializers.IntegerField()
    parentId = serializers.UUIDField(allow_null=True)
    supersedesId = serializers.UUIDField(allow_null=True)
    supersededById = serializers.UUIDField(allow_null=True)
    scope = serializers.ChoiceField(choices=SCOPES)
    sessionId = serializers.CharField(allow_null=True)
    workspaceId = serializers.CharField()
    userId = serializers.CharField(allow_null=True)
    domain = serializers.CharField()
    categoryPath = serializers.ListField(child=serializers.CharField())
    type = serializers.ChoiceField(choices=NodeType.values)
    valueJson = serializers.JSONField(allow_null=True)
    title = serializers.CharField()
    content = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=NodeStatus.values)
    reviewState = serializers.ChoiceField(
        choices=ReviewState.values,
        help_text="unreviewed: inferred by the extractor, not yet accepted by a person or agent.")
    confidence = serializers.FloatField()
    importance = serializers.FloatField()
    tags = serializers.ListField(child=serializers.CharField())
    entities = serializers.ListField(child=serializers.CharField())
    sourceMessageIds = serializers.ListField(child=serializers.CharField())
    explicitUserIntent = serializers.BooleanField()
    createdAt = serializers.DateTimeField()
    updatedAt = serializers.DateTimeField()
    expiresAt = serializers.DateTimeField(allow_null=True)
    accessCount = serializers.IntegerField()
    lastAccessedAt = serializers.DateTimeField(allow_null=True)


class MemoryQuerySerializer(ValueJsonMixin, serializers.Serializer):
    """MemoryQuery of seed 000: structured fields filter exactly; queryText ranks by relevance."""

    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    sessionId = serializers.CharField(max_length=200, required=False, allow_null=True, source="session_id")
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=SCOPES), required=False, max_length=4)
    domain = serializers.CharField(max_length=100, required=False, allow_null=True)
    categoryPathPrefix = _strings(100, required=False, source="category_path_prefix")
    types = serializers.ListField(child=serializers.ChoiceField(choices=NodeType.values), required=False, max_length=8)
    kinds = _strings(64, required=False)
    key = serializers.CharField(max_length=255, required=False, allow_null=True)
    valueJson = serializers.JSONField(required=False, allow_null=True, source="value_json")
    tags = _strings(100, required=False)
    entities = _strings(200, required=False)
    queryText = serializers.CharField(max_length=2000, required=False, allow_null=True, allow_blank=True,
                                      source="query_text")
    includeExpired = serializers.BooleanField(default=False, source="include_expired")
    all = serializers.BooleanField(default=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)


class OmittedSerializer(serializers.Serializer):
    nodeId = serializers.UUIDField()
    reason = serializers.ChoiceField(choices=["expired", "superseded", "low_confidence", "conflict_lost",
                                              "over_limit"])


class SearchHitSerializer(serializers.Serializer):
    nodeId = serializers.UUIDField()
    score = serializers.FloatField(help_text="The fused relevance score, comparable within one answer.")
    foundBy = serializers.ListField(child=serializers.ChoiceField(choices=["keyword", "vector"]),
                                    help_text="The arms that returned the card.")
    keywordCoverage = serializers.FloatField(allow_null=True, help_text=(
        "The share of the query's term weight (BM25 idf) the card contains; null without a keyword match."))
    vectorDistance = serializers.FloatField(allow_null=True, help_text=(
        "Cosine distance between the query's and the card's vectors; null when either has none."))


class SearchDiagnosticsSerializer(serializers.Serializer):
    storeStatus = serializers.CharField()
    retrievedNodeCount = serializers.IntegerField()
    omittedNodeCount = serializers.IntegerField()
    listAll = serializers.BooleanField()
    searchModes = _search_modes()
    hits = SearchHitSerializer(many=True, required=False, help_text=(
        "With queryText: each card of `relevant`, in order, with its score and the arms that found it."))


class MemorySearchResultSerializer(serializers.Serializer):
    exact = MemoryNodeSerializer(many=True)
    relevant = MemoryNodeSerializer(many=True)
    omitted = OmittedSerializer(many=True)
    diagnostics = SearchDiagnosticsSerializer()


class MemoryGetSerializer(ValueJsonMixin, serializers.Serializer):
    """Selector of memory_get: the one active node matching every given field."""

    type = serializers.ChoiceField(choices=NodeType.values, required=False)
    kind = serializers.CharField(max_length=64, required=False)
    key = serializers.CharField(max_length=255, required=False)
    valueJson = serializers.JSONField(required=False, allow_null=True, source="value_json")
    scope = serializers.ChoiceField(choices=SCOPES, required=False)
    domain = serializers.CharField(max_length=100, required=False)
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")


class NodeEnvelopeSerializer(serializers.Serializer):
    node = MemoryNodeSerializer(allow_null=True)


class AuditEventSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    eventType = serializers.CharField()
    nodeId = serializers.UUIDField(allow_null=True)
    sessionId = serializers.CharField(allow_null=True)
    workspaceId = serializers.CharField(allow_null=True)
    actor = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    payload = serializers.JSONField(allow_null=True)
    createdAt = serializers.DateTimeField()
    sequence = serializers.IntegerField(required=False, help_text="Position in the tenant's audit chain.")
    digest = serializers.CharField(required=False, help_text="Chain digest (docs/erasure.md).")


class NodeHistorySerializer(serializers.Serializer):
    chain = MemoryNodeSerializer(many=True)
    events = AuditEventSerializer(many=True)


class NodeDraftSerializer(ValueJsonMixin, serializers.Serializer):
    kind = serializers.CharField(max_length=64, required=False)
    itemKey = serializers.CharField(max_length=200, required=False, allow_null=True, source="item_key")
    scope = serializers.ChoiceField(choices=SCOPES, required=False)
    domain = serializers.CharField(max_length=100, required=False)
    categoryPath = _strings(100, required=False, source="category_path")
    type = serializers.ChoiceField(choices=NodeType.values, required=False)
    valueJson = serializers.JSONField(required=False, allow_null=True, source="value_json")
    title = serializers.CharField(max_length=500, required=False)
    content = serializers.CharField(max_length=MAX_TEXT, required=False, allow_blank=True)
    confidence = serializers.FloatField(min_value=0, max_value=1, required=False)
    importance = serializers.FloatField(min_value=0, max_value=1, required=False)
    tags = _strings(100, required=False)
    entities = _strings(200, required=False)
    expiresAt = serializers.DateTimeField(required=False, allow_null=True, source="expires_at")
    sessionId = serializers.CharField(max_length=200, required=False, allow_null=True, source="session_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    sourceQuote = serializers.CharField(max_length=2000, required=False, allow_null=True, source="source_quote",
                                        help_text="Verbatim words of the cited messages backing high confidence.")


class WriteOperationSerializer(serializers.Serializer):
    # accept marks an unreviewed card (one the extractor inferred) reviewed: targetId, expectedRevision.
    operation = serializers.ChoiceField(choices=["create", "update", "supersede", "expire", "accept"])
    targetId = serializers.UUIDField(required=False, allow_null=True, source="target_id")
    expectedRevision = serializers.IntegerField(min_value=1, required=False, allow_null=True,
                                                source="expected_revision")
    node = NodeDraftSerializer(required=False)
    reason = serializers.CharField(max_length=2000)

    def validate(self, attrs: dict) -> dict:
        if attrs["operation"] == "create":
            node = attrs.get("node") or {}
            # A journal entry is its text (valueJson or content); its title defaults to the date.
            needed = ("kind",) if _is_journal(node.get("kind")) else ("kind", "title", "content")
            missing = [name for name in needed if not node.get(name)]
            if missing:
                raise serializers.ValidationError({"node": {m: ["required for create"] for m in missing}})
        elif attrs.get("target_id") is None or attrs.get("expected_revision") is None:
            raise serializers.ValidationError(
                {"targetId": ["required for update/supersede/expire/accept (with expectedRevision)"]})
        return attrs


class MemoryWriteSerializer(serializers.Serializer):
    operations = WriteOperationSerializer(many=True, allow_empty=False)
    explicitUserIntent = serializers.BooleanField(source="explicit_user_intent")
    sourceMessageIds = _strings(128, required=False, source="source_message_ids")


class WriteResultSerializer(serializers.Serializer):
    operation = serializers.CharField()
    action = serializers.ChoiceField(
        choices=["created", "updated", "superseded", "expired", "accepted", "noop"])
    nodeId = serializers.UUIDField()
    revision = serializers.IntegerField()
    key = serializers.CharField()
    scope = serializers.CharField()
    appliedConfidence = serializers.FloatField()
    autoDowngraded = serializers.BooleanField()
    notes = serializers.ListField(child=serializers.CharField())


class MemoryWriteResultSerializer(serializers.Serializer):
    done = serializers.BooleanField()
    results = WriteResultSerializer(many=True)


class ForgetTargetSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    expectedRevision = serializers.IntegerField(min_value=1, source="expected_revision")


class MemoryForgetSerializer(ValueJsonMixin, serializers.Serializer):
    id = serializers.UUIDField(required=False, allow_null=True)
    expectedRevision = serializers.IntegerField(min_value=1, required=False, allow_null=True,
                                                source="expected_revision")
    targets = ForgetTargetSerializer(many=True, required=False, max_length=100)
    all = serializers.BooleanField(default=False)
    scope = serializers.ChoiceField(choices=SCOPES, required=False)
    domain = serializers.CharField(max_length=100, required=False)
    categoryPathPrefix = _strings(100, required=False, source="category_path_prefix")
    type = serializers.ChoiceField(choices=NodeType.values, required=False)
    kind = serializers.CharField(max_length=64, required=False)
    key = serializers.CharField(max_length=255, required=False)
    valueJson = serializers.JSONField(required=False, allow_null=True, source="value_json")
    mode = serializers.ChoiceField(choices=["soft", "hard"], default="soft")
    purgeEvidence = serializers.BooleanField(
        default=False, source="purge_evidence",
        help_text="Hard mode only: also erase the cited messages and redact the summaries that cover them.")
    reason = serializers.CharField(max_length=2000)
    explicitUserIntent = serializers.BooleanField(source="explicit_user_intent")
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    sessionId = serializers.CharField(max_length=200, required=False, allow_null=True, source="session_id")


class ErasureReceiptSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="The receipt's audit event (eventType `erase`).")
    removed = serializers.DictField(child=serializers.IntegerField(),
                                    help_text="Rows deleted or erased in place, per table (docs/erasure.md).")
    createdAt = serializers.DateTimeField()
    digest = serializers.CharField(help_text="The receipt event's digest in the tenant's audit chain.")


class MemoryForgetResultSerializer(serializers.Serializer):
    deletedIds = serializers.ListField(child=serializers.UUIDField())
    mode = serializers.ChoiceField(choices=["soft", "hard"])
    derivedIds = serializers.ListField(
        child=serializers.UUIDField(), required=False,
        help_text="Hard mode: cards the extractor derived from the same evidence, erased with them.")
    receipt = ErasureReceiptSerializer(required=False, help_text="Hard mode: the erasure receipt.")


# --- summaries ------------------------------------------------------------------------------------

class SummaryCreateSerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    parentSummaryId = serializers.UUIDField(required=False, allow_null=True, source="parent_summary_id")
    fromMessageId = serializers.CharField(max_length=128, source="from_message_id")
    toMessageId = serializers.CharField(max_length=128, source="to_message_id")
    summary = serializers.CharField(max_length=MAX_TEXT)
    currentGoal = serializers.CharField(max_length=2000, required=False, allow_null=True, source="current_goal")
    constraints = _strings(2000, default=list)
    preferences = _strings(2000, default=list)
    decisions = _strings(2000, default=list)
    completedWork = _strings(2000, default=list, source="completed_work")
    pendingWork = _strings(2000, default=list, source="pending_work")
    knownIssues = _strings(2000, default=list, source="known_issues")


class SummarySerializer(serializers.Serializer):
    id = serializers.UUIDField()
    sessionId = serializers.CharField()
    workspaceId = serializers.CharField()
    parentSummaryId = serializers.UUIDField(allow_null=True)
    fromMessageId = serializers.CharField()
    toMessageId = serializers.CharField()
    summary = serializers.CharField()
    currentGoal = serializers.CharField(allow_null=True)
    constraints = serializers.ListField(child=serializers.CharField())
    preferences = serializers.ListField(child=serializers.CharField())
    decisions = serializers.ListField(child=serializers.CharField())
    completedWork = serializers.ListField(child=serializers.CharField())
    pendingWork = serializers.ListField(child=serializers.CharField())
    knownIssues = serializers.ListField(child=serializers.CharField())
    createdAt = serializers.DateTimeField()


class SummaryLatestQuerySerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, source="workspace_id")


class SummaryEnvelopeSerializer(serializers.Serializer):
    summary = SummarySerializer(allow_null=True)


# --- context --------------------------------------------------------------------------------------

class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false, nothing else: "yes", 1 or "true" are refused rather than guessed at."""

    def to_internal_value(self, data):  # noqa: ANN001, ANN201
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)


class ContextRequestSerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    userId = serializers.CharField(max_length=150, required=False, allow_null=True, source="user_id")
    queryText = serializers.CharField(max_length=4000, allow_blank=True, source="query_text")
    tokenBudget = serializers.IntegerField(min_value=1, max_value=200_000, default=4000, source="token_budget")
    includeJournal = StrictBooleanField(
        default=False, source="include_journal",
        help_text="Also recall the person's journal (kind journal): their latest dates and the journal cards "
                  "queryText finds. Off by default: a journal is personal and long.")


class ContextDiagnosticsSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    storeStatus = serializers.ChoiceField(choices=["ok", "degraded", "disabled"])
    warnings = serializers.ListField(child=serializers.CharField())
    retrievedNodeCount = serializers.IntegerField()
    omittedNodeCount = serializers.IntegerField()
    tokenBudget = serializers.IntegerField()
    usedTokens = serializers.IntegerField()


class ContextSerializer(serializers.Serializer):
    recentMessages = MessageSerializer(many=True)
    latestSummary = SummarySerializer(allow_null=True)
    activeTasks = MemoryNodeSerializer(many=True)
    constraints = MemoryNodeSerializer(many=True)
    preferences = MemoryNodeSerializer(many=True)
    relevantNodes = MemoryNodeSerializer(many=True)
    usedMemoryIds = serializers.ListField(child=serializers.UUIDField())
    prompt = serializers.CharField(allow_blank=True)
    diagnostics = ContextDiagnosticsSerializer()


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False)


class ConflictSerializer(ErrorSerializer):
    """A 409: `revision_conflict` says where the target is now, `requires_confirmation` what matched."""

    currentRevision = serializers.IntegerField(
        required=False, help_text="revision_conflict: the target's revision as stored now.")
    status = serializers.ChoiceField(
        choices=["active", "superseded", "expired", "deleted"], required=False,
        help_text="revision_conflict: the target's status as stored now.")
    supersededById = serializers.UUIDField(
        required=False, help_text="revision_conflict on a superseded target: the newest revision of its "
                                  "chain (the active card); read it and retry with its id and revision.")
    candidates = MemoryNodeSerializer(
        many=True, required=False, help_text="requires_confirmation: the memories that matched.")
