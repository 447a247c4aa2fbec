"""Agent API views, one class per operation: parse, call one service/selector, render, map errors."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors, services
from memory.access import may_create_workspace, operations_check, reachable_workspaces
from memory.api import serializers as s
from memory.api.base import MemoryApiView
from memory.api.quota import QuotaConflictSerializer
from memory.api.tools import tool_definitions
from memory.errors import Forbidden, TooLarge
from memory.presenters import (
    audit_event_to_api,
    forget_result_to_api,
    iso,
    message_to_api,
    summary_to_api,
)
from memory.search import retrieval
from memory.search.context import build_context
from memory.search.messages import search_messages
from memory.selectors import NodeSelector
from memory.visibility import Viewer
from tenants.models import Workspace
from tenants.services import workspace_create

logger = logging.getLogger(__name__)

ERRORS = {status: OpenApiResponse(s.ErrorSerializer) for status in (400, 401, 403, 404, 409, 413, 429, 503)}
# memory/write and memory/forget answer 409 with where the target is now (or what a selector matched).
CONFLICT_ERRORS = {**ERRORS, 409: OpenApiResponse(s.ConflictSerializer)}

# memory.access's rule, as the OpenAPI descriptions of the operations that name a workspace or person say it.
REACH = ("A browser session without the owner or admin role may name only a `workspaceId` it belongs to "
         "(everyone belongs to `default`), only itself as `userId` and only a `sessionId` of its own "
         "conversations; any other workspace, person or session answers 404 `not_found`, like an unknown id. "
         "A key pinned to a workspace gets 403 for any other workspace.")
QUOTA = (" A batch that would give a user or workspace scope more ordinary cards than its headroom (see "
         "`GET memory/quota`) is refused whole with 409 `quota_exceeded` (`scope`, `owner`, `used`, `limit`, "
         "`headroom`); a create that supersedes the card of its slot, an update and an expire add none.")
SELECTOR_WORKSPACE = " A `workspaceId` in the selector narrows it to the cards that belong to that workspace."


def _parse(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _workspace_json(workspace: Workspace) -> dict[str, Any]:
    return {"id": str(workspace.pk), "name": workspace.name, "slug": workspace.slug,
            "createdAt": iso(workspace.created_at)}


class WorkspacesApi(MemoryApiView):
    @extend_schema(operation_id="workspaces_list", description=(
        "The workspaces the caller may name: all of the tenant's for an unpinned key and for owners and "
        "admins, the pinned one for a pinned key, and for other people `default` plus the workspaces they "
        "belong to."), responses={200: s.WorkspaceListSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response({"workspaces": [_workspace_json(w) for w in reachable_workspaces(self.principal)]})

    @extend_schema(operation_id="workspaces_create", description=(
        "Add a workspace. Needs a writable key that is not pinned to a workspace or, for a browser session, "
        "the owner or admin role (403 otherwise)."),
        request=s.WorkspaceCreateSerializer, responses={201: s.WorkspaceSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.WorkspaceCreateSerializer, request.data)
        if not may_create_workspace(self.principal):
            raise Forbidden("Creating a workspace needs a writable unpinned key, or the owner or admin role.")
        workspace = workspace_create(tenant=self.principal.tenant, name=data["name"])
        return Response(_workspace_json(workspace), status=201)


class MessagesApi(MemoryApiView):
    @extend_schema(operation_id="messages_capture", description=REACH, request=s.MessageCaptureSerializer,
                   responses={201: s.MessageListSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.MessageCaptureSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data["session_id"],
                             user_ref=data.get("user_id"))
        stored = services.message_append_batch(viewer=viewer, session_id=data["session_id"],
                                               messages=data["messages"])
        return Response({"messages": [message_to_api(m) for m in stored]}, status=201)

    @extend_schema(operation_id="messages_list", description=REACH, parameters=[s.MessageListQuerySerializer],
                   responses={200: s.MessageListSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        data = _parse(s.MessageListQuerySerializer, request.query_params)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data["session_id"])
        messages = selectors.messages_list(viewer=viewer, session_id=data["session_id"], limit=data["limit"])
        return Response({"messages": [message_to_api(m) for m in messages]})


class MessageSearchApi(MemoryApiView):
    @extend_schema(operation_id="messages_search", description=REACH, request=s.MessageSearchSerializer,
                   responses={200: s.MessageSearchResultSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.MessageSearchSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data.get("session_id"),
                             user_ref=data.get("user_id"))
        hits, diagnostics = search_messages(
            viewer=viewer, query_text=data["query_text"], session_id=data.get("session_id"),
            include_subagent=data["include_subagent"], limit=data["limit"])
        return Response({
            "messages": [{"id": m.message_id, "sessionId": m.session_id, "role": m.role, "content": m.content,
                          "createdAt": iso(m.created_at), "score": round(score, 6)} for m, score in hits],
            "diagnostics": diagnostics,
        })


class MemorySearchApi(MemoryApiView):
    @extend_schema(operation_id="memory_search", description=REACH, request=s.MemoryQuerySerializer,
                   responses={200: s.MemorySearchResultSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.MemoryQuerySerializer, request.data)
        viewer = self.viewer(workspace_ref=data.pop("workspace_id", None),
                             session_id=data.pop("session_id", None), user_ref=data.pop("user_id", None))
        query = retrieval.MemoryQuery(**data)
        result = retrieval.search_nodes(viewer=viewer, query=query)
        exact, relevant = self.nodes_json_groups(result.exact, result.relevant)
        return Response({
            "exact": exact,
            "relevant": relevant,
            "omitted": [{"nodeId": str(o.node_id), "reason": o.reason} for o in result.omitted],
            "diagnostics": result.diagnostics,
        })


class NodeDetailApi(MemoryApiView):
    @extend_schema(operation_id="memory_node_get", responses={200: s.MemoryNodeSerializer, **ERRORS})
    def get(self, request: Request, node_id: str) -> Response:
        node = selectors.node_get(viewer=self.viewer(), node_id=node_id)
        return Response(self.nodes_json([node])[0])


class NodeHistoryApi(MemoryApiView):
    @extend_schema(operation_id="memory_node_history", responses={200: s.NodeHistorySerializer, **ERRORS})
    def get(self, request: Request, node_id: str) -> Response:
        history = selectors.node_history(viewer=self.viewer(), node_id=node_id)
        return Response({"chain": self.nodes_json(history.chain),
                         "events": [audit_event_to_api(e) for e in history.events]})


def _selector(data: dict[str, Any], viewer: Viewer) -> NodeSelector:
    """Return the selector of a get/forget body; a `workspaceId` narrows it to that workspace's cards."""
    named_workspace = data.get("workspace_id") not in (None, "")
    return NodeSelector(
        type=data.get("type"), kind=data.get("kind"), key=data.get("key"), value_json=data.get("value_json"),
        value_json_given=data.get("value_json_given", False), scope=data.get("scope"),
        domain=data.get("domain"), category_path_prefix=tuple(data.get("category_path_prefix") or ()),
        workspace_id=viewer.workspace.pk if named_workspace else None,
    )


