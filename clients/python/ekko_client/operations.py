"""Every operation of the API, once: each method names its OpenAPI operationId and builds its Call.

`EkkoClient` sends the call and returns the typed answer; `AsyncEkkoClient` returns an awaitable of it.
A method takes its request model, or the same fields as keyword arguments (snake_case).
"""

from __future__ import annotations

from typing import Any, BinaryIO, Literal, TypeVar
from urllib.parse import quote

from ekko_client import models as m
from ekko_client._transport import Call

B = TypeVar("B", bound=m.Body)


def _body(model: type[B], given: B | None, fields: dict[str, Any]) -> dict[str, Any]:
    if given is not None and fields:
        raise TypeError(f"pass either a {model.__name__} or keyword fields, not both")
    return (given if given is not None else model.model_validate(fields)).wire()


def _segment(value: str) -> str:
    return quote(str(value), safe="")


class Operations:
    def _send(self, call: Call) -> Any:
        raise NotImplementedError

    # workspaces
    def workspaces_list(self) -> m.WorkspaceList:
        return self._send(Call("GET", "workspaces", m.WorkspaceList))

    def workspaces_create(self, name: str) -> m.Workspace:
        return self._send(Call("POST", "workspaces", m.Workspace, json={"name": name}))

    def workspace_export(self, workspace_id: str) -> bytes:
        """The workspace as an SQLite file in the Ekko local format."""
        return self._send(Call("GET", f"workspaces/{_segment(workspace_id)}/export.sqlite", None))

    def workspace_import(self, workspace_id: str, file: bytes | BinaryIO) -> m.ImportReport:
        return self._send(
            Call(
                "POST",
                f"workspaces/{_segment(workspace_id)}/import",
                m.ImportReport,
                files={"file": ("import.sqlite", file, "application/vnd.sqlite3")},
            )
        )

    # evidence messages
    def messages_capture(self, body: m.MessageCapture | None = None, **fields: Any) -> m.MessageList:
        return self._send(Call("POST", "messages", m.MessageList, json=_body(m.MessageCapture, body, fields)))

    def messages_list(
        self, session_id: str, *, limit: int | None = None, workspace_id: str | None = None
    ) -> m.MessageList:
        return self._send(
            Call(
                "GET",
                "messages",
                m.MessageList,
                params={"sessionId": session_id, "limit": limit, "workspaceId": workspace_id},
            )
        )

    def messages_search(self, body: m.MessageSearch | None = None, **fields: Any) -> m.MessageSearchResult:
        return self._send(
            Call("POST", "messages/search", m.MessageSearchResult, json=_body(m.MessageSearch, body, fields))
        )

    # memory cards
    def memory_search(self, query: m.MemoryQuery | None = None, **fields: Any) -> m.SearchResult:
        return self._send(
            Call("POST", "memory/search", m.SearchResult, json=_body(m.MemoryQuery, query, fields))
        )

    def memory_node_get(self, node_id: str) -> m.MemoryNode:
        return self._send(Call("GET", f"memory/nodes/{_segment(node_id)}", m.MemoryNode))

    def memory_node_history(self, node_id: str) -> m.NodeHistory:
        return self._send(Call("GET", f"memory/nodes/{_segment(node_id)}/history", m.NodeHistory))

    def memory_get(self, selector: m.MemorySelector | None = None, **fields: Any) -> m.NodeEnvelope:
        return self._send(
            Call("POST", "memory/get", m.NodeEnvelope, json=_body(m.MemorySelector, selector, fields))
        )

    def memory_write(self, body: m.MemoryWrite | None = None, **fields: Any) -> m.WriteResult:
        return self._send(
            Call("POST", "memory/write", m.WriteResult, json=_body(m.MemoryWrite, body, fields))
        )

    def memory_forget(self, body: m.MemoryForget | None = None, **fields: Any) -> m.ForgetResult:
        return self._send(
            Call("POST", "memory/forget", m.ForgetResult, json=_body(m.MemoryForget, body, fields))
        )

    def memory_quota(self) -> m.QuotaReport:
        return self._send(Call("GET", "memory/quota", m.QuotaReport))

    def memory_organize(self, body: m.OrganizeRequest | None = None, **fields: Any) -> m.OrganizeQueued:
        return self._send(
            Call("POST", "memory/organize", m.OrganizeQueued, json=_body(m.OrganizeRequest, body, fields))
        )

    def memory_organize_status(self, run_id: str) -> m.OrganizeRun:
        return self._send(Call("GET", f"memory/organize/{_segment(run_id)}", m.OrganizeRun))

    def memory_organize_item(self, run_id: str, item_id: str,
                             decision: Literal["apply", "dismiss"]) -> m.OrganizeItem:
        path = f"memory/organize/{_segment(run_id)}/items/{_segment(item_id)}"
        return self._send(Call("POST", path, m.OrganizeItem, json={"decision": decision}))

    # the turn
    def context(self, body: m.ContextRequest | None = None, **fields: Any) -> m.Context:
        return self._send(Call("POST", "context", m.Context, json=_body(m.ContextRequest, body, fields)))

    def summaries_create(self, body: m.SummaryCreate | None = None, **fields: Any) -> m.Summary:
        return self._send(Call("POST", "summaries", m.Summary, json=_body(m.SummaryCreate, body, fields)))

    def summaries_latest(self, session_id: str) -> m.SummaryEnvelope:
        return self._send(
            Call("GET", "summaries/latest", m.SummaryEnvelope, params={"sessionId": session_id})
        )

    def extract_request(self, session_id: str) -> m.ExtractQueued:
        return self._send(Call("POST", "extract", m.ExtractQueued, json={"sessionId": session_id}))

    def extract_status(self, task_id: str) -> m.ExtractStatus:
        return self._send(Call("GET", f"extract/{_segment(task_id)}", m.ExtractStatus))

    def tools(self) -> m.ToolList:
        """OpenAI-style function definitions, ready to hand to a model."""
        return self._send(Call("GET", "tools", m.ToolList))
