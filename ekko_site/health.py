"""`/healthz`: 200 when the database answers, 503 otherwise (for load balancers and compose)."""

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@transaction.non_atomic_requests
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means "not healthy"
        return JsonResponse({"status": "unavailable", "detail": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok"})
