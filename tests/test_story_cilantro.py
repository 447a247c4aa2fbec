"""Seed 000's 香菜 story end to end through the API: remember, exact search, context, correction, forget.

The agent follows seed 003's turn: it captures the user's message, acts (`memory/write`), then
captures its reply, which ends the turn. The background work that follows each capture runs as it
does without a broker (on the in-process queue after the request: `drain_background()`), so the
extractor reads every turn after the agent acted and leaves the agent's cards as they are.
"""

from __future__ import annotations

from ekko_site.inprocess import drain_background
from memory.models import ExtractionRun
from tenants.context import tenant_context
from tests.api_client import api_for


def test_the_cilantro_story(client, tenant_a, tenant_b, django_capture_on_commit_callbacks):
    api = api_for(client, tenant_a)
    noise = api_for(client, tenant_b)
    noise.post("messages", {"sessionId": "dinner", "messages": [
        {"id": "b1", "role": "user", "content": "记住我最爱香菜"}]}, expect=201)

    def capture(message_id: str, role: str, content: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            api.post("messages", {"sessionId": "dinner", "userId": "alice", "messages": [
                {"id": message_id, "role": role, "content": content}]}, expect=201)
        drain_background()  # what runs after the request: embeddings, extraction

    def extractor_skipped() -> list[str]:
        with tenant_context(tenant_a):
            run = ExtractionRun.objects.filter(tenant=tenant_a, session_id="dinner").latest("created_at")
        return [item.get("code") for item in run.results["items"] if item["outcome"] != "ignored"]

    # 1. The user says it; the agent captures the message, remembers explicitly, then replies.
    capture("u1", "user", "以后做饭别给我推荐香菜，我喜欢少油少辣。")
    written = api.post("memory/write", {
        "explicitUserIntent": True, "sourceMessageIds": ["u1"],
        "operations": [
            {"operation": "create", "reason": "用户明确要求记录长期饮食偏好", "node": {
                "kind": "food_avoidance", "itemKey": "香菜", "scope": "user", "userId": "alice",
                "valueJson": "香菜", "title": "用户不吃香菜", "content": "推荐菜谱时避免香菜。",
                "confidence": 0.98, "sourceQuote": "别给我推荐香菜", "tags": ["忌口", "菜谱推荐"],
                "entities": ["香菜"]}},
            {"operation": "create", "reason": "用户明确表达口味", "node": {
                "kind": "flavor_profile", "scope": "user", "userId": "alice", "valueJson": "少油少辣",
                "title": "用户偏好少油少辣", "content": "推荐菜谱时优先少油少辣。", "tags": ["口味"]}},
        ]})
    cilantro, flavor = written["results"]
    assert (cilantro["action"], cilantro["key"], cilantro["autoDowngraded"]) == (
        "created", "avoid_ingredient:香菜", False)
    assert flavor["key"] == "flavor_profile"
    capture("a1", "assistant", "记住了，以后推荐菜谱会避开香菜，并且少油少辣。")
    assert extractor_skipped() == ["already_written", "already_written"]  # the agent's cards stay as written

    # 2. Exact structured search answers "does the user avoid 香菜?".
    found = api.post("memory/search", {"userId": "alice", "key": "avoid_ingredient:香菜", "valueJson": "香菜"})
    assert [n["id"] for n in found["exact"]] == [cilantro["nodeId"]]
    assert found["exact"][0]["sourceMessageIds"] == ["u1"]

    # 3. Next turn: the context pack for 「今晚吃什么？」 carries both preferences.
    pack = api.post("context", {"sessionId": "dinner", "userId": "alice", "queryText": "今晚吃什么？",
                                "tokenBudget": 1000})
    assert pack["diagnostics"]["storeStatus"] == "ok"
    assert {cilantro["nodeId"], flavor["nodeId"]} <= set(pack["usedMemoryIds"])
    assert "香菜" in pack["prompt"] and "少油少辣" in pack["prompt"]
    assert "我最爱香菜" not in pack["prompt"]  # tenant B's evidence never leaks
    assert pack["diagnostics"]["usedTokens"] <= 1000

    # 4. A correction supersedes the old card; the old one stays in the chain.
    capture("u2", "user", "香菜现在可以接受一点，但不要太多。")
    corrected = api.post("memory/write", {
        "explicitUserIntent": True, "sourceMessageIds": ["u2"],
        "operations": [{"operation": "supersede", "targetId": cilantro["nodeId"], "expectedRevision": 1,
                        "reason": "用户纠正", "node": {"valueJson": "香菜(少量)", "title": "用户可接受少量香菜",
                                                     "content": "香菜可以少放一点，但不要太多。"}}]})["results"][0]
    assert (corrected["action"], corrected["revision"], corrected["key"]) == ("superseded", 2, "avoid_ingredient:香菜")
    capture("a2", "assistant", "好的，以后香菜少放一点。")
    assert extractor_skipped() == ["already_written"]
    history = api.get(f"memory/nodes/{corrected['nodeId']}/history")
    assert [n["status"] for n in history["chain"]] == ["superseded", "active"]
    pack = api.post("context", {"sessionId": "dinner", "userId": "alice", "queryText": "今晚吃什么？"})
    assert "少量香菜" in pack["prompt"] and "用户不吃香菜" not in pack["prompt"]

    # 5. "忘掉香菜这件事" — forget it; it no longer comes back.
    api.post("memory/forget", {"key": "avoid_ingredient:香菜", "userId": "alice", "reason": "用户要求忘记",
                               "explicitUserIntent": True})
    after = api.post("memory/search", {"userId": "alice", "queryText": "香菜"})
    assert corrected["nodeId"] not in {n["id"] for n in after["exact"] + after["relevant"]}
    pack = api.post("context", {"sessionId": "dinner", "userId": "alice", "queryText": "今晚吃什么？"})
    assert corrected["nodeId"] not in pack["usedMemoryIds"] and flavor["nodeId"] in pack["usedMemoryIds"]
