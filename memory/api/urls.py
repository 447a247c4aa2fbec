from django.urls import path

from memory.api import extract, organize, quota, transfer, views

urlpatterns = [
    path("workspaces", views.WorkspacesApi.as_view(), name="api-workspaces"),
    path("workspaces/<str:workspace_id>/export.sqlite", transfer.WorkspaceExportApi.as_view(),
         name="api-workspace-export"),
    path("workspaces/<str:workspace_id>/import", transfer.WorkspaceImportApi.as_view(), name="api-workspace-import"),
    path("messages", views.MessagesApi.as_view(), name="api-messages"),
    path("messages/search", views.MessageSearchApi.as_view(), name="api-messages-search"),
    path("memory/search", views.MemorySearchApi.as_view(), name="api-memory-search"),
    path("memory/nodes/<str:node_id>", views.NodeDetailApi.as_view(), name="api-node"),
    path("memory/nodes/<str:node_id>/history", views.NodeHistoryApi.as_view(), name="api-node-history"),
    path("memory/get", views.MemoryGetApi.as_view(), name="api-memory-get"),
    path("memory/write", views.MemoryWriteApi.as_view(), name="api-memory-write"),
    path("memory/quota", quota.MemoryQuotaApi.as_view(), name="api-memory-quota"),
    path("memory/organize", organize.OrganizeApi.as_view(), name="api-memory-organize"),
    path("memory/organize/<str:run_id>", organize.OrganizeStatusApi.as_view(),
         name="api-memory-organize-status"),
    path("memory/organize/<str:run_id>/items/<str:item_id>", organize.OrganizeItemApi.as_view(),
         name="api-memory-organize-item"),
    path("memory/forget", views.MemoryForgetApi.as_view(), name="api-memory-forget"),
    path("context", views.ContextApi.as_view(), name="api-context"),
    path("summaries", views.SummariesApi.as_view(), name="api-summaries"),
    path("summaries/latest", views.SummaryLatestApi.as_view(), name="api-summaries-latest"),
    path("tools", views.ToolsApi.as_view(), name="api-tools"),
    path("extract", extract.ExtractApi.as_view(), name="api-extract"),
    path("extract/<str:task_id>", extract.ExtractStatusApi.as_view(), name="api-extract-status"),
]
