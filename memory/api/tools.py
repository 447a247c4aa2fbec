"""The memory tools: OpenAI-style function definitions built from the request serializers' schema.

`TOOLS` is the one table of the tools: each names the request component its parameters are, the API
route a call of it is (the MCP server at /mcp sends each call to that route, memory.api.mcp), whether it
writes (read-only keys are not offered those) and the description the model reads.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import Any

# What the model does on each 409 (API.md's errors), said once and shared by the tools that can answer it.
REVISION_CONFLICT = (
    "On 409 revision_conflict the card moved on since you read it: the error carries currentRevision, status "
    "and, when the card was superseded, supersededById (its current version). Re-read the card (or the one "
    "supersededById names) and retry with its id and current revision if your change still applies; "
    "otherwise drop the change. Never retry with the old revision.")
REQUIRES_CONFIRMATION = (
    "On 409 requires_confirmation several cards matched and the error lists them as candidates: ask the user "
    "which ones they mean, then call again with targets (id + expectedRevision of each), or with all: true "
    "only when the user asked for every one.")


@dataclass(frozen=True)
class MemoryTool:
    component: str
    route: str
    writes: bool
    description: str


TOOLS = {
    "memory_search": MemoryTool(
        "MemoryQueryRequest", "api-memory-search", False,
        "Search long-term memory. Use kinds/key/valueJson for known categories, queryText for open "
        "questions, all: true to list everything. An empty result without all: true does not mean memory "
        "is empty."),
    "memory_get": MemoryTool(
        "MemoryGetRequest", "api-memory-get", False,
        "Fetch the one active memory card matching a selector, with its id and revision for later writes. "
        "On 409 requires_confirmation several cards match: narrow the selector, or use the candidates' ids."),
    "memory_write": MemoryTool(
        "MemoryWriteRequest", "api-memory-write", True,
        "Create, update, supersede, expire or accept memory cards atomically. create needs a kind; update, "
        "supersede, expire and accept need targetId and expectedRevision; accept marks an unreviewed card "
        "(one the extractor inferred) reviewed once the user confirmed it. Set explicitUserIntent only "
        "when the user asked to remember. When done is true the write is complete: do not repeat it. A "
        "refused batch changes nothing. " + REVISION_CONFLICT),
    "memory_forget": MemoryTool(
        "MemoryForgetRequest", "api-memory-forget", True,
        "Forget memories the user asked to forget (explicitUserIntent: true, reason required). Soft by "
        "default; hard erases the content for good. " + REQUIRES_CONFIRMATION + " " + REVISION_CONFLICT),
    "memory_context": MemoryTool(
        "ContextRequestRequest", "api-context", False,
        "Assemble the context pack of a conversation turn: recent messages, the latest summary, active "
        "tasks, constraints, preferences and the cards relevant to queryText, with `prompt`, a text block "
        "within tokenBudget to paste into the system prompt. The user's journal is left out unless "
        "includeJournal is true."),
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
        {"type": "function", "function": {"name": name, "description": tool.description,
                                          "parameters": _inline(components[tool.component], components)}}
        for name, tool in TOOLS.items()
    ]
