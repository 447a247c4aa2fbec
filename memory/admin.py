"""Read-only admin views of memory for operators: nodes and their audit trail (edits go through services)."""

from django.contrib import admin
from django.http import HttpRequest

from memory.models import MemoryAuditEvent, MemoryNode
from tenants.admin import AllTenantsAdmin


class ReadOnlyAdmin(AllTenantsAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(MemoryNode)
class MemoryNodeAdmin(ReadOnlyAdmin):
    list_display = ["title", "key", "scope", "status", "revision", "tenant", "workspace", "updated_at"]
    list_filter = ["tenant", "scope", "status", "type", "kind", "domain"]
    search_fields = ["title", "content", "key"]
    exclude = ["embedding", "search_vector"]


@admin.register(MemoryAuditEvent)
class MemoryAuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "event_type", "actor", "node_id", "tenant", "reason"]
    list_filter = ["tenant", "event_type", "actor", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["actor", "reason", "node_id"]
    date_hierarchy = "created_at"
