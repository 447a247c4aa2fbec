"""Find the places in a module that write memory rows: the engine of the writer tripwire (test_structure).

A write is a call of a write method (`create`, `bulk_create`, `bulk_update`, `save`, `update`, `delete`,
`_raw_delete`, `get_or_create`, `update_or_create`) on something rooted in a memory model — the model
class, its managers and querysets, an instance, or a name or attribute bound to one of those — or
raw SQL that inserts into, updates, deletes from or COPYs into a memory table. The analysis is
deliberately simple and flow-insensitive: it follows assignments, loops, `with` targets,
annotations (parameters, dataclass fields, function return types) and the usual queryset chains.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

MEMORY_MODELS = frozenset({"MemoryMessage", "MemorySummary", "MemoryNode", "MemoryAuditEvent", "MemoryKind"})
WRITE_METHODS = frozenset({
    "create", "bulk_create", "bulk_update", "save", "update", "delete", "_raw_delete", "get_or_create",
    "update_or_create"})
MANAGERS = frozenset({"objects", "all_tenants", "_default_manager", "_base_manager"})
# Builtins that hand back (part of) what they were given.
PASS_THROUGH = frozenset({"list", "tuple", "sorted", "reversed", "next", "iter", "set"})
MEMORY_TABLE = re.compile(r"\bmemory_memory(?:message|summary|node|auditevent|kind)\b")
TABLE_EXPRESSION = re.compile(r"\b(?:" + "|".join(sorted(MEMORY_MODELS)) + r")\._meta\.db_table\b")
SQL_WRITE = re.compile(r"(?is)\b(?:insert\s+into|update|delete\s+from|copy)\s+(?:only\s+)?\"?(\{[^}]*\}|\w+)")


def _mentions_memory_model(node: ast.AST | None) -> bool:
    return node is not None and any(isinstance(n, ast.Name) and n.id in MEMORY_MODELS for n in ast.walk(node))


def _sql_text(node: ast.AST) -> str | None:
    """Return the text of a string literal or f-string (placeholders as `{expression}`), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                       for part in node.values)
    return None


def _is_function(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)


