"""The review queue page (`/review/`, issue 14): unreviewed cards with their evidence, accept and reject.

Accept and reject go through the write services with the page's Viewer: a member posting the id of
another person's card, of a workspace they do not reach or of another tenant gets 404 and nothing
changes; a viewer is refused. A reject is a person's soft forget, so the extractor's
recent-rejections rule keeps the card from coming back. Tenant B holds the same words and never moves.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from memory.models import MemoryNode
from tenants.context import tenant_context
from tenants.models import Role
from tests.api_client import api_for
from tests.memory_factories import default_workspace, make_member, make_message, make_node, make_workspace
from tests.test_pages import signed_in
from tests.test_stale_targets import snapshot
from tests.test_turn_lifecycle import REMEMBER, Turns, _items

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(tenant_a, tenant_b):  # noqa: ANN001
    """Alice's and mia's unreviewed cards, a reviewed one, a card in a workspace mia does not reach, B's."""
    alice = get_user_model().objects.get(username="alice")
    mia = make_member(tenant=tenant_a, username="mia", role=Role.MEMBER)
    make_member(tenant=tenant_a, username="vera", role=Role.VIEWER)
    home = default_workspace(tenant_a)
    secret = make_workspace(tenant=tenant_a, name="Secret")
    said = make_message(tenant=tenant_a, workspace=home, session_id="chat-1", content="我好像不太吃葱。")
    cards = {
        "alice": make_node(tenant=tenant_a, workspace=home, user=alice, title="alice 可能不吃葱",
                           item_key="葱", review_state="unreviewed", confidence=0.6),
        "mia": make_node(tenant=tenant_a, workspace=home, user=mia, title="mia 可能不吃葱", item_key="葱",
                         review_state="unreviewed", confidence=0.85),
        "alice_too": make_node(tenant=tenant_a, workspace=home, user=alice, title="alice 也许少吃辣",
                               item_key="辣", review_state="unreviewed", confidence=0.4),
        "mia_reviewed": make_node(tenant=tenant_a, workspace=home, user=mia, title="mia 不吃香菜",
                                  item_key="香菜"),
        "secret": make_node(tenant=tenant_a, workspace=secret, scope="workspace", kind="hard_constraint",
                            title="秘密项目只用 Rust", item_key="rust", review_state="unreviewed"),
    }
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk=cards["mia"].pk).update(source_message_ids=[said.message_id],
                                                             session_id=None)
    bob = get_user_model().objects.get(username="bob")
    cards["bob"] = make_node(tenant=tenant_b, workspace=default_workspace(tenant_b), user=bob,
                             title="bob 可能不吃葱", item_key="葱", review_state="unreviewed")
    return {"tenant": tenant_a, "other": tenant_b, "cards": cards, "said": said}


def target(node: MemoryNode) -> str:
    return f"{node.pk}:{node.revision}"


def reload(tenant, node: MemoryNode) -> MemoryNode:  # noqa: ANN001
    with tenant_context(tenant):
        return MemoryNode.objects.get(pk=node.pk)


def test_the_queue_lists_only_the_members_unreviewed_cards_with_their_evidence(queue):  # noqa: ANN001
    page = signed_in("mia").get("/review/").content.decode()
    assert "mia 可能不吃葱" in page and "我好像不太吃葱。" in page  # the card and its evidence
    assert "*h" in page
    for hidden in ("alice 可能不吃葱", "mia 不吃香菜", "秘密项目只用 Rust", "bob 可能不吃葱"):
        assert hidden not in page
    owner_page = signed_in("alice").get("/review/").content.decode()  # an owner sees the whole tenant
    assert "alice 可能不吃葱" in owner_page and "mia 可能不吃葱" in owner_page
    assert "bob 可能不吃葱" not in owner_page


