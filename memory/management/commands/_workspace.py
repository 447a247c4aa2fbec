"""Shared by the workspace commands (export/import): naming a workspace on the command line, progress bars.

A CLI operator names a workspace by its numeric id or as `<tenant-slug>/<workspace-slug>`. A numeric id
says nothing about its tenant, so that one lookup lifts the tenant walls (`all_tenants_context`, listed in
docs/tenancy.md); everything after it runs in the workspace's own tenant context.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from django.core.management.base import CommandError
from tqdm import tqdm

from tenants.context import all_tenants_context, tenant_context
from tenants.models import Tenant, Workspace


def resolve_workspace(spec: str) -> Workspace:
    """Return the workspace named `spec` (`12` or `acme/default`), its tenant loaded; CommandError if none."""
    if spec.isdigit():
        with all_tenants_context():
            workspace = Workspace.objects.select_related("tenant").filter(pk=int(spec)).first()
    else:
        tenant_slug, _, workspace_slug = spec.partition("/")
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        workspace = None
        if tenant is not None and workspace_slug:
            with tenant_context(tenant):
                workspace = Workspace.objects.filter(tenant=tenant, slug=workspace_slug).first()
            if workspace is not None:
                workspace.tenant = tenant
    if workspace is None:
        raise CommandError(
            f"No workspace {spec!r}. Name it by numeric id or as <tenant-slug>/<workspace-slug>, "
            "e.g. acme/default."
        )
    return workspace


def stderr_stream(command: Any) -> IO[str]:
    """Return the command's raw stderr (tqdm redraws with carriage returns; the wrapper adds newlines)."""
    return getattr(command.stderr, "_out", sys.stderr)


@contextmanager
def progress_bars(stream: IO[str], *, disable: bool = False) -> Iterator[Any]:
    """Yield a `progress(stage, done, total)` callback that draws one tqdm bar per stage on `stream`."""
    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        bar = bars.get(stage)
        if bar is None:
            for other in bars.values():
                other.close()
            bar = bars[stage] = tqdm(
                total=total,
                desc=f"{stage:>14}",
                unit=" rows",
                file=stream,
                disable=disable,
                leave=True,
                dynamic_ncols=True,
            )
        if done:
            bar.update(done)

    try:
        yield progress
    finally:
        for bar in bars.values():
            bar.close()
