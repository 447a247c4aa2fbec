"""Application errors that carry API.md's status and machine code; one handler renders them."""

from __future__ import annotations

from typing import Any


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
    status, code = 409, "revision_conflict"


class RequiresConfirmation(MemoryServiceError):
    status, code = 409, "requires_confirmation"


class TooLarge(MemoryServiceError):
    status, code = 413, "too_large"


class StoreUnavailable(MemoryServiceError):
    status, code = 503, "store_unavailable"


def from_schema_error(exc: Exception) -> MemoryServiceError:
    """Turn a memory.rules.schema.SchemaError (code, detail, field) into the matching service error."""
    code = getattr(exc, "code", "invalid")
    detail = getattr(exc, "detail", str(exc))
    field = getattr(exc, "field", None)
    errors = {field: [detail]} if field else None
    error_class = {"sensitive_content": SensitiveContent, "forbidden": Forbidden}.get(code, Invalid)
    return error_class(detail, errors=errors)
