"""Provable erasure: what a hard forget removes besides the card, and the receipt that proves it.

A hard forget (memory.services.forget) hands its cards here, inside its transaction. Removed with
them: their older revisions; the cards the extractor derived from the same evidence (when the
caller may forget those too); the content of every earlier audit event of all of them (reason,
payload and salt, so the chain still verifies, memory.audit_chain); the items, summary patches
and texts of extraction runs that read that evidence or mention those cards; the cards an organizer
merge folded into them, and the organizer items' copies of their content; and, with
`purge_evidence`, the evidence messages themselves (rows, search entries, vectors) with the
summaries that cover them (redacted in place, so the session's summary chain stays whole). The
hard-delete events and the receipt keep no content: the forget's reason is not stored, and a
delete event names its slot only by a keyed digest (memory.rules.slots), so the extractor can still
leave a forgotten slot alone for EKKO_REJECTION_DAYS (memory.pipeline.guardrails). The
receipt (`removed`: rows per table) is itself a content-free audit event, part of the chain.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from memory.errors import MemoryServiceError
from memory.models import (
    AuditEventType,
    ExtractionRun,
    MemoryAuditEvent,
    MemoryMessage,
    MemoryNode,
    MemorySummary,
    OrganizeDecision,
    OrganizeItem,
)
from memory.rules.review import EXTRACTOR_ACTOR
from memory.rules.slots import slot_digest
from memory.selectors import accessible_nodes, supersede_chain_walk
from memory.services.audit import audit_event_record, audit_node_change
from memory.services.guards import require_acting_for, require_node_writable, require_workspace_reachable
from memory.visibility import Viewer

REDACTED_SUMMARY = "[redacted: the conversation it summarised was erased]"
SUMMARY_LISTS = ("constraints", "preferences", "decisions", "completed_work", "pending_work", "known_issues")
ERASED_ITEM_KEYS = ("index", "operation")
# Text shorter than this is too common to scrub by substring (it would blank unrelated runs).
MIN_NEEDLE = 2


@dataclass(frozen=True)
class ErasureReceipt:
    id: UUID
    removed: dict[str, int]
    created_at: datetime
    digest: str


@dataclass
class Erasure:
    """What one hard forget removed: the derived cards it also took, and its receipt."""

    derived_ids: list[UUID] = field(default_factory=list)
    receipt: ErasureReceipt | None = None


def nodes_erase(*, viewer: Viewer, nodes: list[MemoryNode], purge_evidence: bool) -> Erasure:
    """Erase `nodes` (locked by the caller) and everything derived from them; return the receipt."""
    tenant = viewer.tenant
    doomed = _with_merge_sources(viewer, _with_older_revisions(viewer, {node.pk: node for node in nodes}))
    derived = _with_older_revisions(viewer, _derived_cards(viewer, doomed))
    everything = {**doomed, **derived}
    evidence = _evidence_of(everything.values())
    needles = _needles(everything.values())

    kept_events = [
        audit_node_change(viewer=viewer, event_type=AuditEventType.DELETE, node=node, reason="",
                          payload={"mode": "hard", "slot": slot_digest(
                              secret=settings.SECRET_KEY, tenant_id=tenant.pk, owner_ref=node.owner_ref,
                              key=node.key)}).pk
        for node in everything.values()
    ]
    erased_events = (
        MemoryAuditEvent.objects.filter(tenant=tenant, node_id__in=list(everything))
        .exclude(pk__in=kept_events).update(reason="", payload=None, content_salt="")
    )
    runs = _runs_scrub(viewer, evidence=evidence, node_ids=set(everything), needles=needles)
    organized = _organizer_scrub(viewer, list(everything))
    messages = summaries = 0
    if purge_evidence:
        summaries, messages = _evidence_purge(viewer, evidence)
    deleted = _nodes_delete(viewer, list(everything))

    removed = {
        MemoryNode._meta.db_table: deleted,
        MemoryAuditEvent._meta.db_table: erased_events,
        ExtractionRun._meta.db_table: runs,
        OrganizeItem._meta.db_table: organized,
    }
    if purge_evidence:
        removed[MemoryMessage._meta.db_table] = messages
        removed[MemorySummary._meta.db_table] = summaries
    derived_ids = sorted(set(derived) - set(doomed), key=str)
    event = audit_event_record(
        tenant=tenant, event_type=AuditEventType.ERASE, node_id=None, workspace_id=viewer.workspace.pk,
        session_id=None, user_id=viewer.user.pk if viewer.user is not None else None, actor=viewer.actor,
        reason="", payload={"receipt": {
            "removed": removed, "purgeEvidence": purge_evidence,
            "nodeIds": sorted(str(pk) for pk in doomed), "derivedIds": [str(pk) for pk in derived_ids],
        }},
    )
    return Erasure(derived_ids=derived_ids, receipt=ErasureReceipt(
        id=event.pk, removed=removed, created_at=event.created_at, digest=event.digest))


def _nodes_delete(viewer: Viewer, ids: list[UUID]) -> int:
    """Delete the cards `ids` of the viewer's tenant; return how many went.

    Django's cascade would clear the cards' two self-references (`parent`, `supersedes`) and then
    delete by primary key alone; done here for the tenant, every statement names it and can be
    routed to one shard (docs/scale-out.md). A new foreign key to a card fails the DELETE loudly.
    """
    nodes = MemoryNode.objects.filter(tenant=viewer.tenant)
    nodes.filter(parent_id__in=ids).update(parent=None)
    nodes.filter(supersedes_id__in=ids).update(supersedes=None)
    # No id: the DELETE is never sent and Django answers None, not 0.
    return nodes.filter(pk__in=ids)._raw_delete(nodes.db) or 0


def _with_older_revisions(viewer: Viewer, nodes: dict[UUID, MemoryNode]) -> dict[UUID, MemoryNode]:
    older = supersede_chain_walk(MemoryNode.objects.select_for_update().filter(tenant=viewer.tenant),
                                 list(nodes.values()), direction="older")
    return {**nodes, **{node.pk: node for node in older}}


def _with_merge_sources(viewer: Viewer, nodes: dict[UUID, MemoryNode]) -> dict[UUID, MemoryNode]:
    """Add the cards an organizer merge folded into these (and their older revisions): the same memory."""
    found = dict(nodes)
    frontier = list(found)
    while frontier:
        members = (OrganizeItem.objects.filter(tenant=viewer.tenant, result_node_id__in=frontier,
                                               decision=OrganizeDecision.APPLIED)
                   .values_list("members", flat=True))
        ids = {member for group in members for member in group} - set(found)
        locked = MemoryNode.objects.select_for_update().filter(tenant=viewer.tenant,
                                                               pk__in=sorted(ids, key=str))
        sources = {node.pk: node for node in locked}
        sources = _with_older_revisions(viewer, sources) if sources else {}
        frontier = [pk for pk in sources if pk not in found]
        found.update(sources)
    return found


def _organizer_scrub(viewer: Viewer, ids: list[UUID]) -> int:
    """Clear the organizer items' copies of the erased cards' content (proposed title, content, value)."""
    if not ids:
        return 0
    holds = Q(members__overlap=ids) | Q(target_id__in=ids) | Q(result_node_id__in=ids)
    items = OrganizeItem.objects.filter(holds, tenant=viewer.tenant)
    return items.update(proposed=None, reason="")


def _evidence_of(nodes: Iterable[MemoryNode]) -> dict[int, set[str]]:
    """Return the cited message ids per workspace (a message id is unique within its workspace)."""
    evidence: dict[int, set[str]] = {}
    for node in nodes:
        evidence.setdefault(node.workspace_id, set()).update(node.source_message_ids)
    return {workspace: ids for workspace, ids in evidence.items() if ids}


def _derived_cards(viewer: Viewer, doomed: dict[UUID, MemoryNode]) -> dict[UUID, MemoryNode]:
    """Return the cards the extractor wrote from the same evidence that this caller may forget too."""
    evidence = _evidence_of(doomed.values())
    if not evidence:
        return {}
    same_evidence = Q(pk__in=[])
    for workspace_id, message_ids in evidence.items():
        same_evidence |= Q(workspace_id=workspace_id, source_message_ids__overlap=sorted(message_ids))
    by_extractor = MemoryAuditEvent.objects.filter(
        tenant=viewer.tenant, node_id=OuterRef("pk"), actor=EXTRACTOR_ACTOR,
        event_type__in=[AuditEventType.CREATE, AuditEventType.SUPERSEDE])
    candidates = (
        accessible_nodes(viewer).select_for_update(of=("self",)).filter(same_evidence)
        .filter(Exists(by_extractor)).exclude(pk__in=list(doomed))
    )
    return {node.pk: node for node in candidates if _writable(viewer, node)}


def _writable(viewer: Viewer, node: MemoryNode) -> bool:
    try:
        require_node_writable(viewer, node)
    except MemoryServiceError:
        return False  # a derived card this caller may not forget stays (and is not in derivedIds)
    return True


def _needles(nodes: Iterable[MemoryNode]) -> set[str]:
    """Return the texts of the cards: any of them in a stored run result is the card's content."""
    texts: set[str] = set()
    for node in nodes:
        texts.update([node.title, node.content, node.item_key or "", node.key.partition(":")[2],
                      *node.tags, *node.entities, *_strings(node.value_json)])
    return {text.strip() for text in texts if len(text.strip()) >= MIN_NEEDLE}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item)
            yield str(key)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif value is not None:
        yield json.dumps(value)


