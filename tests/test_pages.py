"""Browser pages through Django's test client: full page vs htmx fragment, CSRF, who sees and changes
what (owner/admin/member/viewer), tenant crossing, edit conflicts, forget/restore and API keys.

Data is written through the services (memory.services.nodes, tenants.services), as the agent API would.
Tenant-global memories cannot be written by any caller, so `global_node` inserts one directly.
"""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from memory.models import MemoryAuditEvent, MemoryNode, NodeStatus
from memory.services import message_append_batch, node_write_batch, summary_append
from memory.visibility import Viewer, owner_ref
from tenants.context import tenant_context
from tenants.models import ApiKey, Role, Scope, Tenant, Workspace
from tenants.services import api_key_authenticate, api_key_create, membership_set, workspace_create

PASSWORD = "pw-for-tests-1"
HTMX = {"HTTP_HX_REQUEST": "true"}


# --------------------------------------------------------------------------- data


def default_workspace(tenant: Tenant) -> Workspace:
    with tenant_context(tenant):
        return Workspace.objects.get(tenant=tenant, slug=Workspace.DEFAULT_SLUG)


def person(tenant: Tenant, username: str, role: str) -> object:
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_password(PASSWORD)
        user.save()
    membership_set(tenant=tenant, user=user, role=role)
    return user


def agent_viewer(
    tenant: Tenant, user: object, *, workspace: Workspace | None = None, session_id: str = "s1"
) -> Viewer:
    return Viewer(
        tenant=tenant,
        workspace=workspace or default_workspace(tenant),
        session_id=session_id,
        user=user,
        write_scopes=frozenset({"session", "workspace", "user"}),
        read_only=False,
        actor="api_key:ekko_test",
    )


def remember(
    tenant: Tenant,
    user: object,
    *,
    item: str = "香菜",
    title: str = "不吃香菜",
    content: str = "用户不吃香菜",
    scope: str = "user",
    kind: str = "food_avoidance",
    workspace: Workspace | None = None,
    session_id: str = "s1",
    said: str | None = None,
) -> MemoryNode:
    """Capture the evidence message and write the memory through the services, as an agent would."""
    viewer = agent_viewer(tenant, user, workspace=workspace, session_id=session_id)
    messages = message_append_batch(
        viewer=viewer,
        session_id=session_id,
        messages=[{"role": "user", "content": said or f"我说过：{content}"}],
    )
    node = {
        "kind": kind,
        "item_key": item,
        "value_json": item,
        "value_json_given": True,
        "title": title,
        "content": content,
        "scope": scope,
    }
    if scope == "session":
        node["session_id"] = session_id
    result = node_write_batch(
        viewer=viewer,
        operations=[{"operation": "create", "reason": "the user asked", "node": node}],
        explicit_user_intent=True,
        source_message_ids=[m.message_id for m in messages],
    )
    return result[0].node


def global_node(tenant: Tenant, *, title: str = "公司规定：回答用中文") -> MemoryNode:
    workspace = default_workspace(tenant)
    now = timezone.now()
    with tenant_context(tenant):
        return MemoryNode.objects.create(
            tenant=tenant,
            workspace=workspace,
            scope=Scope.GLOBAL,
            owner_ref=owner_ref(scope="global", workspace_id=workspace.pk, session_id=None, user_id=None),
            kind="language_preference",
            key="language_preference",
            domain="沟通",
            category_path=["沟通", "语言"],
            category_path_text="沟通/语言",
            type="preference",
            value_json="zh",
            title=title,
            content=title,
            created_at=now,
            updated_at=now,
        )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):  # noqa: ANN001
    # The default hasher takes ~0.3 s per user on purpose; tests create and sign in many.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def signed_in(username: str, **client_kwargs: object) -> Client:
    client = Client(**client_kwargs)
    client.force_login(get_user_model().objects.get(username=username))
    return client


def node_state(tenant: Tenant, node_id: uuid.UUID) -> MemoryNode | None:
    with tenant_context(tenant):
        return MemoryNode.objects.filter(pk=node_id).first()


