"""Workspace export and import over the API: the Ekko local SQLite format of memory.transfer."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.http import FileResponse
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse, OpenApiTypes, extend_schema
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from memory.access import may_export, may_import, sqlite_download
from memory.api.base import MemoryApiView
from memory.api.quota import ImportConflictSerializer
from memory.api.views import ERRORS
from memory.errors import Forbidden, Invalid
from memory.transfer.sqlite_import import workspace_import_upload


class ImportUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="An Ekko local-format SQLite file (from export.sqlite).")


class TableCountsSerializer(serializers.Serializer):
    messages = serializers.IntegerField()
    summaries = serializers.IntegerField()
    nodes = serializers.IntegerField()
    auditEvents = serializers.IntegerField()


class ImportReportSerializer(serializers.Serializer):
    imported = TableCountsSerializer()
    updated = TableCountsSerializer()
    skipped = TableCountsSerializer()
    conflicts = serializers.ListField(child=serializers.DictField())
    conflictCount = serializers.IntegerField()
    mode = serializers.ChoiceField(choices=["same_workspace", "copy"])
    vectors = serializers.DictField(child=serializers.IntegerField())
    warnings = serializers.ListField(child=serializers.CharField())


@method_decorator(transaction.non_atomic_requests, name="dispatch")
class WorkspaceExportApi(MemoryApiView):
    """Not in the request transaction: the export reads every table from its own repeatable-read snapshot."""

    @extend_schema(operation_id="workspace_export", description=(
        "Download the workspace as an Ekko local-format SQLite file. It holds everyone's cards of the "
        "workspace, so a browser session needs the owner or admin role (403 otherwise); a workspace the "
        "person does not belong to answers 404. API keys export (a pinned key only its workspace)."),
        responses={(200, "application/vnd.sqlite3"): OpenApiResponse(OpenApiTypes.BINARY,
                                                                       description="The SQLite file"),
                   **ERRORS})
    def get(self, request: Request, workspace_id: str) -> FileResponse:
        viewer = self.viewer(workspace_ref=workspace_id)
        if not may_export(self.principal):
            raise Forbidden("Exporting a workspace needs the owner or admin role: the file holds everyone's.")
        return sqlite_download(viewer)


class WorkspaceImportApi(MemoryApiView):
    parser_classes = [MultiPartParser]

    @property
    def max_body_bytes(self) -> int:
        return settings.EKKO_MAX_IMPORT_BYTES

    @extend_schema(operation_id="workspace_import", request={"multipart/form-data": ImportUploadSerializer},
                   description=("Import an Ekko local-format SQLite file into the workspace. Needs a "
                                "writable API key or, for a browser session, the owner or admin role (403 "
                                "otherwise); a workspace the caller may not reach answers 404. A file whose "
                                "cards would take a user or workspace scope past the tenant's card limit is "
                                "refused whole with 409 `quota_exceeded` (nothing imported)."),
                   responses={200: ImportReportSerializer, **ERRORS,
                              409: OpenApiResponse(ImportConflictSerializer)})
    def post(self, request: Request, workspace_id: str) -> Response:
        principal = self.principal
        viewer = self.viewer(workspace_ref=workspace_id)
        if not may_import(principal):
            raise Forbidden("Importing needs a writable API key or a tenant admin.")
        upload = request.FILES.get("file")
        if upload is None:
            raise Invalid("Send the SQLite file as the multipart field `file`.",
                          errors={"file": ["required"]})
        report = workspace_import_upload(viewer=viewer, chunks=upload.chunks(), actor=principal.actor)
        return Response(report.as_json())
