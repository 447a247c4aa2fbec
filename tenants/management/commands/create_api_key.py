"""`manage.py create_api_key <tenant-slug>`: issue an API key; the key alone is the last stdout line."""

from django.core.management.base import BaseCommand, CommandError

from tenants.context import tenant_context
from tenants.models import Tenant, Workspace
from tenants.services import ApiKeyError, api_key_create


class Command(BaseCommand):
    help = "Create an API key for a tenant. The key is shown once, alone on the last line of stdout."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("tenant_slug")
        parser.add_argument("--read-only", action="store_true", help="The key can read but never write.")
        parser.add_argument(
            "--write-scopes",
            default="session,workspace,user",
            help="Comma-separated scopes the key may write (subset of session,workspace,user).",
        )
        parser.add_argument("--workspace", help="Pin the key to one workspace (id or slug).")
        parser.add_argument("--name", default="", help="A label to recognise the key by.")

    def handle(self, *args, tenant_slug: str, read_only: bool, write_scopes: str, workspace: str | None,
               name: str, **options) -> None:
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {tenant_slug!r}. Create it first: manage.py create_tenant {tenant_slug} --owner <user>")
        pinned = None
        if workspace:
            with tenant_context(tenant):
                lookup = {"pk": int(workspace)} if workspace.isdigit() else {"slug": workspace}
                pinned = Workspace.objects.filter(tenant=tenant, **lookup).first()
            if pinned is None:
                raise CommandError(f"Tenant {tenant_slug!r} has no workspace {workspace!r}.")
        scopes = [s.strip() for s in write_scopes.split(",") if s.strip()]
        try:
            issued = api_key_create(
                tenant=tenant, name=name, read_only=read_only, write_scopes=scopes, workspace=pinned
            )
        except ApiKeyError as exc:
            raise CommandError(str(exc)) from exc
        key = issued.api_key
        self.stdout.write(
            f"API key {key.prefix}… for tenant {tenant.slug}: read_only={key.read_only} "
            f"write_scopes={','.join(key.write_scopes)} workspace={pinned.slug if pinned else '-'}. "
            "Store it now; it is not shown again."
        )
        self.stdout.write(issued.raw_key)
