"""The write rules an import applies to every row of a file, beside the checks of the row's shape.

A file is data from outside, so an import writes only what `memory/write` and message capture would
accept from the same caller. The caller is a `Viewer` (the API key or person behind the upload; an
operator's command gets `importer_viewer`) and the services' guards decide for it: read-only callers
and workspaces outside a key's pin are refused whole; a card outside the caller's write scopes, a
`global` card (agents never write global memory), a user-scope card whose person is not a member of
the tenant (unless an explicit user map names one), a text over the API's size limit or a secret is
left out with its reason while the rest of the file imports; so is another member's card when the
caller is a person who may act only for themselves. Cards of one supersede chain are imported
together or not at all (`SupersedeChains`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memory.errors import MemoryServiceError
from memory.rules.scope_policy import AGENT_WRITABLE_SCOPES
from memory.services.guards import require_acting_for, require_workspace_writer, require_write_scope
from memory.transfer.report import ImportError_
from memory.transfer.selectors import members_named
from memory.visibility import Viewer
from tenants.models import Scope, Tenant, Workspace

__all__ = [
    "Refusal",
    "SupersedeChains",
    "card_refusal",
    "importer_viewer",
    "parse_user_map",
    "require_import_allowed",
    "scope_refusal",
    "too_large",
    "user_map_checked",
]


@dataclass(frozen=True)
class Refusal:
    """Why one row is left out of an import (`reason` is the report's machine code)."""

    reason: str
    detail: str


def importer_viewer(*, tenant: Tenant, workspace: Workspace, actor: str) -> Viewer:
    """Return the viewer of an operator's import (a command, the system): every scope an agent may write."""
    return Viewer(tenant=tenant, workspace=workspace, write_scopes=frozenset(AGENT_WRITABLE_SCOPES),
                  read_only=False, actor=actor)


def require_import_allowed(viewer: Viewer, workspace: Workspace) -> None:
    """Refuse the whole import for a read-only caller or a workspace outside the caller's reach."""
    if viewer.tenant.pk != workspace.tenant_id:
        raise ValueError("The importing viewer belongs to another tenant than the workspace.")
    require_workspace_writer(viewer, workspace.pk)


def scope_refusal(viewer: Viewer, scope: str) -> Refusal | None:
    """Return why the caller may not import (or change) a card of `scope`, or None when it may."""
    if scope not in AGENT_WRITABLE_SCOPES:
        return Refusal("scope_not_allowed", f"{scope} memory is never imported: agents never write it, "
                       "and owners and admins write it one card at a time")
    try:
        require_write_scope(viewer, scope)
    except MemoryServiceError as exc:
        return Refusal("scope_not_allowed", exc.detail)
    return None


def card_refusal(viewer: Viewer, *, scope: str, user_id: int | None, username: str | None) -> Refusal | None:
    """Return why the caller may not import a card of `scope` owned by `user_id`, or None when it may."""
    refusal = scope_refusal(viewer, scope)
    if refusal is not None:
        return refusal
    if scope != Scope.USER:
        return None
    if user_id is None:
        who = f"user {username!r} is not a member of this tenant" if username else "it names no user"
        return Refusal("unknown_user", f"a user-scope card needs its person: {who}; map the username to a "
                       "member (import_workspace --map-user NAME=MEMBER) or add the member first")
    try:
        require_acting_for(viewer, user_id)
    except MemoryServiceError:
        return Refusal("other_person", "a person imports only their own cards; owners and admins may "
                       "import other members' cards")
    return None


def too_large(what: str, limit: int) -> Refusal:
    return Refusal("too_large", f"{what} is longer than {limit} characters, the API's limit")


def parse_user_map(pairs: Iterable[str]) -> dict[str, str]:
    """Return {file username: member username} from `NAME=MEMBER` strings (Invalid on a malformed one)."""
    mapping: dict[str, str] = {}
    for pair in pairs:
        source, separator, target = (part.strip() for part in pair.partition("="))
        if not separator or not source or not target:
            raise ImportError_(f"Map users as NAME=MEMBER (got {pair!r}).")
        mapping[source] = target
    return mapping


def user_map_checked(tenant: Tenant, user_map: Mapping[str, str] | None) -> dict[str, str]:
    """Return `user_map` when every target is a member of `tenant`; else ImportError_ naming the others."""
    mapping = dict(user_map or {})
    members = members_named(tenant, mapping.values())
    unknown = sorted(target for target in set(mapping.values()) if target not in members)
    if unknown:
        raise ImportError_(f"Cannot map users to {', '.join(map(repr, unknown))}: not members of this "
                           "tenant. Map each username in the file to a member; nothing was imported.")
    return mapping


class SupersedeChains:
    """The file's supersede chains (cards linked by `supersedesId`): each is imported whole or not at all.

    Importing part of a chain would keep superseded revisions whose active head was left out, or a head
    without the history it supersedes; so when one card of a chain is left out, all of them are.
    """

    def __init__(self) -> None:
        self._chain: dict[uuid.UUID, list[uuid.UUID]] = {}

    def link(self, node_id: uuid.UUID, supersedes_id: uuid.UUID | None) -> None:
        """Record that `node_id` supersedes `supersedes_id` (both ids as imported)."""
        if supersedes_id is None or supersedes_id == node_id:
            return
        first = self._chain.setdefault(node_id, [node_id])
        second = self._chain.setdefault(supersedes_id, [supersedes_id])
        if first is second:
            return
        if len(first) < len(second):
            first, second = second, first
        first.extend(second)
        for member in second:
            self._chain[member] = first

    def members(self, node_id: uuid.UUID) -> list[uuid.UUID]:
        """Return every card of `node_id`'s chain (itself alone when it is in none)."""
        return self._chain.get(node_id, [node_id])
