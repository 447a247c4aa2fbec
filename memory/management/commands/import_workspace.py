"""`manage.py import_workspace <workspace> <file.sqlite>`: import an Ekko local-format file."""

from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from memory.errors import QuotaExceeded
from memory.management.commands._workspace import progress_bars, resolve_workspace, stderr_stream
from memory.transfer.import_rules import importer_viewer, parse_user_map
from memory.transfer.report import ImportError_
from memory.transfer.sqlite_import import workspace_import_sqlite

SHOWN_CONFLICTS = 20


class Command(BaseCommand):
    help = (
        "Import an SQLite file in the Ekko local format into a workspace, in one transaction. The file is "
        "checked before anything is written. Into the workspace it came from, ids are kept (identical rows "
        "skipped, newer node revisions applied, clashes reported); into another workspace it becomes a copy "
        "with new ids. Rows the write rules refuse (global cards, secrets, texts over the API's limits, "
        "cards of people who are no members) are left out and reported."
    )

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("workspace", help="Numeric workspace id or <tenant-slug>/<workspace-slug>.")
        parser.add_argument("file", help="The .sqlite file to import.")
        parser.add_argument(
            "--actor",
            default="system:import_workspace",
            help="Actor recorded on the audit events the import writes.",
        )
        parser.add_argument(
            "--map-user",
            action="append",
            default=[],
            metavar="NAME=MEMBER",
            help="Import the cards of username NAME in the file as MEMBER's (a member of the tenant); repeat "
            "for several. A user-scope card whose person is no member is otherwise left out.",
        )
        parser.add_argument(
            "--no-embed",
            action="store_true",
            help="Do not queue embeddings; the periodic sweep (or `reembed`) catches up later.",
        )
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="Print the full report as JSON instead."
        )
        parser.add_argument("--quiet", action="store_true", help="No progress bars.")

    def handle(
        self,
        *args,
        workspace: str,
        file: str,
        actor: str,
        map_user: list[str],
        no_embed: bool,
        as_json: bool,
        quiet: bool,
        **options,
    ) -> None:
        ws = resolve_workspace(workspace)
        started = time.perf_counter()
        try:
            user_map = parse_user_map(map_user)
            with progress_bars(stderr_stream(self), disable=quiet) as progress:
                report = workspace_import_sqlite(
                    tenant=ws.tenant,
                    workspace=ws,
                    path=file,
                    viewer=importer_viewer(tenant=ws.tenant, workspace=ws, actor=actor or "system"),
                    user_map=user_map,
                    actor=actor,
                    progress=progress,
                    embed_after_commit=not no_embed,
                )
        except (ImportError_, QuotaExceeded) as exc:
            raise CommandError(f"Nothing was imported: {exc.detail}") from exc
        if as_json:
            self.stdout.write(json.dumps(report.as_json(), ensure_ascii=False, indent=2))
            return
        for conflict in report.conflicts[:SHOWN_CONFLICTS]:
            self.stderr.write(
                f"conflict: {conflict['table']} {conflict['id']}: {conflict['reason']} ({conflict['detail']})"
            )
        if report.conflict_count > SHOWN_CONFLICTS:
            self.stderr.write(
                f"... and {report.conflict_count - SHOWN_CONFLICTS} more (use --json for all listed)"
            )
        for warning in report.warnings:
            self.stderr.write(f"warning: {warning}")
        self.stdout.write(
            f"Imported into {ws.tenant.slug}/{ws.slug} (workspace {ws.pk}): {report.summary_line()} "
            f"in {time.perf_counter() - started:.1f} s"
        )
