"""Issue 14, quotas in the pages and the admin: the banner past normal, the quota page, who sets the limit.

The banner shows on full pages when the person's own scope or one of their workspaces is past normal
(in English and Chinese); the quota page lists what the person may see; only tenant owners and admins
change the card limit (members and viewers get 403 and nothing changes); every change, from the page
or from Django admin, is in the tenant's admin history.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model

from memory.models import MemoryNode
from tenants.models import Role, Tenant
from tests.memory_factories import default_workspace, make_member, make_node
from tests.test_pages import HTMX, signed_in


def fill(tenant: Tenant, user, count: int) -> None:  # noqa: ANN001
    workspace = default_workspace(tenant)
    for index in range(count):
        make_node(
            tenant=tenant, workspace=workspace, user=user, title=f"card {index}", item_key=f"card{index}"
        )


def limit_of(tenant: Tenant) -> int:
    return Tenant.objects.get(pk=tenant.pk).card_limit


@pytest.fixture
def people(tenant_a):  # noqa: ANN001
    alice = get_user_model().objects.get(username="alice")
    mia = make_member(tenant=tenant_a, username="mia")
    vic = make_member(tenant=tenant_a, username="vic", role=Role.VIEWER)
    return {"alice": alice, "mia": mia, "vic": vic}


def test_no_banner_while_normal(tenant_a, people):
    fill(tenant_a, people["mia"], 2)
    page = signed_in("mia").get("/").content.decode()
    assert 'id="quota-banner"' not in page


@pytest.mark.parametrize(
    "language, words",
    [
        ("en", ["Memory is almost full.", "Your memory holds 2 of 12 cards (10 left).", 'href="/memories/"']),
        ("zh-hans", ["记忆快满了。", "你的记忆已有 2 / 12 条（还剩 10 条）。", 'href="/memories/"']),
    ],
)
def test_the_banner_says_how_full_and_what_to_do_in_both_languages(tenant_a, people, language, words):
    fill(tenant_a, people["mia"], 2)
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=12)
    page = signed_in("mia", HTTP_ACCEPT_LANGUAGE=language).get("/sessions/").content.decode()
    banner = page[page.index('id="quota-banner"') :]
    banner = banner[: banner.index("</div>")]
    assert all(word in banner for word in words), banner


def test_the_banner_follows_the_persons_own_owners_not_other_members_or_tenants(tenant_a, tenant_b, people):
    bob = get_user_model().objects.get(username="bob")
    fill(tenant_b, bob, 3)
    Tenant.objects.filter(pk=tenant_b.pk).update(card_limit=3)
    fill(tenant_a, people["alice"], 3)
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=103)  # alice: 100 left (notice); mia: 103
    assert 'id="quota-banner"' in signed_in("alice").get("/").content.decode()
    assert 'id="quota-banner"' not in signed_in("mia").get("/").content.decode()


def test_the_workspace_scope_fills_the_banner_too(tenant_a, people):
    make_node(
        tenant=tenant_a,
        workspace=default_workspace(tenant_a),
        kind="hard_constraint",
        scope="workspace",
        title="rule",
    )
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=3)
    page = signed_in("mia").get("/").content.decode()
    assert "Workspace memory holds 1 of 3 cards (2 left)." in page and "Memory is full" in page


def test_a_fragment_carries_no_banner(tenant_a, people):
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=3)
    assert 'id="quota-banner"' not in signed_in("mia").get("/memories/", **HTMX).content.decode()


def test_the_quota_page_lists_what_a_member_may_see_without_the_limit_form(tenant_a, people):
    fill(tenant_a, people["alice"], 4)
    page = signed_in("mia").get("/quota/").content.decode()
    assert "mia" in page and "alice</th>" not in page and 'name="card_limit"' not in page


def test_an_admin_sees_every_member_and_sets_the_limit_with_a_history_entry(tenant_a, people):
    fill(tenant_a, people["mia"], 4)
    alice = signed_in("alice")
    page = alice.get("/quota/").content.decode()
    assert "mia</th>" in page and 'name="card_limit"' in page
    response = alice.post("/quota/", {"card_limit": "300"})
    assert response.status_code == 302 and limit_of(tenant_a) == 300
    entry = LogEntry.objects.get(object_id=str(tenant_a.pk))
    assert (entry.user.username, entry.change_message) == (
        "alice",
        "Changed card limit from 500 to 300 (tenant settings page).",
    )


@pytest.mark.parametrize("value", ["0", "-5", "lots", "", "1000001"])
def test_a_bad_limit_is_refused_and_changes_nothing(tenant_a, people, value):
    response = signed_in("alice").post("/quota/", {"card_limit": value})
    assert response.status_code == 400 and limit_of(tenant_a) == 500
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("username", ["mia", "vic"])
def test_members_and_viewers_cannot_change_the_limit(tenant_a, people, username):
    response = signed_in(username).post("/quota/", {"card_limit": "5"})
    assert response.status_code == 403 and limit_of(tenant_a) == 500
    assert not LogEntry.objects.exists()


def test_another_tenants_admin_changes_only_their_own_tenant(tenant_a, tenant_b, people):
    response = signed_in("bob").post("/quota/", {"card_limit": "9"})
    assert response.status_code == 302
    assert (limit_of(tenant_a), limit_of(tenant_b)) == (500, 9)


def test_signed_out_visitors_are_sent_to_sign_in(client, tenant_a):
    response = client.post("/quota/", {"card_limit": "5"})
    assert response.status_code == 302 and "/login/" in response["Location"] and limit_of(tenant_a) == 500


# --------------------------------------------------------------------------- Django admin


def _admin_form_data(response) -> dict:  # noqa: ANN001
    """The change form's current values, inlines included, as the browser would post them back."""
    data = {}
    form = response.context["adminform"].form
    for name, field in form.fields.items():
        value = form[name].value()
        if value is not None and not field.disabled:
            data[name] = value
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        for name in formset.management_form.fields:
            data[formset.management_form.add_prefix(name)] = formset.management_form[name].value()
        for subform in formset.forms:
            for name in subform.fields:
                value = subform[name].value()
                if value is not None:
                    data[subform.add_prefix(name)] = value
    return {key: value for key, value in data.items() if value is not False}


