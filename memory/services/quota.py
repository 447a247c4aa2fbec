"""Per-scope-owner card quotas and the ladder (seed 001): how full each user's and workspace's memory is.

An *ordinary* card is an active card in a user or workspace scope whose kind is not the journal. Each
scope owner (`owner_ref`: `user:<id>`, `workspace:<id>`) may hold `Tenant.card_limit` of them. The
ladder level comes from the headroom: normal (> 100 left), notice (≤ 100), degraded (≤ 50),
critical (≤ 20), exhausted (≤ 5). Session-scope cards are short-lived and not counted.

`quota_require` is the one enforcement point: every writer that makes a card active (the write
services' creates, supersedes and restores, imports) asks it with `cards_added` — the ordinary cards
each owner gains — while holding the tenant's audit-chain lock, and a write past the limit is refused
whole with 409 `quota_exceeded` (never archived silently). A create that supersedes the card of its
slot gains nothing; an update or expire never calls it. `quota_report` is what `GET memory/quota`
and the pages' banner show for the owners a caller may see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Count, Min, Q
from django.utils import timezone

from memory.errors import QuotaExceeded
from memory.models import MemoryNode, NodeStatus, ReviewState, ScopeCardCount
from memory.rules.kinds import JOURNAL_KIND
from tenants.models import Scope, Tenant

__all__ = ["LADDER", "QUOTA_SCOPES", "Level", "OwnerQuota", "QuotaOwner", "QuotaReport",
           "ScopeUsage", "cards_added", "is_ordinary", "ladder_level", "ordinary_cards", "owner_labels",
           "quota_report", "quota_require", "scope_usage", "tightest"]

QUOTA_SCOPES = (Scope.USER, Scope.WORKSPACE)


class Level:
    NORMAL = "normal"
    NOTICE = "notice"
    DEGRADED = "degraded"
    CRITICAL = "critical"
    EXHAUSTED = "exhausted"


# (level, the most headroom that still reaches it), tightest first.
LADDER = ((Level.EXHAUSTED, 5), (Level.CRITICAL, 20), (Level.DEGRADED, 50), (Level.NOTICE, 100))
_SEVERITY = [Level.NORMAL, Level.NOTICE, Level.DEGRADED, Level.CRITICAL, Level.EXHAUSTED]


def ladder_level(headroom: int) -> str:
    return next((level for level, most in LADDER if headroom <= most), Level.NORMAL)


def tightest(levels: Iterable[str]) -> str:
    return max(levels, key=_SEVERITY.index, default=Level.NORMAL)


def ordinary_cards() -> Q:
    """The cards a quota counts (the caller adds the tenant and owners)."""
    return Q(status=NodeStatus.ACTIVE, scope__in=QUOTA_SCOPES) & ~Q(kind=JOURNAL_KIND)


def is_ordinary(node: MemoryNode) -> bool:
    """Return whether an active (or about to be active) card counts against its owner's quota."""
    return node.status == NodeStatus.ACTIVE and node.scope in QUOTA_SCOPES and node.kind != JOURNAL_KIND


def cards_added(new: Iterable[MemoryNode], retired: Iterable[MemoryNode] = ()) -> Counter[str]:
    """Return the ordinary cards each owner gains when `new` become active and `retired` stop being so."""
    gained: Counter[str] = Counter(node.owner_ref for node in new if is_ordinary(node))
    gained.subtract(node.owner_ref for node in retired if is_ordinary(node))
    return gained


@dataclass(frozen=True)
class ScopeUsage:
    scope: str
    owner_ref: str
    used: int
    limit: int
    unreviewed: int
    oldest_unreviewed_at: datetime | None

    @property
    def headroom(self) -> int:
        return max(self.limit - self.used, 0)

    @property
    def level(self) -> str:
        return ladder_level(self.headroom)


