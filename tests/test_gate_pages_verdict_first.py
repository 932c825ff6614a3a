"""The gates' activate pages say their verdict before the figures and the flips, and the
guardian model gate's page answers at once while the report is computed (issue 22)."""

import re

import pytest
from django.urls import reverse

from tests.test_guardian_model_pages import good_active_bad_candidate, labelled  # noqa: F401
from tests.test_policy_gate import current, examples, history_from_v1, worse  # noqa: F401

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _verdict_first(body: str) -> None:
    refused = body.index('class="problems gate-refused"')
    summary = body.index('class="gate-summary"')
    assert refused < summary < body.index('<table class="gate ')
    assert summary < body.index('<table class="gate-flips')
    # The summary counts the flips and links to them.
    words = re.sub(r"<[^>]+>", "", body[summary : body.index("</p>", summary)])
    assert re.search(r"\d+ examples? changes? outcome: \d+ now costs? less, \d+ more", words)
    assert 'href="#gate-flips"' in body
    assert 'id="gate-flips"' in body


def test_the_policy_gate_says_its_verdict_and_a_summary_before_the_flips(
    client,
    admin,
    current,  # noqa: F811
):
    candidate = worse()
    client.force_login(admin)
    body = client.get(reverse("policies:activate", args=[candidate.pk])).content.decode()
    _verdict_first(body)


def test_the_guardian_model_gate_says_its_verdict_and_a_summary_before_the_flips(
    client,
    admin,
    good_active_bad_candidate,  # noqa: F811
):
    _, bad = good_active_bad_candidate
    client.force_login(admin)
    url = reverse("policies:model_activate", args=[bad.pk])
    _verdict_first(client.get(url + "?measure=1").content.decode())
    _verdict_first(client.get(url + "?measure=1", **HX).content.decode())


def test_the_guardian_model_gate_page_comes_at_once_and_fetches_its_report(
    client,
    admin,
    good_active_bad_candidate,  # noqa: F811
):
    _, bad = good_active_bad_candidate
    client.force_login(admin)
    url = reverse("policies:model_activate", args=[bad.pk])

    page = client.get(url).content.decode()
    # Nothing measured yet: the page says the gate is being computed, and how to get it.
    assert "Computing the gate…" in page
    assert "The gate refuses" not in page
    assert 'name="comment"' not in page  # the form comes with the report it depends on
    pending = re.search(r'<div id="gate-pending"[^>]*>', page).group(0)
    assert f'hx-get="{url}?measure=1"' in pending
    assert 'hx-trigger="load"' in pending
    assert f'<a href="{url}?measure=1">' in page  # without JavaScript

    fragment = client.get(url + "?measure=1", **HX).content.decode()
    assert "<html" not in fragment
    assert fragment.lstrip().startswith('<div id="gate-measured">')
    assert "The gate refuses this version" in fragment
    assert 'name="override_reason"' in fragment
