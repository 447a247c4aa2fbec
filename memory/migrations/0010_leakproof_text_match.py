"""Let row-level security use the text-search indexes: mark `tsvector @@ tsquery` (ts_match_vq) LEAKPROOF.

Under row-level security PostgreSQL evaluates a query's own conditions only after the policy's, unless
their functions are leakproof; an index condition is evaluated before any filter, so `search_vector @@ q`
could never be an index condition for the application's role: every keyword search read every row of
its tenant through the tenant_id b-tree (a 100k-card tenant: 120-500 ms instead of 1-25 ms through its
GIN index). ts_match_vq returns a boolean of two already-parsed values and raises no error that depends
on a row, so it cannot leak what the policy hides. Only a superuser may mark a function leakproof: the
migration does so when the owner connection is one (the embedded server, docker-compose's `ekko`), and
otherwise warns; `manage.py index_health` reports which it is (memory.index_health.text_match_leakproof).
"""

import logging

from django.db import migrations

logger = logging.getLogger(__name__)

TEXT_MATCH = "ts_match_vq(tsvector, tsquery)"


def _is_superuser(cursor) -> bool:  # noqa: ANN001
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    row = cursor.fetchone()
    return bool(row and row[0])


def mark_leakproof(apps, schema_editor) -> None:  # noqa: ANN001
    with schema_editor.connection.cursor() as cursor:
        if _is_superuser(cursor):
            cursor.execute(f"ALTER FUNCTION {TEXT_MATCH} LEAKPROOF")
        else:
            logger.warning(
                "Not a superuser: %s stays non-leakproof, so keyword searches cannot use the GIN indexes "
                "under row-level security. A superuser can run: ALTER FUNCTION %s LEAKPROOF;",
                TEXT_MATCH, TEXT_MATCH)


def unmark_leakproof(apps, schema_editor) -> None:  # noqa: ANN001
    with schema_editor.connection.cursor() as cursor:
        if _is_superuser(cursor):
            cursor.execute(f"ALTER FUNCTION {TEXT_MATCH} NOT LEAKPROOF")


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0009_visibility_statistics"),
    ]

    operations = [migrations.RunPython(mark_leakproof, unmark_leakproof)]
