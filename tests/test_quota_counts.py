"""The running per-owner card counts (ScopeCardCount, kept by triggers on the node table) always equal a
fresh count of the owners' ordinary cards, whatever path changed the cards."""

from __future__ import annotations

from django.db.models import Count

from memory.models import MemoryNode, ScopeCardCount
from memory.services.maintenance import nodes_expire_due
from memory.services.quota import ordinary_cards
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.memory_factories import make_member
from tests.test_quota import dish, fill, write_body


def counts_agree(tenant) -> dict[str, int]:  # noqa: ANN001
    with tenant_context(tenant):
        counted = dict(MemoryNode.objects.filter(ordinary_cards(), tenant=tenant).values("owner_ref")
                       .annotate(n=Count("id")).values_list("owner_ref", "n"))
        kept = {ref: used for ref, used in ScopeCardCount.objects.filter(tenant=tenant)
                .values_list("owner_ref", "used") if used}
    assert kept == counted
    return kept


def test_creates_supersedes_updates_forgets_expiry_and_the_journal_keep_the_counts_exact(client, tenant_a):
    alice = make_member(tenant=tenant_a, username="alice", role="owner")
    api = api_for(client, tenant_a)
    fill(tenant_a, alice, 3)  # ORM inserts
    assert counts_agree(tenant_a) == {f"user:{alice.pk}": 3}

    created = api.post("memory/write", write_body(dish(1), dish(2), dish(3)))["results"]
    assert counts_agree(tenant_a) == {f"user:{alice.pk}": 6}
    first = created[0]
    api.post("memory/write", write_body({"operation": "supersede", "targetId": first["nodeId"],
                                         "expectedRevision": 1, "reason": "reworded",
                                         "node": {"content": "换个说法"}}))
    api.post("memory/write", write_body({"operation": "update", "targetId": created[1]["nodeId"],
                                         "expectedRevision": 1, "reason": "typo", "node": {"content": "修正"}}))
    assert counts_agree(tenant_a) == {f"user:{alice.pk}": 6}  # a supersede in place adds nothing

    api.post("memory/forget", {"id": created[1]["nodeId"], "expectedRevision": 2, "explicitUserIntent": True,
                               "reason": "user asked"})
    api.post("memory/forget", {"id": created[2]["nodeId"], "expectedRevision": 1, "mode": "hard",
                               "explicitUserIntent": True, "reason": "user asked"})
    assert counts_agree(tenant_a) == {f"user:{alice.pk}": 4}

    workspace_card = {"operation": "create", "reason": "team rule",
                      "node": {"kind": "hard_constraint", "itemKey": "fridays", "scope": "workspace",
                               "title": "No Friday deploys", "content": "No deploys on Fridays."}}
    api.post("memory/write", write_body(workspace_card))
    journal = {"operation": "create", "reason": "diary", "node": {"kind": "journal", "userId": "alice",
                                                                  "content": "Went hiking."}}
    api.post("memory/write", write_body(journal))
    kept = counts_agree(tenant_a)
    assert kept[f"user:{alice.pk}"] == 4 and sum(kept.values()) == 5  # the journal is not counted

    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk__in=[n.pk for n in MemoryNode.objects.filter(
            ordinary_cards(), owner_ref=f"user:{alice.pk}")[:2]]).update(expires_at="2000-01-01T00:00:00Z")
    nodes_expire_due()
    assert counts_agree(tenant_a)[f"user:{alice.pk}"] == 2


def test_each_tenant_keeps_its_own_counts(client, tenant_a, tenant_b):
    alice, bob = make_member(tenant=tenant_a, username="alice"), make_member(tenant=tenant_b, username="bob")
    fill(tenant_a, alice, 2)
    fill(tenant_b, bob, 1)
    assert counts_agree(tenant_a) == {f"user:{alice.pk}": 2}
    assert counts_agree(tenant_b) == {f"user:{bob.pk}": 1}
