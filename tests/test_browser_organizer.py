"""The Organizer page in Chromium: "Run now", the run's queued merge, apply it; screenshots in both languages.

With EKKO_SCREENSHOTS=1 the test also writes docs/screenshots/organizer-{en,zh}.png.
"""

from __future__ import annotations

import os
import re

import pytest
from django.contrib.auth import get_user_model

from ekko_site.inprocess import drain_background
from memory.models import MemoryNode
from tenants.context import tenant_context
from tests.test_browser import SCREENSHOTS, STORIES, _create, _sign_in, _viewer, browser, seed  # noqa: F401

pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

WORDS = {
    "zh": {
        "nav": "整理",
        "run_now": "立即整理",
        "apply": "应用",
        "applied": "已应用",
        "waiting": "等你决定",
    },
    "en": {
        "nav": "Organizer",
        "run_now": "Run now",
        "apply": "Apply",
        "applied": "Applied",
        "waiting": "Waiting for you",
    },
}


@pytest.mark.parametrize("language", ["zh", "en"])
def test_run_now_then_apply_the_queued_merge(browser, live_server, transactional_db, language):  # noqa: ANN001, F811
    words, story = WORDS[language], STORIES[language]
    data = seed(language)
    viewer = _viewer(data["tenant"], get_user_model().objects.get(username=data["owner"]), "dinner-1")
    for item_key, text in [("咖啡", "用户不喝咖啡。"), ("coffee", "Doesn't drink coffee.")]:
        _create(
            viewer,
            [],
            kind="food_avoidance",
            item_key=item_key,
            scope="user",
            title=text,
            content=text,
            value_json=text,
            confidence=0.9,
        )
    drain_background()
    context = browser.new_context(locale=story["locale"], viewport={"width": 1280, "height": 860})
    page = context.new_page()
    try:
        _sign_in(
            page,
            live_server.url,
            str(data["owner"]),
            user_label=story["username"],
            password_label=story["password"],
            submit=story["sign_in"],
        )
        page.get_by_role("link", name=words["nav"], exact=True).click()
        page.get_by_role("button", name=words["run_now"]).click()
        drain_background()
        page.reload()
        queued = page.locator("tr.organizer-item[data-decision=queued]")
        expect(queued.first).to_contain_text(words["waiting"])
        if os.environ.get("EKKO_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"organizer-{language}.png"), full_page=True)
        before = queued.count()
        queued.filter(has_text=re.compile("咖啡|coffee", re.I)).first.get_by_role(
            "button", name=words["apply"]
        ).click()
        expect(page.locator("tr.organizer-item[data-decision=applied]")).to_have_count(1)
        expect(page.locator("tr.organizer-item[data-decision=queued]")).to_have_count(before - 1)
        with tenant_context(data["tenant"]):
            coffee = MemoryNode.objects.filter(
                tenant=data["tenant"], status="active", kind="food_avoidance", item_key__in=["咖啡", "coffee"]
            )
            assert coffee.count() == 1
    finally:
        context.close()
