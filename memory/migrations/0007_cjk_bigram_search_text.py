"""Re-segment the search text of Chinese cards and messages: documents now index character bigrams.

Only rows whose search text holds CJK characters change (other text segments as before). Idempotent:
a row already segmented the new way is written with the same text.
"""

from django.db import migrations

from memory.rules.node_text import node_search_text
from memory.rules.text import segment_for_search

BATCH = 2000
HAS_CJK = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"


def _resegment(model, alias, fields, search_text) -> None:
    # The owner connection migrates; the application role would see no row under row-level security.
    manager = model.objects.db_manager(alias)
    rows = manager.filter(search_text__regex=HAS_CJK).only("pk", *fields).order_by("pk")
    last = None
    while True:
        page = rows if last is None else rows.filter(pk__gt=last)
        batch = list(page[:BATCH])
        if not batch:
            return
        for row in batch:
            row.search_text = search_text(row)
        manager.bulk_update(batch, ["search_text"])
        last = batch[-1].pk


def resegment(apps, schema_editor) -> None:
    alias = schema_editor.connection.alias
    _resegment(apps.get_model("memory", "MemoryMessage"), alias, ["content"],
               lambda message: segment_for_search(message.content))
    _resegment(
        apps.get_model("memory", "MemoryNode"),
        alias,
        ["title", "content", "value_json", "item_key", "tags", "entities"],
        lambda node: node_search_text(title=node.title, content=node.content, value_json=node.value_json,
                                      item_key=node.item_key, tags=node.tags, entities=node.entities),
    )


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_audit_chain_read_audit")]

    operations = [migrations.RunPython(resegment, migrations.RunPython.noop, elidable=True)]
