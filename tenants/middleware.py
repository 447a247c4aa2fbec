"""Make sure no tenant binding outlives the request that made it (threads are reused)."""

from tenants.context import unbind


class TenantContextResetMiddleware:
    def __init__(self, get_response) -> None:  # noqa: ANN001
        self.get_response = get_response

    def __call__(self, request):  # noqa: ANN001, ANN204
        unbind()
        try:
            return self.get_response(request)
        finally:
            unbind()