class MemoryGetApi(MemoryApiView):
    @extend_schema(operation_id="memory_get", description=REACH + SELECTOR_WORKSPACE,
                   request=s.MemoryGetSerializer,
                   responses={200: s.NodeEnvelopeSerializer, **CONFLICT_ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.MemoryGetSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), user_ref=data.get("user_id"))
        node = selectors.node_select(viewer=viewer, selector=_selector(data, viewer))
        return Response({"node": self.nodes_json([node])[0] if node else None})


class MemoryWriteApi(MemoryApiView):
    @extend_schema(operation_id="memory_write", description=REACH + QUOTA, request=s.MemoryWriteSerializer,
                   responses={200: s.MemoryWriteResultSerializer, **CONFLICT_ERRORS,
                              409: OpenApiResponse(QuotaConflictSerializer)})
    def post(self, request: Request) -> Response:
        data = _parse(s.MemoryWriteSerializer, request.data)
        if len(data["operations"]) > services.MAX_OPERATIONS:
            raise TooLarge(f"At most {services.MAX_OPERATIONS} operations per request; split the batch.")
        viewer = self.viewer()
        operations_check(viewer, data["operations"])
        results = services.node_write_batch(
            viewer=viewer, operations=data["operations"],
            explicit_user_intent=data["explicit_user_intent"],
            source_message_ids=data.get("source_message_ids") or [],
        )
        return Response({"done": True, "results": [{
            "operation": r.operation, "action": r.action, "nodeId": str(r.node.pk),
            "revision": r.node.revision, "key": r.node.key, "scope": r.node.scope,
            "appliedConfidence": r.applied_confidence, "autoDowngraded": r.auto_downgraded, "notes": r.notes,
        } for r in results]})


