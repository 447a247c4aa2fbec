"""The context pack's standing cards in its order (memory.models.STANDING_CARDS): built CONCURRENTLY, writes go on."""

from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('memory', '0011_visibility_statistics_target'),
        ('tenants', '0002_row_level_security'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='memorynode',
            index=models.Index(condition=models.Q(('status', 'active'), models.Q(('kind__in', ['accessibility_need', 'communication_preference', 'hard_constraint', 'interaction_contract', 'language_preference']), ('type__in', ['task', 'constraint', 'preference']), _connector='OR')), fields=['tenant', '-importance', '-confidence', '-updated_at', 'id'], name='node_standing_idx'),
        ),
    ]