def _mentions(value: Any, needles: set[str], ids: set[str]) -> bool:
    text = json.dumps(value, ensure_ascii=False)
    return any(needle in text for needle in needles) or any(node_id in text for node_id in ids)


def _runs_scrub(viewer: Viewer, *, evidence: dict[int, set[str]], node_ids: set[UUID],
                needles: set[str]) -> int:
    """Blank what extraction runs stored about the erased cards or their evidence; return runs changed."""
    ids = {str(pk) for pk in node_ids}
    read_evidence = Q(pk__in=[])
    for workspace_id, message_ids in evidence.items():
        pks = MemoryMessage.objects.filter(tenant=viewer.tenant, workspace_id=workspace_id,
                                           message_id__in=sorted(message_ids)).values_list("pk", flat=True)
        for pk in pks:
            read_evidence |= Q(workspace_id=workspace_id, after_message_pk__lt=pk, up_to_message_pk__gte=pk)
    named = Q(pk__in=[])
    for text in sorted(ids | needles):
        named |= Q(results__icontains=text) | Q(error__icontains=text)
    changed = 0
    cited = set().union(*evidence.values()) if evidence else set()
    runs = ExtractionRun.objects.select_for_update().filter(read_evidence | named, tenant=viewer.tenant)
    for run in runs:
        results, error = _scrubbed(run.results, cited=cited, ids=ids, needles=needles,
                                   read_evidence=_read(run, viewer, evidence)), run.error
        if _mentions(error, needles, ids):
            error = ""
        if (results, error) != (run.results, run.error):
            ExtractionRun.objects.filter(pk=run.pk).update(results=results, error=error)
            changed += 1
    return changed


