"""The cards' visibility statistics keep 100 combinations, not 1,000: the planner walks the whole list per scan.

0009's multivariate MCV list over (tenant, workspace, user, scope, status) at a statistics target of 1000
cost the planner ~12 ms per text search at 1M cards (each of the statement's five or six scans of the
card table matches its OR-ed visibility clauses against every list item), three times the statement's
execution. At 100 the list still holds the biggest tenants' combinations (those with their own indexes,
memory.tenant_indexes), whose sizes are what the estimate needs; planning fell to ~4 ms.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0010_leakproof_text_match"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER STATISTICS node_visibility_stats SET STATISTICS 100;",
            "ALTER STATISTICS node_visibility_stats SET STATISTICS 1000;",
        ),
    ]
