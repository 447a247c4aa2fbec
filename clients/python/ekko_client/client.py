"""`EkkoClient` (sync) and `AsyncEkkoClient` (asyncio) over httpx, with the retry policy of _transport."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from ekko_client._transport import DEFAULT_TIMEOUT, Call, RetryPolicy, base_url, headers, parse, prepare
from ekko_client.operations import Operations

__all__ = ["AsyncEkkoClient", "EkkoClient"]


class EkkoClient(Operations):
    """`EkkoClient("http://127.0.0.1:8000", api_key="ekko_…")`; a context manager, or call close()."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = http or httpx.Client(timeout=timeout)
        self._base = base_url(url)
        self._headers = headers(api_key)

    def _send(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            response = self._http.request(
                call.method, f"{self._base}/{call.path}", headers=self._headers, **prepare(call)
            )
            wait = self.retry.wait(attempt, response)
            if wait is None:
                return parse(call, response)
            time.sleep(wait)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EkkoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncEkkoClient(Operations):
    """The same operations as `EkkoClient`, each returning an awaitable."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._base = base_url(url)
        self._headers = headers(api_key)

    async def _send(self, call: Call) -> Any:  # type: ignore[override]
        attempt = 0
        while True:
            attempt += 1
            response = await self._http.request(
                call.method, f"{self._base}/{call.path}", headers=self._headers, **prepare(call)
            )
            wait = self.retry.wait(attempt, response)
            if wait is None:
                return parse(call, response)
            await asyncio.sleep(wait)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEkkoClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
