"""`manage.py reembed`: rebuild vectors with the configured embedding provider (after a provider/model switch)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from memory.models import MemoryNode
from memory.search.embeddings import get_provider
from memory.services.embeddings import (
    BATCH,
    embeddable_messages,
    messages_embed,
    nodes_embed,
    stale_vector_q,
    vector_column_dimensions,
    vector_columns_resize,
)
from tenants.context import tenant_context
from tenants.models import Tenant


class Command(BaseCommand):
    help = ("Re-embed nodes and main-channel messages whose vector is missing or from another model. Choose the "
            "provider with EKKO_EMBEDDING_PROVIDER / EKKO_EMBEDDING_MODEL / EKKO_EMBEDDING_DIM first.")

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--tenant", help="Only this tenant (slug).")
        parser.add_argument("--all", action="store_true", help="Re-embed every row, not only stale ones.")
        parser.add_argument("--alter-column", action="store_true",
                            help="Change the vector columns to the provider's dimension (drops all vectors).")

    def handle(self, *args, tenant: str | None, all: bool, alter_column: bool, **options) -> None:  # noqa: A002
        provider = get_provider()
        column_dimensions = vector_column_dimensions()
        if column_dimensions != provider.dimensions:
            if not alter_column:
                raise CommandError(
                    f"The vector columns hold {column_dimensions} dimensions but {provider.model_id} makes "
                    f"{provider.dimensions}. Run again with --alter-column (it drops all vectors) and set "
                    f"EKKO_EMBEDDING_DIM={provider.dimensions} everywhere.")
            vector_columns_resize(dimensions=provider.dimensions)
            self.stdout.write(f"Vector columns now hold {provider.dimensions} dimensions.")
        tenants = Tenant.objects.filter(slug=tenant) if tenant else Tenant.objects.all()
        if tenant and not tenants.exists():
            raise CommandError(f"No tenant {tenant!r}.")
        done = 0
        for current in tenants:
            with tenant_context(current):
                nodes = MemoryNode.objects.filter(tenant=current)
                messages = embeddable_messages(current.pk)
                if not all:
                    nodes = nodes.filter(stale_vector_q(provider.model_id))
                    messages = messages.filter(stale_vector_q(provider.model_id))
                node_ids = [str(pk) for pk in nodes.values_list("pk", flat=True)]
                message_pks = list(messages.values_list("pk", flat=True))
            with tqdm(total=len(node_ids) + len(message_pks), desc=current.slug, unit="row",
                      disable=None) as progress:
                for start in range(0, len(node_ids), BATCH):
                    done += nodes_embed(tenant_id=current.pk, node_ids=node_ids[start:start + BATCH])
                    progress.update(len(node_ids[start:start + BATCH]))
                for start in range(0, len(message_pks), BATCH):
                    done += messages_embed(tenant_id=current.pk, message_pks=message_pks[start:start + BATCH])
                    progress.update(len(message_pks[start:start + BATCH]))
        self.stdout.write(f"Re-embedded {done} row(s) with {provider.model_id} ({provider.dimensions} dimensions).")
