"""Time SQLite export and import of a large workspace (memory.transfer) and print the figures.

    .venv/bin/python bench/sqlite_io.py [--nodes 100000] [--vectors] [--keep-files]

Creates a throwaway tenant, fills its default workspace with `--nodes` memory cards of realistic
mixed Chinese/English text (supersede chains, every status, one create audit event per card, two
evidence messages per ten cards, a few summary chains), exports it to a temporary SQLite file,
imports that file into a fresh workspace of the same tenant (a copy: every id remapped), and
prints both times with the data size, the machine and the command. The tenant and the files
are removed afterwards, whatever happens. Targets (issue 6): export <= 10 s, import <= 20 s at
100k cards. Uses the database the settings name (the embedded PostgreSQL by default).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from bench._common import lift_card_limit  # noqa: E402
from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary  # noqa: E402
from memory.rules.node_text import node_search_text  # noqa: E402
from memory.rules.text import segment_for_search  # noqa: E402
from memory.transfer.import_rules import importer_viewer  # noqa: E402
from memory.transfer.sqlite_export import workspace_export_sqlite  # noqa: E402
from memory.transfer.sqlite_format import server_embedding_model  # noqa: E402
from memory.transfer.sqlite_import import workspace_import_sqlite  # noqa: E402
from memory.visibility import owner_ref  # noqa: E402
from tenants.context import tenant_context  # noqa: E402
from tenants.models import Tenant, Workspace  # noqa: E402
from tenants.services import tenant_create, workspace_create  # noqa: E402

BATCH = 5000
FOODS = ["香菜", "花生", "辣椒", "牛奶", "海鲜", "蒜", "葱", "芹菜", "羊肉", "榴莲", "cilantro", "peanuts"]
PLACES = ["杭州", "北京", "上海", "深圳", "Berlin", "Lisbon", "成都", "Toronto"]
TOOLS = ["PostgreSQL", "pgvector", "Django", "Celery", "Redis", "Docker", "Kubernetes", "SQLite", "jieba"]
TEMPLATES = [
    ("不吃{food}", "用户明确说过不吃{food}，做饭和推荐菜谱时都不要放{food}。Never add {food} to recipes."),
    (
        "项目使用 {tool}",
        "项目部署在 {tool} 上，所有新服务都要兼容 {tool}。The team standardised on {tool} in {year}.",
    ),
    ("住在{place}", "用户目前住在{place}，推荐餐厅和活动时以{place}为准。Lives in {place} since {year}."),
    (
        "沟通偏好 {n}",
        "回答要简洁，先给结论再给理由；用中文回答，代码注释用英文。Keep answers short, item {n}.",
    ),
    (
        "任务：迁移 {tool}",
        "本周要把旧服务迁移到 {tool}，截止日期是周五。Migration ticket #{n} is in progress.",
    ),
    (
        "决策 {n}",
        "经过讨论决定不再使用 {tool}，改用 {tool2}，原因是维护成本太高。Decision recorded by the team.",
    ),
]
STATUSES = ["active"] * 16 + ["deleted", "expired"]


def card_text(rng: random.Random, n: int) -> tuple[str, str, list[str], list[str]]:
    title, content = rng.choice(TEMPLATES)
    values = {
        "food": rng.choice(FOODS),
        "tool": rng.choice(TOOLS),
        "tool2": rng.choice(TOOLS),
        "place": rng.choice(PLACES),
        "year": rng.randint(2015, 2026),
        "n": n,
    }
    tags = rng.sample(["饮食", "项目", "偏好", "cooking", "infra", "约束", "沟通"], 2)
    entities = [values["food"], values["tool"]][: rng.randint(1, 2)]
    return title.format(**values), content.format(**values), tags, entities


def populate(
    tenant: Tenant, workspace: Workspace, nodes: int, vectors: bool, rng: random.Random
) -> dict[str, int]:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    owner = owner_ref(scope="workspace", workspace_id=workspace.pk, session_id=None, user_id=None)
    made = {"nodes": 0, "messages": 0, "events": 0, "summaries": 0}
    model = server_embedding_model() or "bench"
    for start in range(0, nodes, BATCH):
        node_rows, event_rows, message_rows = [], [], []
        previous: MemoryNode | None = None
        for n in range(start, min(start + BATCH, nodes)):
            title, content, tags, entities = card_text(rng, n)
            at = base + timedelta(seconds=n * 13)
            # Every fifth card is a new revision of the card before it (a supersede chain in one slot).
            chained = previous is not None and n % 5 == 4
            if chained:
                previous.status = "superseded"
            status = "active" if chained else rng.choice(STATUSES)
            key = previous.key if chained else f"project_context:item_{n}"
            vector = None
            if vectors:
                vector = np.random.default_rng(n).standard_normal(512).astype(np.float32)
                vector = (vector / np.linalg.norm(vector)).tolist()
            node = MemoryNode(
                id=uuid.uuid4(),
                tenant=tenant,
                workspace=workspace,
                scope="workspace",
                owner_ref=owner,
                kind="project_context",
                item_key=key.split(":")[1],
                key=key,
                domain="项目",
                category_path=["项目", "背景"],
                category_path_text="项目/背景",
                type="fact",
                value_json={"n": n, "note": title},
                title=title,
                content=content,
                status=status,
                confidence=round(rng.uniform(0.4, 1), 3),
                importance=round(rng.uniform(0.2, 1), 3),
                tags=tags,
                entities=entities,
                source_message_ids=[f"msg-{n // 5}"] if n % 5 == 0 else [],
                explicit_user_intent=bool(n % 2),
                supersedes=previous if chained else None,
                revision=(previous.revision + 1) if chained else 1,
                created_at=at,
                updated_at=at,
                expires_at=at + timedelta(days=1) if status == "expired" else None,
                search_text=node_search_text(
                    title=title, content=content, value_json={"n": n, "note": title},
                    item_key=key.split(":")[1], tags=tags, entities=entities,
                ),
                embedding=vector,
                embedding_model=model if vector else "",
            )
            node_rows.append(node)
            previous = node
            event_rows.append(
                MemoryAuditEvent(
                    tenant=tenant,
                    workspace=workspace,
                    event_type="supersede" if chained else "create",
                    node_id=node.id,
                    session_id=None,
                    actor="system",
                    reason="bench",
                    payload={"title": title},
                    created_at=at,
                )
            )
            if n % 5 == 0:
                text = f"{content} 这是第 {n // 5} 条消息。"
                message_rows.append(
                    MemoryMessage(
                        tenant=tenant,
                        workspace=workspace,
                        message_id=f"msg-{n // 5}",
                        session_id=f"s{n // 500}",
                        role="user" if n % 10 == 0 else "assistant",
                        content=text,
                        created_at=at,
                        search_text=segment_for_search(text),
                        token_count=len(text),
                    )
                )
        with tenant_context(tenant):
            MemoryMessage.objects.bulk_create(message_rows, batch_size=1000)
            MemoryNode.objects.bulk_create(node_rows, batch_size=1000)
            MemoryAuditEvent.objects.bulk_create(event_rows, batch_size=1000)
        made["nodes"] += len(node_rows)
        made["messages"] += len(message_rows)
        made["events"] += len(event_rows)
        print(f"  populated {made['nodes']:,}/{nodes:,} cards", file=sys.stderr, end="\r")
    with tenant_context(tenant):
        for session in range(min(20, nodes // 500 + 1)):
            parent = None
            for step in range(5):
                parent = MemorySummary.objects.create(
                    tenant=tenant,
                    workspace=workspace,
                    session_id=f"s{session}",
                    parent_summary=parent,
                    from_message_id=f"msg-{step}",
                    to_message_id=f"msg-{step + 1}",
                    summary=f"第 {step} 段对话的摘要",
                    constraints=["不要香菜"],
                    preferences=["少辣"],
                    decisions=[],
                    completed_work=[],
                    pending_work=[],
                    known_issues=[],
                    created_at=base + timedelta(minutes=step),
                )
                made["summaries"] += 1
    print(file=sys.stderr)
    return made


def remove_tenant(tenant: Tenant) -> None:
    """Delete the throwaway tenant and all its rows (raw deletes: the ORM cascade would load every row)."""
    with tenant_context(tenant), connection.cursor() as cursor:
        for table in (
            "memory_memoryreadevent",
            "memory_auditchainhead",
            "memory_memoryauditevent",
            "memory_memorysummary",
            "memory_memorynode",
            "memory_memorymessage",
            "memory_memorykind",
            "tenants_apikey",
            "tenants_workspacemember",
            "tenants_workspace",
            "tenants_membership",
        ):
            cursor.execute(f"DELETE FROM {table} WHERE tenant_id = %s", [tenant.pk])
    Tenant.objects.filter(pk=tenant.pk).delete()


def backend_cpu_seconds() -> float | None:
    """CPU seconds used so far by this connection's PostgreSQL backend (embedded server on this machine)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None  # a remote server
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall time, this process's CPU time and the PostgreSQL backend's CPU time of one step."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu, self.db = time.perf_counter(), time.process_time(), backend_cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        db = backend_cpu_seconds()
        self.db = None if db is None or self.db is None else db - self.db

    def cpu_text(self) -> str:
        db = "?" if self.db is None else f"{self.db:.1f}"
        return f"CPU: python {self.cpu:.1f} s, postgres {db} s"


