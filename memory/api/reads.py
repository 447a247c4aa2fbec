"""Read audit for the API: which endpoint a route is, and one batch per request of the cards it handed out.

`MemoryApiView.nodes_json` notes every card it renders; after a successful answer the batch goes
to memory.services.reads (written after the request's commit, off the request path).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from memory.models import MemoryNode, ReadEndpoint
from memory.services.reads import node_reads_record

# URL name (memory/api/urls.py) → the endpoint a read is filed under; other routes file as `other`.
READ_ENDPOINTS = {
    "api-memory-search": ReadEndpoint.MEMORY_SEARCH,
    "api-memory-get": ReadEndpoint.MEMORY_GET,
    "api-node": ReadEndpoint.MEMORY_NODE,
    "api-node-history": ReadEndpoint.HISTORY,
    "api-context": ReadEndpoint.CONTEXT,
}


def read_endpoint(request: Request) -> str:
    match = getattr(request, "resolver_match", None)
    return READ_ENDPOINTS.get(match.url_name if match else "", ReadEndpoint.OTHER)


class ReadAuditMixin:
    """Collect the cards a view renders and record them once, when the answer is a success."""

    def note_reads(self, nodes: Iterable[MemoryNode]) -> None:
        self._read_node_ids: list[Any] = [*getattr(self, "_read_node_ids", []), *(n.pk for n in nodes)]

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        node_ids = getattr(self, "_read_node_ids", [])
        principal = getattr(self, "principal", None)
        if node_ids and principal is not None and response.status_code < 400:
            node_reads_record(
                tenant=principal.tenant, node_ids=node_ids, endpoint=read_endpoint(request),
                actor=principal.actor, user_id=principal.user.pk if principal.user is not None else None,
                api_key=principal.api_key,
            )
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
