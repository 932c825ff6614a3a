"""Friendly 404 and 500 pages (never Django's debug page for a missing escalation or run), and a
403 logged once, as one line without a traceback."""

import logging

import pytest
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.loader import get_template
from django.urls import path, reverse

from escalations.models import Escalation
from guardian_core.urls import urlpatterns as site_urlpatterns
from runs.models import Run

pytestmark = pytest.mark.django_db


# Pages that look an escalation or a run up the way the app's pages do; this module is the
# URLconf of the tests marked with it (the site's own URLs plus these).
def show_escalation(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(get_object_or_404(Escalation, pk=pk).summary)


def show_run(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(get_object_or_404(Run, pk=pk).goal)


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [
    *site_urlpatterns,
    path("test/escalations/<int:pk>/", show_escalation),
    path("test/runs/<int:pk>/", show_run),
    path("test/fail/", fail),
]
uses_these_urls = pytest.mark.urls(__name__)


@uses_these_urls
@pytest.mark.parametrize("debug", [True, False], ids=["DEBUG on (make demo)", "DEBUG off"])
@pytest.mark.parametrize("url", ["/test/escalations/999999/", "/test/runs/999999/"])
def test_a_missing_escalation_or_run_gives_the_friendly_404_with_a_link_back(
    client, settings, reviewer, url, debug
):
    settings.DEBUG = debug
    client.force_login(reviewer)

    response = client.get(url)

    assert response.status_code == 404
    assert [t.name for t in response.templates][0] == "404.html"
    html = response.content.decode()
    assert "Not found" in html
    assert '<a href="/">Back to your start page</a>' in html
    # Not Django's debug page: no URL patterns, no exception text.
    assert "URLconf" not in html
    assert "No Escalation matches" not in html
    assert "No Run matches" not in html


@pytest.mark.parametrize("debug", [True, False], ids=["DEBUG on (make demo)", "DEBUG off"])
def test_the_decision_page_of_a_missing_escalation_is_the_friendly_404(
    client, settings, reviewer, debug
):
    settings.DEBUG = debug
    client.force_login(reviewer)

    response = client.get(reverse("escalations:detail", args=[999999]))

    assert response.status_code == 404
    html = response.content.decode()
    assert "Back to your start page" in html
    assert "URLconf" not in html


@pytest.mark.parametrize("debug", [True, False], ids=["DEBUG on (make demo)", "DEBUG off"])
def test_an_unknown_address_gives_the_friendly_404(client, settings, reviewer, debug):
    settings.DEBUG = debug
    client.force_login(reviewer)
    response = client.get("/runs/4/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Back to your start page" in html
    assert "URLconf" not in html


def test_the_500_page_renders_with_no_context_at_all():
    # Django's server_error renders it this way: no request, no context processors.
    html = get_template("500.html").render()
    assert "Something went wrong" in html
    assert 'href="/"' in html


@uses_these_urls
def test_a_server_error_gives_the_friendly_500_page_without_debug_information(client, reviewer):
    client.raise_request_exception = False
    client.force_login(reviewer)

    response = client.get("/test/fail/")

    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html
    assert "a bug" not in html
    assert "Traceback" not in html


def request_log_streams(monkeypatch) -> list:
    """Point every stream handler a django.request record reaches at one buffer of ours."""
    import io

    buffer = io.StringIO()
    logger = logging.getLogger("django.request")
    while logger is not None:
        for handler in logger.handlers:
            # Plain StreamHandlers only: pytest's capture handlers subclass it.
            if type(handler) is logging.StreamHandler:
                monkeypatch.setattr(handler, "stream", buffer)
        logger = logger.parent if logger.propagate else None
    return buffer


def test_a_403_is_one_log_line_without_a_traceback(client, outsider, settings, caplog, monkeypatch):
    # DEBUG on, as in make demo: Django's own console handler is live then, and with the root's
    # it wrote every warning twice.
    settings.DEBUG = True
    written = request_log_streams(monkeypatch)
    client.force_login(outsider)

    with caplog.at_level(logging.INFO, logger="django"):
        response = client.get("/escalations/")

    assert response.status_code == 403
    records = [r for r in caplog.records if r.name.startswith("django")]
    assert len(records) == 1
    assert records[0].getMessage() == "Forbidden (Permission denied): /escalations/"
    assert records[0].exc_info is None
    output = written.getvalue()
    assert output.count("Forbidden (Permission denied): /escalations/") == 1, output
    assert "Traceback" not in output


@uses_these_urls
def test_a_404_is_still_logged_once_and_a_500_keeps_its_traceback(
    client, reviewer, settings, caplog, monkeypatch
):
    settings.DEBUG = True
    written = request_log_streams(monkeypatch)
    client.raise_request_exception = False
    client.force_login(reviewer)

    with caplog.at_level(logging.INFO, logger="django"):
        client.get("/test/runs/999999/")
        client.get("/test/fail/")

    output = written.getvalue()
    assert output.count("Not Found: /test/runs/999999/") == 1, output
    assert output.count("Internal Server Error: /test/fail/") == 1, output
    # A real error keeps what the operators need to fix it.
    assert "RuntimeError: a bug" in output
