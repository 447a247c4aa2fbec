"""Conversation context for message search: pure rules that reorder turns by the turns around them.

A conversation turn is rarely evidence on its own. The reply to "Did you run the charity race?" holds
the answer ("Yes! Last Saturday.") and may share no word with a query about the race; the question
shares the words and holds no answer; and one conversation about a subject keeps its evidence close
together. `conversation_scores` takes the fused scores of the message candidates
(memory.search.ranking.hybrid_scores) and applies three rules, each measured on LoCoMo dev
(bench/README.md, "What each ranking change bought"):

- **Questions ask**: a turn that ends with a question mark (QUESTION_END_PATTERN) keeps
  QUESTION_TURN_WEIGHT of its own score, so it ranks below a turn that tells about the subject.
- **Replies answer**: the turn after a question gains REPLY_WEIGHT times the question's score, and
  comes back even when it shares no word with the query. The turn after a statement gains nothing:
  a reaction to a statement ("Wow, a sunset painting!") echoes its words without adding evidence, and
  lending to it crowded other sessions' evidence out (multi-hop R@10 -5 points on LoCoMo dev).
- **Sessions cluster**: every turn gains SESSION_WEIGHT times the summed scores of the
  SESSION_BEST_TURNS best lending turns of its session, so a turn of a conversation about the subject
  passes an equally good stray match elsewhere.

Only the best candidates lend (memory.search.messages looks up their sessions and replies); what they
lend is their fused score before any rule, so a rule never feeds on another's boost. A turn does not
gain from the turn after it: that bought 0.7 points of R@10, within the noise, and let a run of turns
that share only a common word lift each other past a good semantic hit. No ORM, no Django.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "QUESTION_END_PATTERN",
    "QUESTION_TAIL_CHARS",
    "QUESTION_TURN_WEIGHT",
    "REPLY_WEIGHT",
    "SESSION_BEST_TURNS",
    "SESSION_WEIGHT",
    "Lender",
    "conversation_scores",
]

K = TypeVar("K", bound=Hashable)

# The share of its own score that a question keeps.
QUESTION_TURN_WEIGHT = 0.6
# The share of a lending question's score that its reply gains.
REPLY_WEIGHT = 0.5
# The share of its session's strength (the summed scores of its best lending turns) a turn gains.
SESSION_WEIGHT = 0.3
SESSION_BEST_TURNS = 2

# A question ends with a question mark (ASCII or full-width), perhaps followed by closing quotes or
# brackets ('Tim said, "How long have you surfed?"'), within its last QUESTION_TAIL_CHARS characters.
# One pattern for Python's `re` and PostgreSQL's `~` (the context statement tests it on the tail).
QUESTION_END_PATTERN = r"""[?？][\s"'”’»)\]）」』]*$"""
QUESTION_TAIL_CHARS = 16


@dataclass(frozen=True)
class Lender:
    """A lending turn's session, and the turn after it there when the lender is a question."""

    session: Hashable
    reply: Hashable | None = None


def conversation_scores(
    scores: Mapping[K, float],
    *,
    lenders: Mapping[K, Lender],
    sessions: Mapping[K, Hashable],
    questions: Collection[K] = (),
    question_weight: float = QUESTION_TURN_WEIGHT,
    reply_weight: float = REPLY_WEIGHT,
    session_weight: float = SESSION_WEIGHT,
    session_best: int = SESSION_BEST_TURNS,
) -> dict[K, float]:
    """Return the turns' scores under the module's three rules, best first (exact ties keep input order).

    `scores` are the candidates' fused scores; `lenders` the best of them (best first); `sessions` each
    candidate's session; `questions` the candidates that ask. The result holds every candidate and the
    replies to lending questions, nothing else.
    """
    combined = {turn: score * (question_weight if turn in questions else 1.0)
                for turn, score in scores.items()}
    session_of: dict[K, Hashable] = dict(sessions)
    for lender, around in lenders.items():
        reply = around.reply
        if lender not in questions or reply is None or reply == lender:
            continue
        combined[reply] = combined.get(reply, 0.0) + reply_weight * scores[lender]
        session_of.setdefault(reply, around.session)

    strongest: dict[Hashable, list[float]] = defaultdict(list)
    for lender, around in lenders.items():
        strongest[around.session].append(scores[lender])
    strength = {session: sum(sorted(lent, reverse=True)[:session_best])
                for session, lent in strongest.items()}
    for turn in combined:
        combined[turn] += session_weight * strength.get(session_of.get(turn), 0.0)
    return dict(sorted(combined.items(), key=lambda pair: -pair[1]))
