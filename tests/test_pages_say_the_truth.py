"""What an auditor, a reviewer and an admin met (issue 22, item 5): a method an endpoint does
not have is a 405, not a 403; an external run's page says who drives it; the probe form is
POSTed, so a long goal fits; answers read in the form's order; the guidance form names the
tools external runs defined."""

import pytest
from django.urls import reverse
from django.utils import timezone

from escalations.models import (
    EscalationKind,
    EscalationStatus,
    ReviewGuidance,
    Verdict,
)
from tests.factories import make_escalation, make_run, make_turn
from tests.runs_helpers import drive, start
from tests.test_api_endpoints import bearer

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("who", ["integrator", "admin", "auditor", "reviewer"])
def test_posting_to_the_runs_list_is_405_naming_where_runs_start(client, request, who):
    user = request.getfixturevalue(who)
    response = client.post("/api/runs/", {}, content_type="application/json", headers=bearer(user))
    assert response.status_code == 405
    assert response["Allow"].startswith("GET")
    assert "/api/runs/start/" in response.json()["detail"][0]


def test_a_method_an_endpoint_has_is_still_refused_to_a_role_without_it(client, integrator):
    assert client.get("/api/runs/", headers=bearer(integrator)).status_code == 403
    assert client.delete("/api/escalations/", headers=bearer(integrator)).status_code == 405


def test_an_external_runs_page_says_its_agent_loop_drives_it_through_the_api(client, auditor):
    run = make_run(actor="external", status="running", guardian="local")
    pending = make_run(actor="external", guardian="local")
    client.force_login(auditor)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "A worker advances it" not in page
    assert "Its agent loop runs elsewhere and drives it through the API" in page
    waiting = client.get(reverse("runs:detail", args=[pending.pk])).content.decode()
    assert "A worker has yet to take its first turn" not in waiting
    assert "has yet to send its first step" in waiting


def test_the_probe_form_is_posted_so_a_long_goal_fits(client, auditor):
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    client.force_login(auditor)
    url = reverse("runs:turn_probe", args=[run.pk, turn.index])
    form = client.get(url).content.decode()
    assert '<form method="post" class="probe-form">' in form
    goal = "Refund order ord_1. " * 1000  # 20 000 characters: no URL carries that
    response = client.post(url, {"probe": "1", "goal": goal})
    assert response.status_code == 200
    body = response.content.decode()
    assert "What would move" in body or "Not available" in body
    assert goal.strip() in body  # the goal typed comes back in its field


def test_answers_read_in_the_order_the_form_asked_them(client, reviewer, auditor):
    turn = make_turn()
    triggered = [
        {"source": "integrity", "band": "uncertain", "value": 0.5, "outcome": "escalate"},
        {"source": "drift", "band": "uncertain", "value": 0.5, "outcome": "escalate"},
    ]
    escalation = make_escalation(
        turn=turn,
        kind=EscalationKind.UNCERTAIN,
        reason={"triggered": triggered},
        status=EscalationStatus.ANSWERED,
        resolved_at=timezone.now(),
    )
    Verdict.objects.create(
        escalation=escalation,
        decision="answer",
        answer={"integrity": False, "drift": 3},
        reviewer=reviewer,
    )
    client.force_login(reviewer)
    response = client.get(reverse("escalations:detail", args=[escalation.pk]))
    asked = [question.condition for question in response.context["pane"].questions]
    assert asked == ["integrity", "drift"]
    assert [condition for condition, _, _ in response.context["verdict_answers"]] == asked

    client.force_login(auditor)
    page = client.get(reverse("runs:detail", args=[turn.run_id])).content.decode()
    said = page.split('class="tl-verdict-answers"')[1].split("</ul>")[0]
    assert said.index("Injected instructions") < said.index("Drift")


def test_the_guidance_form_offers_the_tools_external_runs_defined(client, admin):
    make_run(
        actor="external",
        config={"tools": [{"name": "crm_lookup", "description": "Look a customer up"}]},
    )
    client.force_login(admin)
    page = client.get(reverse("guidance:list")).content.decode()
    assert '<option value="crm_lookup">crm_lookup</option>' in page
    response = client.post(
        reverse("guidance:list"), {"condition": "", "tool": "crm_lookup", "text": "Check it."}
    )
    assert response.status_code in (200, 302)
    assert ReviewGuidance.objects.filter(tool="crm_lookup").exists()
