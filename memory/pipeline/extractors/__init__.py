"""The rule-based extractor: user messages in, a `MemoryExtraction` plan out, without a model.

`extract_by_rules` reads user messages only, oldest first. It skips trivial messages (greetings,
thanks, acks) and every message that carries a secret (an `ignore` item names the kind of secret),
skips questions unless they ask for a task, then hands each clause to the topic rules:

| module | recognises |
|---|---|
| `food` | avoided and liked ingredients, allergies, the flavour profile |
| `communication` | reply language, how to address the user, reply style |
| `personal` | where the user lives |
| `todos` | tasks, and a known task marked done |
| `temporary` | today's / these days' states (session scope, expiring) |
| `corrections` | a correction that lifts a known avoidance (supersede or expire) |

`draft.PlanDraft` keeps one item per memory slot (the canonical key) and turns a correction of a
known slot into a supersede. Every node quotes the message verbatim (`source_quote`), so the
confidence contract keeps its confidence. An explicit statement no rule understands becomes an
`ignore` item saying so. The rules it writes under (kinds, scopes, sensitive content) are enforced
again by the write service. May import: `memory.rules` and the pipeline's pure modules (plans,
gating, sentences); never the ORM, services or settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from memory.pipeline.extractors import communication, corrections, food, personal, temporary, todos
from memory.pipeline.extractors.draft import Clause, PlanDraft
from memory.pipeline.gating import is_correction, is_explicit, is_question, is_trivial, mentions_task
from memory.pipeline.plans import KnownNode, MemoryExtraction, SourceMessage
from memory.pipeline.sentences import clauses, looks_chinese, split_sentences
from memory.rules.sensitive import find_sensitive_content

__all__ = ["extract_by_rules"]

# Every rule that reads one clause, in the order they run.
_CLAUSE_RULES = (
    communication.language,
    communication.address,
    food.flavor,
    food.avoid,
    food.allergy,
    food.like,
    communication.style,
    todos.task_done,
    personal.home,
)


def extract_by_rules(
    messages: Sequence[SourceMessage], *, known: Sequence[KnownNode] = (), now: datetime | None = None
) -> MemoryExtraction:
    """Return the plan the rules read from `messages` (oldest first); `known` enables corrections."""
    draft = PlanDraft(known, now or datetime.now(UTC))
    for message in messages:
        _read(draft, message)
    return draft.plan()


def _read(draft: PlanDraft, message: SourceMessage) -> None:
    if message.role != "user" or is_trivial(message.content):
        return
    reason = find_sensitive_content(message.content)
    if reason:
        draft.ignore(
            message,
            f"message carries sensitive content ({reason}); nothing extracted from it",
            f"sensitive:{message.message_id}",
        )
        return
    zh = looks_chinese(message.content)
    explicit_message = is_explicit(message.content)
    correction = is_correction(message.content)
    found = 0
    for sentence in split_sentences(message.content):
        if is_question(sentence) and not mentions_task(sentence):
            continue
        sentence_explicit = explicit_message or correction
        days = temporary.temporal_days(sentence)
        if days is not None and not is_explicit(sentence):
            states = temporary.temporary_state(draft, message, sentence, days, zh)
            if states:
                found += states
                continue
        for clause in clauses(sentence) or [sentence]:
            found += _clause(draft, Clause(message, sentence, clause, zh, sentence_explicit, correction))
        found += todos.task(draft, Clause(message, sentence, sentence, zh, sentence_explicit, correction))
    if not found and explicit_message:
        draft.ignore(
            message,
            "explicit statement, but no rule recognises a memory in it; the agent's "
            "memory/write or the LLM extractor can store it",
            f"explicit:{message.message_id}",
        )


def _clause(draft: PlanDraft, ctx: Clause) -> int:
    if ctx.correction and corrections.lift(draft, ctx):
        return 1
    return sum(rule(draft, ctx) for rule in _CLAUSE_RULES)
