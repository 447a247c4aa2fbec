"""Memory tables (seed 000 with seed 003's `key`/`revision` and seed 004's access and channel fields).

Every table is tenant-owned: its rows carry `tenant_id`, its unique constraints and hot indexes
start with it, and row-level security keys on it. Only memory.services.nodes mutates these rows.
`search_text` holds jieba-segmented text; PostgreSQL derives the `search_vector` tsvector from it.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from pgvector.django import HnswIndex, VectorField

from memory.rules.kinds import ALWAYS_RECALLED_KINDS
from tenants.models import Scope, TenantOwnedModel, Workspace

EMBEDDING_DIM = settings.EKKO_EMBEDDING_DIM


def vector_text(values) -> str:  # noqa: ANN001 - any sequence of numbers
    """Return pgvector's text form of a vector (a literal or a text parameter cast to `vector`)."""
    return "[" + ",".join(repr(float(value)) for value in values) + "]"
# The search columns of MemoryNode and MemoryMessage: large and never shown, so every list defers them.
HEAVY_FIELDS = ("embedding", "search_vector", "search_text")


class Role(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class Channel(models.TextChoices):
    MAIN = "main"
    SUBAGENT = "subagent"


class NodeType(models.TextChoices):
    PREFERENCE = "preference"
    FACT = "fact"
    DECISION = "decision"
    TASK = "task"
    RECIPE = "recipe"
    SKILL = "skill"
    CONSTRAINT = "constraint"
    CORRECTION = "correction"


class ReviewState(models.TextChoices):
    """Whether a person (or an agent's explicit write) stands behind a card, or an extractor inferred it."""

    REVIEWED = "reviewed"
    UNREVIEWED = "unreviewed"


class NodeStatus(models.TextChoices):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    DELETED = "deleted"


# The cards every context pack considers (memory.search.context.node_list_standing): active always-recalled
# kinds first, then tasks, constraints and preferences. node_recalled_idx and node_standing_idx hold
# exactly these, each in the pack's order, so each read stops at its limit.
RECALLED_CARDS = Q(status=NodeStatus.ACTIVE, kind__in=sorted(ALWAYS_RECALLED_KINDS))
STANDING_CARDS = RECALLED_CARDS | Q(
    status=NodeStatus.ACTIVE, type__in=[NodeType.TASK, NodeType.CONSTRAINT, NodeType.PREFERENCE])


class AuditEventType(models.TextChoices):
    CREATE = "create"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    EXPIRE = "expire"
    DELETE = "delete"
    RESTORE = "restore"
    # A person or agent stood behind an unreviewed card (memory/write `accept`).
    ACCEPT = "accept"
    # The erasure receipt of one hard forget: content-free, part of the tenant's audit chain.
    ERASE = "erase"


def _search_vector() -> models.GeneratedField:
    return models.GeneratedField(
        expression=SearchVector("search_text", config="simple"),
        output_field=SearchVectorField(),
        db_persist=True,
    )


class MemoryMessage(TenantOwnedModel):
    """Evidence: one conversation message, append-only."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    message_id = models.CharField(max_length=128, help_text="The API `id`: client-given or generated.")
    session_id = models.CharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    parent_id = models.CharField(max_length=128, null=True, blank=True)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    channel = models.CharField(max_length=16, choices=Channel.choices, default=Channel.MAIN)
    agent_name = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(null=True, blank=True)
    token_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    search_text = models.TextField(blank=True, default="")
    search_vector = _search_vector()
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "workspace", "message_id"], name="message_tenant_ws_id_uniq"),
        ]
        indexes = [
            models.Index(fields=["tenant", "workspace", "session_id", "created_at"], name="message_session_idx"),
            GinIndex(fields=["search_vector"], name="message_search_gin"),
            HnswIndex(name="message_embedding_hnsw", fields=["embedding"], m=16, ef_construction=64,
                      opclasses=["vector_cosine_ops"]),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.message_id}"


class MemorySummary(TenantOwnedModel):
    """One link of a session's summary chain (append-only; `parent_summary` points to the previous)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    session_id = models.CharField(max_length=200)
    parent_summary = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    from_message_id = models.CharField(max_length=128)
    to_message_id = models.CharField(max_length=128)
    summary = models.TextField()
    current_goal = models.TextField(null=True, blank=True)
    constraints = models.JSONField(default=list)
    preferences = models.JSONField(default=list)
    decisions = models.JSONField(default=list)
    completed_work = models.JSONField(default=list)
    pending_work = models.JSONField(default=list)
    known_issues = models.JSONField(default=list)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            # A chain never forks: each summary has at most one successor (and one root per session).
            models.UniqueConstraint(fields=["tenant", "workspace", "session_id", "parent_summary"],
                                    nulls_distinct=False, name="summary_chain_uniq"),
        ]
        indexes = [
            models.Index(fields=["tenant", "workspace", "session_id", "created_at"], name="summary_session_idx"),
        ]


