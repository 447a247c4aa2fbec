"""The plan a rule extractor builds while it reads: one item per memory slot, the latest statement winning.

`Clause` is what a topic rule looks at: the clause, its sentence and message, whether the text is
Chinese, and whether the user spoke explicitly or corrected something. `PlanDraft.add` files a
node draft under its memory slot — the canonical key the write service will give it (kind's slot
key plus the normalised itemKey), so two statements about the same slot become one item — and
fills in the verbatim quote and the confidence the statement earns. A correction of a slot the
session already remembers becomes a supersede of that card. Pure: no ORM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.pipeline.plans import KnownNode, MemoryExtraction, PlanItem, SourceMessage
from memory.pipeline.sentences import quote
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key
from memory.rules.kinds import DEFAULT_KINDS

__all__ = ["Clause", "PlanDraft", "node_draft"]


@dataclass
class Clause:
    """One clause of a user message, with what the whole message and sentence say about it."""

    message: SourceMessage
    sentence: str
    clause: str
    zh: bool
    explicit: bool
    correction: bool

    def quote(self) -> str:
        return quote(self.clause, self.sentence, self.message.content)


def node_draft(kind: str, **fields: Any) -> dict[str, Any]:
    """Return a node draft of `kind` with the given fields (None values left out)."""
    return {"kind": kind, **{name: value for name, value in fields.items() if value is not None}}


class PlanDraft:
    """The items read so far, keyed by (operation group, memory slot), in the order first seen."""

    def __init__(self, known: Sequence[KnownNode], now: datetime) -> None:
        self.known = list(known)
        self.now = now
        self._items: dict[tuple[str, str], PlanItem] = {}
        self._order: list[tuple[str, str]] = []

    def known_by_key(self, key: str) -> KnownNode | None:
        """Return the session's known card in the slot `key`, if any."""
        for node in self.known:
            if node.key == key:
                return node
        return None

    def pending(self, slot: str) -> PlanItem | None:
        """Return the create or supersede item already drafted for `slot`, if any."""
        return self._items.get(("write", slot))

    def add(
        self,
        ctx: Clause,
        node: dict[str, Any],
        reason: str,
        *,
        slot: str | None = None,
        operation: str | None = None,
        target_id: str | None = None,
        explicit: bool | None = None,
    ) -> int:
        """File `node` under its memory slot (or `slot`); return 1, or 0 when its itemKey is refused."""
        if slot is None:
            try:
                slot = canonical_key(DEFAULT_KINDS[node["kind"]], node.get("item_key"))
            except SchemaError:
                return 0
        explicit = ctx.explicit if explicit is None else explicit
        node.setdefault("source_quote", ctx.quote())
        if operation is None or operation == "supersede":
            node.setdefault("confidence", 0.95 if explicit else 0.8)
        if operation is None:
            operation = "create"
            if ctx.correction and node.get("kind") in DEFAULT_KINDS:
                known = self.known_by_key(slot)
                if known is not None:
                    operation, target_id = "supersede", known.node_id
        item = PlanItem(
            operation=operation,
            node=node,
            reason=reason,
            target_id=target_id,
            source_message_ids=(ctx.message.message_id,),
            explicit_user_intent=explicit,
        )
        self._file((operation if operation in ("update", "expire") else "write", slot), item)
        return 1

    def ignore(self, message: SourceMessage, reason: str, slot: str) -> None:
        """Record that `message` was read and deliberately left alone, and why."""
        item = PlanItem(operation="ignore", node={}, reason=reason, source_message_ids=(message.message_id,))
        self._file(("ignore", slot), item)

    def plan(self) -> MemoryExtraction:
        """Return the plan: one item per slot, in the order the slots were first seen."""
        return MemoryExtraction(nodes=[self._items[index] for index in self._order])

    def _file(self, index: tuple[str, str], item: PlanItem) -> None:
        if index not in self._items:
            self._order.append(index)
        self._items[index] = item  # a later message about the same slot wins