@pytest.fixture
def team(tenant_a, tenant_b):  # noqa: ANN001
    """Tenant A with one person per role, each with a personal memory; tenant B with bob's memory."""
    users = {"alice": get_user_model().objects.get(username="alice")}
    for name, role in [("adam", Role.ADMIN), ("mia", Role.MEMBER), ("vera", Role.VIEWER)]:
        users[name] = person(tenant_a, name, role)
    nodes = {
        name: remember(
            tenant_a, user, item=f"{name}-香菜", title=f"{name} 不吃香菜", session_id=f"chat-{name}"
        )
        for name, user in users.items()
    }
    nodes["global"] = global_node(tenant_a)
    nodes["workspace"] = remember(
        tenant_a,
        users["alice"],
        kind="hard_constraint",
        item="python311",
        title="项目只用 Python 3.11",
        content="项目只用 Python 3.11",
        scope="workspace",
    )
    bob = get_user_model().objects.get(username="bob")
    nodes["bob"] = remember(tenant_b, bob, title="bob 不吃香菜", session_id="chat-bob")
    return {"tenant": tenant_a, "other": tenant_b, "users": users, "nodes": nodes}


# --------------------------------------------------------------------------- sign in, full page vs fragment


def test_pages_need_sign_in_and_login_returns_to_the_page(team):
    client = Client()
    response = client.get("/memories/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=/memories/")
    response = client.post("/login/", {"username": "alice", "password": PASSWORD, "next": "/memories/"})
    assert response.status_code == 302 and response["Location"] == "/memories/"
    assert client.post("/login/", {"username": "alice", "password": "wrong"}).status_code == 400


def test_login_ignores_an_offsite_next(team):
    response = Client().post(
        "/login/", {"username": "alice", "password": PASSWORD, "next": "https://evil.test/"}
    )
    assert response["Location"] == "/"


def test_sign_out_is_a_post(team):
    client = signed_in("alice")
    assert client.get("/logout/").status_code == 405
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


@pytest.mark.parametrize(
    "path,fragment_id",
    [
        ("/", 'id="overview"'),
        ("/memories/", 'id="listing"'),
        ("/sessions/", 'id="sessions"'),
        ("/keys/", 'id="keys"'),
    ],
)
def test_htmx_request_gets_the_fragment_plain_request_the_page(team, path, fragment_id):
    client = signed_in("alice")
    page = client.get(path)
    assert page.status_code == 200
    html = page.content.decode()
    assert html.startswith("<!doctype html>") and fragment_id in html and "htmx-2.min.js" in html
    assert "HX-Request" in page["Vary"]
    fragment = client.get(path, **HTMX)
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert fragment_id in body and "<html" not in body and "htmx-2.min.js" not in body


def test_history_restore_gets_the_full_page(team):
    response = signed_in("alice").get(
        "/memories/", HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true"
    )
    assert "<html" in response.content.decode()


def test_facets_are_fields_of_the_filter_form_and_fragments_carry_only_results(team):
    client = signed_in("alice")
    page = client.get("/memories/?q=香菜&category=生活技能").content.decode()
    assert re.search(r'<input type="radio" form="filters" name="category" value="生活技能" checked>', page)
    assert 'hx-trigger="input changed delay:300ms from:#id_q, change, change from:#facets' in page
    listing = client.get(
        "/memories/?q=香菜", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="listing"
    ).content.decode()
    assert 'id="filters"' not in listing and 'id="facets"' not in listing and 'id="listing"' in listing