def machine() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    return (
        f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
        f"PostgreSQL {pg}, SQLite {__import__('sqlite3').sqlite_version}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000, help="memory cards to create (default 100000)")
    parser.add_argument(
        "--vectors", action="store_true", help="give every card a 512-d vector (slow to set up)"
    )
    parser.add_argument("--keep-files", action="store_true", help="leave the exported file in place")
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    slug = f"bench-sqlite-{uuid.uuid4().hex[:8]}"
    owner = f"{slug}-owner"
    setup = tenant_create(slug=slug, owner_username=owner)
    lift_card_limit(setup)
    tenant = setup.tenant
    workdir = Path(tempfile.mkdtemp(prefix="ekko-bench-sqlite-"))
    try:
        with tenant_context(tenant):
            source = Workspace.objects.get(tenant=tenant, slug=Workspace.DEFAULT_SLUG)
        started = time.perf_counter()
        made = populate(tenant, source, args.nodes, args.vectors, rng)
        setup_seconds = time.perf_counter() - started
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

        path = workdir / "workspace.sqlite"
        load_before = os.getloadavg()[0]
        with Timer() as exporting:
            stats = workspace_export_sqlite(tenant=tenant, workspace=source, path=path)
        export_seconds = exporting.wall

        target = workspace_create(tenant=tenant, name="Bench import target")
        with Timer() as importing:
            # Embeddings are queued after commit in real use; without a broker they would run inline here.
            report = workspace_import_sqlite(
                tenant=tenant, workspace=target, path=path, embed_after_commit=False,
                viewer=importer_viewer(tenant=tenant, workspace=target, actor="system"),
            )
        import_seconds = importing.wall

        assert report.imported.nodes == made["nodes"], report.as_json()
        rows = made["nodes"] + made["messages"] + made["events"] + made["summaries"]
        print(f"command:  {shlex.join([sys.executable, *sys.argv])}")
        print(f"machine:  {machine()}")
        print(
            f"data:     {made['nodes']:,} cards ({'with' if args.vectors else 'without'} vectors), "
            f"{made['messages']:,} messages, {made['events']:,} audit events, {made['summaries']} summaries "
            f"= {rows:,} rows; file {stats.bytes / 1e6:.1f} MB (set up in {setup_seconds:.0f} s)"
        )
        print(
            f"load:     1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after "
            f"(other processes share the CPUs; the CPU figures below do not depend on that)"
        )
        print(
            f"export:   {export_seconds:6.2f} s  ({rows / export_seconds:,.0f} rows/s)   target <= 10 s "
            f"{'OK' if export_seconds <= 10 else 'MISSED'}   {exporting.cpu_text()}"
        )
        print(
            f"import:   {import_seconds:6.2f} s  ({rows / import_seconds:,.0f} rows/s)   target <= 20 s "
            f"{'OK' if import_seconds <= 20 else 'MISSED'}   {importing.cpu_text()}  "
            "(copy into a fresh workspace, ids remapped)"
        )
        print(f"report:   {report.summary_line()}")
        if args.keep_files:
            print(f"file:     {path}")
    finally:
        remove_tenant(tenant)
        get_user_model().objects.filter(username=owner).delete()
        if not args.keep_files:
            for leftover in workdir.iterdir():
                leftover.unlink()
            workdir.rmdir()


if __name__ == "__main__":
    main()
