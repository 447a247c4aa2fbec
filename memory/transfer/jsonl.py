"""Import a JSONL message history into a workspace's evidence log (seed 004's JSONL → store migration path).

One JSON object per line: `{id?, sessionId, role, content, createdAt?, parentId?, channel?, agentName?,
userId?, metadata?}` (snake_case names and `timestamp` for `createdAt` are accepted too; `content` may also be
a list of `{type: "text", text}` parts). The whole file is read and checked before anything is written, then
read again and written a batch at a time in one tenant-bound transaction, so memory stays bounded. Importing
the same file again adds nothing: a line without an `id` gets one derived from its session, role, time,
content and how many identical lines came before it, so lines appended to a file later are the only new rows.
A line whose id is already used by a different message is a reported conflict, never an overwrite: evidence
is append-only. A line that carries a secret or personal identifier (`sensitive_content`), or content over
the API's size limit (`too_large`), is left out and reported; the rest imports. The new lines are written
by memory.services.imports.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from django.db import transaction
from django.utils import timezone

from memory.errors import Invalid
from memory.models import Channel, MemoryMessage, Role
from memory.rules.sensitive import find_sensitive_content
from memory.rules.text import MAX_TEXT, count_tokens, segment_for_search
from memory.services import imports
from memory.transfer.report import sensitive_detail
from memory.transfer.selectors import members_named, workspace_in_tenant
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace

__all__ = ["JsonlImportReport", "messages_import_jsonl"]

BATCH = 1000
# A line longer than this cannot hold a message the API would take (content of MAX_TEXT characters,
# each escaped as \\uXXXX at worst, plus its other fields); it is skipped without being held whole.
MAX_LINE = 8 * MAX_TEXT
MAX_ID = 128
MAX_SESSION = 200
EMBED_BATCH = 500
_ALIASES = {
    "id": ("id", "messageId", "message_id"),
    "session": ("sessionId", "session_id", "session"),
    "role": ("role",),
    "content": ("content", "text"),
    "created_at": ("createdAt", "created_at", "timestamp", "time"),
    "parent_id": ("parentId", "parent_id"),
    "channel": ("channel",),
    "agent_name": ("agentName", "agent_name"),
    "user": ("userId", "user_id", "user"),
    "metadata": ("metadata",),
}


@dataclass
class JsonlImportReport:
    imported: int = 0
    skipped: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)

    def as_json(self) -> dict[str, Any]:
        return {
            "imported": {"messages": self.imported},
            "skipped": {"messages": self.skipped},
            "conflicts": self.conflicts,
            "sessions": sorted(self.sessions),
        }

    def summary_line(self) -> str:
        return (
            f"imported {self.imported} messages in {len(self.sessions)} session(s); skipped {self.skipped} "
            f"already present; {len(self.conflicts)} conflicts"
        )


def _field(line: dict[str, Any], name: str) -> Any:
    for alias in _ALIASES[name]:
        if alias in line:
            return line[alias]
    return None


def _fail(number: int, problem: str) -> Invalid:
    return Invalid(f"Line {number}: {problem}. Fix the line and import again; nothing was imported.")


def _text_content(number: int, content: Any) -> str:
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in ("text", None)]
        if parts and all(isinstance(p, str) for p in parts):
            content = "\n".join(parts)
    if not isinstance(content, str) or not content:
        raise _fail(number, "`content` must be a non-empty string (or a list of text parts)")
    if "\x00" in content:
        raise _fail(number, "`content` contains a NUL character")
    return content


def _timestamp(number: int, value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            # Epoch seconds, or milliseconds (JavaScript's Date.now()).
            return datetime.fromtimestamp(value / 1000 if value > 10**11 else value, tz=UTC)
        parsed = datetime.fromisoformat(str(value))
    except (ValueError, OverflowError, OSError) as exc:
        raise _fail(number, f"`createdAt` {value!r} is not an ISO-8601 time or epoch seconds") from exc
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _optional_text(number: int, name: str, value: Any, max_length: int) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_length or "\x00" in value:
        raise _fail(number, f"`{name}` must be a string of at most {max_length} characters")
    return value


@dataclass(frozen=True)
class _Line:
    number: int
    message_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime | None
    parent_id: str | None
    channel: str
    agent_name: str
    username: str | None
    metadata: Any


@dataclass(frozen=True)
class _TooLarge:
    number: int
    message_id: str | None


def _bounded_lines(handle: IO[str]) -> Iterator[str | None]:
    """Yield the file's lines, or None for a line longer than MAX_LINE (never held whole)."""
    while raw := handle.readline(MAX_LINE + 1):
        if len(raw) <= MAX_LINE or raw.endswith("\n"):
            yield raw
            continue
        while (rest := handle.readline(MAX_LINE)) and not rest.endswith("\n"):
            pass
        yield None


