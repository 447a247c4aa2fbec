"""The context pack's standing cards in its order (memory.models.RECALLED_CARDS, STANDING_CARDS): built
CONCURRENTLY, so writes go on meanwhile."""

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
            index=models.Index(condition=models.Q(('kind__in', ['accessibility_need', 'communication_preference', 'hard_constraint', 'interaction_contract', 'language_preference']), ('status', 'active')), fields=['tenant', '-importance', '-confidence', '-updated_at', 'id'], name='node_recalled_idx'),
        ),
        AddIndexConcurrently(
            model_name='memorynode',
            index=models.Index(condition=models.Q(models.Q(('kind__in', ['accessibility_need', 'communication_preference', 'hard_constraint', 'interaction_contract', 'language_preference']), ('status', 'active')), models.Q(('status', 'active'), ('type__in', ['task', 'constraint', 'preference'])), _connector='OR'), fields=['tenant', '-importance', '-confidence', '-updated_at', 'id'], name='node_standing_idx'),
        ),
    ]
