from django.db import migrations

from tenants.db_roles import TenantRowLevelSecurity


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        TenantRowLevelSecurity("memory_memorymessage"),
        TenantRowLevelSecurity("memory_memorysummary"),
        TenantRowLevelSecurity("memory_memorynode"),
        TenantRowLevelSecurity("memory_memoryauditevent"),
        TenantRowLevelSecurity("memory_memorykind"),
    ]