class MemoryForgetApi(MemoryApiView):
    @extend_schema(operation_id="memory_forget", description=REACH + SELECTOR_WORKSPACE,
                   request=s.MemoryForgetSerializer,
                   responses={200: s.MemoryForgetResultSerializer, **CONFLICT_ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.MemoryForgetSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data.get("session_id"),
                             user_ref=data.get("user_id"))
        forget = services.ForgetRequest(
            reason=data["reason"], explicit_user_intent=data["explicit_user_intent"], mode=data["mode"],
            node_id=data.get("id"), expected_revision=data.get("expected_revision"),
            targets=tuple((t["id"], t["expected_revision"]) for t in data.get("targets") or []),
            all=data["all"], selector=_selector(data, viewer), purge_evidence=data["purge_evidence"],
        )
        result = services.node_forget(viewer=viewer, request=forget)
        return Response(forget_result_to_api(result, mode=data["mode"]))


@method_decorator(transaction.non_atomic_requests, name="dispatch")
class ContextApi(MemoryApiView):
    """The context pack. Not wrapped in ATOMIC_REQUESTS' transaction: it must answer even when the store
    is down, so it opens its own and answers without one when that fails."""

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # One transaction for the key, the viewer, the pack and its rendering: the tenant is bound once.
        response = None
        try:
            with transaction.atomic():
                response = super().dispatch(request, *args, **kwargs)
        except DatabaseError:
            if response is not None:
                # The store went away after the answer was ready: the commit of reads loses nothing.
                logger.warning("context: the closing commit failed; answering anyway", exc_info=True)
                return response
            logger.warning("context: no transaction could be opened; answering without one")
            return super().dispatch(request, *args, **kwargs)
        return response

    @extend_schema(operation_id="context", description=REACH, request=s.ContextRequestSerializer,
                   responses={200: s.ContextSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.ContextRequestSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data["session_id"],
                             user_ref=data.get("user_id"))
        pack = build_context(viewer=viewer, query_text=data["query_text"], token_budget=data["token_budget"],
                             include_journal=data["include_journal"])
        return Response(context_json(pack, self.nodes_json_groups))

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, DatabaseError):
            # Failure never blocks the agent (rule 11): answer without memory and say why.
            logger.warning("context answered without the memory store: %s", exc)
            budget = self.request.data.get("tokenBudget") if isinstance(self.request.data, dict) else None
            return Response(disabled_context(budget if isinstance(budget, int) else 4000,
                                             "memory store unavailable; answered without memory"))
        return super().handle_exception(exc)


def context_json(pack: Any, render_node_groups: Any) -> dict[str, Any]:
    tasks, constraints, preferences, relevant = render_node_groups(
        pack.active_tasks, pack.constraints, pack.preferences, pack.relevant_nodes)
    return {
        "recentMessages": [message_to_api(m) for m in pack.recent_messages],
        "latestSummary": summary_to_api(pack.latest_summary) if pack.latest_summary else None,
        "activeTasks": tasks,
        "constraints": constraints,
        "preferences": preferences,
        "relevantNodes": relevant,
        "usedMemoryIds": [str(pk) for pk in pack.used_memory_ids],
        "prompt": pack.prompt,
        "diagnostics": pack.diagnostics,
    }


def disabled_context(token_budget: int, warning: str) -> dict[str, Any]:
    """The answer of the context endpoint when the store cannot be reached at all."""
    return {
        "recentMessages": [], "latestSummary": None, "activeTasks": [], "constraints": [], "preferences": [],
        "relevantNodes": [], "usedMemoryIds": [], "prompt": "",
        "diagnostics": {"enabled": False, "storeStatus": "disabled", "warnings": [warning],
                        "retrievedNodeCount": 0, "omittedNodeCount": 0, "tokenBudget": token_budget,
                        "usedTokens": 0},
    }


class SummariesApi(MemoryApiView):
    @extend_schema(operation_id="summaries_create", description=REACH, request=s.SummaryCreateSerializer,
                   responses={201: s.SummarySerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        data = _parse(s.SummaryCreateSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data["session_id"])
        summary = services.summary_append(viewer=viewer, session_id=data["session_id"], data=data)
        return Response(summary_to_api(summary), status=201)


class SummaryLatestApi(MemoryApiView):
    @extend_schema(operation_id="summaries_latest", description=REACH,
                   parameters=[s.SummaryLatestQuerySerializer],
                   responses={200: s.SummaryEnvelopeSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        data = _parse(s.SummaryLatestQuerySerializer, request.query_params)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), session_id=data["session_id"])
        summary = selectors.summary_latest(viewer=viewer, session_id=data["session_id"])
        return Response({"summary": summary_to_api(summary) if summary else None})


class ToolsApi(MemoryApiView):
    @extend_schema(operation_id="tools", description=(
        "OpenAI-style function definitions of memory_search, memory_get, memory_write, memory_forget and "
        "memory_context; each one's `parameters` is exactly its operation's request body. The MCP server "
        "at `/mcp` offers the same tools with these schemas."),
        responses={200: OpenApiResponse(description="OpenAI-style tools")})
    def get(self, request: Request) -> Response:
        return Response({"tools": tool_definitions()})

