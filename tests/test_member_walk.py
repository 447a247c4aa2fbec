"""Inside one tenant: a plain member reaches only their workspaces and acts only for themselves.

`test_every_route_refuses_a_member_outside_their_reach` walks the URLconf as mia, a member of
workspace X only, signed in through the browser session with CSRF, and names workspace Y (where
she does not belong) and ben's user id: every route answers 404 `not_found` like an unknown id
(or 403 `forbidden` where the role decides: exports, imports, new workspaces) and nothing of Y or
ben changes. A new API route without a member case fails `test_every_api_route_has_a_member_case`.
The same member's own work in X goes through. Selectors narrowed by `workspaceId` never reach a
card of another workspace, for keys and for members.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern

from memory.api import urls as api_urls
from memory.models import ExtractionRun, MemoryMessage, MemoryNode, MemorySummary, OrganizeRun
from tenants.context import tenant_context
from tenants.models import Role, Tenant, Workspace, WorkspaceMember
from tenants.services import membership_set, workspace_create
from tests.api_client import Api, api_for, api_for_person


def _person(tenant: Tenant, username: str, role: str) -> Any:
    user, _ = get_user_model().objects.get_or_create(username=username)
    membership_set(tenant=tenant, user=user, role=role)
    return user


def _join(tenant: Tenant, workspace: Workspace, user: Any) -> None:
    with tenant_context(tenant):
        WorkspaceMember.objects.create(tenant=tenant, workspace=workspace, user=user)


def _card(kind: str, item: str, title: str, **node: Any) -> dict:
    node = {"kind": kind, "itemKey": item, "valueJson": item, "title": title, "content": title, **node}
    return {"operation": "create", "reason": "the user asked", "node": node}


def _avoidance(item: str, **node: Any) -> dict:
    return _card("food_avoidance", item, f"不吃{item}", **node)


def _constraint(item: str, **node: Any) -> dict:
    return _card("hard_constraint", item, f"约束 {item}", scope="workspace", **node)


def _write(api: Api, *operations: dict, **kwargs: Any) -> list[dict]:
    return api.post("memory/write", {"operations": list(operations), "explicitUserIntent": True}, **kwargs)[
        "results"
    ]


@pytest.fixture
def office(client, tenant_a):  # noqa: ANN001
    """Tenant A: workspaces X and Y; mia (member) is in X only, ben (member) in Y; an agent key fills Y
    and ben's conversation `s-ben` in `default`, the workspace everyone belongs to."""
    x = workspace_create(tenant=tenant_a, name="Project X")
    y = workspace_create(tenant=tenant_a, name="Project Y")
    mia, ben = _person(tenant_a, "mia", Role.MEMBER), _person(tenant_a, "ben", Role.MEMBER)
    _join(tenant_a, x, mia)
    _join(tenant_a, y, ben)
    agent = api_for(client, tenant_a)
    agent.post(
        "messages",
        {
            "sessionId": "s-y",
            "workspaceId": y.slug,
            "userId": "ben",
            "messages": [{"id": "y1", "role": "user", "content": "记住：Y 项目只用 Postgres"}],
        },
        expect=201,
    )
    agent.post(
        "messages",
        {
            "sessionId": "s-ben",
            "userId": "ben",
            "messages": [{"id": "b1", "role": "user", "content": "我家住在杭州"}],
        },
        expect=201,
    )
    y_card = _write(agent, _constraint("postgres", workspaceId=y.slug))[0]
    ben_card = _write(agent, _avoidance("香菜", userId="ben", workspaceId=str(x.pk)))[0]
    agent.post(
        "summaries",
        {
            "sessionId": "s-y",
            "workspaceId": y.slug,
            "fromMessageId": "y1",
            "toMessageId": "y1",
            "summary": "Y 用 Postgres",
        },
        expect=201,
    )
    y_run = agent.post("extract", {"sessionId": "s-y", "workspaceId": y.slug}, expect=202)["taskId"]
    y_organize = agent.post("memory/organize", {"scope": "workspace", "workspaceId": y.slug},
                            expect=202)["runId"]
    ben_organize = agent.post("memory/organize", {"userId": "ben"}, expect=202)["runId"]
    return {
        "tenant": tenant_a,
        "x": x,
        "y": y,
        "mia": mia,
        "ben": ben,
        "agent": agent,
        "y_card": y_card,
        "ben_card": ben_card,
        "y_run": y_run,
        "y_organize": y_organize,
        "ben_organize": ben_organize,
    }