def scope_usage(tenant: Tenant, owner_refs: Iterable[str]) -> dict[str, ScopeUsage]:
    """Usage of each named scope owner in one grouped read; owners with no card report zero."""
    owners = sorted(set(owner_refs))
    rows = (MemoryNode.objects.filter(ordinary_cards(), tenant=tenant, owner_ref__in=owners)
            .values("owner_ref")
            .annotate(used=Count("id"),
                      unreviewed=Count("id", filter=Q(review_state=ReviewState.UNREVIEWED)),
                      oldest=Min("created_at", filter=Q(review_state=ReviewState.UNREVIEWED))))
    found = {row["owner_ref"]: row for row in rows}
    usage = {}
    for owner in owners:
        row = found.get(owner, {})
        usage[owner] = ScopeUsage(scope=owner.split(":", 1)[0], owner_ref=owner, used=row.get("used", 0),
                                  limit=tenant.card_limit, unreviewed=row.get("unreviewed", 0),
                                  oldest_unreviewed_at=row.get("oldest"))
    return usage


def owner_labels(owner_refs: Iterable[str]) -> dict[str, str]:
    """Return what a client calls each owner: the username of a user scope, the id of a workspace scope."""
    refs = set(owner_refs)
    user_ids = {ref: int(ref.split(":", 1)[1]) for ref in refs if ref.startswith(f"{Scope.USER}:")}
    user_model = get_user_model()
    usernames = dict(user_model.objects.filter(pk__in=user_ids.values())
                     .values_list("pk", user_model.USERNAME_FIELD)) if user_ids else {}
    return {ref: usernames.get(user_ids[ref], "") if ref in user_ids else ref.split(":", 1)[1]
            for ref in refs}


def quota_require(*, tenant: Tenant, adding: Mapping[str, int]) -> None:
    """Refuse (409 `quota_exceeded`) a write giving an owner more ordinary cards than its headroom.

    `adding` is `cards_added` of the write. The caller holds the tenant's audit-chain lock, which
    every card writer takes before it inserts, so two concurrent writes never read the same headroom
    and pass the limit together (the count runs after the lock, on a fresh snapshot). The count is the
    owner's `ScopeCardCount` row, which triggers on the node table keep (migration 0019), so the check
    costs one indexed read however many cards the owner holds.
    """
    wanted = {owner: count for owner, count in adding.items() if count > 0}
    if not wanted:
        return
    # The triggers' running counts (memory.models.ScopeCardCount): one row per owner, no card scan.
    counted = dict(ScopeCardCount.objects.filter(tenant=tenant, owner_ref__in=sorted(wanted))
                   .values_list("owner_ref", "used"))
    for owner, count in sorted(wanted.items()):
        held = ScopeUsage(scope=owner.split(":", 1)[0], owner_ref=owner, used=counted.get(owner, 0),
                          limit=tenant.card_limit, unreviewed=0, oldest_unreviewed_at=None)
        if held.used + count <= held.limit:
            continue
        label = owner_labels([owner])[owner]
        raise QuotaExceeded(
            f"The {held.scope} memory of {label!r} holds {held.used} of {held.limit} cards; this write adds "
            f"{count} and only {held.headroom} fit. Nothing was written: write fewer, review or forget cards "
            "(or let the organizer merge them), or ask a tenant admin to raise the card limit.",
            scope=held.scope, owner=label, used=held.used, limit=held.limit, headroom=held.headroom)


@dataclass(frozen=True)
class QuotaOwner:
    """A scope owner a caller may see: its scope, `owner_ref` and what a client calls it (`label`)."""

    scope: str
    owner_ref: str
    label: str


@dataclass(frozen=True)
class OwnerQuota:
    owner: QuotaOwner
    usage: ScopeUsage
    oldest_unreviewed_days: int | None


@dataclass(frozen=True)
class QuotaReport:
    owners: list[OwnerQuota]
    level: str  # the tightest owner's

    @property
    def tightest_owner(self) -> OwnerQuota | None:
        return min(self.owners, key=lambda owner: owner.usage.headroom, default=None)


def quota_report(*, tenant: Tenant, owners: Sequence[QuotaOwner], now: datetime | None = None) -> QuotaReport:
    """Return each owner's usage (one grouped read) and the ladder level of the tightest one."""
    now = now or timezone.now()
    usage = scope_usage(tenant, [owner.owner_ref for owner in owners])

    def days_since(moment: datetime | None) -> int | None:
        return (now - moment).days if moment is not None else None

    rows = [OwnerQuota(owner=owner, usage=usage[owner.owner_ref],
                       oldest_unreviewed_days=days_since(usage[owner.owner_ref].oldest_unreviewed_at))
            for owner in owners]
    return QuotaReport(owners=rows, level=tightest(row.usage.level for row in rows))
