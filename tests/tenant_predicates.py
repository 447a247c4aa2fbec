"""Which tenant tables a PostgreSQL statement touches without pinning them to one tenant (pure, no Django).

A statement can be routed to one Citus shard (docs/scale-out.md) when every tenant table it reads or
writes is pinned to a single `tenant_id`:
- by a top-level conjunct of its WHERE or of a JOIN's ON (an OR does not pin) that compares the
  table's `tenant_id` with `=` (or `IN` with one value) to a value without columns (a parameter, a
  constant, an expression of those) or to the `tenant_id` of a table already pinned, in the same
  statement or in an enclosing one (a co-located join, a correlated subquery);
- for an INSERT, by setting the `tenant_id` column (an `INSERT … SELECT` also needs its SELECT pinned).
Each SELECT, CTE, subquery and set-operation arm is its own scope. Any other statement (DDL,
TRUNCATE, LOCK, DO, COPY, VACUUM …) whose text names a tenant table is reported as a whole: it is
not a routed query, so it is either a documented exception or a bug.

The parser is PostgreSQL's own (libpg_query through pglast), so what it reads is what the server reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pglast.parser import ParseError, parse_sql_json

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")
_PARAMETER_RUN = re.compile(r"\$\d+(?:\s*,\s*\$\d+)+")
_WHITESPACE = re.compile(r"\s+")
_DML = {"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt"}


@dataclass(frozen=True)
class Verdict:
    """What is wrong with one statement: the tenant tables it leaves unpinned, or why it is not a query."""

    statement: str  # normalised: `$n` parameters, runs of parameters folded, one line
    unpinned: tuple[str, ...] = ()
    problem: str = ""  # "", "utility statement", or the parser's error

    @property
    def ok(self) -> bool:
        return not self.unpinned and not self.problem

    def describe(self) -> str:
        if self.problem:
            return self.problem
        return "no tenant_id predicate on " + ", ".join(self.unpinned)


def to_postgres(sql: str, with_parameters: bool) -> str:
    """Return `sql` with the driver's `%s` / `%(name)s` placeholders as `$1, $2 …` (and `%%` as `%`)."""
    if not with_parameters:
        return sql
    numbers: dict[str, int] = {}
    count = 0

    def number(match: re.Match) -> str:
        nonlocal count
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is not None and name in numbers:
            return f"${numbers[name]}"
        count += 1
        if name is not None:
            numbers[name] = count
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql)


def normalise(sql: str) -> str:
    """Return `sql` on one line with runs of parameters (`IN (…)` lists, VALUES rows) folded to `$n, …`."""
    return _WHITESPACE.sub(" ", _PARAMETER_RUN.sub(lambda m: m.group(0).split(",")[0] + ", …", sql)).strip()


def check(sql: str, tenant_tables: frozenset[str]) -> Verdict:
    """Return the verdict on one PostgreSQL statement (or several, `;`-separated) with `$n` parameters."""
    statement = normalise(sql)
    try:
        parsed = json.loads(parse_sql_json(sql))
    except ParseError as error:
        return Verdict(statement, problem=f"not parsed ({error}); teach tests/tenant_predicates.py")
    unpinned: list[str] = []
    for raw in parsed.get("stmts", []):
        kind, body = _node(raw["stmt"])
        if kind == "ExplainStmt":
            kind, body = _node(body["query"])
        if kind in _DML:
            unpinned.extend(_Scope.check_statement(kind, body, None, tenant_tables))
        elif _names_any(sql, tenant_tables):
            return Verdict(statement, problem=f"utility statement ({kind}) on a tenant table")
    return Verdict(statement, unpinned=tuple(sorted(set(unpinned))))


def mentions_tenant_table(sql: str, tenant_tables: frozenset[str]) -> bool:
    """Return whether `sql` may touch a tenant table (a cheap test before parsing)."""
    return _names_any(sql, tenant_tables)


def _names_any(sql: str, tenant_tables: frozenset[str]) -> bool:
    return any(table in sql for table in tenant_tables)


