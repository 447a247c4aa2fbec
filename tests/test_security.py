"""Sign-in throttling on the pages and the admin, security headers, and deploy settings (docs/security.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from tenants.models import Role
from tenants.services import membership_set

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-for-tests-1"


def sign_in(client: Client, username: str, password: str, path: str = "/login/", **extra: str) -> int:
    return client.post(path, {"username": username, "password": password}, **extra).status_code


def fail_times(client: Client, username: str, times: int, path: str = "/login/", **extra: str) -> list[int]:
    return [sign_in(client, username, f"wrong-{n}", path, **extra) for n in range(times)]


def end_cool_off() -> None:
    """Move every recorded failure back past the cool-off, as if the lock's time had run out."""
    from django.conf import settings

    expired = timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    AccessAttempt.objects.update(attempt_time=expired)


@pytest.fixture
def carol(tenant_a):  # noqa: ANN001, ANN201
    user = get_user_model().objects.create_user("carol", password=PASSWORD)
    membership_set(tenant=tenant_a, user=user, role=Role.MEMBER)
    return user


# --------------------------------------------------------------------------- throttling


def test_thirty_wrong_passwords_lock_the_sign_in_even_for_the_right_password_until_the_cool_off(
    client, tenant_a
):
    statuses = fail_times(client, "alice", 30)
    assert statuses[:4] == [400] * 4, "the first four failures are ordinary form errors"
    assert set(statuses[4:]) == {429}, "the fifth failure and every later attempt meet the lockout page"
    locked = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429 and "_auth_user_id" not in client.session
    assert locked["Retry-After"] == "900"
    assert "Sign-in paused" in locked.content.decode() and "15 minutes" in locked.content.decode()
    # Attempts during the lock are not counted, so the lock ends when its time is up.
    assert AccessAttempt.objects.get(username="alice").failures_since_start == 5
    end_cool_off()
    assert sign_in(client, "alice", PASSWORD) == 302 and "_auth_user_id" in client.session


def test_a_locked_username_does_not_lock_another_person_or_the_same_name_elsewhere(client, tenant_a, carol):
    assert set(fail_times(client, "alice", 30)[4:]) == {429}
    assert sign_in(Client(), "carol", PASSWORD) == 302, "another person on the same address signs in"
    assert sign_in(Client(REMOTE_ADDR="192.0.2.7"), "alice", PASSWORD) == 302, "alice from another address"


def test_a_successful_sign_in_resets_the_failure_count(client, tenant_a):
    assert fail_times(client, "alice", 4) == [400] * 4
    assert sign_in(client, "alice", PASSWORD) == 302
    client.post("/logout/")
    assert fail_times(client, "alice", 4) == [400] * 4, "the count started again after the success"
    assert sign_in(client, "alice", PASSWORD) == 302


def test_the_admin_login_is_locked_with_its_own_page(client, db):
    get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1")
    statuses = fail_times(client, "ops", 30, path="/admin/login/")
    assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {429}
    locked = client.post("/admin/login/", {"username": "ops", "password": "ops-password-1"})
    assert locked.status_code == 429 and "_auth_user_id" not in client.session
    html = locked.content.decode()
    assert "Sign-in paused" in html and 'href="/admin/login/"' in html and "Ekko Memory operations" in html
    assert client.get("/admin/").status_code == 302, "still signed out"
    end_cool_off()
    assert sign_in(client, "ops", "ops-password-1", path="/admin/login/") == 302
    assert client.get("/admin/").status_code == 200


def test_an_operator_unlocks_a_person_by_deleting_the_access_attempt_in_admin(client, tenant_a):
    fail_times(client, "alice", 5)
    get_user_model().objects.create_superuser("ops", "ops@example.com", "ops-password-1")
    operator = Client(REMOTE_ADDR="192.0.2.1")
    assert sign_in(operator, "ops", "ops-password-1", path="/admin/login/") == 302
    listing = operator.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "alice" in listing.content.decode()
    attempt = AccessAttempt.objects.get(username="alice")
    operator.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert sign_in(client, "alice", PASSWORD) == 302


def test_the_lockout_page_follows_the_language_of_the_pages(client, tenant_a):
    fail_times(client, "alice", 5)
    html = client.post(
        "/login/", {"username": "alice", "password": PASSWORD}, HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9"
    ).content.decode()
    assert '<html lang="zh-hans">' in html and "登录已暂停" in html and "Sign-in paused" not in html


def test_forwarded_for_headers_are_ignored_unless_a_proxy_is_trusted(client, tenant_a):
    # Without a trusted proxy a client cannot escape the lock by inventing X-Forwarded-For addresses.
    statuses = [
        sign_in(client, "alice", "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}") for n in range(10)
    ]
    assert set(statuses[4:]) == {429}
    assert AccessAttempt.objects.get().ip_address == "127.0.0.1"


