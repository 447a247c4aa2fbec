"""Per-scope-owner card quotas and the ladder (seed 001): how full each user's and workspace's memory is.

An *ordinary* card is an active card in a user or workspace scope whose kind is not the journal. Each
scope owner (`owner_ref`: `user:<id>`, `workspace:<id>`) may hold `Tenant.card_limit` of them. The
ladder level comes from the headroom: normal (> 100 left), notice (≤ 100), degraded (≤ 50),
critical (≤ 20), exhausted (≤ 5). Session-scope cards are short-lived and not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Min, Q

from memory.models import MemoryNode, NodeStatus, ReviewState
from memory.rules.scope_policy import Scope

__all__ = ["JOURNAL_KIND", "LADDER", "QUOTA_SCOPES", "Level", "ScopeUsage", "ladder_level", "ordinary_cards",
           "scope_usage"]

JOURNAL_KIND = "journal"
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


@dataclass(frozen=True)
class ScopeUsage:
    scope: str
    owner_ref: str
    used: int
    limit: int
    unreviewed: int
    oldest_unreviewed_at: object | None  # datetime

    @property
    def headroom(self) -> int:
        return max(self.limit - self.used, 0)

    @property
    def level(self) -> str:
        return ladder_level(self.headroom)


def scope_usage(tenant, owner_refs: Iterable[str]) -> dict[str, ScopeUsage]:
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
