"""Verifying the tenant audit chain: the walk behind `manage.py verify_audit`.

Each tenant's audit events form a hash chain. The database assigns an event's place on insert
(trigger `ekko_audit_chain_append`, migration memory/0006): the next `sequence`, the previous
event's digest, a random `content_salt`, the salted `content_digest` of its reason and payload,
and its chain `digest` (memory.rules.audit_digest). A hard forget erases an event's reason and
payload together with the salt: the content digest stays, so the chain still verifies, and
without the salt it cannot confirm a guess of the erased text. This walk recomputes every value
in Python, independently of the SQL that wrote them, and reports the first event where they
disagree; it also checks the erased events (each must be followed by the hard forget of its card)
and the stored chain head (deleting the last events shows there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.db import connection

from memory.models import AuditChainHead
from memory.rules.audit_digest import GENESIS, VERSION, event_problem
from tenants.context import tenant_context
from tenants.models import Tenant

HARD_DELETE_TYPES = ("delete", "erase")
BATCH_SIZE = 5000


@dataclass(frozen=True)
class ChainBreak:
    sequence: int
    event_id: str
    problem: str


@dataclass
class ChainReport:
    tenant: Tenant
    events: int = 0
    erased: int = 0
    head_digest: str = GENESIS
    first_break: ChainBreak | None = None
    pending_erasures: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def intact(self) -> bool:
        return self.first_break is None


_ROWS_SQL = """
SELECT id, sequence, previous_digest, event_type, node_id, workspace_id, session_id, actor,
       (extract(epoch FROM created_at) * 1000000)::bigint, reason, payload::text, content_salt,
       content_digest, digest
FROM memory_memoryauditevent
WHERE tenant_id = %s AND sequence > %s
ORDER BY sequence
LIMIT %s
"""


def _rows(tenant: Tenant, batch_size: int) -> Iterator[tuple]:
    after = 0
    while True:
        with tenant_context(tenant), connection.cursor() as cursor:
            cursor.execute(_ROWS_SQL, [tenant.pk, after, batch_size])
            rows = cursor.fetchall()
        yield from rows
        if len(rows) < batch_size:
            return
        after = rows[-1][1]


def _check(report: ChainReport, row: tuple, expected_sequence: int) -> str | None:
    (event_id, sequence, previous, event_type, node_id, workspace_id, session_id, actor, created_at_us,
     reason, payload_text, salt, stored_content_digest, stored_digest) = row
    if sequence != expected_sequence:
        return f"sequence {sequence} where {expected_sequence} was expected (events missing or reordered)"
    if previous != report.head_digest:
        return "previous_digest does not match the digest of the event before it"
    problem = event_problem(
        tenant_id=report.tenant.pk, sequence=sequence, previous_digest=previous, event_id=event_id,
        event_type=event_type, node_id=node_id, workspace_id=workspace_id, session_id=session_id, actor=actor,
        created_at_us=created_at_us, reason=reason, payload_text=payload_text, content_salt=salt,
        content_digest_=stored_content_digest, digest=stored_digest,
    )
    if problem is not None:
        return problem
    if not salt:
        report.erased += 1
        if node_id is None:
            return "content was erased from an event that names no memory"
        report.pending_erasures.setdefault(str(node_id), (sequence, str(event_id)))
    if event_type in HARD_DELETE_TYPES and node_id is not None:
        report.pending_erasures.pop(str(node_id), None)
    return None


def audit_chain_verify(*, tenant: Tenant, progress: Callable[[int], None] | None = None,
                       batch_size: int = BATCH_SIZE) -> ChainReport:
    """Walk the tenant's chain from its first event and return its length, head and first break."""
    report = ChainReport(tenant=tenant)
    for row in _rows(tenant, batch_size):
        problem = _check(report, row, report.events + 1)
        if problem is not None:
            report.first_break = ChainBreak(sequence=row[1], event_id=str(row[0]), problem=problem)
            return report
        report.events += 1
        report.head_digest = row[13]
        if progress is not None and report.events % batch_size == 0:
            progress(report.events)
    if report.pending_erasures:
        sequence, event_id = min(report.pending_erasures.values())
        report.first_break = ChainBreak(
            sequence=sequence, event_id=event_id,
            problem="content was erased but no hard forget of its memory follows in the chain",
        )
        return report
    head = _stored_head(tenant)
    if head != (report.events, report.head_digest) and not (head is None and report.events == 0):
        report.first_break = ChainBreak(
            sequence=report.events + 1, event_id="-",
            problem=f"the chain head records {head[0] if head else 'no'} events: the last ones were deleted"
            if head is None or head[0] > report.events else "the chain head does not match the last event",
        )
    return report


def _stored_head(tenant: Tenant) -> tuple[int, str] | None:
    with tenant_context(tenant):
        head = AuditChainHead.objects.filter(tenant=tenant).values_list("sequence", "digest").first()
    return tuple(head) if head is not None else None



def audit_chain_info(*, tenant: Tenant) -> dict[str, object]:
    """Return what a file needs to check the digests of the tenant's events it carries (its head included)."""
    head = _stored_head(tenant) or (0, GENESIS)
    return {"format": VERSION, "tenantId": tenant.pk, "headSequence": head[0], "headDigest": head[1]}
