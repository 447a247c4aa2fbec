"""The optional reranker: a `/rerank` endpoint reorders the best candidates of a text search.

Off while EKKO_RERANK_BASE_URL is empty: then `rerank_cards` and `rerank_messages` return the offline
scores as they are, before any other work. When it is set, they send the query and the texts of the
EKKO_RERANK_TOP_N best offline candidates (a card's title, content and value; a message's content) to
`POST {base}/rerank` and put those candidates first, in the reranker's order; every other candidate
keeps its offline order after them (`merge_reranked`, pure). Two request styles (EKKO_RERANK_STYLE):
`cohere` sends `{model, query, documents, top_n}` (Cohere, Jina, vLLM, Infinity, LiteLLM, OpenVINO),
`tei` sends `{query, texts, truncate}` (Hugging Face text-embeddings-inference). Both answers are read
whatever the style: `{results|data: [{index, relevance_score|score}]}` or a plain list
`[{index, score}]`. Any failure (unreachable, HTTP error, timeout, an answer that is not JSON or names
documents that were not sent) is logged as a warning and leaves the offline ranking unchanged: a search
never fails because its reranker did. Reads only.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ekko_site.metrics import SEARCH_ARM_SECONDS
from memory.http_json import post_json
from memory.models import MemoryMessage, MemoryNode
from memory.rules.node_text import node_plain_text

__all__ = [
    "RerankError",
    "Reranker",
    "configured_reranker",
    "merge_reranked",
    "rerank_cards",
    "rerank_messages",
    "rerank_scores",
]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# A cross-encoder reads a few hundred tokens of each document; the opening text carries what it needs
# and a short body keeps the request fast.
DOCUMENT_MAX_CHARS = 2000
SEARCH_MODE = "rerank"


class RerankError(Exception):
    """The reranker could not order the documents (unreachable, timed out, or answered badly)."""


@dataclass(frozen=True)
class Reranker:
    """A `POST {base_url}/rerank` endpoint in the Cohere or the TEI request style."""

    base_url: str
    model: str = ""
    api_key: str = ""
    style: str = "cohere"
    timeout: float = 5.0
    top_n: int = 30

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/rerank"

    def request_body(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        """Return the JSON body asking for a score of every document."""
        texts = [document[:DOCUMENT_MAX_CHARS] for document in documents]
        if self.style == "tei":
            return {"query": query, "texts": texts, "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": texts, "top_n": len(texts)}
        if self.model:
            body = {"model": self.model, **body}
        return body

    def scores(self, query: str, documents: Sequence[str]) -> dict[int, float]:
        """Return {document index: relevance score} for the documents the endpoint scored."""
        body = json.dumps(self.request_body(query, documents), ensure_ascii=False).encode("utf-8")
        raw = post_json(self.url, body, api_key=self.api_key, timeout=self.timeout, error=RerankError,
                        label="Rerank endpoint", hint="Check EKKO_RERANK_BASE_URL, EKKO_RERANK_MODEL, "
                        "EKKO_RERANK_API_KEY and EKKO_RERANK_STYLE.")
        return parse_scores(raw, len(documents), url=self.url)


def parse_scores(raw: bytes, count: int, *, url: str) -> dict[int, float]:
    """Return {index: score} of a Cohere-style or TEI answer about `count` documents; raise RerankError."""
    try:
        payload = json.loads(raw)
    except ValueError as error:
        raise RerankError(f"Rerank endpoint {url} sent a response that is not JSON: {raw[:200]!r}") from error
    items = payload
    if isinstance(payload, dict):
        items = payload.get("results", payload.get("data"))
    if not isinstance(items, list) or not items:
        raise RerankError(
            f"Rerank endpoint {url} sent no results (expected results[] or a list of {{index, score}}): "
            f"{raw[:200]!r}"
        )
    scores: dict[int, float] = {}
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in scores:
            raise RerankError(
                f"Rerank endpoint {url} named document {index!r}, but was sent documents 0 to {count - 1} "
                f"(each once)."
            )
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise RerankError(f"Rerank endpoint {url} gave document {index} a score that is not a number: "
                              f"{score!r}.")
        scores[index] = float(score)
    return scores


def configured_reranker() -> Reranker | None:
    """Return the reranker that settings name, or None while EKKO_RERANK_BASE_URL is empty."""
    from django.conf import settings

    base_url = (settings.EKKO_RERANK_BASE_URL or "").strip()
    if not base_url:
        return None
    return Reranker(base_url=base_url, model=settings.EKKO_RERANK_MODEL, api_key=settings.EKKO_RERANK_API_KEY,
                    style=settings.EKKO_RERANK_STYLE, timeout=float(settings.EKKO_RERANK_TIMEOUT),
                    top_n=int(settings.EKKO_RERANK_TOP_N))


def merge_reranked(scores: Mapping[K, float], reranked: Mapping[K, float]) -> dict[K, float]:
    """Return scores, best first: the reranked keys in the reranker's order, then the rest as they were.

    The reranker's scores live on their own scale (probabilities, logits), so they are mapped onto
    [1, 2] above the best remaining offline score: sorting by score then gives the new order, and ties
    keep the order of `reranked` (the offline order). The remaining keys keep their scores and order.
    """
    if not reranked:
        return dict(scores)
    rest = {key: score for key, score in scores.items() if key not in reranked}
    floor = max(rest.values(), default=0.0)
    low, high = min(reranked.values()), max(reranked.values())
    spread = (high - low) or 1.0
    lifted = {key: floor + 1.0 + (score - low) / spread for key, score in reranked.items()}
    return {**dict(sorted(lifted.items(), key=lambda pair: -pair[1])), **rest}


def rerank_scores(reranker: Reranker, query: str, scores: Mapping[K, float],
                  candidates: Sequence[tuple[K, str]], modes: list[str]) -> dict[K, float]:
    """Return `scores` with `candidates` (the best offline, best first) reordered by `reranker`.

    Appends "rerank" to `modes` when the reranker answered; on any failure logs a warning and returns
    `scores` unchanged.
    """
    if len(candidates) < 2:
        return dict(scores)
    try:
        with SEARCH_ARM_SECONDS.labels(arm="rerank").time():
            by_index = reranker.scores(query, [text for _key, text in candidates])
    except RerankError as error:
        logger.warning("Reranking failed; the offline order stands. %s", error)
        return dict(scores)
    except Exception:
        logger.warning("Reranking failed; the offline order stands.", exc_info=True)
        return dict(scores)
    modes.append(SEARCH_MODE)
    reranked = {candidates[index][0]: score for index, score in by_index.items()}
    # Candidates the endpoint left unscored stay with the rest, in their offline order.
    offline_order = {key: position for position, (key, _text) in enumerate(candidates)}
    return merge_reranked(scores, dict(sorted(reranked.items(), key=lambda pair: offline_order[pair[0]])))


def rerank_cards(query: str, scores: dict[Any, float], cards: Iterable[MemoryNode],
                 modes: list[str]) -> dict[Any, float]:
    """Return card scores with the best EKKO_RERANK_TOP_N of `cards` reranked (see `rerank_scores`).

    Only cards with an offline score are candidates; `scores` comes back as it is when no reranker is
    configured.
    """
    reranker = configured_reranker()
    if reranker is None or not scores:
        return scores
    scored = sorted((card for card in cards if card.pk in scores), key=lambda card: -scores[card.pk])
    candidates = [
        (card.pk, node_plain_text(title=card.title, content=card.content, value_json=card.value_json))
        for card in scored[: reranker.top_n]
    ]
    return rerank_scores(reranker, query, scores, candidates, modes)


def rerank_messages(query: str, scores: dict[Any, float], modes: list[str]) -> dict[Any, float]:
    """Return message scores (best first) with the best EKKO_RERANK_TOP_N reranked (see `rerank_scores`).

    Reads the candidates' content in one query, inside the caller's tenant context; `scores` comes back
    as it is, without a query, when no reranker is configured.
    """
    reranker = configured_reranker()
    if reranker is None or len(scores) < 2:
        return scores
    best = list(scores)[: reranker.top_n]
    content = dict(MemoryMessage.objects.filter(pk__in=best).values_list("pk", "content"))
    candidates = [(pk, content[pk]) for pk in best if pk in content]
    return rerank_scores(reranker, query, scores, candidates, modes)
