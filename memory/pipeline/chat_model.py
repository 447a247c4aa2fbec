"""The OpenAI-compatible chat model behind extraction and summaries, when one is configured.

`chat_client()` returns a `ChatClient` when `EKKO_LLM_BASE_URL` is set (None otherwise, and the
rule-based extractor and summarizer run instead). The client posts to `{base_url}/chat/completions`
with `response_format: {"type": "json_object"}` using the standard library and returns the parsed
JSON object; every failure (unreachable, timeout, HTTP error, a reply that is not a JSON object)
raises `LLMError` with a message that says what to check. `llm_extract` asks the model for seed
000's `MemoryExtraction` plan, `llm_summarize` for a `MemorySummary`. Secrets are redacted from
the messages before they leave the process. Settings are read lazily, at call time. No ORM.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings

from memory.http_json import post_json
from memory.pipeline.plans import KnownNode, MemoryExtraction, PlanError, SourceMessage, plan_from_json
from memory.pipeline.sentences import redact
from memory.pipeline.summaries import SummaryDraft, summary_from_json
from memory.rules.kinds import DEFAULT_KINDS, KindSpec
from memory.rules.sensitive import find_sensitive_content

__all__ = ["ChatClient", "LLMError", "chat_client", "llm_extract", "llm_summarize"]

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 2000  # per message, as seed 001's extraction window
MAX_WINDOW_CHARS = 12000  # per model call; longer inputs are sent in several windows
MAX_KNOWN_NODES = 30


class LLMError(Exception):
    """The chat model could not produce a usable answer (unreachable, timed out, HTTP error, bad JSON)."""


class ChatClient:
    """Call an OpenAI-compatible `POST {base_url}/chat/completions` endpoint for JSON answers."""

    def __init__(self, *, base_url: str, model: str, api_key: str = "", timeout: float = 60.0) -> None:
        if not model:
            raise LLMError(
                "EKKO_LLM_BASE_URL is set but EKKO_LLM_MODEL is empty; set it to the model the "
                "endpoint serves."
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self._api_key = api_key
        # Tokens of the last answer (the endpoint's `usage.total_tokens`, or an estimate without it).
        self.last_tokens = 0

    def _post(self, body: bytes) -> bytes:
        return post_json(
            self.url,
            body,
            api_key=self._api_key,
            timeout=self.timeout,
            error=LLMError,
            label="Chat endpoint",
            hint="Check EKKO_LLM_BASE_URL, EKKO_LLM_MODEL and EKKO_LLM_API_KEY (timeout: EKKO_LLM_TIMEOUT).",
        )

    def complete_json(self, *, system: str, user: str) -> dict[str, Any]:
        """Return the JSON object the model answers to `system` + `user`."""
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "response_format": {"type": "json_object"},
                "temperature": 0,
            },
            ensure_ascii=False,
        ).encode("utf-8")
        raw = self._post(body)
        self.last_tokens = len(body) // 4
        try:
            reply = json.loads(raw)
            usage = reply.get("usage") if isinstance(reply, dict) else None
            if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
                self.last_tokens = usage["total_tokens"]
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, TypeError, KeyError, IndexError) as error:
            raise LLMError(
                f"Chat endpoint {self.url} sent a response that is not a chat completion "
                f"(expected choices[0].message.content): {raw[:200]!r}"
            ) from error
        if not isinstance(content, str):
            raise LLMError(f"Model {self.model} answered without text content.")
        text = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", content)
        try:
            answer = json.loads(text)
        except ValueError as error:
            raise LLMError(f"Model {self.model} did not answer valid JSON: {content[:200]!r}") from error
        if not isinstance(answer, dict):
            raise LLMError(f"Model {self.model} answered JSON that is not an object: {content[:200]!r}")
        return answer


def chat_client() -> ChatClient | None:
    """Return a client for the configured chat model, or None when EKKO_LLM_BASE_URL is unset."""
    base_url = settings.EKKO_LLM_BASE_URL or ""
    if not base_url:
        return None
    return ChatClient(
        base_url=base_url,
        model=settings.EKKO_LLM_MODEL or "",
        api_key=settings.EKKO_LLM_API_KEY or "",
        timeout=float(settings.EKKO_LLM_TIMEOUT),
    )


# --------------------------------------------------------------------------- prompts


def _kind_lines(kinds: Mapping[str, KindSpec]) -> str:
    lines = []
    for spec in kinds.values():
        shape = spec.value_shape
        if spec.required_value_keys:
            shape += " with " + (" or ".join(spec.required_value_keys))
        slots = "itemized (needs itemKey)" if spec.itemized else "one per owner"
        lines.append(
            f"- {spec.name}: type {spec.type}, {slots}, default scope {spec.default_scope}, valueJson {shape}"
        )
    return "\n".join(lines)


_EXTRACTION_RULES = """You extract long-term memories from a conversation for an AI agent's memory service.
Answer with one JSON object, nothing else, of this shape (seed MemoryExtraction):
{"summaryPatch": "<one sentence on what changed, optional>",
 "nodes": [{"operation": "create|update|supersede|expire|ignore",
            "targetId": "<id of a known memory; required for update, supersede and expire>",
            "reason": "<why>",
            "sourceMessageIds": ["<ids of the messages that say it>"],
            "explicitUserIntent": true|false,
            "node": {"kind": "<a kind below>", "itemKey": "<short stable concept, e.g. 香菜 or cilantro>",
                     "scope": "session|workspace|user", "valueJson": <value>, "title": "<short>",
                     "content": "<one sentence>", "confidence": 0.0-1.0, "importance": 0.0-1.0,
                     "tags": [], "entities": [], "expiresAt": "<ISO 8601 or null>",
                     "sourceQuote": "<the user's exact words, copied verbatim>"}}]}
