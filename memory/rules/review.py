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
