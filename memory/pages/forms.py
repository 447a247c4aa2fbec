"""Forms of the memory pages: list filters, edit, forget (one or many), restore, API keys, switchers.

Forms only parse and validate input; every change goes through memory.services.nodes or tenants.services.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.models import MemoryNode, NodeStatus
from memory.pages import labels
from memory.pages.review import ReviewFilters
from memory.pages.selectors import STATUS_ANY, NodeFilters
from tenants.models import AGENT_WRITABLE_SCOPES, Workspace

MAX_BULK = 100


def _choices(mapping: dict[str, Any], *, blank: Any) -> list[tuple[str, Any]]:
    return [("", blank), *mapping.items()]


class FilterForm(forms.Form):
    """The memory list's GET form; an unknown value is ignored rather than refused."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label=_("Search"),
        widget=forms.TextInput(
            attrs={"type": "search", "autocomplete": "off", "placeholder": _("Search your memories…")}
        ),
    )
    scope = forms.ChoiceField(
        required=False, label=_("Scope"), choices=_choices(labels.SCOPES, blank=_("All scopes"))
    )
    type = forms.ChoiceField(
        required=False, label=_("Type"), choices=_choices(labels.TYPES, blank=_("All types"))
    )
    status = forms.ChoiceField(
        required=False, label=_("Status"), choices=[*labels.STATUSES.items(), (STATUS_ANY, _("Any status"))]
    )
    kind = forms.CharField(required=False, max_length=64, label=_("Kind"))
    domain = forms.CharField(required=False, max_length=100, label=_("Domain"))
    category = forms.CharField(required=False, max_length=500, label=_("Category"))
    tag = forms.CharField(required=False, max_length=100, label=_("Tag"))

    def filters(self) -> NodeFilters:
        self.is_valid()  # an invalid field is dropped from cleaned_data and so ignored
        data = self.cleaned_data
        return NodeFilters(
            q=data.get("q") or "",
            scope=data.get("scope") or "",
            domain=data.get("domain") or "",
            category=(data.get("category") or "").strip("/"),
            type=data.get("type") or "",
            kind=data.get("kind") or "",
            status=data.get("status") or NodeStatus.ACTIVE,
            tag=data.get("tag") or "",
        )


def value_text(value: Any) -> str:
    """Return a node's value as the edit form shows it: plain text for strings, JSON otherwise."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


class MemoryEditForm(forms.Form):
    title = forms.CharField(max_length=500, label=_("Title"))
    content = forms.CharField(label=_("Content"), widget=forms.Textarea(attrs={"rows": 4}))
    value = forms.CharField(
        required=False,
        label=_("Value"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Plain text, or JSON for structured values."),
    )
    tags = forms.CharField(
        required=False, max_length=1000, label=_("Tags"), help_text=_("Separate tags with commas.")
    )
    importance = forms.FloatField(
        min_value=0,
        max_value=1,
        label=_("Importance"),
        widget=forms.NumberInput(attrs={"step": "0.05"}),
        help_text=_("From 0 (trivial) to 1 (essential)."),
    )
    expires_at = forms.DateTimeField(
        required=False,
        label=_("Expires"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text=_("Leave empty to keep it until you forget it."),
    )
    reason = forms.CharField(
        max_length=500, label=_("Why this change?"), initial=_("Corrected in the browser")
    )
    expected_revision = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    original_value = forms.CharField(required=False, widget=forms.HiddenInput)

    @classmethod
    def for_node(cls, node: MemoryNode, **kwargs: Any) -> MemoryEditForm:
        return cls(
            initial={
                "title": node.title,
                "content": node.content,
                "value": value_text(node.value_json),
                "original_value": value_text(node.value_json),
                "tags": ", ".join(node.tags),
                "importance": node.importance,
                "expires_at": node.expires_at,
                "expected_revision": node.revision,
            },
            **kwargs,
        )

    def clean_value(self) -> Any:
        text = (self.cleaned_data.get("value") or "").strip()
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(
                    _("This looks like JSON but does not parse: %(error)s"), params={"error": exc.msg}
                ) from exc
        return text or None

    def clean_tags(self) -> list[str]:
        raw = (self.cleaned_data.get("tags") or "").replace("，", ",")
        return list(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))

    def operation(self, node_id: UUID) -> dict[str, Any]:
        """Return the `update` operation for memory.services.nodes.node_write_batch."""
        data = self.cleaned_data
        draft: dict[str, Any] = {
            "title": data["title"],
            "content": data["content"],
            "tags": data["tags"],
            "importance": data["importance"],
        }
        if data.get("expires_at") is not None:
            draft["expires_at"] = data["expires_at"]
        original = (data.get("original_value") or "").strip()
        if (self.data.get(self.add_prefix("value")) or "").strip() != original:
            draft["value_json"], draft["value_json_given"] = data["value"], True
        return {
            "operation": "update",
            "target_id": node_id,
            "expected_revision": data["expected_revision"],
            "reason": data["reason"],
            "node": draft,
        }


FORGET_MODES = [
    ("soft", _("Forget (can be restored)")),
    ("hard", _("Erase permanently (cannot be undone)")),
]


class ForgetForm(forms.Form):
    mode = forms.ChoiceField(choices=FORGET_MODES, initial="soft", widget=forms.RadioSelect, label=_("How"))
    purge_evidence = forms.BooleanField(required=False, label=_("Also erase the conversation it came from"))
    reason = forms.CharField(max_length=500, label=_("Why?"), initial=_("I asked to forget this"))
    expected_revision = forms.IntegerField(min_value=1, widget=forms.HiddenInput)


class BulkForgetForm(forms.Form):
    """Selected memories as `<id>:<revision>` pairs, so each is forgotten only at the revision seen."""

    target = forms.MultipleChoiceField(required=True, label=_("Memories"))
    mode = forms.ChoiceField(choices=FORGET_MODES, initial="soft", widget=forms.RadioSelect, label=_("How"))
    purge_evidence = forms.BooleanField(required=False, label=_("Also erase the conversation it came from"))
    reason = forms.CharField(max_length=500, label=_("Why?"), initial=_("I asked to forget these"))
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _any_target(self)

    def clean_target(self) -> list[tuple[UUID, int]]:
        return _target_pairs(self.cleaned_data["target"])


def _any_target(form: forms.Form) -> None:
    # Any well-formed pair is a valid choice; the service decides whether it names a visible memory.
    raw = form.data.getlist(form.add_prefix("target")) if hasattr(form.data, "getlist") else []
    form.fields["target"].choices = [(value, value) for value in raw]


def _target_pairs(values: list[str]) -> list[tuple[UUID, int]]:
    pairs = []
    for value in values[: MAX_BULK + 1]:
        node_id, _sep, revision = value.partition(":")
        try:
            pairs.append((UUID(node_id), int(revision)))
        except ValueError as exc:
            raise forms.ValidationError(_("A selected memory could not be read; reload the list.")) from exc
    if len(pairs) > MAX_BULK:
        raise forms.ValidationError(_("Select at most %(max)d memories at a time."), params={"max": MAX_BULK})
    return list(dict.fromkeys(pairs))


class ReviewFilterForm(forms.Form):
    """The review queue's filters; unknown values simply match nothing."""

    kind = forms.CharField(max_length=64, required=False, label=_("Kind"))
    source = forms.CharField(max_length=200, required=False, label=_("Conversation"))
    band = forms.ChoiceField(choices=_choices(labels.CONFIDENCE_BANDS, blank=_("Any confidence")),
                             required=False, label=_("Confidence"))

    def filters(self) -> ReviewFilters:
        if not self.is_valid():
            return ReviewFilters()
        data = self.cleaned_data
        return ReviewFilters(kind=data["kind"], source=data["source"], band=data["band"])