class MemoryNode(TenantOwnedModel):
    """A memory card: the only long-term memory."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    session_id = models.CharField(max_length=200, null=True, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    supersedes = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="superseded_by_set")
    scope = models.CharField(max_length=16, choices=Scope.choices)
    owner_ref = models.CharField(
        max_length=300, help_text="Whose slot this is: the scope's owner (session, workspace, user or global)."
    )
    kind = models.CharField(max_length=64)
    item_key = models.CharField(max_length=128, null=True, blank=True)
    key = models.CharField(max_length=255)
    domain = models.CharField(max_length=100)
    category_path = ArrayField(models.CharField(max_length=100), default=list)
    category_path_text = models.CharField(max_length=500, default="")
    type = models.CharField(max_length=16, choices=NodeType.choices)
    value_json = models.JSONField(null=True, blank=True)
    title = models.CharField(max_length=500)
    content = models.TextField()
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.ACTIVE)
    confidence = models.FloatField(default=0.7)
    importance = models.FloatField(default=0.6)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    entities = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    source_message_ids = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    explicit_user_intent = models.BooleanField(default=False)
    review_state = models.CharField(max_length=16, choices=ReviewState.choices, default=ReviewState.REVIEWED,
                                    db_default=ReviewState.REVIEWED)
    revision = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    search_text = models.TextField(blank=True, default="")
    search_vector = _search_vector()
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            # One active card per slot: concurrent writers cannot create duplicates.
            models.UniqueConstraint(fields=["tenant", "scope", "owner_ref", "key"],
                                    condition=Q(status="active"), name="node_active_slot_uniq"),
            models.CheckConstraint(condition=Q(confidence__gte=0) & Q(confidence__lte=1),
                                   name="node_confidence_range"),
            models.CheckConstraint(condition=Q(importance__gte=0) & Q(importance__lte=1),
                                   name="node_importance_range"),
        ]
        indexes = [
            models.Index(fields=["tenant", "scope", "status", "domain", "type", "importance", "updated_at"],
                         name="node_lookup_idx"),
            models.Index(fields=["tenant", "scope", "status", "domain", "type", "key", "updated_at"],
                         name="node_key_idx"),
            models.Index(fields=["tenant", "category_path_text"], name="node_category_idx"),
            models.Index(fields=["tenant", "kind", "status"], name="node_kind_idx"),
            models.Index(fields=["tenant", "session_id", "status", "updated_at"], name="node_session_idx"),
            models.Index(fields=["tenant", "workspace", "status", "updated_at"], name="node_workspace_idx"),
            models.Index(fields=["tenant", "user", "status", "updated_at"], name="node_user_idx"),
            models.Index(fields=["tenant", "-importance", "-confidence", "-updated_at", "id"],
                         name="node_recalled_idx", condition=RECALLED_CARDS),
            models.Index(fields=["tenant", "-importance", "-confidence", "-updated_at", "id"],
                         name="node_standing_idx", condition=STANDING_CARDS),
            GinIndex(fields=["search_vector"], name="node_search_gin"),
            HnswIndex(name="node_embedding_hnsw", fields=["embedding"], m=16, ef_construction=64,
                      opclasses=["vector_cosine_ops"]),
        ]

    def __str__(self) -> str:
        return f"{self.key} r{self.revision} ({self.status})"


class MemoryAuditEvent(TenantOwnedModel):
    """One mutation of a node, written in the same transaction; never injected into context.

    The tenant's events form a hash chain (memory.audit_chain). The database assigns `sequence`,
    `previous_digest`, `content_salt`, `content_digest` and `digest` on insert (a trigger, so every
    insert path is chained) and refuses changes to them afterwards; only the content (`reason`,
    `payload`) may be erased, together with its salt, which leaves the chain verifiable.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    event_type = models.CharField(max_length=16, choices=AuditEventType.choices)
    # Not a foreign key: the event outlives a hard-forgotten node.
    node_id = models.UUIDField(null=True, blank=True)
    session_id = models.CharField(max_length=200, null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    actor = models.CharField(max_length=200, help_text="api_key:<prefix>, user:<username> or system")
    reason = models.TextField()
    payload = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    # Set by the database on insert (db_default makes Django read them back with RETURNING).
    sequence = models.BigIntegerField(db_default=0, editable=False, help_text="Position in the tenant chain.")
    previous_digest = models.CharField(max_length=64, db_default="", editable=False)
    content_salt = models.CharField(
        max_length=32, db_default="", editable=False, help_text="Random per event; erased with the content."
    )
    content_digest = models.CharField(max_length=64, db_default="", editable=False)
    digest = models.CharField(max_length=64, db_default="", editable=False)

    class Meta:
        constraints = [
            # Two writers can never fork a chain: a position is taken once.
            models.UniqueConstraint(fields=["tenant", "sequence"], name="audit_tenant_sequence_uniq"),
        ]
        indexes = [
            models.Index(fields=["tenant", "node_id", "created_at"], name="audit_node_idx"),
            models.Index(fields=["tenant", "created_at"], name="audit_tenant_time_idx"),
        ]
        ordering = ["created_at"]


class AuditChainHead(TenantOwnedModel):
    """The end of a tenant's audit chain, kept by the insert trigger so an append never scans the chain."""

    sequence = models.BigIntegerField(default=0)
    digest = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant"], name="audit_head_tenant_uniq")]


class ScopeCardCount(TenantOwnedModel):
    """How many ordinary cards (memory.services.quota) each scope owner holds, kept by database triggers.

    Migration 0019 installs statement-level triggers on the node table that add each statement's change
    to these rows, so the quota check reads one row instead of counting an owner's cards.
    """

    owner_ref = models.CharField(max_length=300)
    used = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "owner_ref"], name="scope_card_count_uniq")]


