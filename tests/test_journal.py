"""Issue 14, the journal (seed 001's `daily`): one card per user per local date, appended to.

Each rule has a test that fails without it: the kind is in every tenant's catalogue; a second create on
the same local date appends to the card (an update with audit, revision 2, evidence unioned, never a
supersede); another date is another card; the date follows EKKO_JOURNAL_TIME_ZONE; the quota ignores
the journal; search and the context pack leave it out unless asked; bad input is refused, nothing changed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from memory.models import AuditEventType, MemoryAuditEvent, MemoryNode
from memory.rules.errors import SchemaError
from memory.rules.journal import journal_date, journal_item_key, require_journal_date
from memory.rules.kinds import DEFAULT_KINDS, JOURNAL_KIND, resolve_kind
from memory.services.quota import ordinary_cards
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.factories import make_tenant
from tests.memory_factories import make_member
from tests.test_quota import SESSION, dish, fill, set_limit, state, write_body


@pytest.fixture
def api(client, tenant_a):  # noqa: ANN001
    return api_for(client, tenant_a)


@pytest.fixture
def alice(tenant_a):  # noqa: ANN001
    return make_member(tenant=tenant_a, username="alice", role="owner")


def entry(text: str, **node) -> dict:  # noqa: ANN003
    return {"operation": "create", "reason": "journal entry",
            "node": {"kind": "journal", "userId": "alice", "valueJson": text, **node}}


def capture(api, *ids: str) -> None:  # noqa: ANN001
    api.post("messages", {"sessionId": SESSION, "userId": "alice",
                          "messages": [{"id": i, "role": "user", "content": f"今天的事 {i}"} for i in ids]},
             expect=201)


def journal_rows(tenant) -> list[MemoryNode]:  # noqa: ANN001
    with tenant_context(tenant):
        return list(MemoryNode.objects.filter(kind=JOURNAL_KIND).order_by("item_key"))


def today_utc() -> str:
    return datetime.now(UTC).date().isoformat()


# --------------------------------------------------------------------------- rules (no database)


def test_the_journal_date_is_the_local_date_of_the_configured_zone():
    late_utc = datetime(2026, 12, 1, 16, 30, tzinfo=UTC)  # 00:30 on 2 December in Shanghai
    assert journal_date(late_utc, "UTC") == "2026-12-01"
    assert journal_date(late_utc, "Asia/Shanghai") == "2026-12-02"
    assert journal_date(datetime(2026, 12, 1, 15, 59, 59, tzinfo=UTC), "Asia/Shanghai") == "2026-12-01"
    assert journal_item_key(None, now=late_utc, zone_name="Asia/Shanghai") == "2026-12-02"
    assert journal_item_key("2026-11-30", now=late_utc, zone_name="UTC") == "2026-11-30"


@pytest.mark.parametrize("raw", ["yesterday", "2026-13-01", "2026-02-30", "2026/12/01", "20261201", 20261201])
def test_a_journal_item_key_is_an_iso_date(raw):
    with pytest.raises(SchemaError):
        require_journal_date(raw)


def test_a_journal_date_cannot_be_in_the_future():
    now = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    with pytest.raises(SchemaError, match="future"):
        journal_item_key("2026-12-02", now=now, zone_name="UTC")
    assert journal_item_key("2026-12-02", now=now, zone_name="Asia/Shanghai") == "2026-12-02"


def test_the_journal_kind_is_in_the_default_catalogue_with_its_synonyms():
    spec = DEFAULT_KINDS[JOURNAL_KIND]
    assert (spec.itemized, spec.default_scope, spec.value_shape) == (True, "user", "string")
    assert resolve_kind("daily") is spec and resolve_kind("diary") is spec


# --------------------------------------------------------------------------- writes


def test_the_kind_reaches_existing_and_new_tenants(client, tenant_a, alice):  # noqa: ANN001
    for tenant in (tenant_a, make_tenant("tenant-new", owner="carol")):
        owner = "alice" if tenant is tenant_a else "carol"
        body = api_for(client, tenant).post(
            "memory/write", write_body(entry("第一次写日记", userId=owner)))
        assert body["results"][0]["action"] == "created"
        assert body["results"][0]["key"] == f"journal:{today_utc()}"


def test_two_creates_on_one_date_append_to_one_card(api, tenant_a, alice):  # noqa: ANN001
    capture(api, "m1", "m2")
    first = api.post("memory/write", {**write_body(entry("早上跑步五公里。")), "sourceMessageIds": ["m1"]})
    second = api.post("memory/write", {**write_body(entry("晚上读完了一本书。")), "sourceMessageIds": ["m2"]})
    assert second["results"][0]["action"] == "updated"
    assert second["results"][0]["nodeId"] == first["results"][0]["nodeId"]
    [card] = journal_rows(tenant_a)
    assert card.revision == 2 and card.status == "active" and card.supersedes_id is None
    assert card.value_json == card.content == "早上跑步五公里。\n\n晚上读完了一本书。"
    assert card.source_message_ids == ["m1", "m2"]
    with tenant_context(tenant_a):
        events = list(MemoryAuditEvent.objects.filter(node_id=card.pk).order_by("created_at")
                      .values_list("event_type", flat=True))
    assert events == [AuditEventType.CREATE, AuditEventType.UPDATE]
    # The same entry again (a retried write) changes nothing.
    before = state(tenant_a)
    again = api.post("memory/write", {**write_body(entry("晚上读完了一本书。")), "sourceMessageIds": ["m2"]})
    assert again["results"][0]["action"] == "noop" and state(tenant_a) == before


def test_two_creates_of_one_date_in_one_batch_make_one_card(api, tenant_a, alice):  # noqa: ANN001
    api.post("memory/write", write_body(entry("一"), entry("二"), dish(1)))
    [card] = journal_rows(tenant_a)
    assert (card.value_json, card.revision) == ("一\n\n二", 2)


def test_another_date_is_another_card(api, tenant_a, alice):  # noqa: ANN001
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    api.post("memory/write", write_body(entry("今天的事")))
    body = api.post("memory/write", write_body(entry("昨天的事", itemKey=yesterday)))
    assert body["results"][0]["action"] == "created"
    assert [(c.item_key, c.value_json, c.revision) for c in journal_rows(tenant_a)] == [
        (yesterday, "昨天的事", 1), (today_utc(), "今天的事", 1)]


def test_the_date_follows_the_journal_time_zone(api, tenant_a, alice, settings):  # noqa: ANN001
    # Whatever the hour, one of UTC+14 and UTC-12 is on another date than UTC.
    now = datetime.now(UTC)
    zone = next(z for z in ("Pacific/Kiritimati", "Etc/GMT+12")
                if now.astimezone(ZoneInfo(z)).date() != now.date())
    settings.EKKO_JOURNAL_TIME_ZONE = zone
    body = api.post("memory/write", write_body(entry("跨时区的一天")))
    local = datetime.now(UTC).astimezone(ZoneInfo(zone)).date().isoformat()
    assert body["results"][0]["key"] == f"journal:{local}" != f"journal:{today_utc()}"


def test_a_journal_create_succeeds_when_the_quota_is_exhausted(api, tenant_a, alice):  # noqa: ANN001
    fill(tenant_a, alice, 2)
    set_limit(tenant_a, 2)
    api.post("memory/write", write_body(dish(1)), expect=409, code="quota_exceeded")
    api.post("memory/write", write_body(entry("配额满了也能写日记")))
    api.post("memory/write", write_body(entry("还能再追加")))
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(ordinary_cards(), tenant=tenant_a).count() == 2
    quota = api.get("memory/quota", {"userId": "alice"})
    assert [owner["used"] for owner in quota["scopes"] if owner["scope"] == "user"] == [2]


@pytest.mark.parametrize("node, field", [
    ({"itemKey": "yesterday"}, "node.itemKey"),
    ({"itemKey": "2999-01-01"}, "node.itemKey"),
    ({"valueJson": {"mood": "good"}}, "node.valueJson"),
    ({"valueJson": "   "}, "node.valueJson"),
    ({"scope": "workspace"}, "node.scope"),
])
def test_bad_journal_writes_are_refused_and_change_nothing(api, tenant_a, alice, node, field):  # noqa: ANN001
    before = state(tenant_a)
    body = api.post("memory/write", write_body(entry("日记", **node)), expect=400, code="invalid")
    assert any(key.endswith(field) for key in body["errors"]), body
    assert state(tenant_a) == before


def test_a_journal_without_explicit_intent_is_refused(api, tenant_a, alice):  # noqa: ANN001
    before = state(tenant_a)
    api.post("memory/write", {"operations": [entry("日记")], "explicitUserIntent": False}, expect=400,
             code="invalid")
    assert state(tenant_a) == before


def test_a_journal_card_is_never_superseded(api, tenant_a, alice):  # noqa: ANN001
    created = api.post("memory/write", write_body(entry("日记")))["results"][0]
    before = state(tenant_a)
    api.post("memory/write", write_body({
        "operation": "supersede", "targetId": created["nodeId"], "expectedRevision": 1, "reason": "rewrite",
        "node": {"valueJson": "重写"}}), expect=400, code="invalid")
    assert state(tenant_a) == before


# --------------------------------------------------------------------------- recall


def test_search_finds_journal_cards_only_when_the_kind_is_named(api, tenant_a, alice):  # noqa: ANN001
    api.post("memory/write", write_body(entry("今天去爬了香山，看了红叶。")))
    query = {"userId": "alice", "queryText": "香山 红叶"}

    def kinds(body: dict) -> list[str]:
        return [node["kind"] for node in (*body["exact"], *body["relevant"])]

    assert kinds(api.post("memory/search", query)) == []
    assert kinds(api.post("memory/search", {"userId": "alice", "all": True})) == []
    assert "journal" in kinds(api.post("memory/search", {**query, "kinds": ["journal"]}))


def test_the_context_pack_leaves_the_journal_out_unless_asked(api, tenant_a, alice):  # noqa: ANN001
    card = api.post("memory/write", write_body(entry("今天去爬了香山，看了红叶。")))["results"][0]
    request = {"sessionId": SESSION, "userId": "alice", "queryText": "香山红叶怎么样"}
    plain = api.post("context", request)
    assert card["nodeId"] not in plain["usedMemoryIds"] and "香山" not in plain["prompt"]
    asked = api.post("context", {**request, "includeJournal": True})
    assert card["nodeId"] in asked["usedMemoryIds"] and "香山" in asked["prompt"]
    # No topic in common: the latest dates still come with includeJournal.
    unrelated = api.post("context", {**request, "queryText": "数据库迁移", "includeJournal": True})
    assert card["nodeId"] in unrelated["usedMemoryIds"]


@pytest.mark.parametrize("value", ["yes", "true", 1, None, [True]])
def test_include_journal_must_be_a_boolean(api, tenant_a, alice, value):  # noqa: ANN001
    body = api.post("context", {"sessionId": SESSION, "userId": "alice", "queryText": "x",
                                "includeJournal": value}, expect=400, code="invalid")
    assert "includeJournal" in body["errors"]


def test_the_context_tool_definition_offers_include_journal(api):  # noqa: ANN001
    tools = {tool["function"]["name"]: tool["function"] for tool in api.get("tools")["tools"]}
    parameters = tools["memory_context"]["parameters"]["properties"]
    assert parameters["includeJournal"]["type"] == "boolean"
