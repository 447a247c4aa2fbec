"""Read-only admin views of memory for operators: nodes and their audit trail (edits go through services).

The admin site runs in the all-tenants context (ekko_site.admin_site), so these views audit every
tenant. Nothing here adds, changes or deletes a memory row or an audit event: operators look, the
people whose memories these are change them in the pages (or their agents through the API).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from memory.models import MemoryAuditEvent, MemoryNode, MemoryReadEvent
from memory.webhooks.models import WebhookDelivery, WebhookEndpoint
from tenants.admin import AllTenantsAdmin

ACTOR_CHOICES_FROM_LATEST = 10_000


class ReadOnlyAdmin(AllTenantsAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


def events_url(**params: object) -> str:
    """Return the audit event list filtered by `params` (e.g. node_id=…, tenant__id__exact=…)."""
    return reverse("admin:memory_memoryauditevent_changelist") + "?" + urlencode(params)


@admin.register(MemoryNode)
class MemoryNodeAdmin(ReadOnlyAdmin):
    list_display = [
        "title",
        "key",
        "scope",
        "status",
        "revision",
        "tenant",
        "workspace",
        "updated_at",
        "history_link",
    ]
    list_filter = ["tenant", "scope", "status", "type", "kind", "domain"]
    search_fields = ["title", "content", "key"]
    exclude = ["embedding", "search_vector", "search_text"]
    readonly_fields = ["history"]
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("workspace")

    @admin.display(description=_("history"))
    def history_link(self, node: MemoryNode) -> str:
        return format_html('<a href="{}">{}</a>', events_url(node_id=node.pk), _("audit events"))

    @admin.display(description=_("history"))
    def history(self, node: MemoryNode) -> str:
        """Render the node's supersede chain and every audit event of it, oldest first."""
        chain_ids = [node.pk]
        older = node.supersedes_id
        while older is not None and len(chain_ids) < 100:
            chain_ids.append(older)
            older = MemoryNode.all_tenants.filter(pk=older).values_list("supersedes_id", flat=True).first()
        newer = MemoryNode.all_tenants.filter(supersedes_id=node.pk).values_list("pk", flat=True).first()
        events = MemoryAuditEvent.all_tenants.filter(
            tenant_id=node.tenant_id, node_id__in=chain_ids
        ).order_by("created_at", "id")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            (
                (
                    e.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                    e.event_type,
                    e.actor,
                    e.reason,
                    "" if e.node_id == node.pk else str(e.node_id)[:8],
                )
                for e in events
            ),
        )
        links = format_html(
            '<p><a href="{}">{}</a></p>', events_url(node_id=node.pk), _("All audit events of this node")
        )
        if newer:
            links += format_html(
                '<p>{} <a href="{}">{}</a></p>',
                _("Superseded by"),
                reverse("admin:memory_memorynode_change", args=[newer]),
                newer,
            )
        return links + format_html(
            "<table><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            _("when"),
            _("event"),
            _("actor"),
            _("reason"),
            _("older version"),
            rows,
        )


class ActorFilter(admin.SimpleListFilter):
    """Filter by who made the change; choices come from the latest events, so the list stays cheap."""

    title = _("actor")
    parameter_name = "actor"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        events = model_admin.model.all_tenants.all()
        tenant = request.GET.get("tenant__id__exact")
        if tenant and tenant.isdigit():
            events = events.filter(tenant_id=int(tenant))
        latest = events.order_by("-created_at").values_list("actor", flat=True)[:ACTOR_CHOICES_FROM_LATEST]
        return [(actor, actor) for actor in sorted(set(latest))]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(actor=self.value()) if self.value() else queryset


@admin.register(MemoryAuditEvent)
class MemoryAuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "sequence", "event_type", "actor", "node_link", "tenant", "workspace",
                    "short_reason"]
    list_filter = ["tenant", "event_type", ActorFilter, ("created_at", admin.DateFieldListFilter)]
    search_fields = ["actor", "reason", "=node_id", "=session_id"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    show_full_result_count = False
    fields = [
        "created_at",
        "tenant",
        "workspace",
        "event_type",
        "actor",
        "user",
        "node_link",
        "session_id",
        "reason",
        "pretty_payload",
        "sequence",
        "previous_digest",
        "content_digest",
        "digest",
    ]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        # One EXISTS per page instead of one query per row: does the node still exist (not hard-forgotten)?
        return (
            super()
            .get_queryset(request)
            .select_related("workspace")
            .annotate(node_exists=Exists(MemoryNode.all_tenants.filter(pk=OuterRef("node_id"))))
        )

    @admin.display(description=_("node"), ordering="node_id")
    def node_link(self, event: MemoryAuditEvent) -> str:
        if event.node_id is None:
            return "—"
        history = format_html(
            '<a href="{}" title="{}">{}</a>',
            events_url(node_id=event.node_id),
            _("every event of this node"),
            _("history"),
        )
        if getattr(event, "node_exists", False):
            node = format_html(
                '<a href="{}"><code>{}</code></a>',
                reverse("admin:memory_memorynode_change", args=[event.node_id]),
                str(event.node_id)[:8],
            )
        else:
            node = format_html('<code title="{}">{}</code>', _("erased"), str(event.node_id)[:8])
        return format_html("{} · {}", node, history)

    @admin.display(description=_("reason"))
    def short_reason(self, event: MemoryAuditEvent) -> str:
        return event.reason if len(event.reason) <= 80 else event.reason[:79] + "…"

    @admin.display(description=_("payload"))
    def pretty_payload(self, event: MemoryAuditEvent) -> str:
        if event.payload is None:
            return "—"
        return format_html("<pre>{}</pre>", json.dumps(event.payload, ensure_ascii=False, indent=2))


@admin.register(MemoryReadEvent)
class MemoryReadEventAdmin(ReadOnlyAdmin):
    """The read audit: which API key or person was handed which card, when, through which endpoint."""

    list_display = ["created_at", "actor", "endpoint", "node_link", "tenant"]
    list_filter = ["tenant", ActorFilter, "endpoint", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["=actor", "=node_id"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    show_full_result_count = False
    fields = ["created_at", "tenant", "actor", "user", "api_key", "endpoint", "node_link"]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("user", "api_key")

    @admin.display(description=_("node"), ordering="node_id")
    def node_link(self, read: MemoryReadEvent) -> str:
        return format_html('<a href="{}"><code>{}</code></a>', events_url(node_id=read.node_id),
                           str(read.node_id)[:8])


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    list_display = ["url", "tenant", "workspace", "is_active", "consecutive_failures", "paused_reason",
                    "updated_at"]
    list_filter = ["tenant", "is_active"]
    search_fields = ["url", "description"]
    exclude = ["secret_encrypted"]  # the signing secret never leaves the pages' one-time display


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["event_type", "event_id", "tenant", "endpoint", "status", "attempts", "response_code",
                    "last_error", "created_at"]
    list_filter = ["tenant", "status", "event_type"]
    search_fields = ["event_id", "node_id", "last_error"]
    list_select_related = ["endpoint", "tenant"]
    show_full_result_count = False
