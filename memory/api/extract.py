"""Extraction endpoints: `POST extract` queues a background run, `GET extract/{taskId}` shows its state."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api.base import MemoryApiView
from memory.api.serializers import IdOrSlugField
from memory.api.views import ERRORS, REACH, _parse
from memory.errors import Forbidden
from memory.models import ExtractionRun, ExtractionStatus
from memory.pipeline.runs import extraction_get
from memory.pipeline.triggers import extraction_request
from memory.presenters import iso

OUTCOMES = ["applied", "noop", "skipped", "ignored"]


class ExtractRequestSerializer(serializers.Serializer):
    sessionId = serializers.CharField(max_length=200, source="session_id")
    workspaceId = IdOrSlugField(required=False, allow_null=True, source="workspace_id")
    userId = serializers.CharField(
        max_length=150,
        required=False,
        allow_null=True,
        source="user_id",
        help_text="Whose memories these messages are, when the messages carry no user.",
    )


class ExtractQueuedSerializer(serializers.Serializer):
    taskId = serializers.UUIDField()
    state = serializers.ChoiceField(choices=ExtractionStatus.values)


class ExtractItemResultSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    operation = serializers.ChoiceField(choices=["create", "update", "supersede", "expire", "ignore"])
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    reason = serializers.CharField(allow_blank=True)
    sourceMessageIds = serializers.ListField(child=serializers.CharField())
    kind = serializers.CharField(required=False, allow_null=True)
    key = serializers.CharField(required=False)
    action = serializers.ChoiceField(
        choices=["created", "updated", "superseded", "expired", "noop"], required=False
    )
    nodeId = serializers.UUIDField(required=False)
    revision = serializers.IntegerField(required=False)
    scope = serializers.CharField(required=False)
    title = serializers.CharField(required=False)
    appliedConfidence = serializers.FloatField(required=False)
    notes = serializers.ListField(child=serializers.CharField(), required=False)
    code = serializers.CharField(
        required=False, help_text="Why a skipped item was refused (an API error code)."
    )
    detail = serializers.CharField(required=False)


class ExtractSummaryResultSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    source = serializers.CharField(help_text="rules or llm:<model>")
    parentSummaryId = serializers.UUIDField(allow_null=True)
    fromMessageId = serializers.CharField()
    toMessageId = serializers.CharField()


class ExtractResultsSerializer(serializers.Serializer):
    extractor = serializers.CharField(
        help_text="rules, llm:<model>, or none when no message was worth reading"
    )
    messageCount = serializers.IntegerField()
    counts = serializers.DictField(child=serializers.IntegerField())
    items = ExtractItemResultSerializer(many=True)
    summaryPatch = serializers.CharField(allow_null=True)
    summary = ExtractSummaryResultSerializer(allow_null=True)
    warnings = serializers.ListField(child=serializers.CharField())


class ExtractStatusSerializer(serializers.Serializer):
    taskId = serializers.UUIDField()
    state = serializers.ChoiceField(choices=ExtractionStatus.values)
    sessionId = serializers.CharField()
    workspaceId = serializers.CharField()
    trigger = serializers.CharField()
    attempts = serializers.IntegerField()
    createdAt = serializers.DateTimeField()
    updatedAt = serializers.DateTimeField()
    nextRetryAt = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(required=False, help_text="The last failure, while retrying or failed.")
    results = ExtractResultsSerializer(required=False, help_text="Present once the run is done.")


def extraction_to_api(run: ExtractionRun) -> dict[str, Any]:
    body: dict[str, Any] = {
        "taskId": str(run.pk),
        "state": run.status,
        "sessionId": run.session_id,
        "workspaceId": str(run.workspace_id),
        "trigger": run.trigger,
        "attempts": run.attempts,
        "createdAt": iso(run.created_at),
        "updatedAt": iso(run.updated_at),
        "nextRetryAt": iso(run.next_retry_at),
    }
    if run.error:
        body["error"] = run.error
    if run.results is not None:
        body["results"] = run.results
    return body


class ExtractApi(MemoryApiView):
    @extend_schema(
        operation_id="extract_request",
        description=REACH,
        request=ExtractRequestSerializer,
        responses={202: ExtractQueuedSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = _parse(ExtractRequestSerializer, request.data)
        if self.principal.read_only:
            raise Forbidden("This key is read-only; extraction writes memories.")
        viewer = self.viewer(
            workspace_ref=data.get("workspace_id"),
            session_id=data["session_id"],
            user_ref=data.get("user_id"),
        )
        run = extraction_request(viewer=viewer, session_id=data["session_id"])
        return Response({"taskId": str(run.pk), "state": run.status}, status=202)


class ExtractStatusApi(MemoryApiView):
    @extend_schema(operation_id="extract_status", responses={200: ExtractStatusSerializer, **ERRORS})
    def get(self, request: Request, task_id: str) -> Response:
        run = extraction_get(viewer=self.viewer(), run_id=task_id)
        return Response(extraction_to_api(run))
