"""The organizer's endpoints: `POST memory/organize` queues a run, `GET memory/organize/{runId}` shows it,
`POST memory/organize/{runId}/items/{itemId}` applies or dismisses a queued item."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api.base import MemoryApiView
from memory.api.serializers import IdOrSlugField
from memory.api.views import ERRORS, REACH, _parse
from memory.models import (
    OrganizeAction,
    OrganizeDecision,
    OrganizeItem,
    OrganizeMode,
    OrganizePhase,
    OrganizeRisk,
    OrganizeRun,
    OrganizeState,
    OrganizeTrigger,
)
from memory.organizer.runs import organize_get, organize_item_decide, organize_request
from memory.presenters import iso

MATRIX = (
    "Each item's risk is recomputed by the gate (cross-scope, confidence under 0.5, or values that "
    "disagree → high; a reviewed card → at least medium; else low). `mode: scheduled` applies low-risk "
    "items and queues the rest; `mode: manual` (the default) queues every item for a person unless "
    "`applyMode` is `auto_low`, which applies the low-risk ones too."
)


class OrganizeRequestSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["user", "workspace"], default="user")
    userId = serializers.CharField(
        max_length=150,
        required=False,
        allow_null=True,
        source="user_id",
        help_text="Whose user scope (username); a person's own by default.",
    )
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    mode = serializers.ChoiceField(
        choices=OrganizeTrigger.values,
        default=OrganizeTrigger.MANUAL,
        help_text="The trigger whose gate rules apply.",
    )
    applyMode = serializers.ChoiceField(
        choices=OrganizeMode.values,
        default=OrganizeMode.REVIEW,
        source="apply_mode",
        help_text="For manual runs: review or auto_low.",
    )


class OrganizeQueuedSerializer(serializers.Serializer):
    runId = serializers.UUIDField()


class OrganizeItemSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    action = serializers.ChoiceField(choices=OrganizeAction.values)
    members = serializers.ListField(child=serializers.UUIDField())
    targetId = serializers.UUIDField(allow_null=True)
    proposed = serializers.DictField(
        allow_null=True, help_text="The merged or rewritten title, content, value."
    )
    planner = serializers.CharField(help_text="rules or llm:<model>")
    confidence = serializers.FloatField()
    risk = serializers.ChoiceField(choices=OrganizeRisk.values)
    riskReasons = serializers.ListField(child=serializers.CharField())
    decision = serializers.ChoiceField(choices=OrganizeDecision.values)
    reason = serializers.CharField(allow_blank=True)
    resultNodeId = serializers.UUIDField(allow_null=True)
    decidedAt = serializers.DateTimeField(allow_null=True)


class OrganizeRunSerializer(serializers.Serializer):
    runId = serializers.UUIDField()
    state = serializers.ChoiceField(choices=OrganizeState.values)
    phase = serializers.ChoiceField(choices=OrganizePhase.values)
    scope = serializers.CharField()
    owner = serializers.CharField(help_text="user:<id> or workspace:<id>")
    trigger = serializers.ChoiceField(choices=OrganizeTrigger.values)
    mode = serializers.ChoiceField(choices=OrganizeMode.values)
    before = serializers.IntegerField(allow_null=True)
    after = serializers.IntegerField(allow_null=True)
    compressionRatio = serializers.FloatField(allow_null=True, help_text="after / before")
    tokensUsed = serializers.IntegerField()
    headroomAtStart = serializers.IntegerField(allow_null=True)
    planner = serializers.CharField(allow_blank=True)
    rejections = serializers.DictField(child=serializers.IntegerField(), help_text="{reason code: count}")
    error = serializers.CharField(allow_blank=True)
    requestedBy = serializers.CharField()
    createdAt = serializers.DateTimeField()
    finishedAt = serializers.DateTimeField(allow_null=True)
    items = OrganizeItemSerializer(many=True)


class OrganizeDecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["apply", "dismiss"])


def item_to_api(item: OrganizeItem) -> dict[str, Any]:
    return {
        "id": str(item.pk),
        "action": item.action,
        "members": [str(m) for m in item.members],
        "targetId": str(item.target_id) if item.target_id else None,
        "proposed": item.proposed,
        "planner": item.planner,
        "confidence": item.confidence,
        "risk": item.risk,
        "riskReasons": list(item.risk_reasons),
        "decision": item.decision,
        "reason": item.reason,
        "resultNodeId": str(item.result_node_id) if item.result_node_id else None,
        "decidedAt": iso(item.decided_at),
    }


def run_to_api(run: OrganizeRun) -> dict[str, Any]:
    return {
        "runId": str(run.pk),
        "state": run.state,
        "phase": run.phase,
        "scope": run.scope,
        "owner": run.owner_ref,
        "trigger": run.trigger,
        "mode": run.mode,
        "before": run.cards_before,
        "after": run.cards_after,
        "compressionRatio": run.compression_ratio,
        "tokensUsed": run.tokens_used,
        "headroomAtStart": run.headroom_at_start,
        "planner": run.planner,
        "rejections": run.rejections,
        "error": run.error,
        "requestedBy": run.requested_by,
        "createdAt": iso(run.created_at),
        "finishedAt": iso(run.finished_at),
        "items": [item_to_api(i) for i in getattr(run, "item_list", [])],
    }


class OrganizeApi(MemoryApiView):
    @extend_schema(
        operation_id="memory_organize",
        request=OrganizeRequestSerializer,
        description="Queue an organizer run over one user or workspace scope (the caller's write "
        "scopes and workspace pin, as memory/write). " + MATRIX + " " + REACH,
        responses={202: OrganizeQueuedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = _parse(OrganizeRequestSerializer, request.data)
        viewer = self.viewer(workspace_ref=data.get("workspace_id"), user_ref=data.get("user_id"))
        run = organize_request(
            viewer=viewer, scope=data["scope"], trigger=data["mode"], mode=data["apply_mode"]
        )
        return Response({"runId": str(run.pk)}, status=202)


class OrganizeStatusApi(MemoryApiView):
    @extend_schema(
        operation_id="memory_organize_status",
        responses={200: OrganizeRunSerializer, **ERRORS},
        description="A run's state, phase, counts and items. Another tenant's, workspace's or "
        "person's run answers 404, like an unknown id.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(run_to_api(organize_get(viewer=self.viewer(), run_id=run_id)))


class OrganizeItemApi(MemoryApiView):
    @extend_schema(
        operation_id="memory_organize_item",
        request=OrganizeDecisionSerializer,
        responses={200: OrganizeItemSerializer, **ERRORS},
        description="Apply or dismiss a queued item (its cluster changes all or nothing); an item "
        "already decided answers 409 `conflict`.",
    )
    def post(self, request: Request, run_id: str, item_id: str) -> Response:
        data = _parse(OrganizeDecisionSerializer, request.data)
        item = organize_item_decide(
            viewer=self.viewer(), run_id=run_id, item_id=item_id, decision=data["decision"]
        )
        return Response(item_to_api(item))
