"""Imports obey the write rules: secrets, scopes, pins, sizes, owners, chains and foreign ids (real DB).

A file is data from outside: whatever it says, an import writes only what `memory/write` (and message
capture) would accept from the same caller, leaves the rest out with a reason in the report, and never
lets one tenant learn anything about another.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memory.models import MemoryMessage, MemoryNode, MemorySummary
from memory.rules import node_text
from memory.transfer import signatures
from memory.transfer.jsonl import messages_import_jsonl
from memory.transfer.signatures import SearchTextSigner, search_text_version
from memory.transfer.sqlite_format import NODE_COLUMNS
from memory.transfer.sqlite_import import workspace_import_sqlite
from tenants.context import tenant_context
from tenants.services import workspace_create
from tests.test_sqlite_io import Builder, default_workspace, export, rows, sample_workspace

PASSWORD = "我的邮箱密码是 hunter2x!"
CARD = "信用卡卡号 4111 1111 1111 1111，有效期 12/29"
API_KEY = "OpenAI key: sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e"


def reasons(report) -> list[tuple[str, str, str]]:  # noqa: ANN001
    return [(c["table"], c["id"], c["reason"]) for c in report.conflicts]


# --------------------------------------------------------------------------- sensitive content


def test_rows_carrying_secrets_are_left_out_with_the_reason_the_rest_imports(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    node, message = b.nodes[2], "m2"
    with tenant_context(tenant_a):
        first, second = MemorySummary.objects.filter(workspace=b.workspace).order_by("created_at")
    with sqlite3.connect(path) as db:  # an edited file: these rows lose their signatures
        db.execute("UPDATE memory_nodes SET content = ? WHERE id = ?", (PASSWORD, str(node.id)))
        db.execute("UPDATE memory_messages SET content = ? WHERE id = ?", (CARD, message))
        db.execute("UPDATE memory_summaries SET pending_work_json = ? WHERE id = ?",
                   (json.dumps([API_KEY]), str(first.id)))
    report = workspace_import_sqlite(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    assert sorted(reasons(report)) == sorted([
        ("nodes", str(node.id), "sensitive_content"),
        ("messages", message, "sensitive_content"),
        ("summaries", str(first.id), "sensitive_content"),
    ])
    details = {c["table"]: c["detail"] for c in report.conflicts}
    assert "password" in details["nodes"] and "card_number" in details["messages"]
    assert "api_key" in details["summaries"]
    assert report.imported.as_json() == {"messages": 1, "summaries": 1, "nodes": 4, "auditEvents": 4}
    with tenant_context(tenant_b):
        stored = " ".join(MemoryNode.objects.values_list("content", flat=True))
        stored += " ".join(MemoryMessage.objects.values_list("content", flat=True))
        assert "hunter2x" not in stored and "4111" not in stored
        (kept,) = MemorySummary.objects.all()
        # The left-out summary's child hangs from its parent (none) instead of being lost with it.
        assert kept.summary == second.summary and kept.parent_summary_id is None


def test_evidence_with_a_secret_is_left_out_even_from_this_servers_own_signed_file(tenant_a, tmp_path):
    b = Builder(tenant_a, default_workspace(tenant_a))
    b.message("普通的一句话", message_id="ok")
    b.message(PASSWORD, message_id="secret")  # capture keeps evidence as said; an import applies rule 7
    path = export(tenant_a, b.workspace, tmp_path)
    copy = workspace_create(tenant=tenant_a, name="Copy")
    report = workspace_import_sqlite(tenant=tenant_a, workspace=copy, path=path)
    assert reasons(report) == [("messages", "secret", "sensitive_content")]
    with tenant_context(tenant_a):
        copied = MemoryMessage.objects.filter(workspace=copy).values_list("message_id", flat=True)
        assert list(copied) == ["ok"]


def test_a_jsonl_line_with_a_secret_is_left_out_and_reported(tenant_a, tmp_path):
    path = tmp_path / "history.jsonl"
    lines = [{"id": "a", "sessionId": "s", "role": "user", "content": "你好"},
             {"id": "b", "sessionId": "s", "role": "user", "content": CARD},
             {"id": "c", "sessionId": "s", "role": "assistant", "content": "好的"}]
    path.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in lines), encoding="utf-8")
    report = messages_import_jsonl(tenant=tenant_a, workspace=default_workspace(tenant_a), path=path)
    assert report.imported == 2
    assert [(c["line"], c["id"], c["reason"]) for c in report.conflicts] == [(2, "b", "sensitive_content")]
    with tenant_context(tenant_a):
        assert sorted(MemoryMessage.objects.values_list("message_id", flat=True)) == ["a", "c"]


# --------------------------------------------------------------------------- signatures (issue 9, defect 5)


def test_the_row_signature_does_not_depend_on_the_source_bytes_of_a_module(tenant_a, tmp_path, monkeypatch):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    before = search_text_version()
    # A comment edited in the text rules (a different file with the module's name) changes nothing.
    import memory.rules.text

    edited = tmp_path / "text.py"
    edited.write_bytes(Path(memory.rules.text.__file__).read_bytes() + b"\n# an edited comment\n")
    monkeypatch.setattr(memory.rules.text, "__file__", str(edited))
    monkeypatch.setattr(node_text, "__file__", str(edited))
    search_text_version.cache_clear()
    assert search_text_version() == before
    signer = SearchTextSigner()
    assert all(signer.row_verified("memory_nodes", NODE_COLUMNS, row) for row in rows(path, "memory_nodes"))
    # What the version does name: the segmenter's release and the explicit rules version.
    assert "jieba-0.42.1" in before and f"text-{node_text.SEARCH_TEXT_VERSION}" in before
    monkeypatch.setattr(signatures, "SEARCH_TEXT_VERSION", node_text.SEARCH_TEXT_VERSION + 1)
    search_text_version.cache_clear()
    assert search_text_version() != before
    assert not any(SearchTextSigner().row_verified("memory_nodes", NODE_COLUMNS, row)
                   for row in rows(path, "memory_nodes"))
    search_text_version.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_search_text_version():  # noqa: ANN202
    search_text_version.cache_clear()
    yield
    search_text_version.cache_clear()
