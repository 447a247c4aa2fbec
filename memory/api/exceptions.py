"""One exception handler renders every failure as API.md's `{code, detail, errors}` body."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from memory.errors import MemoryServiceError, from_database_error
from memory.presenters import node_to_api

logger = logging.getLogger(__name__)

_DRF_CODES: list[tuple[type[Exception], int, str]] = [
    (exceptions.NotAuthenticated, 401, "unauthenticated"),
    (exceptions.AuthenticationFailed, 401, "unauthenticated"),
    (exceptions.PermissionDenied, 403, "forbidden"),
    (exceptions.NotFound, 404, "not_found"),
    (exceptions.MethodNotAllowed, 405, "method_not_allowed"),
    (exceptions.NotAcceptable, 406, "not_acceptable"),
    (exceptions.UnsupportedMediaType, 415, "unsupported_media_type"),
    (exceptions.Throttled, 429, "rate_limited"),
    (exceptions.ParseError, 400, "invalid"),
    (exceptions.ValidationError, 400, "invalid"),
]


def error_response(status_code: int, code: str, detail: str, errors: dict | None = None,
                   headers: dict | None = None, **extra: Any) -> Response:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if errors:
        body["errors"] = errors
    body.update(extra)
    return Response(body, status=status_code, headers=headers)


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[str]]:
    if isinstance(errors, dict):
        flat: dict[str, list[str]] = {}
        for name, value in errors.items():
            if isinstance(name, int) or str(name).isdigit():
                path = f"{prefix}[{name}]"
            else:
                path = f"{prefix}.{name}" if prefix else str(name)
            flat.update(_flatten(value, path))
        return flat
    if isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors):
        return {prefix or "body": [str(e) for e in errors]}
    if isinstance(errors, list):
        flat = {}
        for index, value in enumerate(errors):
            if value:
                flat.update(_flatten(value, f"{prefix}[{index}]"))
        return flat
    return {prefix or "body": [str(errors)]}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    dispatch = getattr(context.get("view"), "dispatch", None)
    if "default" not in getattr(dispatch, "_non_atomic_requests", set()):
        set_rollback()  # roll back the request's transaction (ATOMIC_REQUESTS), never an outer one
    if isinstance(exc, DatabaseError):
        error = from_database_error(exc)
        if error is None:
            return None  # neither the request's fault nor the store's: a defect, answered 500
        exc = error
    if isinstance(exc, MemoryServiceError):
        extra = dict(exc.extra)
        if "candidates" in extra:
            extra["candidates"] = [node_to_api(node) for node in extra["candidates"]]
        return error_response(exc.status, exc.code, exc.detail, exc.errors, **extra)
    if isinstance(exc, RequestDataTooBig):
        return error_response(413, "too_large", "The request body is over the size limit.")
    if isinstance(exc, Http404):
        return error_response(404, "not_found", "Not found.")
    for exc_class, status_code, code in _DRF_CODES:
        if isinstance(exc, exc_class):
            headers = {}
            if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
                headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))
            if isinstance(exc, exceptions.ValidationError):
                return error_response(status_code, code, "The request body is invalid; see `errors`.",
                                      _flatten(exc.detail))
            if isinstance(exc, exceptions.AuthenticationFailed | exceptions.NotAuthenticated):
                headers["WWW-Authenticate"] = "Bearer"
            detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
            return error_response(status_code, code, str(detail), headers=headers)
    if isinstance(exc, exceptions.APIException):
        return error_response(exc.status_code, exc.default_code, str(exc.detail))
    return None


__all__ = ["api_exception_handler", "error_response", "status"]
