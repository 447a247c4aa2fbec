"""OpenAI-style function definitions of the four memory tools, built from the request serializers' schema."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

TOOLS = {
    "memory_search": ("MemoryQueryRequest",
                      "Search long-term memory. Use kinds/key/valueJson for known categories, queryText for open "
                      "questions, all: true to list everything. An empty result without all: true does not mean "
                      "memory is empty."),
    "memory_get": ("MemoryGetRequest",
                   "Fetch the one active memory card matching a selector, with its id and revision for later writes."),
    "memory_write": ("MemoryWriteRequest",
                     "Create, update, supersede or expire memory cards atomically. create needs a kind; update, "
                     "supersede and expire need targetId and expectedRevision. Set explicitUserIntent only when "
                     "the user asked to remember. When done is true the write is complete: do not repeat it."),
    "memory_forget": ("MemoryForgetRequest",
                      "Forget memories the user asked to forget (explicitUserIntent: true, reason required). "
                      "Soft by default; hard erases the content for good."),
}


def _inline(node: Any, components: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return _inline(copy.deepcopy(components[name]), components)
        return {key: _inline(value, components) for key, value in node.items() if key != "readOnly"}
    if isinstance(node, list):
        return [_inline(item, components) for item in node]
    return node


@cache
def tool_definitions() -> list[dict[str, Any]]:
    """Return the tool list; parameters are the JSON schema of the very serializers the API validates with."""
    from drf_spectacular.generators import SchemaGenerator

    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    return [
        {"type": "function", "function": {"name": name, "description": description,
                                          "parameters": _inline(components[component], components)}}
        for name, (component, description) in TOOLS.items()
    ]
