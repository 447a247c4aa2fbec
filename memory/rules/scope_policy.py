"""The scope vocabulary and the write scope policy (DESIGN rule 5, API.md "Write").

`AGENT_WRITABLE_SCOPES` is the one set of scopes an API key (or a non-admin person) may be given
to write; global is only ever written by tenant owners and admins. `validate_scope_for_write`
decides where a write lands: explicit intent, downgrades to session scope and temporary states.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from memory.rules.errors import SchemaError

if TYPE_CHECKING:
    from memory.rules.kinds import KindSpec

SCOPES: tuple[str, ...] = ("session", "workspace", "user", "global")
# Never global: agents do not write tenant-global memory (API.md "Authentication and tenancy").
AGENT_WRITABLE_SCOPES: tuple[str, ...] = ("session", "workspace", "user")


def validate_scope_for_write(
    *,
    spec: KindSpec,
    scope: str,
    explicit_user_intent: bool,
    expires_at_set: bool,
    allowed_scopes: Collection[str],
) -> str:
    """Return the scope a write lands in, or refuse it (DESIGN rule 5, API.md "Write").

    1. Unknown scope -> invalid. `global` -> forbidden (agents never write global). A scope outside
       the key's writeScopes -> forbidden.
    2. Session writes never need explicit intent. User scope needs it, and so does any scope for a
       kind with `requires_explicit_user_intent`. Without it the write is downgraded to `session`
       when the key may write session, and forbidden otherwise.
    3. A `user_scope_needs_expiry` kind (temporary_state) that still lands in user scope without
       expiresAt -> invalid.
    """
    if scope not in SCOPES:
        raise SchemaError("invalid", f"scope must be one of {', '.join(SCOPES)}.", "node.scope")
    if scope == "global":
        raise SchemaError(
            "forbidden", "Agents never write global scope; write to user, workspace or session.", "node.scope"
        )
    if scope not in allowed_scopes:
        permitted = ", ".join(s for s in SCOPES if s in allowed_scopes) or "none"
        raise SchemaError(
            "forbidden", f"This API key may not write {scope} scope (writeScopes: {permitted}).", "node.scope"
        )
    needs_intent = scope != "session" and (scope == "user" or spec.requires_explicit_user_intent)
    if needs_intent and not explicit_user_intent:
        if "session" not in allowed_scopes:
            raise SchemaError(
                "forbidden",
                f"{spec.name} in {scope} scope needs explicitUserIntent: true (the user asked for it).",
                "node.scope",
            )
        scope = "session"
    if spec.user_scope_needs_expiry and scope == "user" and not expires_at_set:
        raise SchemaError(
            "invalid",
            "Temporary states without expiresAt never enter user scope; set expiresAt or use session scope.",
            "node.expiresAt",
        )
    return scope
