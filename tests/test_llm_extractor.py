"""The chat-model extractor and summarizer against a small real HTTP server on 127.0.0.1 that plays the model.

The server answers `POST /<mode>/v1/chat/completions`: `ok` returns a plan built from the messages it
was sent (and a summary for summary prompts), `fail` answers HTTP 500, `garbage` answers text that is
not JSON, `fenced` wraps the plan in a Markdown code fence, `nosummary` fails summary prompts only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from ekko_site.celery import app as celery_app
from ekko_site.inprocess import NO_BROKER, drain_background
from memory.models import ExtractionRun, MemoryNode, MemorySummary
from memory.pipeline import chat_model as llm
from memory.pipeline.chat_model import ChatClient, LLMError, llm_extract
from memory.pipeline.plans import SourceMessage
from memory.pipeline.runs import extraction_retry_due, extraction_run
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.loopback import JsonHandler, loopback_server

SEED = "以后做饭别给我推荐香菜，我喜欢少油少辣。"


def fake_plan(conversation: dict) -> dict:
    """What a well-behaved model would say, plus the mistakes the service must catch."""
    nodes = []
    for message in conversation["messages"]:
        if message["role"] != "user" or "香菜" not in message["content"]:
            continue
        ids = [message["id"]]
        nodes += [
            {
                "operation": "create",
                "reason": "用户明确要求",
                "sourceMessageIds": ids,
                "explicitUserIntent": True,
                "node": {
                    "kind": "food_avoidance",
                    "itemKey": "香菜",
                    "scope": "user",
                    "valueJson": "香菜",
                    "title": "用户不吃香菜",
                    "content": "推荐菜谱时避免香菜。",
                    "confidence": 0.98,
                    "importance": 0.9,
                    "tags": ["忌口"],
                    "entities": ["香菜"],
                    "sourceQuote": "别给我推荐香菜",
                },
            },
            {
                "operation": "create",
                "reason": "口味",
                "sourceMessageIds": ids,
                "explicitUserIntent": True,
                "node": {
                    "kind": "flavor_profile",
                    "valueJson": "少油少辣",
                    "title": "用户偏好少油少辣",
                    "content": "推荐菜谱时优先少油少辣。",
                    "confidence": 0.95,
                    "sourceQuote": "我喜欢少油少辣",
                },
            },
            # A model that leaks a secret into a card: refused, the rest still applies.
            {
                "operation": "create",
                "reason": "leak",
                "sourceMessageIds": ids,
                "explicitUserIntent": True,
                "node": {
                    "kind": "project_context",
                    "itemKey": "deploy",
                    "scope": "workspace",
                    "title": "deploy key",
                    "content": "deploy with api_key=sk-live0123456789abcdefghijklmnop",
                },
            },
            {
                "operation": "create",
                "reason": "made-up kind",
                "sourceMessageIds": ids,
                "node": {"kind": "mood", "title": "happy", "content": "The user seems happy."},
            },
            # Claims the user said it, but the quote is not in the message: treated as inferred.
            {
                "operation": "create",
                "reason": "guess",
                "sourceMessageIds": ids,
                "explicitUserIntent": True,
                "node": {
                    "kind": "preferred_ingredient",
                    "itemKey": "番茄",
                    "scope": "user",
                    "valueJson": "番茄",
                    "title": "用户喜欢番茄",
                    "content": "推荐番茄。",
                    "confidence": 0.9,
                    "sourceQuote": "我最爱吃番茄了",
                },
            },
            {"operation": "ignore", "reason": "small talk", "node": {}},
            {"operation": "merge", "reason": "not an operation", "node": {}},
        ]
    return {"summaryPatch": "用户说明了饮食偏好。", "nodes": nodes}


FAKE_SUMMARY = {
    "summary": "用户讨论了晚饭。",
    "currentGoal": "决定今晚吃什么",
    "constraints": ["不要香菜"],
    "preferences": ["少油少辣"],
    "decisions": [],
    "completedWork": [],
    "pendingWork": ["买菜"],
    "knownIssues": [],
}


class FakeChatModel(JsonHandler):
    def answer(self, content: str) -> None:
        self.reply(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "tiny-chat",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        payload = json.loads(raw)
        mode = self.path.split("/")[1]
        type(self).requests.append(
            {
                "path": self.path,
                "body": payload,
                "raw": raw.decode(),
                "authorization": self.headers.get("Authorization"),
            }
        )
        system, user = payload["messages"][0]["content"], json.loads(payload["messages"][1]["content"])
        summary_prompt = system.startswith("You summarise")
        if mode == "fail" or (mode == "nosummary" and summary_prompt):
            self.reply(500, b'{"error": {"message": "model exploded"}}')
        elif mode == "garbage":
            self.answer("Sure! Here are the memories: cilantro, less oil.")
        elif mode == "slow":
            time.sleep(2)
            self.answer("{}")
        elif summary_prompt:
            self.answer(json.dumps(FAKE_SUMMARY, ensure_ascii=False))
        elif mode == "fenced":
            self.answer("```json\n" + json.dumps(fake_plan(user), ensure_ascii=False) + "\n```")
        else:
            self.answer(json.dumps(fake_plan(user), ensure_ascii=False))


@pytest.fixture
def model_server(monkeypatch) -> Iterator[str]:
    with loopback_server(FakeChatModel, monkeypatch) as url:
        yield url


@pytest.fixture
def model(model_server, settings, monkeypatch):
    """Configure the chat model; `model("fail")` switches what the server plays."""
    # Extraction goes to the in-process queue even when a broker is configured; tests drain it.
    monkeypatch.setattr(celery_app.conf, "broker_url", NO_BROKER)
    settings.EKKO_LLM_MODEL = "tiny-chat"
    settings.EKKO_LLM_API_KEY = "test-key"
    settings.EKKO_LLM_TIMEOUT = 5

    def use(mode: str) -> None:
        settings.EKKO_LLM_BASE_URL = f"{model_server}/{mode}/v1/"

    use("ok")
    return use


def run_of(tenant, task_id) -> ExtractionRun:
    with tenant_context(tenant):
        return ExtractionRun.objects.get(pk=task_id)


def nodes_of(tenant) -> list[MemoryNode]:
    with tenant_context(tenant):
        return list(MemoryNode.objects.filter(tenant=tenant).order_by("created_at"))


def capture_and_extract(api, on_commit, *contents: str, session: str = "dinner") -> str:
    api.post(
        "messages",
        {
            "sessionId": session,
            "userId": "alice",
            "messages": [
                {"id": f"{session}-u{i}", "role": "user", "content": text} for i, text in enumerate(contents)
            ],
        },
        expect=201,
    )
    with on_commit(execute=True):
        task = api.post("extract", {"sessionId": session, "userId": "alice"}, expect=202)["taskId"]
    drain_background()
    return task


def test_the_models_plan_is_applied_through_the_write_rules(
    client, tenant_a, model, django_capture_on_commit_callbacks
):
    api = api_for(client, tenant_a)
    task = capture_and_extract(
        api, django_capture_on_commit_callbacks, SEED, "记住我的密码是 hunter2!! 别忘了"
    )

    [request] = FakeChatModel.requests
    body = request["body"]
    assert request["path"] == "/ok/v1/chat/completions" and request["authorization"] == "Bearer test-key"
    assert body["model"] == "tiny-chat" and body["response_format"] == {"type": "json_object"}
    assert "food_avoidance" in body["messages"][0]["content"]  # the kind catalogue is in the system prompt
    assert SEED in request["raw"] and "hunter2" not in request["raw"]  # secrets never leave the process

    status = api.get(f"extract/{task}")
    results = status["results"]
    assert (status["state"], results["extractor"], results["summaryPatch"]) == (
        "done",
        "llm:tiny-chat",
        "用户说明了饮食偏好。",
    )
    outcomes = [(i["outcome"], i.get("kind"), i.get("code")) for i in results["items"]]
    assert outcomes == [
        ("applied", "food_avoidance", None),
        ("applied", "flavor_profile", None),
        ("skipped", "project_context", "sensitive_content"),
        ("skipped", "mood", "invalid"),
        ("applied", "preferred_ingredient", None),
        ("ignored", None, None),
        ("skipped", None, "invalid"),
    ]
    assert "operation must be one of" in results["items"][6]["detail"]
    by_key = {n.key: n for n in nodes_of(tenant_a)}
    assert set(by_key) == {"avoid_ingredient:香菜", "flavor_profile", "preferred_ingredient:番茄"}
    cilantro, flavor, guess = (
        by_key[k] for k in ("avoid_ingredient:香菜", "flavor_profile", "preferred_ingredient:番茄")
    )
    assert (cilantro.scope, cilantro.confidence, cilantro.source_message_ids) == ("user", 0.98, ["dinner-u0"])
    assert flavor.value_json == {"oil": "low", "spicy": "low"}
    # The unverifiable claim of explicit intent: inferred, so the user-scope write stays in the session.
    assert (guess.scope, guess.explicit_user_intent, guess.confidence) == ("session", False, 0.45)
    assert "treated as inferred" in results["items"][4]["notes"][0]
    assert "sk-live" not in json.dumps(status, ensure_ascii=False)


def test_a_failing_model_puts_the_run_into_retrying_and_the_request_still_succeeds(
    client, tenant_a, model, django_capture_on_commit_callbacks
):
    model("fail")
    api = api_for(client, tenant_a)
    task = capture_and_extract(api, django_capture_on_commit_callbacks, SEED)  # 202: the caller never sees it

    status = api.get(f"extract/{task}")
    assert (status["state"], status["attempts"]) == ("retrying", 1)
    assert "HTTP 500" in status["error"] and "model exploded" in status["error"] and "results" not in status
    assert nodes_of(tenant_a) == []

    # The model recovers; the beat sweep re-queues the due run, which applies exactly once.
    model("ok")
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due(now=timezone.now() + timedelta(seconds=31)) == 1
        extraction_run(tenant_id=tenant_a.pk, run_id=task)  # a duplicate delivery
        assert extraction_retry_due(now=timezone.now() + timedelta(hours=1)) == 0
    drain_background()
    status = api.get(f"extract/{task}")
    assert (status["state"], status["attempts"], status.get("error")) == ("done", 2, None)
    assert len(nodes_of(tenant_a)) == 3 and len(FakeChatModel.requests) == 2


@pytest.mark.parametrize("mode", ["garbage", "slow"])
def test_a_model_answer_that_is_not_a_plan_puts_the_run_into_retrying(
    client, tenant_a, model, django_capture_on_commit_callbacks, settings, mode
):
    model(mode)
    settings.EKKO_LLM_TIMEOUT = 0.5
    task = capture_and_extract(api_for(client, tenant_a), django_capture_on_commit_callbacks, SEED)
    run = run_of(tenant_a, task)
    assert (run.status, run.attempts) == ("retrying", 1)
    assert ("did not answer valid JSON" if mode == "garbage" else "did not answer within") in run.error


def test_a_fenced_json_answer_is_accepted(client, tenant_a, model, django_capture_on_commit_callbacks):
    model("fenced")
    task = capture_and_extract(api_for(client, tenant_a), django_capture_on_commit_callbacks, SEED)
    assert run_of(tenant_a, task).results["counts"]["applied"] == 3


def test_greetings_never_reach_the_model(client, tenant_a, model, django_capture_on_commit_callbacks):
    task = capture_and_extract(
        api_for(client, tenant_a), django_capture_on_commit_callbacks, "你好", "谢谢！"
    )
    assert run_of(tenant_a, task).status == "done" and FakeChatModel.requests == []


def test_summaries_come_from_the_model_and_fall_back_to_the_rules(
    client, tenant_a, model, settings, django_capture_on_commit_callbacks
):
    settings.EKKO_SUMMARY_EVERY_MESSAGES = 2
    api = api_for(client, tenant_a)
    task = capture_and_extract(api, django_capture_on_commit_callbacks, SEED, "今晚吃什么？")
    summary = run_of(tenant_a, task).results["summary"]
    assert summary["source"] == "llm:tiny-chat"
    latest = api.get("summaries/latest", {"sessionId": "dinner"})["summary"]
    assert (latest["summary"], latest["currentGoal"], latest["pendingWork"]) == (
        "用户讨论了晚饭。",
        "决定今晚吃什么",
        ["买菜"],
    )

    model("nosummary")
    api.post(
        "messages",
        {
            "sessionId": "dinner",
            "userId": "alice",
            "messages": [
                {"id": "later-1", "role": "user", "content": "番茄炒蛋怎么样？"},
                {"id": "later-2", "role": "user", "content": "好，就做番茄炒蛋。"},
            ],
        },
        expect=201,
    )
    with django_capture_on_commit_callbacks(execute=True):
        task = api.post("extract", {"sessionId": "dinner"}, expect=202)["taskId"]
    drain_background()
    run = run_of(tenant_a, task)
    assert (run.status, run.results["summary"]["source"]) == ("done", "rules (model failed)")
    assert run.results["summary"]["parentSummaryId"] == summary["id"]
    with tenant_context(tenant_a):
        assert MemorySummary.objects.filter(tenant=tenant_a).count() == 2


def test_long_inputs_are_sent_in_windows(model_server, monkeypatch):
    monkeypatch.setattr(llm, "MAX_WINDOW_CHARS", 30)
    client = ChatClient(base_url=f"{model_server}/ok/v1", model="tiny-chat")
    messages = [SourceMessage(f"m{i}", "user", f"{SEED} ({i})") for i in range(3)]
    plan = llm_extract(client, messages=messages)
    assert len(FakeChatModel.requests) == 3
    assert [item.source_message_ids for item in plan.nodes if item.operation == "create"][::5] == [
        ("m0",),
        ("m1",),
        ("m2",),
    ]


def test_chat_client_errors_say_what_to_check(model_server):
    with pytest.raises(LLMError, match="EKKO_LLM_MODEL"):
        ChatClient(base_url=model_server, model="")
    with pytest.raises(LLMError, match="unreachable"):
        ChatClient(base_url="http://127.0.0.1:9", model="m", timeout=2).complete_json(system="s", user="{}")
    with pytest.raises(LLMError, match="HTTP 500"):
        ChatClient(base_url=f"{model_server}/fail/v1", model="m").complete_json(system="s", user="{}")
    assert llm.chat_client() is None  # EKKO_LLM_BASE_URL unset: the rules run
