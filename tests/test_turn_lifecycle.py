"""The turn lifecycle (issue 11): extraction follows the turn and never overrides what agents and people did.

Seed 003's turn: the user's message is captured, the agent acts (`memory/write`, `memory/forget`),
the assistant's reply is captured and the turn is over; only then does the extractor read it. What
an agent or a person wrote during those turns wins (seed 001's already-written block), and a card
they forgot or edited away stays away for EKKO_REJECTION_DAYS unless the user restates it
explicitly (the recent-rejections block). Without a broker the background work runs on the
in-process queue after the request: here the capture's commit callbacks queue it
(`django_capture_on_commit_callbacks(execute=True)`) and `drain_background()` runs it. The last
test runs the same story with a real Celery worker on Redis.
"""

from __future__ import annotations

import itertools

import pytest

from ekko_site.inprocess import drain_background
from memory.models import ExtractionRun, MemoryAuditEvent, MemoryNode
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.test_api_memory_rules import cilantro, create
from tests.test_worker import queue  # noqa: F401 - fixture: a private queue on the test Redis
from tests.worker import celery_worker, wait_for

SLOT = "avoid_ingredient:香菜"
REMEMBER = "记住，我以后做饭不要香菜。"
_ids = itertools.count(1)


class Turns:
    """An agent on one session: captures messages, writes and forgets through the API."""

    def __init__(self, api, tenant, on_commit=None, session="dinner"):  # noqa: ANN001
        self.api, self.tenant, self.on_commit, self.session = api, tenant, on_commit, session

    def capture(self, role: str, content: str) -> str:
        message_id = f"{role[0]}{next(_ids)}"
        body = {"sessionId": self.session, "userId": "alice",
                "messages": [{"id": message_id, "role": role, "content": content}]}
        if self.on_commit is None:
            self.api.post("messages", body, expect=201)
        else:
            with self.on_commit(execute=True):
                self.api.post("messages", body, expect=201)
            drain_background()  # what runs after the request: embeddings, extraction
        return message_id

    def turn(self, content: str, reply: str = "好的。") -> str:
        message_id = self.capture("user", content)
        self.capture("assistant", reply)
        return message_id

    def runs(self) -> list[ExtractionRun]:
        with tenant_context(self.tenant):
            return list(ExtractionRun.objects.filter(tenant=self.tenant, session_id=self.session)
                        .order_by("created_at"))

    def cards(self, **filters) -> list[MemoryNode]:  # noqa: ANN003
        with tenant_context(self.tenant):
            cards = MemoryNode.objects.filter(tenant=self.tenant, key=SLOT, **filters)
            return list(cards.order_by("created_at"))

    def events(self) -> list[tuple[str, str]]:
        with tenant_context(self.tenant):
            return list(MemoryAuditEvent.objects.filter(tenant=self.tenant).order_by("created_at")
                        .values_list("event_type", "actor"))

    def write_cilantro(self, source: str) -> dict:
        return self.api.post("memory/write", {"operations": [create(cilantro(), reason="用户明确要求")],
                                              "explicitUserIntent": True,
                                              "sourceMessageIds": [source]})["results"][0]

    def forget(self, mode: str) -> None:
        self.api.post("memory/forget", {"key": SLOT, "userId": "alice", "reason": "用户要求忘记",
                                        "explicitUserIntent": True, "mode": mode})


@pytest.fixture
def turns(client, tenant_a, django_capture_on_commit_callbacks) -> Turns:  # noqa: ANN001
    return Turns(api_for(client, tenant_a), tenant_a, django_capture_on_commit_callbacks)


def _items(run: ExtractionRun) -> list[dict]:
    return [item for item in run.results["items"] if item.get("kind") == "food_avoidance"]


# --------------------------------------------------------------------------- extraction follows the turn


