"""The request id: one per HTTP request, in the `X-Request-ID` response header and on every log record.

An incoming `X-Request-ID` is kept when it is sane (1-128 letters, digits and `._:-`, so a log line
cannot be forged through it); otherwise a new one is made. `RequestIdFilter` puts the id of the current
request (a context variable: each thread or task sees its own) on each record as `request_id`, which
the JSON log format (`EKKO_LOG_FORMAT=json`) prints.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
current_request_id: ContextVar[str] = ContextVar("current_request_id", default="")


def request_id_from(given: str | None) -> str:
    """Return `given` when it is a sane request id, else a new one."""
    return given if given and _SANE.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, get_response) -> None:  # noqa: ANN001
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.headers.get(HEADER))
        # Not reset on the way out: Django logs a 4xx or 5xx after the middleware returns, and each
        # request sets its own id before anything else.
        current_request_id.set(request_id)
        response = self.get_response(request)
        response[HEADER] = request_id
        return response


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get()
        return True
