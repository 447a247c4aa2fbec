"""The bulk mode of the node writer: many authors' writes in one transaction, under the batch's rules.

Extraction writes each plan item as its author, imports write many rows as one importer; both go
through `node_write_bulk`, so every rule of `node_write_batch` holds for them too.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser

from memory.errors import Invalid
from memory.models import MemoryAuditEvent, MemoryNode
from memory.services import NodeWrite, events, node_write_bulk
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant
from tests.memory_factories import default_workspace, make_member


def author(tenant: Tenant, user: AbstractBaseUser | None, actor: str) -> Viewer:
    return Viewer(tenant=tenant, workspace=default_workspace(tenant), session_id="s1", user=user,
                  write_scopes=frozenset({"session", "workspace", "user"}), read_only=False, actor=actor)


def avoid(item: str, **node) -> dict:
    return {"operation": "create", "reason": f"said no {item}",
            "node": {"kind": "food_avoidance", "item_key": item, "scope": "user",
                     "title": f"不吃{item}", "content": f"用户不吃{item}", **node}}


@pytest.fixture
def writes(tenant_a):  # noqa: ANN001
    alice = tenant_a_user(tenant_a, "alice")
    carol = make_member(tenant=tenant_a, username="carol")
    return [
        NodeWrite(viewer=author(tenant_a, alice, "user:alice"), operations=[avoid("香菜")],
                  explicit_user_intent=True),
        NodeWrite(viewer=author(tenant_a, alice, "user:alice"),
                  operations=[{**avoid("葱"), "node": {**avoid("葱")["node"], "kind": "no_such_kind"}}],
                  explicit_user_intent=True),
        NodeWrite(viewer=author(tenant_a, carol, "system:importer"), operations=[avoid("蒜")],
                  explicit_user_intent=True),
    ]


def tenant_a_user(tenant: Tenant, username: str) -> AbstractBaseUser:
    return make_member(tenant=tenant, username=username, role="owner")


def stored(tenant: Tenant) -> tuple[list[str], list[tuple[str, str]]]:
    with tenant_context(tenant):
        keys = sorted(MemoryNode.objects.values_list("key", flat=True))
        audit = sorted(MemoryAuditEvent.objects.values_list("actor", "event_type"))
    return keys, audit


def test_bulk_skips_an_invalid_write_and_applies_the_others_each_as_its_author(tenant_a, tenant_b, writes):
    outcomes = node_write_bulk(writes=writes, skip_invalid=True)
    assert [o.ok for o in outcomes] == [True, False, True]
    assert outcomes[1].error.code == "invalid" and "no_such_kind" in outcomes[1].error.detail
    assert outcomes[1].results == []
    assert [[r.action for r in o.results] for o in outcomes] == [["created"], [], ["created"]]
    keys, audit = stored(tenant_a)
    assert keys == ["avoid_ingredient:蒜", "avoid_ingredient:香菜"]
    assert audit == [("system:importer", "create"), ("user:alice", "create")]
    carol_card = outcomes[2].results[0].node
    assert carol_card.user.get_username() == "carol"
    assert stored(tenant_b) == ([], [])


def test_bulk_without_skip_invalid_writes_nothing_when_one_write_is_refused(tenant_a, writes):
    with pytest.raises(Invalid, match="no_such_kind"):
        node_write_bulk(writes=writes, skip_invalid=False)
    assert stored(tenant_a) == ([], [])


def test_bulk_follows_the_batch_rules_noop_and_sensitive_content(tenant_a):
    alice = author(tenant_a, tenant_a_user(tenant_a, "alice"), "user:alice")
    outcomes = node_write_bulk(writes=[
        NodeWrite(viewer=alice, operations=[avoid("香菜")], explicit_user_intent=True),
        NodeWrite(viewer=alice, operations=[avoid("香菜")], explicit_user_intent=True),
        NodeWrite(viewer=alice, operations=[avoid("卡", content="卡号 4111 1111 1111 1111")],
                  explicit_user_intent=True),
        NodeWrite(viewer=alice, operations=[{**avoid("葱"), "operation": "rewrite"}],
                  explicit_user_intent=True),
    ], skip_invalid=True)
    assert [r.action for r in outcomes[1].results] == ["noop"]
    assert outcomes[2].error.code == "sensitive_content"
    assert outcomes[3].error.code == "invalid"
    assert stored(tenant_a)[0] == ["avoid_ingredient:香菜"]


def test_bulk_refuses_a_read_only_author_only(tenant_a):
    alice = author(tenant_a, tenant_a_user(tenant_a, "alice"), "user:alice")
    reader = Viewer(tenant=tenant_a, workspace=alice.workspace, user=alice.user,
                    write_scopes=alice.write_scopes, read_only=True)
    outcomes = node_write_bulk(writes=[
        NodeWrite(viewer=reader, operations=[avoid("葱")], explicit_user_intent=True),
        NodeWrite(viewer=alice, operations=[avoid("香菜")], explicit_user_intent=True),
    ], skip_invalid=True)
    assert (outcomes[0].error.code, outcomes[1].ok) == ("forbidden", True)
    assert stored(tenant_a)[0] == ["avoid_ingredient:香菜"]


def test_bulk_announces_every_written_node_once_after_commit(
        tenant_a, writes, django_capture_on_commit_callbacks):  # noqa: ANN001
    announced: list[list] = []

    def receiver(sender, *, tenant_id, node_ids, **kwargs):  # noqa: ANN001, ANN003, ANN202
        announced.append(list(node_ids))

    events.nodes_written.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            outcomes = node_write_bulk(writes=writes, skip_invalid=True)
            assert announced == []
    finally:
        events.nodes_written.disconnect(receiver)
    assert announced == [[outcomes[0].results[0].node.pk, outcomes[2].results[0].node.pk]]


def test_bulk_writes_into_one_tenant(tenant_a, tenant_b):
    writes = [NodeWrite(viewer=author(tenant, None, "system"), operations=[], explicit_user_intent=False)
              for tenant in (tenant_a, tenant_b)]
    with pytest.raises(ValueError, match="one tenant"):
        node_write_bulk(writes=writes, skip_invalid=True)
