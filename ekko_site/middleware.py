"""Failures that escape a view: JSON error bodies for the API, a friendly 503 page when the store is down.

DRF's handler renders most API errors; this catches what happens outside it (opening the request
transaction, a defect DRF re-raises). memory.errors.from_database_error decides what a database
failure means, for the API and the pages alike: only an unreachable or timed-out store is a 503.
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
    """Turns an exception from a view into API.md's error body (API) or the 503 page (pages)."""

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
            logger.error("page answered 503, memory store unavailable: %s", exception)
            return store_unavailable_page(request)
        return None


def store_unavailable_page(request: HttpRequest) -> HttpResponse:
    """Return the 503 page; rendered without the request context, which would query the database."""
    html = render_to_string("503.html", {"retry_url": request.get_full_path()})
    return HttpResponse(html, status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
