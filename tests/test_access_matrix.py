"""Who may open what: one table of role × URL → allowed / 403 / redirect, covering every URL.

Add a row here for every new page or endpoint; test_every_url_is_in_the_matrix fails until you do.
"""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.factories import make_escalation, make_run

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
    # The icon browsers ask for on pages that name none (the admin's): the vendored SVG.
    row(
        "favicon",
        anonymous=("redirect", "/static/favicon.svg"),
        reviewer=("redirect", "/static/favicon.svg"),
        auditor=("redirect", "/static/favicon.svg"),
        admin=("redirect", "/static/favicon.svg"),
        outsider=("redirect", "/static/favicon.svg"),
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
    row("policies:list", anonymous=LOGIN, reviewer=403, auditor=403, admin=200, outsider=403),
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
    if kwargs.get("pk") == "run":
        kwargs = {**kwargs, "pk": make_run().pk}
    if kwargs.get("escalation_id") == "escalation":
        kwargs = {**kwargs, "escalation_id": make_escalation().pk}
    url = reverse(url_name, kwargs=kwargs)

    response = client.generic(method, url)

    want = expected[persona]
    if isinstance(want, tuple):
        assert response.status_code == 302, f"{persona} {method} {url}: {response.status_code}"
        assert response["Location"].startswith(want[1]), f"{persona} {method} {url}"
    else:
        assert response.status_code == want, f"{persona} {method} {url}"