def _state(office: dict) -> dict:
    """What mia must never change: Y's rows, ben's cards and messages, the tenant's workspaces."""
    tenant, y, ben = office["tenant"], office["y"], office["ben"]
    with tenant_context(tenant):
        return {
            "nodes": sorted(
                MemoryNode.objects.filter(workspace=y).values_list("pk", "status", "revision", "content")
            )
            + sorted(MemoryNode.objects.filter(user=ben).values_list("pk", "status", "revision", "content")),
            "messages": sorted(MemoryMessage.objects.filter(workspace=y).values_list("message_id", "content"))
            + sorted(MemoryMessage.objects.filter(user=ben).values_list("message_id", "content")),
            "summaries": MemorySummary.objects.filter(workspace=y).count(),
            "runs": sorted(ExtractionRun.objects.filter(workspace=y).values_list("pk", flat=True)),
            "organize_runs": OrganizeRun.objects.count(),
            "workspaces": sorted(Workspace.objects.values_list("slug", flat=True)),
        }


NOT_FOUND, FORBIDDEN = (404, "not_found"), (403, "forbidden")
# A browser uploads the import as a form; the refusal comes before the file is read.
MULTIPART = {"file": SimpleUploadedFile("empty.sqlite", b"")}


def _member_requests(office: dict) -> dict[str, list[tuple[str, str, dict, tuple[int, str]]]]:
    y, y_card, ben_card = office["y"].slug, office["y_card"], office["ben_card"]
    ys = str(office["y"].pk)
    hijack = {"content": "hijack", "title": "hijack"}
    forget = {"reason": "r", "explicitUserIntent": True, "mode": "hard"}
    return {
        "api-workspaces": [("POST", "workspaces", {"name": "Side project"}, FORBIDDEN)],
        "api-workspace-export": [
            ("GET", f"workspaces/{y}/export.sqlite", {}, NOT_FOUND),
            ("GET", f"workspaces/{ys}/export.sqlite", {}, NOT_FOUND),
            ("GET", "workspaces/default/export.sqlite", {}, FORBIDDEN),
            ("GET", f"workspaces/{office['x'].slug}/export.sqlite", {}, FORBIDDEN),
        ],
        "api-workspace-import": [
            ("POST", f"workspaces/{y}/import", MULTIPART, NOT_FOUND),
            ("POST", "workspaces/default/import", MULTIPART, FORBIDDEN),
        ],
        "api-messages": [
            (
                "POST",
                "messages",
                {"sessionId": "s-y", "workspaceId": y, "messages": [{"role": "user", "content": "hi"}]},
                NOT_FOUND,
            ),
            (
                "POST",
                "messages",
                {"sessionId": "s-m", "userId": "ben", "messages": [{"role": "user", "content": "I am ben"}]},
                NOT_FOUND,
            ),
            ("GET", "messages", {"sessionId": "s-y", "workspaceId": y}, NOT_FOUND),
            ("GET", "messages", {"sessionId": "s-y", "workspaceId": ys}, NOT_FOUND),
            ("GET", "messages", {"sessionId": "s-ben"}, NOT_FOUND),
            (
                "POST",
                "messages",
                {"sessionId": "s-ben", "messages": [{"role": "user", "content": "hi"}]},
                NOT_FOUND,
            ),
        ],
        "api-messages-search": [
            ("POST", "messages/search", {"queryText": "Postgres", "workspaceId": y}, NOT_FOUND),
            ("POST", "messages/search", {"queryText": "香菜", "userId": "ben"}, NOT_FOUND),
            ("POST", "messages/search", {"queryText": "杭州", "sessionId": "s-ben"}, NOT_FOUND),
        ],
        "api-memory-search": [
            ("POST", "memory/search", {"queryText": "Postgres", "workspaceId": y}, NOT_FOUND),
            ("POST", "memory/search", {"all": True, "userId": "ben"}, NOT_FOUND),
            ("POST", "memory/search", {"all": True, "sessionId": "s-ben"}, NOT_FOUND),
        ],
        "api-node": [
            ("GET", f"memory/nodes/{y_card['nodeId']}", {}, NOT_FOUND),
            ("GET", f"memory/nodes/{ben_card['nodeId']}", {}, NOT_FOUND),
        ],
        "api-node-history": [
            ("GET", f"memory/nodes/{y_card['nodeId']}/history", {}, NOT_FOUND),
            ("GET", f"memory/nodes/{ben_card['nodeId']}/history", {}, NOT_FOUND),
        ],
        "api-memory-get": [
            ("POST", "memory/get", {"kind": "hard_constraint", "workspaceId": y}, NOT_FOUND),
            ("POST", "memory/get", {"kind": "food_avoidance", "userId": "ben"}, NOT_FOUND),
        ],
        "api-memory-write": [
            (
                "POST",
                "memory/write",
                {
                    "operations": [
                        _card("temporary_state", "busy", "忙", scope="session", sessionId="s-ben")
                    ],
                    "explicitUserIntent": True,
                },
                NOT_FOUND,
            ),
            (
                "POST",
                "memory/write",
                {"operations": [_constraint("mysql", workspaceId=y)], "explicitUserIntent": True},
                NOT_FOUND,
            ),
            (
                "POST",
                "memory/write",
                {"operations": [_avoidance("葱", scope="user", userId="ben")], "explicitUserIntent": True},
                NOT_FOUND,
            ),
            (
                "POST",
                "memory/write",
                {
                    "operations": [
                        {
                            "operation": "update",
                            "targetId": y_card["nodeId"],
                            "expectedRevision": 1,
                            "reason": "r",
                            "node": hijack,
                        }
                    ],
                    "explicitUserIntent": True,
                },
                NOT_FOUND,
            ),
            (
                "POST",
                "memory/write",
                {
                    "operations": [
                        {
                            "operation": "expire",
                            "targetId": ben_card["nodeId"],
                            "expectedRevision": 1,
                            "reason": "r",
                            "node": {},
                        }
                    ],
                    "explicitUserIntent": True,
                },
                NOT_FOUND,
            ),
        ],
        "api-memory-forget": [
            ("POST", "memory/forget", {"id": y_card["nodeId"], "expectedRevision": 1, **forget}, NOT_FOUND),
            ("POST", "memory/forget", {"id": ben_card["nodeId"], "expectedRevision": 1, **forget}, NOT_FOUND),
            (
                "POST",
                "memory/forget",
                {"kind": "hard_constraint", "workspaceId": y, "all": True, **forget},
                NOT_FOUND,
            ),
            (
                "POST",
                "memory/forget",
                {"kind": "food_avoidance", "userId": "ben", "all": True, **forget},
                NOT_FOUND,
            ),
        ],
        "api-context": [
            ("POST", "context", {"sessionId": "s-y", "workspaceId": y, "queryText": "数据库"}, NOT_FOUND),
            ("POST", "context", {"sessionId": "s-m", "userId": "ben", "queryText": "吃什么"}, NOT_FOUND),
            ("POST", "context", {"sessionId": "s-ben", "queryText": "住在哪"}, NOT_FOUND),
        ],
        "api-summaries": [
            (
                "POST",
                "summaries",
                {
                    "sessionId": "s-y",
                    "workspaceId": y,
                    "fromMessageId": "y1",
                    "toMessageId": "y1",
                    "summary": "x",
                },
                NOT_FOUND,
            ),
            (
                "POST",
                "summaries",
                {"sessionId": "s-ben", "fromMessageId": "b1", "toMessageId": "b1", "summary": "x"},
                NOT_FOUND,
            ),
        ],
        "api-summaries-latest": [
            ("GET", "summaries/latest", {"sessionId": "s-y", "workspaceId": y}, NOT_FOUND),
            ("GET", "summaries/latest", {"sessionId": "s-ben"}, NOT_FOUND),
        ],
        "api-extract": [
            ("POST", "extract", {"sessionId": "s-y", "workspaceId": y}, NOT_FOUND),
            ("POST", "extract", {"sessionId": "s-m", "userId": "ben"}, NOT_FOUND),
            ("POST", "extract", {"sessionId": "s-ben"}, NOT_FOUND),
        ],
        "api-extract-status": [("GET", f"extract/{office['y_run']}", {}, NOT_FOUND)],
        "api-memory-quota": [
            ("GET", "memory/quota", {"workspaceId": y}, NOT_FOUND),
            ("GET", "memory/quota", {"userId": "ben"}, NOT_FOUND),
        ],
        "api-memory-organize": [
            ("POST", "memory/organize", {"scope": "workspace", "workspaceId": y}, NOT_FOUND),
            ("POST", "memory/organize", {"userId": "ben"}, NOT_FOUND),
        ],
        "api-memory-organize-status": [
            ("GET", f"memory/organize/{office['y_organize']}", {}, NOT_FOUND),
            ("GET", f"memory/organize/{office['ben_organize']}", {}, NOT_FOUND),
        ],
        "api-memory-organize-item": [
            ("POST", f"memory/organize/{run}/items/{uuid.UUID(int=0)}", {"decision": "apply"}, NOT_FOUND)
            for run in (office["y_organize"], office["ben_organize"])
        ],
    }


