"""Answer API requests with 503 `store_unavailable` when the database is down, never with a 500 page."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse

logger = logging.getLogger(__name__)


class StoreUnavailableMiddleware:
    """Catches database failures that happen outside DRF's handler (e.g. opening the request transaction)."""

    def __init__(self, get_response) -> None:  # noqa: ANN001
        self.get_response = get_response

    def __call__(self, request: HttpRequest):  # noqa: ANN204
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> JsonResponse | None:
        if not isinstance(exception, DatabaseError) or not request.path.startswith("/api/"):
            return None
        logger.error("memory store unavailable: %s", exception)
        return JsonResponse({"code": "store_unavailable",
                             "detail": "The memory store is unavailable; nothing was written. Retry later."},
                            status=503)
