"""Schemathesis over the app's own OpenAPI schema (/api/schema/), as each role: whatever a
caller sends, valid or not, the API answers without a 5xx.

Every operation gets a bounded number of generated requests, valid (positive) and invalid
(negative), through the real WSGI application with a real session and CSRF token. Hypothesis
is derandomized with no example database, so CI sees the same requests on every run.
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
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from guardian_core.demo import demo_policy_version
from tests.factories import make_escalation, make_run

pytestmark = pytest.mark.django_db

# Per operation and generation mode: 6 operations x 2 modes x this, per role. Enough to find
# the bigint, NUL, nesting and type confusions (at 12 a bigint limit slipped through);
# small enough for the file to stay under a minute on two cores.
EXAMPLES = 40
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


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "admin", "outsider"])
def test_no_api_operation_answers_a_server_error_whatever_a_role_sends(
    request, client, settings, persona
):
    user = request.getfixturevalue(persona)
    settings.ALLOWED_HOSTS = ["*"]
    demo_policy_version()
    escalation = make_escalation()  # something to list, read and cancel
    make_run(status="succeeded", final_answer="done")
    client.force_login(user)
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    auth = {
        "headers": {"X-CSRFToken": CSRF_TOKEN},
        "cookies": {
            django_settings.SESSION_COOKIE_NAME: session,
            django_settings.CSRF_COOKIE_NAME: CSRF_TOKEN,
        },
    }
    raw = yaml.safe_load(client.get("/api/schema/").content)
    schema = schemathesis.openapi.from_dict(raw)
    app = get_wsgi_application()
    known_ids = {"id": escalation.run_id}

    failures: list[str] = []
    with _test_connection_kept():
        _fuzz(schema, app, auth, known_ids, failures)
    assert not failures, "\n".join(failures)


def _fuzz(schema, app, auth: dict, known_ids: dict, failures: list[str]) -> None:
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @given(case=strategy)
            @hypothesis_settings(
                max_examples=EXAMPLES,
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
                case.validate_response(response, checks=[not_a_server_error])

            try:
                call()
            except Exception as exc:  # noqa: BLE001 - collected, then reported all at once
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:500]}")
        # The path parameter of a real object, so that reads and cancels reach the database.
        if "{id}" in operation.path:
            case = operation.Case(path_parameters=known_ids)
            response = case.call(app=app, **auth)
            if response.status_code >= 500:
                failures.append(f"{operation.label} {known_ids} -> {response.status_code}")
