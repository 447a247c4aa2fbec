"""The write guards live in the services: every write service refuses, whatever calls it.

Each test calls a service directly (no view in between) with a viewer the edge would never hand
it — read-only, pinned to another workspace, a person outside their workspaces or acting for
someone else — and checks the error code and that nothing was written. Also: summaries refuse
secrets like cards do, and two concurrent captures of one client id give the loser the stored row.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, connections, transaction

from memory.errors import MemoryServiceError
from memory.models import MemoryAuditEvent, MemoryMessage, MemoryNode, MemorySummary
from memory.rules.scope_policy import AGENT_WRITABLE_SCOPES
from memory.services import (
    ForgetRequest,
    NodeWrite,
    message_append_batch,
    node_forget,
    node_restore,
    node_write_batch,
    node_write_bulk,
    summary_append,
)
from memory.visibility import Viewer
from tenants.context import tenant_context
from tenants.models import Tenant, Workspace
from tests.factories import make_tenant
from tests.memory_factories import default_workspace, make_member, make_workspace

SESSION = "s1"


def viewer_for(tenant: Tenant, workspace: Workspace, user: AbstractBaseUser | None, **overrides) -> Viewer:
    fields = {"session_id": SESSION, "write_scopes": frozenset(AGENT_WRITABLE_SCOPES), "read_only": False,
              "actor": "api_key:tests"}
    return Viewer(tenant=tenant, workspace=workspace, user=user, **{**fields, **overrides})


class Scene:
    """Tenant A with workspaces default and hermes, owner alice and member mia (default only)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.default = default_workspace(tenant)
        self.hermes = make_workspace(tenant=tenant, name="Hermes")
        self.alice = make_member(tenant=tenant, username="alice", role="owner")
        self.mia = make_member(tenant=tenant, username="mia")
        self.writer = viewer_for(tenant, self.default, self.alice)
        message_append_batch(viewer=self.writer, session_id=SESSION, messages=[
            {"id": "m1", "role": "user", "content": "记住我不吃香菜"}])
        [created] = node_write_batch(viewer=self.writer, explicit_user_intent=True,
                                     source_message_ids=["m1"], operations=[card_op("香菜")])
        self.card = created.node

    def viewer(self, kind: str) -> Viewer:
        """Return a viewer of `kind`: read_only, pinned_elsewhere, person_elsewhere or person (mia)."""
        if kind == "read_only":
            return viewer_for(self.tenant, self.default, self.alice, read_only=True)
        if kind == "pinned_elsewhere":  # a key pinned to hermes, speaking for the default workspace
            return viewer_for(self.tenant, self.default, self.alice, pinned_workspace_id=self.hermes.pk)
        person = {"restrict_to_person": True, "member_workspace_ids": frozenset({self.default.pk}),
                  "actor": "user:mia"}
        workspace = self.hermes if kind == "person_elsewhere" else self.default
        return viewer_for(self.tenant, workspace, self.mia, **person)

    def counts(self) -> tuple[int, int, int, int, list]:
        with tenant_context(self.tenant):
            return (MemoryMessage.objects.count(), MemorySummary.objects.count(), MemoryNode.objects.count(),
                    MemoryAuditEvent.objects.count(),
                    sorted(MemoryNode.objects.values_list("status", "revision")))


def card_op(item: str, **node) -> dict:
    return {"operation": "create", "reason": "the user said so",
            "node": {"kind": "food_avoidance", "item_key": item, "scope": "user", "title": f"不吃{item}",
                     "content": f"用户不吃{item}", **node}}


@pytest.fixture
def scene(tenant_a, tenant_b):  # noqa: ANN001
    return Scene(tenant_a)


def assert_refused(scene: Scene, code: str, call) -> None:  # noqa: ANN001
    before = scene.counts()
    with pytest.raises(MemoryServiceError) as refused:
        call()
    assert refused.value.code == code, refused.value.detail
    assert scene.counts() == before, "a refused write must change nothing"


WHO = [("read_only", "forbidden"), ("pinned_elsewhere", "forbidden"), ("person_elsewhere", "not_found")]
# Changes to alice's card: outside a pin or a person's reach the card is as good as missing.
ON_ALICES_CARD = [("read_only", "forbidden"), ("pinned_elsewhere", "not_found"),
                  ("person_elsewhere", "not_found"), ("person", "not_found")]


@pytest.mark.parametrize(("who", "code"), WHO)
def test_message_capture_is_guarded_in_the_service(scene, who, code):
    viewer = scene.viewer(who)
    assert_refused(scene, code, lambda: message_append_batch(
        viewer=viewer, session_id=SESSION, messages=[{"role": "user", "content": "hello"}]))


@pytest.mark.parametrize(("who", "code"), WHO)
def test_summary_append_is_guarded_in_the_service(scene, who, code):
    viewer = scene.viewer(who)
    assert_refused(scene, code, lambda: summary_append(viewer=viewer, session_id=SESSION, data={
        "from_message_id": "m1", "to_message_id": "m1", "summary": "用户不吃香菜"}))


