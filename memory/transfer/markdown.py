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
from pathlib import Path

import yaml
from django.db.models import Q
from django.utils import timezone

from memory.errors import Invalid
from memory.models import MemoryNode, NodeStatus
from memory.presenters import node_to_api
from memory.transfer.selectors import workspace_in_tenant
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace

__all__ = ["GENERATOR", "MarkdownExportStats", "workspace_export_markdown"]

GENERATOR = "ekko-memory"
CHUNK_SIZE = 1000
_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]+')
# The frontmatter: the API card's fields (memory.presenters), in this order.
_FRONTMATTER = (
    "id", "key", "kind", "itemKey", "scope", "type", "domain", "categoryPath", "revision", "confidence",
    "importance", "tags", "entities", "sourceMessageIds", "valueJson", "sessionId", "userId",
    "explicitUserIntent", "createdAt", "updatedAt", "expiresAt",
)
# Columns the card never shows (vectors, derived search text) stay in the database.
_NOT_READ = ("embedding", "embedding_model", "search_text", "search_vector")


@dataclass(frozen=True)
class MarkdownExportStats:
    directory: Path
    files: int
    removed: int


def _segment(text: str, limit: int = 60) -> str:
    """Return `text` as one safe path segment (CJK kept; separators, controls and leading dots replaced)."""
    cleaned = _UNSAFE.sub("_", unicodedata.normalize("NFKC", text)).strip(" ._") or "_"
    return cleaned[:limit]


def _render(node: MemoryNode) -> tuple[Path, str]:
    card = node_to_api(node, username=node.user.get_username() if node.user_id else None)
    front = {name: card[name] for name in _FRONTMATTER}
    front["generator"] = GENERATOR
    header = yaml.safe_dump(front, allow_unicode=True, sort_keys=False, default_flow_style=None, width=10_000)
    body = f"---\n{header}---\n\n# {node.title}\n\n{node.content.rstrip()}\n"
    folder = Path(_segment(node.scope), *(_segment(part) for part in node.category_path))
    return folder / f"{_segment(node.key, 80)}--{str(node.pk)[:8]}.md", body


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
        workspace = workspace_in_tenant(tenant, workspace)
        now = timezone.now()
        cards = MemoryNode.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            tenant=tenant,
            workspace=workspace,
            status=NodeStatus.ACTIVE,
        ).order_by("scope", "category_path_text", "key", "id")
        report("cards", 0, cards.count())
        for node in cards.select_related("user").defer(*_NOT_READ).iterator(chunk_size=CHUNK_SIZE):
            relative, text = _render(node)
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written += 1
            report("cards", 1, None)
    return MarkdownExportStats(directory=root, files=written, removed=removed)