# Routes that name no workspace, person or tenant-owned id, with the reason.
NO_REACH = {"api-tools": "static tool definitions"}


def _api_route_names() -> list[str]:
    return [p.name for p in api_urls.urlpatterns if isinstance(p, URLPattern)]


def test_every_api_route_has_a_member_case(office):
    covered = set(_member_requests(office)) | set(NO_REACH)
    missing = set(_api_route_names()) - covered
    assert not missing, f"add member cases (another workspace, another person) for {sorted(missing)}"


@pytest.mark.parametrize("route", sorted(set(_api_route_names()) - set(NO_REACH)))
def test_every_route_refuses_a_member_outside_their_reach(office, route):
    before = _state(office)
    mia = api_for_person("mia")
    for method, path, body, (status, code) in _member_requests(office)[route]:
        mia.call(method, path, body, expect=status, code=code, multipart=body is MULTIPART)
    assert _state(office) == before


def test_an_unknown_workspace_and_one_the_member_does_not_belong_to_answer_alike(office):
    mia, y = api_for_person("mia"), office["y"].slug
    unknown = mia.post("memory/search", {"all": True, "workspaceId": "nowhere"}, expect=404)
    hidden = mia.post("memory/search", {"all": True, "workspaceId": y}, expect=404)
    assert unknown["code"] == hidden["code"] == "not_found"
    assert unknown["detail"].replace("nowhere", y) == hidden["detail"]
    unknown_user = mia.post("memory/search", {"all": True, "userId": "nobody"}, expect=404)
    other_user = mia.post("memory/search", {"all": True, "userId": "ben"}, expect=404)
    assert unknown_user["code"] == other_user["code"] == "not_found"
    assert unknown_user["detail"].replace("nobody", "ben") == other_user["detail"]


