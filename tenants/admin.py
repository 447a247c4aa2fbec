"""Admin for operators: tenants with their members, workspaces and keys; API keys shown once and revocable.

A new key's raw value is shown once on the page that answers the add form (`ApiKeyAdmin.response_add`),
never through django.contrib.messages, whose cookie would carry it to the browser.

The tenant list and page are the per-tenant audit overview: members, workspaces, memory counts by
status, API keys with their last use, and links into the read-only audit trail (memory/admin.py).
The admin site runs in the all-tenants context, so counts read through `all_tenants` managers.
"""

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, IntegerField, Max, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from tenants.models import AGENT_WRITABLE_SCOPES, ApiKey, Membership, Scope, Tenant, Workspace
from tenants.services import api_key_create, api_key_revoke


class AllTenantsAdmin(admin.ModelAdmin):
    """Base for tenant-owned models: the admin site already runs in the all-tenants context."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return self.model.all_tenants.select_related("tenant")


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class WorkspaceInline(admin.TabularInline):
    model = Workspace
    extra = 0
    fields = ["name", "slug", "created_at"]
    readonly_fields = ["created_at"]


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["name", "prefix", "read_only", "write_scopes", "workspace", "last_used_at", "revoked_at"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


def _per_tenant(queryset: QuerySet, aggregate, *, zero: bool = True):  # noqa: ANN001, ANN201
    """Return a correlated subquery computing `aggregate` over the `queryset` rows of the outer tenant."""
    rows = queryset.filter(tenant=OuterRef("pk")).order_by().values("tenant").annotate(value=aggregate)
    value = Subquery(rows.values("value")[:1])
    return Coalesce(value, 0, output_field=IntegerField()) if zero else value


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "member_count",
        "workspace_count",
        "active_memories",
        "forgotten_memories",
        "active_keys",
        "last_key_use",
        "audit_link",
        "created_at",
    ]
    search_fields = ["slug", "name"]
    readonly_fields = ["overview", "created_at"]
    # card_limit: the ordinary cards each scope owner may hold (memory.services.quota); Django admin's
    # history records each change, as it does every other edit here.
    fields = ["slug", "name", "card_limit", "overview", "created_at"]
    inlines = [MembershipInline, WorkspaceInline, ApiKeyInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        from memory.models import MemoryNode

        # One query for the whole list: every count is a correlated subquery, not a query per row.
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_members=_per_tenant(Membership.all_tenants.all(), Count("pk")),
                n_workspaces=_per_tenant(Workspace.all_tenants.all(), Count("pk")),
                n_active=_per_tenant(MemoryNode.all_tenants.filter(status="active"), Count("pk")),
                n_deleted=_per_tenant(MemoryNode.all_tenants.filter(status="deleted"), Count("pk")),
                n_keys=_per_tenant(ApiKey.all_tenants.filter(revoked_at__isnull=True), Count("pk")),
                key_last_used=_per_tenant(ApiKey.all_tenants.all(), Max("last_used_at"), zero=False),
            )
        )

    @admin.display(description=_("members"), ordering="n_members")
    def member_count(self, tenant: Tenant) -> int:
        return tenant.n_members

    @admin.display(description=_("workspaces"), ordering="n_workspaces")
    def workspace_count(self, tenant: Tenant) -> int:
        return tenant.n_workspaces

    @admin.display(description=_("active memories"), ordering="n_active")
    def active_memories(self, tenant: Tenant) -> int:
        return tenant.n_active

    @admin.display(description=_("forgotten"), ordering="n_deleted")
    def forgotten_memories(self, tenant: Tenant) -> int:
        return tenant.n_deleted

    @admin.display(description=_("active API keys"), ordering="n_keys")
    def active_keys(self, tenant: Tenant) -> int:
        return tenant.n_keys

    @admin.display(description=_("last API key use"), ordering="key_last_used")
    def last_key_use(self, tenant: Tenant):  # noqa: ANN201
        return tenant.key_last_used

    @admin.display(description=_("audit"))
    def audit_link(self, tenant: Tenant) -> str:
        url = (
            reverse("admin:memory_memoryauditevent_changelist")
            + "?"
            + urlencode({"tenant__id__exact": tenant.pk})
        )
        return format_html('<a href="{}">{}</a>', url, _("audit events"))

    @admin.display(description=_("overview"))
    def overview(self, tenant: Tenant) -> str:
        """Render memory counts by status and scope, and links into the tenant's memories and audit trail."""
        from memory.models import MemoryNode, NodeStatus

        if tenant.pk is None:
            return "—"
        counts: dict[tuple[str, str], int] = {}
        for row in (
            MemoryNode.all_tenants.filter(tenant=tenant)
            .order_by()
            .values("status", "scope")
            .annotate(n=Count("pk"))
        ):
            counts[(row["status"], row["scope"])] = row["n"]
        scopes = [str(scope) for scope in Scope]
        header = format_html_join("", "<th>{}</th>", ((scope,) for scope in scopes))
        body = format_html_join(
            "",
            "<tr><th>{}</th>{}<td><strong>{}</strong></td></tr>",
            (
                (
                    status,
                    format_html_join(
                        "", "<td>{}</td>", ((counts.get((status, scope), 0),) for scope in scopes)
                    ),
                    sum(counts.get((status, scope), 0) for scope in scopes),
                )
                for status in NodeStatus.values
            ),
        )
        nodes_url = (
            reverse("admin:memory_memorynode_changelist") + "?" + urlencode({"tenant__id__exact": tenant.pk})
        )
        events_url = (
            reverse("admin:memory_memoryauditevent_changelist")
            + "?"
            + urlencode({"tenant__id__exact": tenant.pk})
        )
        return format_html(
            "<table><thead><tr><th>{}</th>{}<th>{}</th></tr></thead><tbody>{}</tbody></table>"
            '<p><a href="{}">{}</a> · <a href="{}">{}</a></p>',
            _("memories"),
            header,
            _("total"),
            body,
            nodes_url,
            _("Browse memories"),
            events_url,
            _("Audit events"),
        )


