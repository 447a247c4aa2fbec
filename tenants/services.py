"""Write paths for tenants, memberships, workspaces and API keys (the only code that mutates them)."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from tenants.context import all_tenants_context, bind_tenant, tenant_context
from tenants.models import AGENT_WRITABLE_SCOPES, ApiKey, Membership, Role, Scope, Tenant, Workspace

KEY_PREFIX = "ekko_"
PREFIX_DISPLAY_LENGTH = 12
# How long a process remembers which tenant a key hash belongs to (the key's and the tenant's rows are
# read again on every call; revocation and a new card limit are never cached).
API_KEY_CACHE_SECONDS = 300.0


class ApiKeyError(ValueError):
    """An API key request that cannot be honoured (bad scope, unknown workspace)."""


@dataclass(frozen=True)
class TenantSetup:
    tenant: Tenant
    owner: AbstractBaseUser
    created: bool


def tenant_create(*, slug: str, owner_username: str, name: str = "", password: str | None = None) -> TenantSetup:
    """Create the tenant, its `default` workspace, the owner user if missing and an owner membership; idempotent."""
    user_model = get_user_model()
    with transaction.atomic():
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
        if name and tenant.name != name:
            tenant.name = name
            tenant.save(update_fields=["name"])
        owner, user_created = user_model.objects.get_or_create(username=owner_username)
        if password is not None:
            owner.set_password(password)
            owner.save()
        elif user_created:
            owner.set_unusable_password()
            owner.save()
        with tenant_context(tenant):
            Workspace.objects.get_or_create(
                tenant=tenant, slug=Workspace.DEFAULT_SLUG, defaults={"name": "Default"}
            )
            membership, _ = Membership.objects.get_or_create(
                tenant=tenant, user=owner, defaults={"role": Role.OWNER}
            )
            if membership.role != Role.OWNER:
                membership.role = Role.OWNER
                membership.save(update_fields=["role"])
    return TenantSetup(tenant=tenant, owner=owner, created=created)


def membership_set(*, tenant: Tenant, user: AbstractBaseUser, role: str) -> Membership:
    """Add `user` to `tenant` with `role`, or change the role of an existing member."""
    with tenant_context(tenant):
        membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    return membership


def tenant_card_limit_set(*, tenant: Tenant, card_limit: int, changed_by: AbstractBaseUser,
                          via: str = "tenant settings page") -> Tenant:
    """Set how many ordinary cards each scope owner of `tenant` may hold; record it in the admin history.

    The change is logged like an operator's edit in Django admin (a LogEntry on the tenant, with the
    old and the new limit and `via`, where it was made), so the tenant's history shows every change,
    whoever made it. Setting the limit it already has changes and logs nothing.
    """
    if card_limit < 1:
        raise ValueError("card_limit must be at least 1.")
    return _tenant_setting_set(tenant=tenant, field="card_limit", label="card limit", value=card_limit,
                               changed_by=changed_by, via=via)


def tenant_organize_schedule_set(*, tenant: Tenant, schedule: str, changed_by: AbstractBaseUser,
                                 via: str = "organizer page") -> Tenant:
    """Set how often the organizer runs on its own (off, daily, weekly); logged like the card limit."""
    from tenants.models import OrganizeSchedule

    if schedule not in OrganizeSchedule.values:
        raise ValueError(f"schedule must be one of {', '.join(OrganizeSchedule.values)}.")
    return _tenant_setting_set(tenant=tenant, field="organize_schedule", label="organize schedule",
                               value=schedule, changed_by=changed_by, via=via)


def _tenant_setting_set(*, tenant: Tenant, field: str, label: str, value: object,
                        changed_by: AbstractBaseUser, via: str) -> Tenant:
    from django.contrib.admin.models import CHANGE, LogEntry

    with transaction.atomic():
        before = Tenant.objects.select_for_update().values_list(field, flat=True).get(pk=tenant.pk)
        setattr(tenant, field, value)
        if before == value:
            return tenant
        Tenant.objects.filter(pk=tenant.pk).update(**{field: value})
        LogEntry.objects.log_actions(
            user_id=changed_by.pk, queryset=[tenant], action_flag=CHANGE, single_object=True,
            change_message=f"Changed {label} from {before} to {value} ({via}).")
    return tenant


def workspace_create(*, tenant: Tenant, name: str, slug: str = "") -> Workspace:
    """Create a workspace with a slug unique in the tenant (derived from the name when not given)."""
    base = slugify(slug or name)[:50] or "workspace"
    with tenant_context(tenant):
        candidate, counter = base, 1
        while Workspace.objects.filter(tenant=tenant, slug=candidate).exists():
            counter += 1
            candidate = f"{base}-{counter}"
        return Workspace.objects.create(tenant=tenant, name=name, slug=candidate)


def hash_api_key(raw_key: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(raw_key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    api_key: ApiKey
    raw_key: str  # shown once, never stored


def api_key_create(
    *,
    tenant: Tenant,
    name: str = "",
    read_only: bool = False,
    write_scopes: list[str] | None = None,
    workspace: Workspace | None = None,
    created_by: AbstractBaseUser | None = None,
) -> IssuedApiKey:
    """Issue a new key for `tenant`; the raw key is returned once and only its hash is stored."""
    scopes = list(dict.fromkeys(write_scopes if write_scopes is not None else AGENT_WRITABLE_SCOPES))
    unknown = [s for s in scopes if s not in Scope.values]
    if unknown:
        raise ApiKeyError(f"Unknown write scope(s) {unknown}; choose from session, workspace, user.")
    if Scope.GLOBAL in scopes:
        raise ApiKeyError("Agents can never write global memory; drop 'global' from the write scopes.")
    if workspace is not None and workspace.tenant_id != tenant.pk:
        raise ApiKeyError("The workspace belongs to another tenant.")
    raw_key = KEY_PREFIX + secrets.token_urlsafe(32)
    with tenant_context(tenant):
        api_key = ApiKey.objects.create(
            tenant=tenant,
            name=name,
            prefix=raw_key[:PREFIX_DISPLAY_LENGTH],
            key_hash=hash_api_key(raw_key),
            read_only=read_only,
            write_scopes=[str(s) for s in scopes],
            workspace=workspace,
            created_by=created_by,
        )
    return IssuedApiKey(api_key=api_key, raw_key=raw_key)


def api_key_revoke(*, tenant: Tenant, api_key_id: int) -> ApiKey:
    """Revoke a key of `tenant`; a revoked key is refused from then on."""
    with tenant_context(tenant):
        api_key = ApiKey.objects.get(tenant=tenant, pk=api_key_id)
        if api_key.revoked_at is None:
            api_key.revoked_at = timezone.now()
            api_key.save(update_fields=["revoked_at"])
    return api_key


def api_key_authenticate(raw_key: str, *, bind: bool = False) -> ApiKey | None:
    """Return the active key matching `raw_key` (recording its use), or None.

    Where a key lives (its id and tenant) is remembered per process for `API_KEY_CACHE_SECONDS`;
    the row itself is read again on every call, by id in its tenant, so a revoked or deleted key is
    refused at once. With `bind` (the request's edge, inside its transaction) the key's tenant stays
    bound for the rest of the transaction, which makes that read the request's only statement here.
    """
    if not raw_key.startswith(KEY_PREFIX):
        return None
    key_hash = hash_api_key(raw_key)
    known = _known_keys.get(key_hash)
    if known is not None and known.expires_at > time.monotonic():
        if bind:
            bind_tenant(known.tenant)
        api_key = _api_key_current(known)
    else:
        api_key = _api_key_by_hash(key_hash)
        if api_key is not None and bind:
            bind_tenant(api_key.tenant)
    if api_key is None:
        _known_keys.pop(key_hash, None)
        return None
    if known is None or known.expires_at <= time.monotonic():
        _known_keys[key_hash] = _KnownKey(api_key.pk, api_key.tenant,
                                          time.monotonic() + API_KEY_CACHE_SECONDS)
    now = timezone.now()
    if api_key.last_used_at is None or (now - api_key.last_used_at).total_seconds() > 60:
        with tenant_context(api_key.tenant):
            ApiKey.objects.filter(tenant=api_key.tenant, pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


@dataclass(frozen=True)
class _KnownKey:
    """Where a key hash was found: the key's id and tenant (what a key never changes)."""

    api_key_id: int
    tenant: Tenant
    expires_at: float


# Key hash → where it was found, per process; only keys that authenticated are remembered.
_known_keys: dict[str, _KnownKey] = {}


def _api_key_current(known: _KnownKey) -> ApiKey | None:
    """Return the key's row as it is now if it is still active, read by id in its tenant (with the tenant's
    row as it is now too: its card limit may have changed since the key was remembered)."""
    with tenant_context(known.tenant, savepoint=False):
        return ApiKey.objects.select_related("tenant").filter(
            tenant=known.tenant, pk=known.api_key_id, revoked_at__isnull=True).first()


def _api_key_by_hash(key_hash: str) -> ApiKey | None:
    """Return the active key with `key_hash`, of whichever tenant (with its tenant and workspace)."""
    # The tenant is what we are trying to learn here, so this lookup runs across tenants.
    with all_tenants_context():
        return (
            ApiKey.all_tenants.select_related("tenant", "workspace")
            .filter(key_hash=key_hash, revoked_at__isnull=True)
            .first()
        )