def test_the_agents_own_write_wins_and_the_extractor_leaves_the_card_as_it_is(turns):
    message = turns.capture("user", REMEMBER)
    assert turns.runs() == []  # capturing the user's message never runs the extractor
    written = turns.write_cilantro(message)
    assert (written["action"], written["revision"]) == ("created", 1)

    turns.capture("assistant", "好的，我记住了：以后做饭不放香菜。")

    [run] = turns.runs()
    assert (run.trigger, run.status) == ("turn", "done")
    [item] = _items(run)
    assert (item["outcome"], item["code"]) == ("skipped", "already_written")
    assert item["by"].startswith("api_key:") and item["detail"].startswith("an agent wrote this memory at ")
    [card] = turns.cards()
    assert (str(card.pk), card.revision, card.status) == (written["nodeId"], 1, "active")
    [(event_type, actor)] = turns.events()  # one create, the agent's
    assert event_type == "create" and actor.startswith("api_key:")


def test_an_agent_that_never_writes_gets_the_card_from_the_extractor_once_the_turn_ends(turns):
    turns.capture("user", REMEMBER)
    assert turns.cards() == [] and turns.runs() == []
    turns.capture("assistant", "好的，以后做饭不放香菜。")
    [run] = turns.runs()
    [item] = _items(run)
    assert (run.trigger, item["outcome"], item["action"], item["revision"]) == (
        "turn", "applied", "created", 1)
    [card] = turns.cards()
    assert (card.scope, card.status, card.explicit_user_intent) == ("user", "active", True)
    assert turns.events() == [("create", "system:extractor")]


# --------------------------------------------------------------------------- recent rejections


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_a_forgotten_card_comes_back_only_when_the_user_restates_it_explicitly(turns, mode):
    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    turns.forget(mode)

    turns.turn("我不吃香菜")  # a later mention, not explicit: the user's forget still stands
    [item] = _items(turns.runs()[-1])
    assert (item["outcome"], item["code"]) == ("skipped", "recent_rejection")
    assert item["by"].startswith("api_key:") and item["detail"].startswith("an agent forgot this memory at ")
    assert turns.cards(status="active") == []

    turns.turn(REMEMBER)  # said again explicitly: the extractor writes it, and says why
    [item] = _items(turns.runs()[-1])
    assert (item["outcome"], item["action"], item["override"]) == ("applied", "created", "recent_rejection")
    assert any("restated it explicitly" in note for note in item["notes"])
    [again] = turns.cards(status="active")
    assert again.pk != card.pk and again.scope == "user"


EDITS = {
    "supersede": ({"valueJson": "香菜(少量)", "title": "用户可接受少量香菜", "content": "香菜可以少放一点。"},
                  "replaced the extractor's memory", 2),
    "update": ({"valueJson": "香菜(少量)"}, "changed the extractor's memory", 2),
}


@pytest.mark.parametrize("operation", sorted(EDITS))
def test_editing_the_extractors_card_away_keeps_the_extractor_off_that_slot(turns, operation):
    node, said, revision = EDITS[operation]
    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    turns.api.post("memory/write", {"explicitUserIntent": True, "operations": [{
        "operation": operation, "targetId": str(card.pk), "expectedRevision": 1, "reason": "用户纠正",
        "node": node}]})

    turns.turn("我不吃香菜")
    [item] = _items(turns.runs()[-1])
    assert (item["outcome"], item["code"]) == ("skipped", "recent_rejection")
    assert said in item["detail"]
    [active] = turns.cards(status="active")
    assert (active.value_json, active.revision) == ("香菜(少量)", revision)


def test_a_person_restoring_a_forgotten_card_lifts_the_rejection(turns, tenant_a):
    from django.contrib.auth import get_user_model

    from memory.services import node_restore
    from memory.visibility import Viewer
    from tests.memory_factories import default_workspace

    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    turns.forget("soft")
    person = Viewer(tenant=tenant_a, workspace=default_workspace(tenant_a), user=get_user_model().objects.get(
        username="alice"), write_scopes=frozenset({"session", "workspace", "user"}), read_only=False,
                    actor="user:alice")
    node_restore(viewer=person, node_id=card.pk, expected_revision=2, reason="还是要记住")

    turns.turn("我不吃香菜")
    [item] = _items(turns.runs()[-1])
    assert item.get("code") != "recent_rejection"


