"""Bad input is a clear answer naming the field, never a 500 or a thread held for seconds:
patterns in integrators' schemas, overlong usernames, absurd numbers and nesting in the
decision form, NUL characters in JSON, bodies over the upload limit, a database that is down,
and a SECRET_KEY too short to sign anything."""

import json
import secrets
import time

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.decorators import login_not_required
from django.urls import path, reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from demo.setup import demo_policy_version
from escalations.models import Approval, ReviewGuidance, Verdict
from guardian_core.services import api_token_create
from guardian_core.urls import handler400, handler500  # noqa: F401 (this URLconf's, too)
from guardian_core.urls import urlpatterns as site_urlpatterns
from tests.conftest import PERSONA_PASSWORD
from tests.processes import run_manage
from tests.test_escalation_detail_page import HTMX, approve_form, decide, held_refund, opened
from tests.test_external_runs import READ_ORDER, start, step

pytestmark = pytest.mark.django_db

CLOSED_PORT_DB = "postgres://guardian:s3cret@127.0.0.1:9/guardian"


@pytest.fixture
def api(integrator) -> APIClient:
    """An integrator's API client, as in test_external_runs."""
    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="loop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


# ---- patterns in an integrator's schema run on RE2 --------------------------------------------


def with_pattern(pattern: str, *, where: str = "value") -> dict:
    parameters = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    if where == "value":
        parameters["properties"]["order_id"]["pattern"] = pattern
    else:
        parameters["patternProperties"] = {pattern: {"type": "string"}}
    return {**READ_ORDER, "parameters": parameters}


def test_an_inline_tool_s_catastrophic_pattern_never_holds_the_thread(api):
    run = start(api, tools=[with_pattern("^(a+)+$")])
    started = time.perf_counter()
    call = {"tool": "lookup_order", "arguments": {"order_id": "a" * 27 + "!"}}
    gate = step(api, run["id"], 0, call)
    assert time.perf_counter() - started < 2  # 12 s on Python's re, doubling per character
    [call] = gate["calls"]
    assert call["status"] == "invalid"
    assert "does not match" in " ".join(call["problems"])


@pytest.mark.parametrize(
    ("pattern", "where", "field"),
    [
        (r"^(ord)_\1$", "value", "properties/order_id/pattern"),
        ("^(?=ord_)", "value", "properties/order_id/pattern"),
        ("(?<!x)order_id", "name", "patternProperties"),
    ],
    ids=["backreference", "lookahead", "lookbehind-in-a-field-name"],
)
def test_an_inline_tool_whose_pattern_re2_cannot_run_is_refused_naming_it(
    api, pattern, where, field
):
    response = api.post(
        reverse("api:run-start"),
        {
            "goal": "g",
            "tools": [with_pattern(pattern, where=where)],
            "actor": "external",
            "guardian": "local",
        },
        format="json",
    )
    assert response.status_code == 400
    [problem] = response.json()["tools"]
    assert problem.startswith("tools[0].parameters: ")
    assert field in problem
    assert "RE2" in problem


def test_a_registered_webhook_tool_whose_pattern_re2_cannot_run_is_a_configuration_error(
    settings,
):
    from django.core.exceptions import ImproperlyConfigured

    from runs.tools import tool_registry

    settings.GUARDIAN_WEBHOOK_TOOLS = {
        "lookup": {
            "url": "https://tools.example/lookup",
            "description": "d",
            "schema": with_pattern(r"(a)\1")["parameters"],
            "risk_class": "read_only",
        }
    }
    with pytest.raises(ImproperlyConfigured, match=r"GUARDIAN_WEBHOOK_TOOLS\['lookup'\].*RE2"):
        tool_registry()


# ---- overlong usernames at both sign-in pages -------------------------------------------------


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
@pytest.mark.parametrize("length", [256, 10_000])
def test_an_overlong_username_is_a_wrong_username_or_password_and_still_throttled(
    client, admin, url, length, settings
):
    name = "a" * length
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post(url, {"username": name, "password": "x"}, REMOTE_ADDR="10.0.0.9")
        assert response.status_code == 200
        assert response.context["form"].has_error("__all__", code="invalid_login")
    # Counted as any wrong sign-in: the attempt that reaches the limit is locked out.
    locked = client.post(url, {"username": name, "password": "x"}, REMOTE_ADDR="10.0.0.9")
    assert locked.status_code == 429
    [attempt] = AccessAttempt.objects.all()
    assert attempt.failures_since_start == settings.AXES_FAILURE_LIMIT
    assert attempt.username == name[:255]
    # Nobody else is locked out by it: the real admin signs in from the same address.
    right = client.post(
        url, {"username": "admin", "password": PERSONA_PASSWORD}, REMOTE_ADDR="10.0.0.9"
    )
    assert right.status_code == 302


