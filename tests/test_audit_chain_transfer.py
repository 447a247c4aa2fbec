"""Issue 10, Deliver 6: export/import carries the audit chain.

A workspace file holds each event's place in the source tenant's chain and the source tenant's head;
an import checks every event against its digests, leaves out (and reports) one changed since export,
and chains the events it keeps anew in its own tenant.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from memory.audit_chain import audit_chain_verify
from memory.rules.audit_digest import VERSION
from memory.transfer.sqlite_export import workspace_export_sqlite
from tests.api_client import api_for
from tests.memory_factories import default_workspace, operator_import
from tests.test_api_memory_rules import create, write
from tests.test_audit_chain import _events

pytestmark = pytest.mark.django_db


@pytest.fixture
def source(client, tenant_a):  # noqa: ANN001
    api = api_for(client, tenant_a)
    results = []
    for name in ("alpha", "beta", "gamma"):
        results += write(api, create({"kind": "project_context", "itemKey": name, "title": f"about {name}",
                                      "content": f"{name} matters"}, reason=f"noted {name}"),
                         intent=False, sources=())["results"]
    api.post("memory/forget", {"id": results[2]["nodeId"], "expectedRevision": 1, "mode": "hard",
                               "reason": "gone", "explicitUserIntent": True})
    return default_workspace(tenant_a)


def _export(tenant, workspace, tmp_path):  # noqa: ANN001, ANN202
    path = tmp_path / "chain.sqlite"
    workspace_export_sqlite(tenant=tenant, workspace=workspace, path=path)
    return path


def _file_events(path) -> list[dict]:  # noqa: ANN001
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute("SELECT * FROM memory_audit_events ORDER BY sequence")]


def test_the_file_carries_each_event_s_place_in_the_chain_and_the_head(tenant_a, source, tmp_path):
    path = _export(tenant_a, source, tmp_path)
    stored = {str(e.pk): e for e in _events(tenant_a)}
    events = _file_events(path)
    assert events and all(
        (row["sequence"], row["previous_digest"], row["content_digest"], row["digest"])
        == (stored[row["id"]].sequence, stored[row["id"]].previous_digest, stored[row["id"]].content_digest,
            stored[row["id"]].digest) for row in events)
    assert any(row["content_salt"] == "" and row["reason"] == "" for row in events)  # erased by the forget
    with sqlite3.connect(path) as db:
        (value,) = db.execute("SELECT value FROM memory_export_info WHERE key = 'audit_chain'").fetchone()
    head = max(stored.values(), key=lambda e: e.sequence)
    assert json.loads(value) == {"format": VERSION, "tenantId": tenant_a.pk, "headSequence": head.sequence,
                    "headDigest": head.digest}


def test_an_import_chains_the_events_anew_in_its_tenant(tenant_a, tenant_b, source, tmp_path):
    path = _export(tenant_a, source, tmp_path)
    report = operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    assert report.conflicts == [] and report.imported.audit_events == len(_file_events(path))
    assert [e.sequence for e in _events(tenant_b)] == list(range(1, len(_events(tenant_b)) + 1))
    assert audit_chain_verify(tenant=tenant_b).intact and audit_chain_verify(tenant=tenant_a).intact


def test_an_event_changed_in_the_file_is_left_out_and_reported(tenant_a, tenant_b, source, tmp_path):
    path = _export(tenant_a, source, tmp_path)
    events = _file_events(path)
    changed = next(row for row in events if row["reason"] == "noted beta")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE memory_audit_events SET reason = 'nothing to see' WHERE id = ?", [changed["id"]])
        db.execute("UPDATE memory_audit_events SET actor = 'user:mallory' WHERE reason = 'noted alpha'")
    report = operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    tampered = [c for c in report.conflicts if c["reason"] == "tampered"]
    assert len(tampered) == 2 and changed["id"] in {c["id"] for c in tampered}
    assert "reason or payload changed" in next(c["detail"] for c in tampered if c["id"] == changed["id"])
    assert report.imported.audit_events == len(events) - 2
    reasons = {e.reason for e in _events(tenant_b)}
    assert "nothing to see" not in reasons and "noted gamma" not in reasons
    assert audit_chain_verify(tenant=tenant_b).intact


def test_imported_events_are_chained_oldest_first(tenant_a, tenant_b, source, tmp_path):
    path = _export(tenant_a, source, tmp_path)
    operator_import(tenant=tenant_b, workspace=default_workspace(tenant_b), path=path)
    imported = _events(tenant_b)
    order = [(e.created_at, str(e.pk)) for e in imported]
    assert order == sorted(order)
