"""Term statistics of big tenants (memory.services.term_stats), under the tenant row-level-security policy."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

from tenants.db_roles import TenantRowLevelSecurity


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0007_cjk_bigram_search_text'),
        ('tenants', '0002_row_level_security'),
    ]

    operations = [
        migrations.CreateModel(
            name='MemoryTermStat',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('source', models.CharField(choices=[('node', 'Node'), ('message', 'Message')], help_text='The searched table.', max_length=16)),
                ('term', models.CharField(blank=True, max_length=200)),
                ('documents', models.PositiveIntegerField()),
                ('refreshed_at', models.DateTimeField()),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('tenant', 'source', 'term'), name='term_stat_uniq')],
            },
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('all_tenants', django.db.models.manager.Manager()),
            ],
        ),
        TenantRowLevelSecurity("memory_memorytermstat"),
    ]
