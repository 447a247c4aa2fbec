"""The form of the webhooks page: a receiver URL, the events it wants, an optional workspace."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.pages.forms import WorkspaceChoiceForm
from memory.webhooks.models import WebhookEvent

EVENT_LABELS = {
    WebhookEvent.MEMORY_CREATED: _("A memory was created"),
    WebhookEvent.MEMORY_UPDATED: _("A memory was updated or restored"),
    WebhookEvent.MEMORY_SUPERSEDED: _("A memory was replaced by a new revision"),
    WebhookEvent.MEMORY_EXPIRED: _("A memory expired"),
    WebhookEvent.MEMORY_FORGOTTEN: _("A memory was forgotten (ids only)"),
    WebhookEvent.EXTRACTION_COMPLETED: _("A background extraction finished"),
}


class WebhookEndpointForm(WorkspaceChoiceForm):
    url = forms.CharField(
        max_length=2000,
        label=_("Receiver URL"),
        help_text=_("https:// address of your service; it receives signed POST requests."),
    )
    description = forms.CharField(max_length=200, required=False, label=_("Description"))
    events = forms.MultipleChoiceField(
        label=_("Events"),
        widget=forms.CheckboxSelectMultiple,
        choices=[(str(event), f"{event} — {label}") for event, label in EVENT_LABELS.items()],
        error_messages={"required": _("Choose at least one event.")},
    )
    workspace = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, label=_("Workspace"),
        help_text=_("Only this workspace's events; or every event of the tenant."))