@admin.register(Membership)
class MembershipAdmin(AllTenantsAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    autocomplete_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(AllTenantsAdmin):
    list_display = ["slug", "name", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name"]


class ApiKeyCreateForm(forms.ModelForm):
    write_scopes = forms.MultipleChoiceField(
        choices=[(s.value, s.label) for s in AGENT_WRITABLE_SCOPES],
        initial=[s.value for s in AGENT_WRITABLE_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
    )
    # Declared here because the form class is built at import time, outside any tenant context.
    workspace = forms.ModelChoiceField(queryset=Workspace.all_tenants.all(), required=False)

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "read_only", "write_scopes", "workspace"]

    def clean(self) -> dict:
        data = super().clean()
        workspace, tenant = data.get("workspace"), data.get("tenant")
        if workspace is not None and tenant is not None and workspace.tenant_id != tenant.pk:
            self.add_error("workspace", "This workspace belongs to another tenant.")
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(AllTenantsAdmin):
    list_display = [
        "prefix",
        "name",
        "tenant",
        "read_only",
        "write_scopes",
        "workspace",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant", "read_only", ("revoked_at", admin.EmptyFieldListFilter)]
    actions = ["revoke"]
    readonly_fields = [
        "tenant",
        "prefix",
        "read_only",
        "write_scopes",
        "workspace",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]

    def get_form(self, request: HttpRequest, obj=None, **kwargs):  # noqa: ANN001, ANN201
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:  # noqa: ANN001
        return self.readonly_fields if obj is not None else []

    def save_model(self, request: HttpRequest, obj: ApiKey, form, change: bool) -> None:  # noqa: ANN001
        if change:
            obj.save(update_fields=["name"])
            return
        issued = api_key_create(
            tenant=form.cleaned_data["tenant"],
            name=form.cleaned_data["name"],
            read_only=form.cleaned_data["read_only"],
            write_scopes=form.cleaned_data["write_scopes"],
            workspace=form.cleaned_data["workspace"],
            created_by=request.user,
        )
        obj.pk, obj.prefix = issued.api_key.pk, issued.api_key.prefix
        # Kept on the instance until `response_add` renders it: never in a message (the cookie
        # storage would carry it to the browser readable without the secret key) nor the session.
        obj._issued_raw_key = issued.raw_key

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None):  # noqa: ANN201
        """Answer the add form with a page that shows the new raw key once; later pages show its prefix."""
        raw_key = getattr(obj, "_issued_raw_key", None)
        if raw_key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": _("New API key"),
            "opts": self.opts,
            "api_key": obj,
            "raw_key": raw_key,
        }
        response = TemplateResponse(request, "admin/tenants/apikey/issued.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        for api_key in queryset:
            api_key_revoke(tenant=api_key.tenant, api_key_id=api_key.pk)
        messages.success(request, f"Revoked {queryset.count()} key(s).")

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


__all__ = ["Scope"]
