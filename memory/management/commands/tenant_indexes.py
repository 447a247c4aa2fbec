"""`manage.py tenant_indexes [--dry-run] [--from N]`: build and drop big tenants' own indexes and statistics now."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from memory.tenant_indexes import tenant_indexes_sweep


class Command(BaseCommand):
    help = (
        "Give every tenant with at least EKKO_TENANT_INDEX_FROM cards (or messages) its own partial HNSW and "
        "GIN indexes (CREATE INDEX CONCURRENTLY ... WHERE tenant_id = <id>) and term statistics; drop those "
        "of tenants below half of it, the indexes of deleted tenants and of interrupted builds: the beat "
        "task memory.tenant_indexes, run now."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--dry-run", action="store_true", help="Print what would be built and dropped.")
        parser.add_argument("--from", dest="threshold", type=int, default=None,
                            help="Rows from which a tenant gets its own index (default: EKKO_TENANT_INDEX_FROM).")
        parser.add_argument("--database", default="owner",
                            help="Database alias that owns the tables and builds the indexes (default: owner).")

    def handle(self, *args, dry_run: bool, threshold: int | None, database: str, **options) -> None:
        result = tenant_indexes_sweep(threshold=threshold, dry_run=dry_run, using=database,
                                      report=lambda line: self.stdout.write(f"  {line}"))
        if result.skipped:
            self.stdout.write(f"Nothing done: {result.skipped}.")
            return
        if dry_run:
            for index, reason in result.plan.create:
                self.stdout.write(f"  would build {index.name} ({reason})")
            for index, reason in result.plan.drop:
                self.stdout.write(f"  would drop {index.name} ({reason})")
            for kind, tenant_id in result.plan.refresh:
                self.stdout.write(f"  would refresh the {kind} term statistics of tenant {tenant_id}")
            for kind, tenant_id in result.plan.clear:
                self.stdout.write(f"  would clear the {kind} term statistics of tenant {tenant_id}")
            self.stdout.write(f"Tenant indexes: would build {len(result.plan.create)}, drop {len(result.plan.drop)}; "
                              f"term statistics: would refresh {len(result.plan.refresh)}, clear "
                              f"{len(result.plan.clear)}.")
            return
        self.stdout.write(f"Tenant indexes: built {len(result.created)}, dropped {len(result.dropped)}; term "
                          f"statistics: refreshed {len(result.refreshed)}, cleared {len(result.plan.clear)}.")
