"""Imports obey the write rules: secrets, scopes, pins, sizes, owners, chains and foreign ids (real DB).

A file is data from outside: whatever it says, an import writes only what `memory/write` (and message
capture) would accept from the same caller, leaves the rest out with a reason in the report, and never
lets one tenant learn anything about another.
"""

from __future__ import annotations

import io
import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.errors import Forbidden
from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary
from memory.rules import node_text
from memory.rules.text import MAX_TEXT
from memory.transfer import signatures
from memory.transfer.jsonl import messages_import_jsonl
from memory.transfer.report import ImportError_
from memory.transfer.signatures import SearchTextSigner, search_text_version
from memory.transfer.sqlite_format import NODE_COLUMNS
from memory.transfer.sqlite_import import workspace_import_sqlite
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant
from tenants.services import workspace_create
from tests.memory_factories import make_member, operator_import
from tests.test_sqlite_io import (
    Builder,
    counts,
    default_workspace,
    export,
    rows,
    sample_workspace,
    user_named,
)

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
    report = operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
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
    report = operator_import(tenant=tenant_a, workspace=copy, path=path)
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


# --------------------------------------------------------------------------- the caller's write rules


def writer(tenant, workspace, **fields) -> Viewer:  # noqa: ANN001
    """An API key's viewer: writable, every agent scope unless narrowed."""
    defaults = {"write_scopes": frozenset({"session", "workspace", "user"}), "read_only": False,
                "actor": "api_key:ekko_test"}
    return Viewer(tenant=tenant, workspace=workspace, **{**defaults, **fields})