def test_a_member_lists_only_the_workspaces_they_belong_to(office):
    mia = api_for_person("mia")
    assert [w["slug"] for w in mia.get("workspaces")["workspaces"]] == ["default", "project-x"]
    assert len(office["agent"].get("workspaces")["workspaces"]) == 3
    owner = api_for_person("alice")
    assert [w["slug"] for w in owner.get("workspaces")["workspaces"]] == ["default", "project-x", "project-y"]


def test_a_member_works_in_their_own_workspace_and_for_themselves(office):
    mia, x = api_for_person("mia"), office["x"].slug
    mia.post(
        "messages",
        {
            "sessionId": "s-m",
            "workspaceId": x,
            "userId": "mia",
            "messages": [{"id": "m1", "role": "user", "content": "记住：X 项目只用 Python 3.11，我不吃葱"}],
        },
        expect=201,
    )
    assert [m["id"] for m in mia.get("messages", {"sessionId": "s-m", "workspaceId": x})["messages"]] == [
        "m1"
    ]
    written = _write(
        mia, _constraint("python311", workspaceId=x), _avoidance("葱", scope="user", userId="mia")
    )
    assert [r["action"] for r in written] == ["created", "created"]
    found = mia.post("memory/search", {"all": True, "workspaceId": x})
    titles = {n["title"] for n in found["exact"]}
    assert (
        {"约束 python311", "不吃葱"} <= titles and "约束 postgres" not in titles and "不吃香菜" not in titles
    )
    got = mia.post("memory/get", {"kind": "hard_constraint", "workspaceId": x})["node"]
    assert got["id"] == written[0]["nodeId"]
    assert mia.post("context", {"sessionId": "s-m", "workspaceId": x, "queryText": "用什么"})["prompt"]
    mia.post(
        "summaries",
        {
            "sessionId": "s-m",
            "workspaceId": x,
            "fromMessageId": "m1",
            "toMessageId": "m1",
            "summary": "X 用 Python",
        },
        expect=201,
    )
    assert (
        mia.get("summaries/latest", {"sessionId": "s-m", "workspaceId": x})["summary"]["summary"]
        == "X 用 Python"
    )
    mia.post("extract", {"sessionId": "s-m", "workspaceId": x}, expect=202)
    forgotten = mia.post(
        "memory/forget",
        {"id": written[1]["nodeId"], "expectedRevision": 1, "reason": "r", "explicitUserIntent": True},
    )
    assert forgotten["deletedIds"] == [written[1]["nodeId"]]


