"""What the extractor leaves alone (seed 001's already-written and recent-rejections blocks). Reads only.

The applier (`memory.pipeline.apply`) asks about the slots a plan touches before it writes. A plan
item's *slot* is its key (`avoid_ingredient:香菜`) within the scope owners its author sees in the
run's session: their user scope, this session and this workspace (and the target's owner), so an
inferred session card cannot sneak back in beside a user card somebody settled. People and agents
are every actor but the system's (`system:extractor`, `system:expiry`, …).

- **Already written** (`already_written`): a person or an agent changed the slot (any audit event:
  create, update, supersede, expire, forget, restore) at or after `since`, the time of the first
  message the run reads. They acted on the same turn; the extractor never overrides them.
- **Recently rejected** (`recent_rejection`): within `EKKO_REJECTION_DAYS` a person or an agent
  forgot a card of the slot (soft or hard), expired a card the extractor wrote, or updated or
  superseded one so that its value changed. The extractor leaves the slot alone unless the new
  evidence restates it explicitly; the applier decides that (`memory.pipeline.gating.is_explicit`).
  A later restore by a person lifts a forget.

`slot_history` reads everything it needs in one query: every audit event of the cards that ever held
those slots (and of the cards that superseded them), with each card's key, owner and value, plus the
hard-forget events whose keyed slot digest (`memory.rules.slots`) names one of them — a hard forget
keeps no key. `SlotHistory.verdict` then answers per slot without touching the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import JSONField, OuterRef, Q, Subquery, UUIDField

from memory.models import AuditEventType, MemoryAuditEvent, MemoryNode
from memory.rules.review import EXTRACTOR_ACTOR
from memory.rules.slots import slot_digest
from tenants.models import Tenant

__all__ = ["Slot", "SlotHistory", "Verdict", "rejection_window", "slot_history"]

_WRITES = (AuditEventType.CREATE, AuditEventType.SUPERSEDE, AuditEventType.UPDATE)
_DONE = {"delete": "forgot", "expire": "expired", "update": "changed", "supersede": "replaced",
         "create": "wrote", "restore": "restored"}


@dataclass(frozen=True)
class Slot:
    """A key within the scope owners one plan item may land in (the kind narrows the lookup)."""

    kind: str
    key: str
    owners: frozenset[str]

    def holds(self, key: str | None, owner: str | None) -> bool:
        return key == self.key and owner in self.owners


@dataclass(frozen=True)
class Verdict:
    """Why the extractor leaves a slot alone: who did what, when, and (a rejection) until when."""

    code: str  # already_written | recent_rejection
    actor: str
    event_type: str
    at: datetime
    until: datetime | None = None

    @property
    def what(self) -> str:
        """Who did what to the slot, when; no content and no actor id (the entry's `by` names the actor)."""
        who = "an agent" if self.actor.startswith("api_key:") else "a person"
        theirs = self.code == "already_written" or self.event_type == AuditEventType.DELETE
        whose = "this memory" if theirs else "the extractor's memory"
        return f"{who} {_DONE.get(self.event_type, self.event_type)} {whose} at {_when(self.at)}"

    @property
    def detail(self) -> str:
        if self.code == "already_written":
            return f"{self.what}, during the turns this run reads; what an agent or a person wrote wins"
        until = _when(self.until) if self.until else "?"
        return (f"{self.what}; the extractor leaves it alone until {until} unless the user restates it "
                "explicitly")


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class _Event:
    node_id: Any
    event_type: str
    actor: str
    at: datetime
    payload: Any
    key: str | None  # None: the card is gone (hard forget); then `slot` names it
    owner: str | None
    value: Any
    slot: tuple[str, str] | None = None

    @property
    def by_agent_or_person(self) -> bool:
        return not self.actor.startswith("system")


class SlotHistory:
    """The audit trail of some slots, read once; `verdict` answers per plan item."""

    def __init__(self, events: list[_Event], *, now: datetime) -> None:
        self.events = events
        self.now = now
        self.by_node: dict[Any, list[_Event]] = {}
        for event in events:
            self.by_node.setdefault(event.node_id, []).append(event)

    def verdict(self, slots: Sequence[Slot], *, since: datetime | None) -> Verdict | None:
        """Return why the extractor must leave one of `slots` alone (already written first), or None."""
        written = [e for e in self.events if e.by_agent_or_person and since is not None and e.at >= since
                   and any(self._in_slot(e, slot) for slot in slots)]
        if written:
            last = written[-1]
            return Verdict("already_written", last.actor, last.event_type, last.at)
        return next((v for v in map(self._rejection, slots) if v is not None), None)

    def _in_slot(self, event: _Event, slot: Slot) -> bool:
        if event.slot is not None:
            return slot.holds(event.slot[1], event.slot[0])
        return slot.holds(event.key, event.owner)

    def _rejection(self, slot: Slot) -> Verdict | None:
        window = rejection_window()
        rejection: _Event | None = None
        for event in self.events:
            if not event.by_agent_or_person or event.at < self.now - window:
                continue
            restores = event.event_type == AuditEventType.RESTORE and self._in_slot(event, slot)
            if restores and rejection is not None and rejection.event_type == AuditEventType.DELETE:
                rejection = None
            elif self._rejects(event, slot):
                rejection = event
        if rejection is None:
            return None
        return Verdict("recent_rejection", rejection.actor, rejection.event_type, rejection.at,
                       until=rejection.at + window)

    def _rejects(self, event: _Event, slot: Slot) -> bool:
        if event.event_type == AuditEventType.DELETE:
            return self._in_slot(event, slot)
        if event.event_type == AuditEventType.EXPIRE:
            return self._in_slot(event, slot) and self._writer_before(event.node_id, event) == EXTRACTOR_ACTOR
        if event.event_type == AuditEventType.UPDATE:
            changed = isinstance(event.payload, dict) and "value_json" in (event.payload.get("before") or {})
            return (changed and self._in_slot(event, slot)
                    and self._writer_before(event.node_id, event) == EXTRACTOR_ACTOR)
        if event.event_type == AuditEventType.SUPERSEDE:
            old_id = event.payload.get("supersededId") if isinstance(event.payload, dict) else None
            old = next(iter(self.by_node.get(_uuid(old_id), ())), None)
            return (old is not None and slot.holds(old.key, old.owner) and old.value != event.value
                    and self._writer_before(old.node_id, event) == EXTRACTOR_ACTOR)
        return False

    def _writer_before(self, node_id: Any, event: _Event) -> str | None:
        """Return who wrote the version of the card that `event` changed (its latest write before it)."""
        writes = [e for e in self.by_node.get(node_id, ()) if e.event_type in _WRITES and e.at < event.at]
        return writes[-1].actor if writes else None


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def rejection_window() -> timedelta:
    """How long a person's rejection keeps the extractor away from a slot (EKKO_REJECTION_DAYS)."""
    return timedelta(days=int(settings.EKKO_REJECTION_DAYS))


def slot_history(*, tenant: Tenant, slots: Iterable[Slot], since: datetime | None,
                 now: datetime) -> SlotHistory:
    """Read the audit trail of `slots` in one query (see the module docstring).

    Hard forgets are looked up from the earlier of `since` and the start of the rejection window.
    """
    slots = list(slots)
    keys = sorted({slot.key for slot in slots})
    kinds = sorted({slot.kind for slot in slots})
    owners = sorted({owner for slot in slots for owner in slot.owners})
    if not keys:
        return SlotHistory([], now=now)
    digests = {
        slot_digest(secret=settings.SECRET_KEY, tenant_id=tenant.pk, owner_ref=owner, key=slot.key):
            (owner, slot.key)
        for slot in slots
        for owner in slot.owners
    }
    erased_after = min(since, now - rejection_window()) if since else now - rejection_window()
    held = MemoryNode.objects.filter(tenant=tenant, kind__in=kinds, key__in=keys, owner_ref__in=owners)
    successors = MemoryNode.objects.filter(tenant=tenant, supersedes__in=held.values("pk"))
    node = MemoryNode.objects.filter(tenant=tenant, pk=OuterRef("node_id"))
    rows = (
        MemoryAuditEvent.objects.filter(tenant=tenant)
        .filter(
            Q(node_id__in=held.values("pk"))
            | Q(node_id__in=successors.values("pk"))
            | Q(event_type=AuditEventType.DELETE, created_at__gte=erased_after,
                payload__slot__in=sorted(digests))
        )
        .annotate(
            node_key=Subquery(node.values("key")[:1]),
            node_owner=Subquery(node.values("owner_ref")[:1]),
            node_value=Subquery(node.values("value_json")[:1], output_field=JSONField()),
            node_pk=Subquery(node.values("pk")[:1], output_field=UUIDField()),
        )
        .order_by("created_at", "pk")
        .values("node_id", "event_type", "actor", "created_at", "payload", "node_key", "node_owner",
                "node_value", "node_pk")
    )
    events = []
    for row in rows:
        payload = row["payload"]
        digest = payload.get("slot") if isinstance(payload, dict) and row["node_pk"] is None else None
        events.append(_Event(
            node_id=row["node_id"], event_type=row["event_type"], actor=row["actor"], at=row["created_at"],
            payload=payload, key=row["node_key"], owner=row["node_owner"], value=row["node_value"],
            slot=digests.get(digest) if digest else None,
        ))
    return SlotHistory(events, now=now)