def test_a_summary_carrying_a_password_is_refused(scene):
    with pytest.raises(MemoryServiceError) as refused:
        summary_append(viewer=scene.writer, session_id=SESSION, data={
            "from_message_id": "m1", "to_message_id": "m1", "summary": "聊了做饭",
            "known_issues": ["wifi 密码: hunter22"]})
    assert (refused.value.code, refused.value.errors) == ("sensitive_content", {"knownIssues": ["password"]})
    assert scene.counts()[1] == 0


@pytest.mark.parametrize(("who", "code"), [*WHO, ("person_for_someone_else", "not_found")])
def test_node_write_batch_is_guarded_in_the_service(scene, who, code):
    if who == "person_for_someone_else":  # issue 10, defect 2: a member writing into alice's profile
        viewer, op = scene.viewer("person"), card_op("葱", user_id="alice")
    else:
        viewer, op = scene.viewer(who), card_op("葱")
    assert_refused(scene, code, lambda: node_write_batch(viewer=viewer, operations=[op],
                                                         explicit_user_intent=True))


def test_a_person_may_still_write_their_own_card_where_they_belong(scene):
    [result] = node_write_batch(viewer=scene.viewer("person"), operations=[card_op("葱", user_id="mia")],
                                explicit_user_intent=True)
    assert (result.action, result.node.user_id, result.node.workspace_id) == ("created", scene.mia.pk,
                                                                             scene.default.pk)


@pytest.mark.parametrize(("who", "code"), ON_ALICES_CARD)
def test_updating_a_card_is_guarded_in_the_service(scene, who, code):
    viewer = scene.viewer(who)
    update = {"operation": "update", "target_id": scene.card.pk, "expected_revision": scene.card.revision,
              "reason": "edit", "node": {"title": "改了"}}
    assert_refused(scene, code, lambda: node_write_batch(viewer=viewer, operations=[update],
                                                         explicit_user_intent=True))


def test_node_write_bulk_is_guarded_in_the_service(scene):
    write = NodeWrite(viewer=scene.viewer("read_only"), operations=[card_op("葱")], explicit_user_intent=True)
    assert_refused(scene, "forbidden", lambda: node_write_bulk(writes=[write], skip_invalid=False))
    before = scene.counts()
    [outcome] = node_write_bulk(writes=[write], skip_invalid=True)
    assert outcome.error.code == "forbidden" and scene.counts() == before


@pytest.mark.parametrize(("who", "code"), ON_ALICES_CARD)
def test_node_forget_is_guarded_in_the_service(scene, who, code):
    viewer = scene.viewer(who)
    for mode in ("soft", "hard"):
        request = ForgetRequest(reason="forget it", explicit_user_intent=True, mode=mode,
                                node_id=scene.card.pk, expected_revision=scene.card.revision)
        assert_refused(scene, code, lambda request=request: node_forget(viewer=viewer, request=request))


@pytest.mark.parametrize(("who", "code"), ON_ALICES_CARD)
def test_node_restore_is_guarded_in_the_service(scene, who, code):
    [forgotten] = node_forget(viewer=scene.writer, request=ForgetRequest(
        reason="forget it", explicit_user_intent=True, node_id=scene.card.pk,
        expected_revision=scene.card.revision))
    viewer = scene.viewer(who)
    restore = {"node_id": forgotten, "expected_revision": scene.card.revision + 1, "reason": "back"}
    assert_refused(scene, code, lambda: node_restore(viewer=viewer, **restore))


# --------------------------------------------------------------------------- idempotent capture race


def _wait_for_a_lock_wait(timeout: float = 30.0) -> None:
    """Return once another connection waits on a row lock (the second insert behind the first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")
            if cursor.fetchone()[0]:
                return
        time.sleep(0.01)
    raise AssertionError("the second capture never waited for the first one's row")


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_captures_of_one_client_id_give_the_loser_the_stored_message():
    tenant = make_tenant("race", owner="rita")
    with tenant_context(tenant):
        workspace = Workspace.objects.get(slug=Workspace.DEFAULT_SLUG)
    viewer = viewer_for(tenant, workspace, None)
    message = {"id": "client-42", "role": "user", "content": "hi"}
    first_inserted, release = threading.Event(), threading.Event()
    answers: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                answers["first"] = message_append_batch(viewer=viewer, session_id=SESSION, messages=[message])
                first_inserted.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            answers["second"] = message_append_batch(viewer=viewer, session_id=SESSION, messages=[message])
        except Exception as exc:  # noqa: BLE001 - the assertion below shows what the loser got
            answers["second"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_inserted.wait(timeout=30)
    threads[1].start()
    try:
        _wait_for_a_lock_wait()
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not isinstance(answers["second"], Exception), repr(answers["second"])
    [winner], [loser] = answers["first"], answers["second"]
    assert (loser.pk, loser.message_id, loser.content) == (winner.pk, "client-42", "hi")
    with tenant_context(tenant):
        assert MemoryMessage.objects.filter(message_id="client-42").count() == 1
