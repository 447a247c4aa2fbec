"""URLs of the browser pages (no namespace: `login` is settings.LOGIN_URL)."""

from django.urls import path

from memory.pages import views

urlpatterns = [
    path("", views.dashboard_view, name="dashboard"),
    path("login/", views.login_view, name="login"),
    path("logout/", views.logout_view, name="logout"),
    path("switch/tenant/", views.switch_tenant, name="switch-tenant"),
    path("switch/workspace/", views.switch_workspace, name="switch-workspace"),
    path("memories/", views.memory_list, name="memory-list"),
    path("memories/forget/", views.memory_bulk_forget, name="memory-bulk-forget"),
    path("memories/<uuid:node_id>/", views.memory_detail, name="memory-detail"),
    path("memories/<uuid:node_id>/edit/", views.memory_edit, name="memory-edit"),
    path("memories/<uuid:node_id>/forget/", views.memory_forget, name="memory-forget"),
    path("memories/<uuid:node_id>/restore/", views.memory_restore, name="memory-restore"),
    path("sessions/", views.session_list, name="session-list"),
    path("sessions/<path:session_id>/", views.session_detail, name="session-detail"),
    path("workspace/", views.workspace_view, name="workspace"),
    path("workspace/export.sqlite", views.workspace_export, name="workspace-export"),
    path("workspace/import/", views.workspace_import, name="workspace-import"),
    path("keys/", views.api_keys, name="apikey-list"),
    path("keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="apikey-revoke"),
]
