"""`/healthz`: 200 when the database answers, 503 otherwise (for load balancers and compose)."""

import logging

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@transaction.non_atomic_requests
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means "not healthy"
        # The endpoint is public: the reason (socket paths, host names) goes to the log, not the body.
        logger.error("health check failed: %s", exc)
        return JsonResponse({"status": "unavailable", "detail": "The database does not answer."}, status=503)
    return JsonResponse({"status": "ok"})
