"""Who may open what: one table of role × URL → allowed / 403 / redirect, covering every URL.

Add a row here for every new page or endpoint; test_every_url_is_in_the_matrix fails until you do.
"""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from demo.setup import demo_policy_version
from tests.factories import make_escalation, make_guardian_model_version, make_run, make_turn

LOGIN = ("redirect", "/accounts/login/")
ADMIN_LOGIN = ("redirect", "/admin/login/")
PERSONAS = ("anonymous", "reviewer", "auditor", "admin", "outsider")


def row(url_name, method="GET", *, kwargs=None, **expected):
    """One URL; `expected` maps each persona to a status code or a ("redirect", prefix)."""
    assert set(expected) == set(PERSONAS), f"{url_name}: give every persona an expectation"
    return pytest.param(url_name, method, kwargs or {}, expected, id=f"{method} {url_name}")


MATRIX = [
    row(
        "home",
        anonymous=LOGIN,
        reviewer=("redirect", "/escalations/"),
        auditor=("redirect", "/runs/"),
        admin=("redirect", "/policies/"),
        outsider=403,
    ),
    row("healthz", anonymous=200, reviewer=200, auditor=200, admin=200, outsider=200),
    # Off by default (a 404); enabled, only the scraper's token or address opens it, never a
    # person's session (tests/test_metrics.py).
    row("metrics", anonymous=404, reviewer=404, auditor=404, admin=404, outsider=404),
    # The icon browsers ask for on pages that name none (the admin's): the vendored SVG.
    row(
        "favicon",
        anonymous=("redirect", "/static/favicon.svg"),
        reviewer=("redirect", "/static/favicon.svg"),
        auditor=("redirect", "/static/favicon.svg"),
        admin=("redirect", "/static/favicon.svg"),
        outsider=("redirect", "/static/favicon.svg"),
    ),
    # The scripts' words in the person's language (JavaScriptCatalog): the login page needs it.
    row(
        "javascript-catalog",
        anonymous=200,
        reviewer=200,
        auditor=200,
        admin=200,
        outsider=200,
    ),
    row("login", anonymous=200, reviewer=200, auditor=200, admin=200, outsider=200),
    row(
        "logout",
        "POST",
        anonymous=LOGIN,
        reviewer=LOGIN,
        auditor=LOGIN,
        admin=LOGIN,
        outsider=LOGIN,
    ),
    row("escalations:queue", anonymous=LOGIN, reviewer=200, auditor=403, admin=403, outsider=403),
    # "Next" claims and opens an item, or says "Nothing left to claim" on the queue; a bulk
    # decision without JavaScript reports on the queue too (here: nothing selected).
    row(
        "escalations:next",
        "POST",
        anonymous=LOGIN,
        reviewer=("redirect", "/escalations/"),
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "escalations:bulk",
        "POST",
        anonymous=LOGIN,
        reviewer=("redirect", "/escalations/"),
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "escalations:examples", anonymous=LOGIN, reviewer=200, auditor=403, admin=403, outsider=403
    ),
    row(
        "escalations:examples_jsonl",
        anonymous=LOGIN,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    # The decision pane: an escalation of its own (make_escalation) per request.
    row(
        "escalations:detail",
        kwargs={"escalation_id": "escalation"},
        anonymous=LOGIN,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "escalations:decide",
        "POST",
        kwargs={"escalation_id": "escalation"},
        anonymous=LOGIN,
        reviewer=200,  # allowed: an empty form comes back naming its problems
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "escalations:skip",
        "POST",
        kwargs={"escalation_id": "escalation"},
        anonymous=LOGIN,
        reviewer=("redirect", "/escalations/"),
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "escalations:extend",
        "POST",
        kwargs={"escalation_id": "escalation"},
        anonymous=LOGIN,
        reviewer=200,  # allowed: not holding it, the page says why it was not extended
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row("runs:list", anonymous=LOGIN, reviewer=403, auditor=200, admin=403, outsider=403),
    row(
        "runs:verify",
        kwargs={"run_id": "run"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "runs:export_json",
        kwargs={"run_id": "run"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "runs:export_csv",
        kwargs={"run_id": "run"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    # Every run's decision log under the runs list's filters, streamed.
    row(
        "runs:decision_log_csv",
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    # Replay (runs/replay_views.py): a run, and a turn of a run, of their own per request.
    row(
        "runs:replay",
        kwargs={"run_id": "run"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "runs:turn_replay",
        kwargs={"run_id": "turn_run", "index": 0},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "runs:turn_probe",
        kwargs={"run_id": "turn_run", "index": 0},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    # The run page: a run of its own (make_run) per request.
    row(
        "runs:detail",
        kwargs={"run_id": "run"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row("policies:list", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    row("policies:new", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    row("policies:monitoring", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    row("policies:shadow", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    # Starting a trial with nothing chosen: every problem named, nothing started.
    row(
        "policies:shadow",
        "POST",
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    row(
        "policies:shadow_detail",
        kwargs={"trial_id": "shadow_trial"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:shadow_stop",
        "POST",
        kwargs={"trial_id": "shadow_trial"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=("redirect", "/policies/shadow/"),
        outsider=403,
    ),
    # The evaluation page: the form on GET; an empty POST comes back naming what is missing.
    row("policies:evaluate", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    row(
        "policies:evaluate",
        "POST",
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    row(
        "policies:preview",
        "POST",
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:detail",
        kwargs={"version_id": "policy_version"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:diff",
        kwargs={"version_id": "policy_version"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    # The activate page shows the regression gate's report; a POST without the comment an
    # activation needs is the page again with the error.
    row(
        "policies:activate",
        kwargs={"version_id": "policy_version"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:activate",
        "POST",
        kwargs={"version_id": "policy_version"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    row("policies:models", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    # Asking for a new version with nothing chosen: every bad field named, nothing queued.
    row(
        "policies:models",
        "POST",
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    # The jobs, polled: 286 (htmx's "stop polling") when none is unfinished.
    row("policies:model_jobs", anonymous=LOGIN, reviewer=403, auditor=403, admin=286, outsider=403),
    # The versions table alone, fetched again when a polled job made a version.
    row(
        "policies:model_versions",
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:model_detail",
        kwargs={"version_id": "guardian_model"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    # Retiring needs a reason: without one, back to the version's page with the error.
    row(
        "policies:model_retire",
        "POST",
        kwargs={"version_id": "guardian_model"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=("redirect", "/policies/models/"),
        outsider=403,
    ),
    # The gate's report on GET; a POST without the comment is the page again with the error.
    row(
        "policies:model_activate",
        kwargs={"version_id": "guardian_model"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "policies:model_activate",
        "POST",
        kwargs={"version_id": "guardian_model"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    row("guidance:list", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    row(
        "guidance:edit",
        kwargs={"guidance_id": "guidance"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "guidance:delete",
        "POST",
        kwargs={"guidance_id": "guidance"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=("redirect", "/guidance/"),
        outsider=403,
    ),
    row("people:list", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    *(
        row(
            f"people:{action}",
            "POST",
            kwargs={"user_id": "person"},
            anonymous=LOGIN,
            reviewer=403,
            auditor=403,
            admin=200 if action == "password" else ("redirect", "/people/"),
            outsider=403,
        )
        for action in ("roles", "active", "password")
    ),
    # Anyone signed in changes their own password; the form comes back naming what is missing.
    row("password_change", anonymous=LOGIN, reviewer=200, auditor=200, admin=200, outsider=200),
    # Anyone signed in sets their own language, time zone and shortcuts.
    row("preferences", anonymous=LOGIN, reviewer=200, auditor=200, admin=200, outsider=200),
    # The top bar's language switch works signed in or not; a POST naming no language is a 400.
    row("language", "POST", anonymous=400, reviewer=400, auditor=400, admin=400, outsider=400),
    row("tokens:list", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
    # The confirmation before a revoke.
    row(
        "tokens:revoke",
        kwargs={"token_id": "token"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "tokens:revoke",
        "POST",
        kwargs={"token_id": "token"},
        anonymous=LOGIN,
        reviewer=403,
        auditor=403,
        admin=("redirect", "/tokens/"),
        outsider=403,
    ),
    row("api:schema", anonymous=403, reviewer=200, auditor=200, admin=200, outsider=200),
    row("api:run-list", anonymous=403, reviewer=403, auditor=200, admin=403, outsider=403),
    row(
        "api:run-detail",
        kwargs={"pk": "run"},
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-start",
        "POST",
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=400,  # allowed: an empty body is a validation error, not a refusal
        outsider=403,
    ),
    row(
        "api:run-cancel",
        "POST",
        kwargs={"pk": "run"},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row("api:escalation-list", anonymous=403, reviewer=200, auditor=403, admin=403, outsider=403),
    row(
        "api:policy-version-list",
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    # Any other path under /api/: a JSON 404 for everyone.
    row(
        "api:not-found",
        kwargs={"rest": "no/such/endpoint/"},
        anonymous=404,
        reviewer=404,
        auditor=404,
        admin=404,
        outsider=404,
    ),
    # The index: what the API offers, to anyone (it names paths, no data).
    row("api:index", anonymous=200, reviewer=200, auditor=200, admin=200, outsider=200),
    # The docs page is a page for people: signing in first, as on every page.
    row("api:docs", anonymous=LOGIN, reviewer=200, auditor=200, admin=200, outsider=200),
    row(
        "api:run-turn-list",
        kwargs={"pk": "run"},
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-turn-detail",
        kwargs={"pk": "turn_run", "index": "turn"},
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    # Exports: the same bytes as the auditors' pages, for the same role.
    row(
        "api:run-export",
        kwargs={"pk": "run"},
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-decisions-csv",
        kwargs={"pk": "run"},
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "api:decision-log-csv",
        anonymous=403,
        reviewer=403,
        auditor=200,
        admin=403,
        outsider=403,
    ),
    row(
        "api:escalation-detail",
        kwargs={"pk": "escalation"},
        anonymous=403,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:escalation-claim",
        "POST",
        kwargs={"pk": "escalation"},
        anonymous=403,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:escalation-release",
        "POST",
        kwargs={"pk": "escalation"},
        anonymous=403,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    # Allowed, and refused for what was (not) sent: no decision; not holding it.
    row(
        "api:escalation-resolve",
        "POST",
        kwargs={"pk": "escalation"},
        anonymous=403,
        reviewer=400,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:escalation-extend",
        "POST",
        kwargs={"pk": "escalation"},
        anonymous=403,
        reviewer=400,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    # An external run's protocol: an integrator's token drives only the runs it started
    # (another's is not found); the other roles, admins included, may not drive at all.
    row(
        "api:run-steps",
        kwargs={"pk": "external_run"},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-steps",
        "POST",
        kwargs={"pk": "external_run"},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-step",
        kwargs={"pk": "external_run", "step": 0},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:run-step-results",
        "POST",
        kwargs={"pk": "external_run", "step": 0},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:escalation-wait",
        kwargs={"pk": "external_escalation"},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:example-list",
        anonymous=403,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:example-export",
        anonymous=403,
        reviewer=200,
        auditor=403,
        admin=403,
        outsider=403,
    ),
    row(
        "api:policy-version-create",
        "POST",
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=400,
        outsider=403,
    ),
    row(
        "api:policy-version-activate",
        "POST",
        kwargs={"pk": "policy_version"},
        anonymous=403,
        reviewer=403,
        auditor=403,
        admin=200,
        outsider=403,
    ),
    row(
        "admin:index",
        anonymous=ADMIN_LOGIN,
        reviewer=ADMIN_LOGIN,
        auditor=ADMIN_LOGIN,
        admin=200,
        outsider=ADMIN_LOGIN,
    ),
]


def _url_names(patterns, namespace=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            if pattern.namespace == "admin":
                # The admin site's own pages follow its staff check; its index stands for all.
                yield "admin:index"
                continue
            yield from _url_names(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield f"{namespace}{pattern.name}"


def test_every_url_is_in_the_matrix():
    in_matrix = {param.values[0] for param in MATRIX}
    routed = set(_url_names(get_resolver().url_patterns))
    assert routed - in_matrix == set(), "URLs with no row in the access matrix"
    assert in_matrix - routed == set(), "matrix rows for URLs that no longer exist"


def test_every_url_pattern_is_named():
    def unnamed(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace != "admin":
                    yield from unnamed(pattern.url_patterns)
            elif not pattern.name:
                yield str(pattern.pattern)

    assert list(unnamed(get_resolver().url_patterns)) == []


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("url_name", "method", "kwargs", "expected"), MATRIX)
def test_access(request, client, persona, url_name, method, kwargs, expected):
    if persona != "anonymous":
        client.force_login(request.getfixturevalue(persona))
    if kwargs.get("run_id") == "run":
        kwargs = {**kwargs, "run_id": make_run().pk}
    if kwargs.get("run_id") == "turn_run":
        turn = make_escalation().turn
        kwargs = {**kwargs, "run_id": turn.run_id, "index": turn.index}
    if kwargs.get("pk") == "run":
        kwargs = {**kwargs, "pk": make_run().pk}
    if kwargs.get("escalation_id") == "escalation":
        kwargs = {**kwargs, "escalation_id": make_escalation().pk}
    url = reverse(url_name, kwargs=_api_objects(kwargs))

    response = client.generic(method, url)

    _assert_answer(response, expected[persona], f"{persona} {method} {url}")


def _api_objects(kwargs: dict) -> dict:
    """The API rows' objects, one of its own per request."""
    if kwargs.get("pk") == "escalation":
        return {**kwargs, "pk": make_escalation().pk}
    if kwargs.get("pk") == "turn_run":
        turn = make_escalation().turn
        return {**kwargs, "pk": turn.run_id, "index": turn.index}
    if kwargs.get("pk") == "policy_version":
        return {**kwargs, "pk": demo_policy_version().pk}  # valid: it can be activated
    if kwargs.get("pk") in ("external_run", "external_escalation"):
        from django.contrib.auth import get_user_model

        owner = get_user_model().objects.create_user(username=f"loop-{make_run().pk}")
        run = make_run(actor="external", created_by=owner)
        if kwargs["pk"] == "external_escalation":
            return {**kwargs, "pk": make_escalation(turn=make_turn(run=run)).pk}
        return {**kwargs, "pk": run.pk}
    if kwargs.get("version_id") == "policy_version":
        return {**kwargs, "version_id": demo_policy_version().pk}
    if kwargs.get("trial_id") == "shadow_trial":
        return {**kwargs, "trial_id": _shadow_trial().pk}
    if kwargs.get("version_id") == "guardian_model":
        demo_policy_version()  # the gate reads at the active policy's thresholds
        return {**kwargs, "version_id": make_guardian_model_version().pk}
    if kwargs.get("guidance_id") == "guidance":
        from escalations.models import ReviewGuidance

        guidance = ReviewGuidance.objects.create(tool=f"tool-{make_run().pk}", text="Check it.")
        return {**kwargs, "guidance_id": guidance.pk}
    if kwargs.get("user_id") == "person":
        from django.contrib.auth import get_user_model

        person = get_user_model().objects.create_user(username=f"person-{make_run().pk}")
        return {**kwargs, "user_id": person.pk}
    if kwargs.get("token_id") == "token":
        from django.contrib.auth import get_user_model

        from guardian_core.services import api_token_create

        owner = get_user_model().objects.create_user(username=f"machine-{make_run().pk}")
        token, _ = api_token_create(user=owner, name="matrix")
        return {**kwargs, "token_id": token.pk}
    return kwargs


def _shadow_trial():
    from policies.services import policy_version_create
    from policies.shadow import shadow_trial_start

    active = demo_policy_version()
    candidate = policy_version_create(
        thresholds=active.thresholds,
        question_set=active.question_set,
        question_set_version=active.question_set_version,
    )
    return shadow_trial_start(policy_version_id=candidate.pk, comment="matrix")


def _assert_answer(response, want, where: str) -> None:
    if isinstance(want, tuple):
        assert response.status_code == 302, f"{where}: {response.status_code}"
        assert response["Location"].startswith(want[1]), where
    else:
        assert response.status_code == want, f"{where}: {response.status_code}"


# Machines call the API with a token instead of a session: the same role, the same answer. (The
# docs page is for people, signed in; a token does not open pages.)
API_ROWS = [
    param
    for param in MATRIX
    if param.values[0].startswith("api:") and param.values[0] != "api:docs"
]


@pytest.mark.django_db
@pytest.mark.parametrize("persona", [p for p in PERSONAS if p != "anonymous"])
@pytest.mark.parametrize(("url_name", "method", "kwargs", "expected"), API_ROWS)
def test_access_with_a_token(request, client, persona, url_name, method, kwargs, expected):
    from guardian_core.services import api_token_create

    _, secret = api_token_create(user=request.getfixturevalue(persona), name="matrix")
    if kwargs.get("pk") == "run":
        kwargs = {**kwargs, "pk": make_run().pk}
    url = reverse(url_name, kwargs=_api_objects(kwargs))

    response = client.generic(method, url, HTTP_AUTHORIZATION=f"Bearer {secret}")

    _assert_answer(response, expected[persona], f"{persona} (token) {method} {url}")


@pytest.mark.django_db
@pytest.mark.parametrize(("url_name", "method", "kwargs", "expected"), API_ROWS)
def test_a_revoked_or_unknown_token_opens_nothing(
    request, client, admin, url_name, method, kwargs, expected
):
    from guardian_core.services import api_token_create, api_token_revoke

    token, secret = api_token_create(user=admin, name="matrix")
    api_token_revoke(token_id=token.pk)
    if kwargs.get("pk") == "run":
        kwargs = {**kwargs, "pk": make_run().pk}
    url = reverse(url_name, kwargs=_api_objects(kwargs))
    for presented in (secret, "gdn_not-a-token"):
        response = client.generic(method, url, HTTP_AUTHORIZATION=f"Bearer {presented}")
        assert response.status_code == 403, f"{method} {url}: {response.status_code}"