def test_an_agent_editing_its_own_card_is_no_rejection(turns):
    message = turns.capture("user", REMEMBER)
    node = turns.write_cilantro(message)
    turns.capture("assistant", "好的。")
    turns.api.post("memory/write", {"explicitUserIntent": True, "operations": [{
        "operation": "update", "targetId": node["nodeId"], "expectedRevision": 1, "reason": "用户补充",
        "node": {"valueJson": "香菜叶"}}]})

    turns.turn("我不吃香菜")  # the extractor may settle the slot again: nobody rejected *its* card
    [item] = _items(turns.runs()[-1])
    assert item["outcome"] in ("applied", "noop") and "code" not in item


def test_expiring_the_extractors_card_is_a_rejection_that_ends_with_the_window(turns, settings):
    turns.turn(REMEMBER)
    [card] = turns.cards(status="active")
    turns.api.post("memory/write", {"explicitUserIntent": True, "operations": [{
        "operation": "expire", "targetId": str(card.pk), "expectedRevision": 1, "reason": "不再适用"}]})

    turns.turn("我不吃香菜")
    [item] = _items(turns.runs()[-1])
    assert (item["code"], "expired the extractor's memory" in item["detail"]) == ("recent_rejection", True)

    settings.EKKO_REJECTION_DAYS = 0  # the window has passed
    turns.turn("我不吃香菜。")
    [item] = _items(turns.runs()[-1])
    assert (item["outcome"], item["action"]) == ("applied", "created") and "override" not in item


def test_a_slot_digest_names_one_slot_of_one_tenant_under_one_secret():
    from memory.rules.slots import slot_digest

    digest = slot_digest(secret="s", tenant_id=1, owner_ref="user:7", key=SLOT)
    assert len(digest) == 64 and "香菜" not in digest
    assert digest == slot_digest(secret=b"s", tenant_id=1, owner_ref="user:7", key=SLOT)
    others = [slot_digest(secret="t", tenant_id=1, owner_ref="user:7", key=SLOT),
              slot_digest(secret="s", tenant_id=2, owner_ref="user:7", key=SLOT),
              slot_digest(secret="s", tenant_id=1, owner_ref="user:8", key=SLOT),
              slot_digest(secret="s", tenant_id=1, owner_ref="user:7", key="avoid_ingredient:葱")]
    assert digest not in others and len(set(others)) == 4


# --------------------------------------------------------------------------- the same story on a real worker


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_on_a_celery_worker_the_agents_write_wins_and_a_silent_agent_gets_its_card(client, tenant_a, queue):  # noqa: F811
    agent = Turns(api_for(client, tenant_a), tenant_a, session="dinner")
    silent = Turns(agent.api, tenant_a, session="lunch")

    def done(turns: Turns, count: int) -> bool:
        runs = turns.runs()
        return len(runs) == count and all(run.status == "done" for run in runs)

    with celery_worker(queue):
        message = agent.capture("user", REMEMBER)
        written = agent.write_cilantro(message)
        agent.capture("assistant", "好的，我记住了：以后做饭不放香菜。")
        silent.capture("user", "记住，我以后做饭不要葱。")
        silent.capture("assistant", "好的，以后做饭不放葱。")
        wait_for(lambda: done(agent, 1) and done(silent, 1), what="the worker to run both turns' extraction")

    [item] = _items(agent.runs()[0])
    assert (written["action"], written["revision"], item["outcome"], item["code"]) == (
        "created", 1, "skipped", "already_written")
    [card] = agent.cards()
    assert (str(card.pk), card.revision) == (written["nodeId"], 1)
    with tenant_context(tenant_a):
        creates = list(MemoryAuditEvent.objects.filter(event_type="create").values_list("node_id", "actor"))
        scallion = MemoryNode.objects.get(key="avoid_ingredient:葱", status="active")
    assert sorted(actor.split(":")[0] for _, actor in creates) == ["api_key", "system"]
    assert (scallion.session_id, scallion.revision) == ("lunch", 1)