def test_global_cards_are_never_imported_and_the_rest_is(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    glob = b.node("公司假期", "全员放假", key="project_context:holiday", scope="global")
    path = export(tenant_a, b.workspace, tmp_path)
    for tenant, workspace in ((tenant_b, default_workspace(tenant_b)),
                              (tenant_a, workspace_create(tenant=tenant_a, name="Copy"))):
        report = operator_import(tenant=tenant, workspace=workspace, path=path)
        assert reasons(report) == [("nodes", str(glob.id), "scope_not_allowed")]
        assert report.imported.nodes == 5
        with tenant_context(tenant):
            assert not MemoryNode.objects.filter(workspace=workspace, scope="global").exists()


def test_a_read_only_caller_or_a_workspace_outside_the_pin_is_refused_whole(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    other = workspace_create(tenant=tenant_a, name="Other")
    before = counts(tenant_a)
    with pytest.raises(Forbidden):
        workspace_import_sqlite(tenant=tenant_a, workspace=other, path=path,
                                viewer=writer(tenant_a, other, read_only=True))
    with pytest.raises(Forbidden, match="pinned"):
        workspace_import_sqlite(tenant=tenant_a, workspace=other, path=path,
                                viewer=writer(tenant_a, other, pinned_workspace_id=b.workspace.pk))
    assert counts(tenant_a) == before
    report = workspace_import_sqlite(tenant=tenant_a, workspace=other, path=path,
                                     viewer=writer(tenant_a, other, pinned_workspace_id=other.pk))
    assert report.imported.nodes == 5


def test_cards_outside_the_callers_write_scopes_are_left_out(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)  # four workspace cards, one session card
    path = export(tenant_a, b.workspace, tmp_path)
    target = default_workspace(tenant_b)
    report = workspace_import_sqlite(tenant=tenant_b, workspace=target, path=path,
                                     viewer=writer(tenant_b, target, write_scopes=frozenset({"session"})))
    assert [r for _, _, r in reasons(report)] == ["scope_not_allowed"] * 4
    assert report.imported.nodes == 1
    with tenant_context(tenant_b):
        assert list(MemoryNode.objects.values_list("scope", flat=True)) == ["session"]
        # The events of the cards left out stay out with them; the hard-forgotten card's event is kept.
        assert MemoryAuditEvent.objects.count() == 1


def test_a_person_imports_only_their_own_user_cards(tenant_a, tmp_path):
    alice = user_named("alice")
    carol = make_member(tenant=tenant_a, username="carol")
    b = Builder(tenant_a, default_workspace(tenant_a))
    mine = b.node("我的偏好", "少辣", key="flavor_profile", scope="user", user=alice)
    theirs = b.node("Carol 的偏好", "不要葱", key="avoid_ingredient:葱", scope="user", user=carol)
    path = export(tenant_a, b.workspace, tmp_path)
    other = workspace_create(tenant=tenant_a, name="Other")
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk__in=[mine.id, theirs.id]).update(content="改过")  # not duplicates
    person = writer(tenant_a, other, user=alice, restrict_to_person=True,
                    member_workspace_ids=frozenset({other.pk, b.workspace.pk}))
    report = workspace_import_sqlite(tenant=tenant_a, workspace=other, path=path, viewer=person)
    assert ("nodes", str(theirs.id), "other_person") in reasons(report)
    assert ("nodes", str(mine.id), "other_person") not in reasons(report)


# --------------------------------------------------------------------------- sizes and memory


def test_texts_over_the_api_limit_are_left_out_and_never_read_whole(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    huge = "香菜" * (MAX_TEXT // 2) + "!"  # one character over the API's limit
    node = b.nodes[2]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_nodes SET content = ? WHERE id = ?", (huge, str(node.id)))
        db.execute("UPDATE memory_messages SET content = ? WHERE id = 'm2'", ("x" * 5_000_000,))
        db.execute("UPDATE memory_audit_events SET reason = ? WHERE rowid = 4", ("y" * (MAX_TEXT + 1),))
    report = operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    assert sorted(reasons(report)) == sorted([
        ("nodes", str(node.id), "too_large"), ("messages", "m2", "too_large"),
        ("auditEvents", reasons_id(path, "memory_audit_events", 4), "too_large")])
    assert "20000" in report.conflicts[0]["detail"]
    assert report.imported.as_json() == {"messages": 1, "summaries": 2, "nodes": 4, "auditEvents": 3}
    with tenant_context(tenant_b):
        assert max(len(c) for c in MemoryMessage.objects.values_list("content", flat=True)) < MAX_TEXT


def reasons_id(path: Path, table: str, rowid: int) -> str:
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT id FROM {table} WHERE rowid = ?", (rowid,)).fetchone()[0]


def test_a_jsonl_line_over_the_api_limit_is_left_out(tenant_a, tmp_path):
    path = tmp_path / "history.jsonl"
    lines = [{"id": "a", "sessionId": "s", "role": "user", "content": "你好"},
             {"id": "big", "sessionId": "s", "role": "user", "content": "x" * (MAX_TEXT + 1)},
             {"id": "huge", "sessionId": "s", "role": "user", "content": "y" * 2_000_000}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    report = messages_import_jsonl(tenant=tenant_a, workspace=default_workspace(tenant_a), path=path)
    assert report.imported == 1
    assert [(c["line"], c["reason"]) for c in report.conflicts] == [(2, "too_large"), (3, "too_large")]


# --------------------------------------------------------------------------- owners


def test_a_user_card_of_someone_who_is_no_member_is_refused_or_mapped(tenant_a, tenant_b, tmp_path):
    alice = user_named("alice")
    b = Builder(tenant_a, default_workspace(tenant_a))
    card = b.node("Alice 的偏好", "少油", key="flavor_profile", scope="user", user=alice)
    b.node("项目约定", "周五不上线", key="project_context:friday")
    orphan = b.node("没有主人", "无主", key="avoid_ingredient:无主", scope="user")
    path = export(tenant_a, b.workspace, tmp_path)
    target = default_workspace(tenant_b)
    report = operator_import(tenant=tenant_b, workspace=target, path=path)
    assert sorted(reasons(report)) == sorted([("nodes", str(card.id), "unknown_user"),
                                              ("nodes", str(orphan.id), "unknown_user")])
    with pytest.raises(ImportError_, match="not members"):
        operator_import(tenant=tenant_b, workspace=target, path=path, user_map={"alice": "nobody"})
    report = operator_import(tenant=tenant_b, workspace=target, path=path, user_map={"alice": "bob"})
    assert reasons(report) == [("nodes", str(orphan.id), "unknown_user")] and report.imported.nodes == 1
    with tenant_context(tenant_b):
        mapped = MemoryNode.objects.get(title="Alice 的偏好")
        assert mapped.user.username == "bob" and mapped.owner_ref == f"user:{mapped.user_id}"
        assert not MemoryNode.objects.filter(scope="user", user__isnull=True).exists()


def test_the_import_command_maps_users_with_map_user(tenant_a, tenant_b, tmp_path):
    alice = user_named("alice")
    b = Builder(tenant_a, default_workspace(tenant_a))
    b.node("Alice 的偏好", "少油", key="flavor_profile", scope="user", user=alice)
    path = export(tenant_a, b.workspace, tmp_path)
    out = io.StringIO()
    call_command("import_workspace", "tenant-b/default", str(path), "--map-user", "alice=bob", "--quiet",
                 "--no-embed", stdout=out, stderr=io.StringIO())
    assert "imported 0 messages, 0 summaries, 1 nodes" in out.getvalue()
    with pytest.raises(CommandError, match="NAME=MEMBER"):
        call_command("import_workspace", "tenant-b/default", str(path), "--map-user", "alice", "--quiet")
    with tenant_context(tenant_b):
        assert MemoryNode.objects.get(title="Alice 的偏好").user.username == "bob"


# --------------------------------------------------------------------------- supersede chains


def user_chain(tenant: Tenant):  # noqa: ANN201
    alice = user_named("alice")
    b = Builder(tenant, default_workspace(tenant))
    old = b.node("少辣", "用户要少辣", key="flavor_profile", scope="user", user=alice, status="superseded")
    head = b.node("微辣", "用户现在要微辣", key="flavor_profile", scope="user", user=alice, supersedes=old,
                  revision=2)
    b.event(old.id)
    b.event(head.id, "supersede")
    return b, old, head


def test_a_copy_into_another_workspace_never_keeps_a_chain_without_its_head(tenant_a, tmp_path):
    b, old, head = user_chain(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    other = workspace_create(tenant=tenant_a, name="Other")
    report = operator_import(tenant=tenant_a, workspace=other, path=path)
    # The person's chain is already theirs (user cards follow them): the whole chain is skipped.
    assert (report.imported.nodes, report.skipped.nodes, report.conflicts) == (0, 2, [])
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(workspace=other).exists()
        assert not MemoryAuditEvent.objects.filter(workspace=other).exists()


def test_a_chain_whose_head_is_refused_is_left_out_whole(tenant_a, tmp_path):
    b, old, head = user_chain(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_nodes SET content = ? WHERE id = ?", (PASSWORD, str(head.id)))
    other = workspace_create(tenant=tenant_a, name="Other")
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk__in=[old.id, head.id]).delete()  # nothing here to be a duplicate of
    report = operator_import(tenant=tenant_a, workspace=other, path=path)
    assert sorted(reasons(report)) == sorted([("nodes", str(head.id), "sensitive_content"),
                                              ("nodes", str(old.id), "chain")])
    assert str(head.id) in next(c["detail"] for c in report.conflicts if c["reason"] == "chain")
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(workspace=other).exists()


# --------------------------------------------------------------------------- ids of other tenants


def test_an_id_another_tenant_uses_imports_exactly_like_an_unused_one(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    theirs = Builder(tenant_b, default_workspace(tenant_b))
    their_node = theirs.node("B 的卡片", "B 的内容")
    their_summary = theirs.summary("B 的摘要")
    their_event = theirs.event(their_node.id)
    path = export(tenant_a, b.workspace, tmp_path)

    def laptop_rows(node_id: str, summary_id: str, event_id: str) -> Path:
        copy = tmp_path / f"laptop-{node_id[:8]}.sqlite"
        copy.write_bytes(path.read_bytes())
        with sqlite3.connect(copy) as db:
            db.execute(
                "INSERT INTO memory_nodes (id, workspace_id, scope, domain, category_path_json, "
                "category_path_text, type, key, title, content, status, confidence, importance, tags_json, "
                "created_at, updated_at, revision) VALUES (?, '1', 'workspace', '项目', '[\"项目\"]', "
                "'项目', 'fact', ?, '笔记本上的新卡片', '在笔记本上写的', 'active', 0.8, 0.5, '[]', "
                "'2025-04-01T10:00:00Z', '2025-04-01T10:00:00Z', 1)",
                (node_id, f"project_context:{node_id}"),
            )
            db.execute(  # the first summary of a new session
                "INSERT INTO memory_summaries (id, session_id, from_message_id, to_message_id, summary, "
                "created_at) VALUES (?, ?, 'm1', 'm2', '新的摘要', '2025-04-01T10:00:00Z')",
                (summary_id, f"laptop-{summary_id}"),
            )
            db.execute(
                "INSERT INTO memory_audit_events (id, event_type, node_id, actor, reason, created_at) "
                "VALUES (?, 'create', ?, 'user:alice', '笔记本', '2025-04-01T10:00:00Z')",
                (event_id, node_id),
            )
        return copy

    def imported(file: Path) -> dict:
        report = operator_import(tenant=tenant_a, workspace=b.workspace, path=file)
        assert report.mode == "same_workspace"
        return report.as_json()

    unused = imported(laptop_rows(*(str(uuid.uuid4()) for _ in range(3))))
    foreign_file = laptop_rows(str(their_node.id), str(their_summary.id), str(their_event.id))
    foreign = imported(foreign_file)
    assert foreign == unused  # same counts, no conflict, no word about the other tenant
    assert foreign["imported"] == {"messages": 0, "summaries": 1, "nodes": 1, "auditEvents": 1}
    assert foreign["conflicts"] == []
    with tenant_context(tenant_a):
        mine = MemoryNode.objects.get(title="笔记本上的新卡片", key=f"project_context:{their_node.id}")
        assert mine.pk != their_node.id
        assert MemoryAuditEvent.objects.filter(node_id=mine.pk, reason="笔记本").exists()
    # Importing the same file again adds nothing: the renamed rows are found under their new ids.
    again = imported(foreign_file)
    assert again["imported"] == {"messages": 0, "summaries": 0, "nodes": 0, "auditEvents": 0}
    assert again["conflicts"] == []
    with tenant_context(tenant_b):
        assert MemoryNode.objects.get(pk=their_node.id).title == "B 的卡片"
        assert MemorySummary.objects.get(pk=their_summary.id).summary == "B 的摘要"
        assert MemoryAuditEvent.objects.get(pk=their_event.id).reason == their_event.reason
