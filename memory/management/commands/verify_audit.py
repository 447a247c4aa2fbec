"""`manage.py verify_audit [--tenant <slug>]`: walk each tenant's audit chain and report its first break."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.audit_chain import audit_chain_verify
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Verify the tamper-evident audit chain of every tenant (or of the ones named with --tenant): "
        "recompute each event's content and chain digests and report the first event where they disagree. "
        "Exits non-zero when any chain is broken. Progress on stderr; one line per tenant on stdout, with "
        "the chain's head digest (record it elsewhere to detect a rewrite of the whole chain later)."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--tenant", action="append", dest="tenants", metavar="SLUG",
                            help="Verify only this tenant (repeat for several).")

    def handle(self, *args, tenants: list[str] | None, **options) -> None:
        queryset = Tenant.objects.order_by("slug")
        if tenants:
            queryset = queryset.filter(slug__in=tenants)
            missing = sorted(set(tenants) - set(queryset.values_list("slug", flat=True)))
            if missing:
                raise CommandError(
                    f"No tenant with slug {', '.join(missing)}; `manage.py create_tenant` makes one.")
        broken = []
        for tenant in queryset:
            def progress(count: int, slug: str = tenant.slug) -> None:
                self.stderr.write(f"{slug}: {count} events verified…")

            report = audit_chain_verify(tenant=tenant, progress=progress)
            if report.intact:
                self.stdout.write(f"{tenant.slug}: {report.events} events, chain intact "
                                  f"({report.erased} erased by hard forgets), head {report.head_digest}")
                continue
            failure = report.first_break
            broken.append(tenant.slug)
            self.stdout.write(f"{tenant.slug}: BROKEN at sequence {failure.sequence} "
                              f"(event {failure.event_id}): {failure.problem}; "
                              f"{report.events} events before it verified")
        if broken:
            raise CommandError(f"The audit chain of {', '.join(broken)} is broken (see above).")
