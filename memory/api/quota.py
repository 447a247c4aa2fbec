"""`GET memory/quota`: how full each scope owner's memory is, and the ladder level of the tightest one.

Also the 409 body of a write the quota refuses (`quota_exceeded`), which memory/write and the workspace
import document.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory.access import quota_owners
from memory.api.base import MemoryApiView
from memory.api.serializers import ConflictSerializer, ErrorSerializer, IdOrSlugField
from memory.presenters import quota_to_api
from memory.services.quota import LADDER, Level, quota_report
from memory.services.quota import QUOTA_SCOPES as QUOTA_SCOPE_VALUES

LEVELS = [Level.NORMAL, *(level for level, _ in reversed(LADDER))]
QUOTA_SCOPES = [str(scope) for scope in QUOTA_SCOPE_VALUES]
OWNER_HELP = ("Who the memory belongs to: the member's username for a `user` scope, the workspace id (as "
              "`workspaceId` in a card) for a `workspace` scope.")


class QuotaFieldsMixin(serializers.Serializer):
    scope = serializers.ChoiceField(choices=QUOTA_SCOPES, required=False,
                                    help_text="quota_exceeded: the scope of the owner that is full.")
    owner = serializers.CharField(required=False, help_text="quota_exceeded: " + OWNER_HELP)
    used = serializers.IntegerField(required=False, help_text="quota_exceeded: its ordinary active cards.")
    limit = serializers.IntegerField(required=False, help_text="quota_exceeded: the tenant's card limit.")
    headroom = serializers.IntegerField(
        required=False, help_text="quota_exceeded: how many more cards it may take (nothing was written).")


class QuotaConflictSerializer(QuotaFieldsMixin, ConflictSerializer):
    """A 409 of memory/write: `revision_conflict`, `requires_confirmation` or `quota_exceeded`."""


class ImportConflictSerializer(QuotaFieldsMixin, ErrorSerializer):
    """A 409 of an import: `quota_exceeded` (the file would take an owner past the limit) or `conflict`."""


class QuotaQuerySerializer(serializers.Serializer):
    workspaceId = IdOrSlugField(required=False, source="workspace_id",
                                help_text="Only this workspace's quota (id or slug).")
    userId = serializers.CharField(max_length=150, required=False, source="user_id",
                                   help_text="Only this member's user-scope quota (username).")


class ScopeQuotaSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=QUOTA_SCOPES)
    owner = serializers.CharField(help_text=OWNER_HELP)
    used = serializers.IntegerField(help_text="Ordinary active cards (not session scope, not the journal).")
    limit = serializers.IntegerField(help_text="The tenant's card limit per scope owner.")
    headroom = serializers.IntegerField(help_text="How many more cards a create may add (limit − used, ≥ 0).")
    unreviewed = serializers.IntegerField(help_text="Of `used`, cards no person has reviewed yet.")
    oldestUnreviewedDays = serializers.IntegerField(
        allow_null=True, help_text="Whole days since the oldest unreviewed card was written; null when none.")
    level = serializers.ChoiceField(choices=LEVELS)


class QuotaSerializer(serializers.Serializer):
    scopes = ScopeQuotaSerializer(many=True)
    level = serializers.ChoiceField(choices=LEVELS, help_text="The ladder level of the tightest scope owner.")


class MemoryQuotaApi(MemoryApiView):
    @extend_schema(operation_id="memory_quota", parameters=[QuotaQuerySerializer], description=(
        "How full each scope owner's memory is. Unnamed, the owners the caller may see: the workspaces it "
        "may name (a pinned key: its own; a person: `default` and theirs) and the people it may act for (a "
        "person: themselves; keys, owners and admins: every member). `workspaceId` and/or `userId` narrow it "
        "to those owners; outside the caller's reach they answer 404 (a pinned key's other workspace 403). "
        "Levels by headroom: normal (> 100 left), notice (≤ 100), degraded (≤ 50), critical (≤ 20), "
        "exhausted (≤ 5). A create beyond the headroom is refused with 409 `quota_exceeded`."),
        responses={200: QuotaSerializer,
                   **{status: OpenApiResponse(ErrorSerializer) for status in (400, 401, 403, 404, 429, 503)}})
    def get(self, request: Request) -> Response:
        query = QuotaQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        owners = quota_owners(self.principal, workspace_ref=query.validated_data.get("workspace_id"),
                              user_ref=query.validated_data.get("user_id"))
        return Response(quota_to_api(quota_report(tenant=self.principal.tenant, owners=owners)))
