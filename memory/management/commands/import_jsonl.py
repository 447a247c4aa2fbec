"""`manage.py import_jsonl <workspace> <file.jsonl>`: append a JSONL message history (seed 004)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from memory.errors import MemoryServiceError
from memory.management.commands._workspace import progress_bars, resolve_workspace, stderr_stream
from memory.transfer.jsonl import messages_import_jsonl

SHOWN_CONFLICTS = 20


class Command(BaseCommand):
    help = (
        "Import a JSONL message history, one JSON object per line: {id?, sessionId, role, content, "
        "createdAt?, parentId?, channel?, agentName?, userId?, metadata?}. Every line is checked first; the "
        "import is one transaction and idempotent (importing the same file again adds nothing)."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("workspace", help="Numeric workspace id or <tenant-slug>/<workspace-slug>.")
        parser.add_argument("file", help="The .jsonl file.")
        parser.add_argument("--session", help="Session id for lines that carry none.")
        parser.add_argument(
            "--no-embed", action="store_true", help="Do not queue embeddings for the messages."
        )
        parser.add_argument("--quiet", action="store_true", help="No progress bar.")

    def handle(
        self, *args, workspace: str, file: str, session: str | None, no_embed: bool, quiet: bool, **options
    ) -> None:
        ws = resolve_workspace(workspace)
        try:
            with progress_bars(stderr_stream(self), disable=quiet) as progress:
                report = messages_import_jsonl(
                    tenant=ws.tenant,
                    workspace=ws,
                    path=file,
                    default_session=session,
                    progress=progress,
                    embed_after_commit=not no_embed,
                )
        except FileNotFoundError as exc:
            raise CommandError(f"No such file: {file}") from exc
        except MemoryServiceError as exc:
            raise CommandError(exc.detail) from exc
        for conflict in report.conflicts[:SHOWN_CONFLICTS]:
            self.stderr.write(f"conflict: line {conflict['line']} id {conflict['id']}: {conflict['detail']}")
        self.stdout.write(
            f"Imported into {ws.tenant.slug}/{ws.slug} (workspace {ws.pk}): {report.summary_line()}"
        )
