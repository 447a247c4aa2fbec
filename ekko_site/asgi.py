"""ASGI entry point, the one the service runs (`gunicorn ekko_site.asgi -k uvicorn_worker.UvicornWorker`).

`/mcp` goes to the MCP server (memory.api.mcp), every other path to Django; the ASGI lifespan starts and
stops the MCP server's task group (Django's ASGI handler takes no lifespan events).
"""

import os
from contextlib import AsyncExitStack

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")
django_application = get_asgi_application()

from ekko_site.inprocess import serve_background  # noqa: E402 - needs the apps loaded above
from memory.api.mcp import McpEndpoint  # noqa: E402

MCP_PATH = "/mcp"


class EkkoApplication:
    def __init__(self) -> None:
        self.mcp = McpEndpoint(django_application)

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
            await self.mcp(scope, receive, send)
        else:
            await django_application(scope, receive, send)

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
