"""One-statement inserts (`rows_insert`) and vector updates (`vectors_update`) write exactly what Django's
`bulk_create` and `bulk_update` write: every column round-trips, awkward text and JSON included."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode
from memory.services.audit import audit_event_build
from memory.services.embeddings import vector_column_dimensions
from memory.services.rows_insert import rows_insert, vectors_update
from memory.visibility import owner_ref
from tenants.context import tenant_context
from tests.memory_factories import default_workspace, make_member

AWKWARD = ["a,b", "{brace}", 'quote"d', "back\\slash", "NULL", "", "香菜", " spaced ", "🌶️", "new\nline"]
VALUES = [
    {"ü": ["a", 1, 2.5, None, True, {"n": 'x"y\\z'}], "emoji": "🌶", "big": 12345678901234567890},
    "just text, with 'quotes'",
    None,
    [],
    0,
    {"": {}, "nested": [[], [None]]},
]


def cards(tenant, suffix: str, vector_of) -> list[MemoryNode]:  # noqa: ANN001
    workspace = default_workspace(tenant)
    user = make_member(tenant=tenant, username=f"rows-{suffix}")
    now = timezone.now().replace(microsecond=123456)
    nodes = []
    for i, value in enumerate(VALUES):
        scope = "user" if i % 2 else "workspace"
        nodes.append(MemoryNode(
            tenant=tenant, workspace=workspace, user=user if scope == "user" else None,
            session_id="s-1" if i == 2 else None, scope=scope,
            owner_ref=owner_ref(scope=scope, workspace_id=workspace.pk, session_id=None,
                                user_id=user.pk if scope == "user" else None),
            kind="project_context", item_key=None if i == 3 else f"item {i}",
            key=f"key-{suffix}-{i}", domain="work", category_path=["a/b", "ç", *AWKWARD[i:i + 2]],
            category_path_text=f"path {i}", type="fact", value_json=value, title=f"title {i} 'x'",
            content="" if i == 4 else f"content {i}\twith\ttabs", status="active",
            confidence=0.123456789, importance=1.0, tags=AWKWARD[i:] if i != 5 else [],
            entities=list(reversed(AWKWARD))[: i + 1], source_message_ids=["m-1", "m 2"] if i else [],
            explicit_user_intent=bool(i % 3), revision=i + 1, created_at=now,
            updated_at=now + timedelta(seconds=i), expires_at=now + timedelta(days=1) if i == 1 else None,
            access_count=i, search_text=f"search {i} 香菜", embedding=vector_of(i),
            embedding_model="m" if i else ""))
    return nodes


def columns(node: MemoryNode) -> dict:
    skip = {"id", "user_id", "owner_ref", "key"}  # the two sets differ only by their member and keys
    return {f.attname: getattr(node, f.attname) for f in MemoryNode._meta.concrete_fields
            if f.attname not in skip}


@pytest.mark.django_db
def test_cards_round_trip_as_bulk_create_writes_them(tenant_a):  # noqa: ANN001
    dims = vector_column_dimensions()
    rng = random.Random(3)
    vectors = {i: [rng.uniform(-1, 1) for _ in range(dims)] for i in range(len(VALUES)) if i != 2}
    ours, django = cards(tenant_a, "ours", vectors.get), cards(tenant_a, "django", vectors.get)
    with tenant_context(tenant_a):
        rows_insert(MemoryNode, ours)
        assert all(not node._state.adding for node in ours)
        MemoryNode.objects.bulk_create(django)
        stored = {node.pk: node for node in MemoryNode.objects.all()}
        searched = dict(MemoryNode.objects.values_list("id", "search_vector"))
    assert len(stored) == 2 * len(VALUES)
    for mine, theirs in zip(ours, django, strict=True):
        a, b = columns(stored[mine.pk]), columns(stored[theirs.pk])
        a["embedding"] = None if a["embedding"] is None else list(a["embedding"])
        b["embedding"] = None if b["embedding"] is None else list(b["embedding"])
        assert a == b
        assert a["value_json"] == mine.value_json and a["tags"] == mine.tags
        assert a["category_path"] == mine.category_path and a["entities"] == mine.entities
        assert searched[mine.pk] == searched[theirs.pk]
    assert stored[ours[2].pk].value_json is None  # None stays SQL NULL, as with bulk_create


@pytest.mark.django_db
def test_audit_events_come_back_with_what_the_chain_trigger_set(tenant_a):  # noqa: ANN001
    events = [audit_event_build(tenant=tenant_a, event_type="create", node_id=None, workspace_id=None,
                                session_id=None, actor="system", reason=f"reason {i} 'é'",
                                payload={"i": i, "list": AWKWARD}) for i in range(3)]
    with tenant_context(tenant_a):
        rows_insert(MemoryAuditEvent, events)
        stored = {e.pk: e for e in MemoryAuditEvent.objects.all()}
    assert [e.sequence for e in events] == sorted(e.sequence for e in events) and events[0].sequence > 0
    for event in events:
        row = stored[event.pk]
        assert (row.sequence, row.digest, row.previous_digest, row.payload) == (
            event.sequence, event.digest, event.previous_digest, event.payload)
    assert events[1].previous_digest == events[0].digest


@pytest.mark.django_db
def test_vectors_update_writes_what_bulk_update_writes(tenant_a):  # noqa: ANN001
    dims = vector_column_dimensions()
    nodes = cards(tenant_a, "vec", lambda i: None)
    rng = random.Random(5)
    vectors = [[rng.uniform(-1, 1) for _ in range(dims)] for _ in nodes]
    with tenant_context(tenant_a):
        rows_insert(MemoryNode, nodes)
        vectors_update(MemoryNode, tenant_id=tenant_a.pk, pks=[n.pk for n in nodes[:3]], vectors=vectors[:3],
                       model_id="model-a")
        for node, vector in zip(nodes[3:], vectors[3:], strict=True):
            node.embedding, node.embedding_model = vector, "model-a"
        MemoryNode.objects.bulk_update(nodes[3:], ["embedding", "embedding_model"])
        stored = {n.pk: n for n in MemoryNode.objects.all()}
    expected = {n.pk: v for n, v in zip(nodes, vectors, strict=True)}
    ours = [list(stored[n.pk].embedding) for n in nodes[:3]]
    for node, vector in zip(nodes[:3], ours, strict=True):
        assert stored[node.pk].embedding_model == "model-a"
        assert vector == pytest.approx(expected[node.pk], abs=1e-6)
    # the same float4 rounding as bulk_update's
    probe = MemoryNode(embedding=expected[nodes[3].pk])
    assert list(stored[nodes[3].pk].embedding) == pytest.approx(list(probe.embedding), abs=1e-6)
