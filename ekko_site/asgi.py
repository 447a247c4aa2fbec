"""ASGI entry point, the one the service runs (`gunicorn ekko_site.asgi -k uvicorn_worker.UvicornWorker`).

`/mcp` goes to the MCP server (memory.api.mcp), every other path to Django; the ASGI lifespan starts and
stops the MCP server's task group (Django's ASGI handler takes no lifespan events).
"""

import os
import time
from contextlib import AsyncExitStack

import django
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")


class DjangoOnTheSyncThread(ASGIHandler):
    """Django's ASGI handler, with every request's sync work on the process's one sync thread.

    Django's own handler gives each request a thread of its own (asgiref's ThreadSensitiveContext), and
    a database connection lives and dies with its thread: every request would open a new PostgreSQL
    connection (CONN_MAX_AGE lost; about twice the p50 of the API here). On the one sync thread the
    connection persists, and a process answers one Django request at a time, exactly as the former
    sync workers did; the sockets, and `/mcp` while it waits for the API, stay on the event loop.
    """

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP connections only, not {scope['type']!r}.")
        await self.handle(scope, receive, send)


django.setup(set_prefix=False)
django_application = DjangoOnTheSyncThread()

from ekko_site.inprocess import serve_background  # noqa: E402 - needs the apps loaded above
from ekko_site.metrics import observe_request  # noqa: E402
from ekko_site.request_id import request_id_from  # noqa: E402
from memory.api.mcp import McpEndpoint  # noqa: E402

MCP_PATH = "/mcp"


class EkkoApplication:
    def __init__(self) -> None:
        self.mcp = McpEndpoint(django_application)

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
            await self.mcp_request(scope, receive, send)
        else:
            await django_application(scope, receive, send)

    async def mcp_request(self, scope, receive, send) -> None:  # noqa: ANN001
        """Serve one `/mcp` request with a request id (passed on to its tool calls) and its latency."""
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = request_id_from(given)
        headers = [(k, v) for k, v in scope["headers"] if k != b"x-request-id"]
        scope = {**scope, "headers": [*headers, (b"x-request-id", request_id.encode())]}
        started, status = time.perf_counter(), 500

        async def send_with_id(message) -> None:  # noqa: ANN001
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.mcp(scope, receive, send_with_id)
        finally:
            observe_request("mcp", scope["method"], status, time.perf_counter() - started)

    async def lifespan(self, receive, send) -> None:  # noqa: ANN001
        async with AsyncExitStack() as stack:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await stack.enter_async_context(self.mcp.run())
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await stack.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return


application = EkkoApplication()

serve_background()  # without a broker, this process runs the background work and the sweeps