# ---- the decision form ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        ({"approve_call": "1" * 4400}, "approve_1", "is not a held call"),
        (
            {"arguments_0": "[" * 100_000 + "]" * 100_000},
            "arguments_0",
            "nested deeper than",
        ),
        (
            {"arguments_0": '{"order_id": "ord_4472", "amount": ' + "9" * 5000 + "}"},
            "arguments_0",
            "more than 4300 digits",
        ),
        (
            {"arguments_0": '{"order_id": "ord_4472", "amount": ' + "9" * 5000 + ".5}"},
            "arguments_0",
            "out of range",
        ),
        (
            {"arguments_0": '{"order_id": "ord_4472", "amount": 1e999}'},
            "arguments_0",
            "out of range",
        ),
        (
            {"arguments_0": '{"order_id\\u0000": "ord_4472", "amount": 1}'},
            "arguments_0",
            "NUL",
        ),
        ({"decision": "reject", "reason": "no\x00"}, "reason", "NUL"),
    ],
    ids=[
        "huge-call-number",
        "deep-nesting",
        "5000-digits",
        "5000-digit-decimal",
        "1e999",
        "nul-in-a-field-name",
        "nul-in-the-reason",
    ],
)
def test_absurd_input_in_the_decision_form_is_a_problem_naming_its_field(
    client, reviewer, override, field, words
):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    answer = client.post(decide(escalation), approve_form(response, **override), **HTMX)
    assert answer.status_code == 200
    problems = answer.context["problems"]
    assert any(words in p.text for p in problems), problems
    expected_field = "approve_0" if field == "approve_1" else field
    assert any(p.field == expected_field for p in problems), problems
    assert not Verdict.objects.exists()


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=5), inner, max_size=4
        )
    ),
    max_leaves=12,
)
_TYPED = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_DIGITS = st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n)
_NESTED = st.integers(min_value=1, max_value=100_000).map(lambda n: "[" * n + "]" * n)


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    decision=st.sampled_from(["approve", "approve", "reject", "answer", "", "bogus"]),
    approve_call=st.lists(_TYPED | st.integers().map(str) | st.just("0") | _DIGITS, max_size=3),
    arguments=_JSON.map(json.dumps) | _TYPED | _DIGITS | _NESTED | _DIGITS.map("[{}]".format),
    reason=_TYPED,
    risk=_TYPED | st.just("irreversible"),
)
def test_whatever_the_decision_form_receives_it_never_answers_a_server_error(
    client, reviewer, decision, approve_call, arguments, reason, risk
):
    escalation = _one_held_item(client, reviewer)
    form = {
        "decision": decision,
        "approve_call": approve_call,
        "seen_0": "x",  # never the call's hash: nothing is approved, so every example can run
        "risk_0": risk,
        "arguments_0": arguments,
        "reason": reason,
    }
    response = client.post(decide(escalation), form, **HTMX)
    assert response.status_code in (200, 400, 409), response.content[:300]
    assert not Approval.objects.exists()


def _one_held_item(client, reviewer):
    escalation = getattr(_one_held_item, "escalation", None)
    if escalation is None or not type(escalation).objects.filter(pk=escalation.pk).exists():
        escalation = held_refund()
        opened(client, reviewer, escalation)
        _one_held_item.escalation = escalation
    return escalation


# ---- NUL characters and other text no database column takes, anywhere in the API's JSON -------


