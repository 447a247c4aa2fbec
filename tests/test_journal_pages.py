"""The journal page `/journal/`: the signed-in person's own entries by date, newest first, paginated.

A member sees only their own journal, and so does an admin (who may browse every card elsewhere);
another member's journal card is not reachable by its URL either. In a real Chromium the page reads
in both languages; with EKKO_SCREENSHOTS=1 it writes docs/screenshots/journal-{en,zh}.png.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta

import pytest

from memory.pages.views.journal import JOURNAL_PAGE_SIZE
from memory.services import node_write_batch
from tenants.models import Role
from tenants.services import membership_set, tenant_create
from tests.api_client import api_for
from tests.memory_factories import make_member
from tests.test_browser import PASSWORD, SCREENSHOTS, _sign_in, _viewer, browser  # noqa: F401 - fixture
from tests.test_pages import signed_in


def day(offset: int) -> str:
    return (datetime.now(UTC) - timedelta(days=offset)).date().isoformat()


def write_entry(api, username: str, text: str, date: str | None = None) -> str:  # noqa: ANN001
    node = {"kind": "journal", "userId": username, "valueJson": text, **({"itemKey": date} if date else {})}
    operation = {"operation": "create", "node": node, "reason": "journal"}
    body = api.post("memory/write", {"operations": [operation], "explicitUserIntent": True})
    return body["results"][0]["nodeId"]


@pytest.fixture
def people(client, tenant_a):  # noqa: ANN001
    """alice (the owner, an admin), bob and carol (members), each with journal entries."""
    make_member(tenant=tenant_a, username="bob")
    make_member(tenant=tenant_a, username="carol")
    api = api_for(client, tenant_a)
    ids = {
        "alice": write_entry(api, "alice", "alice 的秘密日记"),
        "bob": write_entry(api, "bob", "早上跑步。"),
    }
    write_entry(api, "bob", "晚上读书。")
    write_entry(api, "bob", "前天去了植物园。", day(2))
    write_entry(api, "carol", "carol 的日记")
    return ids


def test_a_member_sees_only_their_own_entries_newest_date_first(people):  # noqa: ANN001
    html = signed_in("bob").get("/journal/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "早上跑步。" in html and "晚上读书。" in html and "前天去了植物园。" in html
    assert "alice 的秘密日记" not in html and "carol 的日记" not in html
    assert html.index(day(0)) < html.index(day(2))
    assert html.index("早上跑步。") < html.index("晚上读书。")  # a day's entries in the order written
    assert 'href="/journal/" aria-current="page"' in html


def test_an_admin_sees_only_their_own_journal_too(people):  # noqa: ANN001
    html = signed_in("alice").get("/journal/").content.decode()
    assert "alice 的秘密日记" in html and "早上跑步。" not in html and "carol 的日记" not in html


def test_another_members_journal_card_is_not_reachable_by_its_url(people):  # noqa: ANN001
    bob = signed_in("bob")
    assert bob.get(f"/memories/{people['bob']}/").status_code == 200
    assert bob.get(f"/memories/{people['alice']}/").status_code == 404
    assert "alice 的秘密日记" not in bob.get(f"/journal/?page=1&id={people['alice']}").content.decode()


def test_the_journal_is_paginated_by_date(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    for offset in range(JOURNAL_PAGE_SIZE + 2):
        write_entry(api, "alice", f"第 {offset} 天", day(offset))
    alice = signed_in("alice")

    def dates(path: str, **headers: str) -> list[str]:
        html = alice.get(path, HTTP_ACCEPT_LANGUAGE="en", **headers).content.decode()
        return re.findall(r'id="day-([\d-]+)"', html)

    assert dates("/journal/") == [day(offset) for offset in range(JOURNAL_PAGE_SIZE)]
    assert "Page 1 of 2" in alice.get("/journal/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert dates("/journal/?page=2") == [day(JOURNAL_PAGE_SIZE), day(JOURNAL_PAGE_SIZE + 1)]
    fragment = alice.get("/journal/?page=2", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<section id="journal"') and "<html" not in fragment
    assert dates("/journal/?page=99") == dates("/journal/?page=2")  # past the end: the last page


def test_the_journal_page_speaks_chinese(people):  # noqa: ANN001
    html = signed_in("bob").get("/journal/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()
    assert "<h1>日记</h1>" in html and "2 条" in html and "最后写于" in html


def test_an_empty_journal_says_how_to_start(tenant_a):  # noqa: ANN001
    html = signed_in("alice").get("/journal/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "No journal entries yet." in html


def test_the_journal_page_needs_a_sign_in(client, db):  # noqa: ANN001
    response = client.get("/journal/")
    assert response.status_code == 302 and "/login/" in response["Location"]


# --------------------------------------------------------------------------- in Chromium


WORDS = {
    "zh": {"locale": "zh-CN", "nav": "日记", "username": "用户名", "password": "密码", "sign_in": "登录",
           "entries": ["早上在公园跑了五公里，天气很好。", "中午和同事吃了牛肉面。", "晚上读完了《活着》。"],
           "yesterday": "整理了阳台的花草，给绿萝换了盆。", "other": "别人的日记"},
    "en": {"locale": "en-US", "nav": "Journal", "username": "Username", "password": "Password",
           "sign_in": "Sign in",
           "entries": ["Ran 5 km in the park before work; lovely weather.", "Lunch: beef noodles with Sam.",
                       "Finished reading 'To Live' in the evening."],
           "yesterday": "Repotted the pothos and tidied the balcony plants.",
           "other": "someone else's diary"},
}


@pytest.mark.browser
@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_journal_page_in_a_browser(browser, live_server, transactional_db, language, settings):  # noqa: ANN001, F811
    from playwright.sync_api import expect

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    words = WORDS[language]
    setup = tenant_create(slug=f"diary-{language}", owner_username=f"lin-{language}", password=PASSWORD,
                          name="林家" if language == "zh" else "Lin family")
    tenant, owner = setup.tenant, setup.owner
    other = make_member(tenant=tenant, username=f"mei-{language}")
    membership_set(tenant=tenant, user=other, role=Role.MEMBER)

    def note(user, text: str, date: str | None = None) -> None:  # noqa: ANN001
        node = {"kind": "journal", "value_json": text, "value_json_given": True,
                **({"item_key": date} if date else {})}
        operation = {"operation": "create", "reason": "the user asked to note it", "node": node}
        node_write_batch(viewer=_viewer(tenant, user, "diary"), explicit_user_intent=True,
                         operations=[operation])

    for text in words["entries"]:
        note(owner, text)
    note(owner, words["yesterday"], day(1))
    note(other, words["other"])

    context = browser.new_context(locale=words["locale"], viewport={"width": 1280, "height": 860},
                                  device_scale_factor=1)
    page = context.new_page()
    try:
        _sign_in(page, live_server.url, owner.username, user_label=words["username"],
                 password_label=words["password"], submit=words["sign_in"])
        page.get_by_role("navigation").get_by_role("link", name=words["nav"], exact=True).click()
        expect(page).to_have_url(live_server.url + "/journal/")
        expect(page.get_by_role("heading", level=1)).to_have_text(words["nav"])
        days = page.locator("article.journal-day")
        expect(days).to_have_count(2)
        expect(days.first.locator("h2")).to_have_text(day(0))
        expect(days.first.locator("li")).to_have_text(words["entries"])
        expect(days.nth(1).locator("li")).to_have_text([words["yesterday"]])
        expect(page.get_by_text(words["other"])).to_have_count(0)
        if os.environ.get("EKKO_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(SCREENSHOTS / f"journal-{language}.png"), full_page=True)
    finally:
        context.close()
