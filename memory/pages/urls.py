"""URLs of the browser pages (no namespace: `login` is settings.LOGIN_URL)."""

from django.urls import path

from memory.pages.views import (
    api_keys,
    dashboard,
    journal,
    memories,
    organizer,
    quota,
    review,
    sessions,
    signin,
    webhooks,
    workspace,
)

urlpatterns = [
    path("", dashboard.dashboard_view, name="dashboard"),
    path("login/", signin.login_view, name="login"),
    path("logout/", signin.logout_view, name="logout"),
    path("switch/tenant/", dashboard.switch_tenant, name="switch-tenant"),
    path("switch/workspace/", dashboard.switch_workspace, name="switch-workspace"),
    path("memories/", memories.memory_list, name="memory-list"),
    path("memories/forget/", memories.memory_bulk_forget, name="memory-bulk-forget"),
    path("memories/<uuid:node_id>/", memories.memory_detail, name="memory-detail"),
    path("memories/<uuid:node_id>/edit/", memories.memory_edit, name="memory-edit"),
    path("memories/<uuid:node_id>/forget/", memories.memory_forget, name="memory-forget"),
    path("memories/<uuid:node_id>/restore/", memories.memory_restore, name="memory-restore"),
    path("review/", review.review_list, name="review-list"),
    path("review/act/", review.review_act, name="review-act"),
    path("sessions/", sessions.session_list, name="session-list"),
    path("sessions/<path:session_id>/", sessions.session_detail, name="session-detail"),
    path("workspace/", workspace.workspace_view, name="workspace"),
    path("workspace/export.sqlite", workspace.workspace_export, name="workspace-export"),
    path("workspace/import/", workspace.workspace_import, name="workspace-import"),
    path("journal/", journal.journal_view, name="journal"),
    path("quota/", quota.quota_view, name="quota"),
    path("organizer/", organizer.organizer_view, name="organizer"),
    path("organizer/<uuid:run_id>/", organizer.organizer_run, name="organizer-run"),
    path("organizer/<uuid:run_id>/items/<uuid:item_id>/", organizer.organizer_item, name="organizer-item"),
    path("keys/", api_keys.api_keys, name="apikey-list"),
    path("keys/<int:key_id>/revoke/", api_keys.api_key_revoke_view, name="apikey-revoke"),
    path("webhooks/", webhooks.webhook_list, name="webhook-list"),
    path("webhooks/<int:endpoint_id>/resume/", webhooks.webhook_resume, name="webhook-resume"),
    path("webhooks/<int:endpoint_id>/rotate/", webhooks.webhook_rotate, name="webhook-rotate"),
    path("webhooks/<int:endpoint_id>/delete/", webhooks.webhook_delete, name="webhook-delete"),
]
