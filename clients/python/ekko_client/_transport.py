"""What the sync and async clients share: the call description, the retry policy and answer parsing."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from pydantic import BaseModel

from ekko_client.errors import EkkoError, error_for

DEFAULT_TIMEOUT = 30.0
USER_AGENT = "ekko-client-python/0.1.0"


@dataclass(frozen=True)
class Call:
    """One API operation: method, path under /api/v1/, body or query, and what the answer parses into."""

    method: str
    path: str
    response: type[BaseModel] | None  # None: the raw bytes (an export)
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    files: dict[str, Any] | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Retry 429 after its Retry-After and 503 with exponential backoff; never any other error.

    Both answers mean the server changed nothing, so retrying a write is safe.
    """

    max_retries: int = 3
    backoff: float = 0.5  # seconds before the first 503 retry; doubled each time, with jitter
    max_wait: float = 30.0
    statuses: frozenset[int] = field(default=frozenset({429, 503}))

    def wait(self, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before retry `attempt` (1-based), or None when the answer is final."""
        if response.status_code not in self.statuses or attempt > self.max_retries:
            return None
        retry_after = retry_after_seconds(response)
        if retry_after is not None:
            return min(retry_after, self.max_wait)
        return min(self.backoff * 2 ** (attempt - 1) * (0.5 + random.random() / 2), self.max_wait)


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def prepare(call: Call) -> dict[str, Any]:
    """httpx.request keyword arguments for a call."""
    request: dict[str, Any] = {}
    if call.json is not None:
        request["json"] = call.json
    if call.params:
        request["params"] = {k: v for k, v in call.params.items() if v is not None}
    if call.files is not None:
        request["files"] = call.files
    return request


def parse(call: Call, response: httpx.Response) -> Any:
    """The typed answer, or the API error as its exception."""
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        raise error_for(response.status_code, body, retry_after=retry_after_seconds(response))
    if call.response is None:
        return response.content
    try:
        return call.response.model_validate(response.json())
    except ValueError as exc:
        raise EkkoError(response.status_code, {"code": "bad_response", "detail": str(exc)[:500]}) from exc


def headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, "Accept": "application/json"}


def base_url(url: str) -> str:
    """The service root or its /api/v1/ prefix: both work."""
    url = url.rstrip("/")
    return url if url.endswith("/api/v1") else url + "/api/v1"
