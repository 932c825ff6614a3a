"""Starting a run is idempotent under an Idempotency-Key: a start whose answer was lost (a 503
after the commit, a timeout) finds the run it made when retried, instead of leaving an orphan
run nobody drives (seen by the soak when PostgreSQL stopped mid-answer)."""

import pytest
from django.urls import reverse
from guardian_client import Guardian

from runs.models import Run
from tests.client_helpers import LOOKUP_ORDER, guardian_for, scripted
from tests.proxies import FaultyProxy
from tests.test_external_runs import api, start  # noqa: F401

URL = "api:run-start"


def _body(goal="Refund order ord_1: the parcel arrived broken.") -> dict:
    from tests.test_external_runs import ISSUE_REFUND, READ_ORDER

    return {
        "goal": goal,
        "tools": [READ_ORDER, ISSUE_REFUND],
        "actor": "external",
        "guardian": "scripted",
        "config": scripted({}, {}),
        "webhook_url": "http://127.0.0.1:9/verdicts",
    }


@pytest.mark.django_db
def test_the_same_key_twice_starts_one_run_and_answers_it_again_with_its_secret(api):  # noqa: F811
    first = api.post(reverse(URL), _body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(reverse(URL), _body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["webhook_secret"] == first.json()["webhook_secret"]
    assert Run.objects.count() == 1
    other = api.post(reverse(URL), _body(), format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert other.status_code == 201
    assert Run.objects.count() == 2
    assert start(api)["id"] not in {first.json()["id"], other.json()["id"]}  # no key: new run


@pytest.mark.django_db
def test_a_key_sent_with_another_request_is_a_conflict_naming_the_run(api):  # noqa: F811
    first = api.post(reverse(URL), _body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    clash = api.post(
        reverse(URL), _body(goal="Something else"), format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert clash.status_code == 409
    assert f"already started run {first.json()['id']}" in str(clash.json()["detail"])
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_malformed_key_is_refused_by_name(api):  # noqa: F811
    bad = api.post(reverse(URL), _body(), format="json", HTTP_IDEMPOTENCY_KEY="no spaces")
    assert bad.status_code == 400
    assert "Idempotency-Key" in bad.json()
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_client_retrying_a_start_whose_answer_was_lost_gets_the_run_it_made(
    live_server, integrator
):
    starts = iter([True])  # the first start's answer is lost after Guardian made the run
    proxy = FaultyProxy(
        live_server.url,
        after=lambda method, path: path.startswith("/api/runs/start/") and next(starts, False),
    )
    try:
        with Guardian(proxy.url, guardian_for(integrator), backoff=0.01) as guardian:
            run = guardian.run(
                goal="Look up order ord_1.",
                tools=[LOOKUP_ORDER],
                guardian="scripted",
                config=scripted({}),
            )
    finally:
        proxy.close()
    assert proxy.lost == 1  # the first answer was lost after the run was made
    assert list(Run.objects.values_list("pk", flat=True)) == [run.id]  # no orphan
