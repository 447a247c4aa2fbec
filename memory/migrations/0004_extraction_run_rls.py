from django.db import migrations

from tenants.db_roles import TenantRowLevelSecurity


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_extraction_run")]

    operations = [TenantRowLevelSecurity("memory_extractionrun")]
