"""Structural checks that walk every model: a new tenant table that skips isolation fails here.

Each tenant-owned model (a model with a `tenant` foreign key) must inherit TenantOwnedModel
(fail-closed default manager), have row-level security enabled *and forced* with a policy, and
have every unique constraint and B-tree index start with `tenant`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.postgres.indexes import GinIndex
from django.db import connection
from pgvector.django import HnswIndex

from tenants.models import Tenant, TenantOwnedModel, TenantScopedManager

# Indexes that cannot or must not lead with tenant_id, each with its reason.
EXEMPT_INDEXES = {
    # API-key authentication looks the key up before its tenant is known.
    ("tenants", "ApiKey", "apikey_hash_lookup_idx"),
}


def _tenant_owned_models():
    return [
        model for model in apps.get_models()
        if any(f.name == "tenant" and f.related_model is Tenant for f in model._meta.fields)
    ]


TENANT_MODELS = _tenant_owned_models()


def test_every_app_model_with_tenant_data_is_covered():
    names = {m.__name__ for m in TENANT_MODELS}
    assert {"Membership", "Workspace", "ApiKey", "MemoryMessage", "MemorySummary", "MemoryNode",
            "MemoryAuditEvent"} <= names


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_tenant_owned_model_has_the_fail_closed_manager(model):
    assert issubclass(model, TenantOwnedModel), (
        f"{model.__name__} must inherit tenants.models.TenantOwnedModel")
    assert isinstance(model._default_manager, TenantScopedManager)
    assert model._meta.default_manager.name == "objects"


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_tenant_owned_model_has_forced_row_level_security(model, db):
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE relname = %s", [table])
        enabled, forced = cursor.fetchone()
        cursor.execute("SELECT qual, with_check FROM pg_policies WHERE tablename = %s", [table])
        policies = cursor.fetchall()
    assert enabled and forced, f"Add TenantRowLevelSecurity({table!r}) to a migration"
    assert policies, f"{table} has RLS on but no policy"
    for using_clause, check_clause in policies:
        assert "ekko.tenant_id" in using_clause and "ekko.tenant_id" in check_clause


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_tenant_owned_model_constraints_and_indexes_start_with_tenant(model):
    for constraint in model._meta.constraints:
        fields = getattr(constraint, "fields", ())
        if fields:
            assert fields[0] == "tenant", f"{model.__name__}.{constraint.name} must start with tenant"
    for index in model._meta.indexes:
        if isinstance(index, GinIndex | HnswIndex):
            continue  # full-text and vector indexes cannot lead with a scalar column (no btree_gin here)
        if (model._meta.app_label, model.__name__, index.name) in EXEMPT_INDEXES:
            continue
        assert index.fields[0] == "tenant", f"{model.__name__}.{index.name} must start with tenant"
    for field in model._meta.fields:
        assert not (field.unique and not field.primary_key), (
            f"{model.__name__}.{field.name} is unique on its own; "
            "use a UniqueConstraint that starts with tenant"
        )


# Every file that may lift the tenant walls, with its reason (docs/tenancy.md has the same list).
BYPASS_ALLOWED = {
    "tenants/context.py": "defines all_tenants_context",
    "tenants/models.py": "defines the all_tenants manager",
    "tenants/db_roles.py": "defines the RLS policy's bypass setting",
    "tenants/services.py": "API-key authentication looks a key up before its tenant is known",
    "memory/access.py": "a signed-in person's memberships are what tells us their tenants",
    "ekko_site/admin_site.py": "operators audit every tenant (staff only)",
    "tenants/admin.py": "operators audit every tenant (staff only)",
    "memory/admin.py": "operators audit every tenant (staff only)",
    "memory/pipeline/runs.py":
        "the retry sweep finds due runs of every tenant, then works in each tenant's context",
    "memory/management/commands/_workspace.py": "a CLI operator names a workspace by id",
    "memory/backlog.py": "the metrics scrape counts the waiting work of every tenant (counts only)",
    "memory/webhooks/delivery.py":
        "the webhook sweep finds tenants with an active endpoint, then dispatches each in its own context",
}


def test_the_tenant_bypass_is_used_only_in_listed_places():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pattern = re.compile(r"all_tenants_context|\ball_tenants\b")
    users = {
        str(path.relative_to(root))
        for folder in ("ekko_site", "memory", "tenants")
        for path in (root / folder).rglob("*.py")
        if "migrations" not in path.parts and pattern.search(path.read_text(encoding="utf-8"))
    }
    unlisted = users - set(BYPASS_ALLOWED)
    assert not unlisted, (
        f"{sorted(unlisted)} lift the tenant walls; justify them in BYPASS_ALLOWED and docs/tenancy.md")


# --------------------------------------------------------------------------- package layering

ROOT = Path(__file__).resolve().parent.parent
# Callers of the services: the services announce work through memory.services.events instead.
SERVICE_FORBIDDEN_IMPORTS = (
    "memory.pipeline", "memory.search", "memory.api", "memory.pages", "memory.transfer")
SERVICE_IMPORTS_ALLOWED = {
    # The embedding provider is a leaf module (it imports only memory.http_json), so no circle can form.
    ("memory/services/embeddings.py", "memory.search.embeddings"),
}


def _python_files(*folders: str) -> list[Path]:
    return sorted(
        path for folder in folders for path in (ROOT / folder).rglob("*.py")
        if "migrations" not in path.parts and "__pycache__" not in path.parts
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module, *, top_level_only: bool = False) -> set[str]:
    """Return the modules a file imports (`from a import b` counts as `a` and `a.b`)."""
    found: set[str] = set()

    def visit(node: ast.AST, *, nested: bool) -> None:
        if _is_type_checking_block(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            inside = nested or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if not (top_level_only and inside):
                visit(child, nested=inside)

    visit(tree, nested=False)
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_services_and_rules_never_import_their_callers():
    offenders = []
    for path in _python_files("memory/services", "memory/rules"):
        relative = str(path.relative_to(ROOT))
        for module in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if any(relative == allowed_file and _within(module, allowed)
                   for allowed_file, allowed in SERVICE_IMPORTS_ALLOWED):
                continue
            if any(_within(module, package) for package in SERVICE_FORBIDDEN_IMPORTS):
                offenders.append(f"{relative} imports {module}")
            impure = _within(module, "django") or _within(module, "tenants") or (
                _within(module, "memory") and not _within(module, "memory.rules"))
            if relative.startswith("memory/rules/") and impure:
                offenders.append(f"{relative} imports {module} (rules are pure: no ORM, no Django)")
    assert not offenders, (
        "memory/services and memory/rules are imported by the pipeline, search, API, pages and transfer, "
        f"never the other way round; announce after-commit work through memory.services.events: {offenders}"
    )


def test_no_import_circle_between_modules_at_import_time():
    files = _python_files("memory", "tenants", "ekko_site")
    modules = {_module_name(path): path for path in files}
    graph = {
        name: {m for m in _imports(ast.parse(path.read_text(encoding="utf-8")), top_level_only=True)
               if m in modules and m != name}
        for name, path in modules.items()
    }
    state: dict[str, str] = {}
    circles: list[list[str]] = []

    def walk(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for imported in sorted(graph[name]):
            if state.get(imported) == "open":
                circles.append([*trail[trail.index(imported):], imported])
            elif imported not in state:
                walk(imported, [*trail, imported])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert not circles, f"Import circles at module level (import the submodule, move shared code): {circles}"


def test_scope_choices_are_the_rules_vocabulary():
    from memory.rules.scope_policy import AGENT_WRITABLE_SCOPES, SCOPES
    from tenants.models import AGENT_WRITABLE_SCOPES as WRITABLE_CHOICES
    from tenants.models import Scope

    assert tuple(Scope.values) == SCOPES
    assert [str(scope) for scope in WRITABLE_CHOICES] == list(AGENT_WRITABLE_SCOPES)
    assert "global" not in AGENT_WRITABLE_SCOPES


# --------------------------------------------------------------------------- the writer tripwire

# Modules that may create, update or delete memory rows (messages, summaries, nodes, audit events, kinds).
WRITERS_ALLOWED = {
    "memory/services/": "the services own every write to memory rows",
}


def _memory_writers() -> dict[str, list[tuple[int, str]]]:
    from tests.writer_scan import annotated_memory_names, memory_writes

    files = _python_files("ekko_site", "memory", "tenants")
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in files}
    functions, fields = annotated_memory_names(trees.values())
    found = {str(path.relative_to(ROOT)): memory_writes(tree, functions=functions, fields=fields)
             for path, tree in trees.items()}
    return {path: writes for path, writes in found.items() if writes}


def test_only_the_services_write_memory_rows():
    writers = _memory_writers()
    unlisted = {
        path: [f"line {line}: {code}" for line, code in writes] for path, writes in writers.items()
        if not any(path.startswith(prefix) for prefix in WRITERS_ALLOWED)
    }
    assert not unlisted, (
        f"These modules write memory rows themselves: {unlisted}. Call a memory.services function instead "
        "(it applies the rules, the guards and the audit event); add a service if none fits."
    )


WRITER_SCAN_CASES = [
    ("MemoryNode.objects.filter(pk=1).update(title='x')", True),
    ("MemoryNode.all_tenants.filter(pk=1).delete()", True),
    ("nodes = MemoryNode.objects.filter(tenant=t)\nnodes.update(status='deleted')", True),
    ("for node in MemoryNode.objects.all():\n    node.save()", True),
    ("node = MemoryNode(title='x')\nnode.save()", True),
    ("def f(node: MemoryNode):\n    node.delete()", True),
    ("node_get(viewer=v, node_id=1).save()", True),
    ("selectors.node_get(viewer=v, node_id=1).delete()", True),
    ("MemoryAuditEvent.objects.bulk_create(events)", True),
    ("MemoryKind.objects.get_or_create(name='x')", True),
    ("result.node.save()", True),
    ("cursor.execute('DELETE FROM memory_memorynode WHERE id = %s', [1])", True),
    ("cursor.execute(f'UPDATE {MemoryNode._meta.db_table} SET title = %s', ['x'])", True),
    ("table = MemoryMessage._meta.db_table\ncursor.execute(f'INSERT INTO {table} VALUES (1)')", True),
    ("def put(table):\n    run(f'INSERT INTO {table} VALUES (1)')\nput('memory_memorysummary')", True),
    ("titles = {}\ntitles.update(MemoryNode.objects.values_list('pk', 'title'))", False),
    ("run.save()\nExtractionRun.objects.filter(pk=1).update(status='done')", False),
    ("digest.update(node.title.encode())", False),
    ("cursor.execute('SELECT id FROM memory_memorynode')", False),
    ("cursor.execute('INSERT INTO memory_nodes (id) VALUES (?)')", False),  # the SQLite export file
    ("seen = {node.pk for node in MemoryNode.objects.all()}\nseen.update([1])", False),
]


@pytest.mark.parametrize(("source", "writes"), WRITER_SCAN_CASES, ids=[c[0][:40] for c in WRITER_SCAN_CASES])
def test_the_writer_scan_sees_writes_anywhere_and_only_writes(source, writes):
    from tests.writer_scan import memory_writes

    module = "from memory.models import MemoryAuditEvent, MemoryKind, MemoryMessage, MemoryNode\n" + source
    found = memory_writes(ast.parse(module), functions={"node_get"}, fields={"node"})
    assert bool(found) == writes, f"{source!r}: found {found}"