def test_the_queue_filters_by_kind_conversation_and_band(queue):  # noqa: ANN001
    alice = signed_in("alice")
    high = alice.get("/review/", {"band": "h"}).content.decode()
    assert "mia 可能不吃葱" in high and "alice 可能不吃葱" not in high
    medium = alice.get("/review/", {"band": "m"}).content.decode()
    assert "alice 可能不吃葱" in medium and "mia 可能不吃葱" not in medium
    by_kind = alice.get("/review/", {"kind": "food_avoidance"}).content.decode()
    assert "alice 可能不吃葱" in by_kind and "mia 可能不吃葱" in by_kind
    assert alice.get("/review/", {"band": "x"}).status_code == 200  # an unknown band filters nothing
    fragment = alice.get("/review/", {"source": "nowhere"}, headers={"HX-Request": "true"})
    assert "Nothing waits for review" in fragment.content.decode() and b"<html" not in fragment.content


def test_accept_and_reject_one_and_in_bulk(queue):  # noqa: ANN001
    tenant, cards = queue["tenant"], queue["cards"]
    mia = signed_in("mia")
    response = mia.post("/review/act/", {"target": target(cards["mia"]), "action": "accept"})
    assert response.status_code == 303
    accepted = reload(tenant, cards["mia"])
    assert (accepted.review_state, accepted.revision, accepted.status) == ("reviewed", 2, "active")

    alice = signed_in("alice")
    # Another workspace's card is not in the queue of the workspace she picked: 404, nothing changes.
    assert alice.post("/review/act/", {"target": [target(cards["alice"]), target(cards["secret"])],
                                       "action": "reject"}).status_code == 404
    assert reload(tenant, cards["alice"]).status == "active"
    response = alice.post("/review/act/", {"target": [target(cards["alice"]), target(cards["alice_too"])],
                                           "action": "reject"}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Rejected 2 memories" in response.content.decode()
    assert response.headers.get("HX-Trigger")
    for name in ("alice", "alice_too"):
        assert reload(tenant, cards[name]).status == "deleted"
    again = alice.post("/review/act/", {"target": target(cards["mia"]), "action": "accept"})
    assert again.status_code == 409  # no longer waiting for review
    assert alice.post("/review/act/", {"action": "accept"}).status_code == 400


def test_a_member_cannot_act_on_foreign_cards_and_a_viewer_cannot_act(queue):  # noqa: ANN001
    tenant, other, cards = queue["tenant"], queue["other"], queue["cards"]
    before = snapshot(tenant, other)
    mia = signed_in("mia")
    for name in ("alice", "secret", "bob"):
        for action in ("accept", "reject"):
            response = mia.post("/review/act/", {"target": target(cards[name]), "action": action})
            assert response.status_code == 404, (name, action)
    # A foreign id mixed with her own card: all or nothing.
    mixed = mia.post("/review/act/", {"target": [target(cards["mia"]), target(cards["alice"])],
                                      "action": "accept"})
    assert mixed.status_code == 404
    viewer = signed_in("vera")
    refused = viewer.post("/review/act/", {"target": target(cards["mia"]), "action": "accept"})
    assert refused.status_code == 403
    assert snapshot(tenant, other) == before


def test_the_page_needs_csrf(queue):  # noqa: ANN001
    client = Client(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username="mia"))
    response = client.post("/review/act/", {"target": target(queue["cards"]["mia"]), "action": "accept"})
    assert response.status_code == 403
    assert reload(queue["tenant"], queue["cards"]["mia"]).review_state == "unreviewed"


def test_a_rejected_card_is_a_recent_rejection_for_the_extractor(client, tenant_a,
                                                                 django_capture_on_commit_callbacks):  # noqa: ANN001
    turns = Turns(api_for(client, tenant_a), tenant_a, django_capture_on_commit_callbacks)
    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    assert card.review_state == "unreviewed"
    response = signed_in("alice").post("/review/act/", {"target": target(card), "action": "reject"})
    assert response.status_code == 303
    assert turns.cards(status="active") == []

    turns.turn("我不吃香菜")  # mentioned again, not explicitly: the person's reject stands
    [item] = _items(turns.runs()[-1])
    assert (item["outcome"], item["code"]) == ("skipped", "recent_rejection")
    assert item["by"] == "user:alice"
    assert turns.cards(status="active") == []
