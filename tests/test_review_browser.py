"""The review queue in a real browser (issue 14): accept and reject one card, then several at once.

Playwright drives Debian's Chromium against `live_server`, as tests/test_browser.py does (its
browser fixture and seed are reused). The cards to review are written the way the extractor
writes them (`node_write_bulk` as `system:extractor`), citing captured messages. With
EKKO_SCREENSHOTS=1 a last test writes docs/screenshots/review-{en,zh}.png.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from memory.models import MemoryNode
from memory.rules.review import EXTRACTOR_ACTOR
from memory.services import NodeWrite, node_write_bulk
from tenants.context import tenant_context
from tests.test_browser import (  # noqa: F401 - browser: the module's Chromium fixture
    SCREENSHOTS,
    STORIES,
    _conversation,
    _sign_in,
    _viewer,
    browser,
    seed,
)

pytestmark = pytest.mark.browser

INFERRED = {
    "en": [("I think I'd rather skip peanuts lately.", "peanut", "Maybe avoids peanuts", 0.86),
           ("Mushrooms are fine, I guess, but not too many.", "mushroom", "Maybe few mushrooms", 0.62),
           ("My sister hates onions, by the way.", "onion", "Avoids onions?", 0.4),
           ("No more lamb this month, it was too heavy.", "lamb", "Skips lamb for now", 0.7)],
    "zh": [("最近好像不太想吃花生。", "花生", "可能不吃花生", 0.86),
           ("蘑菇还行吧，别放太多。", "蘑菇", "蘑菇少放", 0.62),
           ("对了，我妹妹讨厌洋葱。", "洋葱", "不吃洋葱？", 0.4),
           ("这个月别做羊肉了，太腻。", "羊肉", "暂时不吃羊肉", 0.7)],
}
WORDS = {
    "en": {"review": "Review", "accept": "Accept", "reject": "Reject", "accept_all": "Accept selected",
           "reject_all": "Reject selected", "empty": "Nothing waits for review", "select": "Select “{}”"},
    "zh": {"review": "审核", "accept": "接受", "reject": "拒绝", "accept_all": "接受所选",
           "reject_all": "拒绝所选", "empty": "没有待审核的记忆", "select": "选择“{}”"},
}


def inferred_cards(data: dict, language: str) -> dict[str, str]:
    """Write the extractor's unreviewed cards for the seed's owner; return title → id."""
    tenant = data["tenant"]
    viewer = _viewer(tenant, get_user_model().objects.get(username=data["owner"]), "dinner-2")
    said = _conversation(viewer, "dinner-2", [("user", text) for text, *_ in INFERRED[language]])
    extractor = dataclasses.replace(viewer, actor=EXTRACTOR_ACTOR)
    writes = [NodeWrite(viewer=extractor, explicit_user_intent=False, source_message_ids=[message_id],
                        operations=[{"operation": "create", "reason": "inferred", "node": {
                            "kind": "food_avoidance", "item_key": item, "value_json": item,
                            "value_json_given": True, "scope": "user", "title": title, "content": text,
                            "confidence": confidence, "source_quote": text}}])
              for message_id, (text, item, title, confidence) in zip(said, INFERRED[language], strict=True)]
    outcomes = node_write_bulk(writes=writes, skip_invalid=False)
    return {outcome.results[0].node.title: str(outcome.results[0].node.pk) for outcome in outcomes}


def states(tenant, ids: dict[str, str]) -> dict[str, tuple[str, str]]:  # noqa: ANN001
    with tenant_context(tenant):
        rows = MemoryNode.objects.filter(pk__in=ids.values()).values_list("title", "status", "review_state")
        return {title: (status, review) for title, status, review in rows}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_accept_and_reject_one_then_several(browser, live_server, transactional_db, language):  # noqa: ANN001, F811
    words, story = WORDS[language], STORIES[language]
    data = seed(language)
    ids = inferred_cards(data, language)
    titles = [title for _text, _item, title, _c in INFERRED[language]]
    context = browser.new_context(locale=story["locale"], viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the bulk reject's hx-confirm
    try:
        _sign_in(page, live_server.url, str(data["owner"]), user_label=story["username"],
                 password_label=story["password"], submit=story["sign_in"])
        page.locator(".mainnav").get_by_role("link", name=words["review"], exact=True).click()
        queue = page.locator("#queue")
        for title in titles:
            expect(queue.get_by_text(title, exact=True)).to_be_visible()
        expect(queue).to_contain_text(INFERRED[language][0][0])  # the evidence is shown
        expect(queue).to_contain_text("*h")

        first, second = (page.locator(f"#review-{ids[title]}") for title in titles[:2])
        first.get_by_role("button", name=words["accept"], exact=True).click()
        expect(first).to_have_count(0)
        second.get_by_role("button", name=words["reject"], exact=True).click()
        expect(second).to_have_count(0)

        page.get_by_label(words["select"].format(titles[2])).check()
        page.get_by_label(words["select"].format(titles[3])).check()
        page.get_by_role("button", name=words["reject_all"]).click()
        expect(page.locator("#queue")).to_contain_text(words["empty"])
    finally:
        context.close()
    assert states(data["tenant"], ids) == {
        titles[0]: ("active", "reviewed"), titles[1]: ("deleted", "unreviewed"),
        titles[2]: ("deleted", "unreviewed"), titles[3]: ("deleted", "unreviewed")}


def test_bulk_accept(browser, live_server, transactional_db):  # noqa: ANN001, F811
    data = seed("en")
    ids = inferred_cards(data, "en")
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    try:
        _sign_in(page, live_server.url, str(data["owner"]), user_label="Username", password_label="Password",
                 submit="Sign in")
        page.goto(live_server.url + "/review/?band=m")  # 0.62 and 0.7
        for title in ("Maybe few mushrooms", "Skips lamb for now"):
            page.get_by_label(f"Select “{title}”").check()
        expect(page.get_by_text("Maybe avoids peanuts", exact=True)).to_have_count(0)
        page.get_by_role("button", name="Accept selected").click()
        expect(page.locator("#queue")).to_contain_text("Accepted 2 memories")
    finally:
        context.close()
    reviewed = {title for title, (_s, review) in states(data["tenant"], ids).items() if review == "reviewed"}
    assert reviewed == {"Maybe few mushrooms", "Skips lamb for now"}


@pytest.mark.skipif(
    os.environ.get("EKKO_SCREENSHOTS") != "1", reason="set EKKO_SCREENSHOTS=1 to refresh docs/screenshots"
)
@pytest.mark.parametrize("language", ["zh", "en"])
def test_write_review_screenshots(browser, live_server, transactional_db, language):  # noqa: ANN001, F811
    story = STORIES[language]
    data = seed(language)
    inferred_cards(data, language)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(locale=story["locale"], viewport={"width": 1280, "height": 860},
                                  device_scale_factor=1)
    page = context.new_page()
    try:
        _sign_in(page, live_server.url, str(data["owner"]), user_label=story["username"],
                 password_label=story["password"], submit=story["sign_in"])
        page.goto(live_server.url + "/review/")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(SCREENSHOTS / f"review-{language}.png"), full_page=True)
    finally:
        context.close()