def _node(value: object) -> tuple[str, dict]:
    """Return (type, fields) of a wrapped parse-tree node `{"Type": {...}}`, or ("", {}) for anything else."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, body),) = value.items()
        if kind[:1].isupper() and isinstance(body, dict):
            return kind, body
    return "", {}


def _strings(fields: Iterable[object]) -> list[str]:
    return [_node(field)[1].get("sval", "*") for field in fields]


class _Scope:
    """The relations of one SELECT/UPDATE/DELETE/INSERT level and which of them are pinned to a tenant."""

    def __init__(self, outer: _Scope | None, tenant_tables: frozenset[str]) -> None:
        self.outer = outer
        self.tenant_tables = tenant_tables
        self.relations: dict[str, str] = {}  # name or alias → table (tenant tables only)
        self.pinned: set[str] = set()
        self.conditions: list[object] = []
        self.nested: list[object] = []  # parts that may hold subqueries, checked after this level

    @classmethod
    def check_statement(cls, kind: str, body: dict, outer: _Scope | None,
                        tenant_tables: frozenset[str]) -> list[str]:
        scope = cls(outer, tenant_tables)
        return scope._check(kind, body)

    def _check(self, kind: str, body: dict) -> list[str]:
        unpinned: list[str] = []
        for cte in (body.get("withClause") or {}).get("ctes", []):
            query_kind, query = _node(_node(cte)[1].get("ctequery"))
            if query_kind in _DML:
                unpinned.extend(_Scope.check_statement(query_kind, query, self.outer, self.tenant_tables))
        if kind == "SelectStmt" and body.get("op", "SETOP_NONE") != "SETOP_NONE":
            for arm in (body["larg"], body["rarg"]):
                unpinned.extend(_Scope.check_statement("SelectStmt", arm, self.outer, self.tenant_tables))
            return unpinned
        if kind == "InsertStmt":
            return unpinned + self._check_insert(body)
        if kind in ("UpdateStmt", "DeleteStmt"):
            self._add_relation(body["relation"])
        for item in body.get("fromClause", []) + body.get("usingClause", []):
            self._add_from_item(item)
        self.conditions.append(body.get("whereClause"))
        self._pin()
        unpinned.extend(table for name, table in self.relations.items() if name not in self.pinned)
        skip = {"withClause", "fromClause", "usingClause", "relation"}
        self.nested.extend(value for key, value in body.items() if key not in skip)
        for part in self.nested:
            for query_kind, query in _statements_in(part):
                unpinned.extend(_Scope.check_statement(query_kind, query, self, self.tenant_tables))
        return unpinned

    def _check_insert(self, body: dict) -> list[str]:
        unpinned: list[str] = []
        table = body["relation"]["relname"]
        columns = [_node(column)[1].get("name") for column in body.get("cols", [])]
        if table in self.tenant_tables and columns and "tenant_id" not in columns:
            unpinned.append(table)
        query_kind, query = _node(body.get("selectStmt"))
        if query_kind == "SelectStmt":
            unpinned.extend(_Scope.check_statement(query_kind, query, None, self.tenant_tables))
        for key in ("onConflictClause", "returningList"):
            for nested_kind, nested in _statements_in(body.get(key)):
                unpinned.extend(_Scope.check_statement(nested_kind, nested, None, self.tenant_tables))
        return unpinned

    def _add_relation(self, range_var: dict) -> None:
        table = range_var["relname"]
        if table in self.tenant_tables:
            self.relations[(range_var.get("alias") or {}).get("aliasname", table)] = table

    def _add_from_item(self, item: object) -> None:
        kind, body = _node(item)
        if kind == "RangeVar":
            self._add_relation(body)
        elif kind == "JoinExpr":
            self._add_from_item(body["larg"])
            self._add_from_item(body["rarg"])
            self.conditions.append(body.get("quals"))
            self.nested.append(body.get("quals"))
        else:  # a subquery or a function in FROM: its own scope, which may see this one (LATERAL)
            self.nested.append(item)

    # --- which relations the conditions pin ---------------------------------------------------------

    def _pin(self) -> None:
        equal: list[tuple[str, str]] = []
        for conjunct in _conjuncts(self.conditions):
            kind, body = _node(conjunct)
            if kind != "A_Expr" or _strings(body.get("name", [])) != ["="]:
                continue
            left, right = body.get("lexpr"), body.get("rexpr")
            if body["kind"] == "AEXPR_IN":
                items = _node(right)[1].get("items", [])
                if len(items) != 1:
                    continue
                right = items[0]
            elif body["kind"] != "AEXPR_OP":
                continue
            left_name, right_name = self._tenant_column(left), self._tenant_column(right)
            if left_name and right_name:
                equal.append((left_name, right_name))
            elif left_name and _is_value(right):
                self.pinned.add(left_name)
            elif right_name and _is_value(left):
                self.pinned.add(right_name)
        changed = True
        while changed:  # a join on tenant_id with a pinned table pins the other side too
            changed = False
            for left_name, right_name in equal:
                for one, other in ((left_name, right_name), (right_name, left_name)):
                    if self._is_pinned(one) and not self._is_pinned(other) and other in self.relations:
                        self.pinned.add(other)
                        changed = True

    def _is_pinned(self, name: str) -> bool:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.relations:
                return name in scope.pinned
            scope = scope.outer
        return False

    def _tenant_column(self, expression: object) -> str | None:
        """Return the relation whose `tenant_id` `expression` is (through casts), if it is one."""
        kind, body = _node(expression)
        while kind == "TypeCast":
            kind, body = _node(body.get("arg"))
        if kind != "ColumnRef":
            return None
        fields = _strings(body["fields"])
        if fields[-1] != "tenant_id":
            return None
        scope: _Scope | None = self
        while scope is not None:
            if len(fields) == 1 and len(scope.relations) == 1:
                return next(iter(scope.relations))
            if len(fields) > 1 and fields[-2] in scope.relations:
                return fields[-2]
            scope = scope.outer
        return None


def _conjuncts(conditions: Iterable[object]) -> Iterator[object]:
    for condition in conditions:
        kind, body = _node(condition)
        if kind == "BoolExpr" and body["boolop"] == "AND_EXPR":
            yield from _conjuncts(body["args"])
        elif kind:
            yield condition


def _is_value(expression: object) -> bool:
    """Return whether `expression` names no column and holds no subquery (a parameter, a constant …)."""
    if isinstance(expression, dict):
        if "ColumnRef" in expression or "SubLink" in expression:
            return False
        return all(_is_value(value) for value in expression.values())
    if isinstance(expression, list):
        return all(_is_value(value) for value in expression)
    return True


def _statements_in(value: object) -> Iterator[tuple[str, dict]]:
    """Yield the outermost DML statements nested anywhere in `value` (subqueries, LATERAL, CTEs)."""
    if isinstance(value, dict):
        kind, body = _node(value)
        if kind in _DML:
            yield kind, body
            return
        for child in value.values():
            yield from _statements_in(child)
    elif isinstance(value, list):
        for child in value:
            yield from _statements_in(child)
