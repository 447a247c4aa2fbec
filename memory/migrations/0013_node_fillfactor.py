"""Leave a fifth of each card page free, so access bumps are HOT updates instead of new index entries.

Every search bumps the returned cards' `access_count` and `last_accessed_at` (memory.services.maintenance,
after the commit). Neither column is indexed, but on a full page an UPDATE writes the new row version to
another page, and every index of the table gets an entry for it: two HNSW graphs (the shared one and a
big tenant's own), two GIN indexes and a dozen B-trees per card — 70-200 ms of background work per search
of 20 cards at 1M cards. With free space on the page the new version stays there (a heap-only tuple) and
no index is touched. Pages written from now on keep the space; existing pages get it when the table is
rewritten (VACUUM FULL, or pg_repack without a long lock): docs/scale-out.md, "One machine".
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0012_standing_cards_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memorynode SET (fillfactor = 80);",
            "ALTER TABLE memory_memorynode RESET (fillfactor);",
        ),
    ]
