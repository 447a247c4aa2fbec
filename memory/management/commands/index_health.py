"""`manage.py index_health [--json]`: sizes, bloat and statistics of the tenant tables and their indexes."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime

from django.core.management.base import BaseCommand

from memory.index_health import Report, TableHealth, index_health


class Command(BaseCommand):
    help = (
        "Report the health of the tenant tables and their indexes: live and dead rows and the last "
        "(auto)analyze and (auto)vacuum per table; size, validity, predicate and B-tree bloat per index "
        "(measured with pgstattuple when installed, else estimated from the statistics); and which "
        "tenants have an index of their own (a partial index on one tenant_id)."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument("--database", default="owner",
                            help="Database alias to read the catalogue through (default: owner).")

    def handle(self, *args, json: bool, database: str, **options) -> None:  # noqa: A002 - the option's name
        report = index_health(using=database)
        if json:
            self.stdout.write(_as_json(report))
            return
        for line in render(report):
            self.stdout.write(line)


def _as_json(report: Report) -> str:
    return json.dumps(asdict(report), indent=2, default=lambda value: value.isoformat())


def render(report: Report) -> list[str]:
    """Return the report as readable text tables."""
    lines = ["Tables"]
    lines += _table(
        ["table", "size", "live rows", "dead rows", "last analyze", "last vacuum"],
        [[t.name, _size(t.size_bytes), str(t.live_rows), _dead(t),
          _latest(t.last_analyze, t.last_autoanalyze), _latest(t.last_vacuum, t.last_autovacuum)]
         for t in report.tables])
    source = "pgstatindex" if report.pgstattuple else "estimated from the statistics (no pgstattuple)"
    lines += ["", f"Indexes (B-tree bloat: {source})"]
    lines += _table(
        ["table", "index", "method", "size", "rows", "bloat", "valid", "tenant", "predicate"],
        [[t.name, i.name, i.method, _size(i.size_bytes), "?" if i.rows < 0 else str(i.rows), _bloat(i),
          "yes" if i.valid else "NO", "" if i.tenant_id is None else str(i.tenant_id), i.predicate or ""]
         for t in report.tables for i in t.indexes])
    lines += ["", "Keyword search under row-level security: " + (
        "uses the GIN indexes (tsvector @@ tsquery is leakproof)" if report.text_match_leakproof else
        "CANNOT use the GIN indexes: as a superuser run "
        "ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF")]
    lines += ["", "Tenants with their own index"]
    if not report.tenants:
        lines.append("  none: every tenant is served by the shared indexes")
    for tenant in report.tenants:
        name = tenant.slug or "(no such tenant)"
        lines.append(f"  {name} (id {tenant.tenant_id}): {', '.join(tenant.indexes)}")
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [header, *rows]]


def _size(size: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def _dead(table: TableHealth) -> str:
    total = table.live_rows + table.dead_rows
    return f"{table.dead_rows} ({100 * table.dead_rows / total:.0f}%)" if total else "0"


def _latest(manual: datetime | None, automatic: datetime | None) -> str:
    moments = [(moment, label) for moment, label in ((manual, ""), (automatic, " (auto)")) if moment]
    if not moments:
        return "never"
    moment, label = max(moments)
    return moment.strftime("%Y-%m-%d %H:%M") + label


def _bloat(index) -> str:  # noqa: ANN001
    if index.bloat_pct is None:
        return "-" if index.bloat_source == "n/a" else "? (ANALYZE)"
    return f"{index.bloat_pct:.0f}% ({_size(index.bloat_bytes)})"
