"""Application errors that carry API.md's status and machine code; one handler renders them.

`from_database_error` is the one place that decides what a database failure means to a client:
only a store that cannot be reached or did not answer in time is 503 `store_unavailable` (retry
later); a value the store refuses is 400 `invalid`, and a clash with rows written at the same time
is 409 `conflict` (re-read, then retry). The API's exception handler, the middleware and the
pages all call it, so a client never retries as if the database were down when it is not.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError, InterfaceError, OperationalError

logger = logging.getLogger(__name__)


class MemoryServiceError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, detail: str, *, errors: dict[str, list[str]] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or {}
        self.extra = extra


class Invalid(MemoryServiceError):
    status, code = 400, "invalid"


class SensitiveContent(MemoryServiceError):
    status, code = 400, "sensitive_content"


class Forbidden(MemoryServiceError):
    status, code = 403, "forbidden"


class NotFound(MemoryServiceError):
    status, code = 404, "not_found"

    def __init__(self, detail: str = "Not found.", **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)


class RevisionConflict(MemoryServiceError):
    """409: the target moved on since the caller read it; the body says where it is now (API.md).

    `current_revision` and `node_status` describe the target as stored; `superseded_by_id` names the
    newest revision of its chain when it was superseded, so an agent can read that one and retry.
    """

    status, code = 409, "revision_conflict"

    def __init__(self, detail: str, *, errors: dict[str, list[str]] | None = None,
                 current_revision: int | None = None, node_status: str | None = None,
                 superseded_by_id: Any = None) -> None:
        target = {"currentRevision": current_revision, "status": node_status,
                  "supersededById": None if superseded_by_id is None else str(superseded_by_id)}
        super().__init__(detail, errors=errors, **{k: v for k, v in target.items() if v is not None})


class RequiresConfirmation(MemoryServiceError):
    status, code = 409, "requires_confirmation"


class Conflict(MemoryServiceError):
    status, code = 409, "conflict"


class QuotaExceeded(MemoryServiceError):
    """409: the write would take a scope owner past the tenant's card limit; nothing was written.

    The body names the owner (`scope`, `owner`: username or workspace id) and how full it is
    (`used`, `limit`, `headroom`: the cards it may still take), so a caller can shrink the batch,
    review or forget cards (the organizer merges them), or ask a tenant admin for a higher limit.
    """

    status, code = 409, "quota_exceeded"

    def __init__(self, detail: str, *, scope: str, owner: str, used: int, limit: int, headroom: int) -> None:
        super().__init__(detail, scope=scope, owner=owner, used=used, limit=limit, headroom=headroom)


class TooLarge(MemoryServiceError):
    status, code = 413, "too_large"


class StoreUnavailable(MemoryServiceError):
    status, code = 503, "store_unavailable"

    def __init__(self, detail: str = "The memory store is unavailable; nothing was written. Retry later.",
                 **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)


# SQLSTATE classes (PostgreSQL appendix A) of failures that are the store's, not the request's:
# 08 connection exception, 53 insufficient resources, 57 operator intervention (57014 is a
# statement timeout), 58 system error; 55P03 is a lock timeout.
_UNAVAILABLE_CLASSES = {"08", "53", "57", "58"}
_CONFLICT_STATES = {"23505", "23P01", "23503"}  # unique, exclusion, foreign key (row gone meanwhile)


def _sqlstate(exc: DatabaseError) -> str:
    return getattr(exc.__cause__, "sqlstate", None) or ""


def from_database_error(exc: DatabaseError) -> MemoryServiceError | None:
    """Return the application error a database failure means, or None for a server defect (a 500)."""
    error = _classify(exc)
    if error is not None:
        logger.log(logging.ERROR if error.status >= 500 else logging.WARNING, "database: %s → %s %s",
                   exc, error.status, error.code)
    return error


def _classify(exc: DatabaseError) -> MemoryServiceError | None:
    state = _sqlstate(exc)
    if isinstance(exc, InterfaceError) or (isinstance(exc, OperationalError) and (
            not state or state[:2] in _UNAVAILABLE_CLASSES or state == "55P03")):
        return StoreUnavailable()
    if state[:2] == "40":  # serialization failure or deadlock: a concurrent transaction won
        return Conflict("A concurrent request changed the same records; nothing was written. "
                        "Re-read and retry.")
    if isinstance(exc, IntegrityError) and state in _CONFLICT_STATES:
        return Conflict("The request clashes with records written at the same time (or since removed); "
                        "nothing was written. Re-read and retry.")
    if isinstance(exc, DataError | IntegrityError) or state[:2] == "54":
        return Invalid("A value in the request cannot be stored (out of range, too long or malformed); "
                       "nothing was written.")
    return None


def from_schema_error(exc: Exception) -> MemoryServiceError:
    """Turn a memory.rules.schema.SchemaError (code, detail, field) into the matching service error."""
    code = getattr(exc, "code", "invalid")
    detail = getattr(exc, "detail", str(exc))
    field = getattr(exc, "field", None)
    errors = {field: [detail]} if field else None
    error_class = {"sensitive_content": SensitiveContent, "forbidden": Forbidden}.get(code, Invalid)
    return error_class(detail, errors=errors)
