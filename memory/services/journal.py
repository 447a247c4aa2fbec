"""Journal appends: a create for a date whose journal card exists adds its entry to that card.

The card is changed in place (revision + 1, an `update` audit event with the text before and after),
never superseded: a day's entries stay one card, in the order they were written, and each append's
cited messages join the card's evidence. The card was locked by the slot lookup of the create.
"""

from __future__ import annotations

from memory.models import AuditEventType, MemoryNode
from memory.rules.journal import ends_with_entry, journal_appended
from memory.rules.review import review_state_for
from memory.services.audit import audit_node_change
from memory.services.node_drafts import WriteContext, WriteResult, search_text_of


def journal_append(ctx: WriteContext, card: MemoryNode, entry_node: MemoryNode, result: WriteResult, *,
                   reason: str) -> WriteResult:
    """Append the entry of the unsaved `entry_node` to the locked journal `card` of the same date."""
    entry = str(entry_node.value_json)
    text = card.value_json if isinstance(card.value_json, str) else card.content
    evidence = list(dict.fromkeys([*card.source_message_ids, *entry_node.source_message_ids]))
    result.node, result.applied_confidence = card, card.confidence
    if ends_with_entry(text, entry) and evidence == list(card.source_message_ids):
        result.action = "noop"  # the same entry again: a retried write
        return result
    before = {"value_json": card.value_json, "content": card.content,
              "source_message_ids": list(card.source_message_ids), "review_state": card.review_state}
    appended = not ends_with_entry(text, entry)
    card.value_json = card.content = journal_appended(text, entry) if appended else text
    card.source_message_ids = evidence
    # The same rule as any update: an inferred append leaves the day unreviewed, an agent's reviews it.
    card.review_state = review_state_for(actor=ctx.viewer.actor, operation="update",
                                         current=card.review_state, changed=appended)
    card.revision += 1
    card.updated_at = ctx.now
    card.search_text = search_text_of(card)
    card.save()
    audit_node_change(viewer=ctx.viewer, event_type=AuditEventType.UPDATE, node=card, reason=reason,
                      payload={"before": before,
                               "after": {"value_json": card.value_json, "content": card.content,
                                         "source_message_ids": evidence, "review_state": card.review_state},
                               "appended": entry, "revision": card.revision})
    result.action = "updated"
    return result
