"""Extraction after a turn: rule-based extractor, triggers, applying plans, retries, summary chain, API.

Runs execute the way they do without a broker: `POST extract` (or a trigger) queues the Celery task
on commit, on the in-process queue that runs it after the request. In a test,
`django_capture_on_commit_callbacks(execute=True)` runs those callbacks inside the test transaction
and `drain_background()` then runs the queue. Tenant B always holds the same words, and must not move.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from ekko_site.celery import app as celery_app
from ekko_site.inprocess import NO_BROKER, drain_background
from memory.errors import Forbidden, NotFound
from memory.models import ExtractionRun, MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary
from memory.pipeline import runs as extraction
from memory.pipeline import tasks
from memory.pipeline.extractors import extract_by_rules
from memory.pipeline.gating import has_explicit_statement, is_trivial
from memory.pipeline.plans import KnownNode, PlanError, SourceMessage, plan_from_json
from memory.pipeline.runs import extraction_retry_due, extraction_run, retry_delay
from memory.pipeline.summaries import SummaryDraft, summarize_by_rules
from memory.pipeline.triggers import extraction_maybe_request, extraction_request
from memory.rules.confidence import apply_confidence_contract
from memory.services.messages import message_append_batch
from memory.visibility import Viewer
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.memory_factories import default_workspace, make_workspace

_ids = itertools.count(1)
NOW = datetime(2025, 5, 1, 10, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def countdowns(monkeypatch) -> list[int]:
    """Queue the extraction task in this process even when a broker is configured; record countdowns.

    The run waits in the in-process queue until the test calls `drain_background()`.
    """
    seen: list[int] = []
    queue = tasks.extract_session.apply_async

    def apply_async(args=(), kwargs=None, countdown=0, **options):  # noqa: ANN001, ANN202
        seen.append(countdown)
        return queue(args=args, kwargs=kwargs, countdown=countdown, **options)

    monkeypatch.setattr(celery_app.conf, "broker_url", NO_BROKER)
    monkeypatch.setattr(tasks.extract_session, "apply_async", apply_async)
    return seen


def user(username: str):
    return get_user_model().objects.get(username=username)


def viewer_for(tenant, username: str | None, session: str = "s1") -> Viewer:
    return Viewer(
        tenant=tenant,
        workspace=default_workspace(tenant),
        session_id=session,
        user=user(username) if username else None,
        write_scopes=frozenset({"session", "workspace", "user"}),
        read_only=False,
        actor="api_key:test",
    )


def capture(
    tenant, username: str | None, session: str, *contents: str, role: str = "user", channel: str = "main"
) -> list[MemoryMessage]:
    return message_append_batch(
        viewer=viewer_for(tenant, username, session),
        session_id=session,
        messages=[
            {"id": f"{session}-{next(_ids)}", "role": role, "content": text, "channel": channel}
            for text in contents
        ],
    )


def extract(tenant, username: str | None, session: str, on_commit) -> ExtractionRun:
    with on_commit(execute=True):
        run = extraction_request(viewer=viewer_for(tenant, username, session), session_id=session)
    drain_background()
    return reload(tenant, run)


def reload(tenant, run: ExtractionRun) -> ExtractionRun:
    with tenant_context(tenant):
        return ExtractionRun.objects.get(pk=run.pk)


def active_nodes(tenant, **filters) -> list[MemoryNode]:
    with tenant_context(tenant):
        return list(
            MemoryNode.objects.filter(tenant=tenant, status="active", **filters).order_by("created_at")
        )


def all_nodes(tenant) -> list[MemoryNode]:
    with tenant_context(tenant):
        return list(MemoryNode.objects.filter(tenant=tenant).order_by("created_at"))


def plan_of(*contents: str, known: tuple[KnownNode, ...] = ()) -> list[dict]:
    messages = [SourceMessage(f"m{i}", "user", text, NOW) for i, text in enumerate(contents)]
    return [item.to_json() for item in extract_by_rules(messages, known=known, now=NOW).nodes]


# --------------------------------------------------------------------------- the rules, without a database


def test_seed_sentence_becomes_an_avoidance_and_a_flavor_profile_with_verbatim_quotes():
    text = "以后做饭别给我推荐香菜，我喜欢少油少辣。"
    cilantro, flavor = plan_of(text)
    assert (
        cilantro["operation"],
        cilantro["node"]["kind"],
        cilantro["node"]["itemKey"],
        cilantro["node"]["valueJson"],
    ) == ("create", "food_avoidance", "香菜", "香菜")
    assert (flavor["node"]["kind"], flavor["node"]["valueJson"]) == (
        "flavor_profile",
        {"oil": "low", "spicy": "low"},
    )
    assert flavor["node"]["title"] == "用户偏好少油少辣" and cilantro["node"]["title"] == "用户不吃香菜"
    for item in (cilantro, flavor):
        assert item["explicitUserIntent"] and item["sourceMessageIds"] == ["m0"]
        # The confidence contract keeps high confidence only for a verbatim quote of 5+ characters.
        assert apply_confidence_contract(item["node"]["confidence"], item["node"]["sourceQuote"], [text]) == (
            item["node"]["confidence"],
            False,
        )


@pytest.mark.parametrize(
    "text, kind, value",
    [
        ("记住，我以后做饭不要香菜。", "food_avoidance", "香菜"),
        ("From now on, reply in English.", "language_preference", "en"),
        ("以后都用中文回答我", "language_preference", "zh"),
        ("Please call me Sam from now on.", "interaction_contract", {"addressUserAs": "Sam"}),
        ("以后叫我老王就行", "interaction_contract", {"addressUserAs": "老王"}),
        ("Remember: I don't eat cilantro.", "food_avoidance", "cilantro"),
        ("I prefer less spicy food, always.", "flavor_profile", {"spicy": "low"}),
        ("我对花生过敏，记住", "dietary_restriction", "花生"),
        ("我爱吃火锅", "preferred_ingredient", "火锅"),
        ("always answer concisely", "communication_preference", "concise"),
        ("TODO: write the extraction docs", "task", {"status": "open", "title": "write the extraction docs"}),
        ("帮我把周报完成", "task", {"status": "open", "title": "完成周报"}),
    ],
)
def test_explicit_statements_in_chinese_and_english(text, kind, value):
    [item] = plan_of(text)
    assert (item["operation"], item["node"]["kind"], item["node"]["valueJson"]) == ("create", kind, value)


def test_lists_and_two_verbs_in_one_sentence_give_one_card_each():
    assert [i["node"]["valueJson"] for i in plan_of("我不吃香菜也不吃葱")] == ["香菜", "葱"]
    assert [i["node"]["valueJson"] for i in plan_of("I don't eat cilantro or onions.")] == [
        "cilantro",
        "onions",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "我不要告诉别人",
        "no problem",
        "我会说英语",
        "我喜欢编程",
        "不要太多",
        "你还记得我不吃什么吗？",
        "I love this idea",
    ],
)
def test_sentences_that_only_look_like_preferences_give_nothing(text):
    assert plan_of(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "嗯",
        "你好",
        "您好！",
        "谢谢",
        "谢谢你！",
        "好的，谢谢",
        "hi",
        "Hello!",
        "Thanks a lot!",
        "thank you so much",
        "ok",
        "👍",
    ],
)
def test_greetings_thanks_and_empty_messages_are_skipped(text):
    assert is_trivial(text) and not has_explicit_statement(text)
    assert plan_of(text) == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("记住我不吃香菜", True),
        ("from now on reply in English", True),
        ("I never eat pork", True),
        ("香菜现在可以接受一点", True),
        ("actually I live in Berlin", True),
        ("remind me to call mom", True),
        ("今晚吃什么？", False),
        ("I like this recipe", False),
        ("do you remember my name?", False),
    ],
)
def test_explicit_statement_detection(text, expected):
    assert has_explicit_statement(text) is expected


def test_a_correction_of_a_known_avoidance_supersedes_it():
    known = KnownNode(
        node_id="n1",
        kind="food_avoidance",
        key="avoid_ingredient:香菜",
        scope="user",
        revision=1,
        item_key="香菜",
        value_json="香菜",
        title="用户不吃香菜",
    )
    [item] = plan_of("香菜现在可以接受一点，但不要太多。", known=(known,))
    assert (item["operation"], item["targetId"], item["node"]["valueJson"]) == (
        "supersede",
        "n1",
        "香菜(少量)",
    )
    assert item["node"]["title"] == "用户可接受少量香菜" and item["explicitUserIntent"]
    [lifted] = plan_of("其实我现在可以吃香菜了", known=(known,))
    assert (lifted["operation"], lifted["targetId"]) == ("expire", "n1")


def test_a_temporary_state_stays_in_the_session_and_ends_with_the_local_day():
    shanghai = ZoneInfo("Asia/Shanghai")
    messages = [SourceMessage("m1", "user", "今天有点胃不舒服", NOW, time_zone=shanghai)]
    [item] = [i.to_json() for i in extract_by_rules(messages, now=NOW).nodes]
    assert (item["node"]["kind"], item["node"]["scope"], item["node"]["itemKey"]) == (
        "temporary_state",
        "session",
        "胃不舒服",
    )
    # 10:00 UTC is 18:00 in Shanghai; the state ends at the next local midnight.
    assert item["node"]["expiresAt"] == "2025-05-01T16:00:00+00:00"
    [tired] = plan_of("today I'm tired")
    assert (tired["node"]["kind"], tired["node"]["valueJson"], tired["node"]["expiresAt"]) == (
        "temporary_state",
        "tired",
        "2025-05-02T00:00:00+00:00",
    )


def test_a_message_with_a_secret_yields_nothing_but_an_ignore_without_the_secret():
    [item] = plan_of("记住，我的密码是 hunter2!!，我不吃香菜")
    assert item["operation"] == "ignore" and "password" in item["reason"]
    assert "hunter2" not in json.dumps(item, ensure_ascii=False)


def test_plan_json_is_read_strictly_and_cites_only_the_messages_it_was_shown():
    plan = plan_from_json(
        {
            "summaryPatch": "x",
            "nodes": [
                {
                    "operation": "create",
                    "reason": "r",
                    "sourceMessageIds": ["m1", "other-session"],
                    "node": {
                        "kind": "food_avoidance",
                        "itemKey": "香菜",
                        "valueJson": "香菜",
                        "userId": "mallory",
                        "expiresAt": "2025-05-02T00:00:00Z",
                    },
                }
            ],
        },
        message_ids={"m1"},
    )
    [item] = plan.nodes
    assert item.source_message_ids == ("m1",) and "user_id" not in item.node and "userId" not in item.node
    assert item.node["expires_at"] == datetime(2025, 5, 2, tzinfo=UTC)
    for bad in (
        [],
        {"nodes": {}},
        {"nodes": [{"operation": "merge"}]},
        {"nodes": [{"operation": "update"}]},
        {"nodes": [{"operation": "create", "node": {}}]},
        {"nodes": [{"operation": "create", "node": {"kind": "task", "tags": "x"}}]},
    ):
        with pytest.raises(PlanError):
            plan_from_json(bad)


def test_rule_summary_fills_the_seed_fields_and_drops_secrets():
    messages = [
        SourceMessage(f"m{i}", role, text, NOW)
        for i, (role, text) in enumerate(
            [
                ("user", "以后做饭别给我推荐香菜，我喜欢少油少辣。"),
                ("assistant", "好的，记住了。"),
                ("user", "我们决定用 PostgreSQL 做存储。"),
                ("user", "迁移脚本报错了，提示 relation does not exist。"),
                ("user", "我的密码是 hunter2!!"),
                ("assistant", "迁移已经修好了，测试完成了。"),
                ("user", "提醒我周五前提交周报"),
                ("user", "能帮我推荐今晚的菜吗？"),
            ]
        )
    ]
    draft = summarize_by_rules(messages, previous=SummaryDraft(summary="前情", pending_work=["整理需求"]))
    assert "8条消息" in draft.summary and draft.current_goal == "能帮我推荐今晚的菜吗？"
    assert set(draft.preferences) == {"用户不吃香菜", "用户偏好少油少辣"}
    assert draft.decisions == ["我们决定用 PostgreSQL 做存储"]
    assert draft.known_issues == ["迁移脚本报错了，提示 relation does not exist"]
    assert draft.completed_work == ["迁移已经修好了，测试完成了"]
    assert draft.pending_work == ["整理需求", "待办：周五前提交周报"]
    assert "hunter2" not in json.dumps(draft.as_json(), ensure_ascii=False)


def test_retry_backoff_doubles_and_is_capped(settings):
    assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    settings.EKKO_EXTRACT_RETRY_MAX_SECONDS = 100
    assert retry_delay(10).total_seconds() == 100


# --------------------------------------------------------------------------- runs against the database


def test_chinese_explicit_statement_is_written_as_user_memory(
    tenant_a, tenant_b, django_capture_on_commit_callbacks
):
    capture(tenant_b, "bob", "s1", "以后做饭别给我推荐香菜，我喜欢少油少辣。")
    [message] = capture(tenant_a, "alice", "s1", "以后做饭别给我推荐香菜，我喜欢少油少辣。")
    capture(tenant_a, "alice", "s1", "记住了，以后推荐菜谱会避开香菜，并且少油少辣。", role="assistant")

    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)

    assert (run.status, run.attempts, run.results["extractor"]) == ("done", 1, "rules")
    assert run.results["counts"] == {"applied": 2, "noop": 0, "skipped": 0, "ignored": 0}
    cilantro = active_nodes(tenant_a, key="avoid_ingredient:香菜")[0]
    flavor = active_nodes(tenant_a, key="flavor_profile")[0]
    assert (cilantro.scope, cilantro.user.username, cilantro.value_json) == ("user", "alice", "香菜")
    assert flavor.value_json == {"oil": "low", "spicy": "low"}
    for node in (cilantro, flavor):
        assert node.source_message_ids == [message.message_id] and node.explicit_user_intent
        assert node.confidence == 0.95  # the quote held: no downgrade
    with tenant_context(tenant_a):
        actors = set(MemoryAuditEvent.objects.filter(tenant=tenant_a).values_list("actor", flat=True))
    assert actors == {"system:extractor"}
    assert all_nodes(tenant_b) == []  # tenant B's identical words were not touched


def test_english_explicit_statement_sets_the_reply_language(tenant_a, django_capture_on_commit_callbacks):
    capture(tenant_a, "alice", "s1", "From now on, please reply in English.")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    [node] = active_nodes(tenant_a)
    assert (node.kind, node.scope, node.value_json, node.title) == (
        "language_preference",
        "user",
        "en",
        "Reply in English",
    )
    assert run.results["items"][0]["action"] == "created"


def test_a_preference_stated_without_explicit_words_stays_in_the_session(
    tenant_a, django_capture_on_commit_callbacks
):
    capture(tenant_a, "alice", "s1", "我不吃香菜")
    extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    [node] = active_nodes(tenant_a)
    assert (node.key, node.scope, node.session_id) == ("avoid_ingredient:香菜", "session", "s1")


def test_without_a_known_user_a_user_scope_item_is_kept_in_the_session(
    tenant_a, tenant_b, django_capture_on_commit_callbacks
):
    capture(tenant_b, None, "s1", "记住，我以后做饭不要香菜。")
    capture(tenant_a, None, "s1", "记住，我以后做饭不要香菜。")
    run = extract(tenant_a, None, "s1", django_capture_on_commit_callbacks)
    [item] = run.results["items"]
    assert (item["action"], item["scope"]) == ("created", "session")
    assert item["notes"] == ["no user is known for these messages; kept in session scope"]
    [node] = active_nodes(tenant_a)
    assert (node.scope, node.session_id, node.user_id) == ("session", "s1", None)
    assert all_nodes(tenant_b) == []


def test_greetings_and_thanks_produce_nothing(tenant_a, django_capture_on_commit_callbacks):
    capture(tenant_a, "alice", "s1", "你好", "谢谢！", "Thanks a lot!")
    capture(tenant_a, "alice", "s1", "不客气，有需要随时找我。", role="assistant")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert run.status == "done" and run.results["items"] == [] and run.results["extractor"].startswith("none")
    assert all_nodes(tenant_a) == []


def test_a_correction_supersedes_the_old_card(tenant_a, django_capture_on_commit_callbacks):
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    [old] = active_nodes(tenant_a)

    capture(tenant_a, "alice", "s1", "香菜现在可以接受一点，但不要太多。")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)

    [item] = run.results["items"]
    assert (item["operation"], item["action"], item["key"]) == (
        "supersede",
        "superseded",
        "avoid_ingredient:香菜",
    )
    [new] = active_nodes(tenant_a)
    old_now = next(n for n in all_nodes(tenant_a) if n.pk == old.pk)
    assert old_now.status == "superseded" and new.supersedes_id == old.pk and new.revision == 2
    assert (new.title, new.value_json, new.scope) == ("用户可接受少量香菜", "香菜(少量)", "user")


def test_a_temporary_state_is_session_scoped_with_expiry(tenant_a, django_capture_on_commit_callbacks):
    capture(tenant_a, "alice", "s1", "今天有点胃不舒服")
    extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    [node] = active_nodes(tenant_a)
    assert (node.kind, node.scope, node.session_id, node.user.username) == (
        "temporary_state",
        "session",
        "s1",
        "alice",
    )
    assert node.expires_at is not None and timezone.now() < node.expires_at <= timezone.now() + timedelta(
        days=1
    )


def test_sensitive_content_in_a_message_is_never_stored(
    tenant_a, django_capture_on_commit_callbacks, settings
):
    settings.EKKO_SUMMARY_EVERY_MESSAGES = 2
    capture(tenant_a, "alice", "s1", "记住我的密码是 hunter2!!，以后登录都用它", "记住，我以后做饭不要香菜。")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert run.results["counts"]["ignored"] == 1 and run.results["counts"]["applied"] == 1
    [node] = active_nodes(tenant_a)
    assert node.key == "avoid_ingredient:香菜"
    with tenant_context(tenant_a):
        summary = MemorySummary.objects.get(tenant=tenant_a)
        audit = list(MemoryAuditEvent.objects.filter(tenant=tenant_a).values_list("payload", flat=True))
    stored = json.dumps(
        [
            run.results,
            audit,
            summary.summary,
            summary.current_goal,
            summary.constraints,
            summary.preferences,
            summary.decisions,
            summary.pending_work,
        ],
        ensure_ascii=False,
    )
    assert "hunter2" not in stored


def test_running_a_run_again_or_reextracting_never_duplicates_nodes(
    tenant_a, django_capture_on_commit_callbacks
):
    capture(tenant_a, "alice", "s1", "以后做饭别给我推荐香菜，我喜欢少油少辣。", "今天有点胃不舒服")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    before = [(n.pk, n.revision, n.status) for n in all_nodes(tenant_a)]
    assert len(before) == 3

    # The same task delivered twice (a redelivery after a lost ack): the second does nothing.
    again = extraction_run(tenant_id=tenant_a.pk, run_id=str(run.pk))
    assert (again.status, again.attempts) == ("done", 1)
    # A run over the same messages again (a crash after the writes, before `done` was recorded).
    with tenant_context(tenant_a):
        replay = ExtractionRun.objects.create(
            tenant=tenant_a,
            workspace=default_workspace(tenant_a),
            session_id="s1",
            user=user("alice"),
            trigger="api",
            after_message_pk=0,
        )
    with django_capture_on_commit_callbacks(execute=True):
        replayed = extraction_run(tenant_id=tenant_a.pk, run_id=replay.pk)
    assert replayed.results["counts"] == {"applied": 0, "noop": 3, "skipped": 0, "ignored": 0}
    assert [(n.pk, n.revision, n.status) for n in all_nodes(tenant_a)] == before


def test_a_failing_extractor_retries_with_backoff_and_applies_once(
    tenant_a, django_capture_on_commit_callbacks, monkeypatch, settings
):
    settings.EKKO_EXTRACT_MAX_ATTEMPTS = 3
    real = extraction.extract_by_rules
    monkeypatch.setattr(
        extraction, "extract_by_rules", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert (run.status, run.attempts, run.error) == ("retrying", 1, "RuntimeError: boom")
    assert timedelta(seconds=25) < run.next_retry_at - timezone.now() <= timedelta(seconds=30)

    # Not due yet: the sweep leaves it alone, and so does a stray delivery of the task.
    assert extraction_retry_due() == 0
    assert extraction_run(tenant_id=tenant_a.pk, run_id=run.pk).attempts == 1

    monkeypatch.setattr(extraction, "extract_by_rules", real)
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due(now=timezone.now() + timedelta(seconds=31)) == 1
    drain_background()
    run = reload(tenant_a, run)
    assert (run.status, run.attempts, run.error, run.next_retry_at) == ("done", 2, "", None)
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due(now=timezone.now() + timedelta(hours=2)) == 0
    assert len(all_nodes(tenant_a)) == 1


def test_a_run_fails_for_good_after_the_last_attempt(
    tenant_a, django_capture_on_commit_callbacks, monkeypatch, settings
):
    settings.EKKO_EXTRACT_MAX_ATTEMPTS = 2
    monkeypatch.setattr(
        extraction, "extract_by_rules", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        extraction_retry_due(now=timezone.now() + timedelta(minutes=5))
    drain_background()
    run = reload(tenant_a, run)
    assert (run.status, run.attempts, run.next_retry_at) == ("failed", 2, None)
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due(now=timezone.now() + timedelta(days=1)) == 0


def test_the_sweep_requeues_runs_lost_while_queued_or_running(tenant_a, django_capture_on_commit_callbacks):
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    run = extraction_request(viewer=viewer_for(tenant_a, "alice"), session_id="s1")  # on_commit never ran
    assert reload(tenant_a, run).status == "queued"
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due() == 0  # not stale yet
        assert extraction_retry_due(now=timezone.now() + timedelta(minutes=11)) == 1
    drain_background()
    assert reload(tenant_a, run).status == "done" and len(all_nodes(tenant_a)) == 1


def test_triggers_count_new_main_channel_messages_tokens_and_explicit_statements(tenant_a, settings):
    # An agent that never captures replies: the next user message completes the turn before it, so
    # the thresholds count completed turns and the message the agent is acting on is never read.
    settings.EKKO_EXTRACT_EVERY_MESSAGES = 4
    ws = default_workspace(tenant_a).pk

    def maybe(messages):
        return extraction_maybe_request(
            tenant_id=tenant_a.pk,
            workspace_id=ws,
            session_id=messages[0].session_id,
            message_pks=[m.pk for m in messages],
        )

    assert maybe(capture(tenant_a, "alice", "s1", "今晚吃什么", "我想想", "随便吧")) is None
    assert maybe(capture(tenant_a, "alice", "s1", "subagent notes " * 3, channel="subagent")) is None
    assert maybe(capture(tenant_a, "alice", "s1", "那就做番茄炒蛋")) is None  # its turn is in progress
    run = maybe(capture(tenant_a, "alice", "s1", "记住我不吃葱"))
    assert (run.trigger, run.status, run.after_message_pk, run.user.username) == (
        "messages",
        "queued",
        0,
        "alice",
    )
    # At most one queued run per session: later messages join it.
    assert maybe(capture(tenant_a, "alice", "s1", "再加一个汤")).pk == run.pk
    assert extraction_request(viewer=viewer_for(tenant_a, "alice"), session_id="s1").pk == run.pk

    assert maybe(capture(tenant_a, "alice", "s2", "记住，我以后做饭不要香菜。")) is None
    other = maybe(capture(tenant_a, "alice", "s2", "今晚吃什么"))
    assert other.trigger == "explicit" and other.pk != run.pk
    settings.EKKO_EXTRACT_TOKEN_THRESHOLD = 20
    assert maybe_tokens(tenant_a, ws).trigger == "tokens"


def maybe_tokens(tenant, workspace_id):
    capture(tenant, "alice", "s3", "We walked through the migration plan step by step. " * 4)
    [message] = capture(tenant, "alice", "s3", "ok")
    return extraction_maybe_request(
        tenant_id=tenant.pk, workspace_id=workspace_id, session_id="s3", message_pks=[message.pk]
    )


def test_the_reply_ends_the_turn_and_requests_a_run_that_reads_the_completed_turns(tenant_a):
    ws = default_workspace(tenant_a).pk

    def maybe(messages):
        return extraction_maybe_request(
            tenant_id=tenant_a.pk, workspace_id=ws, session_id="s1", message_pks=[m.pk for m in messages]
        )

    assert maybe(capture(tenant_a, "alice", "s1", "你好")) is None
    # A turn with nothing worth reading requests nothing.
    assert maybe(capture(tenant_a, "alice", "s1", "你好！有什么可以帮你？", role="assistant")) is None
    [statement] = capture(tenant_a, "alice", "s1", "我不吃香菜")
    assert maybe([statement]) is None  # the user's message alone never requests a run
    [reply] = capture(tenant_a, "alice", "s1", "好的，不放香菜。", role="assistant")
    run = maybe([reply])
    assert (run.trigger, run.status, run.user.username) == ("turn", "queued", "alice")
    # The next user message arrives before the run starts: the run reads only the completed turns.
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    run = extraction_run(tenant_id=tenant_a.pk, run_id=run.pk)
    assert (run.status, run.up_to_message_pk, run.results["messageCount"]) == ("done", reply.pk, 4)


def test_a_captured_explicit_statement_runs_after_the_turn(
    client, tenant_a, countdowns, django_capture_on_commit_callbacks
):
    api = api_for(client, tenant_a)

    def post(message_id: str, role: str, content: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            api.post(
                "messages",
                {
                    "sessionId": "s1",
                    "userId": "alice",
                    "messages": [{"id": message_id, "role": role, "content": content}],
                },
                expect=201,
            )
        drain_background()

    post("u1", "user", "记住，我以后做饭不要香菜。")
    with tenant_context(tenant_a):
        assert not ExtractionRun.objects.filter(tenant=tenant_a).exists()  # the agent is still acting
    post("a1", "assistant", "好的，我记住了：以后做饭不放香菜。")
    with tenant_context(tenant_a):
        run = ExtractionRun.objects.get(tenant=tenant_a)
    assert (run.trigger, run.status, countdowns) == ("turn", "done", [0])
    assert [n.key for n in active_nodes(tenant_a)] == ["avoid_ingredient:香菜"]


def test_a_done_run_moves_the_cursor_and_a_follow_up_reads_only_new_messages(
    tenant_a, django_capture_on_commit_callbacks, settings
):
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    first = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    capture(tenant_a, "alice", "s1", "From now on, reply in English.")
    second = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert second.after_message_pk == first.up_to_message_pk and second.results["messageCount"] == 1
    assert [i["key"] for i in second.results["items"]] == ["language_preference"]


def test_summary_chain_is_appended_past_the_threshold(
    tenant_a, tenant_b, django_capture_on_commit_callbacks, settings
):
    settings.EKKO_SUMMARY_EVERY_MESSAGES = 4
    capture(tenant_b, "bob", "s1", "a", "b", "c", "d", "e")
    first_batch = capture(
        tenant_a, "alice", "s1", "以后做饭别给我推荐香菜，我喜欢少油少辣。", "帮我想想今晚做什么菜？"
    )
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert run.results["summary"] is None  # two messages: below the threshold

    more = capture(tenant_a, "alice", "s1", "番茄炒蛋怎么样？", "好，就做番茄炒蛋。")
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    first_summary = run.results["summary"]
    assert first_summary["parentSummaryId"] is None and first_summary["source"] == "rules"
    assert (first_summary["fromMessageId"], first_summary["toMessageId"]) == (
        first_batch[0].message_id,
        more[-1].message_id,
    )

    latest = capture(
        tenant_a, "alice", "s1", "记得提醒我买鸡蛋", "提醒我周五前提交周报", "今晚吃什么？", "再加一个汤"
    )
    run = extract(tenant_a, "alice", "s1", django_capture_on_commit_callbacks)
    assert run.results["summary"]["parentSummaryId"] == first_summary["id"]
    with tenant_context(tenant_a):
        chain = list(MemorySummary.objects.filter(tenant=tenant_a).order_by("created_at"))
    assert [s.parent_summary_id for s in chain] == [None, chain[0].pk]
    assert chain[0].preferences == ["用户不吃香菜", "用户偏好少油少辣"]
    assert (
        chain[1].from_message_id == latest[0].message_id and "待办：周五前提交周报" in chain[1].pending_work
    )
    with tenant_context(tenant_b):
        assert not MemorySummary.objects.filter(tenant=tenant_b).exists()


# --------------------------------------------------------------------------- the API


def test_post_extract_answers_202_and_the_task_shows_done_with_results(
    client, tenant_a, tenant_b, django_capture_on_commit_callbacks
):
    api = api_for(client, tenant_a)
    api.post(
        "messages",
        {
            "sessionId": "dinner",
            "userId": "alice",
            "messages": [{"id": "u1", "role": "user", "content": "以后做饭别给我推荐香菜，我喜欢少油少辣。"}],
        },
        expect=201,
    )
    with django_capture_on_commit_callbacks(execute=True):
        queued = api.post("extract", {"sessionId": "dinner", "userId": "alice"}, expect=202)
    drain_background()
    assert queued["state"] == "queued"

    status = api.get(f"extract/{queued['taskId']}")
    assert (status["state"], status["attempts"], status["sessionId"], status["trigger"]) == (
        "done",
        1,
        "dinner",
        "api",
    )
    assert [(i["outcome"], i["key"]) for i in status["results"]["items"]] == [
        ("applied", "avoid_ingredient:香菜"),
        ("applied", "flavor_profile"),
    ]
    found = api.post(
        "memory/search", {"userId": "alice", "key": "avoid_ingredient:香菜", "valueJson": "香菜"}
    )
    assert [n["sourceMessageIds"] for n in found["exact"]] == [["u1"]]

    # Another tenant's task id, a missing one and garbage answer alike.
    other = api_for(client, tenant_b)
    assert (
        other.get(f"extract/{queued['taskId']}", expect=404, code="not_found")
        == other.get("extract/00000000-0000-0000-0000-000000000000", expect=404)
        == other.get("extract/nope", expect=404)
    )


def test_extraction_request_refuses_read_only_out_of_pin_and_non_member_viewers_whoever_calls_it(
    tenant_a, tenant_b
):
    writer = viewer_for(tenant_a, "alice")
    capture(tenant_a, "alice", "s1", "记住，我以后做饭不要香菜。")
    with pytest.raises(Forbidden, match="read-only"):
        extraction_request(viewer=dataclasses.replace(writer, read_only=True), session_id="s1")
    elsewhere = make_workspace(tenant=tenant_a, name="Hermes")
    pinned = dataclasses.replace(writer, pinned_workspace_id=elsewhere.pk)
    with pytest.raises(Forbidden, match="pinned"):
        extraction_request(viewer=pinned, session_id="s1")
    # A person restricted to their own workspaces, asking for one they are not a member of.
    outsider = dataclasses.replace(
        writer, restrict_to_person=True, member_workspace_ids=frozenset({elsewhere.pk})
    )
    with pytest.raises(NotFound):
        extraction_request(viewer=outsider, session_id="s1")
    for tenant in (tenant_a, tenant_b):
        with tenant_context(tenant):
            assert not ExtractionRun.objects.filter(tenant=tenant).exists()
    assert extraction_request(viewer=writer, session_id="s1").status == "queued"


def test_post_extract_twice_while_queued_returns_the_same_task(client, tenant_a):
    api = api_for(client, tenant_a)
    first = api.post("extract", {"sessionId": "s"}, expect=202)["taskId"]
    assert api.post("extract", {"sessionId": "s"}, expect=202)["taskId"] == first
    assert api.get(f"extract/{first}")["state"] == "queued"
    assert api.post("extract", {"sessionId": "other"}, expect=202)["taskId"] != first


def test_read_only_and_pinned_keys(client, tenant_a):
    from tenants.services import workspace_create

    api_for(client, tenant_a, read_only=True).post(
        "extract", {"sessionId": "s"}, expect=403, code="forbidden"
    )
    task = api_for(client, tenant_a).post("extract", {"sessionId": "s"}, expect=202)["taskId"]
    pinned = api_for(client, tenant_a, workspace=workspace_create(tenant=tenant_a, name="Hermes"))
    pinned.get(f"extract/{task}", expect=404, code="not_found")