def _read_lines(path: Path, default_session: str | None) -> Iterator[_Line | _TooLarge]:
    """Yield every message of the file, checked; raise Invalid naming the first bad line.

    A line over the API's size limits is yielded as `_TooLarge`: it is left out and reported.
    """
    seen: Counter[tuple[str, str, str, str]] = Counter()
    with path.open("r", encoding="utf-8", errors="strict") as handle:
        try:
            for number, raw in enumerate(_bounded_lines(handle), start=1):
                if raw is None:
                    yield _TooLarge(number, None)
                    continue
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except ValueError as exc:
                    raise _fail(number, f"not valid JSON ({exc})") from exc
                if not isinstance(line, dict):
                    raise _fail(number, "expected a JSON object")
                session = (
                    _optional_text(number, "sessionId", _field(line, "session"), MAX_SESSION)
                    or default_session
                )
                if session is None:
                    raise _fail(number, "no `sessionId` (or pass --session for lines without one)")
                role = _field(line, "role")
                if role not in Role.values:
                    raise _fail(number, f"`role` must be one of {', '.join(Role.values)}")
                content = _text_content(number, _field(line, "content"))
                if len(content) > MAX_TEXT:
                    given_id = _field(line, "id")
                    yield _TooLarge(number, given_id if isinstance(given_id, str) else None)
                    continue
                created_at = _timestamp(number, _field(line, "created_at"))
                channel = _field(line, "channel") or Channel.MAIN
                if channel not in Channel.values:
                    raise _fail(number, f"`channel` must be one of {', '.join(Channel.values)}")
                message_id = _optional_text(number, "id", _field(line, "id"), MAX_ID)
                if message_id is None:
                    identity = (session, role, created_at.isoformat() if created_at else "", content)
                    seen[identity] += 1
                    digest = hashlib.sha256(
                        json.dumps([*identity, seen[identity]], ensure_ascii=False).encode()
                    ).hexdigest()
                    message_id = f"jsonl_{digest[:32]}"
                metadata = _field(line, "metadata")
                if metadata is not None and not isinstance(metadata, dict):
                    raise _fail(number, "`metadata` must be a JSON object")
                yield _Line(
                    number=number,
                    message_id=message_id,
                    session_id=session,
                    role=role,
                    content=content,
                    created_at=created_at,
                    parent_id=_optional_text(number, "parentId", _field(line, "parent_id"), MAX_ID),
                    channel=channel,
                    agent_name=_optional_text(number, "agentName", _field(line, "agent_name"), 200) or "",
                    username=_optional_text(number, "userId", _field(line, "user"), 150),
                    metadata=metadata,
                )
        except UnicodeDecodeError as exc:
            raise Invalid(
                f"The file is not UTF-8 text ({exc.reason} at byte {exc.start}); nothing was imported."
            ) from exc


def _batches(lines: Iterator[_Line | _TooLarge]) -> Iterator[list[_Line | _TooLarge]]:
    batch: list[_Line | _TooLarge] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _left_out(report: JsonlImportReport, line: _Line) -> bool:
    """Report and return True when the line carries a secret (DESIGN rule 7 holds for imports too)."""
    secret = find_sensitive_content(line.content)
    if secret is not None:
        report.conflicts.append({"line": line.number, "id": line.message_id, "reason": "sensitive_content",
                                 "detail": sensitive_detail(secret)})
    return secret is not None


def messages_import_jsonl(
    *,
    tenant: Tenant,
    workspace: Workspace,
    path: str | os.PathLike[str],
    default_session: str | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
    embed_after_commit: bool = True,
) -> JsonlImportReport:
    """Append the messages of a JSONL file to `workspace` (idempotent, one transaction) and report counts."""
    path = Path(path)
    report_progress = progress or (lambda stage, done, total: None)
    # Every line is checked before the first write; the file is then read again, a batch at a time.
    total, usernames = 0, set()
    for line in _read_lines(path, default_session):
        total += 1
        if isinstance(line, _Line) and line.username:
            usernames.add(line.username)
    report = JsonlImportReport()
    now = timezone.now()
    created: list[int] = []
    with tenant_context(tenant):
        workspace = workspace_in_tenant(tenant, workspace)
        members = members_named(tenant, usernames)
        report_progress("messages", 0, total)
        position = 0
        for batch in _batches(_read_lines(path, default_session)):
            lines = [line for line in batch if isinstance(line, _Line) and not _left_out(report, line)]
            for line in batch:
                if isinstance(line, _TooLarge):
                    report.conflicts.append({
                        "line": line.number, "id": line.message_id, "reason": "too_large",
                        "detail": f"longer than the API's limit ({MAX_TEXT} characters of content)"})
            stored = {
                message_id: (session_id, role, content)
                for message_id, session_id, role, content in MemoryMessage.objects.filter(
                    tenant=tenant, workspace=workspace, message_id__in=[line.message_id for line in lines]
                ).values_list("message_id", "session_id", "role", "content")
            }
            new: list[MemoryMessage] = []
            for line in lines:
                position += 1
                existing = stored.get(line.message_id)
                if existing is not None:
                    if existing == (line.session_id, line.role, line.content):
                        report.skipped += 1
                    else:
                        report.conflicts.append({
                            "line": line.number, "id": line.message_id, "reason": "id_taken",
                            "detail": "a different message already has this id"})
                    continue
                stored[line.message_id] = (line.session_id, line.role, line.content)  # a repeat later on
                report.sessions.add(line.session_id)
                new.append(
                    MemoryMessage(
                        tenant=tenant,
                        workspace=workspace,
                        message_id=line.message_id,
                        session_id=line.session_id,
                        user_id=members.get(line.username) if line.username else None,
                        parent_id=line.parent_id,
                        role=line.role,
                        content=line.content,
                        channel=line.channel,
                        agent_name=line.agent_name,
                        metadata=line.metadata,
                        token_count=count_tokens(line.content),
                        # Lines without a time keep their file order.
                        created_at=line.created_at or now + timedelta(microseconds=position),
                        search_text=segment_for_search(line.content),
                    )
                )
            created += imports.messages_create(tenant=tenant, messages=new)
            report.imported += len(new)
            report_progress("messages", len(batch), total)
        if embed_after_commit and created:
            tenant_id = tenant.pk

            def queue() -> None:
                from memory.pipeline import background, tasks

                for first in range(0, len(created), EMBED_BATCH):
                    background.enqueue(tasks.embed_messages, tenant_id, created[first : first + EMBED_BATCH])

            transaction.on_commit(queue)
    return report
