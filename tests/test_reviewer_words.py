"""The reviewers' queue and decision pane say the log's codes in the run page's words: sources,
bands, outcomes, risk classes and stored summaries (older ones begin with a code, and stay
stored as written); the code stays beside the words, muted, only where a reviewer matches it
(guidance, the examples' export); untrusted text in a worded summary is still escaped."""

import re

import pytest
from django.urls import reverse

from escalations.models import Escalation, EscalationKind, ReviewGuidance
from escalations.presentation import probability_bar
from escalations.verdicts import escalation_resolve
from tests.factories import make_decision, make_escalation, make_run, make_tool_call, make_turn
from tests.runs_helpers import drive, start
from tests.test_escalation_queue_page import queued

pytestmark = pytest.mark.django_db

PAYLOAD = '<script>alert(1)</script><img src=x onerror="alert(2)">'
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def page_of(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def bar_sources(page: str) -> list[str]:
    return re.findall(r'<span class="pbar-source">(.*?)</span>', page)


# ---- the queue --------------------------------------------------------------------------------


def test_a_queue_row_names_its_conditions_in_words_not_codes(client, reviewer):
    escalation = queued(
        kind=EscalationKind.UNCERTAIN, source="goal_reached", value=0.8, t_star=0.8, delta=0.05
    )
    reason = dict(escalation.reason)
    reason["triggered"] = [
        {**reason["triggered"][0], "source": source} for source in ("integrity", "goal_reached")
    ]
    Escalation.objects.filter(pk=escalation.pk).update(reason=reason)

    page = page_of(client, reviewer, "/escalations/")

    assert bar_sources(page) == ["Injected instructions", "Goal reached"]
    assert 'aria-label="p 0.80 against t* 0.80 ± 0.05, in the uncertain band"' in page


def test_a_queue_row_reads_an_older_coded_summary_in_words_and_stores_it_unchanged(
    client, reviewer
):
    stored = "gate: call 0 issue_refund: irreversible (declared irreversible)"
    escalation = queued(summary=stored)

    page = page_of(client, reviewer, "/escalations/")

    assert (
        '<p class="queue-summary"><bdi>Gate: call 0 issue_refund: irreversible '
        "(declared irreversible)</bdi></p>"
    ) in page
    assert "gate: call 0" not in page
    escalation.refresh_from_db()
    assert escalation.summary == stored


def test_the_queue_condition_filter_offers_words_and_sends_codes(client, reviewer):
    queued()

    page = page_of(client, reviewer, "/escalations/?condition=integrity")

    assert '<option value="integrity" selected>Injected instructions</option>' in page
    assert '<option value="review_loop">Coder ⇄ reviewer</option>' in page
    assert '<option value="goal_reached">Goal reached</option>' in page
    assert ">goal_reached</option>" not in page


def test_a_worded_summary_in_the_queue_still_escapes_untrusted_text(client, reviewer):
    queued(summary=f"integrity: {PAYLOAD}")

    page = page_of(client, reviewer, "/escalations/")

    assert f"<bdi>Injected instructions: {ESCAPED}" in page
    assert "<script>alert" not in page
    assert "<img src=x" not in page


def test_a_bar_keeps_words_the_run_page_already_gave_it():
    # The run page hands over sources it has worded; they are not worded twice.
    assert probability_bar({"source": "Coder ⇄ reviewer", "band": "fired"}).words == (
        "Coder ⇄ reviewer"
    )
    assert probability_bar({"source": "wall_time_budget", "band": "fired"}).words == "Wall time"
    assert probability_bar({"source": "integrity", "band": "fired"}).source == "integrity"


# ---- the decision pane ------------------------------------------------------------------------


def test_the_pane_says_why_in_words_sources_bands_outcomes_and_call_statuses(client, reviewer):
    escalation = drive(start("guardian_timeout")).escalations.get()

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert bar_sources(page)[:2] == ["Injected instructions", "Infeasible"]
    assert '<span class="tag">no usable answer</span> <bdi>malformed answer (' in page
    assert '<span class="tag">malformed</span>' not in page
    # Recent turns: the outcome, each reason's source and each call's status in words.
    assert '<span class="outcome outcome-escalate">Escalate</span>' in page
    assert '<li dir="auto">Injected instructions: malformed answer (' in page
    assert "<code>read_order</code> done" in page
    # The questions answered in the guardian's place are named as the bars name them.
    assert '<legend><span class="tag">Goal reached</span>' in page
    assert '<span class="tag">goal_reached</span>' not in page


def test_the_pane_of_a_held_step_says_risk_classes_and_statuses_in_words(client, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert '<span class="risk risk-irreversible">Irreversible</span>' in page
    assert '<span class="risk risk-irreversible">irreversible</span>' not in page
    assert "<code>issue_refund</code> held for a reviewer" in page
    assert bar_sources(page) == ["Gate"]
    assert '<li dir="auto">Gate: call 0 issue_refund' in page


def test_the_pane_reads_an_older_coded_review_summary_in_today_s_words(client, reviewer):
    run = make_run(goal="Write slugify")
    turn = make_turn(run=run, proposal={"message": "", "calls": []})
    stored = "Coder/reviewer loop: round_cap after 2 rounds: Not collapsed.; Dashes remain"
    escalation = make_escalation(
        turn=turn,
        kind=EscalationKind.REVIEW_LOOP,
        summary=stored,
        reason={
            "end_reason": "round_cap",
            "rounds": 2,
            "last_reasons": ["Not collapsed.", "Dashes remain"],
            "detail": "no approval after 2 round(s)",
            "last_code": "def slugify(text): ...",
        },
    )

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert (
        '<p dir="auto">Coder ⇄ reviewer: round cap reached after 2 rounds. '
        "Last reasons: Not collapsed; Dashes remain</p>"
    ) in page
    assert "The loop ended after 2 rounds: round cap reached." in page
    assert "round_cap" not in page
    escalation.refresh_from_db()
    assert escalation.summary == stored


def test_a_worded_summary_on_the_pane_still_escapes_untrusted_text(client, reviewer):
    run = make_run(goal="Answer the customer")
    turn = make_turn(run=run, proposal={"message": "", "calls": []})
    make_decision(turn=turn, reasons=[{"band": "fired", "detail": PAYLOAD, "source": "integrity"}])
    make_tool_call(turn=turn, result="fine", status="done")
    escalation = make_escalation(
        turn=turn,
        kind=EscalationKind.INTEGRITY,
        summary=f"integrity: {PAYLOAD}",
        reason={"triggered": [{"source": "integrity", "band": "fired", "detail": PAYLOAD}]},
    )

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert f'<p dir="auto">Injected instructions: {ESCAPED}' in page
    assert f'<li dir="auto">Injected instructions: {ESCAPED}' in page
    assert "<script>alert" not in page
    assert "<img src=x" not in page


def test_guidance_names_its_condition_in_words_with_the_code_beside_it(client, reviewer):
    ReviewGuidance.objects.create(condition="integrity", text="Check who wrote the note.")
    escalation = drive(start("injected_instruction")).escalations.get()

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert '<dt>Injected instructions <code class="muted">integrity</code></dt>' in page


def test_a_decided_risk_answer_reads_as_the_risk_choices_say_it(client, reviewer):
    run = make_run(goal="Tidy the orders")
    turn = make_turn(run=run, proposal={"message": "", "calls": []})
    make_decision(
        turn=turn,
        outcome="escalate",
        reasons=[{"source": "risk", "band": "uncertain", "detail": "p in the band"}],
    )
    escalation = make_escalation(
        turn=turn,
        kind=EscalationKind.UNCERTAIN,
        summary="Risk: p in the band",
        reason={"triggered": [{"source": "risk", "band": "uncertain", "detail": "p in the band"}]},
    )
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="answer",
        answer={"risk": "reversible_write"},
    )

    page = page_of(client, reviewer, f"/escalations/{escalation.pk}/")

    assert re.search(r"\(Risk\)</span></dt><dd>Reversible write</dd>", page)


# ---- the labelled examples' filter ------------------------------------------------------------


def test_the_examples_condition_filter_names_words_and_the_export_s_code(client, reviewer):
    page = page_of(client, reviewer, "/escalations/examples/")

    assert '<option value="integrity">Injected instructions (integrity)</option>' in page


def test_the_admins_guidance_list_names_conditions_in_words_with_the_code(client, admin):
    ReviewGuidance.objects.create(condition="goal_reached", text="Check every criterion.")

    page = page_of(client, admin, reverse("guidance:list"))

    assert 'Goal reached <code class="muted">goal_reached</code>' in page
