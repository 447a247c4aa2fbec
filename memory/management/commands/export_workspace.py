"""`manage.py export_workspace <workspace> <file.sqlite>`: write a workspace to an Ekko local-format file."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memory.management.commands._workspace import progress_bars, resolve_workspace, stderr_stream
from memory.transfer.sqlite_export import workspace_export_sqlite


class Command(BaseCommand):
    help = (
        "Export a workspace (every message, summary, memory card of every status, audit event and vector) "
        "to an SQLite file in the Ekko local format (docs/sqlite-format.md). Progress on stderr, a summary "
        "on stdout."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("workspace", help="Numeric workspace id or <tenant-slug>/<workspace-slug>.")
        parser.add_argument("file", help="Path of the .sqlite file to write.")
        parser.add_argument("--force", action="store_true", help="Replace the file if it exists.")
        parser.add_argument("--no-vectors", action="store_true", help="Leave the embedding tables empty.")
        parser.add_argument("--quiet", action="store_true", help="No progress bars.")

    def handle(
        self, *args, workspace: str, file: str, force: bool, no_vectors: bool, quiet: bool, **options
    ) -> None:
        target = Path(file)
        if target.exists() and not force:
            raise CommandError(f"{target} exists. Pass --force to replace it, or choose another path.")
        if not target.parent.is_dir():
            raise CommandError(f"The directory {target.parent} does not exist.")
        ws = resolve_workspace(workspace)
        started = time.perf_counter()
        with progress_bars(stderr_stream(self), disable=quiet) as progress:
            stats = workspace_export_sqlite(
                tenant=ws.tenant,
                workspace=ws,
                path=target,
                include_embeddings=not no_vectors,
                progress=progress,
            )
        self.stdout.write(
            f"Exported {ws.tenant.slug}/{ws.slug} (workspace {ws.pk}): {stats.messages} messages, "
            f"{stats.summaries} summaries, {stats.nodes} nodes, {stats.audit_events} audit events, "
            f"{stats.embeddings} vectors -> {target} ({stats.bytes / 1e6:.1f} MB) in "
            f"{time.perf_counter() - started:.1f} s"
        )
