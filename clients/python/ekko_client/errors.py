"""One exception class per API error `code` (API.md "Errors"); `EkkoError` for a code not known here."""

from __future__ import annotations

from typing import Any

__all__ = [
    "Conflict",
    "EkkoError",
    "Forbidden",
    "Invalid",
    "NotFound",
    "QuotaExceeded",
    "RateLimited",
    "RequiresConfirmation",
    "RevisionConflict",
    "SensitiveContent",
    "ServerError",
    "StoreUnavailable",
    "TooLarge",
    "Unauthenticated",
    "error_for",
]


class EkkoError(Exception):
    """An error answer of the API: its HTTP status, machine `code`, human `detail` and the whole body."""

    code = ""

    def __init__(self, status: int, body: dict[str, Any], *, retry_after: float | None = None) -> None:
        self.status = status
        self.body = body
        self.detail = str(body.get("detail", ""))
        self.errors: dict[str, list[str]] = body.get("errors") or {}
        self.retry_after = retry_after
        if not self.code:
            self.code = str(body.get("code", ""))
        super().__init__(f"{status} {self.code}: {self.detail}")


class Invalid(EkkoError):
    code = "invalid"


class SensitiveContent(EkkoError):
    code = "sensitive_content"


class Unauthenticated(EkkoError):
    code = "unauthenticated"


class Forbidden(EkkoError):
    code = "forbidden"


class NotFound(EkkoError):
    code = "not_found"


class RevisionConflict(EkkoError):
    """The target moved on: `current_revision`, `node_status` and `superseded_by_id` say where."""

    code = "revision_conflict"

    @property
    def current_revision(self) -> int | None:
        return self.body.get("currentRevision")

    @property
    def node_status(self) -> str | None:
        return self.body.get("status")

    @property
    def superseded_by_id(self) -> str | None:
        return self.body.get("supersededById")


class RequiresConfirmation(EkkoError):
    """A forget selector matched several memories: pick from `candidates` and send `targets`."""

    code = "requires_confirmation"

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return self.body.get("candidates") or []


class Conflict(EkkoError):
    code = "conflict"


class QuotaExceeded(EkkoError):
    """A create beyond the scope owner's card limit; nothing was written."""

    code = "quota_exceeded"

    @property
    def headroom(self) -> int | None:
        return self.body.get("headroom")


class TooLarge(EkkoError):
    code = "too_large"


class RateLimited(EkkoError):
    code = "rate_limited"


class StoreUnavailable(EkkoError):
    code = "store_unavailable"


class ServerError(EkkoError):
    code = "server_error"


_BY_CODE = {cls.code: cls for cls in EkkoError.__subclasses__()}


def error_for(status: int, body: Any, *, retry_after: float | None = None) -> EkkoError:
    """The exception for an error answer; a body not in the API's error shape gives an EkkoError."""
    if not isinstance(body, dict):
        body = {"code": "", "detail": str(body)[:500]}
    return _BY_CODE.get(str(body.get("code")), EkkoError)(status, body, retry_after=retry_after)