def test_operators_edit_the_card_limit_in_django_admin_and_it_is_logged(client, tenant_a):
    operator = get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1")
    client.force_login(operator)
    url = f"/admin/tenants/tenant/{tenant_a.pk}/change/"
    page = client.get(url)
    assert 'name="card_limit"' in page.content.decode()
    response = client.post(url, {**_admin_form_data(page), "card_limit": "40"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert limit_of(tenant_a) == 40
    entry = LogEntry.objects.get(object_id=str(tenant_a.pk))
    assert entry.user == operator and "card_limit" in entry.change_message.lower().replace(" ", "_")


def test_restoring_into_a_full_memory_says_so_and_restores_nothing(tenant_a, people):
    from memory.selectors import NodeSelector
    from memory.services import ForgetRequest, node_forget
    from tenants.context import tenant_context
    from tests.test_node_write_bulk import author

    make_node(
        tenant=tenant_a,
        workspace=default_workspace(tenant_a),
        user=people["mia"],
        title="gone",
        item_key="gone",
    )
    with tenant_context(tenant_a):
        card = MemoryNode.objects.get(item_key="gone")
    node_forget(
        viewer=author(tenant_a, people["mia"], "user:mia"),
        request=ForgetRequest(
            reason="r",
            explicit_user_intent=True,
            mode="soft",
            node_id=card.pk,
            expected_revision=1,
            targets=(),
            all=False,
            selector=NodeSelector(),
            purge_evidence=False,
        ),
    )
    fill(tenant_a, people["mia"], 1)
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=1)
    response = signed_in("mia").post(f"/memories/{card.pk}/restore/", {"expected_revision": "2"})
    assert response.status_code == 400
    assert "Memory is full: forget something first" in response.content.decode()
    with tenant_context(tenant_a):
        assert MemoryNode.objects.get(pk=card.pk).status == "deleted"


def _workspace_file(tenant: Tenant, tmp_path) -> tuple:  # noqa: ANN001
    from memory.transfer.sqlite_export import workspace_export_sqlite
    from tests.memory_factories import make_workspace

    source = make_workspace(tenant=tenant, name="Source")
    make_node(tenant=tenant, workspace=source, kind="hard_constraint", scope="workspace", title="rule")
    path = tmp_path / "w.sqlite"
    workspace_export_sqlite(tenant=tenant, workspace=source, path=path)
    return make_workspace(tenant=tenant, name="Target"), path


def test_the_import_page_refuses_a_file_beyond_the_limit(tenant_a, people, tmp_path):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tenants.context import tenant_context

    target, path = _workspace_file(tenant_a, tmp_path)
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=1)
    make_node(tenant=tenant_a, workspace=target, kind="hard_constraint", scope="workspace", title="held")
    client = signed_in("alice")
    client.post("/switch/workspace/", {"target": target.pk, "next": "/workspace/"})
    upload = SimpleUploadedFile("w.sqlite", path.read_bytes(), content_type="application/vnd.sqlite3")
    response = client.post("/workspace/import/", {"file": upload})
    assert response.status_code == 409
    assert "nothing was written" in response.content.decode()
    with tenant_context(tenant_a):
        assert MemoryNode.objects.filter(workspace=target).count() == 1


def test_the_import_command_refuses_a_file_beyond_the_limit(tenant_a, people, tmp_path):
    from django.core.management import CommandError, call_command

    target, path = _workspace_file(tenant_a, tmp_path)
    Tenant.objects.filter(pk=tenant_a.pk).update(card_limit=1)
    make_node(tenant=tenant_a, workspace=target, kind="hard_constraint", scope="workspace", title="held")
    with pytest.raises(CommandError, match="Nothing was imported.*card"):
        call_command("import_workspace", f"tenant-a/{target.slug}", str(path), "--quiet")
