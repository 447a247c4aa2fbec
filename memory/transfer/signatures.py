"""The row and search-text signatures of an Ekko local file: how an import trusts rows this server wrote.

jieba segments about 4,000 cards a second and checking every field of a row costs more than
inserting it: a 100k-card import would miss its budget doing either for rows it wrote itself.
So the export signs, and the import verifies, two BLAKE2 MACs keyed with the server secret and the
search-text version (`search_text_version`). The version names what decides the tokens — jieba's
release (its dictionary ships inside it), the stemmer's release, the Unicode tables behind NFKC
and the explicit `SEARCH_TEXT_VERSION` beside `memory.rules.node_text.node_search_text` — never
the bytes of a source file, so editing a comment does not send every later import down the slow
path, and changing the tokens is a deliberate bump.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import version
from typing import Any

from django.conf import settings

from memory.rules.node_text import SEARCH_TEXT_VERSION, node_search_text
from memory.transfer.sqlite_format import Column

__all__ = ["NODE_SEARCH_COLUMNS", "SearchTextSigner", "node_file_search_text", "search_text_version"]

# The file columns a node's search text is made of, in the order its signature covers them.
NODE_SEARCH_COLUMNS = ("title", "content", "value_json", "item_key", "tags_json", "entities_json")


def node_file_search_text(inputs: Sequence[str]) -> str:
    """Return a node's search text from its file texts (NODE_SEARCH_COLUMNS order, JSON as in the file)."""
    title, content, value_json, item_key, tags, entities = inputs
    return node_search_text(
        title=title, content=content, value_json=json.loads(value_json) if value_json else None,
        item_key=item_key or None, tags=json.loads(tags or "[]"), entities=json.loads(entities or "[]"),
    )


@lru_cache(maxsize=1)
def search_text_version() -> str:
    """Return the id of the search-text rules in force: the inputs that decide which tokens a text gets."""
    return (
        f"jieba-{version('jieba')}/snowball-{version('snowballstemmer')}/"
        f"unicode-{unicodedata.unidata_version}/text-{SEARCH_TEXT_VERSION}"
    )


class SearchTextSigner:
    """Vouch for rows and search text this server wrote, so an import may trust them instead of redoing work.

    `search_text_sig` covers a row's words and its segmented text: the text is reused when they are
    unchanged. `row_sig` covers every column of the row: an unchanged row skips the field-by-field
    checks (they held when the row left this server's database). Anything written by someone else,
    or edited, is checked and segmented again.
    """

    def __init__(self) -> None:
        self.key = hashlib.sha256(b"ekko.sqlite_io.search_text" + settings.SECRET_KEY.encode()).digest()
        self.segmenter = search_text_version()

    def sign(self, kind: str, inputs: Sequence[str], search_text: str) -> str:
        message = "\x1f".join((kind, self.segmenter, *inputs, search_text)).encode()
        return hashlib.blake2b(message, key=self.key, digest_size=16).hexdigest()

    def verified(self, kind: str, inputs: Sequence[str], search_text: Any, signature: Any) -> bool:
        if not isinstance(search_text, str) or not isinstance(signature, str) or not search_text:
            return False
        return hmac.compare_digest(self.sign(kind, inputs, search_text), signature)

    def row(self, table: str, values: Sequence[Any]) -> str:
        """Return the MAC of a file row: every column before `row_sig`, as the repr of a tuple.

        A tuple's repr quotes its strings and spells ints, floats and None distinctly, so no two rows
        share it; SQLite hands the values back with the same types the export wrote.
        """
        text = f"{table}\x1f{self.segmenter}\x1f{tuple(values)!r}"
        return hashlib.blake2b(text.encode(), key=self.key, digest_size=16).hexdigest()

    def row_verified(self, table: str, columns: tuple[Column, ...], values: dict[str, Any]) -> bool:
        signature = values.get("row_sig")
        if not isinstance(signature, str):
            return False
        ordered = [values.get(column.name) for column in columns[:-1]]
        return hmac.compare_digest(self.row(table, ordered), signature)
