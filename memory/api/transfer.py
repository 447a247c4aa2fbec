"""Workspace export and import over the API: the Ekko local SQLite format of memory.transfer.sqlite_io."""

from __future__ import annotations

import os
import tempfile

from django.conf import settings
from django.db import transaction
from django.http import FileResponse
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiResponse, OpenApiTypes, extend_schema
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from memory.api.base import MemoryApiView
from memory.api.views import ERRORS
from memory.errors import Forbidden, Invalid
from memory.transfer.sqlite_io import workspace_export_sqlite, workspace_import_sqlite
from tenants.models import Tenant, Workspace


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

    @extend_schema(operation_id="workspace_export", responses={
        (200, "application/vnd.sqlite3"): OpenApiResponse(OpenApiTypes.BINARY, description="The SQLite file"),
        **ERRORS})
    def get(self, request: Request, workspace_id: str) -> FileResponse:
        viewer = self.viewer(workspace_ref=workspace_id)
        return sqlite_download(viewer.tenant, viewer.workspace)


def sqlite_download(tenant: Tenant, workspace: Workspace) -> FileResponse:
    """Export `workspace` to a temporary file and stream it as an attachment (the API's and the pages')."""
    descriptor, path = tempfile.mkstemp(prefix="ekko-export-", suffix=".sqlite")
    os.close(descriptor)
    try:
        workspace_export_sqlite(tenant=tenant, workspace=workspace, path=path)
        handle = open(path, "rb")  # noqa: SIM115 - FileResponse closes it
    finally:
        os.unlink(path)  # the open handle keeps the data until the response is sent
    response = FileResponse(handle, as_attachment=True, filename=f"{tenant.slug}-{workspace.slug}.sqlite",
                            content_type="application/vnd.sqlite3")
    response["Cache-Control"] = "no-store"
    return response


class WorkspaceImportApi(MemoryApiView):
    parser_classes = [MultiPartParser]

    @property
    def max_body_bytes(self) -> int:
        return settings.EKKO_MAX_IMPORT_BYTES

    @extend_schema(operation_id="workspace_import", request={"multipart/form-data": ImportUploadSerializer},
                   responses={200: ImportReportSerializer, **ERRORS})
    def post(self, request: Request, workspace_id: str) -> Response:
        principal = self.principal
        if principal.read_only or (principal.user is not None and not principal.is_admin):
            raise Forbidden("Importing needs a writable API key or a tenant admin.")
        viewer = self.viewer(workspace_ref=workspace_id)
        upload = request.FILES.get("file")
        if upload is None:
            raise Invalid("Send the SQLite file as the multipart field `file`.", errors={"file": ["required"]})
        with tempfile.NamedTemporaryFile(prefix="ekko-import-", suffix=".sqlite") as copy:
            for chunk in upload.chunks():
                copy.write(chunk)
            copy.flush()
            report = workspace_import_sqlite(tenant=viewer.tenant, workspace=viewer.workspace, path=copy.name,
                                             actor=principal.actor)
        return Response(report.as_json())
