"""Extended statistics on the columns a search's visibility filter combines, so the planner knows a tenant's size.

A search filters by tenant, then by scope with workspace or user, and by status (memory.visibility).
Estimated column by column, a tenant of 100k cards in a table of 1M looks like ~500 rows, and the planner
then sorts the whole tenant by vector distance instead of walking an HNSW index. A multivariate MCV list
over those columns (at a statistics target of 1000, so tenants down to ~0.1 % of the table are in it) lets
it count them; messages get the same over tenant, workspace and channel.
"""

from django.db import migrations

STATISTICS = [
    ("node_visibility_stats", "memory_memorynode", "tenant_id, workspace_id, user_id, scope, status"),
    ("message_visibility_stats", "memory_memorymessage", "tenant_id, workspace_id, channel"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0008_term_stats"),
    ]

    operations = [
        migrations.RunSQL(
            f"CREATE STATISTICS IF NOT EXISTS {name} (mcv, dependencies) ON {columns} FROM {table}; "
            f"ALTER STATISTICS {name} SET STATISTICS 1000;",
            f"DROP STATISTICS IF EXISTS {name};",
        )
        for name, table, columns in STATISTICS
    ]
