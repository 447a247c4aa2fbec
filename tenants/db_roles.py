"""Database roles and row-level security: the policy every tenant table carries, and grants for `ekko_app`.

Migrations run as the owner; the application connects as `ekko_app`, which owns nothing and is
no superuser, so the policies below apply to every query it makes. A row is visible (and
writable) only when its `tenant_id` equals the transaction-local `ekko.tenant_id` setting, or
inside the explicit all-tenants bypass (`ekko.all_tenants = 'on'`).
"""

from __future__ import annotations

from django.db import migrations

APP_ROLE = "ekko_app"
POLICY_NAME = "tenant_isolation"
_POLICY_PREDICATE = (
    "(tenant_id = NULLIF(current_setting('ekko.tenant_id', true), '')::bigint "
    "OR current_setting('ekko.all_tenants', true) = 'on')"
)


def enable_rls_sql(table: str) -> str:
    return (
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY; '
        f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY; '
        f'CREATE POLICY {POLICY_NAME} ON "{table}" USING {_POLICY_PREDICATE} WITH CHECK {_POLICY_PREDICATE};'
    )


def disable_rls_sql(table: str) -> str:
    return (
        f'DROP POLICY IF EXISTS {POLICY_NAME} ON "{table}"; '
        f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY; '
        f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY;'
    )


def TenantRowLevelSecurity(table: str) -> migrations.RunSQL:  # noqa: N802 - reads like an operation class
    """Migration operation: enable and force RLS on `table` with the tenant policy."""
    return migrations.RunSQL(enable_rls_sql(table), disable_rls_sql(table))


def grant_app_role(sender, using: str = "default", **kwargs) -> None:  # noqa: ANN001 - signal receiver
    """After `migrate`, give `ekko_app` data access (not ownership) to every table and sequence."""
    from django.db import connections

    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE])
        if cursor.fetchone() is None:
            raise RuntimeError(
                f"The database role {APP_ROLE!r} is missing. Create it as a superuser: "
                f"CREATE ROLE {APP_ROLE} LOGIN PASSWORD '...'; (docker-compose and the embedded database do this)."
            )
        cursor.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {APP_ROLE}; "
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {APP_ROLE};"
        )
