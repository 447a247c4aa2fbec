"""The operators' admin site: it audits every tenant, so its views run in the all-tenants context."""

from functools import wraps

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig

from tenants.context import all_tenants_context


class EkkoAdminSite(admin.AdminSite):
    site_header = "Ekko Memory operations"
    site_title = "Ekko admin"

    def admin_view(self, view, cacheable=False):  # noqa: ANN001, ANN201
        guarded = super().admin_view(view, cacheable)

        @wraps(view)
        def across_tenants(request, *args, **kwargs):  # noqa: ANN001, ANN202
            # Only staff reach `guarded`'s view; the bypass lasts until the response is rendered.
            with all_tenants_context():
                response = guarded(request, *args, **kwargs)
                if hasattr(response, "render") and not getattr(response, "is_rendered", True):
                    response.render()
                return response

        return across_tenants


class EkkoAdminConfig(AdminConfig):
    default_site = "ekko_site.admin_site.EkkoAdminSite"
