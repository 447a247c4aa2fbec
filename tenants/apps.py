from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from tenants import db_roles

        post_migrate.connect(db_roles.grant_app_role, dispatch_uid="tenants.grant_app_role")
