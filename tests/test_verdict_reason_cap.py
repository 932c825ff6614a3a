"""A verdict's reason is capped as the reviewers' guidance is (2 000 characters): past it, the
decision pane, the API and the Django admin refuse it naming the field, and record nothing
(issue 22, item 5: a 300 000-character reason was accepted)."""

import pytest
from django.urls import reverse

from escalations.models import VERDICT_REASON_MAX_CHARS, EscalationStatus, ReviewGuidance, Verdict
from runs.models import RunStatus
from tests.runs_helpers import drive, start
from tests.test_api_endpoints import bearer

pytestmark = pytest.mark.django_db

TOO_LONG = "x" * 300_000


@pytest.fixture
def held_refund():
    run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    return run.escalations.get(status=EscalationStatus.OPEN)


def test_the_cap_is_the_guidance_cap():
    assert ReviewGuidance._meta.get_field("text").max_length == VERDICT_REASON_MAX_CHARS


def test_the_decision_pane_refuses_a_reason_past_the_cap_naming_it(client, reviewer, held_refund):
    client.force_login(reviewer)
    response = client.get(reverse("escalations:detail", args=[held_refund.pk]))
    page = response.content.decode()
    seen = response.context["pane"].held_calls[0].call.action_hash
    assert "At most 2 000 characters." in page
    fragment = client.post(
        reverse("escalations:decide", args=[held_refund.pk]),
        {"decision": "reject", "reason": TOO_LONG, "risk_0": "irreversible"},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert "reason: at most 2,000 characters, got 300,000; shorten it" in fragment
    reason_field = fragment[fragment.index('id="reason"') :].split(">")[0]
    assert 'aria-invalid="true"' in reason_field
    assert TOO_LONG in fragment  # what was typed comes back, nothing lost
    assert not Verdict.objects.exists()

    # At the cap it is recorded.
    fragment = client.post(
        reverse("escalations:decide", args=[held_refund.pk]),
        {"decision": "reject", "reason": "y" * 2000, "risk_0": "irreversible", "seen_0": seen},
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert "Not recorded" not in fragment, fragment[fragment.find("Not recorded") :][:500]
    assert len(Verdict.objects.get().reason) == 2000


def test_the_api_refuses_a_reason_past_the_cap_under_its_field(client, reviewer, held_refund):
    response = client.post(
        f"/api/escalations/{held_refund.pk}/resolve/",
        {"decision": "reject", "reason": "z" * 2001},
        content_type="application/json",
        headers=bearer(reviewer),
    )
    assert response.status_code == 400
    assert list(response.json()) == ["reason"]
    assert "2000" in response.json()["reason"][0]
    assert not Verdict.objects.exists()


def test_the_service_refuses_it_whoever_calls(reviewer, held_refund):
    from escalations.errors import EscalationError
    from escalations.verdicts import escalation_resolve

    with pytest.raises(EscalationError) as refused:
        escalation_resolve(
            escalation_id=held_refund.pk, reviewer=reviewer, decision="reject", reason=TOO_LONG
        )
    assert refused.value.problems == ["reason: at most 2,000 characters, got 300,000; shorten it"]
