"""The two edges stay apart: the pages never import the JSON API's internals, nor the API the pages.

What both need (principals, the Viewer, the one authorization rule, the export download) lives in
memory.access; a page that reaches into memory.api fails here, naming the module to import instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(
    "package, forbidden", [("memory/pages", "memory.api"), ("memory/api", "memory.pages")]
)
def test_an_edge_does_not_import_the_other(package, forbidden):
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported_modules(path) if name == forbidden or name.startswith(forbidden + ".")
        )
        for path in (ROOT / package).rglob("*.py")
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, (
        f"{offenders} import {forbidden}: move what both edges need into memory.access (or another module "
        "below both) and import it from there."
    )


def test_the_layout_check_sees_an_offending_import(tmp_path):
    offending = tmp_path / "page.py"
    offending.write_text("from memory.api.auth import ApiKeyAuthentication\nimport memory.api.base\n")
    assert {"memory.api.auth", "memory.api.base"} <= _imported_modules(offending)