def _read(run: ExtractionRun, viewer: Viewer, evidence: dict[int, set[str]]) -> bool:
    message_ids = evidence.get(run.workspace_id)
    if not message_ids or run.up_to_message_pk is None:
        return False
    return MemoryMessage.objects.filter(
        tenant=viewer.tenant, workspace_id=run.workspace_id, message_id__in=sorted(message_ids),
        pk__gt=run.after_message_pk, pk__lte=run.up_to_message_pk).exists()


def _scrubbed(results: Any, *, cited: set[str], ids: set[str], needles: set[str],
              read_evidence: bool) -> Any:
    if not isinstance(results, dict):
        return None if _mentions(results, needles, ids) else results
    scrubbed = dict(results)
    items = []
    for item in results.get("items") or []:
        touches = not isinstance(item, dict) or bool(cited & set(item.get("sourceMessageIds") or [])) or (
            _mentions(item, needles, ids))
        items.append({**{key: item.get(key) for key in ERASED_ITEM_KEYS}, "outcome": "erased"}
                     if touches and isinstance(item, dict) else item)
    if "items" in results:
        scrubbed["items"] = items
    if read_evidence or _mentions(results.get("summaryPatch"), needles, ids):
        scrubbed["summaryPatch"] = None
    if "warnings" in results:
        scrubbed["warnings"] = [w for w in results.get("warnings") or [] if not _mentions(w, needles, ids)]
    if _mentions(scrubbed, needles, ids):
        # Whatever still names the card (a field added later, say) goes with it.
        return {"erased": True, "counts": results.get("counts")}
    return scrubbed


