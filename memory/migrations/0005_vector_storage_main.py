from django.db import migrations

# A 512-d vector (2 KiB) is just over PostgreSQL's TOAST threshold, so by default every vector lives
# out of line and an exact scan reads three extra pages per row. MAIN keeps it in the row whenever
# the row fits a page (measured: 3x fewer buffers on an exact top-k scan).
TABLES = ["memory_memorynode", "memory_memorymessage"]


class Migration(migrations.Migration):
    dependencies = [("memory", "0004_extraction_run_rls")]

    operations = [
        migrations.RunSQL(
            [f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN" for table in TABLES],
            [f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE EXTERNAL" for table in TABLES],
        )
    ]
