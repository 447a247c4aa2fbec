"""`manage.py export_markdown <workspace> <dir>`: one Markdown file with frontmatter per active card."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.errors import MemoryServiceError
from memory.management.commands._workspace import progress_bars, resolve_workspace, stderr_stream
from memory.transfer.markdown import workspace_export_markdown


class Command(BaseCommand):
    help = (
        "Write every active, unexpired memory card of a workspace as <dir>/<scope>/<category>/<key>--<id>.md "
        "with YAML frontmatter (seed 001's canonical Markdown). A readable mirror; export_workspace is the "
        "lossless format."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("workspace", help="Numeric workspace id or <tenant-slug>/<workspace-slug>.")
        parser.add_argument("directory", help="Directory to write into (created if missing).")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Write into a non-empty directory, replacing an earlier export.",
        )
        parser.add_argument("--quiet", action="store_true", help="No progress bar.")

    def handle(self, *args, workspace: str, directory: str, force: bool, quiet: bool, **options) -> None:
        ws = resolve_workspace(workspace)
        try:
            with progress_bars(stderr_stream(self), disable=quiet) as progress:
                stats = workspace_export_markdown(
                    tenant=ws.tenant, workspace=ws, directory=directory, replace=force, progress=progress
                )
        except MemoryServiceError as exc:
            raise CommandError(exc.detail) from exc
        replaced = f" (replaced {stats.removed} from an earlier export)" if stats.removed else ""
        self.stdout.write(
            f"Wrote {stats.files} Markdown cards of {ws.tenant.slug}/{ws.slug} to {stats.directory}{replaced}"
        )
