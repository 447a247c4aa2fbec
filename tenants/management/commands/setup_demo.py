"""`manage.py setup_demo`: a demo tenant, user and API key for `make run`, printed with the URL."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from tenants.services import api_key_authenticate, api_key_create, tenant_create

DEMO_TENANT, DEMO_USER, DEMO_PASSWORD = "demo", "demo", "demo-password"


class Command(BaseCommand):
    help = "Create (once) the demo tenant, user and API key, and print how to use them."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args, url: str, **options) -> None:
        setup = tenant_create(slug=DEMO_TENANT, owner_username=DEMO_USER, name="Demo", password=DEMO_PASSWORD)
        owner = setup.owner
        if not owner.is_staff:
            owner.is_staff = owner.is_superuser = True
            owner.save(update_fields=["is_staff", "is_superuser"])
        # Dev convenience only: the demo key is kept in the git-ignored data directory so reruns print it.
        key_file = Path(settings.EKKO_DATA_DIR) / "demo-api-key"
        raw_key = key_file.read_text().strip() if key_file.exists() else ""
        if not raw_key or api_key_authenticate(raw_key) is None:
            raw_key = api_key_create(tenant=setup.tenant, name="demo").raw_key
            key_file.write_text(raw_key + "\n")
        self.stdout.write(
            f"\nEkko Memory is starting at {url}\n"
            f"  sign in:   {url}  (user {DEMO_USER} / password {DEMO_PASSWORD}; also Django admin at {url}admin/)\n"
            f"  API docs:  {url}api/docs/   schema: {url}api/schema/\n"
            f"  API key:   {raw_key}\n"
            f"  try:       curl -H 'Authorization: Bearer {raw_key}' {url}api/v1/workspaces\n"
        )