class ReadEndpoint(models.TextChoices):
    MEMORY_SEARCH = "memory/search"
    MEMORY_GET = "memory/get"
    MEMORY_NODE = "memory/nodes/{id}"
    CONTEXT = "context"
    HISTORY = "history"
    PAGES = "pages"
    OTHER = "other"


class MemoryReadEvent(TenantOwnedModel):
    """One card handed to a caller: who (API key or person) read it, when and through which endpoint.

    Written in batches after the request (memory.services.reads), kept `EKKO_READ_AUDIT_DAYS` days.
    Holds no content, so a hard forget keeps it: who read a card before it was erased stays known.
    """

    id = models.BigAutoField(primary_key=True)
    # Not a foreign key: the record outlives a hard-forgotten node.
    node_id = models.UUIDField()
    actor = models.CharField(max_length=200, help_text="api_key:<prefix> or user:<username>")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    api_key = models.ForeignKey("tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    endpoint = models.CharField(max_length=32, choices=ReadEndpoint.choices)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "node_id", "created_at"], name="read_node_time_idx"),
            models.Index(fields=["tenant", "created_at"], name="read_tenant_time_idx"),
            models.Index(fields=["tenant", "actor", "created_at"], name="read_actor_time_idx"),
        ]


class MemoryKind(TenantOwnedModel):
    """A tenant-defined kind, added to the default catalogue (memory.rules.schema) for that tenant only."""

    name = models.CharField(max_length=64)
    slot_key = models.CharField(max_length=64)
    type = models.CharField(max_length=16, choices=NodeType.choices)
    domain = models.CharField(max_length=100)
    category_path = ArrayField(models.CharField(max_length=100), default=list)
    itemized = models.BooleanField(default=False)
    default_scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.USER)
    requires_explicit_user_intent = models.BooleanField(default=False)
    value_shape = models.CharField(max_length=16, default="any")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="kind_tenant_name_uniq")]


class ExtractionStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    RETRYING = "retrying"
    FAILED = "failed"


class ExtractionRun(TenantOwnedModel):
    """One background extraction of a session's new messages: its state is visible (`GET extract/{taskId}`)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    session_id = models.CharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    trigger = models.CharField(max_length=32, default="api")
    status = models.CharField(max_length=16, choices=ExtractionStatus.choices, default=ExtractionStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    # Messages with an internal id in (after_message_pk, up_to_message_pk] are this run's input.
    after_message_pk = models.BigIntegerField(default=0)
    up_to_message_pk = models.BigIntegerField(null=True, blank=True)
    results = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    next_retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "workspace", "session_id", "created_at"], name="extraction_session_idx"),
            models.Index(fields=["tenant", "status", "next_retry_at"], name="extraction_retry_idx"),
        ]


class SearchTable(models.TextChoices):
    """The searched tables, as the term statistics and the tenants' own indexes name them."""

    NODE = "node"
    MESSAGE = "message"


class MemoryTermStat(TenantOwnedModel):
    """How many of a big tenant's searched rows hold one common search term (memory.search.hybrid's weights).

    Refreshed by the tenant-index sweep (memory.services.term_stats) for tenants with their own index:
    one row per term found in at least `KEPT_FROM` rows, plus one row with an empty term (`COLLECTION`)
    that holds the size of the collection. Derived from the tenant's rows and never shown; a term has to be
    in many rows to be kept here, so no single card's words are.
    """

    # A term is kept when at least this many rows hold it; the empty term's row counts the rows searched.
    KEPT_FROM = 100
    COLLECTION = ""

    id = models.BigAutoField(primary_key=True)
    source = models.CharField(max_length=16, choices=SearchTable.choices, help_text="The searched table.")
    term = models.CharField(max_length=200, blank=True)
    documents = models.PositiveIntegerField()
    refreshed_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "source", "term"], name="term_stat_uniq")]


# The organizer's runs and items (seed 001), kept in their own module.
from memory.organizer.models import (  # noqa: E402, F401 - re-exported
    OrganizeAction,
    OrganizeDecision,
    OrganizeItem,
    OrganizeMode,
    OrganizePhase,
    OrganizeRisk,
    OrganizeRun,
    OrganizeState,
    OrganizeTrigger,
)

# The webhook tables live beside their code; importing them here registers them with the memory app.
from memory.webhooks.models import WebhookDelivery, WebhookEndpoint  # noqa: E402, F401
