"""Shared fixtures: a test database created and migrated as the owner, used by the app as `ekko_app`."""

from __future__ import annotations

import os

import pytest
from django.db import connections

from tests.factories import make_tenant

# Every statement the suite sends to a tenant table must name its tenant (docs/scale-out.md).
pytest_plugins = ["tests.sql_routing"]


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_keepdb):  # noqa: ANN001
    """Create the test database as the owner (so migrations run as owner) and mirror it for `ekko_app`."""
    owner, app = connections["owner"], connections["default"]
    # One test database per run: several runs may share the embedded server at once.
    owner.settings_dict["TEST"]["NAME"] = f"test_ekko_{os.getpid()}"
    verbosity = request.config.option.verbose
    with django_db_blocker.unblock():
        original_name = owner.settings_dict["NAME"]
        # No test asks for `serialized_rollback`: skip the copy of every table made for it.
        owner.creation.create_test_db(verbosity=verbosity, autoclobber=True, keepdb=django_db_keepdb,
                                      serialize=False)
        app.creation.set_as_test_mirror(owner.settings_dict)
        app.close()
        with owner.cursor() as cursor:
            # Test-only: transactional tests reset tables with TRUNCATE, which the app role never needs.
            cursor.execute("GRANT TRUNCATE ON ALL TABLES IN SCHEMA public TO ekko_app")
    yield
    with django_db_blocker.unblock():
        app.close()
        owner.creation.destroy_test_db(original_name, verbosity=verbosity, keepdb=django_db_keepdb)


@pytest.fixture(autouse=True, scope="session")
def fast_password_hasher():  # noqa: ANN201
    """Hash test passwords with a cheap algorithm: the default costs about a second per user."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def tenant_a(db):  # noqa: ANN001
    return make_tenant("tenant-a", owner="alice")


@pytest.fixture
def tenant_b(db):  # noqa: ANN001
    return make_tenant("tenant-b", owner="bob")


@pytest.fixture(autouse=True)
def background_queue():  # noqa: ANN201
    """Queued background work waits for the test: `drain_background()` runs it in the test's thread.

    Without a broker, tasks run on a thread after the request (ekko_site.inprocess); that thread's
    connection could not see the test's transaction, so here the test decides when the work runs.
    """
    from ekko_site.inprocess import worker

    worker.autostart = False
    yield worker
    worker.clear()


@pytest.fixture
def committed(django_capture_on_commit_callbacks):  # noqa: ANN001, ANN201
    """Return a context manager that runs a block's after-commit work and the background work it queued."""
    from contextlib import contextmanager

    from ekko_site.inprocess import drain_background

    @contextmanager
    def block():  # noqa: ANN202
        with django_capture_on_commit_callbacks(execute=True):
            yield
        drain_background()

    return block
