"""Journal rules (seed 001's `daily`): which local date a journal card belongs to and how entries append.

A journal card holds one user's entries of one local date (`EKKO_JOURNAL_TIME_ZONE`); its itemKey is
that date in ISO form (2026-12-02), given by the writer or taken from the clock, never in the future.
A create for a date that already has a card appends its entry to the card's text, in order.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from memory.rules.errors import SchemaError

ENTRY_SEPARATOR = "\n\n"
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def journal_date(moment: datetime, zone_name: str) -> str:
    """Return the ISO local date of `moment` in the time zone `zone_name`."""
    return moment.astimezone(ZoneInfo(zone_name)).date().isoformat()


def require_journal_date(item_key: Any) -> str:
    """Return `item_key` when it is an ISO date (YYYY-MM-DD); refuse anything else."""
    if isinstance(item_key, str) and _ISO_DATE.fullmatch(item_key.strip()):
        try:
            return date.fromisoformat(item_key.strip()).isoformat()
        except ValueError:
            pass
    raise SchemaError("invalid", f"A journal itemKey is the entry's date as YYYY-MM-DD (got {item_key!r}); "
                      "leave it out for today.", "node.itemKey")


def journal_item_key(item_key: Any, *, now: datetime, zone_name: str) -> str:
    """Return the date a journal entry files under: `item_key` when given, else today's local date."""
    today = journal_date(now, zone_name)
    if item_key is None or (isinstance(item_key, str) and not item_key.strip()):
        return today
    day = require_journal_date(item_key)
    if day > today:
        raise SchemaError("invalid", f"A journal date cannot be in the future (today is {today} in the "
                          "journal time zone).", "node.itemKey")
    return day


def journal_entry(value: Any, content: Any) -> str:
    """Return the text of one journal entry: the string valueJson, else the content."""
    entry = value if value is not None else content
    if not isinstance(entry, str) or not entry.strip():
        raise SchemaError("invalid", "A journal entry is text: give it as a string valueJson (or content).",
                          "node.valueJson")
    return entry.strip()


def journal_appended(text: str, entry: str) -> str:
    """Return the card text with `entry` added after the earlier entries."""
    return f"{text}{ENTRY_SEPARATOR}{entry}" if text else entry


def ends_with_entry(text: str, entry: str) -> bool:
    """Return whether `entry` is the card's last entry (a repeated append, answered with noop)."""
    return text == entry or text.endswith(ENTRY_SEPARATOR + entry)
