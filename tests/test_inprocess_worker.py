"""Background work without a broker (ekko_site.inprocess): after the request, in order, on its schedule.

The thread tests run the real thread of this process on committed data (`transactional_db`), the way
`make run` does; the clock tests drive a private worker with a fake clock instead of waiting.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from ekko_site.celery import app
from ekko_site.inprocess import InProcessWorker, drain_background, in_process, worker
from memory.models import ExtractionRun, MemoryMessage, MemoryNode
from memory.pipeline import tasks
from memory.pipeline.runs import extraction_retry_due
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.memory_factories import default_workspace, make_node
from tests.worker import ROOT, wait_for

calls: list[str] = []
gate, at_gate = threading.Event(), threading.Event()


@app.task(name="tests.inprocess.record")
def record(label: str) -> str:
    calls.append(label)
    return label


@app.task(name="tests.inprocess.wait_for_gate")
def wait_for_gate() -> None:
    at_gate.set()
    assert gate.wait(timeout=60), "the test never opened the gate"


@app.task(name="tests.inprocess.boom")
def boom() -> None:
    raise RuntimeError("boom in a background task")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def fresh_calls():  # noqa: ANN201
    calls.clear()
    gate.clear()
    at_gate.clear()
    yield
    gate.set()


@pytest.fixture
def thread(transactional_db):  # noqa: ANN001, ANN201
    """This process's background thread, running on committed data; stopped (and its connection closed)."""
    assert in_process(app), "the suite runs without CELERY_BROKER_URL"
    worker.start()
    yield worker
    gate.set()
    worker.stop(timeout=60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def private(clock):  # noqa: ANN001, ANN201
    """A worker of its own, without a thread, on a fake clock: `run_due()` runs what is due now."""
    private = InProcessWorker(clock=clock)
    private.autostart = False
    return private


def test_a_capture_returns_before_its_embedding_and_extraction_ran(client, thread, settings):
    settings.EKKO_EXTRACT_DELAY_SECONDS = 30
    tenant = _tenant()
    wait_for_gate.delay()  # holds the thread, so nothing the capture queues can run early
    assert at_gate.wait(timeout=60)
    # An agent that captures no replies: u2 completes u1's turn, so u1 is due for extraction.
    api_for(client, tenant).post("messages", {"sessionId": "dinner", "userId": "alice", "messages": [
        {"id": "u1", "role": "user", "content": "记住，我以后做饭不要香菜。"},
        {"id": "u2", "role": "user", "content": "今晚吃什么？"}]}, expect=201)  # too short to embed

    # The request has answered; its work is queued behind the gate, not done.
    assert worker.pending() == ["memory.embed_messages", "memory.extract_session"]
    assert (_vectors(tenant), _runs(tenant)) == ([False, False], ["queued"])

    gate.set()
    assert worker.wait_idle(timeout=120)
    # The embeddings ran; the extraction still waits for its countdown (a safety-net run: no reply).
    assert (_vectors(tenant), _runs(tenant)) == ([True, False], ["queued"])
    assert worker.pending() == ["memory.extract_session"]

    worker.stop(timeout=60)
    # What the thread would run 30 s after the capture: the run, then the embedding of the card it wrote.
    assert drain_background() == 2
    assert _runs(tenant) == ["done"]
    with tenant_context(tenant):
        assert list(MemoryNode.objects.values_list("key", flat=True)) == ["avoid_ingredient:香菜"]


def test_an_exception_in_a_task_is_logged_and_the_thread_goes_on(thread, caplog):
    caplog.set_level(logging.ERROR)
    boom.delay()
    record.delay("after the failure")
    assert worker.wait_idle(timeout=60)
    assert calls == ["after the failure"]
    assert any("boom in a background task" in r.getMessage() or (r.exc_info and "boom" in str(r.exc_info[1]))
               for r in caplog.records if r.levelno >= logging.ERROR)
    record.delay("still running")
    assert worker.wait_idle(timeout=60) and calls == ["after the failure", "still running"]


def test_a_serving_process_runs_the_beat_schedule_from_its_start(transactional_db):
    tenant = _tenant()
    owner = get_user_model().objects.get(username="alice")
    node = make_node(tenant=tenant, workspace=default_workspace(tenant), user=owner, title="今天在出差",
                     expires_at=timezone.now() - timedelta(minutes=1))

    def expired() -> bool:
        with tenant_context(tenant):
            return MemoryNode.objects.get(pk=node.pk).status == "expired"

    # What gunicorn or runserver does: import the WSGI application, here on the test database.
    env = {**os.environ, "EKKO_DATABASE_NAME": connections["default"].settings_dict["NAME"]}
    for name in ("CELERY_BROKER_URL", "DATABASE_URL"):
        env.pop(name, None)
    server = subprocess.Popen([sys.executable, "-c", "import time, ekko_site.wsgi; time.sleep(300)"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(expired, timeout=120, what="the expiry sweep of the serving process's beat schedule")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_beat_schedule_is_celerys_and_each_sweep_runs_on_its_interval(private, clock, settings):
    assert set(app.conf.beat_schedule) == set(settings.CELERY_BEAT_SCHEDULE) == {
        "expire-nodes", "retry-extractions", "embed-missing", "sweep-read-audit", "tenant-indexes",
        "organize-due", "retry-webhooks"}
    private.schedule({"tick": {"task": "tests.inprocess.record", "schedule": 60.0, "args": ("tick",)},
                      "tock": {"task": "tests.inprocess.record", "schedule": timedelta(minutes=5),
                               "args": ("tock",)}})
    assert private.run_due() == 2 and calls == ["tick", "tock"]  # once at start
    clock.now += 59
    assert private.run_due() == 0
    clock.now += 2
    assert private.run_due() == 1 and calls == ["tick", "tock", "tick"]
    clock.now += 240
    assert private.run_due() == 2 and calls[3:] == ["tick", "tock"]


def test_a_countdown_is_honoured_and_due_work_runs_in_order(private, clock):
    private.submit(record, ("in 30 s",), countdown=30)
    private.submit(record, ("now",))
    private.submit(record, ("in 10 s",), countdown=10)
    private.submit(record, ("also now",))
    assert private.run_due() == 2 and calls == ["now", "also now"]
    clock.now += 29
    assert private.run_due() == 1 and calls[2:] == ["in 10 s"]
    assert private.pending() == ["tests.inprocess.record"]
    clock.now += 1
    assert private.run_due() == 1 and calls[3:] == ["in 30 s"]
    eta = timezone.now() + timedelta(seconds=20)
    private.submit(record, ("at eta",), eta=eta)
    assert private.run_due() == 0
    clock.now += 21
    assert private.run_due() == 1 and calls[4:] == ["at eta"]


def test_a_task_queued_by_delay_waits_for_the_queue(db):
    result = record.delay("queued")
    assert calls == [] and worker.pending() == ["tests.inprocess.record"] and result.id
    assert drain_background() == 1 and calls == ["queued"]


def test_nothing_is_lost_with_the_queue_the_sweeps_pick_the_work_up(client, tenant_a,
                                                                    django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # a whole turn; the reply is too short to embed
        api_for(client, tenant_a).post("messages", {"sessionId": "dinner", "userId": "alice", "messages": [
            {"id": "u1", "role": "user", "content": "记住，我以后做饭不要香菜。"},
            {"id": "a1", "role": "assistant", "content": "好的，不放香菜。"}]}, expect=201)
    assert worker.pending() == ["memory.embed_messages", "memory.extract_session"]
    worker.clear()  # the process exits before the thread got to it

    # The next process's sweeps find the work in the database.
    assert tasks.embed_missing.apply().get() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert extraction_retry_due(now=timezone.now() + timedelta(minutes=11)) == 1
    drain_background()
    assert (_vectors(tenant_a), _runs(tenant_a)) == ([True, False], ["done"])


def _tenant():  # noqa: ANN202
    from tests.factories import make_tenant

    return make_tenant("tenant-a", owner="alice")


def _vectors(tenant) -> list[bool]:  # noqa: ANN001
    with tenant_context(tenant):
        vectors = MemoryMessage.objects.order_by("pk").values_list("embedding", flat=True)
        return [vector is not None for vector in vectors]


def _runs(tenant) -> list[str]:  # noqa: ANN001
    with tenant_context(tenant):
        return list(ExtractionRun.objects.order_by("created_at").values_list("status", flat=True))
