"""Admin for operators: tenants with their members, workspaces and keys; API keys shown once and revocable."""

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

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


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline, WorkspaceInline, ApiKeyInline]


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
    list_display = ["prefix", "name", "tenant", "read_only", "write_scopes", "workspace", "last_used_at",
                    "revoked_at"]
    list_filter = ["tenant", "read_only", ("revoked_at", admin.EmptyFieldListFilter)]
    actions = ["revoke"]
    readonly_fields = ["tenant", "prefix", "read_only", "write_scopes", "workspace", "created_by", "created_at",
                       "last_used_at", "revoked_at"]

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
        obj.pk = issued.api_key.pk
        messages.warning(request, f"New API key (shown once, copy it now): {issued.raw_key}")

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        for api_key in queryset:
            api_key_revoke(tenant=api_key.tenant, api_key_id=api_key.pk)
        messages.success(request, f"Revoked {queryset.count()} key(s).")

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


__all__ = ["Scope"]
