from django.db import migrations

from tenants.db_roles import TenantRowLevelSecurity


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]

    operations = [
        TenantRowLevelSecurity("tenants_membership"),
        TenantRowLevelSecurity("tenants_workspace"),
        TenantRowLevelSecurity("tenants_workspacemember"),
        TenantRowLevelSecurity("tenants_apikey"),
    ]