class ReviewActionForm(forms.Form):
    """Accept or reject the selected unreviewed memories, each at the revision seen (`<id>:<revision>`)."""

    target = forms.MultipleChoiceField(required=True, label=_("Memories"))
    action = forms.ChoiceField(choices=[("accept", _("Accept")), ("reject", _("Reject"))])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _any_target(self)

    def clean_target(self) -> list[tuple[UUID, int]]:
        return _target_pairs(self.cleaned_data["target"])


class RestoreForm(forms.Form):
    expected_revision = forms.IntegerField(min_value=1, widget=forms.HiddenInput)


class WorkspaceChoiceForm(forms.Form):
    """A form whose optional `workspace` field (a TypedChoiceField the subclass declares where it wants it)
    offers the tenant's workspaces (`workspaces=`, already loaded by the view)."""

    def __init__(self, *args: Any, workspaces: list[Workspace], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Choices, not a queryset: the tenant's workspaces are already loaded for this request.
        self.workspaces = {w.pk: w for w in workspaces}
        self.fields["workspace"].choices = [("", _("Every workspace")), *((w.pk, w.name) for w in workspaces)]

    def clean_workspace(self) -> Workspace | None:
        workspace_id = self.cleaned_data.get("workspace")
        return self.workspaces.get(workspace_id) if workspace_id is not None else None


class ApiKeyForm(WorkspaceChoiceForm):
    name = forms.CharField(max_length=200, label=_("Name"), help_text=_("Which agent or app uses this key."))
    read_only = forms.BooleanField(
        required=False,
        label=_("Read only"),
        help_text=_("The agent may search and read, never write or forget."),
    )
    write_scopes = forms.MultipleChoiceField(
        required=False,
        label=_("May write"),
        widget=forms.CheckboxSelectMultiple,
        choices=[(str(s), labels.SCOPES[str(s)]) for s in AGENT_WRITABLE_SCOPES],
        initial=[str(s) for s in AGENT_WRITABLE_SCOPES],
    )
    workspace = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label=_("Workspace"),
                                       help_text=_("Pin the key to one workspace."))


class SwitchForm(forms.Form):
    target = forms.IntegerField()
    next = forms.CharField(required=False, max_length=2000)


class WorkspaceImportForm(forms.Form):
    """The upload of the workspace page; the template renders the `<input type="file">` itself."""

    file = forms.FileField(
        label=_("SQLite file"), error_messages={"required": _("Choose the file to import.")}
    )
    map_users = forms.CharField(required=False, max_length=10_000, label=_("Map users"))

    def user_map_lines(self) -> list[str]:
        """Return the `NAME=MEMBER` lines of the map-users field, blank lines left out."""
        return [line for line in self.cleaned_data.get("map_users", "").splitlines() if line.strip()]


class CardLimitForm(forms.Form):
    card_limit = forms.IntegerField(
        label=_("Card limit"), min_value=1, max_value=1_000_000,
        help_text=_("How many memories each person and each workspace may keep (sessions do not count)."))
