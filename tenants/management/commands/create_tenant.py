"""`manage.py create_tenant <slug> --owner <username>`: create a tenant with its owner; idempotent."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug

from tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant, its default workspace, the owner user if missing and an owner membership."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("slug")
        parser.add_argument("--owner", required=True, help="Username of the owner (created if missing).")
        parser.add_argument("--password", help="Set the owner's password.")
        parser.add_argument("--name", default="", help="Display name of the tenant.")

    def handle(self, *args, slug: str, owner: str, password: str | None, name: str, **options) -> None:
        try:
            validate_slug(slug)
        except ValidationError as exc:
            raise CommandError(f"Invalid tenant slug {slug!r}: use letters, digits, '-' and '_'.") from exc
        setup = tenant_create(slug=slug, owner_username=owner, name=name, password=password)
        verb = "Created" if setup.created else "Updated"
        self.stdout.write(f"{verb} tenant {setup.tenant.slug} (id {setup.tenant.pk}) owned by {owner}.")
