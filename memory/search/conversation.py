"""Conversation context for message search: pure rules that reorder turns by the turns around them.

A conversation turn is rarely evidence on its own. The reply to "Did you run the charity race?" holds
the answer ("Yes! Last Saturday.") and may share no word with a query about the race; the question
shares the words and holds no answer; and one conversation about a subject keeps its evidence close
together. `conversation_scores` takes the fused scores of the message candidates
(memory.search.ranking.hybrid_scores) and applies three rules, each measured on LoCoMo dev
(bench/README.md, "What each ranking change bought"):

- **Question turns** keep QUESTION_TURN_WEIGHT of their own score (`is_question`): a turn that asks
  about the subject ranks below one that tells about it. Its full score still lends to its reply.
- **Previous turn**: a turn gains PREVIOUS_TURN_WEIGHT times the score of the turn before it. The
  reply to a question that matches enters the ranking this way even with no score of its own; any
  other turn must be relevant by itself (padding with replies to statements bought no recall).
- **Session**: every turn gains SESSION_WEIGHT times the summed scores of the SESSION_BEST_TURNS best
  lending turns of its session, so a turn of a conversation about the subject passes an equally good
  stray match elsewhere.

Only the best candidates lend (their neighbours are looked up by memory.search.messages); what they
lend is their fused score before any rule, so a rule never feeds on another's boost. A turn does not
gain from the turn after it: that bought 0.7 points of R@10 on LoCoMo, within the noise, and let a run
of turns that share only a common word lift each other past a good semantic hit. No ORM, no Django.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "PREVIOUS_TURN_WEIGHT",
    "QUESTION_TAIL_CHARS",
    "QUESTION_TURN_WEIGHT",
    "SESSION_BEST_TURNS",
    "SESSION_WEIGHT",
    "Lender",
    "conversation_scores",
    "is_question",
]

K = TypeVar("K", bound=Hashable)

# The share of its own score that a question turn keeps.
QUESTION_TURN_WEIGHT = 0.6
# The share of a lending turn's score that the turn after it (its reply) gains.
PREVIOUS_TURN_WEIGHT = 0.5
# The share of its session's strength (the summed scores of its best lending turns) a turn gains.
SESSION_WEIGHT = 0.3
SESSION_BEST_TURNS = 2

# A question ends with a question mark, perhaps followed by closing quotes or brackets ('Tim said,
# "How long have you surfed?"'). `is_question` needs no more than the last QUESTION_TAIL_CHARS.
QUESTION_TAIL_CHARS = 16
_QUESTION_END_RE = re.compile(r"[?？][\s\"'”’»)\]）」』]*\Z")


def is_question(text: str | None) -> bool:
    """Return True when `text` ends with a question mark (ASCII or full-width), closing quotes aside."""
    return bool(text) and ("?" in text or "？" in text) and _QUESTION_END_RE.search(text) is not None


@dataclass(frozen=True)
class Lender:
    """A lending turn's session and the turn just after it there (None for the last turn)."""

    session: Hashable
    following: Hashable | None


def conversation_scores(
    scores: Mapping[K, float],
    *,
    lenders: Mapping[K, Lender],
    sessions: Mapping[K, Hashable],
    questions: Collection[K] = (),
    question_weight: float = QUESTION_TURN_WEIGHT,
    previous_weight: float = PREVIOUS_TURN_WEIGHT,
    session_weight: float = SESSION_WEIGHT,
    session_best: int = SESSION_BEST_TURNS,
) -> dict[K, float]:
    """Return the turns' scores under the module's three rules, best first (exact ties keep input order).

    `scores` are the candidates' fused scores; `lenders` the best of them, with their next turns;
    `sessions` each candidate's session; `questions` the candidates that ask. The result holds every
    candidate and the replies to lending questions, nothing else.
    """
    combined = {turn: score * (question_weight if turn in questions else 1.0)
                for turn, score in scores.items()}
    session_of: dict[K, Hashable] = dict(sessions)
    for lender, around in lenders.items():
        reply = around.following
        if reply is None or reply == lender or not (reply in scores or lender in questions):
            continue
        combined[reply] = combined.get(reply, 0.0) + previous_weight * scores[lender]
        session_of.setdefault(reply, around.session)

    strongest: dict[Hashable, list[float]] = defaultdict(list)
    for lender, around in lenders.items():
        strongest[around.session].append(scores[lender])
    strength = {session: sum(sorted(lent, reverse=True)[:session_best])
                for session, lent in strongest.items()}
    for turn in combined:
        combined[turn] += session_weight * strength.get(session_of.get(turn), 0.0)
    return dict(sorted(combined.items(), key=lambda pair: -pair[1]))
