"""Schemathesis over every operation of `/api/schema/`: no server error, every response as documented.

The app runs in-process through its WSGI entry point (the transport of schemathesis' `from_wsgi`)
with a real API key of a test tenant, against the test database. Per operation: the coverage phase
(boundary values of every documented field, and unexpected methods) plus `MAX_EXAMPLES` generated
cases, valid and invalid, with no deadline and a fixed seed, so CI runs the same thousand-odd cases
in well under a minute. The number of cases run is printed when the module finishes
(`pytest tests/test_schemathesis.py -q`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from tenants.services import api_key_create
from tests.api_client import openapi_schema

# EKKO_SCHEMATHESIS_DEEP=1 runs the exploratory pass instead: 100 cases per operation and the coverage
# phase's invalid variants too (about 3,500 cases, a few minutes).
DEEP = os.environ.get("EKKO_SCHEMATHESIS_DEEP") == "1"
MAX_EXAMPLES = 100 if DEEP else 20
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
# In CI the coverage cases are valid ones only: the fuzzing phase (and tests/test_api_fuzz.py) sends
# invalid bodies, and the coverage phase's invalid variants would triple the run for little more.
CONFIG = schemathesis.Config.from_dict(
    {} if DEEP else {"phases": {"coverage": {"generation": {"mode": "positive"}}}})

# Built at collection (like the routes of test_api_fuzz), when no database may be used yet;
# test_the_schema_tested_is_the_one_served checks it is exactly the document `/api/schema/` serves.
# `/mcp` is served by the ASGI entry, not the WSGI app driven here: tests/test_mcp.py covers it over HTTP.
schema = schemathesis.openapi.from_dict(openapi_schema(), config=CONFIG).exclude(path="/mcp")
schema.app = get_wsgi_application()

CASES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_cases(request) -> Iterator[None]:  # noqa: ANN001
    yield
    if not CASES:
        return
    phases = ", ".join(f"{phase} {count}" for phase, count in sorted(CASES.items()))
    operations = sum(1 for _ in schema.get_all_operations())
    line = f"schemathesis: {CASES.total()} cases ({phases}) over {operations} operations of /api/schema/"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{line}")


@pytest.fixture
def keep_the_test_connection() -> Iterator[None]:
    """Keep the test's connection (and transaction) across requests, as Django's test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def api_key(tenant_a) -> str:  # noqa: ANN001
    # One key per operation keeps each operation's cases under the per-key rate limit.
    return api_key_create(tenant=tenant_a, name="schemathesis").raw_key


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented_and_never_with_a_server_error(
        case, api_key, keep_the_test_connection):  # noqa: ANN001
    CASES[case.meta.phase.name.value if case.meta else "explicit"] += 1
    case.call_and_validate(headers={"Authorization": f"Bearer {api_key}"}, checks=CHECKS)


def test_the_schema_tested_is_the_one_served(db, client):  # noqa: ANN001
    served = client.get("/api/schema/?format=json")
    assert served.status_code == 200
    assert served.json() == openapi_schema()
