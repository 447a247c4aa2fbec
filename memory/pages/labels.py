"""Translated display names for the controlled vocabularies the pages show (scopes, types, statuses…).

The model choices carry English labels for the API and the admin; people read these instead.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

SCOPES = {
    "session": pgettext_lazy("scope", "Session"),
    "workspace": pgettext_lazy("scope", "Workspace"),
    "user": pgettext_lazy("scope", "Personal"),
    "global": pgettext_lazy("scope", "Tenant-wide"),
}

SCOPE_HELP = {
    "session": _("Only for one conversation."),
    "workspace": _("Shared by everyone in the workspace."),
    "user": _("About you; follows you into every workspace."),
    "global": _("Applies to the whole tenant; only admins change it."),
}

TYPES = {
    "preference": _("Preference"),
    "fact": _("Fact"),
    "decision": _("Decision"),
    "task": _("Task"),
    "recipe": _("Recipe"),
    "skill": _("Skill"),
    "constraint": _("Constraint"),
    "correction": _("Correction"),
}

STATUSES = {
    "active": _("Active"),
    "superseded": _("Superseded"),
    "expired": _("Expired"),
    "deleted": _("Forgotten"),
}

ROLES = {
    "owner": _("Owner"),
    "admin": _("Admin"),
    "member": _("Member"),
    "viewer": _("Viewer"),
}

REVIEW_STATES = {
    "reviewed": _("Reviewed"),
    "unreviewed": _("Unreviewed"),
}

# memory.rules.review's bands of an unreviewed card's confidence.
CONFIDENCE_BANDS = {
    "h": _("High (80 % or more)"),
    "m": _("Medium (50–79 %)"),
    "l": _("Low (under 50 %)"),
}

EVENTS = {
    "create": _("Created"),
    "update": _("Edited"),
    "supersede": _("Replaced an older version"),
    "expire": _("Expired"),
    "delete": _("Forgotten"),
    "restore": _("Restored"),
    "accept": _("Accepted after review"),
    "erase": _("Erased for good (receipt)"),
}

MESSAGE_ROLES = {
    "system": _("System"),
    "user": _("Person"),
    "assistant": _("Assistant"),
    "tool": _("Tool"),
}

FIELDS = {
    "title": _("Title"),
    "content": _("Content"),
    "value_json": _("Value"),
    "tags": _("Tags"),
    "entities": _("Entities"),
    "importance": _("Importance"),
    "confidence": _("Confidence"),
    "expires_at": _("Expires"),
    "domain": _("Domain"),
    "category_path": _("Category"),
    "type": _("Type"),
}


def actor_label(actor: str) -> str:
    """Return a readable name for an audit actor (`user:alice`, `api_key:ekko_abc…`, `system`)."""
    kind, _sep, name = actor.partition(":")
    if kind == "user":
        return str(_("%(name)s (browser)") % {"name": name})
    if kind == "api_key":
        return str(_("agent key %(prefix)s…") % {"prefix": name})
    return str(_("system"))

# The quota ladder (memory.services.quota.Level).
LEVELS = {
    "normal": _("Normal"),
    "notice": _("Filling up"),
    "degraded": _("Getting full"),
    "critical": _("Almost full"),
    "exhausted": _("Full"),
}

# The organizer page (memory.organizer): schedules, run states, item actions, risks and decisions.
ORGANIZE_SCHEDULES = {"off": _("Off"), "daily": _("Daily"), "weekly": _("Weekly")}
ORGANIZE_ACTIONS = {
    "keep": _("Keep"),
    "merge_into": _("Merge"),
    "delete": _("Delete"),
    "mark_review": _("Mark for review"),
    "rewrite": _("Rewrite"),
}
ORGANIZE_RISKS = {"low": _("Low"), "medium": _("Medium"), "high": _("High")}
ORGANIZE_DECISIONS = {
    "applied": _("Applied"),
    "queued": _("Waiting for you"),
    "dismissed": _("Dismissed"),
    "rejected": _("Rejected"),
}
ORGANIZE_RISK_REASONS = {
    "cross_scope": _("more than one owner"),
    "low_confidence": _("low confidence"),
    "values_disagree": _("the values disagree"),
    "reviewed": _("a person reviewed it"),
}
ORGANIZE_STATES = {
    "queued": _("Queued"),
    "running": _("Running"),
    "done": _("Done"),
    "failed": _("Failed"),
}