def test_behind_a_trusted_proxy_the_address_it_forwarded_is_locked(client, tenant_a, settings):
    settings.EKKO_TRUSTED_PROXY_COUNT = 1
    # The client may prepend anything; the proxy appends the address it saw, and that one counts.
    statuses = [
        sign_in(client, "alice", "wrong", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}, 203.0.113.9") for n in range(6)
    ]
    assert set(statuses[4:]) == {429}
    assert AccessAttempt.objects.get().ip_address == "203.0.113.9"
    other_browser = {"HTTP_X_FORWARDED_FOR": "203.0.113.10"}
    assert sign_in(Client(), "alice", PASSWORD, **other_browser) == 302
    # A forwarded value that is no address falls back to the connection's address instead of failing.
    assert sign_in(Client(), "alice", "wrong", HTTP_X_FORWARDED_FOR="not-an-ip") == 400
    assert AccessAttempt.objects.filter(ip_address="127.0.0.1").exists()


# --------------------------------------------------------------------------- headers


@pytest.mark.parametrize("path", ["/login/", "/healthz", "/api/v1/workspaces"])
def test_every_response_carries_the_security_headers(client, db, path):
    response = client.get(path)
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert "form-action 'self'" in response["Content-Security-Policy"]


def test_local_runs_keep_http_cookies_and_send_no_hsts(client, tenant_a, settings):
    if os.environ.get("EKKO_SECURE_COOKIES") or os.environ.get("EKKO_HSTS_SECONDS"):
        pytest.skip("the environment turned the HTTPS switches on")
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert not response.cookies["sessionid"]["secure"]
    assert "Strict-Transport-Security" not in client.get("/login/", secure=True)


# --------------------------------------------------------------------------- deploy settings


def compose_environment(service: str) -> dict[str, str]:
    """Return a docker-compose service's environment with ${VAR:-default} defaults filled in."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    required = {"DJANGO_SECRET_KEY": "x" * 20 + "compose-test-secret-key-not-for-production"}

    def substitute(value: str) -> str:
        def one(match: re.Match) -> str:
            name, kind, default = match.group(1), match.group(2), match.group(3)
            return required[name] if kind == ":?" else default

        return re.sub(r"\$\{(\w+)(:-|:\?)([^}]*)\}", one, str(value))

    return {key: substitute(value) for key, value in compose["services"][service]["environment"].items()}


def run_manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "EKKO_", "DATABASE_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
        capture_output=True, text=True, timeout=120,
    )


def test_docker_compose_turns_every_https_switch_on_for_web_worker_and_beat():
    web = compose_environment("web")
    # web and worker add their own metrics settings; every shared setting is the same in all three.
    beat = compose_environment("beat")
    assert all(compose_environment(name).items() >= beat.items() for name in ("web", "worker"))
    assert web["EKKO_SECURE_COOKIES"] == "true" and web["EKKO_SSL_REDIRECT"] == "true"
    assert int(web["EKKO_HSTS_SECONDS"]) >= 31536000 and web["EKKO_TRUSTED_PROXY_COUNT"] == "1"


def test_check_deploy_is_clean_with_the_docker_compose_settings():
    result = run_manage(compose_environment("web"), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_check_deploy_warns_with_the_https_switches_off():
    env = {**compose_environment("web"), "EKKO_SECURE_COOKIES": "false", "EKKO_HSTS_SECONDS": "0"}
    result = run_manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "security.W004" in result.stderr and "security.W012" in result.stderr


def test_a_deployment_without_a_secret_key_refuses_to_start():
    env = {k: v for k, v in compose_environment("web").items() if k != "DJANGO_SECRET_KEY"}
    result = run_manage(env, "check")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_an_unknown_lockout_parameter_refuses_to_start():
    result = run_manage({**compose_environment("web"), "EKKO_LOGIN_LOCKOUT_BY": "user+ip"}, "check")
    assert result.returncode != 0 and "EKKO_LOGIN_LOCKOUT_BY names username" in result.stderr


def test_a_local_run_without_a_secret_key_keeps_a_random_one_in_the_data_directory(tmp_path):
    # DJANGO_DEBUG with an (unreached) database URL: local settings without starting an embedded server.
    env = {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "DJANGO_DEBUG": "1",
           "EKKO_DATA_DIR": str(tmp_path)}
    show = ["shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)"]
    first, second = run_manage(env, *show), run_manage(env, *show)
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert len(key) >= 50 and key == second.stdout.strip()
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0, "only the owner may read the key file"
