"""Tenants and what belongs to them directly: memberships, workspaces and API keys.

`TenantOwnedModel` is the base of every table that carries `tenant_id`. Its default manager
fails closed: with no tenant bound (see tenants.context) a query raises instead of reading
every tenant's rows. `Model.all_tenants` is the deliberately loud bypass.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from memory.rules import scope_policy
from tenants.context import ALL_TENANTS, current_tenant_id, require_tenant_id


class OrganizeSchedule(models.TextChoices):
    OFF = "off"
    DAILY = "daily"
    WEEKLY = "weekly"


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    card_limit = models.PositiveIntegerField(
        default=500, db_default=500,
        help_text="Ordinary active cards each scope owner may hold (memory.services.quota).")
    organize_schedule = models.CharField(
        max_length=8, choices=OrganizeSchedule.choices, default=OrganizeSchedule.OFF,
        db_default=OrganizeSchedule.OFF, help_text="How often the organizer runs on its own.")

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class TenantScopedManager(models.Manager):
    """Default manager of tenant-owned models: filters to the bound tenant, raises when none is bound."""

    def get_queryset(self) -> models.QuerySet:
        tenant_id = require_tenant_id()
        queryset = super().get_queryset()
        if tenant_id == ALL_TENANTS:
            return queryset
        return queryset.filter(tenant_id=tenant_id)


class AllTenantsManager(models.Manager):
    """`Model.all_tenants`, also the base manager (what `save()`, related access and cascades query).

    It has no tenant wall of its own: in `all_tenants_context()`, or with no tenant bound, it reads
    every row the database lets it see. With a tenant bound it names that tenant in the SQL as
    well. Row-level security hides the other tenants' rows already; saying so lets Django's own
    queries by primary key (an UPDATE on save, a foreign key followed, a cascade) be routed to one
    shard (docs/scale-out.md).
    """

    def get_queryset(self) -> models.QuerySet:
        queryset = super().get_queryset()
        tenant_id = current_tenant_id()
        if tenant_id is None or tenant_id == ALL_TENANTS:
            return queryset
        return queryset.filter(tenant_id=tenant_id)


class TenantOwnedModel(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")

    objects = TenantScopedManager()
    # The loud bypass: reads every tenant. Allowed callers are listed in docs/tenancy.md.
    all_tenants = AllTenantsManager()

    class Meta:
        abstract = True
        base_manager_name = "all_tenants"


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Membership(TenantOwnedModel):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="membership_tenant_user_uniq")]
        indexes = [models.Index(fields=["tenant", "role"], name="membership_tenant_role_idx")]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id} ({self.role})"

    @property
    def is_admin(self) -> bool:
        return self.role in (Role.OWNER, Role.ADMIN)


class Workspace(TenantOwnedModel):
    DEFAULT_SLUG = "default"

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=63)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="WorkspaceMember", related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slug"], name="workspace_tenant_slug_uniq")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.slug


class WorkspaceMember(TenantOwnedModel):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "workspace", "user"], name="workspacemember_uniq")
        ]


class Scope(models.TextChoices):
    SESSION = "session", "Session"
    WORKSPACE = "workspace", "Workspace"
    USER = "user", "User"
    GLOBAL = "global", "Global"


# The choices of memory.rules.scope_policy.AGENT_WRITABLE_SCOPES (the one definition), as Scope members.
AGENT_WRITABLE_SCOPES = [Scope(scope) for scope in scope_policy.AGENT_WRITABLE_SCOPES]


def default_write_scopes() -> list[str]:
    return [str(scope) for scope in AGENT_WRITABLE_SCOPES]


class ApiKey(TenantOwnedModel):
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, help_text="First characters of the key, kept for display.")
    key_hash = models.CharField(max_length=64, help_text="SHA-256 of the key; the key itself is never stored.")
    read_only = models.BooleanField(default=False)
    write_scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=default_write_scopes)
    workspace = models.ForeignKey(Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key_hash"], name="apikey_tenant_hash_uniq")]
        indexes = [
            # Authentication looks a key up before its tenant is known (docs/tenancy.md).
            models.Index(fields=["key_hash"], name="apikey_hash_lookup_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
