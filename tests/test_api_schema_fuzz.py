"""Schemathesis over the app's own OpenAPI schema (/api/schema/), as each role with its API
token: whatever a caller sends, valid or not, the API answers without a 5xx, and every answer
the schema documents has the body the schema says (the one error shape included).

Every operation gets a bounded number of generated requests, valid (positive) and invalid
(negative), through the real WSGI application with a real token (and, once, a real session and
CSRF token). Hypothesis is derandomized with no example database, so CI sees the same requests
on every run.
"""

from contextlib import contextmanager

import pytest
import schemathesis
import yaml
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.generation import GenerationMode

from demo.setup import demo_policy_version
from guardian_core.services import api_token_create
from tests.factories import make_escalation, make_run, make_turn

pytestmark = pytest.mark.django_db

# Per operation and generation mode, for the role the operation is for (whose requests reach
# the code behind it): enough to find the bigint, NUL, nesting and type confusions. Every other
# role gets FEW: its requests stop at the permission check, whose answer is checked all the
# same. The file stays under a minute on two cores.
EXAMPLES = 10
FEW = 2


def owner(path: str, method: str) -> str:
    """The role an operation is for."""
    if path.startswith("/api/runs/{id}/steps/") or path.endswith("/wait"):
        return "integrator"
    if path.startswith("/api/policy-versions/") or path in (
        "/api/runs/start/",
        "/api/runs/{id}/cancel/",
    ):
        return "admin"
    if path.startswith("/api/runs/") or path == "/api/decisions.csv":
        return "auditor"
    return "reviewer"  # escalations, examples, and the index anyone may read


CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
CSRF_TOKEN = "schemathesisfuzzcsrftoken0123456"  # 32 characters: Django's unmasked secret


@contextmanager
def _test_connection_kept():
    """The WSGI handler closes the database connection after each request, which would end
    the test's transaction; Django's test client disconnects the same signals (and connects
    them again after each of its own requests, so this wraps the fuzzing only)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "admin", "outsider", "integrator"])
def test_no_api_operation_answers_a_server_error_whatever_a_role_sends(
    request, client, settings, persona
):
    user = request.getfixturevalue(persona)
    settings.ALLOWED_HOSTS = ["*"]
    settings.GUARDIAN_EXTERNAL_MAX_WAIT_SECONDS = 0.05  # a long poll fuzzed is a short one
    demo_policy_version()
    # Something to list, read, claim and cancel; the integrator's own external run to drive.
    escalation = make_escalation(
        turn=make_turn(run=make_run(actor="external", created_by=user, config=_SCRIPTED))
    )
    make_run(status="succeeded", final_answer="done")
    _, secret = api_token_create(user=user, name="schemathesis")
    auth = {"headers": {"Authorization": f"Bearer {secret}"}}
    client.force_login(user)
    raw = yaml.safe_load(client.get("/api/schema/").content)
    schema = schemathesis.openapi.from_dict(raw)
    app = get_wsgi_application()
    known_ids = {"id": escalation.run_id, "index": escalation.turn.index, "step": 0}

    failures: list[str] = []
    with _test_connection_kept():
        _fuzz(schema, app, auth, known_ids, failures, persona=persona)
    assert not failures, "\n".join(failures)


_SCRIPTED = {"scenario": {"name": "fuzz", "goal": "g", "actor": {"turns": []}}}


def test_a_browser_session_is_fuzzed_too(client, settings, admin):
    """The session path (cookie + CSRF token) on the operations that write."""
    settings.ALLOWED_HOSTS = ["*"]
    demo_policy_version()
    escalation = make_escalation()
    client.force_login(admin)
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    auth = {
        "headers": {"X-CSRFToken": CSRF_TOKEN},
        "cookies": {
            django_settings.SESSION_COOKIE_NAME: session,
            django_settings.CSRF_COOKIE_NAME: CSRF_TOKEN,
        },
    }
    raw = yaml.safe_load(client.get("/api/schema/").content)
    schema = schemathesis.openapi.from_dict(raw).include(method="POST")
    failures: list[str] = []
    with _test_connection_kept():
        known_ids = {"id": escalation.run_id, "index": escalation.turn.index, "step": 0}
        _fuzz(schema, get_wsgi_application(), auth, known_ids, failures, persona="admin")
    assert not failures, "\n".join(failures)


def _fuzz(schema, app, auth: dict, known_ids: dict, failures: list[str], *, persona: str) -> None:
    for result in schema.get_all_operations():
        operation = result.ok()
        examples = EXAMPLES if owner(operation.path, operation.method) == persona else FEW
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @given(case=strategy)
            @hypothesis_settings(
                max_examples=examples,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            def call(case) -> None:
                response = case.call(app=app, **auth)
                if response.status_code >= 500:
                    failures.append(
                        f"{case.method} {case.formatted_path} {case.query or ''} "
                        f"{str(case.body)[:200]} -> {response.status_code}"
                    )
                case.validate_response(response, checks=CHECKS)

            try:
                call()
            except Unsatisfiable:
                pass  # nothing invalid to send: an operation with no parameter and no body
            except Exception as exc:  # noqa: BLE001 - collected, then reported all at once
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:500]}")
        # The path parameter of a real object, so that reads and cancels reach the database.
        if "{id}" in operation.path:
            names = {p.name for p in operation.path_parameters}
            case = operation.Case(
                path_parameters={k: v for k, v in known_ids.items() if k in names}
            )
            response = case.call(app=app, **auth)
            if response.status_code >= 500:
                failures.append(f"{operation.label} {known_ids} -> {response.status_code}")
