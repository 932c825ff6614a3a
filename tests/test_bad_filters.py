"""A bad filter is named and nothing is listed under the others: on the queue and the runs
list (an empty list with the problem), and the API's list endpoints (400 naming each bad
parameter) (issue 22, item 5: `?run=abc&kind=bogus` showed everything)."""

import pytest
from django.urls import reverse

from tests.factories import make_escalation, make_run
from tests.test_api_endpoints import bearer

pytestmark = pytest.mark.django_db


def test_the_queue_names_each_bad_filter_and_lists_nothing(client, reviewer):
    escalation = make_escalation()
    client.force_login(reviewer)
    good = client.get(reverse("escalations:queue")).content.decode()
    assert f'id="queue-row-{escalation.pk}"' in good

    response = client.get(reverse("escalations:queue"), {"run": "abc", "kind": "bogus"})
    page = response.content.decode()
    assert response.status_code == 400
    assert "run: must be a run number" in page
    assert "kind: must be one of" in page
    assert f'id="queue-row-{escalation.pk}"' not in page
    assert "Nothing is listed until the filters above are fixed." in page
    assert 'id="queue-poll"' not in page  # no poll brings the unfiltered rows back

    # The listing an htmx filter change swaps in says the same, as a 200 htmx will swap.
    listing = client.get(reverse("escalations:queue"), {"run": "abc"}, HTTP_HX_REQUEST="true")
    assert listing.status_code == 200
    assert "run: must be a run number" in listing.content.decode()
    assert f'id="queue-row-{escalation.pk}"' not in listing.content.decode()


def test_the_runs_list_names_a_bad_status_and_lists_nothing(client, auditor):
    run = make_run(goal="A run that must not show under a bad filter")
    client.force_login(auditor)
    response = client.get(reverse("runs:list"), {"status": "bogus", "actor": "scripted"})
    page = response.content.decode()
    assert response.status_code == 400
    assert "status: must be one of" in page
    assert run.goal not in page
    assert "Nothing is listed until the filters named above are fixed." in page

    listing = client.get(reverse("runs:list"), {"status": "bogus"}, HTTP_HX_REQUEST="true")
    assert listing.status_code == 200
    assert run.goal not in listing.content.decode()


def test_the_escalations_api_filters_as_the_queue_and_names_bad_parameters(client, reviewer):
    first = make_escalation()
    other = make_escalation()
    headers = bearer(reviewer)
    listed = client.get("/api/escalations/", {"run": first.run_id}, headers=headers)
    assert listed.status_code == 200
    assert [e["id"] for e in listed.json()["results"]] == [first.pk]
    assert other.pk != first.pk

    bad = client.get("/api/escalations/", {"run": "abc", "kind": "bogus", "colour": "red"},
                     headers=headers)  # fmt: skip
    assert bad.status_code == 400
    assert set(bad.json()) == {"run", "kind", "colour"}


def test_the_examples_api_names_an_unknown_parameter(client, reviewer):
    headers = bearer(reviewer)
    assert client.get("/api/examples/", {"limit": 5}, headers=headers).status_code == 200
    bad = client.get("/api/examples/", {"conditon": "integrity"}, headers=headers)
    assert bad.status_code == 400
    assert list(bad.json()) == ["conditon"]
    export = client.get("/api/examples/export/", {"since": "yesterday"}, headers=headers)
    assert export.status_code == 400
    assert list(export.json()) == ["since"]
