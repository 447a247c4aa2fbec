"""Cluster near-duplicate cards: one memory written several times (reworded, translated, under a synonym key).

Two cards are candidates when their stored vectors are close, or when they name the same concepts
(memory.rules.concepts: '咖啡' = 'coffee', item keys through the concept map). A candidate pair joins
only when no guard forbids it (different kind, opposite polarity, different relatives, different
concepts or numbers), and a cluster grows only while every pair inside it passes the guards (complete
linkage), so a chain of look-alikes never merges. No ORM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from memory.rules.concepts import Signature, lookalike_reason, signature_of

__all__ = ["Card", "cluster_cards", "VECTOR_CLOSE", "VECTOR_WITH_CONCEPTS"]

# Cosine similarity of unit vectors: alone, or when both cards also name the same concepts.
VECTOR_CLOSE = 0.88
VECTOR_WITH_CONCEPTS = 0.45


@dataclass
class Card:
    """What the organizer reads of one active card."""

    id: str
    kind: str
    key: str
    item_key: str | None
    title: str
    content: str
    value: Any
    scope: str
    owner_ref: str
    confidence: float
    reviewed: bool
    revision: int
    updated_at: datetime
    source_message_ids: list[str] = field(default_factory=list)
    vector: Sequence[float] | None = None
    signature: Signature | None = None

    def texts(self) -> list[str]:
        value = self.value if isinstance(self.value, str) else _value_words(self.value)
        return [self.title, self.content, value]

    def sign(self) -> Signature:
        if self.signature is None:
            self.signature = signature_of(self.kind, self.texts(), [(self.item_key or "").replace("_", " ")])
        return self.signature


def _value_words(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_value_words(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_value_words(v) for v in value)
    return "" if value is None else str(value)


def _similarities(cards: Sequence[Card]) -> np.ndarray | None:
    with_vectors = [card.vector is not None for card in cards]
    if not any(with_vectors):
        return None
    dim = len(next(card.vector for card in cards if card.vector is not None))
    matrix = np.zeros((len(cards), dim), dtype=np.float32)
    for row, card in enumerate(cards):
        if card.vector is not None:
            vector = np.asarray(card.vector, dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            matrix[row] = vector / norm if norm else vector
    return matrix @ matrix.T


def _candidate_pairs(cards: Sequence[Card]) -> list[tuple[float, int, int]]:
    """Return (score, i, j) of pairs worth joining, best first; guards are checked by the caller."""
    sims = _similarities(cards)
    by_concepts: dict[tuple[str, frozenset[str]], list[int]] = {}
    for index, card in enumerate(cards):
        signature = card.sign()
        if signature.concepts:
            by_concepts.setdefault((signature.kind, signature.concepts), []).append(index)
    pairs: dict[tuple[int, int], float] = {}
    for members in by_concepts.values():
        for a_pos, i in enumerate(members):
            for j in members[a_pos + 1 :]:
                score = float(sims[i, j]) if sims is not None else 0.0
                no_vectors = cards[i].vector is None or cards[j].vector is None
                if no_vectors or score >= VECTOR_WITH_CONCEPTS:
                    pairs[(i, j)] = 1.0 + max(score, 0.0)
    if sims is not None:
        rows, cols = np.nonzero(np.triu(sims >= VECTOR_CLOSE, k=1))
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            if cards[i].vector is not None and cards[j].vector is not None:
                pairs.setdefault((i, j), float(sims[i, j]))
    return sorted(((score, i, j) for (i, j), score in pairs.items()), reverse=True)


def cluster_cards(cards: Sequence[Card]) -> list[list[Card]]:
    """Return the clusters of two or more cards that are one memory, each sorted newest first."""
    group_of = list(range(len(cards)))
    groups: dict[int, list[int]] = {i: [i] for i in range(len(cards))}
    for _score, i, j in _candidate_pairs(cards):
        gi, gj = group_of[i], group_of[j]
        if gi == gj:
            continue
        if any(lookalike_reason(cards[a].sign(), cards[b].sign()) for a in groups[gi] for b in groups[gj]):
            continue
        if any(
            cards[a].scope != cards[b].scope or cards[a].owner_ref != cards[b].owner_ref
            for a in groups[gi]
            for b in groups[gj]
        ):
            continue
        for member in groups[gj]:
            group_of[member] = gi
        groups[gi].extend(groups.pop(gj))
    clusters = [[cards[i] for i in members] for members in groups.values() if len(members) > 1]
    for cluster in clusters:
        cluster.sort(key=lambda card: (card.reviewed, card.confidence, card.updated_at), reverse=True)
    return sorted(clusters, key=lambda cluster: cluster[0].id)
