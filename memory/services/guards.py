"""Who may write what: the checks every write service runs, whatever called it (API, pages, pipeline, import).

One function per guard, each raising the API error a refusal maps to. The viewer carries what the
edge resolved — the read-only flag, the write scopes, an API key's workspace pin, a person's
restriction to their own workspaces and cards — and these guards turn it into a yes or a no, so
no write path keeps its own copy of a rule. Extraction requests and imports call them too.

A person outside the rule gets the answer a foreign id gets (404: "missing" and "not yours" look
alike); an API key outside its pin or scopes gets 403, as API.md says.
"""

from __future__ import annotations

from typing import Any

from memory.errors import Forbidden, NotFound, TooLarge
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


def _restricted(viewer: Viewer) -> bool:
    return viewer.restrict_to_person and not viewer.whole_tenant


def require_workspace_reachable(viewer: Viewer, workspace_id: int, *, ref: object = None) -> None:
    """Refuse a workspace outside an API key's pin (403) or outside a person's memberships (404).

    `ref` is how the caller named the workspace: the 404 repeats it, in the words of a missing one,
    so membership does not leak.
    """
    if viewer.pinned_workspace_id not in (None, workspace_id):
        raise Forbidden("This API key is pinned to another workspace.")
    if _restricted(viewer) and workspace_id not in viewer.member_workspace_ids:
        raise NotFound(f"No workspace {(workspace_id if ref in (None, '') else ref)!r}.")


def require_acting_for(viewer: Viewer, user_id: int | None = None, *, username: str | None = None) -> None:
    """Refuse a person's read or write for someone else (owners and admins may act for other members).

    Pass the member's id, or only the username when it is not resolved yet: an unknown member and
    someone else then get the same 404.
    """
    if not _restricted(viewer) or (user_id is None and not username):
        return
    if viewer.user is None:
        raise NotFound(f"No member {username!r}." if username else "No such member.")
    same = viewer.user.pk == user_id if user_id is not None else viewer.user.get_username() == username
    if not same:
        raise NotFound(f"No member {username!r}." if username else "No such member.")


def require_node_writable(viewer: Viewer, node: Any) -> None:
    """Refuse a change to an existing card the caller may not write (scope, pin, workspace, owner)."""
    require_write_scope(viewer, node.scope)
    if node.scope == Scope.GLOBAL:
        return
    if node.scope != Scope.USER or viewer.pinned_workspace_id is not None:
        # A user-scope card follows its person across workspaces; only a key's pin narrows it.
        require_workspace_reachable(viewer, node.workspace_id)
    if node.scope == Scope.USER:
        require_acting_for(viewer, node.user_id)


def require_workspace_writer(viewer: Viewer, workspace_id: int) -> None:
    """Refuse a read-only caller, or a workspace outside its reach, before work that writes into it."""
    require_writer(viewer)
    require_workspace_reachable(viewer, workspace_id)


def require_capture_allowed(viewer: Viewer) -> None:
    """Refuse evidence capture (messages, summaries) outside what the caller may write."""
    require_workspace_writer(viewer, viewer.workspace.pk)
    require_acting_for(viewer, viewer.user.pk if viewer.user is not None else None)