def test_owners_and_admins_act_for_other_members(office):
    alice = api_for_person("alice")
    written = _write(alice, _avoidance("蒜", scope="user", userId="ben", workspaceId=office["y"].slug))
    assert written[0]["action"] == "created"
    found = alice.post("memory/search", {"all": True, "userId": "ben"})
    assert {"不吃香菜", "不吃蒜"} <= {n["title"] for n in found["exact"]}
    assert alice.get(f"workspaces/{office['y'].slug}/export.sqlite", expect=200) is None


def test_a_member_reads_only_their_own_conversations_of_a_shared_workspace(office):
    mia = api_for_person("mia")
    mia.post(
        "messages",
        {"sessionId": "s-m", "messages": [{"id": "m1", "role": "user", "content": "杭州下雨了"}]},
        expect=201,
    )
    found = mia.post("messages/search", {"queryText": "杭州"})["messages"]
    assert [(m["sessionId"], m["id"]) for m in found] == [("s-m", "m1")]
    # The pages draw the same line: the session list shows her conversation, not ben's.
    sessions_page = mia.client.get("/sessions/").content.decode()
    assert "s-m" in sessions_page and "s-ben" not in sessions_page
    alice = api_for_person("alice")
    assert {m["sessionId"] for m in alice.post("messages/search", {"queryText": "杭州"})["messages"]} == {
        "s-m",
        "s-ben",
    }


# --------------------------------------------------------------------------- selectors honour workspaceId


def test_a_key_selector_naming_a_workspace_never_matches_another(office):
    agent, x, y = office["agent"], office["x"].slug, office["y"].slug
    x_card = _write(agent, _constraint("postgres", workspaceId=x))[0]
    agent.post("memory/get", {"kind": "hard_constraint"}, expect=409, code="requires_confirmation")
    assert (
        agent.post("memory/get", {"kind": "hard_constraint", "workspaceId": x})["node"]["id"]
        == x_card["nodeId"]
    )
    assert (
        agent.post("memory/get", {"key": "hard_constraint:postgres", "workspaceId": y})["node"]["id"]
        == (office["y_card"]["nodeId"])
    )
    forgotten = agent.post(
        "memory/forget",
        {"kind": "hard_constraint", "workspaceId": x, "all": True, "reason": "r", "explicitUserIntent": True},
    )
    assert forgotten["deletedIds"] == [x_card["nodeId"]]
    assert agent.get(f"memory/nodes/{office['y_card']['nodeId']}")["status"] == "active"


def test_a_member_selector_naming_their_workspace_never_matches_default(office):
    mia, x = api_for_person("mia"), office["x"].slug
    in_default = _write(mia, _constraint("redis"))[0]
    in_x = _write(mia, _constraint("redis", workspaceId=x))[0]
    assert (
        mia.post("memory/get", {"key": "hard_constraint:redis", "workspaceId": x})["node"]["id"]
        == in_x["nodeId"]
    )
    forgotten = mia.post(
        "memory/forget",
        {
            "key": "hard_constraint:redis",
            "workspaceId": "default",
            "reason": "r",
            "explicitUserIntent": True,
            "mode": "hard",
        },
    )
    assert forgotten["deletedIds"] == [in_default["nodeId"]]
    assert mia.get(f"memory/nodes/{in_x['nodeId']}")["status"] == "active"
