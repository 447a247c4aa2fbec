"""API latency at scale: p50/p95/p99 of memory/search, memory/write and context over real HTTP.

Seeds one tenant with N nodes (plus noise tenants), starts gunicorn against the bench database
on the embedded PostgreSQL, and times sequential requests from one client. Targets (issue 3):
search p95 <= 20 ms and write p95 <= 25 ms at 100k nodes; context p95 <= 40 ms.

    .venv/bin/python bench/api_latency.py --nodes 10000 100000
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import (  # noqa: E402
    BENCH_DATABASE,
    ROOT,
    SERVERS,
    git_revision,
    lift_card_limit,
    load_average,
    machine,
    percentiles,
    server_command,
    setup_django,
)

FOODS = ["香菜", "葱", "姜", "蒜", "辣椒", "花生", "牛奶", "海鲜", "羊肉", "芹菜", "coriander", "peanuts",
         "shellfish", "mushrooms", "olives", "tofu", "eggplant", "okra", "blue cheese", "anchovies"]
TOPICS = ["项目部署", "数据库迁移", "前端构建", "API 设计", "测试策略", "release process", "on-call rotation",
          "kubernetes upgrade", "billing service", "search relevance", "mobile app", "data pipeline"]
PHRASES = ["用户明确要求", "以后都按这个来", "the user prefers", "remember that", "decided to", "must never",
           "每周五下午", "in the morning", "少油少辣", "without sugar", "written in English", "用中文回答"]


def _text(rng: random.Random, index: int) -> tuple[str, str]:
    food, topic, phrase = rng.choice(FOODS), rng.choice(TOPICS), rng.choice(PHRASES)
    title = f"{topic}: {phrase} {food} #{index}"
    content = f"{phrase}，{topic} 相关 {food}。Note {index}: {rng.choice(PHRASES)} {rng.choice(TOPICS)}."
    return title, content


def seed(tenant_slug: str, nodes: int, *, rng: random.Random, embed: bool) -> dict:
    """Create a tenant with `nodes` nodes (bulk), messages, and return ids the requests need."""
    from django.utils import timezone

    from memory.models import MemoryMessage, MemoryNode
    from memory.rules.kinds import DEFAULT_KINDS
    from memory.rules.text import segment_for_search
    from memory.search.embeddings import get_provider
    from memory.visibility import owner_ref
    from tenants.context import tenant_context
    from tenants.models import Workspace
    from tenants.services import api_key_create, tenant_create

    setup = tenant_create(slug=tenant_slug, owner_username=f"{tenant_slug}-owner")
    lift_card_limit(setup)
    tenant, user = setup.tenant, setup.owner
    with tenant_context(tenant):
        existing = MemoryNode.objects.filter(tenant=tenant).count()
        workspace = Workspace.objects.get(tenant=tenant, slug="default")
    kinds = [k for k in DEFAULT_KINDS.values()
             if k.itemized and k.value_shape in ("string", "string_or_object")]
    provider = get_provider() if embed else None
    now = timezone.now()
    batch_size = 2000
    started = time.perf_counter()
    for start in range(existing, nodes, batch_size):
        rows, texts = [], []
        for index in range(start, min(nodes, start + batch_size)):
            kind = kinds[index % len(kinds)]
            scope = "user" if kind.default_scope == "user" else "workspace"
            title, content = _text(rng, index)
            item_key = f"item_{index}"
            node = MemoryNode(
                id=uuid.uuid4(), tenant=tenant, workspace=workspace, user=user if scope == "user" else None,
                scope=scope, owner_ref=owner_ref(scope=scope, workspace_id=workspace.pk, session_id=None,
                                                 user_id=user.pk if scope == "user" else None),
                kind=kind.name, item_key=item_key, key=f"{kind.slot_key}:{item_key}", domain=kind.domain,
                category_path=list(kind.category_path), category_path_text="/".join(kind.category_path),
                type=kind.type, value_json=rng.choice(FOODS), title=title, content=content,
                status="active" if index % 10 else "superseded", confidence=round(rng.uniform(0.4, 0.99), 2),
                importance=round(rng.uniform(0.2, 0.95), 2), tags=[rng.choice(TOPICS)], entities=[],
                created_at=now - timedelta(minutes=index), updated_at=now - timedelta(minutes=index),
                search_text=segment_for_search(title, content),
            )
            rows.append(node)
            texts.append(f"{title}\n{content}")
        if provider is not None:
            for node, vector in zip(rows, provider.embed(texts), strict=True):
                node.embedding, node.embedding_model = vector, provider.model_id
        with tenant_context(tenant):
            MemoryNode.objects.bulk_create(rows)
        done = min(nodes, start + batch_size)
        print(f"  {tenant_slug}: {done:,}/{nodes:,} nodes ({time.perf_counter() - started:.0f}s)",
              file=sys.stderr, flush=True)
    with tenant_context(tenant):
        MemoryMessage.objects.get_or_create(
            tenant=tenant, workspace=workspace, message_id="bench-evidence",
            defaults={"session_id": "bench", "role": "user", "content": "记住我不吃香菜 remember this",
                      "created_at": now, "search_text": segment_for_search("记住我不吃香菜 remember this")})
    return {"key": api_key_create(tenant=tenant, name="bench").raw_key, "user": user.get_username()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Client:
    def __init__(self, port: int, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict) -> tuple[float, int, dict]:
        payload = json.dumps(body)
        started = time.perf_counter()
        self.conn.request("POST", f"/api/v1/{path}", body=payload, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        return elapsed, response.status, json.loads(data)


def operations(user: str, rng: random.Random) -> dict[str, Callable[[int], tuple[str, dict]]]:
    """Return the timed operations: name -> (request number -> (path, JSON body))."""
    return {
        "search structured": lambda i: ("memory/search", {"userId": user, "kinds": ["food_avoidance"],
                                                          "valueJson": rng.choice(FOODS), "limit": 20}),
        "search keyword": lambda i: ("memory/search", {"userId": user, "queryText": rng.choice(
            ["香菜", "数据库迁移 项目", "kubernetes upgrade", "用中文回答", "billing service without sugar",
             "什么时候部署", "peanuts allergy"]), "limit": 20}),
        "write": lambda i: ("memory/write", {
            "explicitUserIntent": True, "sourceMessageIds": ["bench-evidence"],
            "operations": [{"operation": "create", "reason": "bench", "node": {
                "kind": "project_context", "itemKey": f"bench_{i}_{rng.random():.6f}", "valueJson": "bench",
                "title": f"Bench fact {i}", "content": "数据库迁移要在周五之前完成 before the release"}}]}),
        "context": lambda i: ("context", {
            "sessionId": "bench", "userId": user, "tokenBudget": 2000,
            "queryText": rng.choice(["今晚吃什么？", "how do we deploy?", "数据库迁移怎么做"])}),
    }


def run_requests(port: int, info: dict, count: int, rng: random.Random) -> dict[str, dict]:
    client = Client(port, info["key"])
    results = {}
    for name, make in operations(info["user"], rng).items():
        for i in range(10):  # warm-up: connections, caches, embedding model
            client.post(*make(-i - 1))
        samples, errors = [], 0
        for i in range(count):
            elapsed, status, _ = client.post(*make(i))
            samples.append(elapsed)
            errors += status >= 400
        results[name] = {**percentiles(samples), "errors": errors}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--noise", type=int, default=20_000, help="nodes in each of two noise tenants")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per operation")
    parser.add_argument("--no-embeddings", action="store_true", help="seed without vectors (keyword only)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server", choices=sorted(SERVERS), default="asgi",
                        help="asgi (uvicorn workers, as in production) or wsgi (sync workers), to compare")
    args = parser.parse_args()
    setup_django()
    rng = random.Random(42)
    print(f"machine: {machine()}\ncommit: {git_revision()}\ncommand: {' '.join(sys.argv)}", flush=True)
    print(f"load average at start: {load_average()}", flush=True)
    for noise in ("bench-noise-1", "bench-noise-2"):
        seed(noise, args.noise, rng=rng, embed=not args.no_embeddings)
    port = _free_port()
    env = {**os.environ, "EKKO_DATABASE_NAME": BENCH_DATABASE, "EKKO_RATE_LIMIT": "1000000/min",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    for size in sorted(args.nodes):
        info = seed(f"bench-{size}", size, rng=rng, embed=not args.no_embeddings)
        server = subprocess.Popen(
            [*server_command(port, args.workers, args.server), "--log-level", "warning"], cwd=ROOT, env=env)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            load_before = load_average()
            results = run_requests(port, info, args.requests, rng)
            load_after = load_average()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        print(f"\n{size:,} nodes in the measured tenant, 2 x {args.noise:,} noise nodes, "
              f"{'with' if not args.no_embeddings else 'without'} vectors, "
              f"gunicorn {args.workers} {args.server} workers, "
              f"{args.requests} sequential requests per operation; "
              f"load average {load_before} -> {load_after}")
        print(f"{'operation':<20}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for name, stats in results.items():
            print(f"{name:<20}{stats['p50']:>9.1f}{stats['p95']:>9.1f}{stats['p99']:>9.1f}{stats['errors']:>8}")


if __name__ == "__main__":
    main()