def _evidence_purge(viewer: Viewer, evidence: dict[int, set[str]]) -> tuple[int, int]:
    """Delete the evidence messages this caller may erase and redact the summaries covering them."""
    chosen = Q(pk__in=[])
    for workspace_id, message_ids in evidence.items():
        chosen |= Q(workspace_id=workspace_id, message_id__in=sorted(message_ids))
    cited = MemoryMessage.objects.select_for_update().filter(chosen, tenant=viewer.tenant)
    messages = [message for message in cited if _purgeable(viewer, message)]
    summaries = _summaries_covering(viewer, messages)
    redacted = MemorySummary.objects.filter(tenant=viewer.tenant, pk__in=summaries).update(
        summary=REDACTED_SUMMARY, current_goal=None, **{name: [] for name in SUMMARY_LISTS})
    deleted, _by_model = MemoryMessage.objects.filter(tenant=viewer.tenant,
                                                      pk__in=[m.pk for m in messages]).delete()
    return redacted, deleted


def _purgeable(viewer: Viewer, message: MemoryMessage) -> bool:
    try:
        require_workspace_reachable(viewer, message.workspace_id)
        require_acting_for(viewer, message.user_id)
    except MemoryServiceError:
        return False
    # A member erases their own words; a message of nobody in particular (an agent's) is not theirs.
    return message.user_id is not None or not viewer.restrict_to_person or viewer.whole_tenant


def _summaries_covering(viewer: Viewer, messages: list[MemoryMessage]) -> list[UUID]:
    """Return the summaries whose message range (from … to, by time) holds one of `messages`."""
    covering: list[UUID] = []
    sessions = {(m.workspace_id, m.session_id) for m in messages}
    for workspace_id, session_id in sessions:
        purged = [m for m in messages if (m.workspace_id, m.session_id) == (workspace_id, session_id)]
        purged_ids = {m.message_id for m in purged}
        summaries = list(MemorySummary.objects.filter(tenant=viewer.tenant, workspace_id=workspace_id,
                                                      session_id=session_id))
        bounds = dict(MemoryMessage.objects.filter(
            tenant=viewer.tenant, workspace_id=workspace_id, session_id=session_id,
            message_id__in={s.from_message_id for s in summaries} | {s.to_message_id for s in summaries},
        ).values_list("message_id", "created_at"))
        for summary in summaries:
            start, end = bounds.get(summary.from_message_id), bounds.get(summary.to_message_id)
            ends_purged = bool({summary.from_message_id, summary.to_message_id} & purged_ids)
            unknown = start is None or end is None
            if ends_purged or unknown or any(start <= m.created_at <= end for m in purged):
                covering.append(summary.pk)
    return covering
