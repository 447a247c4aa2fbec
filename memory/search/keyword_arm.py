"""The keyword arm's SQL: which rows holding a query term become candidates, and each term's frequency.

Every keyword candidate gets one bit per query term it contains; the terms' document frequencies (how
many searched rows hold each) give their BM25 weights (memory.search.ranking.term_weights) and the
candidates' order: the KEYWORD_CANDIDATES rows whose terms are rarest (the sum of 1 / frequency over
the terms they hold) are returned. Two ways to get there:

- **exact** (`exact_part`), for every searched set of a tenant not known to be big: every row
  holding a term is read once (its tsvector detoasted once, `strip` in a fenced subquery) and the
  frequencies are window counts over those rows, before the limit. At most KEYWORD_ROWS_EXACT
  matching rows are read, so a cold search of a huge set stays bounded.
- **capped** (`capped_part`), for any searched set of a tenant seen big (hybrid.ROW_COUNT_REUSE_FROM
  rows) that has term statistics (memory.services.term_stats: big tenants, refreshed by the
  tenant-index sweep): a common term's frequency comes from the statistics, a rare one (absent
  there) is counted exactly with a bounded count, and the collection size is the statistics' too.
  Terms are then read rarest first: the rarest terms whose rows fit KEYWORD_ROWS_READ are read
  whole; the rows holding only commoner terms, which could only rank below them, are not read.
  When even the rarest term is too common, the rows holding the two rarest terms together are read
  first, then other rows of the rarest term, up to KEYWORD_ROWS_READ each. The weights keep their
  meaning (BM25 over the tenant's searched rows); what changes is that a word in tens of thousands
  of rows costs nothing to weigh.

Both return SQL arms for hybrid.text_candidates' UNION ALL: `('k', id, mask, distance, NULL…)` per
candidate, and the capped arm also one `('f', NULL, NULL, NULL, frequency…)` row. Reads only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory.models import MemoryTermStat
from memory.rules.text import tsquery_text

# Bounds: the arm ranks at most KEYWORD_CANDIDATES rows; the exact way reads at most KEYWORD_ROWS_EXACT
# matching rows, the capped way about KEYWORD_ROWS_READ (twice that when every term is common).
KEYWORD_CANDIDATES = 200
KEYWORD_ROWS_EXACT = 5_000
KEYWORD_ROWS_READ = 1_000
# A process keeps a tenant's term statistics this long (the sweep refreshes them hourly).
TERM_STATS_TTL = 300.0

_stats: dict[tuple[int, str], tuple[TermStats | None, float]] = {}
_stats_lock = threading.Lock()


@dataclass(frozen=True)
class TermStats:
    """A tenant's term statistics of one searched table: the collection's size and its common terms."""

    collection: int
    documents: dict[str, int]


def term_stats(tenant_id: int, source: str) -> TermStats | None:
    """Return the tenant's term statistics of `source` (None without any), cached per process for
    TERM_STATS_TTL seconds; the caller asks only for a tenant it knows to be big."""
    key = (int(tenant_id), source)
    with _stats_lock:
        entry = _stats.get(key)
    if entry is not None and entry[1] >= time.monotonic():
        return entry[0]
    rows = dict(MemoryTermStat.objects.filter(tenant_id=tenant_id, source=source)
                .values_list("term", "documents"))
    collection = rows.pop(MemoryTermStat.COLLECTION, None)
    found = TermStats(collection=collection, documents=rows) if collection else None
    with _stats_lock:
        _stats[key] = (found, time.monotonic() + TERM_STATS_TTL)
    return found


def forget_term_stats() -> None:
    """Drop every cached term statistic (tests; a process picks fresh ones up after TERM_STATS_TTL anyway)."""
    with _stats_lock:
        _stats.clear()


def _term_query(term: str) -> str:
    return tsquery_text([term])


def _mask_sql(bits: Sequence[int]) -> str:
    return " + ".join(f"(s.sv @@ to_tsquery('simple', %s))::int * {bit:d}" for bit in bits)


def exact_part(base_sql: str, base_params: Sequence[Any], terms: Sequence[str], distance_sql: str,
               distance_params: Sequence[Any]) -> tuple[str, list[Any]]:
    """Return the exact keyword arm: its frequencies are window counts over every matching row read.

    Its rows are `('k', id, mask, distance, frequency per term)`: the frequencies ride on every row.
    """
    bits = [1 << index for index in range(len(terms))]
    frequencies = ", ".join(
        f"count(*) FILTER (WHERE m.mask & {bit:d} <> 0) OVER () AS df{bit:d}" for bit in bits)
    rarity = " + ".join(f"(w.mask & {bit:d} <> 0)::int::float8 / greatest(w.df{bit:d}, 1)" for bit in bits)
    columns = ", ".join(f"w.df{bit:d}" for bit in bits)
    # A vector may live out of line: the keyword rows' distances are computed after the limit.
    sql = (
        f"(SELECT 'k', t.id, t.mask, {distance_sql}, {columns.replace('w.', 't.')} FROM ("
        f" SELECT w.id, w.embedding, w.mask, {columns} FROM ("
        f"  SELECT m.id, m.embedding, m.mask, {frequencies} FROM ("
        f"   SELECT s.id, s.embedding, ({_mask_sql(bits)}) AS mask FROM ("
        f"    SELECT b.id, b.embedding, strip(b.search_vector) AS sv FROM ({base_sql}) b"
        f"    WHERE b.search_vector @@ to_tsquery('simple', %s) LIMIT {KEYWORD_ROWS_EXACT:d}) s) m) w"
        f"  ORDER BY {rarity} DESC, w.id LIMIT {KEYWORD_CANDIDATES:d}) t)"
    )
    params = [*distance_params, *[_term_query(term) for term in terms], *base_params, tsquery_text(list(terms))]
    return sql, params


@dataclass(frozen=True)
class CappedPlan:
    """Which terms the capped arm reads (indexes into the query terms) and how."""

    frequencies: list[int | None]  # from the statistics; None: counted exactly in the statement
    read: list[int]  # read whole, rarest first
    pair: tuple[int, int] | None  # every term is common: these two together first, then the first alone


def capped_plan(terms: Sequence[str], stats: TermStats) -> CappedPlan:
    """Return which terms to read: the rarest ones whose rows fit KEYWORD_ROWS_READ (at least one)."""
    known = [stats.documents.get(term) for term in terms]
    # A term absent from the statistics is in fewer than MemoryTermStat.KEPT_FROM rows: count it as that many.
    bound = [MemoryTermStat.KEPT_FROM if frequency is None else frequency for frequency in known]
    order = sorted(range(len(terms)), key=lambda index: (bound[index], index))
    if bound[order[0]] > KEYWORD_ROWS_READ:
        pair = (order[0], order[1]) if len(order) > 1 else None
        return CappedPlan(frequencies=known, read=[order[0]], pair=pair)
    read, total = [], 0
    for index in order:
        if total + bound[index] > KEYWORD_ROWS_READ:
            break
        read.append(index)
        total += bound[index]
    return CappedPlan(frequencies=known, read=read, pair=None)


def capped_part(base_sql: str, base_params: Sequence[Any], terms: Sequence[str], plan: CappedPlan,
                distance_sql: str, distance_params: Sequence[Any]) -> tuple[str, list[Any], str, list[Any]]:
    """Return the capped keyword arm and its frequencies arm, plus the WITH clause they need (or "").

    Returns `(arms, params, with_clause, with_params)`; the arms are `('k', id, mask, distance, NULL…)`
    per candidate and one `('f', NULL, NULL, NULL, frequency per term)` row.
    """
    bits = [1 << index for index in range(len(terms))]
    counted = [index for index, frequency in enumerate(plan.frequencies) if frequency is None]
    with_clause, with_params = "", []
    if counted:
        counts = ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM ({base_sql}) b WHERE b.search_vector @@ "
            f"to_tsquery('simple', %s) LIMIT {MemoryTermStat.KEPT_FROM:d}) c) AS df{index:d}" for index in counted)
        with_clause = f"WITH df AS MATERIALIZED (SELECT {counts}) "
        for index in counted:
            with_params += [*base_params, _term_query(terms[index])]

    def frequency_sql(index: int) -> str:
        frequency = plan.frequencies[index]
        return f"(SELECT df{index:d} FROM df)" if frequency is None else f"{frequency:d}::bigint"

    rarity = " + ".join(
        f"(m.mask & {bit:d} <> 0)::int::float8 / greatest({frequency_sql(index)}, 1)"
        for index, bit in enumerate(bits))
    rows_sql, rows_params = _candidate_rows(base_sql, base_params, terms, plan)
    nulls = ", ".join(["NULL::bigint"] * len(bits))
    sql = (
        f"(SELECT 'k', t.id, t.mask, {distance_sql}, {nulls} FROM ("
        f" SELECT m.id, m.embedding, m.mask FROM ("
        f"  SELECT s.id, s.embedding, ({_mask_sql(bits)}) AS mask FROM ({rows_sql}) s) m"
        f" ORDER BY {rarity} DESC, m.id LIMIT {KEYWORD_CANDIDATES:d}) t)"
        f" UNION ALL (SELECT 'f', NULL, NULL, NULL::float8, "
        f"{', '.join(frequency_sql(index) for index in range(len(terms)))})"
    )
    params = [*distance_params, *[_term_query(term) for term in terms], *rows_params]
    return sql, params, with_clause, with_params


def _candidate_rows(base_sql: str, base_params: Sequence[Any], terms: Sequence[str],
                    plan: CappedPlan) -> tuple[str, list[Any]]:
    """Return the fenced subquery `(id, embedding, sv)` of the rows the capped arm reads."""

    def rows(tsquery: str, priority: int) -> tuple[str, list[Any]]:
        return (f"SELECT {priority:d} AS p, b.id, b.embedding, strip(b.search_vector) AS sv FROM ({base_sql}) b"
                f" WHERE b.search_vector @@ to_tsquery('simple', %s) LIMIT {KEYWORD_ROWS_READ:d}",
                [*base_params, tsquery])

    read = tsquery_text([terms[index] for index in plan.read])
    if plan.pair is None:
        sql, params = rows(read, 0)
        return f"SELECT u.id, u.embedding, u.sv FROM ({sql}) u OFFSET 0", params
    first, second = plan.pair
    both_sql, both_params = rows(f"({_term_query(terms[first])}) & ({_term_query(terms[second])})", 0)
    one_sql, one_params = rows(read, 1)
    return (f"SELECT DISTINCT ON (u.id) u.id, u.embedding, u.sv FROM (({both_sql}) UNION ALL ({one_sql})) u"
            f" ORDER BY u.id, u.p OFFSET 0", [*both_params, *one_params])
