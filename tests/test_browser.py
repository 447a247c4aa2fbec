"""The pages in a real browser: Playwright for Python driving Debian's Chromium against `live_server`.

Story, in Chinese and in English: sign in, search as you type, open the card, edit it, see the
version chain, forget it, and confirm it is gone. With EKKO_SCREENSHOTS=1 a last test also writes
the screenshots under docs/screenshots/ (both languages) that the README links to.

Never run `playwright install`: the browser is Debian's `/usr/bin/chromium` (`apt-get install chromium`).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from memory.models import MemoryNode
from memory.services import message_append_batch, node_write_batch, summary_append
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Role, Tenant, Workspace
from tenants.services import api_key_create, membership_set, tenant_create, workspace_create

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "pw-for-tests-1"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"

if not shutil.which(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is missing: `apt-get install -y chromium` (never `playwright install`).",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Playwright's sync API keeps an asyncio event loop running in this thread, and Django refuses ORM
    # calls from a thread with a running loop (SynchronousOnlyOperation). These tests seed and check
    # data through the ORM between browser steps, strictly one after the other, so the guard is
    # lifted while this module's browser runs, and restored afterwards for the rest of the suite.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _viewer(tenant: Tenant, user: object, session_id: str, workspace: Workspace | None = None) -> Viewer:
    if workspace is None:
        with tenant_context(tenant):
            workspace = Workspace.objects.get(slug="default")
    return Viewer(
        tenant=tenant,
        workspace=workspace,
        session_id=session_id,
        user=user,
        write_scopes=frozenset({"session", "workspace", "user"}),
        read_only=False,
        actor="api_key:ekko_kitchen",
    )


def _conversation(viewer: Viewer, session_id: str, lines: list[tuple[str, str]]) -> list[str]:
    stored = message_append_batch(
        viewer=viewer,
        session_id=session_id,
        messages=[{"role": role, "content": text} for role, text in lines],
    )
    return [m.message_id for m in stored]


def _create(viewer: Viewer, evidence: list[str], **node: object) -> MemoryNode:
    node.setdefault("value_json_given", "value_json" in node)
    return node_write_batch(
        viewer=viewer,
        explicit_user_intent=True,
        source_message_ids=evidence,
        operations=[
            {
                "operation": "create",
                "reason": node.pop("reason", "the user asked to remember it"),
                "node": node,
            }
        ],
    )[0].node


def seed(language: str) -> dict[str, object]:
    """Create a tenant whose owner has a small, realistic memory: a coriander card with an older version."""
    setup = tenant_create(
        slug=f"home-{language}",
        owner_username=f"lin-{language}",
        name="林家" if language == "zh" else "Lin family",
        password=PASSWORD,
    )
    tenant, owner = setup.tenant, setup.owner
    viewer = _viewer(tenant, owner, "dinner-1")
    zh = language == "zh"
    asked = "用户要求记住" if zh else "the user asked to remember it"
    said = _conversation(
        viewer,
        "dinner-1",
        [
            ("user", "我不吃香菜，一点都不要。" if zh else "I don't eat coriander (香菜), none at all."),
            ("assistant", "好的，做菜不放香菜。" if zh else "Got it, no coriander in the dishes."),
            ("user", "芹菜也不要。" if zh else "Celery is out too."),
        ],
    )
    first = _create(
        viewer,
        said[:1],
        reason=asked,
        kind="food_avoidance",
        item_key="香菜",
        value_json="香菜",
        title="不吃香菜" if zh else "No coriander",
        content="用户不吃香菜。" if zh else "Lin does not eat coriander (香菜).",
    )
    # The agent refined the card later: a supersede makes a two-link version chain.
    node_write_batch(
        viewer=viewer,
        explicit_user_intent=True,
        source_message_ids=said[:1],
        operations=[
            {
                "operation": "supersede",
                "target_id": first.pk,
                "expected_revision": first.revision,
                "reason": "the user repeated it" if not zh else "用户再次确认",
                "node": {
                    "title": "不吃香菜" if zh else "No coriander",
                    "content": "用户不吃香菜，做菜时一律不放。"
                    if zh
                    else "Lin never wants coriander (香菜) in any dish.",
                    "tags": ["饮食"] if zh else ["food"],
                },
            }
        ],
    )
    _create(
        viewer,
        said[2:3],
        reason=asked,
        kind="food_avoidance",
        item_key="芹菜",
        value_json="芹菜",
        title="不吃芹菜" if zh else "No celery",
        content="用户也不吃芹菜。" if zh else "Lin avoids celery too.",
        tags=["饮食"] if zh else ["food"],
    )
    _create(
        viewer,
        said[:1],
        reason=asked,
        kind="flavor_profile",
        value_json={"spicy": "low"},
        title="口味偏清淡" if zh else "Prefers mild food",
        content="少辣少油。" if zh else "Little spice, little oil.",
    )
    _create(
        viewer,
        [],
        reason=asked,
        kind="language_preference",
        value_json="zh-CN" if zh else "en",
        title="用中文交流" if zh else "Talk in English",
        content="回答一律用简体中文。" if zh else "Always answer in English.",
    )
    project = workspace_create(tenant=tenant, name="装修项目" if zh else "Kitchen renovation")
    project_viewer = _viewer(tenant, owner, "plan-1", workspace=project)
    _create(
        project_viewer,
        [],
        reason=asked,
        kind="hard_constraint",
        item_key="budget",
        value_json="预算 5 万" if zh else "budget 50k",
        scope="workspace",
        title="预算上限 5 万元" if zh else "Budget cap: 50k",
        content="整个装修预算不超过 5 万元。" if zh else "The whole renovation stays under 50k.",
    )
    _create(
        viewer,
        said[1:2],
        reason=asked,
        kind="task",
        item_key="shopping",
        value_json={"status": "open"},
        scope="session",
        session_id="dinner-1",
        title="周末采购清单" if zh else "Weekend shopping list",
        content="买豆腐和青菜。" if zh else "Buy tofu and greens.",
    )
    summary_append(
        viewer=viewer,
        session_id="dinner-1",
        data={
            "from_message_id": said[0],
            "to_message_id": said[2],
            "summary": "用户说明了忌口：香菜和芹菜。"
            if zh
            else "Lin listed what not to cook with: coriander and celery.",
            "current_goal": "安排晚饭" if zh else "Plan dinner",
        },
    )
    member = get_user_model().objects.create_user(f"mei-{language}", password=PASSWORD)
    membership_set(tenant=tenant, user=member, role=Role.MEMBER)
    api_key_create(tenant=tenant, name="kitchen-assistant" if not zh else "厨房助手", created_by=owner)
    return {"tenant": tenant, "owner": owner.get_username()}


def _sign_in(
    page: Page, base_url: str, username: str, *, user_label: str, password_label: str, submit: str
) -> None:
    page.goto(base_url + "/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    page.get_by_label(user_label).fill(username)
    page.get_by_label(password_label).fill(PASSWORD)
    page.get_by_role("button", name=submit).click()
    expect(page).to_have_url(base_url + "/")


STORIES = {
    "zh": {
        "locale": "zh-CN",
        "query": "香菜",
        "card": "不吃香菜",
        "username": "用户名",
        "password": "密码",
        "sign_in": "登录",
        "memories": "记忆",
        "search": "搜索",
        "edit": "编辑",
        "content": "内容",
        "save": "保存",
        "new_text": "用户不吃香菜，也不要香菜做的酱料。",
        "why": "为什么会记得这个？",
        "versions": "版本",
        "edited": "已编辑",
        "forget": "忘记…",
        "forget_it": "确认忘记",
        "irreversible": "不可逆",
        "forgotten_status": "已忘记",
        "key_name": "名称",
        "create_key": "创建密钥",
        "mode": "忘记（可以恢复）",
    },
    "en": {
        "locale": "en-US",
        "query": "coriander",
        "card": "No coriander",
        "username": "Username",
        "password": "Password",
        "sign_in": "Sign in",
        "memories": "Memories",
        "search": "Search",
        "edit": "Edit",
        "content": "Content",
        "save": "Save",
        "new_text": "Lin never wants coriander, not even in sauces.",
        "why": "Why do you know this?",
        "versions": "Versions",
        "edited": "Edited",
        "forget": "Forget…",
        "forget_it": "Forget it",
        "irreversible": "irreversible",
        "forgotten_status": "Forgotten",
        "key_name": "Name",
        "create_key": "Create key",
        "mode": "Erase permanently",
    },
}


@pytest.mark.parametrize("language", ["zh", "en"])
def test_search_open_edit_see_chain_forget(browser, live_server, transactional_db, language):
    words = STORIES[language]
    data = seed(language)
    context = browser.new_context(locale=words["locale"], viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        _sign_in(
            page,
            live_server.url,
            str(data["owner"]),
            user_label=words["username"],
            password_label=words["password"],
            submit=words["sign_in"],
        )
        page.get_by_role("navigation").get_by_role("link", name=words["memories"], exact=True).click()
        cards = page.locator("#listing .card-title")
        expect(cards).to_have_count(5)

        # Live search: typing alone (no Enter) narrows the list and records the query in the URL.
        # Live search: typing alone (no Enter) narrows the list, best match first (semantic neighbours such
        # as another vegetable may follow), and records the query in the URL.
        page.get_by_role("searchbox", name=words["search"]).press_sequentially(words["query"], delay=60)
        expect(page).to_have_url(re.compile(r"[?&]q="))
        expect(cards.first).to_have_text(words["card"])
        assert cards.count() < 5

        cards.first.click()
        expect(page.get_by_role("heading", level=1)).to_have_text(words["card"])
        expect(page.get_by_role("heading", name=words["why"])).to_be_visible()
        expect(page.locator(".quote blockquote").first).to_contain_text("香菜")
        chain = page.locator(".chain-list li")
        expect(chain).to_have_count(2)  # the agent's first version and its replacement

        page.get_by_role("link", name=words["edit"], exact=True).click()
        content = page.get_by_label(words["content"], exact=True)
        expect(content).to_be_visible()
        content.fill(words["new_text"])
        page.get_by_role("button", name=words["save"], exact=True).click()
        expect(page.locator("#card .content")).to_have_text(words["new_text"])
        revisions = page.locator(".revisions > li")
        expect(revisions.last).to_contain_text(words["edited"])
        expect(revisions.last).to_contain_text("r3")
        expect(page.locator(".revisions .diff ins").first).to_contain_text(words["new_text"])

        page.get_by_role("link", name=words["forget"], exact=True).click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text(words["irreversible"])
        if language == "en":
            dialog.get_by_label(words["mode"]).check()
        dialog.get_by_role("button", name=words["forget_it"]).click()
        expect(page).to_have_url(live_server.url + "/memories/")

        page.get_by_role("searchbox", name=words["search"]).press_sequentially(words["query"], delay=60)
        expect(page).to_have_url(re.compile(r"[?&]q="))
        expect(page.locator("#listing .result-count")).to_be_visible()
        expect(page.locator("#listing .card-title", has_text=words["card"])).to_have_count(0)
        with tenant_context(data["tenant"]):
            remaining = MemoryNode.objects.filter(title=words["card"]).values_list("status", flat=True)
            if language == "en":
                assert not list(remaining), "a hard forget leaves no row behind"
            else:
                assert sorted(remaining) == ["deleted", "superseded"], "a soft forget keeps an audited row"
    finally:
        context.close()


def test_bulk_select_and_forget_in_the_dialog(browser, live_server, transactional_db):
    data = seed("en")
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    try:
        _sign_in(
            page,
            live_server.url,
            str(data["owner"]),
            user_label="Username",
            password_label="Password",
            submit="Sign in",
        )
        page.goto(live_server.url + "/memories/?tag=food")
        page.get_by_label("Select “No coriander”").check()
        page.get_by_label("Select “No celery”").check()
        page.get_by_role("button", name="Forget selected…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Forget 2 memories?")
        dialog.get_by_role("button", name="Forget them").click()
        expect(page.locator(".toast")).to_contain_text("Forgot 2 memories")
        expect(page.locator("#listing .empty")).to_be_visible()  # the list refreshed itself (HX-Trigger)
    finally:
        context.close()


@pytest.mark.skipif(
    os.environ.get("EKKO_SCREENSHOTS") != "1", reason="set EKKO_SCREENSHOTS=1 to refresh docs/screenshots"
)
@pytest.mark.parametrize("language", ["zh", "en"])
def test_write_screenshots(browser, live_server, transactional_db, language):
    words = STORIES[language]
    data = seed(language)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(
        locale=words["locale"], viewport={"width": 1280, "height": 860}, device_scale_factor=1
    )
    page = context.new_page()

    def shot(name: str, *, full_page: bool = True) -> None:
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{language}.png"), full_page=full_page)

    try:
        page.goto(live_server.url + "/login/")
        shot("login", full_page=False)
        _sign_in(
            page,
            live_server.url,
            str(data["owner"]),
            user_label=words["username"],
            password_label=words["password"],
            submit=words["sign_in"],
        )
        shot("dashboard")
        page.goto(live_server.url + "/memories/")
        shot("memories")
        page.get_by_role("searchbox", name=words["search"]).press_sequentially(words["query"], delay=40)
        expect(page).to_have_url(re.compile(r"[?&]q="))
        expect(page.locator("#listing .card-title").first).to_have_text(words["card"])
        shot("search")
        page.locator("#listing .card-title").first.click()
        expect(page.get_by_role("heading", name=words["why"])).to_be_visible()
        shot("detail")
        page.get_by_role("link", name=words["edit"], exact=True).click()
        expect(page.get_by_label(words["content"], exact=True)).to_be_visible()
        shot("edit")
        page.goto(page.url.replace("/edit/", "/"))
        page.get_by_role("link", name=words["forget"], exact=True).click()
        expect(page.get_by_role("dialog")).to_be_visible()
        shot("forget", full_page=False)
        page.goto(live_server.url + "/sessions/dinner-1/")
        shot("session")
        page.goto(live_server.url + "/keys/")
        page.get_by_label(words["key_name"], exact=True).fill("recipe-bot")
        page.get_by_role("button", name=words["create_key"]).click()
        expect(page.locator("#issued-key")).to_be_visible()
        shot("api-keys")
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(live_server.url + "/memories/")
        shot("mobile", full_page=False)
        page.set_viewport_size({"width": 1280, "height": 860})
        _fill_quota_to(data["tenant"], headroom=12)
        page.goto(live_server.url + "/quota/")
        expect(page.locator("#quota-banner")).to_be_visible()
        shot("quota")
    finally:
        context.close()


def _fill_quota_to(tenant: Tenant, *, headroom: int) -> None:
    """Lower the tenant's card limit so the owner's personal memory has `headroom` cards left."""
    with tenant_context(tenant):
        used = MemoryNode.objects.filter(tenant=tenant, status="active", scope="user").count()
    Tenant.objects.filter(pk=tenant.pk).update(card_limit=used + headroom)


QUOTA_WORDS = {
    "zh": {"banner": "记忆已满：新的记忆会被拒绝。", "left": "还剩 3 条", "review": "查看记忆",
           "quota": "记忆配额"},
    "en": {"banner": "Memory is full: new memories are refused.", "left": "(3 left)",
           "review": "Review memories", "quota": "Memory quota"},
}


@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_quota_banner_says_how_full_and_leads_to_the_memory_list(browser, live_server, transactional_db,
                                                                    language):
    words, quota = STORIES[language], QUOTA_WORDS[language]
    data = seed(language)
    context = browser.new_context(locale=words["locale"])
    page = context.new_page()
    try:
        _sign_in(page, live_server.url, str(data["owner"]), user_label=words["username"],
                 password_label=words["password"], submit=words["sign_in"])
        expect(page.locator("#quota-banner")).to_have_count(0)
        _fill_quota_to(data["tenant"], headroom=3)
        page.goto(live_server.url + "/sessions/")
        banner = page.locator("#quota-banner")
        expect(banner).to_contain_text(quota["banner"])
        expect(banner).to_contain_text(quota["left"])
        page.get_by_role("link", name=quota["review"]).click()
        expect(page).to_have_url(live_server.url + "/memories/")
        page.goto(live_server.url + "/")
        page.locator("#quota-banner").get_by_role("link", name=quota["quota"]).click()
        expect(page.get_by_role("heading", name=quota["quota"], level=1)).to_be_visible()
    finally:
        context.close()


def test_category_tree_filters_without_losing_the_search_text(browser, live_server, transactional_db):
    data = seed("en")
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    try:
        _sign_in(
            page,
            live_server.url,
            str(data["owner"]),
            user_label="Username",
            password_label="Password",
            submit="Sign in",
        )
        page.goto(live_server.url + "/memories/")
        cards = page.locator("#listing .card-title")
        expect(cards).to_have_count(5)
        page.get_by_role("group", name="Categories").get_by_label("饮食偏好").check()
        expect(cards).to_have_count(3)  # coriander, celery, mild food
        expect(page).to_have_url(re.compile(r"category="))
        page.get_by_role("searchbox", name="Search").press_sequentially("celery", delay=40)
        expect(page).to_have_url(re.compile(r"q=celery.*category=|category=.*q=celery"))
        expect(cards.first).to_have_text("No celery")
        page.get_by_role("group", name="Categories").get_by_label("All categories").check()
        expect(page).not_to_have_url(re.compile(r"category=%E"))
    finally:
        context.close()
