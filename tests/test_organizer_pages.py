"""The Organizer page with the Django test client: who sets the schedule, who sees which run, bad input."""

from __future__ import annotations

import uuid

from django.contrib.admin.models import LogEntry

from ekko_site.inprocess import drain_background
from memory.models import OrganizeRun
from tenants.context import tenant_context
from tenants.models import Role, Tenant
from tests.memory_factories import make_member
from tests.test_pages import signed_in


def test_only_owners_and_admins_set_the_schedule(tenant_a):  # noqa: ANN001
    make_member(tenant=tenant_a, username="mia")
    make_member(tenant=tenant_a, username="vic", role=Role.VIEWER)
    for username in ("mia", "vic"):
        assert signed_in(username).post("/organizer/", {"schedule": "daily"}).status_code == 403
    assert signed_in("alice").post("/organizer/", {"schedule": "sometimes"}).status_code == 403
    assert Tenant.objects.get(pk=tenant_a.pk).organize_schedule == "off"
    response = signed_in("alice").post("/organizer/", {"schedule": "weekly"})
    assert response.status_code == 302 and Tenant.objects.get(pk=tenant_a.pk).organize_schedule == "weekly"
    assert LogEntry.objects.filter(change_message__contains="organize schedule from off to weekly").exists()
    assert "Weekly" in signed_in("alice").get("/organizer/").content.decode()


def test_a_member_runs_their_own_and_never_sees_anothers_run(tenant_a, django_capture_on_commit_callbacks):  # noqa: ANN001
    make_member(tenant=tenant_a, username="mia")
    make_member(tenant=tenant_a, username="ben")
    mia, ben = signed_in("mia"), signed_in("ben")
    with django_capture_on_commit_callbacks(execute=True):
        response = ben.post("/organizer/", {"scope": "user", "mode": "review"})
    drain_background()
    assert response.status_code == 302
    with tenant_context(tenant_a):
        run = OrganizeRun.objects.get()
    assert (run.owner_ref, run.trigger, run.state) == (f"user:{run.user_id}", "manual", "done")
    assert ben.get(f"/organizer/{run.pk}/").status_code == 200
    assert mia.get(f"/organizer/{run.pk}/").status_code == 404
    assert str(run.pk) not in mia.get("/organizer/").content.decode()
    assert str(run.pk) in signed_in("alice").get("/organizer/").content.decode()
    assert mia.post(f"/organizer/{run.pk}/items/{uuid.uuid4()}/", {"decision": "apply"}).status_code == 404
    assert mia.post("/organizer/", {"scope": "global"}).status_code == 400
    make_member(tenant=tenant_a, username="vic", role=Role.VIEWER)
    signed_in("vic").post("/organizer/", {"scope": "user"})  # read-only: refused, nothing queued
    with tenant_context(tenant_a):
        assert OrganizeRun.objects.count() == 1
