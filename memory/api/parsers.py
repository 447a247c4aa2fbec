"""The API's JSON parser: refuses bodies the store cannot keep before any view or service sees them.

DRF's stock parser lets three kinds of body through to a 500 or a misleading 503: JSON nested
deeper than Python's recursion limit (a RecursionError while decoding), values nested deep enough
to exhaust the stack later (serializers, jsonb encoding), and strings PostgreSQL cannot store (NUL
characters, in `text` and in `jsonb` alike, and unpaired UTF-16 surrogates, which have no UTF-8
form) or numbers it cannot (a literal like `1e999` decodes to infinity). This parser answers all of
them with 400 `invalid`, naming the field in `errors` with the same paths the exception handler
uses (`messages[0].metadata.note`). One walk over the parsed body covers every JSON endpoint,
including free-form fields (`metadata`, `valueJson`) that no serializer looks inside.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

# Deep enough for any real body (a write's valueJson sits at level 4), shallow enough that nothing
# downstream (serializers, key canonicalisation, jsonb encoding) can hit the recursion limit.
MAX_DEPTH = 64
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _path(parts: tuple[str | int, ...]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "body"


def _text_problem(text: str) -> str | None:
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "Text cannot contain NUL (\\u0000) characters."
    return f"Text cannot contain an unpaired surrogate (U+{ord(match.group()):04X}); send valid UTF-8."


def unstorable_value_errors(data: Any, *, max_depth: int = MAX_DEPTH,
                            limit: int = 20) -> dict[str, list[str]]:
    """Return `{field path: [message]}` for the values of `data` the store cannot keep (at most `limit`)."""
    errors: dict[str, list[str]] = {}
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack and len(errors) < limit:
        value, parts = stack.pop()
        problem = None
        if len(parts) > max_depth:
            parts, problem = parts[:max_depth], f"Nested deeper than {max_depth} levels."
        elif isinstance(value, str):
            problem = _text_problem(value)
        elif isinstance(value, float) and not math.isfinite(value):
            problem = "Number out of range."
        elif isinstance(value, dict):
            for key, child in value.items():
                key_problem = _text_problem(key)
                if key_problem:
                    errors.setdefault(_path(parts), []).append(f"A key is not storable: {key_problem}")
                stack.append((child, (*parts, key)))
        elif isinstance(value, list):
            stack.extend((child, (*parts, index)) for index, child in enumerate(value))
        if problem and problem not in errors.get(_path(parts), []):
            errors.setdefault(_path(parts), []).append(problem)
    return errors


class StorableJSONParser(JSONParser):
    """JSON bodies that are well-formed, at most MAX_DEPTH levels deep and storable in PostgreSQL."""

    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels.") from exc
        errors = unstorable_value_errors(data)
        if errors:
            raise ValidationError(errors)
        return data
