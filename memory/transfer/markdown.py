"""Export a workspace's active memory cards as Markdown with YAML frontmatter (seed 001's canonical form).

One file per active, unexpired card, at `<dir>/<scope>/<category path>/<key>--<id8>.md`: a frontmatter block
(id, key, kind, itemKey, scope, type, domain, categoryPath, revision, confidence, importance, tags, entities,
sourceMessageIds, valueJson, sessionId, userId, explicitUserIntent, createdAt, updatedAt, expiresAt) and the
card as `# title` plus its content. Rows stream from PostgreSQL; nothing is held in memory. The files are a
readable mirror for people and local agents, not a backup: the SQLite export is the lossless format.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import yaml
from django.db.models import Q
from django.utils import timezone

from memory.errors import Invalid, NotFound
from memory.models import MemoryNode, NodeStatus
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace

__all__ = ["GENERATOR", "MarkdownExportStats", "workspace_export_markdown"]

GENERATOR = "ekko-memory"
CHUNK_SIZE = 1000
_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]+')
_FIELDS = (
    "id",
    "key",
    "kind",
    "item_key",
    "scope",
    "type",
    "domain",
    "category_path",
    "revision",
    "confidence",
    "importance",
    "tags",
    "entities",
    "source_message_ids",
    "value_json",
    "session_id",
    "user__username",
    "explicit_user_intent",
    "created_at",
    "updated_at",
    "expires_at",
    "title",
    "content",
)


@dataclass(frozen=True)
class MarkdownExportStats:
    directory: Path
    files: int
    removed: int


def _segment(text: str, limit: int = 60) -> str:
    """Return `text` as one safe path segment (CJK kept; separators, controls and leading dots replaced)."""
    cleaned = _UNSAFE.sub("_", unicodedata.normalize("NFKC", text)).strip(" ._") or "_"
    return cleaned[:limit]


def _iso(value: Any) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _render(values: dict[str, Any]) -> tuple[Path, str]:
    front = {
        "id": str(values["id"]),
        "key": values["key"],
        "kind": values["kind"],
        "itemKey": values["item_key"],
        "scope": values["scope"],
        "type": values["type"],
        "domain": values["domain"],
        "categoryPath": list(values["category_path"]),
        "revision": values["revision"],
        "confidence": values["confidence"],
        "importance": values["importance"],
        "tags": list(values["tags"]),
        "entities": list(values["entities"]),
        "sourceMessageIds": list(values["source_message_ids"]),
        "valueJson": values["value_json"],
        "sessionId": values["session_id"],
        "userId": values["user__username"],
        "explicitUserIntent": values["explicit_user_intent"],
        "createdAt": _iso(values["created_at"]),
        "updatedAt": _iso(values["updated_at"]),
        "expiresAt": _iso(values["expires_at"]),
        "generator": GENERATOR,
    }
    header = yaml.safe_dump(front, allow_unicode=True, sort_keys=False, default_flow_style=None, width=10_000)
    body = f"---\n{header}---\n\n# {values['title']}\n\n{values['content'].rstrip()}\n"
    folder = Path(_segment(values["scope"]), *(_segment(part) for part in values["category_path"]))
    return folder / f"{_segment(values['key'], 80)}--{str(values['id'])[:8]}.md", body


def _generated_by_us(path: Path) -> bool:
    try:
        with path.open("r", encoding="utf-8") as handle:
            head = handle.read(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith("---\n") and f"\ngenerator: {GENERATOR}\n" in head


def workspace_export_markdown(
    *,
    tenant: Tenant,
    workspace: Workspace,
    directory: str | os.PathLike[str],
    replace: bool = False,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> MarkdownExportStats:
    """Write one Markdown file per active card of `workspace` under `directory`.

    A directory that already holds files is refused unless `replace`, which first removes the Markdown
    files an earlier export wrote (recognised by their `generator` line) and leaves anything else alone.
    """
    root = Path(directory)
    report = progress or (lambda stage, done, total: None)
    removed = 0
    if root.exists() and any(root.iterdir()):
        if not replace:
            raise Invalid(f"{root} is not empty. Choose an empty directory, or replace an earlier export.")
        for old in root.rglob("*.md"):
            if _generated_by_us(old):
                old.unlink()
                removed += 1
    root.mkdir(parents=True, exist_ok=True)
    written = 0
    with tenant_context(tenant):
        if not Workspace.objects.filter(tenant=tenant, pk=workspace.pk).exists():
            raise NotFound("No such workspace in this tenant.")
        now = timezone.now()
        cards = MemoryNode.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            tenant=tenant,
            workspace=workspace,
            status=NodeStatus.ACTIVE,
        ).order_by("scope", "category_path_text", "key", "id")
        report("cards", 0, cards.count())
        for values in cards.values(*_FIELDS).iterator(chunk_size=CHUNK_SIZE):
            relative, text = _render(values)
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written += 1
            report("cards", 1, None)
    return MarkdownExportStats(directory=root, files=written, removed=removed)