def test_detail_fragment_and_page(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice")
    page = client.get(f"/memories/{node.pk}/").content.decode()
    assert "<html" in page and "alice 不吃香菜" in page
    fragment = client.get(f"/memories/{node.pk}/", **HTMX).content.decode()
    assert fragment.lstrip().startswith('<article id="detail"') and "<html" not in fragment


def test_every_hx_get_has_a_real_href_or_action(team):
    client = signed_in("alice")
    node = team["nodes"]["alice"]
    for path in [
        "/",
        "/memories/?category=生活技能&kind=food_avoidance&tag=x",
        f"/memories/{node.pk}/",
        "/sessions/",
        "/keys/",
        f"/memories/{node.pk}/edit/",
    ]:
        html = client.get(path).content.decode()
        for tag in re.findall(r"<(?:a|form)\b[^>]*\bhx-get=[^>]*>", html):
            url = re.search(r'hx-get="([^"]*)"', tag).group(1)
            assert f'href="{url}"' in tag or f'action="{url}"' in tag, f"{path}: {tag} has no real link"


def test_htmx_and_csrf_come_from_the_body_and_vendored_script(team):
    html = signed_in("alice").get("/memories/").content.decode()
    assert re.search(r'<body hx-headers=\'\{"X-CSRFToken": "[^"]+"\}\'>', html)
    assert "/static/django_htmx/htmx-2.min.js" in html and "unpkg" not in html and "cdn" not in html.lower()


# --------------------------------------------------------------------------- CSRF


def test_csrf_is_enforced_on_every_change(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice", enforce_csrf_checks=True)
    posts = [
        (
            f"/memories/{node.pk}/edit/",
            {"title": "x", "content": "x", "importance": "0.5", "reason": "r", "expected_revision": "1"},
        ),
        (f"/memories/{node.pk}/forget/", {"mode": "hard", "reason": "r", "expected_revision": "1"}),
        ("/memories/forget/", {"target": f"{node.pk}:1", "confirmed": "1", "mode": "hard", "reason": "r"}),
        ("/keys/", {"name": "k"}),
        ("/logout/", {}),
    ]
    for path, data in posts:
        assert client.post(path, data, **HTMX).status_code == 403, path
    assert node_state(team["tenant"], node.pk).revision == 1


def test_csrf_token_from_hx_headers_is_accepted(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice", enforce_csrf_checks=True)
    html = client.get(f"/memories/{node.pk}/forget/").content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)
    response = client.post(
        f"/memories/{node.pk}/forget/",
        {"mode": "soft", "reason": "r", "expected_revision": "1"},
        HTTP_X_CSRFTOKEN=token,
        **HTMX,
    )
    assert response.status_code == 200 and response["HX-Redirect"] == "/memories/"
    assert node_state(team["tenant"], node.pk).status == NodeStatus.DELETED


# --------------------------------------------------------------------------- who sees what


def _results(html: str) -> str:
    """Return only the result list of a memory page (flash messages may repeat a title)."""
    start = html.find('<section class="results"')
    assert start >= 0, "no result list in this page"
    return html[start : html.index("</section>", start)]


def _listed(client: Client, query: str = "") -> str:
    return _results(client.get(f"/memories/?status=any{query}").content.decode())


def test_owner_and_admin_see_the_whole_tenant(team):
    for name in ["alice", "adam"]:
        html = _listed(signed_in(name))
        for other in ["alice", "adam", "mia", "vera"]:
            assert f"{other} 不吃香菜" in html, (name, other)
        assert "公司规定" in html and "项目只用 Python 3.11" in html
        assert "bob 不吃香菜" not in html


def test_member_sees_own_workspace_and_global_not_colleagues_personal(team):
    html = _listed(signed_in("mia"))
    assert "mia 不吃香菜" in html and "公司规定" in html and "项目只用 Python 3.11" in html
    for other in ["alice", "adam", "vera", "bob"]:
        assert f"{other} 不吃香菜" not in html
    client = signed_in("mia")
    assert client.get(f"/memories/{team['nodes']['alice'].pk}/").status_code == 404
    assert (
        client.post(
            f"/memories/{team['nodes']['alice'].pk}/forget/",
            {"mode": "hard", "reason": "r", "expected_revision": "1"},
        ).status_code
        == 404
    )


def test_member_cannot_change_a_tenant_global_memory(team):
    client = signed_in("mia")
    node = team["nodes"]["global"]
    detail = client.get(f"/memories/{node.pk}/").content.decode()
    assert "公司规定" in detail and f"/memories/{node.pk}/edit/" not in detail
    assert f"/memories/{node.pk}/forget/" not in detail
    assert (
        client.post(
            f"/memories/{node.pk}/forget/", {"mode": "soft", "reason": "r", "expected_revision": "1"}
        ).status_code
        == 403
    )
    assert client.get(f"/memories/{node.pk}/edit/").status_code == 403
    assert node_state(team["tenant"], node.pk).status == NodeStatus.ACTIVE


def test_member_workspaces_come_from_membership(team):
    tenant = team["tenant"]
    hidden = workspace_create(tenant=tenant, name="Secret project")
    remember(
        tenant,
        team["users"]["alice"],
        kind="hard_constraint",
        item="nda",
        title="NDA 项目约束",
        content="NDA 项目约束",
        scope="workspace",
        workspace=hidden,
    )
    client = signed_in("mia")
    page = client.get("/memories/").content.decode()
    assert "Secret project" not in page
    assert client.post("/switch/workspace/", {"target": hidden.pk}).status_code == 404
    admin = signed_in("adam")
    assert "Secret project" in admin.get("/memories/").content.decode()
    admin.post("/switch/workspace/", {"target": hidden.pk, "next": "/memories/"})
    assert "NDA 项目约束" in admin.get("/memories/").content.decode()


def test_viewer_reads_but_every_change_is_refused(team):
    client = signed_in("vera")
    own = team["nodes"]["vera"]
    detail = client.get(f"/memories/{own.pk}/").content.decode()
    assert "vera 不吃香菜" in detail
    assert f"/memories/{own.pk}/edit/" not in detail and f"/memories/{own.pk}/forget/" not in detail
    listing = client.get("/memories/").content.decode()
    assert 'type="checkbox" name="target"' not in listing and "/memories/forget/" not in listing
    refused = [
        client.get(f"/memories/{own.pk}/edit/"),
        client.post(
            f"/memories/{own.pk}/edit/",
            {"title": "x", "content": "x", "importance": "0.5", "reason": "r", "expected_revision": "1"},
        ),
        client.post(f"/memories/{own.pk}/forget/", {"mode": "hard", "reason": "r", "expected_revision": "1"}),
        client.post(
            "/memories/forget/", {"target": f"{own.pk}:1", "confirmed": "1", "mode": "hard", "reason": "r"}
        ),
        client.post(f"/memories/{own.pk}/restore/", {"expected_revision": "1"}),
    ]
    assert [r.status_code for r in refused] == [403] * 5
    assert node_state(team["tenant"], own.pk).revision == 1


@pytest.mark.parametrize("name,allowed", [("alice", True), ("adam", True), ("mia", False), ("vera", False)])
def test_api_keys_page_is_for_tenant_admins(team, name, allowed):
    client = signed_in(name)
    nav = client.get("/").content.decode()
    assert ('href="/keys/"' in nav) is allowed
    assert client.get("/keys/").status_code == (200 if allowed else 403)
    assert client.post("/keys/", {"name": "x", "write_scopes": ["session"]}).status_code == (
        200 if allowed else 403
    )


# --------------------------------------------------------------------------- tenant crossing


def test_another_tenants_objects_answer_404(team):
    tenant_b = team["other"]
    bob_node = team["nodes"]["bob"]
    bob_key = api_key_create(tenant=tenant_b, name="bob-agent").api_key
    client = signed_in("alice")
    for method, path, data in [
        ("get", f"/memories/{bob_node.pk}/", {}),
        ("get", f"/memories/{bob_node.pk}/edit/", {}),
        (
            "post",
            f"/memories/{bob_node.pk}/edit/",
            {"title": "x", "content": "x", "importance": "0.5", "reason": "r", "expected_revision": "1"},
        ),
        ("get", f"/memories/{bob_node.pk}/forget/", {}),
        (
            "post",
            f"/memories/{bob_node.pk}/forget/",
            {"mode": "hard", "reason": "r", "expected_revision": "1"},
        ),
        ("post", f"/memories/{bob_node.pk}/restore/", {"expected_revision": "1"}),
        ("get", "/sessions/chat-bob/", {}),
        ("post", f"/keys/{bob_key.pk}/revoke/", {}),
        ("get", f"/memories/{uuid.uuid4()}/", {}),
    ]:
        assert getattr(client, method)(path, data).status_code == 404, path
    # A bulk forget naming bob's memory forgets nothing.
    response = client.post(
        "/memories/forget/", {"target": f"{bob_node.pk}:1", "confirmed": "1", "mode": "hard", "reason": "r"}
    )
    assert response.status_code == 409
    assert node_state(tenant_b, bob_node.pk).status == NodeStatus.ACTIVE
    with tenant_context(tenant_b):
        assert ApiKey.objects.get(pk=bob_key.pk).revoked_at is None
    # Switching to a tenant one does not belong to is refused.
    assert client.post("/switch/tenant/", {"target": tenant_b.pk}).status_code == 404


def test_tenant_switcher_shares_the_session_key_with_the_browser_api(team):
    tenant_b = team["other"]
    alice = get_user_model().objects.get(username="alice")
    membership_set(tenant=tenant_b, user=alice, role=Role.MEMBER)
    client = signed_in("alice")
    assert "bob 不吃香菜" not in _listed(client)
    assert client.post("/switch/tenant/", {"target": tenant_b.pk}).status_code == 302
    assert client.session["ekko_tenant_id"] == tenant_b.pk
    html = _listed(client)
    assert (
        "alice 不吃香菜" not in html and "bob 不吃香菜" not in html
    )  # a member there, bob's memory is his own
    api = client.get("/api/v1/workspaces").json()
    assert [w["id"] for w in api["workspaces"]] == [str(default_workspace(tenant_b).pk)]


# --------------------------------------------------------------------------- list, search, filters


def test_search_filters_and_category_tree(team):
    client = signed_in("alice")
    html = client.get("/memories/?q=香菜").content.decode()
    assert "alice 不吃香菜" in html and "项目只用 Python 3.11" not in html
    html = client.get("/memories/?q=python").content.decode()
    assert "项目只用 Python 3.11" in html and "alice 不吃香菜" not in html
    html = client.get("/memories/?scope=workspace").content.decode()
    assert "项目只用 Python 3.11" in html and "alice 不吃香菜" not in html
    html = client.get("/memories/?category=生活技能/做饭").content.decode()
    assert "alice 不吃香菜" in html and "项目只用 Python 3.11" not in html
    assert 'name="category" value="生活技能/做饭" checked' in html  # the tree shows the chosen branch
    html = client.get("/memories/?type=constraint").content.decode()
    assert "项目只用 Python 3.11" in html and "alice 不吃香菜" not in html
    html = client.get("/memories/?kind=hard_constraint").content.decode()
    assert "项目只用 Python 3.11" in html and "alice 不吃香菜" not in html


def test_search_does_not_count_as_the_agent_recalling(team):
    signed_in("alice").get("/memories/?q=香菜")
    assert node_state(team["tenant"], team["nodes"]["alice"].pk).access_count == 0


def test_tag_filter_and_pagination(team):
    tenant, alice = team["tenant"], team["users"]["alice"]
    viewer = agent_viewer(tenant, alice)
    node_write_batch(
        viewer=viewer,
        explicit_user_intent=True,
        operations=[
            {
                "operation": "create",
                "reason": "r",
                "node": {
                    "kind": "skill",
                    "item_key": f"skill-{i}",
                    "value_json": f"skill {i}",
                    "value_json_given": True,
                    "title": f"技能 {i:02d}",
                    "content": f"技能 {i:02d}",
                    "tags": ["skills"] if i % 2 else [],
                },
            }
            for i in range(30)
        ],
    )
    client = signed_in("alice")
    first = client.get("/memories/?kind=skill").content.decode()
    second = client.get("/memories/?kind=skill&page=2").content.decode()
    assert "?kind=skill&amp;page=2" in first and "?kind=skill&amp;page=1" in second
    titles = [set(re.findall(r'class="card-title"[^>]*>(技能 \d\d)<', page)) for page in (first, second)]
    assert len(titles[0]) == 25 and len(titles[1]) == 5 and not titles[0] & titles[1]
    assert client.get("/memories/?kind=skill&page=99").status_code == 200  # clamped to the last page
    tagged = _results(client.get("/memories/?tag=skills").content.decode())
    assert "技能 01" in tagged and "技能 02" not in tagged


def _query_counts(client: Client, paths: list[str]) -> list[int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for path in paths:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(path).status_code == 200, path
        counts.append(len(captured.captured_queries))
    return counts


def _write_skills(tenant: Tenant, user: object, numbers: range) -> None:
    """Write skill cards, half personal and half in the session chat-alice, all tagged `t`."""
    node_write_batch(
        viewer=agent_viewer(tenant, user, session_id="chat-alice"),
        explicit_user_intent=True,
        operations=[
            {
                "operation": "create",
                "reason": "r",
                "node": {
                    "kind": "skill",
                    "item_key": f"s{i}",
                    "value_json": "x",
                    "value_json_given": True,
                    "title": f"技能 {i}",
                    "content": "香菜 技能",
                    "tags": ["t"],
                    "scope": "session" if i % 2 else "user",
                },
            }
            for i in numbers
        ],
    )


def test_page_query_counts_do_not_grow_with_rows(team, django_assert_max_num_queries):
    """No N+1: every page costs the same number of queries with 8 or 68 memories (savepoints included)."""
    tenant, alice = team["tenant"], team["users"]["alice"]
    node = team["nodes"]["alice"]
    paths = [
        "/",
        "/memories/",
        "/memories/?q=香菜",
        "/memories/?status=any&tag=t",
        f"/memories/{node.pk}/",
        "/sessions/",
        "/sessions/chat-alice/",
        "/keys/",
    ]
    _write_skills(tenant, alice, range(2))
    client = signed_in("alice")
    client.get("/")  # session and language warm-up
    before = _query_counts(client, paths)
    _write_skills(tenant, alice, range(2, 62))
    message_append_batch(
        viewer=agent_viewer(tenant, alice, session_id="chat-alice"),
        session_id="chat-alice",
        messages=[{"role": "user", "content": f"第 {i} 句"} for i in range(40)],
    )
    assert _query_counts(client, paths) == before
    for path in paths:
        with django_assert_max_num_queries(50):
            client.get(path)


# --------------------------------------------------------------------------- edit


def _edit_form(node: MemoryNode, **changes: str) -> dict[str, str]:
    data = {
        "title": node.title,
        "content": node.content,
        "value": node.value_json,
        "original_value": node.value_json,
        "tags": "",
        "importance": str(node.importance),
        "reason": "corrected",
        "expected_revision": str(node.revision),
    }
    data.update(changes)
    return data


def test_edit_writes_a_new_revision_and_shows_it(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice")
    form = client.get(f"/memories/{node.pk}/edit/", **HTMX).content.decode()
    assert 'id="card"' in form and 'for="id_title"' in form and "<html" not in form
    response = client.post(
        f"/memories/{node.pk}/edit/",
        _edit_form(node, content="用户完全不吃香菜和芫荽", tags="饮食, 忌口"),
        **HTMX,
    )
    assert response.status_code == 200
    assert response["HX-Retarget"] == "#detail" and "memoriesChanged" in response["HX-Trigger"]
    body = response.content.decode()
    assert (
        "用户完全不吃香菜和芫荽" in body and "r2" in body and "用户不吃香菜" in body
    )  # the diff keeps the old text
    fresh = node_state(team["tenant"], node.pk)
    assert fresh.revision == 2 and fresh.tags == ["饮食", "忌口"]
    with tenant_context(team["tenant"]):
        event = MemoryAuditEvent.objects.filter(node_id=node.pk, event_type="update").get()
    assert event.actor == "user:alice" and event.reason == "corrected"


def test_edit_conflict_is_explained_and_the_fresh_version_shown(team):
    node = team["nodes"]["alice"]
    tenant = team["tenant"]
    node_write_batch(
        viewer=agent_viewer(tenant, team["users"]["alice"]),
        explicit_user_intent=True,
        operations=[
            {
                "operation": "update",
                "target_id": node.pk,
                "expected_revision": 1,
                "reason": "agent",
                "node": {"content": "代理刚刚改过：不吃香菜，也不吃葱"},
            }
        ],
    )
    client = signed_in("alice")
    response = client.post(f"/memories/{node.pk}/edit/", _edit_form(node, content="我的版本"), **HTMX)
    assert response.status_code == 409
    body = response.content.decode()
    assert "Someone changed this memory" in body and "代理刚刚改过" in body and "我的版本" in body
    assert 'name="expected_revision" value="2"' in body
    assert node_state(tenant, node.pk).content == "代理刚刚改过：不吃香菜，也不吃葱"
    # Saving again, now knowingly over revision 2, works.
    again = client.post(
        f"/memories/{node.pk}/edit/", _edit_form(node, content="我的版本", expected_revision="2")
    )
    assert again.status_code == 302 and node_state(tenant, node.pk).content == "我的版本"


def test_edit_refusal_is_shown_in_the_form(team):
    node = team["nodes"]["alice"]
    response = signed_in("alice").post(
        f"/memories/{node.pk}/edit/", _edit_form(node, content="我的密码是 password: Hunter2secret"), **HTMX
    )
    assert response.status_code == 400 and "never keep passwords" in response.content.decode()
    assert node_state(team["tenant"], node.pk).revision == 1


# --------------------------------------------------------------------------- forget, bulk, restore


def test_forget_asks_in_a_dialog_that_explains_hard_is_irreversible(team):
    node = team["nodes"]["alice"]
    dialog = signed_in("alice").get(f"/memories/{node.pk}/forget/", **HTMX).content.decode()
    assert "<dialog open" in dialog and 'value="hard"' in dialog and "irreversible" in dialog
    assert 'method="dialog"' in dialog


def test_soft_forget_then_restore(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice")
    response = client.post(
        f"/memories/{node.pk}/forget/", {"mode": "soft", "reason": "不想让它记住", "expected_revision": "1"}
    )
    assert response.status_code == 303
    assert "alice 不吃香菜" not in _results(client.get("/memories/?q=香菜").content.decode())
    assert "alice 不吃香菜" in _results(client.get("/memories/?status=deleted").content.decode())
    detail = client.get(f"/memories/{node.pk}/").content.decode()
    assert f"/memories/{node.pk}/restore/" in detail
    restored = client.post(f"/memories/{node.pk}/restore/", {"expected_revision": "2"}, **HTMX)
    assert restored.status_code == 200 and "memoriesChanged" in restored["HX-Trigger"]
    assert node_state(team["tenant"], node.pk).status == NodeStatus.ACTIVE


def test_hard_forget_removes_the_row(team):
    node = team["nodes"]["alice"]
    client = signed_in("alice")
    response = client.post(
        f"/memories/{node.pk}/forget/", {"mode": "hard", "reason": "erase", "expected_revision": "1"}, **HTMX
    )
    assert response["HX-Redirect"] == "/memories/"
    assert node_state(team["tenant"], node.pk) is None
    assert client.get(f"/memories/{node.pk}/").status_code == 404


def test_forget_with_a_stale_revision_is_refused(team):
    node = team["nodes"]["alice"]
    response = signed_in("alice").post(
        f"/memories/{node.pk}/forget/", {"mode": "hard", "reason": "r", "expected_revision": "7"}, **HTMX
    )
    assert response.status_code == 409 and "Someone changed this memory" in response.content.decode()
    assert node_state(team["tenant"], node.pk) is not None


def test_bulk_forget_confirms_then_forgets_the_selected_revisions(team):
    tenant = team["tenant"]
    nodes = [team["nodes"]["alice"], team["nodes"]["workspace"]]
    targets = [f"{n.pk}:{n.revision}" for n in nodes]
    client = signed_in("alice")
    confirm = client.post("/memories/forget/", {"target": targets}, **HTMX)
    body = confirm.content.decode()
    assert confirm.status_code == 200 and "<dialog open" in body and "项目只用 Python 3.11" in body
    assert all(node_state(tenant, n.pk).status == NodeStatus.ACTIVE for n in nodes)
    done = client.post(
        "/memories/forget/", {"target": targets, "confirmed": "1", "mode": "soft", "reason": "清理"}, **HTMX
    )
    assert done.status_code == 200 and "memoriesChanged" in done["HX-Trigger"]
    assert all(node_state(tenant, n.pk).status == NodeStatus.DELETED for n in nodes)


def test_bulk_forget_with_nothing_selected(team):
    response = signed_in("alice").post("/memories/forget/", {}, **HTMX)
    assert response.status_code == 400 and "Nothing selected" in response.content.decode()


# --------------------------------------------------------------------------- sessions, dashboard, keys


def test_sessions_show_messages_summaries_and_only_ones_own_for_members(team):
    tenant, mia = team["tenant"], team["users"]["mia"]
    viewer = agent_viewer(tenant, mia, session_id="chat-mia")
    first = message_append_batch(
        viewer=viewer, session_id="chat-mia", messages=[{"role": "assistant", "content": "好的，明白了。"}]
    )[0]
    summary_append(
        viewer=viewer,
        session_id="chat-mia",
        data={
            "from_message_id": first.message_id,
            "to_message_id": first.message_id,
            "summary": "米娅说她不吃香菜",
        },
    )
    client = signed_in("mia")
    listing = client.get("/sessions/").content.decode()
    assert "chat-mia" in listing and "chat-alice" not in listing
    detail = client.get("/sessions/chat-mia/").content.decode()
    assert "好的，明白了。" in detail and "米娅说她不吃香菜" in detail
    assert client.get("/sessions/chat-alice/").status_code == 404
    assert "chat-mia" in signed_in("alice").get("/sessions/").content.decode()


def test_detail_explains_why_with_quoted_evidence(team):
    node = team["nodes"]["alice"]
    html = signed_in("alice").get(f"/memories/{node.pk}/").content.decode()
    assert "Why do you know this?" in html and "<blockquote>我说过：用户不吃香菜</blockquote>" in html
    assert "the user asked" in html and "You said so explicitly" in html


def test_dashboard_counts_and_recent_changes(team):
    html = signed_in("alice").get("/").content.decode()
    assert "Active memories by scope" in html and "alice 不吃香菜" in html
    assert re.search(r'stat-number">4</span> <span class="stat-label">Personal', html)


def test_api_key_is_shown_once_and_revocable(team):
    client = signed_in("alice")
    response = client.post("/keys/", {"name": "cooking-bot", "write_scopes": ["session", "user"]}, **HTMX)
    body = response.content.decode()
    raw = re.search(r'value="(ekko_[^"]+)"', body).group(1)
    assert response["Cache-Control"] == "no-store"
    api_key = api_key_authenticate(raw)
    assert api_key is not None and api_key.write_scopes == ["session", "user"]
    assert raw not in client.get("/keys/").content.decode()
    revoked = client.post(f"/keys/{api_key.pk}/revoke/", **HTMX)
    assert revoked.status_code == 200 and api_key_authenticate(raw) is None


# --------------------------------------------------------------------------- languages


def test_accept_language_chooses_chinese_and_the_switcher_sets_it(team):
    client = signed_in("alice")
    html = client.get("/memories/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()
    assert '<html lang="zh-hans">' in html and "记忆" in html and "Memories" not in html
    english = client.get("/memories/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="en">' in english and "Memories" in english
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    html = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in html and "概览" in html


def test_every_page_string_has_a_chinese_translation_in_the_compiled_catalog():
    """The .po has no empty or fuzzy entry, and the committed .mo holds every one of its messages."""
    import ast
    import gettext
    from pathlib import Path

    locale_dir = Path(__file__).resolve().parent.parent / "locale" / "zh_Hans" / "LC_MESSAGES"
    po = (locale_dir / "django.po").read_text(encoding="utf-8")
    assert "#, fuzzy" not in po, "resolve the fuzzy entries in django.po, then run msgfmt"
    entries, current, key = [], {}, None
    for line in po.splitlines() + [""]:
        if not line.strip():
            if current:
                entries.append(current)
            current, key = {}, None
        elif line.startswith(("msgctxt", "msgid", "msgstr")):
            key, _, value = line.partition(" ")
            current[key] = ast.literal_eval(value)
        elif line.startswith('"') and key:
            current[key] += ast.literal_eval(line)
    messages = [e for e in entries if e.get("msgid")]
    assert len(messages) > 200
    untranslated = [e["msgid"] for e in messages if not (e.get("msgstr") or e.get("msgstr[0]"))]
    assert not untranslated, f"translate these in django.po and recompile the .mo: {untranslated}"
    with open(locale_dir / "django.mo", "rb") as handle:
        catalog = gettext.GNUTranslations(handle)
    for entry in messages:
        msgid = (entry["msgctxt"] + "\x04" if "msgctxt" in entry else "") + entry["msgid"]
        expected = entry.get("msgstr") or entry.get("msgstr[0]")
        found = catalog._catalog.get(msgid) or catalog._catalog.get((msgid, 0))
        assert found == expected, f"django.mo is stale for {entry['msgid']!r}: run msgfmt on django.po"


def test_erasing_on_the_page_can_take_the_conversation_with_it(team):
    """"Also erase the conversation": the evidence message goes with a hard forget, and only with one."""
    from memory.models import MemoryMessage

    tenant, alice = team["tenant"], team["users"]["alice"]
    node = remember(tenant, alice, item="花生", title="不吃花生", content="用户对花生过敏",
                    said="我对花生过敏，记住")
    evidence = list(node.source_message_ids)
    client = signed_in("alice")
    page = client.get(f"/memories/{node.pk}/forget/").content.decode()
    assert 'name="purge_evidence"' in page
    soft = client.post(f"/memories/{node.pk}/forget/", {
        "mode": "soft", "purge_evidence": "on", "reason": "r", "expected_revision": "1"})
    assert soft.status_code == 400 and node_state(tenant, node.pk).status == NodeStatus.ACTIVE
    response = client.post(f"/memories/{node.pk}/forget/", {
        "mode": "hard", "purge_evidence": "on", "reason": "r", "expected_revision": "1"})
    assert response.status_code == 303, response.content.decode()[:400]
    with tenant_context(tenant):
        assert not MemoryNode.objects.filter(pk=node.pk).exists()
        assert not MemoryMessage.objects.filter(message_id__in=evidence).exists()
