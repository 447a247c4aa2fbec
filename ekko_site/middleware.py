"""Failures that escape a view: JSON error bodies for the API, friendly error pages for the browser.

DRF's handler renders most API errors; this catches what happens outside it (opening the request
transaction, a defect DRF re-raises). memory.errors.from_database_error decides what a database
failure means, for the API and the pages alike: only an unreachable or timed-out store is a 503
(the pages show templates/503.html); a value the store refuses or a clash with a concurrent write
is a 400 or 409 (templates/400.html), never a 500.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from memory.errors import StoreUnavailable, from_database_error

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


class StoreUnavailableMiddleware:
    """Turns an exception from a view into API.md's error body (API) or an error page (pages)."""

    def __init__(self, get_response) -> None:  # noqa: ANN001
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        error = from_database_error(exception) if isinstance(exception, DatabaseError) else None
        if request.path.startswith("/api/"):
            if error is None:
                logger.error("API defect on %s", request.path, exc_info=exception)
                return JsonResponse({"code": "server_error", "detail": "An unexpected error occurred; "
                                     "nothing was written. It has been logged."}, status=500)
            return JsonResponse({"code": error.code, "detail": error.detail}, status=error.status)
        if isinstance(error, StoreUnavailable):
            return error_page(request, "503.html", 503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        if error is not None:
            return error_page(request, "400.html", error.status)
        return None


def error_page(request: HttpRequest, template: str, status: int, headers: dict | None = None) -> HttpResponse:
    """Return an error page, rendered without the request context (which could query the database)."""
    html = render_to_string(template, {"retry_url": request.get_full_path(), "status": status})
    return HttpResponse(html, status=status, headers=headers)
