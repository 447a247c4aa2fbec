"""Top-level URLs: the agent API under /api/v1/, its schema and docs, Django admin, the browser pages,
`/healthz` and `/metrics`. (`/mcp` is not a Django URL: ekko_site.asgi routes it to memory.api.mcp.)"""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from ekko_site.health import healthz
from ekko_site.metrics import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("memory.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularRedocView.as_view(url_name="schema"), name="api-docs"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("memory.pages.urls")),
]