Rules:
- Only what the USER states; never infer from the assistant's words. Nothing new -> {"nodes": []}.
- explicitUserIntent is true only when the user says it plainly (记住, 以后都, from now on, always, never,
  a direct first-person statement of a lasting preference, or a correction).
- sourceQuote must be copied character for character from a cited user message (at least 5 characters).
- Temporary states (今天胃不舒服, tired today) -> kind temporary_state, scope session, expiresAt set.
- Corrections of a known memory -> supersede with its targetId; a task that is finished -> update its
  valueJson status to done; something no longer true -> expire.
- Never store passwords, API keys, tokens, card, ID or passport numbers.
- flavor_profile valueJson is an object such as {"oil": "low", "spicy": "low"}.
Kinds:
"""


def _window_messages(messages: Sequence[SourceMessage]) -> list[list[dict[str, Any]]]:
    windows: list[list[dict[str, Any]]] = [[]]
    size = 0
    for message in messages:
        content = redact(message.content)[:MAX_MESSAGE_CHARS]
        entry = {
            "id": message.message_id,
            "role": message.role,
            "content": content,
            "createdAt": message.created_at.isoformat() if message.created_at else None,
        }
        if size + len(content) > MAX_WINDOW_CHARS and windows[-1]:
            windows.append([])
            size = 0
        windows[-1].append(entry)
        size += len(content)
    return [window for window in windows if window]


def llm_extract(
    client: ChatClient,
    *,
    messages: Sequence[SourceMessage],
    known: Sequence[KnownNode] = (),
    previous_summary: str | None = None,
    kinds: Mapping[str, KindSpec] | None = None,
    now: datetime | None = None,
) -> MemoryExtraction:
    """Return the model's plan for `messages` (several calls when the input exceeds one window)."""
    catalogue = {**DEFAULT_KINDS, **(kinds or {})}
    system = _EXTRACTION_RULES + _kind_lines(catalogue)
    known_json = [
        {
            "id": n.node_id,
            "kind": n.kind,
            "key": n.key,
            "scope": n.scope,
            "title": n.title,
            "valueJson": n.value_json,
        }
        for n in list(known)[:MAX_KNOWN_NODES]
    ]
    ids = {message.message_id for message in messages}
    plan = MemoryExtraction()
    for window in _window_messages(messages):
        user = json.dumps(
            {
                "now": now.isoformat() if now else None,
                "previousSummary": previous_summary,
                "knownMemories": known_json,
                "messages": window,
            },
            ensure_ascii=False,
        )
        answer = client.complete_json(system=system, user=user)
        try:
            part = plan_from_json(answer, message_ids=ids, lenient_items=True)
        except PlanError as error:
            raise LLMError(
                f"Model {client.model} answered JSON that is not an extraction plan: {error}"
            ) from error
        plan.nodes.extend(part.nodes)
        plan.summary_patch = " ".join(filter(None, [plan.summary_patch, part.summary_patch])) or None
    return plan


_SUMMARY_RULES = """You summarise a stretch of a conversation for an AI agent's memory service.
Answer with one JSON object, nothing else:
{"summary": "<3-6 sentences>", "currentGoal": "<the user's current goal or null>",
 "constraints": [], "preferences": [], "decisions": [], "completedWork": [], "pendingWork": [],
 "knownIssues": []}
Each list holds short strings (at most 10). Build on the previous summary when given. Write in the
conversation's language. Never include passwords, API keys, tokens, card, ID or passport numbers."""


def llm_summarize(
    client: ChatClient, *, messages: Sequence[SourceMessage], previous: SummaryDraft | None = None
) -> SummaryDraft:
    """Return the model's summary of `messages` (the newest window when the input is long)."""
    windows = _window_messages(messages)
    user = json.dumps(
        {
            "previousSummary": previous.as_json() if previous else None,
            "messages": windows[-1] if windows else [],
        },
        ensure_ascii=False,
    )
    answer = client.complete_json(system=_SUMMARY_RULES, user=user)
    try:
        draft = summary_from_json(answer)
    except ValueError as error:
        raise LLMError(f"Model {client.model} answered JSON that is not a summary: {error}") from error
    if find_sensitive_content(draft.summary, draft.current_goal, *draft.all_items()):
        logger.warning("The model's summary carried sensitive content; it was redacted.")
        draft = draft.redacted()
    return draft
