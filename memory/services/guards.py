"""Who may write what: the checks every write service runs, whatever called it (API, pages, pipeline, import).

One function per guard, each raising the API error a refusal maps to. The viewer carries what the
edge resolved (read-only flag, write scopes, workspace pin, person restriction); these guards turn
it into a yes or a no. Extraction requests and imports call them too, so no write path has its
own copy of a rule.
"""

from __future__ import annotations

from memory.errors import Forbidden, TooLarge
from memory.visibility import Viewer
from tenants.models import Scope

MAX_OPERATIONS = 100  # API.md: at most 100 operations (or messages) per request


def require_batch_size(count: int, *, what: str = "operations") -> None:
    """Refuse a request with more than MAX_OPERATIONS items (413)."""
    if count > MAX_OPERATIONS:
        raise TooLarge(f"At most {MAX_OPERATIONS} {what} per request; send them in batches.")


def require_writer(viewer: Viewer) -> None:
    """Refuse any write by a read-only caller (a read-only API key, a tenant viewer)."""
    if viewer.read_only:
        raise Forbidden("This caller is read-only; use an API key or a membership that may write.")


def require_write_scope(viewer: Viewer, scope: str, *, field: str = "node.scope") -> None:
    """Refuse a write into a scope outside the caller's write scopes (global is never an agent's)."""
    if scope == Scope.GLOBAL and Scope.GLOBAL not in viewer.write_scopes:
        raise Forbidden("Agents never write global memory.", errors={field: ["global is read-only"]})
    if scope not in viewer.write_scopes:
        raise Forbidden(f"This caller may not write {scope}-scope memory.",
                        errors={field: [f"allowed: {', '.join(sorted(viewer.write_scopes))}"]})


def require_workspace_reachable(viewer: Viewer, workspace_id: int) -> None:
    """Refuse a write into a workspace outside the caller's pin."""
    if viewer.pinned_workspace_id not in (None, workspace_id):
        raise Forbidden("This API key is pinned to another workspace.")
