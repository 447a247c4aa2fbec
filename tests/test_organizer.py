"""The organizer (seed 001): concept guards, the gate matrix, merges through the write service, runs, API."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode, OrganizeItem, OrganizeRun
from memory.organizer.cluster import Card, cluster_cards
from memory.organizer.gate import decide, risk_of
from memory.organizer.plan import PlanFailure, plan_from_answer
from memory.organizer.runs import organize_due
from memory.rules.concepts import lookalike_reason, signature_of
from tenants.context import tenant_context
from tenants.models import OrganizeSchedule, Tenant
from tests.api_client import api_for
from tests.loopback import JsonHandler, loopback_server

NOW = timezone.now()


def card(
    text: str,
    *,
    kind: str = "food_avoidance",
    item: str = "x",
    reviewed: bool = False,
    confidence: float = 0.8,
    owner: str = "user:1",
    vector=None,
) -> Card:  # noqa: ANN001
    return Card(
        id=f"{kind}:{item}:{text}",
        kind=kind,
        key=f"{kind}:{item}",
        item_key=item,
        title=text,
        content=text,
        value=text,
        scope="user",
        owner_ref=owner,
        confidence=confidence,
        reviewed=reviewed,
        revision=1,
        updated_at=NOW,
        vector=vector,
    )


# --------------------------------------------------------------------------- pure rules


def test_a_translation_is_one_memory_and_look_alikes_are_not():
    coffee_zh = signature_of("food_avoidance", ["不喝咖啡"])
    coffee_en = signature_of("food_avoidance", ["Doesn't drink coffee."])
    assert lookalike_reason(coffee_zh, coffee_en) is None and coffee_zh.concepts == {"coffee"}
    uncles = (
        signature_of("personal_relationship", ["舅舅喜欢钓鱼"]),
        signature_of("personal_relationship", ["叔叔喜欢钓鱼"]),
    )
    assert lookalike_reason(*uncles) == "kinship"
    allergy = signature_of("preferred_ingredient", ["Allergic to shellfish"])
    shrimp = signature_of("preferred_ingredient", ["Loves shrimp"])
    assert lookalike_reason(allergy, shrimp) == "polarity"
    assert (
        lookalike_reason(signature_of("skill", ["likes tea"]), signature_of("skill", ["likes coffee"]))
        == "concept"
    )
    assert (
        lookalike_reason(signature_of("skill", ["room 12"]), signature_of("skill", ["room 13"])) == "number"
    )
    assert lookalike_reason(signature_of("skill", ["x"]), signature_of("decision", ["x"])) == "kind"
    # 特别 holds 别 but is no negation.
    assert not signature_of("preferred_ingredient", ["特别喜欢大蒜"]).negative


def test_clusters_join_translations_and_synonym_keys_but_never_chain_look_alikes():
    a, b = card("用户不吃香菜", item="香菜"), card("Avoids coriander", item="coriander")
    c = card("Avoids cilantro.", item="cilantro")
    uncle_m = card("舅舅喜欢跑步", kind="personal_relationship", item="a")
    uncle_p = card("叔叔喜欢跑步", kind="personal_relationship", item="b")
    clusters = cluster_cards([a, b, c, uncle_m, uncle_p])
    assert [sorted(x.id for x in cl) for cl in clusters] == [sorted([a.id, b.id, c.id])]
    # Close vectors alone do not merge cards a guard keeps apart.
    same = [1.0, 0.0]
    assert (
        cluster_cards(
            [
                card("Likes tea", kind="skill", item="t", vector=same),
                card("Likes coffee", kind="skill", item="c", vector=same),
            ]
        )
        == []
    )
    assert (
        len(
            cluster_cards(
                [
                    card("Plays the oboe", kind="skill", item="o", vector=same),
                    card("吹双簧管", kind="skill", item="o2", vector=same),
                ]
            )
        )
        == 1
    )


def test_each_risk_rule():
    low = [card("不吃香菜"), card("Avoids cilantro")]
    assert risk_of(low, confidence=0.9).level == "low"
    assert (
        risk_of([card("不吃香菜"), card("Avoids cilantro", owner="user:2")], confidence=0.9).reasons[0]
        == "cross_scope"
    )
    assert risk_of(low, confidence=0.4).level == "high"
    assert (
        risk_of([card("不吃香菜", confidence=0.3), card("Avoids cilantro")], confidence=0.9).level == "high"
    )
    reviewed = risk_of([card("不吃香菜", reviewed=True), card("Avoids cilantro")], confidence=0.9)
    assert (reviewed.level, reviewed.reasons) == ("medium", ("reviewed",))
    disagree = risk_of([card("Avoids cilantro"), card("Avoids garlic")], confidence=0.9)
    assert (disagree.level, disagree.reasons) == ("high", ("values_disagree",))


@pytest.mark.parametrize(
    ("trigger", "mode", "risk", "expected"),
    [
        ("scheduled", "review", "low", "applied"),
        ("scheduled", "review", "medium", "queued"),
        ("scheduled", "auto_low", "high", "queued"),
        ("scheduled", "auto_low", "low", "applied"),
        ("manual", "review", "low", "queued"),
        ("manual", "review", "medium", "queued"),
        ("manual", "review", "high", "queued"),
        ("manual", "auto_low", "low", "applied"),
        ("manual", "auto_low", "medium", "queued"),
        ("manual", "auto_low", "high", "queued"),
    ],
)
def test_the_decision_matrix(trigger, mode, risk, expected):  # noqa: ANN001
    assert decide(trigger=trigger, mode=mode, risk=risk) == expected


def test_a_model_answer_is_validated():
    cluster = [card("不吃香菜", item="a"), card("Avoids cilantro", item="b")]
    ok = plan_from_answer(
        cluster, {"action": "merge_into", "target": cluster[0].id, "confidence": 0.8}, planner="llm:x"
    )
    assert (ok.action, ok.target_id, sorted(ok.members)) == (
        "merge_into",
        cluster[0].id,
        sorted(c.id for c in cluster),
    )
    for bad, code in [
        ({"action": "explode"}, "model_bad_action"),
        ({"action": "merge_into"}, "model_bad_target"),
        ({"action": "delete", "members": ["elsewhere"]}, "model_bad_members"),
        ({"action": "keep", "confidence": 7}, "model_bad_confidence"),
        ([], "model_bad_answer"),
    ]:
        with pytest.raises(PlanFailure) as caught:
            plan_from_answer(cluster, bad, planner="llm:x")
        assert caught.value.code == code


# --------------------------------------------------------------------------- runs against the database


def _seed(
    api, cards: list[tuple[str, str]], *, user: str = "alice", kind: str = "food_avoidance"
) -> list[str]:  # noqa: ANN001
    messages = [{"id": f"m-{i}", "role": "user", "content": text} for i, (_key, text) in enumerate(cards)]
    api.post("messages", {"sessionId": "s", "userId": user, "messages": messages}, expect=201)
    ids = []
    for i, (key, text) in enumerate(cards):
        written = api.post(
            "memory/write",
            {
                "operations": [
                    {
                        "operation": "create",
                        "reason": "r",
                        "node": {
                            "kind": kind,
                            "itemKey": key,
                            "userId": user,
                            "valueJson": text,
                            "title": text,
                            "content": text,
                            "confidence": 0.9,
                            "sourceQuote": text,
                        },
                    }
                ],
                "explicitUserIntent": True,
                "sourceMessageIds": [f"m-{i}"],
            },
        )
        ids.append(written["results"][0]["nodeId"])
    return ids


def _unreview(tenant: Tenant, ids: list[str]) -> None:
    with tenant_context(tenant):
        MemoryNode.objects.filter(pk__in=ids).update(review_state="unreviewed")


def _organize(api, committed, **body) -> dict:  # noqa: ANN001
    with committed():
        run_id = api.post("memory/organize", {"userId": "alice", **body}, expect=202)["runId"]
    return api.get(f"memory/organize/{run_id}")


PAIR = [("香菜", "用户不吃香菜"), ("cilantro", "Avoids cilantro."), ("garlic", "Avoids garlic.")]


def test_a_manual_run_in_review_mode_queues_and_a_person_applies(client, tenant_a, committed):  # noqa: ANN001
    api = api_for(client, tenant_a)
    ids = _seed(api, PAIR)
    _unreview(tenant_a, ids)
    run = _organize(api, committed)
    assert (run["state"], run["phase"], run["before"], run["after"], run["compressionRatio"]) == (
        "done",
        "done",
        3,
        3,
        1.0,
    )
    [item] = run["items"]
    assert (item["action"], item["risk"], item["decision"], sorted(item["members"])) == (
        "merge_into",
        "low",
        "queued",
        sorted(ids[:2]),
    )
    assert run["headroomAtStart"] == 500 - 3 and run["planner"] == "rules" and run["tokensUsed"] == 0
    applied = api.post(f"memory/organize/{run['runId']}/items/{item['id']}", {"decision": "apply"})
    assert applied["decision"] == "applied" and applied["resultNodeId"]
    api.post(
        f"memory/organize/{run['runId']}/items/{item['id']}",
        {"decision": "dismiss"},
        expect=409,
        code="conflict",
    )
    api.post(f"memory/organize/{run['runId']}/items/{item['id']}", {"decision": "maybe"}, expect=400)
    api.post(f"memory/organize/{run['runId']}/items/not-an-id", {"decision": "apply"}, expect=404)
    api.get("memory/organize/00000000-0000-0000-0000-000000000000", expect=404)
    api.post("memory/organize", {"userId": "alice", "mode": "whenever"}, expect=400)
    api.post("memory/organize", {"scope": "global"}, expect=400)
    after = api.get(f"memory/organize/{run['runId']}")
    assert (after["after"], after["compressionRatio"]) == (2, round(2 / 3, 4))

    merged = api.get(f"memory/nodes/{applied['resultNodeId']}")
    assert sorted(merged["sourceMessageIds"]) == ["m-0", "m-1"]
    history = api.get(f"memory/nodes/{applied['resultNodeId']}/history")
    assert {ids[0], ids[1], applied["resultNodeId"]} <= {n["id"] for n in history["chain"]}
    source_history = api.get(f"memory/nodes/{ids[1]}/history")
    assert applied["resultNodeId"] in {n["id"] for n in source_history["chain"]}
    with tenant_context(tenant_a):
        assert set(MemoryNode.objects.filter(pk__in=ids[:2]).values_list("status", flat=True)) == {
            "superseded"
        }
        linked = MemoryAuditEvent.objects.filter(
            node_id__in=ids[:2], payload__mergedInto=applied["resultNodeId"]
        )
        assert linked.count() == 1


def test_auto_low_applies_low_risk_and_scheduled_never_applies_medium(client, tenant_a, committed):  # noqa: ANN001
    api = api_for(client, tenant_a)
    ids = _seed(api, PAIR)  # written by an agent key: reviewed, so at least medium
    run = _organize(api, committed, mode="scheduled")
    assert [(i["risk"], i["decision"]) for i in run["items"]] == [("medium", "queued")]
    run = _organize(api, committed, applyMode="auto_low")
    assert [(i["risk"], i["decision"]) for i in run["items"]] == [("medium", "queued")]
    _unreview(tenant_a, ids)
    run = _organize(api, committed, mode="scheduled")
    assert [(i["risk"], i["decision"]) for i in run["items"]] == [("low", "applied")] and run["after"] == 2


def test_a_failing_cluster_rolls_back_alone(client, tenant_a, committed, monkeypatch):  # noqa: ANN001
    from memory.errors import RevisionConflict
    from memory.services import organize as service

    api = api_for(client, tenant_a)
    ids = _seed(api, [*PAIR[:2], ("大蒜", "不吃大蒜"), ("garlic", "Avoids garlic.")])
    _unreview(tenant_a, ids)
    real_insert = service.nodes_insert

    def insert(nodes):  # noqa: ANN001, ANN202
        if "大蒜" in nodes[0].title or "garlic" in nodes[0].title:
            raise RevisionConflict("boom")
        return real_insert(nodes)

    monkeypatch.setattr(service, "nodes_insert", insert)
    run = _organize(api, committed, applyMode="auto_low")
    decisions = sorted(i["decision"] for i in run["items"])
    assert decisions == ["applied", "rejected"] and run["rejections"] == {"revision_conflict": 1}
    with tenant_context(tenant_a):
        statuses = dict(MemoryNode.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert [statuses[MemoryNode._meta.pk.to_python(i)] for i in ids] == [
        "superseded",
        "superseded",
        "active",
        "active",
    ]


class FakePlanner(JsonHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cards = json.loads(body["messages"][1]["content"])["cards"]
        type(self).requests.append(body)
        mode = self.path.split("/")[1]
        answer = {
            "action": "merge_into",
            "target": cards[-1]["id"],
            "title": "Avoids cilantro (香菜)",
            "content": "Avoids cilantro / 不吃香菜",
            "confidence": 0.9,
            "reason": "same",
        }
        text = "not json at all" if mode == "garbage" else json.dumps(answer, ensure_ascii=False)
        self.reply(
            200,
            {
                "choices": [{"message": {"role": "assistant", "content": text}}],
                "usage": {"total_tokens": 321},
            },
        )


@pytest.mark.parametrize("mode", ["ok", "garbage"])
def test_the_model_plans_and_a_bad_answer_falls_back_to_the_rules(
    client, tenant_a, committed, settings, monkeypatch, mode
):  # noqa: ANN001
    api = api_for(client, tenant_a)
    ids = _seed(api, PAIR)
    _unreview(tenant_a, ids)
    with loopback_server(FakePlanner, monkeypatch) as url:
        settings.EKKO_LLM_BASE_URL, settings.EKKO_LLM_MODEL, settings.EKKO_LLM_TIMEOUT = (
            f"{url}/{mode}/v1",
            "m",
            5,
        )
        run = _organize(api, committed, applyMode="auto_low")
    [item] = run["items"]
    assert run["tokensUsed"] == 321 and item["decision"] == "applied"
    merged = api.get(f"memory/nodes/{item['resultNodeId']}")
    if mode == "ok":
        assert item["planner"] == "llm:m" and merged["content"] == "Avoids cilantro / 不吃香菜"
    else:
        assert item["planner"] == "rules" and run["rejections"] == {"fallback_model_unavailable": 1}


def test_a_pinned_key_cannot_see_another_workspaces_run(client, tenant_a, committed):  # noqa: ANN001
    from tenants.services import workspace_create

    other = workspace_create(tenant=tenant_a, name="Other")
    api = api_for(client, tenant_a)
    run = _organize(api, committed, scope="workspace")
    pinned = api_for(client, tenant_a, workspace=other)
    pinned.get(f"memory/organize/{run['runId']}", expect=404)
    read_only = api_for(client, tenant_a, read_only=True)
    read_only.post("memory/organize", {"userId": "alice"}, expect=403)
    # The service's writer guard refuses a read-only key's decision on a run it may see.
    read_only.post(f"memory/organize/{run['runId']}/items/{uuid.uuid4()}", {"decision": "apply"}, expect=403)


def test_the_due_sweep_opens_scheduled_runs_once_per_period(client, tenant_a, committed):  # noqa: ANN001
    api = api_for(client, tenant_a)
    _seed(api, PAIR)
    assert organize_due() == 0  # schedule off
    Tenant.objects.filter(pk=tenant_a.pk).update(organize_schedule=OrganizeSchedule.DAILY)
    with committed():
        assert organize_due() == 1
    assert organize_due() == 0
    assert organize_due(now=timezone.now() + timedelta(days=1, minutes=1)) == 1
    Tenant.objects.filter(pk=tenant_a.pk).update(organize_schedule=OrganizeSchedule.WEEKLY)
    assert organize_due(now=timezone.now() + timedelta(days=3)) == 0
    with tenant_context(tenant_a):
        runs = list(OrganizeRun.objects.order_by("created_at"))
    assert runs[0].trigger == "scheduled" and runs[0].state == "done" and runs[0].requested_by == "system"


def test_a_hard_forget_erases_the_merge_sources_and_the_items_copies(client, tenant_a, committed):  # noqa: ANN001
    api = api_for(client, tenant_a)
    ids = _seed(api, PAIR)
    _unreview(tenant_a, ids)
    run = _organize(api, committed, applyMode="auto_low")
    [item] = run["items"]
    merged = api.get(f"memory/nodes/{item['resultNodeId']}")
    forgot = api.post(
        "memory/forget",
        {
            "id": merged["id"],
            "expectedRevision": merged["revision"],
            "reason": "r",
            "explicitUserIntent": True,
            "mode": "hard",
        },
    )
    assert forgot["receipt"]["removed"]["memory_organizeitem"] == 1
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(pk__in=[*ids[:2], merged["id"]]).exists()
        assert MemoryNode.objects.filter(pk=ids[2]).exists()
        assert OrganizeItem.objects.get(pk=item["id"]).proposed is None


def test_a_hard_forget_that_matches_nothing_counts_zero_rows(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    forgot = api.post(
        "memory/forget", {"kind": "food_avoidance", "reason": "r", "explicitUserIntent": True, "mode": "hard"}
    )
    assert forgot["receipt"]["removed"]["memory_memorynode"] == 0
    assert forgot["receipt"]["removed"]["memory_organizeitem"] == 0


def test_a_queued_merge_of_a_card_changed_since_the_scan_is_refused(client, tenant_a, committed):  # noqa: ANN001
    api = api_for(client, tenant_a)
    ids = _seed(api, PAIR)
    run = _organize(api, committed)
    [item] = run["items"]
    api.post(
        "memory/write",
        {
            "operations": [
                {
                    "operation": "update",
                    "targetId": ids[0],
                    "expectedRevision": 1,
                    "reason": "r",
                    "node": {"content": "不吃香菜，也不吃芹菜"},
                }
            ],
            "explicitUserIntent": True,
        },
    )
    decided = api.post(f"memory/organize/{run['runId']}/items/{item['id']}", {"decision": "apply"})
    assert decided["decision"] == "rejected" and decided["reason"].startswith("stale")
    assert api.get(f"memory/organize/{run['runId']}")["rejections"] == {"stale": 1}
    with tenant_context(tenant_a):
        assert set(MemoryNode.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"active"}
