"""Review state: whether a person or an agent's explicit write stands behind a card (seed 001).

The one rule deciding it for every write path (`review_state_for`): cards the extractor inferred
are `unreviewed`; an agent's own `memory/write` and a person's edit in the pages are `reviewed`;
`accept` makes an unreviewed card reviewed. An inferring writer that only adds evidence to a card
(no field changed) keeps the card's state, so a restatement never undoes a person's review.
No ORM import: the values are those of `memory.models.ReviewState`.
"""

from __future__ import annotations

REVIEWED = "reviewed"
UNREVIEWED = "unreviewed"
REVIEW_STATES = (REVIEWED, UNREVIEWED)

# The actor of the background extractor's writes (memory.pipeline.apply).
EXTRACTOR_ACTOR = "system:extractor"
# Writers whose cards are inferred, not stated: what they write waits for a person's review.
INFERRING_ACTORS = frozenset({EXTRACTOR_ACTOR})


def review_state_for(*, actor: str, operation: str, current: str | None = None, changed: bool = True) -> str:
    """Return the review state a card has after `actor` applies `operation` to it.

    `current` is the card's state before an `update` (None for a new card), `changed` whether the
    update changed any field of the card (evidence alone does not).
    """
    if operation == "accept" or actor not in INFERRING_ACTORS:
        return REVIEWED
    if operation == "update" and not changed and current in REVIEW_STATES:
        return current
    return UNREVIEWED


def merged_review_state(states: list[str]) -> str:
    """The organizer's merge of several cards is reviewed when a person or agent stood behind any of them."""
    return REVIEWED if REVIEWED in states else UNREVIEWED


# Seed 001's overview marks: the band of an unreviewed card's confidence.
CONFIDENCE_BANDS = ((0.8, "h"), (0.5, "m"))
LOW_BAND, UNKNOWN_BAND = "l", "?"
REVIEW_LEGEND = ("Memories marked *h/*m/*l/*? are unreviewed (inferred, not confirmed by the user); "
                 "the letter is their confidence: h >= 0.8, m >= 0.5, l < 0.5, ? unknown.")


def confidence_band(confidence: float | None) -> str:
    """Return the band letter of `confidence`: h (>= 0.8), m (>= 0.5), l (below), ? (none)."""
    if confidence is None:
        return UNKNOWN_BAND
    return next((band for floor, band in CONFIDENCE_BANDS if confidence >= floor), LOW_BAND)


def review_mark(review_state: str, confidence: float | None) -> str:
    """Return the prompt mark of a card: `*<band>` when unreviewed, empty when reviewed."""
    return f"*{confidence_band(confidence)}" if review_state == UNREVIEWED else ""