def _names_a_memory_table(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return bool(MEMORY_TABLE.search(text) or TABLE_EXPRESSION.search(text))


def annotated_memory_names(trees: Iterable[ast.AST]) -> tuple[set[str], set[str]]:
    """Return (functions whose return annotation names a memory model, class fields annotated with one)."""
    functions: set[str] = set()
    fields: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if _is_function(node) and _mentions_memory_model(node.returns):
                functions.add(node.name)
            elif isinstance(node, ast.ClassDef):
                fields.update(
                    item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and _mentions_memory_model(item.annotation)
                )
    return functions, fields


class _Scope:
    """One function (or the module's top level): the names bound in it, on top of the module's."""

    def __init__(self, body: list[ast.AST], functions: set[str], fields: set[str], *,
                 outer: _Scope | None = None) -> None:
        self.body, self.functions, self.fields = body, functions, fields
        self.is_module = outer is None
        self.rows: set[str] = set(outer.rows) if outer else set()  # bound to memory models, querysets, rows
        self.tables: set[str] = set(outer.tables) if outer else set()  # bound to a memory table's name
        self.bind_names()

    def nodes(self, *, into_functions: bool = True) -> Iterable[ast.AST]:
        pending = list(self.body)
        while pending:
            node = pending.pop()
            yield node
            if into_functions or not (_is_function(node) or isinstance(node, ast.Lambda)):
                pending.extend(ast.iter_child_nodes(node))

    def rooted(self, node: ast.AST) -> bool:
        """Return True when `node` evaluates to a memory model, manager, queryset or instance."""
        if isinstance(node, ast.Name):
            return node.id in MEMORY_MODELS or node.id in self.rows
        if isinstance(node, ast.Attribute):
            if node.attr in self.fields or (self._self_attribute(node) in self.rows):
                return True
            return node.attr in MANAGERS and self.rooted(node.value)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                return func.id in MEMORY_MODELS or func.id in self.functions or (
                    func.id in PASS_THROUGH and any(self.rooted(arg) for arg in node.args))
            # A method of a queryset or manager (filter, select_for_update, first, get…) or a
            # function known to return memory rows (selectors.accessible_nodes(viewer)…).
            return isinstance(func, ast.Attribute) and (
                func.attr in self.functions or self.rooted(func.value))
        if isinstance(node, ast.Subscript | ast.Starred | ast.Await):
            return self.rooted(node.value)
        if isinstance(node, ast.IfExp):
            return self.rooted(node.body) or self.rooted(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(self.rooted(value) for value in node.values)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return any(self.rooted(element) for element in node.elts)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return self.rooted(node.elt)
        return False

    @staticmethod
    def _self_attribute(node: ast.Attribute) -> str | None:
        return f"self.{node.attr}" if isinstance(node.value, ast.Name) and node.value.id == "self" else None

    def _bind(self, target: ast.AST, into: set[str]) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                into.add(node.id)
            elif isinstance(node, ast.Attribute) and self._self_attribute(node):
                into.add(self._self_attribute(node))

    def _bindings(self) -> Iterable[tuple[ast.AST, ast.AST | None, ast.AST | None]]:
        """Yield (target, value, annotation) for every binding in this scope."""
        for node in self.nodes(into_functions=not self.is_module):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    yield target, node.value, None
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
                yield node.target, node.value, getattr(node, "annotation", None)
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                yield node.target, node.iter, None
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                yield node.optional_vars, node.context_expr, None
            elif isinstance(node, ast.arg):
                yield ast.Name(id=node.arg), None, node.annotation

    def bind_names(self) -> None:
        for _ in range(10):  # to a fixed point: a name may be bound after the line that uses it
            before = (len(self.rows), len(self.tables))
            for target, value, annotation in self._bindings():
                if (value is not None and self.rooted(value)) or _mentions_memory_model(annotation):
                    self._bind(target, self.rows)
                if value is not None and (_names_a_memory_table(value) or any(
                        isinstance(n, ast.Name) and n.id in self.tables for n in ast.walk(value))):
                    self._bind(target, self.tables)
            if (len(self.rows), len(self.tables)) == before:
                return

    def _sql_table_is_memory(self, table: str) -> bool:
        if table.startswith("{"):
            expression = ast.parse(table.strip("{}"), mode="eval")
            names = {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}
            return bool(names & self.tables) or bool(TABLE_EXPRESSION.search(table))
        return bool(MEMORY_TABLE.fullmatch(table))

    def writes(self) -> list[tuple[int, str]]:
        """Return the writes of this scope, not of the functions nested in it (scopes of their own)."""
        found = []
        for node in self.nodes(into_functions=False):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in WRITE_METHODS and self.rooted(node.func.value)):
                found.append((node.lineno, ast.unparse(node)))
            elif (text := _sql_text(node)) is not None and any(
                    self._sql_table_is_memory(match.group(1)) for match in SQL_WRITE.finditer(text)):
                found.append((node.lineno, " ".join(text.split())))
        return found


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    return [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _arguments_for(call: ast.Call, parameters: list[str]) -> dict[str, ast.AST]:
    bound = dict(zip(parameters, call.args, strict=False))
    bound.update({keyword.arg: keyword.value for keyword in call.keywords if keyword.arg})
    return bound


def _sql_table_parameters(tree: ast.Module) -> dict[str, tuple[list[str], set[str]]]:
    """Return {function: (its parameters, those that name the table of a raw SQL write)} for the module.

    `f"INSERT INTO {table} …"` with `table` a parameter makes the function a writer of whatever table
    its callers pass; a function handing its own parameter on to such a function is one too.
    """
    functions = {node.name: node for node in ast.walk(tree) if _is_function(node)}
    writers = {name: (_parameters(function), set[str]()) for name, function in functions.items()}
    for name, function in functions.items():
        parameters, table_parameters = writers[name]
        for node in ast.walk(function):
            for match in SQL_WRITE.finditer(_sql_text(node) or "") if isinstance(node, ast.JoinedStr) else ():
                table_parameters.update(set(re.findall(r"\w+", match.group(1))) & set(parameters))
    for _ in range(10):
        changed = False
        for name, function in functions.items():
            parameters, table_parameters = writers[name]
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                callee = writers.get(_called_name(call) or "")
                if callee is None or not callee[1]:
                    continue
                for parameter, argument in _arguments_for(call, callee[0]).items():
                    handed_on = isinstance(argument, ast.Name) and argument.id in parameters
                    if parameter in callee[1] and handed_on and argument.id not in table_parameters:
                        table_parameters.add(argument.id)
                        changed = True
        if not changed:
            break
    return {name: writer for name, writer in writers.items() if writer[1]}


def memory_writes(tree: ast.Module, *, functions: set[str] = frozenset(),
                  fields: set[str] = frozenset()) -> list[tuple[int, str]]:
    """Return (line, code) of every write to memory rows in the module."""
    sql_writers = _sql_table_parameters(tree)
    module = _Scope(tree.body, set(functions), set(fields))
    scopes = [module]
    for node in ast.walk(tree):
        if _is_function(node) or isinstance(node, ast.Lambda):
            body = node.body if isinstance(node.body, list) else [node.body]
            scopes.append(_Scope([node.args, *body], set(functions), set(fields), outer=module))
    found = []
    for scope in scopes:
        found += scope.writes()
        for call in (n for n in scope.nodes(into_functions=False) if isinstance(n, ast.Call)):
            writer = sql_writers.get(_called_name(call) or "")
            if writer and any(
                    parameter in writer[1] and (_names_a_memory_table(argument) or (
                        isinstance(argument, ast.Name) and argument.id in scope.tables))
                    for parameter, argument in _arguments_for(call, writer[0]).items()):
                found.append((call.lineno, ast.unparse(call)))
    return sorted({(line, text[:100]) for line, text in found})