def test_a_nul_in_an_argument_s_field_name_is_a_400_naming_it(api):
    run = start(api)
    call = {"tool": "lookup_order", "arguments": {"order_id\x00": "ord_1"}, "call_id": "c1"}
    response = api.post(
        reverse("api:run-steps", args=[run["id"]]), {"step": 0, "calls": [call]}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["calls"] == [
        "calls[0].arguments: a field name holds a NUL character (\\u0000), which no database "
        "column takes"
    ]


@pytest.mark.parametrize(
    ("body", "field", "where"),
    [
        (
            {"calls": [{"tool": "lookup_order", "arguments": {"order_id": "o\x00"}}]},
            "calls",
            "calls[0].arguments.order_id",
        ),
        ({"calls": [{"tool": "look\x00up", "arguments": {}}]}, "calls", "calls[0].tool"),
        ({"message": "done\x00"}, "message", "message"),
        ({"calls": [], "tokens": "1e999"}, "tokens", "tokens"),
        (
            {"calls": [{"tool": "lookup_order", "arguments": {"n": "1e999"}}]},
            "calls",
            "calls[0].arguments.n",
        ),
    ],
    ids=[
        "in-a-value",
        "in-a-tool-name",
        "in-the-message",
        "an-infinite-number",
        "an-infinite-argument",
    ],
)
def test_text_and_numbers_no_column_takes_are_refused_wherever_they_are_in_a_step(
    api, body, field, where
):
    run = start(api)
    text = json.dumps({"step": 0, **body}).replace('"1e999"', "1e999")  # JSON's own overflow
    response = api.post(
        reverse("api:run-steps", args=[run["id"]]), text, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert any(p.startswith(f"{where}: ") for p in response.json()[field]), response.json()


def test_a_nul_in_a_run_s_goal_or_its_tools_is_refused_naming_it(api):
    tool = {**READ_ORDER, "parameters": {"type": "object", "properties": {"a\x00": {}}}}
    response = api.post(
        reverse("api:run-start"),
        {"goal": "g\x00", "tools": [tool], "actor": "external", "guardian": "local"},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert body["goal"]
    assert body["tools"]
    assert any("tools[0].parameters.properties" in p for p in body["tools"]), body


def test_a_nul_in_a_verdict_s_reason_through_the_api_is_refused_naming_it(client, reviewer):
    escalation = held_refund()
    client.force_login(reviewer)
    response = client.post(
        reverse("api:escalation-resolve", args=[escalation.pk]),
        {"decision": "reject", "reason": "no\x00"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert any(p.startswith("reason") for p in response.json()["reason"]), response.json()
    assert not Verdict.objects.exists()


@pytest.mark.parametrize(
    ("url", "status"), [("/guidance/", 400), ("/admin/escalations/reviewguidance/add/", 200)]
)
def test_a_nul_in_guidance_is_a_form_error_naming_the_text(client, admin, url, status):
    client.force_login(admin)
    response = client.post(url, {"condition": "risk", "tool": "", "text": "Check\x00 it"})
    assert response.status_code == status
    assert "Null characters are not allowed." in response.content.decode()
    assert not ReviewGuidance.objects.exists()


# ---- bodies over the limit and a database that is down: JSON under /api/ ----------------------


def test_a_body_over_the_upload_limit_is_a_json_413_under_the_api(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = json.dumps({"goal": "g" * 20_000, "tools": [READ_ORDER], "actor": "external"})
    response = api.post(reverse("api:run-start"), body, content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    [message] = response.json()["detail"]
    assert "10000 bytes" in message


def test_a_malformed_body_is_a_json_400_under_the_api(api):
    response = api.post(reverse("api:run-start"), "{bad", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"][0].startswith("JSON parse error")


def test_a_page_over_the_upload_limit_keeps_its_html_error_page(client, reviewer, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    settings.DEBUG = False
    client.force_login(reviewer)
    escalation = held_refund()
    response = client.post(decide(escalation), {"reason": "r" * 20_000})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


_OUTAGE_PROBE = (
    "from django.test import Client; c = Client(raise_request_exception=False);"
    "r = c.get('/api/runs/', HTTP_AUTHORIZATION='Bearer gdn_x');"
    "print(r.status_code, r.get('Retry-After'), r['Content-Type']); print(r.content.decode());"
    "c.cookies['sessionid'] = 'a-session';"  # a signed-in browser: its session is read first
    "p = c.get('/runs/');"
    "print(p.status_code, p['Content-Type'])"
)


@pytest.mark.parametrize("debug", ["true", "false"])
@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_a_database_that_is_down_is_a_json_503_under_the_api_and_a_page_elsewhere(
    database, debug, tmp_path
):
    url = CLOSED_PORT_DB if database == "postgresql" else f"sqlite:///{tmp_path}/no/such.sqlite3"
    if database == "sqlite":
        (tmp_path / "no").mkdir()
        (tmp_path / "no" / "such.sqlite3").mkdir()  # a folder where the file should be
    result = run_manage(
        "shell",
        "-c",
        _OUTAGE_PROBE,
        DATABASE_URL=url,
        DEBUG=debug,
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="testserver",
    )
    assert result.returncode == 0, result.stderr
    api_status, body, page = result.stdout.strip().splitlines()[-3:]
    assert api_status == "503 30 application/json"
    assert json.loads(body) == {"detail": ["The database is not answering; try again in a moment."]}
    assert page.split()[0] == "500"  # the site's own error page, as before
    assert "text/html" in page


@login_not_required
def fail(request):
    raise RuntimeError("a bug")


# Before the site's own: its /api/ catch-all answers 404 to any other path under /api/.
urlpatterns = [path("api/test/fail/", fail), path("test/fail/", fail), *site_urlpatterns]


@pytest.mark.urls(__name__)
def test_any_other_server_error_under_the_api_is_json_and_a_page_s_stays_html(client):
    client.raise_request_exception = False
    api = client.get("/api/test/fail/")
    assert api.status_code == 500
    assert api.json() == {"detail": ["A server error occurred; it has been logged."]}
    page = client.get("/test/fail/")
    assert page.status_code == 500
    assert page["Content-Type"].startswith("text/html")


def test_a_bad_host_under_the_api_is_a_json_400_and_a_page_s_stays_html(client):
    api = client.get("/api/", HTTP_HOST="evil.example")
    assert api.status_code == 400
    assert api.json() == {"detail": ["Bad request."]}
    page = client.get("/accounts/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")


# ---- SECRET_KEY -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["x", "x" * 50, "abcd" * 20, "django-insecure-" + secrets.token_urlsafe(50)],
    ids=[
        "one-character",
        "one-distinct-character",
        "four-distinct-characters",
        "django-s-insecure-prefix",
    ],
)
def test_a_weak_secret_key_outside_debug_is_a_one_line_startup_error_naming_it(key):
    result = run_manage("check", DEBUG="false", SECRET_KEY=key, ALLOWED_HOSTS="guardian.example")
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert "SECRET_KEY" in line
    assert key not in line  # a secret, even a weak one, is never printed


def test_a_strong_secret_key_outside_debug_starts():
    result = run_manage(
        "check",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="guardian.example",
    )
    assert result.returncode == 0, result.stderr
